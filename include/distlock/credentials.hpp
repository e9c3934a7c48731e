// Credentials and CredentialsProvider: whom a new connection authenticates
// as, when that changes while the program runs (a cloud's short-lived IAM
// tokens, a password a secrets manager rotates).
//
// A fixed password in the options cannot follow a rotation, and a pooled
// connection outlives the token that opened it. A connection already open
// stays authenticated as it was, so set max_connection_age too where the
// server ends sessions whose token expired. A WRONGPASS is retried once with
// a fresh answer (detail/wire/authenticate.hpp); no message shows an answer.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace distlock {

/// What a CredentialsProvider answers.
struct Credentials {
  /// The ACL user; empty: the options' username (`AUTH <password>` when
  /// that is empty too).
  std::string username;
  /// The password or token. Must not be empty.
  std::string password;
};

/// Set on ConnectionOptions::credentials, asked for Credentials on every new
/// connection (pooled, the Notifier's, a Redlock master's): any callable
/// returning Credentials, or a std::string (a password or token, for the
/// options' username). Copies share one callable, so a provider that keeps
/// state (a cached token) keeps it across every copy of the options.
///
/// It is called from several threads at once (borrowers connecting, the
/// notifier thread, the Watchdog's renewals): it must be thread-safe, and
/// should answer quickly (a connect waits for it; cache a token rather than
/// fetch one per call). Whatever it throws fails that connection with a
/// ConnectionError (Errc::connect_failed) naming the endpoint, the
/// exception nested (std::rethrow_if_nested gets it back).
class CredentialsProvider {
 public:
  CredentialsProvider() = default;
  /// No provider, as the default: `credentials = nullptr` unsets one.
  CredentialsProvider(std::nullptr_t) noexcept {}

  /// Keeps `provider`, a callable answering Credentials, or a std::string:
  /// the password (or token) for the options' username.
  template <class F, class Result = std::invoke_result_t<F&>,
            class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, CredentialsProvider> &&
                                     (std::is_convertible_v<Result, Credentials> ||
                                      std::is_convertible_v<Result, std::string>)>>
  CredentialsProvider(F provider)
      : ask_(std::make_shared<const std::function<Credentials()>>(
            [provider = std::move(provider)]() mutable -> Credentials {
              if constexpr (std::is_convertible_v<Result, Credentials>) {
                return provider();
              } else {
                return Credentials{{}, std::string(provider())};
              }
            })) {}

  /// True when a provider is set.
  explicit operator bool() const noexcept { return ask_ != nullptr; }

  /// Asks it (a provider must be set).
  Credentials operator()() const { return (*ask_)(); }

 private:
  std::shared_ptr<const std::function<Credentials()>> ask_;
};

}  // namespace distlock
