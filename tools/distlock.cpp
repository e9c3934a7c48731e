// distlock: the command-line tool. flock(1) for a fleet of machines.
//
//   distlock run [options] NAME -- CMD [ARGS...]   run CMD while holding NAME
//   distlock status [options] NAME                 who holds NAME, how, for how long
//   distlock release --force --yes [options] NAME  delete NAME whoever holds it
//   distlock wait [options] NAME                   block until NAME is free
//
// It uses only distlock's public API (distlock/distlock.hpp). `status` and
// `release` read the key layouts docs/locks.md documents with plain commands.
//
// Each subcommand lives in its own header: run_command.hpp (run),
// admin_commands.hpp (status, release, wait); where.hpp and exit_status.hpp
// hold what they share.
#include <CLI/CLI.hpp>
#include <distlock/distlock.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include "admin_commands.hpp"
#include "duration.hpp"
#include "exit_status.hpp"
#include "process.hpp"
#include "run_command.hpp"
#include "where.hpp"

namespace distlock::cli {
namespace {

int failure_from(const std::exception_ptr& raised, std::string& message) {
  try {
    std::rethrow_exception(raised);
  } catch (const Failure& failure) {
    message = failure.message;
    return failure.code;
  } catch (const InvalidArgument& error) {
    message = text_of(error);
    return status::usage;
  } catch (const ConnectionError& error) {
    message = "cannot reach Redis: " + text_of(error);
    return status::redis;
  } catch (const TimeoutError& error) {
    // Either a reply missed --command-timeout, or a wait's deadline (--wait)
    // passed with Redis silent; the library's text says which.
    const std::string text = text_of(error);
    const bool deadline = text.find("before the deadline") != std::string::npos;
    message = std::string("Redis did not answer in time") +
              (deadline ? "" : " (--command-timeout)") + ": " + text;
    return status::redis;
  } catch (const NotALockError& error) {
    message = text_of(error);
    return status::not_lock;
  } catch (const ServerError& error) {
    message = "Redis refused: " + text_of(error);
    const std::string reply = text_of(error);
    if (reply.rfind("MOVED ", 0) == 0 || reply.rfind("ASK ", 0) == 0) {
      message = "Redis refused: " + reply.substr(0, reply.find(" (")) +
                ": the name lives on another node of a Redis Cluster; give --cluster (or list "
                "the nodes in --url)";
    }
    return status::redis;
  } catch (const Error& error) {
    // What the options named does not exist there (a master no Sentinel
    // knows) is the caller's to fix; anything else is Redis's answer.
    message = text_of(error);
    return error.code() == Errc::invalid_argument ? status::usage : status::redis;
  } catch (const std::exception& error) {
    message = std::string("internal error: ") + error.what();
    return status::internal;
  }
}

std::string version_text() {
  return "distlock " + std::to_string(DISTLOCK_VERSION_MAJOR) + "." +
         std::to_string(DISTLOCK_VERSION_MINOR) + "." + std::to_string(DISTLOCK_VERSION_PATCH);
}

int main_(int argc, char** argv) {
  // Before the Redis client sets SIGPIPE to ignored and opens sockets.
  Signals signals;
  signals.record_initial();
  InheritedFds fds;
  fds.record();

  CLI::App app{"distlock: Redis locks from the shell; flock(1) for a fleet of machines.",
               "distlock"};
  app.set_version_flag("--version", version_text(), "print the version and exit");
  app.require_subcommand(1);
  app.footer(std::string("Run 'distlock SUBCOMMAND --help' for each one's options.\n\n") +
             exit_status_help);

  RunArgs run_args;
  CLI::App* run_cmd = app.add_subcommand(
      "run",
      "distlock run [OPTIONS] NAME -- CMD [ARGS...]\n\nTake the lock NAME, run CMD with it held, "
      "release it when CMD exits, and exit with CMD's "
      "status. The lease is renewed (every ttl/3) while CMD runs; if it is lost anyway, CMD is "
      "stopped (--on-lost) and distlock exits 76. SIGINT, SIGTERM and SIGHUP sent to distlock "
      "are passed on to CMD. CMD gets DISTLOCK_NAME, DISTLOCK_TOKEN (the first 8 characters of "
      "the lease's token or owner id, as `status` shows it) and, with --fencing, DISTLOCK_FENCE "
      "in its environment (DISTLOCK_TOKEN is the permit's id with --semaphore).");
  add_where_options(*run_cmd, run_args.where);
  run_cmd
      ->add_option("--wait", run_args.wait,
                   std::string("how long to wait for the lock (") + duration_forms +
                       ", or forever); default 0: one attempt, as flock -n")
      ->type_name("DURATION|forever");
  run_cmd
      ->add_option("--conflict-exit-code", run_args.conflict_exit_code,
                   "exit status when the lock stays held by someone else (default 75)")
      ->type_name("N");
  run_cmd->add_option("--ttl", run_args.ttl, "the lease, renewed while CMD runs (default 30s)")
      ->type_name("DURATION");
  run_cmd
      ->add_option("--max-hold", run_args.max_hold,
                   "stop renewing after this long: the lease then runs out and is lost")
      ->type_name("DURATION");
  run_cmd
      ->add_option("--hold-at-least", run_args.hold_at_least,
                   "keep the lock until this long after the acquire even if CMD ends sooner, so "
                   "a run that starts a little late on another machine (cron) is refused; not "
                   "with --shared")
      ->type_name("DURATION");
  run_cmd
      ->add_option("--on-lost", run_args.on_lost,
                   "what to do to CMD when the lease is lost: term (SIGTERM, then SIGKILL after "
                   "--grace; the default), kill (SIGKILL), ignore (report only; distlock still "
                   "exits 76). If distlock itself dies, CMD gets SIGTERM (kill: SIGKILL) on Linux")
      ->type_name("term|kill|ignore");
  run_cmd
      ->add_option("--grace", run_args.grace,
                   "time between SIGTERM and SIGKILL for --on-lost term (default 10s)")
      ->type_name("DURATION");
  run_cmd->add_flag("--fencing", run_args.fencing,
                    "count a fencing token ({NAME}:fence) and pass it in DISTLOCK_FENCE");
  run_cmd->add_flag("--shared", run_args.shared,
                    "take the read side of a SharedMutex (Redisson RReadWriteLock layout)");
  run_cmd->add_flag("--reentrant", run_args.reentrant,
                    "take a ReentrantMutex (Redisson RLock layout) instead of a Mutex");
  run_cmd->add_flag("--fair", run_args.fair,
                    "take a FairMutex (Redisson RFairLock layout): waiters get the lock in the "
                    "order they came");
  run_cmd
      ->add_option("--semaphore", run_args.semaphore,
                   "take one of N permits of a Semaphore NAME instead of a lock: at most N "
                   "commands run at once (every holder must name the same N)")
      ->type_name("N")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}));
  run_cmd->add_flag("-q,--quiet", run_args.quiet,
                    "say nothing when the lock is busy (the exit status tells)");
  run_cmd->add_option("NAME", run_args.name, "the lock's name (its Redis key)")->required();
  run_cmd->add_option("CMD", run_args.command, "the command and its arguments, after --");
  run_cmd->footer(exit_status_help);

  StatusArgs status_args;
  CLI::App* status_cmd = app.add_subcommand(
      "status",
      "Show whether NAME is held, in which layout (string lease; Redisson hash lock; Redisson "
      "read-write lock), by whom (first 8 characters of the token or owner id), for how much "
      "longer, and the fence counter if there is one.");
  add_where_options(*status_cmd, status_args.where);
  status_cmd->add_flag("--json", status_args.json,
                       "one JSON object: name, held, kind (lease|reentrant|rwlock|other|null), "
                       "redis_type, ttl_ms, mode, holders [{id, holds, exclusive}], fence");
  status_cmd->add_option("NAME", status_args.name, "the lock's name")->required();
  status_cmd->footer(exit_status_help);

  ReleaseArgs release_args;
  CLI::App* release_cmd = app.add_subcommand(
      "release",
      "Delete the lock NAME whoever holds it (administrative), and wake its waiters. Its holder "
      "is not stopped by this: a distlock holder finds the lease gone at its next renewal and "
      "reports it lost. Needs --force and --yes.");
  add_where_options(*release_cmd, release_args.where);
  release_cmd->add_flag("--force", release_args.force, "delete the lock, whoever holds it");
  release_cmd->add_flag("--yes", release_args.yes, "confirm the deletion");
  release_cmd->add_option("NAME", release_args.name, "the lock's name")->required();
  release_cmd->footer(exit_status_help);

  WaitArgs wait_args;
  CLI::App* wait_cmd = app.add_subcommand(
      "wait",
      "Block until NAME is free (its key is gone: released, expired or deleted). It polls the "
      "key's PTTL every 10ms rising to 250ms, sooner when the lease is due to end; it does not "
      "take the lock, so another may take it first.");
  add_where_options(*wait_cmd, wait_args.where);
  wait_cmd
      ->add_option("--timeout", wait_args.timeout,
                   std::string("give up after this long with status 75 (") + duration_forms +
                       ", or forever; the default)")
      ->type_name("DURATION|forever");
  wait_cmd->add_option("NAME", wait_args.name, "the lock's name")->required();
  wait_cmd->footer(exit_status_help);

  std::string subcommand = "distlock";
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    if (run_cmd->parsed() && message.find("not expected") != std::string::npos) {
      message += " (put -- between NAME and the command)";
    }
    const auto parsed = app.get_subcommands();
    if (parsed.empty()) {
      std::fprintf(stderr, "distlock: %s (run, status, release or wait; see distlock --help)\n",
                   one_line(message).c_str());
    } else {
      say(parsed.front()->get_name(), message);
    }
    return status::usage;
  }

  try {
    if (run_cmd->parsed()) {
      subcommand = "run";
      return run(run_args, signals, fds);
    }
    if (status_cmd->parsed()) {
      subcommand = "status";
      return show_status(status_args);
    }
    if (release_cmd->parsed()) {
      subcommand = "release";
      return force_release(release_args);
    }
    subcommand = "wait";
    return wait_free(wait_args);
  } catch (...) {
    std::string message;
    const int code = failure_from(std::current_exception(), message);
    say(subcommand, message);
    return code;
  }
}

}  // namespace
}  // namespace distlock::cli

int main(int argc, char** argv) { return distlock::cli::main_(argc, argv); }
