// Tests for the acquire steps (detail/lifecycle/acquire_steps.hpp) alone:
// what each step names next, and with which deadline, for the answers a
// driver hands back. The steps decide and send nothing, so a scripted
// Protocol stands in for the server here: pure logic, and the contract an
// event-loop driver relies on. The same steps against real servers are
// every lock type's tests. Where a step reads a release channel, the
// subscription is real: a Notifier on a real server.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "distlock/acquire_policy.hpp"
#include "distlock/detail/lifecycle/acquire_steps.hpp"
#include "distlock/detail/runtime/notifier.hpp"
#include "support/eventually.hpp"
#include "support/fixture.hpp"

namespace distlock::detail {
namespace {

using namespace std::chrono_literals;
using Clock = SteadyClock;

// A Protocol whose server steps the tests never reach: a driver would send
// them, and here the test is the driver. What a given-back grant sends is
// counted.
class ScriptedProtocol : public OneKindProtocol {
 public:
  static constexpr bool holds_at_least(Kind) noexcept { return true; }

  std::string key() const { return "scripted"; }
  void check_process() const {}
  bool forked() const noexcept { return false; }
  std::string id_for(Kind) const { return "token"; }
  static std::string describe(Kind) { return "lock"; }
  const SharedEventHook& events() const noexcept { return events_; }
  Watchdog& watchdog() { return *watchdog_; }
  std::shared_ptr<LeaseState> watched(Kind, const std::string& id, Clock::time_point sent,
                                      const LockOptions& options) const {
    return std::make_shared<LeaseState>(key(), id, options.ttl(), sent, options.on_lost(), nullptr);
  }
  TokenCheck release(Kind, const std::string&) {
    ++*released_;
    return TokenCheck::done;
  }
  TokenCheck extend(Kind, const std::string&, std::chrono::milliseconds) {
    return TokenCheck::done;
  }
  void wake() {}
  bool listens_elsewhere(const std::string&) const noexcept { return false; }

  int released() const { return *released_; }

 private:
  SharedEventHook events_;
  std::shared_ptr<Watchdog> watchdog_ = std::make_shared<Watchdog>();
  std::shared_ptr<int> released_ = std::make_shared<int>(0);
};

using Base = AcquireSteps<ScriptedProtocol>;

// The steps, opened to the test, which drives them as Lifecycle::acquire
// does.
class Steps : public Base {
 public:
  explicit Steps(LockOptions options = LockOptions().auto_renew(false),
                 AcquirePolicy policy = AcquirePolicy())
      : Base(ScriptedProtocol(), std::move(options), std::move(policy), Cancellation()) {}

  using Base::attempted;
  using Base::holder_read;
  using Base::Next;
  using Base::start;
  using Base::Step;
  using Base::subscribed;
  using Base::Waiter;
  using Base::woken;

