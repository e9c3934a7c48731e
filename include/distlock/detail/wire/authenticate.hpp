// The AUTH of a new connection (Connection's constructor), with the options'
// password or what their credentials provider answers (credentials.hpp).
//
// A provider's answer may be stale the moment it is used: a token it cached
// just expired, or a rotation removed the password between the answer and
// the AUTH. A WRONGPASS to an answer is therefore asked again and sent
// again once, on the same connection (the server keeps it open after a
// failed AUTH); a second WRONGPASS is the caller's. A provider's exception
// becomes a ConnectionError, never loose in a notifier thread.
#pragma once

#include <exception>
#include <string>

#include "distlock/connection_options.hpp"
#include "distlock/credentials.hpp"
#include "distlock/error.hpp"

namespace distlock::detail {

/// The provider's answer, its username filled in from the options when it
/// gave none. Throws ConnectionError (the provider's exception nested).
inline Credentials ask_credentials(const ConnectionOptions& options) {
  const auto failed = [&](const std::string& why) {
    return ConnectionError(Errc::connect_failed,
                           options.endpoint() + ": the credentials provider " + why);
  };
  Credentials answer;
  try {
    answer = options.credentials();
  } catch (const std::exception& error) {
    std::throw_with_nested(failed(std::string("threw: ") + error.what()));
  } catch (...) {
    std::throw_with_nested(failed("threw an exception not derived from std::exception"));
  }
  if (answer.password.empty()) throw failed("answered no password");
  if (answer.username.empty()) answer.username = options.username;
  return answer;
}

/// Authenticates a new connection: `auth(username, password)` sends AUTH
/// (legacy AUTH <password> for an empty username) and throws ServerError on
/// an error reply. Without a provider, the options' password (none: no AUTH).
template <class Auth>
void authenticate(const ConnectionOptions& options, Auth&& auth) {
  if (!options.credentials) {
    if (!options.password.empty()) auth(options.username, options.password);
    return;
  }
  try {
    const Credentials answer = ask_credentials(options);
    auth(answer.username, answer.password);
    return;
  } catch (const ServerError& error) {
    if (error.kind() != ServerErrorKind::wrongpass) throw;
  }
  // Stale (rotated or expired since it was answered): once more, afresh.
  const Credentials fresh = ask_credentials(options);
  try {
    auth(fresh.username, fresh.password);
  } catch (const ServerError& error) {
    if (error.kind() != ServerErrorKind::wrongpass) throw;
    throw ServerError(std::string(error.what()) + " (" + options.endpoint() +
                      ": the credentials provider was asked twice; the server refused both "
                      "answers)");
  }
}

}  // namespace distlock::detail
