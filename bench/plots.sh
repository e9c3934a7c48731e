#!/usr/bin/env bash
# Draws docs/performance.md's benchmark pictures (PNG, with gnuplot) into bench/img/:
#
#   handoff.png    unlock-to-lock handoff: distlock, the raw pub/sub floor
#                  and 50 ms polling (log scale)
#   contended.png  lock/unlock throughput on one name by thread count,
#                  distlock against raw pub/sub (drawn once the bench has
#                  BM_Mutex_Contended and BM_Raw_Contended_PubSub)
#   redlock.png    one Redlock cycle by number of masters, against the raw
#                  round trips sent to them one after another and all at once
#
#   bench/plots.sh                 runs the bench (pinned to core 0, medians
#                                  of 5) and draws
#   bench/plots.sh results.json    draws from a --benchmark_out JSON file
#
# DISTLOCK_BENCH names the bench binary (default build/rel/bench/distlock_bench).
# Needs gnuplot (Debian: apt-get install gnuplot-nox) and python3; the test
# suite needs neither.
set -euo pipefail
cd "$(dirname "$0")/.."

out=bench/img
mkdir -p "$out"
for tool in gnuplot python3; do
  command -v "$tool" >/dev/null || { echo "plots.sh: needs $tool (apt-get install gnuplot-nox python3)" >&2; exit 1; }
done

if [ $# -ge 1 ]; then
  results=$1
else
  bench=${DISTLOCK_BENCH:-build/rel/bench/distlock_bench}
  [ -x "$bench" ] || { echo "plots.sh: no $bench; build it (Release) or set DISTLOCK_BENCH" >&2; exit 1; }
  results=$out/results.json
  pin=""
  command -v taskset >/dev/null && pin="taskset -c 0"
  $pin "$bench" --benchmark_filter='Handoff|Contended|BM_Redlock_LockUnlock/|BM_RawN_' \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    --benchmark_out="$results" --benchmark_out_format=json >/dev/null
fi

# The machine, for the captions: CPU model, how many, and whether virtual.
machine=$(lscpu | awk -F: '
  /^Model name/ {gsub(/^ +/, "", $2); model = $2}
  /^CPU\(s\)/ {gsub(/ /, "", $2); cpus = $2}
  /^Hypervisor vendor/ {gsub(/^ +/, "", $2); vm = $2 " VM, "}
  END {printf "%s%s CPUs (%s), bench pinned to one", vm, cpus, model}')

data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT

# Medians (µs per iteration, and items/s when reported) by run name.
python3 - "$results" "$data" <<'PY'
import json, sys
results, data = sys.argv[1], sys.argv[2]
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
runs = {}
report = json.load(open(results))
# The machine's load when the run started: it is shared.
load = report.get("context", {}).get("load_avg", [])
with open(f"{data}/load", "w") as f:
    f.write(f"load average {load[0]:.1f}" if load else "")
for b in report["benchmarks"]:
    if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
        continue
    if b.get("error_occurred"):
        continue
    name = "/".join(part for part in b["run_name"].split("/")
                    if part not in ("real_time", "manual_time")
                    and not part.startswith("iterations:"))
    runs[name] = (b["real_time"] * scale[b["time_unit"]], b.get("items_per_second"))

def us(name):
    return runs[name][0] if name in runs else None

with open(f"{data}/handoff.dat", "w") as f:
    for label, name in [("raw pub/sub floor", "BM_Raw_Handoff_PubSub"),
                        ("distlock Mutex", "BM_Mutex_Handoff"),
                        ("50 ms polling", "BM_Mutex_Handoff_Polling50ms")]:
        if us(name) is not None:
            f.write(f'"{label}" {us(name):.3f}\n')

def by_arg(prefix, arg):
    out = {}
    for name, (t, items) in runs.items():
        if name.startswith(prefix + "/" + arg + ":"):
            n = int(name.split(":")[1].split("/")[0])
            out[n] = (t, items)
    return out

mutex = by_arg("BM_Mutex_Contended", "threads")
raw = by_arg("BM_Raw_Contended_PubSub", "threads")
if mutex and raw:
    with open(f"{data}/contended.dat", "w") as f:
        for n in sorted(set(mutex) & set(raw)):
            rate = lambda r: r[1] if r[1] else 1e6 / r[0]
            f.write(f"{n} {rate(mutex[n]):.1f} {rate(raw[n]):.1f}\n")

redlock = by_arg("BM_Redlock_LockUnlock", "masters")
parallel = by_arg("BM_RawN_Parallel_SetNxPx_EvalshaDel", "masters")
sequential = by_arg("BM_RawN_Sequential_SetNxPx_EvalshaDel", "masters")
common = sorted(set(redlock) & set(parallel) & set(sequential))
if common:
    with open(f"{data}/redlock.dat", "w") as f:
        for n in common:
            f.write(f"{n} {redlock[n][0]:.2f} {parallel[n][0]:.2f} {sequential[n][0]:.2f}\n")
PY

machine="$machine; $(cat "$data/load")"
common="set terminal pngcairo size 900,520 font 'DejaVu Sans,11'
set grid ytics
set key top left"

if [ -s "$data/handoff.dat" ]; then
  gnuplot <<GP
$common
set output '$out/handoff.png'
set title "Handoff: holder's unlock() to waiter's lock() return (median)\n{/*0.8 $machine}"
set logscale y
set ylabel 'microseconds (log scale)'
set style fill solid 0.7 border -1
set boxwidth 0.6
set yrange [10:*]
unset key
plot '$data/handoff.dat' using 0:2:xtic(1) with boxes lc rgb '#4878a8', \
     '' using 0:(\$2*1.25):(sprintf('%.0f µs', \$2)) with labels
GP
  echo "wrote $out/handoff.png"
fi

if [ -s "$data/contended.dat" ]; then
  gnuplot <<GP
$common
set output '$out/contended.png'
set title "Contended lock/unlock on one name, by thread count (median)\n{/*0.8 $machine}"
set xlabel 'threads'
set ylabel 'lock/unlock cycles per second'
set yrange [0:*]
plot '$data/contended.dat' using 1:2 with linespoints lw 2 title 'distlock Mutex', \
     '' using 1:3 with linespoints lw 2 title 'raw pub/sub floor'
GP
  echo "wrote $out/contended.png"
else
  echo "plots.sh: no BM_Mutex_Contended / BM_Raw_Contended_PubSub results yet; contended.png not drawn"
fi

if [ -s "$data/redlock.dat" ]; then
  gnuplot <<GP
$common
set output '$out/redlock.png'
set title "One lock/unlock cycle by number of masters (median)\n{/*0.8 $machine}"
set xlabel 'masters'
set ylabel 'microseconds'
set xtics 1
set yrange [0:*]
plot '$data/redlock.dat' using 1:2 with linespoints lw 2 title 'distlock Redlock', \
     '' using 1:3 with linespoints lw 2 title 'raw, all masters at once', \
     '' using 1:4 with linespoints lw 2 title 'raw, one master after another'
GP
  echo "wrote $out/redlock.png"
fi
