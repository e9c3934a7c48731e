// Gate: whether an Asio execution context is still there to post to,
// for the work of async locks that runs off it (a connect, a release on
// the connector thread) and posts back when it ends.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/execution.hpp>

#include <mutex>
#include <optional>
#include <utility>

namespace distlock::detail {

// Whether a context is still there to post to, and the work it is kept
// running for off its threads (a release on the connector thread): counted
// here, by an executor of the gate's own, so that nothing of the context
// is touched once it is gone.
struct Gate {
  std::mutex mutex;
  bool open = true;
  unsigned away = 0;                          // jobs off the context
  std::optional<asio::any_io_executor> kept;  // tracked while any are

  // Runs `post` (which posts to the context) unless the context shut
  // down; false then.
  template <class Post>
  bool run_if_open(Post&& post) {
    std::lock_guard<std::mutex> guard(mutex);
    if (!open) return false;
    std::forward<Post>(post)();
    return true;
  }
  // A job leaves the context (`executor` of it), and comes back; false
  // (nothing counted) once the context shut down.
  bool leave(const asio::any_io_executor& executor) {
    std::lock_guard<std::mutex> guard(mutex);
    if (!open) return false;
    if (away++ == 0)
      kept.emplace(asio::prefer(executor, asio::execution::outstanding_work.tracked));
    return true;
  }
  void come_back() noexcept {
    std::lock_guard<std::mutex> guard(mutex);
    if (open && away > 0 && --away == 0) kept.reset();
  }
  // The context shuts down (while it is still there).
  void close() noexcept {
    std::lock_guard<std::mutex> guard(mutex);
    open = false;
    kept.reset();
  }
};

}  // namespace distlock::detail
