#!/usr/bin/env bash
# Runs every test of the project, after installing what they need when it is missing
# (scripts/install-test-deps.sh): formatting and lints, the Rust unit and integration tests
# (which also build and run the C/C++ ABI tests with CMake/ctest), the Python reader's tests, and
# the Python package (python/: its wheel is built once, installed aside and tested).
set -euo pipefail
cd "$(dirname "$0")/.."
# What the tests need (cmake, g++, gcc, promtool/prometheus, tmux, pytest), installed if missing.
bash scripts/install-test-deps.sh
# Installed now: the terminal test of `top` and the FPM page's pandas/DuckDB test must not skip.
export NIXL_TELEMETRY_REQUIRE_TMUX=1
export NIXL_TELEMETRY_REQUIRE_PYDATA=1
export NIXL_TELEMETRY_FIXTURES="${NIXL_TELEMETRY_FIXTURES:-$PWD/tests/fixtures}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

echo "== cargo fmt"
cargo fmt --all -- --check
cargo fmt --manifest-path python/Cargo.toml -- --check
echo "== cargo build (libraries, CLI, benches)"
cargo build --workspace --all-targets
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings -D clippy::undocumented_unsafe_blocks -D unsafe_op_in_unsafe_fn
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings -D clippy::undocumented_unsafe_blocks -D unsafe_op_in_unsafe_fn
echo "== cargo doc"
# Every doc comment's intra-doc links resolve and its text is valid: the developer docs, private
# items included (so a link to a private item resolves and is allowed).
export RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links"
cargo doc --workspace --no-deps --document-private-items
unset RUSTDOCFLAGS
echo "== cargo test"
# c-api/tests/install.rs also builds the shipped packages as scripts/install.sh does, apart in
# target/install-check (without the test hooks that this build of the library has).
cargo test --workspace
echo "== loom model check of the staging queue"
# The staging queue's atomics protocol under every interleaving loom explores
# (tests/loom_staging.rs). `--cfg loom` rebuilds the library with loom's atomics, apart in
# target/loom so that the builds above stay valid; the `loom` profile (Cargo.toml) optimises
# what runs, as loom runs each model thousands of times.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test --profile loom -p nixl-telemetry-core --test loom_staging
echo "== python reader tests"
python3 -m pytest examples/python -q
echo "== python package (pip wheel ./python, installed into target/python-package/site)"
package="$PWD/target/python-package"
rm -rf "$package"
python3 -m pip wheel --quiet --no-deps --wheel-dir "$package/wheel" ./python
python3 -m pip install --quiet --no-deps --root-user-action=ignore --target "$package/site" \
  "$package"/wheel/nixl_telemetry-*.whl
PYTHONPATH="$package/site${PYTHONPATH:+:$PYTHONPATH}" NIXL_TELEMETRY_LIB_DIR="$PWD/target/debug" \
  python3 -m pytest python/tests -q
echo "== all tests passed"
