// The undo of an attempt whose reply never came (attempt_or_undo, in
// detail/lifecycle/acquire.hpp): each protocol hands it to an UndoWriter,
// which writes it behind the attempt on its own connection, or apart from
// it: a job that owns what it sends, run on a fresh connection by the
// backend's connector thread, so that the caller returns by its deadline
// and the lock may be gone before the job runs.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distlock/connection_options.hpp"
#include "distlock/detail/backend/site.hpp"
#include "distlock/detail/base/args.hpp"
#include "distlock/detail/wire/connection.hpp"

namespace distlock::detail {

/// A job for a fresh connection, owning what it sends: the undo of an
/// attempt, run on the backend's connector thread.
using ApartJob = std::function<void(Connection& fresh)>;

/// Where the undo of one attempt goes (attempt_or_undo decides: behind the
/// attempt on its connection, apart from it, or both). Each protocol hands
/// its undo over as one script over its keys and arguments (views, for the
/// call only), or, a wire without scripts (SimpleMutex's), as a job that
/// can only run apart.
class UndoWriter {
 public:
  virtual void script(const Script& script, Args keys, Args args) = 0;
  virtual void apart(ApartJob job) = 0;

 protected:
  ~UndoWriter() = default;
};

/// Runs `job` on a fresh connection to the server `blocked` talks to, on
/// the backend's connector thread: the undo of an attempt where nothing
/// written behind it can arrive. The caller returns by its deadline
/// meanwhile, and the lock may be gone before the job runs, which waits
/// for the server as a call without a deadline would. Best effort: the
/// lease expires otherwise.
inline void undo_apart(Site& site, const Connection& blocked, ApartJob job) noexcept {
  try {
    ConnectionOptions options = blocked.options();  // the server the attempt went to
    options.connect_timeout = site.options().connect_timeout;
    options.command_timeout = site.options().command_timeout;
    site.connector().post(
        [options = std::move(options), sharded = blocked.sharded_publish(), job = std::move(job)] {
          try {
            Connection fresh(options);
            fresh.set_sharded_publish(sharded);  // a cluster node runs the SPUBLISH twins
            job(fresh);
          } catch (...) {
          }
        });
  } catch (...) {
  }
}

/// The job that runs `script` over copies of `keys` and `args`.
inline ApartJob script_job(const Script& script, Args keys, Args args) {
  std::vector<std::string> words(keys.begin(), keys.end());
  words.insert(words.end(), args.begin(), args.end());
  return [script = &script, key_count = keys.size(), words = std::move(words)](Connection& fresh) {
    const std::vector<std::string_view> views(words.begin(), words.end());
    static_cast<void>(fresh.eval(*script, Args(views.data(), key_count),
                                 Args(views.data() + key_count, views.size() - key_count)));
  };
}

/// The UndoWriter of one attempt on `connection`: a script goes behind the
/// attempt when `behind`, and apart too when `apart_too`; a job always
/// goes apart.
class AttemptUndo final : public UndoWriter {
 public:
  AttemptUndo(Site& site, Connection& connection, bool behind, bool apart_too) noexcept
      : site_(site), connection_(connection), behind_(behind), apart_too_(apart_too) {}

  void script(const Script& script, Args keys, Args args) override {
    if (behind_) connection_.send_eval_behind(script, keys, args);
    if (apart_too_) apart(script_job(script, keys, args));
  }
  void apart(ApartJob job) override { undo_apart(site_, connection_, std::move(job)); }

 private:
  Site& site_;
  Connection& connection_;
  bool behind_;
  bool apart_too_;
};

}  // namespace distlock::detail
