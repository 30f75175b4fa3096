#!/usr/bin/env bash
# Simulated scale, measured: N simulated nodes (8 ranks each, workload labels, histograms) push
# to one real Prometheus remote-write receiver on loopback through the push crate's own push
# loop (push/examples/scale.rs), for each N in a list; prints a markdown table. Not a test: the
# numbers depend on the machine and its load, which the script prints first.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/bench-scale.sh [--senders "N[@MS] ..."] [--seconds S] [--interval-ms MS]
                              [--transfers-per-s T] [--quick]

Builds push/examples/scale.rs (release) and runs it once per N: a fresh Prometheus
(/usr/bin/prometheus, --web.enable-remote-write-receiver, on 127.0.0.1) and N senders, each a
simulated node with 8 ranks, pushing every interval. Prints the machine and its load, then one
table row per N: pushes/s, samples and bytes per push, a sender's CPU per push (mean, p99), the
samples/s Prometheus ingests, its CPU and memory, failed pushes, and whether every sender's
totals are exact in Prometheus at the end. A sender whose last push failed (a receiver that
cannot keep up times pushes out) is counted as such in the table; any other mismatch, or a run
that fails, makes the script exit with 1 after the other runs.

Each run lasts about S + 3 intervals + 10 s, and is killed after S + 3 intervals + 120 s.

options:
  --senders "N ..."    the numbers of senders, one run each (default "10 50 200"); N@MS
                       runs N senders at an interval of MS milliseconds
  --seconds S          measured seconds per run, after two intervals of warm-up (default 30)
  --interval-ms MS     push interval (default 1000)
  --transfers-per-s T  transfers per rank per second between pushes (default 100)
  --quick              a smoke run: debug build, 2 senders for 2 s; its numbers mean nothing
  -h, --help           print this help

environment:
  CARGO_TARGET_DIR  where cargo builds (default target/ of this repository)
USAGE
}

senders="10 50 200"
seconds=30
interval=1000
transfers=100
profile=release
while (($#)); do
  case "$1" in
    --senders) senders="${2:?--senders needs a value}"; shift 2 ;;
    --seconds) seconds="${2:?--seconds needs a value}"; shift 2 ;;
    --interval-ms) interval="${2:?--interval-ms needs a value}"; shift 2 ;;
    --transfers-per-s) transfers="${2:?--transfers-per-s needs a value}"; shift 2 ;;
    --quick) senders=2; seconds=2; profile=debug; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
build=(cargo build -q -p nixl-telemetry-push --example scale)
[[ $profile == release ]] && build+=(--release)
"${build[@]}"
bin="$target/$profile/examples/scale"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "receiver: $(prometheus --version 2>&1 | head -1)"
echo "load before: $(uptime | sed 's/.*load average/load average/')"
echo "interval ${interval} ms, ${seconds} s measured per run, ${transfers} transfers/s per rank"
echo
"$bin" --header
status=0
for run in $senders; do
  n="${run%@*}"
  ms="$interval"
  [[ $run == *@* ]] && ms="${run#*@}"
  timeout --kill-after=10 "$((seconds + 3 * ms / 1000 + 120))" "$bin" --senders "$n" \
    --seconds "$seconds" --interval-ms "$ms" --transfers-per-s "$transfers" || status=1
done
echo
echo "load after: $(uptime | sed 's/.*load average/load average/')"
exit "$status"
