#!/usr/bin/env bash
# Side-by-side benchmark of the producer path: builds the shipped packages in release and installs
# them into target/release/install (scripts/install.sh), builds benches/cpp/driver.cpp against
# them and runs it (< 1 minute once built). Works from a fresh clone: install.sh builds what it
# installs. `--quick` is the smoke run that c-api/tests/install.rs makes.
# Criterion benches of the Rust paths: cargo bench.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/bench.sh [--quick] [--shared] [REGIME]

Builds the shipped packages (release), installs them under <target>/release/install, builds the
C++ driver benches/cpp/driver.cpp against them and runs it: ours against a model of NIXL's
staging queue, best and median ns per call and their ratio.

options:
  --shared    ours through libnixl_telemetry.so instead of linked statically (the baseline is
              compiled into the driver either way)
  --quick     a smoke run: the debug profile (<target>/debug/install) and a few iterations of
              every regime; checks that the benchmark builds and runs, its numbers mean nothing
  -h, --help  print this help
  REGIME      run only the regimes whose name contains REGIME

environment:
  CARGO_TARGET_DIR  where cargo builds (<target>; default target/ of this repository)
USAGE
}

quick=0
driver=telemetry_bench
filter=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --shared) driver=telemetry_bench_shared ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) filter=("$arg") ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
if ((quick)); then
  profile=debug
else
  profile=release
fi
prefix="$target/$profile/install"
build="$target/$profile/bench-cpp"
bash scripts/install.sh "--$profile" --prefix "$prefix" >/dev/null
cmake -S benches/cpp -B "$build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build" -j2 >/dev/null
if ((quick)); then
  # Both drivers, so that neither can break unnoticed.
  "$build/telemetry_bench_shared" --quick "${filter[@]}" >/dev/null
  exec "$build/telemetry_bench" --quick "${filter[@]}"
fi
exec "$build/$driver" "${filter[@]}"