  Waiter waiter(Clock::time_point deadline, bool wait = true) {
    return Waiter(ScriptedProtocol::exclusive, deadline, wait, cancellation_.generation());
  }
  void cancel() { cancellation_.cancel(); }
  bool owns() const { return Base::owns(ScriptedProtocol::exclusive); }
  int released() const { return protocol_.released(); }
};

Attempt granted() {
  Attempt attempt;
  attempt.acquired = true;
  return attempt;
}

Attempt refused(HolderLease holder = {}) {
  Attempt attempt;
  attempt.holder = holder;
  return attempt;
}

// The end of the call, with `outcome`.
void expect_done(const Steps::Next& next, Outcome outcome) {
  EXPECT_EQ(next.step, Steps::Step::done);
  EXPECT_EQ(next.outcome, outcome);
}

// The sleep's end: never past the deadline, nor past the holder's lease.
void expect_sleep_within(const Steps::Next& next, Clock::time_point latest) {
  EXPECT_EQ(next.step, Steps::Step::sleep);
  EXPECT_LE(next.by, latest);
}

TEST(AcquireStepsTest, AFreeLockIsOneAttemptByTheDeadlineThenHeld) {
  Steps steps;
  const Clock::time_point deadline = Clock::now() + 10s;
  Steps::Waiter waiter = steps.waiter(deadline);
  Steps::Next next = steps.start(waiter);
  ASSERT_EQ(next.step, Steps::Step::attempt);
  EXPECT_EQ(next.by, deadline);
  next = steps.attempted(waiter, granted());
  expect_done(next, Outcome::acquired);
  EXPECT_TRUE(steps.owns());
}

TEST(AcquireStepsTest, ATryLockRefusedWithoutAReasonLooksAtTheKeyOnceThenIsBusy) {
  Steps steps;
  Steps::Waiter waiter = steps.waiter(Clock::now(), /*wait=*/false);
  Steps::Next next = steps.start(waiter);
  ASSERT_EQ(next.step, Steps::Step::attempt);
  EXPECT_EQ(next.by, no_deadline);  // a try_lock() waits one command timeout
  next = steps.attempted(waiter, refused());
  ASSERT_EQ(next.step, Steps::Step::read_holder);  // the key's type is checked
  EXPECT_EQ(next.by, no_deadline);
  next = steps.holder_read(waiter, HolderLease::from_pttl(5000));
  expect_done(next, Outcome::timed_out);  // busy: Redis answered
  EXPECT_FALSE(steps.owns());
}

// One attempt cut at a deadline ahead (a StripedMutex's wait for any
// stripe sends these): refused, with a look at the key that comes back
// late on a loaded host, it is busy. Redis answered both steps; only the
// attempt's answer counted once, so a look slower than the probe floor
// read as an outage, and a wait for any stripe threw TimeoutError.
TEST(AcquireStepsTest, AnAttemptRefusedAheadOfItsCutIsBusyHoweverSlowTheLookAtTheKey) {
  Steps steps;
  const Clock::time_point cut = Clock::now() + 10s;
  Steps::Waiter waiter = steps.waiter(cut, /*wait=*/false);
  ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
  Steps::Next next = steps.attempted(waiter, refused());
  ASSERT_EQ(next.step, Steps::Step::read_holder);
  EXPECT_EQ(next.by, cut);
  std::this_thread::sleep_for(probe_floor + 20ms);  // the look, slow
  next = steps.holder_read(waiter, HolderLease::from_pttl(5000));
  expect_done(next, Outcome::timed_out);
}

TEST(AcquireStepsTest, AFirstStepTheDeadlineCutShortEndsTheCallUnanswered) {
  Steps steps;
  Steps::Waiter waiter = steps.waiter(Clock::now() + 10s);
  ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
  const Steps::Next next = steps.attempted(waiter, std::nullopt);
  expect_done(next, Outcome::unanswered);  // nothing heard: an outage
}

TEST(AcquireStepsTest, ARefusalWithAKnownHolderSubscribesThenSleepsNoLongerThanItsLease) {
  Steps steps;
  const Clock::time_point deadline = Clock::now() + 10s;
  Steps::Waiter waiter = steps.waiter(deadline);
  ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
  Steps::Next next = steps.attempted(waiter, refused(HolderLease::from_pttl(300)));
  ASSERT_EQ(next.step, Steps::Step::subscribe);
  EXPECT_EQ(next.by, deadline);
  // No subscription to be had: the waiter polls, and the lease it learned
  // bounds the sleep without another read.
  next = steps.subscribed(waiter, std::nullopt);
  expect_sleep_within(next, Clock::now() + 300ms);
  next = steps.woken(waiter);
  ASSERT_EQ(next.step, Steps::Step::attempt);
  EXPECT_EQ(next.by, deadline);
  // Once asked, the subscription is not asked for again.
  next = steps.attempted(waiter, refused(HolderLease::from_pttl(300)));
  expect_sleep_within(next, Clock::now() + 300ms);
}

TEST(AcquireStepsTest, AnUnknownHolderIsReadBeforeTheSleepAndAReadCutShortEndsTheCall) {
  Steps steps(LockOptions().auto_renew(false).wake_on_release(false));
  const Clock::time_point deadline = Clock::now() + 10s;
  Steps::Waiter waiter = steps.waiter(deadline);
  ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
  Steps::Next next = steps.attempted(waiter, refused());
  ASSERT_EQ(next.step, Steps::Step::read_holder);
  EXPECT_EQ(next.by, deadline);
  next = steps.holder_read(waiter, HolderLease::from_pttl(200));
  expect_sleep_within(next, Clock::now() + 200ms);

  ASSERT_EQ(steps.woken(waiter).step, Steps::Step::attempt);
  ASSERT_EQ(steps.attempted(waiter, refused()).step, Steps::Step::read_holder);
  // The deadline cut the read short: Redis last answered long before the
  // deadline (the attempt, 10 s ahead of it), so this is an outage.
  next = steps.holder_read(waiter, std::nullopt);
  expect_done(next, Outcome::unanswered);
}

TEST(AcquireStepsTest, ALastAttemptAfterWaitingMayRunALastStepPastTheDeadline) {
  Steps steps(LockOptions().auto_renew(false).wake_on_release(false));
  const Clock::time_point deadline = Clock::now() + 20ms;
  Steps::Waiter waiter = steps.waiter(deadline);
  ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
  const Steps::Next sleep = steps.attempted(waiter, refused(HolderLease::from_pttl(60000)));
  expect_sleep_within(sleep, deadline);
  while (Clock::now() < deadline) std::this_thread::yield();  // the driver's sleep
  Steps::Next next = steps.woken(waiter);
  ASSERT_EQ(next.step, Steps::Step::attempt);
  EXPECT_GT(next.by, deadline);
  EXPECT_LE(next.by, Clock::now() + last_step);
  next = steps.attempted(waiter, refused(HolderLease::from_pttl(60000)));
  expect_done(next, Outcome::timed_out);
}

// The busy/outage verdict at a deadline (detail/lifecycle/heard.hpp): a
// fast server's last answer 20 ms before the deadline is busy (a client's
// own delays, a loaded host's, must not read as an outage); one 30 ms
// before it, with nothing since, is an outage; a call never answered is
// one too.
TEST(AcquireStepsTest, AnAnswerWithinTheProbeFloorBeforeTheDeadlineIsBusy) {
  Heard heard;
  heard.answered(Clock::now() - 1ms);  // a 1 ms round trip, answered now
  const Clock::time_point answered = Clock::now();
  EXPECT_EQ(heard.outcome_at(answered + 20ms), Outcome::timed_out);
  EXPECT_EQ(heard.outcome_at(answered + probe_floor - 1ms), Outcome::timed_out);
  EXPECT_EQ(heard.outcome_at(answered + 30ms), Outcome::unanswered);
  EXPECT_EQ(Heard().outcome_at(answered), Outcome::unanswered);
}

TEST(AcquireStepsTest, CancelWaitsEndsASleepingWaiterWithoutAnotherAttempt) {
  Steps steps;
  Steps::Waiter waiter = steps.waiter(Clock::now() + 10s);
  ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
  ASSERT_EQ(steps.attempted(waiter, refused(HolderLease::from_pttl(5000))).step,
            Steps::Step::subscribe);
  ASSERT_EQ(steps.subscribed(waiter, std::nullopt).step, Steps::Step::sleep);
  steps.cancel();
  const Steps::Next next = steps.woken(waiter);
  expect_done(next, Outcome::cancelled);
}

TEST(AcquireStepsTest, AWaiterBehindAHolderOfThisObjectAsksRedisNothing) {
  Steps steps;
  Steps::Waiter holder = steps.waiter(Clock::now() + 10s);
  ASSERT_EQ(steps.start(holder).step, Steps::Step::attempt);
  ASSERT_EQ(steps.attempted(holder, granted()).outcome, Outcome::acquired);
  // Another thread's try_lock() of the same object: no attempt, busy.
  std::optional<Steps::Next> other;
  std::thread([&] {
    Steps::Waiter waiter = steps.waiter(Clock::now(), /*wait=*/false);
    other = steps.start(waiter);
  }).join();
  ASSERT_TRUE(other);
  expect_done(*other, Outcome::timed_out);
}

TEST(AcquireStepsTest, AGrantTooFewReplicasAcknowledgedIsGivenBackAndNeverHeld) {
  Steps steps;
  Steps::Waiter waiter = steps.waiter(Clock::now() + 10s);
  ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
  Attempt short_of_replicas;
  short_of_replicas.not_replicated = true;
  short_of_replicas.deadline_cut = true;
  short_of_replicas.replicas = 0;
  short_of_replicas.replicas_wanted = 1;
  const Steps::Next next = steps.attempted(waiter, short_of_replicas);
  expect_done(next, Outcome::timed_out);
  EXPECT_EQ(steps.released(), 1);
  EXPECT_FALSE(steps.owns());
}

// A waiter asleep on a confirmed subscription, refused, then finding the
// lock released: by a release announced since its attempt, or not (yet).
class AcquireStepsOnAChannel : public testing::RedisClientTest {
 protected:
  // The waiter, refused once after subscribing; its next step is the
  // holder read.
  void refused_after_subscribing(Steps& steps, Steps::Waiter& waiter) {
    ASSERT_EQ(steps.start(waiter).step, Steps::Step::attempt);
    ASSERT_EQ(steps.attempted(waiter, refused(HolderLease::from_pttl(5000))).step,
              Steps::Step::subscribe);
    Notifier::Subscription subscription = client().notifier().subscribe(channel, waiter.deadline);
    ASSERT_TRUE(subscription.active());
    generation = subscription.generation();
    ASSERT_EQ(steps.subscribed(waiter, std::move(subscription)).step, Steps::Step::attempt);
    ASSERT_EQ(steps.attempted(waiter, refused()).step, Steps::Step::read_holder);
  }
  // A release announced on the channel, seen by the waiter's subscription.
  void announce_a_release(const Steps::Waiter& waiter) {
    client().command("PUBLISH", channel, "0");
    ASSERT_TRUE(
        testing::eventually([&] { return waiter.subscription->generation() != generation; }));
  }

