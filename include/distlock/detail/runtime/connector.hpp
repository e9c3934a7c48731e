// Connector: one thread, started on first use, that runs the blocking work
// of async locks in the order it is posted, so that no event-loop thread
// waits on a server: connecting (TCP, TLS, AUTH, with credential callbacks
// that are user code), and giving holds back (a release waits for a
// renewal in flight, then for its reply). A job reports back by posting to
// whoever asked; it must not throw.
//
// The destructor runs every job already posted, then joins: a release
// posted by a guard's destructor is sent even as the backend goes away.
// A job may hold the last reference to what owns the Connector, so the
// destructor may run on the connector's own thread: the thread then
// finishes the queue by itself (its state is shared, not the object's).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "distlock/detail/base/thread_annotations.hpp"

namespace distlock::detail {

class Connector {
 public:
  Connector() : thread_([state = state_] { run(*state); }) {}

  ~Connector() {
    {
      MutexLock guard(state_->mutex);
      state_->stopping = true;
    }
    state_->ready.notify_one();
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }

  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  void post(std::function<void()> job) {
    {
      MutexLock guard(state_->mutex);
      state_->jobs.push_back(std::move(job));
    }
    state_->ready.notify_one();
  }

 private:
  struct State {
    Mutex mutex;
    std::condition_variable ready;
    std::deque<std::function<void()>> jobs DISTLOCK_GUARDED_BY(mutex);
    bool stopping DISTLOCK_GUARDED_BY(mutex) = false;
  };

  static void run(State& state) {
    for (;;) {
      std::function<void()> job;
      {
        MutexLock guard(state.mutex);
        guard.wait(state.ready, [&]() DISTLOCK_REQUIRES(state.mutex) {
          return !state.jobs.empty() || state.stopping;
        });
        if (state.jobs.empty()) return;  // stopping, and nothing left to run
        job = std::move(state.jobs.front());
        state.jobs.pop_front();
      }
      job();
    }
  }

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;  // last: starts once the state is made
};

}  // namespace distlock::detail
