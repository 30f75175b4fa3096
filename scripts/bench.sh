#!/usr/bin/env bash
# Side-by-side benchmark of the producer path: builds the shipped packages in release and installs
# them into target/release/install (scripts/install.sh), builds benches/cpp/driver.cpp against
# them and runs it (< 1 minute once built); an argument runs only the regimes whose name contains it.
# Criterion benches of the Rust paths: cargo bench.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/install.sh --release --prefix target/release/install >/dev/null
cmake -S benches/cpp -B target/release/bench-cpp -DCMAKE_PREFIX_PATH="$root/target/release/install" >/dev/null
cmake --build target/release/bench-cpp -j2 >/dev/null
exec target/release/bench-cpp/telemetry_bench "$@"
