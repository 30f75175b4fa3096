#!/usr/bin/env bash
# Instructions per add_xfer_stats call, ours against the model of NIXL's design, appending, with
# a full queue and with the transfer's metrics deactivated, counted by valgrind's callgrind
# (benches/cpp/instructions.cpp): a profile of the hot path that the load of the machine does not
# change. Builds as scripts/bench.sh does.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
bash scripts/install.sh --release --prefix target/release/install >/dev/null
cmake -S benches/cpp -B target/release/bench-cpp -DCMAKE_PREFIX_PATH="$root/target/release/install" >/dev/null
cmake --build target/release/bench-cpp -j2 --target telemetry_instructions >/dev/null
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
printf '%-10s %-8s %s\n' side regime "instructions per call"
for regime in append drop gate; do
  for side in baseline ours; do
    calls=$(valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out/cg" \
      target/release/bench-cpp/telemetry_instructions "$side" "$regime" 2>/dev/null)
    total=$(grep -E '^summary:|^totals:' "$out/cg" | head -1 | awk '{print $2}')
    awk -v s="$side" -v r="$regime" -v t="$total" -v n="$calls" \
      'BEGIN { printf "%-10s %-8s %.1f\n", s, r, t / n }'
  done
done
