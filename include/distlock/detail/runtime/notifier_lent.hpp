// The lone waiter's side of Notifier (notifier.hpp): while a thread is the
// only waiter of its Notifier, its sleep reads the subscriber connection
// itself instead of waiting for the notifier thread to read it and wake it.
// On one shared core every thread hop on the path from the release to the
// next attempt is a context switch; this takes the notifier thread's off it
// (its armed attempt, if any, is written by the same handle() either way).
//
// The connection is lent, never shared: under the mutex, the notifier
// thread touches it only while busy_ and not lent_, the waiter only while
// lent_. The waiter may take it only while the notifier thread is parked in
// poll(); that thread then watches its wake-up alone and never waits for the
// waiter. Whoever needs the thread to serve the connection again (a second
// waiter, a new channel, a retarget, the destructor) calls it back: the
// waiter gives it back at once and goes on waiting as any other waiter
// does. A sleep that simply ends gives it back without waking the thread
// (the next lone sleep takes it again); a waiter that must rely on the
// thread wakes it (wait_on). A read that fails gives it back marked broken,
// and the thread drops it and reconnects, waking every waiter as after any
// reconnect. Included at the end of notifier.hpp.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>

#include "distlock/notifier.hpp"

namespace distlock {

inline bool Notifier::wait_on(Channel& channel, std::uint64_t seen, clock::time_point until) {
  detail::MutexLock lock(mutex_);
  // The thread busy for a moment (a reply to read, a subscription to send)
  // is no reason to leave the connection to it for the whole sleep.
  lock.wait_until(parked_, until, [&]() DISTLOCK_REQUIRES(mutex_) {
    return channel.generation != seen || !busy_ || !can_lend(channel, /*busy_or_not=*/true);
  });
  if (channel.generation == seen && can_lend(channel)) {
    lent_ = true;
    ++lends_;
    Connection& connection = *connection_;
    // A thread still polling the connection is told to stop, now rather
    // than when the release it would then ignore arrives.
    if (watching_) poke();
    lock.unlock();
    const std::optional<bool> woken = wait_lent(channel, seen, until, connection);
    lock.lock();
    if (woken) return *woken;
    // Called back (or the connection broke): on to wait as the others do.
  }
  // The thread may have stopped polling the connection while it was lent
  // (and may have taken this wake-up while a sleep or a catch_up() of
  // another waiter still had it: that one pokes it again when it gives it back).
  if (!watching_) {
    poke();
    call_back();
  }
  return lock.wait_until(channel.changed, until, [&] { return channel.generation != seen; });
}

// poll()'s timeout until `until`, rounded up; at most an hour at a time (a
// sleep without a deadline ends at clock::time_point::max()).
inline int Notifier::poll_timeout(clock::time_point until) {
  const clock::time_point now = clock::now();
  if (until <= now) return 0;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(
      std::min<clock::duration>(until - now, std::chrono::hours(1)));
  return static_cast<int>(left.count());
}

// Only one waiter, on a confirmed channel of a live connection that the
// thread is not reading or writing now, and nothing the thread must send.
// connection_ is looked at only while the thread is parked: while busy_ it
// may be dropping or making it (up_ says whether one is wanted meanwhile).
inline bool Notifier::can_lend(const Channel& channel, bool busy_or_not) const {
  return (busy_or_not || !busy_) && !lent_ && up_ && !stopping_ && !retarget_ && !lent_failed_ &&
         waiters_ == 1 && channel.waiters == 1 && channel.confirmed && !channel.moved &&
         (busy_ || connection_ != nullptr);
}

inline void Notifier::call_back() {
  if (!lent_ || called_back_) return;
  called_back_ = true;
  detail::signal_eventfd(lent_wake_fd_);
}

// The connection is the thread's again. If it broke, or the thread called
// it back, the thread is waiting for it (or must drop it): wake it.
inline void Notifier::take_back_lent(bool broke) {
  lent_ = false;
  if (!broke && !called_back_) return;
  lent_failed_ = lent_failed_ || broke;
  called_back_ = false;
  poke();
}

// Sleeps as wait_on() does, reading the lent connection meanwhile. Returns
// as wait_on() would, or nullopt once the connection is given back early
// (called back, or broken) with the sleep not over.
inline std::optional<bool> Notifier::wait_lent(Channel& channel, std::uint64_t seen,
                                               clock::time_point until, Connection& connection) {
  for (;;) {
    bool failed = false;
    pollfd fds[2] = {{connection.fd(), POLLIN, 0}, {lent_wake_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, poll_timeout(until));
    if (ready < 0 && errno != EINTR) failed = true;
    if (ready > 0 && fds[1].revents != 0) detail::drain_eventfd(lent_wake_fd_);
    if (ready > 0 && fds[0].revents != 0 && !read_lent(connection)) failed = true;
    detail::MutexLock lock(mutex_);
    const bool woken = channel.generation != seen;
    const bool over = woken || clock::now() >= until;
    if (!over && !failed && !called_back_) continue;
    take_back_lent(failed);
    if (over) return woken;
    return std::nullopt;
  }
}

// Reads what has arrived and handles it as the thread would; false if the
// connection broke.
inline bool Notifier::read_lent(Connection& connection) {
  try {
    connection.read_available();
    while (std::optional<Reply> reply = connection.next_buffered_reply()) handle(*reply);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// While the thread does not watch the connection (a waiter's sleep gave it
// back without waking it), messages wait in the socket unread. A waiter
// reads them before it reads its channel's generation: a release announced
// before that look must not count as one after it (the waiter's own last
// release, say, which would wake its next sleep for nothing).
inline void Notifier::catch_up() {
  detail::MutexLock lock(mutex_);
  if (watching_ || busy_ || lent_ || !up_ || stopping_ || lent_failed_ || !connection_) return;
  Connection& connection = *connection_;
  pollfd ready{connection.fd(), POLLIN, 0};
  if (::poll(&ready, 1, 0) <= 0) return;  // nothing arrived: no need to borrow it
  lent_ = true;
  lock.unlock();
  const bool read = read_lent(connection);
  lock.lock();
  take_back_lent(!read);
}

// The notifier thread while the connection is lent: it watches only its
// wake-up, and looks again at least every `linger` (abandoned channels).
inline void Notifier::wait_unlent(clock::time_point due) {
  pollfd wake{wake_fd_, POLLIN, 0};
  ::poll(&wake, 1, poll_timeout(due));
  detail::drain_eventfd(wake_fd_);
}

}  // namespace distlock
