#!/usr/bin/env bash
# What a lock costs a user's build: the time to compile a translation unit
# that includes <distlock/distlock.hpp> and takes a Mutex, as a ratio to a
# floor of the same system headers alone (every <...> header the library's
# headers include: the standard library, hiredis, OpenSSL, POSIX), each the
# median of a few compiles. The code emitted for the lock is shown too.
# Both modes are measured: header-only (the default) and separately compiled
# (DISTLOCK_SEPARATE_COMPILATION, with <distlock/src.hpp> compiled once in
# a unit of its own, whose time is shown beside them).
#
#   bench/compile_cost.sh            # g++ -std=c++17 -O2, 5 compiles each
#   CXX=clang++ FLAGS="-O2 -g" RUNS=3 bench/compile_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."

cxx=${CXX:-g++}
flags=${FLAGS:--O2}
runs=${RUNS:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The floor: the system headers the library includes, and nothing of it.
grep -rhoE '^#include <[^>]+>' include/distlock | sort -u >"$work/floor.cpp"
echo 'int main() { return 0; }' >>"$work/floor.cpp"

cat >"$work/lock.cpp" <<'EOF'
#include <distlock/distlock.hpp>

int main() {
  distlock::Client redis{"redis://127.0.0.1:6379"};
  distlock::Mutex job{redis, "jobs:nightly"};
  std::lock_guard<distlock::Mutex> hold{job};
  return 0;
}
EOF

# Median wall time of `runs` compiles of $1 (with the flags after it), in
# milliseconds; the object file is left in $work/out.o.
median_ms() {
  local source=$1 times=() start end
  shift
  for ((i = 0; i < runs; i++)); do
    start=$(date +%s%N)
    # shellcheck disable=SC2086 # FLAGS is a list of flags
    "$cxx" -std=c++17 $flags "$@" -Iinclude -c "$source" -o "$work/out.o"
    end=$(date +%s%N)
    times+=($(((end - start) / 1000000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$((runs / 2 + 1))p"
}
code_bytes() { size -A "$work/out.o" | awk '$1 ~ /^\.text/ { s += $2 } END { print s }'; }
ratio() { awk -v l="$1" -v f="$floor" 'BEGIN { printf "%.1fx", l / f }'; }

floor=$(median_ms "$work/floor.cpp")
lock=$(median_ms "$work/lock.cpp")
lock_code=$(code_bytes)
separate=$(median_ms "$work/lock.cpp" -DDISTLOCK_SEPARATE_COMPILATION)
separate_code=$(code_bytes)
echo '#include <distlock/src.hpp>' >"$work/src.cpp"
unit=$(median_ms "$work/src.cpp" -DDISTLOCK_SEPARATE_COMPILATION)

echo "compiler:  $cxx -std=c++17 $flags ($("$cxx" --version | head -1))"
echo "floor:     ${floor} ms (the $(grep -c '^#include' "$work/floor.cpp") system headers the library includes)"
echo "one Mutex (<distlock/distlock.hpp>, a Client, a Mutex, lock_guard):"
echo "  header-only:          ${lock} ms, ratio $(ratio "$lock"), ${lock_code} bytes of code"
echo "  separately compiled:  ${separate} ms, ratio $(ratio "$separate"), ${separate_code} bytes of code"
echo "  the compiled unit:    ${unit} ms, once per program (<distlock/src.hpp>)"
