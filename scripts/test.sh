#!/usr/bin/env bash
# Runs every test of the project: formatting and lints, the Rust unit and integration tests
# (which also build and run the C/C++ ABI tests with CMake/ctest), and the Python reader's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export NIXL_TELEMETRY_FIXTURES="${NIXL_TELEMETRY_FIXTURES:-$PWD/tests/fixtures}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo build (libraries, CLI, benches)"
cargo build --workspace --all-targets
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings -D clippy::undocumented_unsafe_blocks -D unsafe_op_in_unsafe_fn
echo "== cargo test"
cargo test --workspace
echo "== python reader tests"
python3 -m pytest examples/python -q
echo "== all tests passed"