  const std::string channel = "steps:released";
  std::uint64_t generation = 0;  // the subscription's, before the attempt
};

// The release went to the waiter whose turn it was (or, had nobody been
// asleep, to this one as it goes to sleep: Subscription::sleep_on): the
// waiter waits for its own turn, at its policy's pace at most. Racing
// the waiter in turn, every waiter between an attempt and its sleep
// would race each release: a herd of all of them under load.
TEST_F(AcquireStepsOnAChannel, AWaiterFindingTheLockFreedByAnAnnouncedReleaseWaitsItsTurn) {
  Steps steps(LockOptions().auto_renew(false), FixedInterval(10s));
  Steps::Waiter waiter = steps.waiter(Clock::now() + 20s);
  refused_after_subscribing(steps, waiter);
  if (HasFatalFailure()) return;
  announce_a_release(waiter);
  if (HasFatalFailure()) return;
  const Steps::Next next = steps.holder_read(waiter, HolderLease::from_pttl(-2));
  EXPECT_EQ(next.step, Steps::Step::sleep);
  EXPECT_GE(next.by, Clock::now() + 9s) << "it raced the waiter whose turn it was";
  EXPECT_LE(next.by, Clock::now() + 10s);
}

// No release announced since its attempt: the key ran out, or the
// announcement is still on its way. The waiter tries again at once.
TEST_F(AcquireStepsOnAChannel, AWaiterFindingTheLockFreedWithNoReleaseAnnouncedTriesAtOnce) {
  Steps steps(LockOptions().auto_renew(false), FixedInterval(10s));
  Steps::Waiter waiter = steps.waiter(Clock::now() + 20s);
  refused_after_subscribing(steps, waiter);
  if (HasFatalFailure()) return;
  const Steps::Next next = steps.holder_read(waiter, HolderLease::from_pttl(-2));
  EXPECT_EQ(next.step, Steps::Step::sleep);
  EXPECT_LE(next.by, Clock::now());
}

}  // namespace
}  // namespace distlock::detail
