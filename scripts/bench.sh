#!/usr/bin/env bash
# Side-by-side benchmark of the producer path: builds the release library, installs it into
# target/release/install, builds benches/cpp/driver.cpp against it and runs it (< 1 minute).
# Criterion benches of the Rust paths: cargo bench.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --release -p nixl-telemetry
bash scripts/install.sh --from target/release --prefix target/release/install >/dev/null
cmake -S benches/cpp -B target/release/bench-cpp -DCMAKE_PREFIX_PATH="$root/target/release/install" >/dev/null
cmake --build target/release/bench-cpp -j2 >/dev/null
exec target/release/bench-cpp/telemetry_bench
