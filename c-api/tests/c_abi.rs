//! Runs the C and C++ ABI test suite (`c_tests/`, CMake + CTest) against the libraries that
//! cargo built for this package: `libnixl_telemetry.so` and `libnixl_telemetry.a` in
//! `target/<profile>` (the command, plug-ins and C++ crates that the install step also takes
//! from there come from `cargo build --workspace`).
//! Twice: as is (`target/<profile>/c_tests-build`), and with the test programs built with
//! AddressSanitizer + UndefinedBehaviorSanitizer against the shared library
//! (`-DNIXL_TELEMETRY_SANITIZE=ON`, `target/<profile>/c_tests-build-sanitize`; the sanitizer
//! options are test properties set by `c_tests/CMakeLists.txt`, so a plain `ctest` in that
//! directory runs the same).
//!
//! Needs `cmake` (and a C/C++ compiler with libasan and libubsan, as gcc has) on PATH.

use nixl_telemetry_base::sync::LockUnpoisoned;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Instant;

/// The two configurations share the install prefix, and the machine has two cores: one at a
/// time.
static SUITE: Mutex<()> = Mutex::new(());

fn run(what: &str, cmd: &mut Command) -> Output {
    eprintln!("c_abi: running {cmd:?}");
    match cmd.output() {
        Ok(out) => out,
        Err(e) => panic!("{what}: cannot run {cmd:?}: {e}"),
    }
}

fn assert_success(what: &str, out: &Output) {
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn have_tool(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn c_and_cpp_abi_suite_passes() {
    run_suite("c_tests-build", &["-DNIXL_TELEMETRY_SANITIZE=OFF"]);
}

#[test]
fn c_and_cpp_abi_suite_passes_under_asan_and_ubsan() {
    run_suite("c_tests-build-sanitize", &["-DNIXL_TELEMETRY_SANITIZE=ON"]);
}

/// Installs the cargo-built libraries, configures `c_tests/` in `target/<profile>/<build_dir>`
/// with `cmake_args` (each configuration states its sanitizer option, so that a value cached
/// by a hand-run configure does not stick), builds it and runs ctest.
fn run_suite(build_dir: &str, cmake_args: &[&str]) {
    // A failed run of the other configuration must not hide this one.
    let _one_at_a_time = SUITE.lock_unpoisoned();
    let root = nixl_telemetry_test_support::workspace_root();
    let profile = nixl_telemetry_test_support::profile_dir();
    for lib in ["libnixl_telemetry.so", "libnixl_telemetry.a"] {
        let p = profile.join(lib);
        assert!(
            p.is_file(),
            "{} is missing: run cargo build first (the C tests link the cargo-built libraries)",
            p.display()
        );
    }
    assert!(
        have_tool("cmake") && have_tool("ctest"),
        "cmake/ctest not found on PATH: install cmake, e.g. apt-get install cmake"
    );

    // Install into a prefix inside the target directory, then build the tests with
    // find_package(nixl_telemetry), as a user would.
    let prefix = profile.join("install");
    let out = run(
        "install",
        Command::new("bash")
            .arg(root.join("scripts/install.sh"))
            .arg("--from")
            .arg(&profile)
            .arg("--prefix")
            .arg(&prefix),
    );
    assert_success("scripts/install.sh", &out);

    let source = root.join("c_tests");
    let build = profile.join(build_dir);
    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(&source)
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .args(cmake_args);
    // Always pass the fixtures directory so that a value cached by an earlier configure (for
    // example from a NIXL_TELEMETRY_FIXTURES override) does not stick.
    let fixtures = std::env::var_os("NIXL_TELEMETRY_FIXTURES")
        .filter(|f| !f.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("tests/fixtures"));
    let mut arg = std::ffi::OsString::from("-DNIXL_TELEMETRY_FIXTURES=");
    arg.push(fixtures.as_os_str());
    configure.arg(arg);
    let started = Instant::now();
    let out = run("cmake configure", &mut configure);
    assert_success("cmake configure", &out);

    let out = run(
        "cmake build",
        Command::new("cmake").arg("--build").arg(&build).arg("-j2"),
    );
    assert_success("cmake --build", &out);
    // The example Rust plug-in is not installed (it is a template for plug-in authors): give the
    // plug-in tests cargo's build of it, in the directory they add to the search path.
    let example = "libtelemetry_exporter_example_rust.so";
    std::fs::copy(profile.join(example), build.join("plugins").join(example))
        .unwrap_or_else(|e| panic!("cannot copy {example} for the plug-in tests: {e}"));
    let built = Instant::now();

    let out = run(
        "ctest",
        Command::new("ctest")
            .arg("--output-on-failure")
            .arg("--timeout")
            .arg("600")
            .current_dir(&build),
    );
    assert_success("ctest --output-on-failure", &out);
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!(
        "c_abi: {build_dir}: configure + build {:.1} s, ctest {:.1} s",
        (built - started).as_secs_f64(),
        built.elapsed().as_secs_f64()
    );
}
