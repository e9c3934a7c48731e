// Fencing into a real database: worker processes sell from one stock row in
// a SQLite file, each sale a read-modify-write under a distlock::Mutex with
// fencing on. The write carries the lock's fencing token and the row keeps
// the highest one it has taken:
//
//   UPDATE stock SET qty = ?, fence = ? WHERE id = ? AND fence < ?
//
// so a write from a holder whose lease ran out, made after a newer holder
// wrote, changes nothing. One worker stalls inside its sale (as a long GC
// pause or a swapped-out VM would) until its lease has run out and another
// worker has sold; its late write is refused, and no sale is lost.
//
//   fenced_sqlite [redis://host:port] [workers] [sales-per-worker]
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>
#include <distlock/distlock.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr auto lease = 300ms;

struct CloseDatabase {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
using Database = std::unique_ptr<sqlite3, CloseDatabase>;

Database open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    const std::string error = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw std::runtime_error("sqlite3_open(" + path + "): " + error);
  }
  sqlite3_busy_timeout(db, 5000);  // other workers' writes lock the file briefly
  return Database(db);
}

void exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    throw std::runtime_error(std::string(sql) + ": " + message);
  }
}

struct Row {
  long long qty = 0;
  long long fence = 0;
};

Row read_row(sqlite3* db) {
  sqlite3_stmt* statement = nullptr;
  sqlite3_prepare_v2(db, "SELECT qty, fence FROM stock WHERE id = 1", -1, &statement, nullptr);
  Row row;
  if (sqlite3_step(statement) == SQLITE_ROW) {
    row.qty = sqlite3_column_int64(statement, 0);
    row.fence = sqlite3_column_int64(statement, 1);
  }
  sqlite3_finalize(statement);
  return row;
}

// The fenced write: true if the row took it, false if it had already taken
// a newer fence.
bool write_if_newer(sqlite3* db, long long qty, long long fence) {
  sqlite3_stmt* statement = nullptr;
  sqlite3_prepare_v2(db, "UPDATE stock SET qty = ?, fence = ? WHERE id = ? AND fence < ?", -1,
                     &statement, nullptr);
  sqlite3_bind_int64(statement, 1, qty);
  sqlite3_bind_int64(statement, 2, fence);
  sqlite3_bind_int64(statement, 3, 1);
  sqlite3_bind_int64(statement, 4, fence);
  const int step = sqlite3_step(statement);
  sqlite3_finalize(statement);
  if (step != SQLITE_DONE) throw std::runtime_error(std::string("UPDATE: ") + sqlite3_errmsg(db));
  return sqlite3_changes(db) == 1;
}

// One worker process: `sales` sales; the staller stalls in its first one.
// Exits with the number of sales the row took (the staller: plus 100 if its
// late write was refused).
// The staller writes a byte to `ready` once it holds the lock, so the
// others start after it: they take the lock once its lease has run out.
[[noreturn]] void work(const distlock::ClientOptions& where, const std::string& path, int sales,
                       bool staller, int ready) {
  try {
    distlock::Client redis(where);  // each process opens its own connections
    distlock::Mutex lock(redis, "stock:1",
                         distlock::LockOptions{}.ttl(lease).fencing(true).auto_renew(false));
    const Database db = open(path);
    int taken = 0;
    bool refused = false;
    for (int i = 0; i < sales; ++i) {
      std::unique_lock guard(lock);
      const long long fence = lock.fence();
      const Row row = read_row(db.get());
      if (staller && i == 0) {
        const char byte = 1;
        if (::write(ready, &byte, 1) != 1) throw std::runtime_error("write to the parent failed");
        std::printf(
            "  staller: holds fence %lld, read qty %lld, now stalls past its %lld ms lease\n",
            fence, row.qty, static_cast<long long>(lease.count()));
        std::fflush(stdout);
        // Stalled until its lease has run out and another worker has sold.
        const auto give_up = std::chrono::steady_clock::now() + 10s;
        std::this_thread::sleep_for(lease);
        while (read_row(db.get()).fence <= fence && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::sleep_for(5ms);
        }
      }
      if (write_if_newer(db.get(), row.qty - 1, fence)) {
        ++taken;
      } else {
        refused = true;
        std::printf("  staller: late write with fence %lld refused (the row has fence %lld)\n",
                    fence, read_row(db.get()).fence);
        std::fflush(stdout);
      }
    }
    ::_exit(taken + (refused ? 100 : 0));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "worker: %s\n", error.what());
    ::_exit(255);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto where =
        distlock::ClientOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:6379");
    const int workers = argc > 2 ? std::atoi(argv[2]) : 3;
    const int sales = argc > 3 ? std::atoi(argv[3]) : 20;
    if (workers < 2 || sales <= 0 || sales > 99) {
      std::fprintf(stderr,
                   "usage: %s [redis://host:port] [workers >= 2] [sales-per-worker <= 99]\n",
                   argv[0]);
      return 2;
    }
    char dir_template[] = "/tmp/fenced-sqlite-XXXXXX";
    if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
    const std::string dir = dir_template;
    const std::string path = dir + "/stock.db";
    const long long initial = static_cast<long long>(workers) * sales;
    {
      const Database db = open(path);
      exec(db.get(), "PRAGMA journal_mode=WAL");
      exec(db.get(), "CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER, fence INTEGER)");
      exec(db.get(), ("INSERT INTO stock VALUES (1, " + std::to_string(initial) + ", 0)").c_str());
    }
    {
      // A fresh fence counter is not needed (fences only rise), but a lock
      // left by an earlier run would hold the first sale up for its lease.
      distlock::Client redis(where);
      redis.command("DEL", "stock:1");
    }
    std::printf("%d workers x %d sales from a stock of %lld, fenced writes into %s\n", workers,
                sales, initial, path.c_str());
    std::fflush(stdout);

    int ready[2];
    if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
    std::vector<pid_t> children;
    for (int w = 0; w < workers; ++w) {
      const pid_t pid = ::fork();
      if (pid == 0) work(where, path, sales, w == 0, ready[1]);
      children.push_back(pid);
      char byte = 0;
      if (w == 0 && ::read(ready[0], &byte, 1) != 1) throw std::runtime_error("the staller failed");
    }
    ::close(ready[0]);
    ::close(ready[1]);
    long long taken = 0;
    bool refused = false;
    bool failed = false;
    for (const pid_t pid : children) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
      if (code == 255) failed = true;
      taken += code % 100;
      refused = refused || code >= 100;
    }
    long long left = 0;
    {
      const Database db = open(path);
      left = read_row(db.get()).qty;
    }
    std::remove((path + "-wal").c_str());
    std::remove((path + "-shm").c_str());
    std::remove(path.c_str());
    ::rmdir(dir.c_str());

    std::printf(
        "  sales taken by the row: %lld; stock left: %lld (%lld + %lld = %lld: no sale lost)\n",
        taken, left, taken, left, initial);
    std::printf("  the stalled worker's late write was %s\n", refused ? "refused" : "NOT refused");
    return !failed && refused && taken + left == initial ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fenced_sqlite: %s\n", error.what());
    return 1;
  }
}
