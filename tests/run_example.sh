#!/usr/bin/env bash
# Runs one example program against a throwaway redis-server (a unix socket
# in a temp dir, no persistence) and exits with the program's status:
#   run_example.sh <program> [arguments after the URI...]
set -euo pipefail
# The server build under test, as the C++ harness takes it (tests/support/redis_server.hpp).
if [ -n "${DISTLOCK_TEST_SERVER_BIN:-}" ]; then PATH="$DISTLOCK_TEST_SERVER_BIN:$PATH"; fi
program=$1
shift
dir=$(mktemp -d)
redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 --save '' \
             --appendonly no --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" \
             --logfile "$dir/redis.log"
# The folder goes once the server has exited: on SIGTERM it still removes
# its socket and writes its log there, and an rm racing it fails.
stop_server() {
  local pid
  pid=$(cat "$dir/redis.pid" 2>/dev/null) || pid=""
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 200); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
  fi
  rm -rf "$dir"
}
trap stop_server EXIT
for _ in $(seq 200); do
  redis-cli -s "$dir/redis.sock" ping >/dev/null 2>&1 && break
  sleep 0.05
done
"$program" "unix://$dir/redis.sock" "$@"
