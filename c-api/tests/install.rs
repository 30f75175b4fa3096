//! `scripts/install.sh`: a real `--help`, the command in `bin/`, the versioned shared library
//! with its links, stripped files, the example plug-in kept out of `lib/plugins`, the C++
//! plug-in host in it and the NIXL manager adapters in `lib/plugins/nixl`; and the shipped build
//! staged with `DESTDIR` as a packager would: its layout, relocatable pkg-config and CMake files,
//! and no test hook in the library.

use std::path::{Path, PathBuf};
use std::process::Command;

fn install_sh() -> std::path::PathBuf {
    nixl_telemetry_test_support::workspace_root().join("scripts/install.sh")
}

#[test]
fn help_describes_the_options_and_the_layout() {
    let out = Command::new("bash")
        .arg(install_sh())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("usage: scripts/install.sh"), "{text}");
    for needle in [
        "bin/nixl-telemetry",
        "--no-strip",
        "libnixl_telemetry.so.0",
        "--from DIR",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    assert!(
        !text.contains("set -euo"),
        "prints help, not the script: {text}"
    );
    // The command's line names every subcommand the built command lists.
    let profile = nixl_telemetry_test_support::built_plugins(&[]);
    let out = Command::new(profile.join("nixl-telemetry"))
        .arg("--help")
        .output()
        .expect("run `cargo build --workspace` first");
    let help = String::from_utf8(out.stdout).unwrap();
    let commands: Vec<&str> = help
        .split_once("Commands:\n")
        .expect("a Commands: section")
        .1
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 7, "{help}");
    let bin = text
        .lines()
        .find(|l| l.trim_start().starts_with("bin/nixl-telemetry "))
        .unwrap();
    for c in &commands {
        assert!(
            bin.split([' ', '(', ')', ',']).any(|w| w == *c),
            "install.sh --help does not name `{c}`: {bin}"
        );
    }
    let out = Command::new("bash")
        .arg(install_sh())
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn installs_the_command_a_versioned_library_and_only_real_plugins() {
    let profile = nixl_telemetry_test_support::built_plugins(&["prometheus", "example_rust"]);
    assert!(
        profile.join("nixl-telemetry").is_file(),
        "run `cargo build --workspace` first"
    );
    let prefix = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(install_sh())
        .arg("--from")
        .arg(&profile)
        .arg("--prefix")
        .arg(prefix.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = prefix.path().join("lib");
    let version = env!("CARGO_PKG_VERSION");
    let real = lib.join(format!("libnixl_telemetry.so.{version}"));
    assert!(real.is_file());
    assert_eq!(
        std::fs::read_link(lib.join("libnixl_telemetry.so.0")).unwrap(),
        Path::new(&format!("libnixl_telemetry.so.{version}"))
    );
    assert_eq!(
        std::fs::read_link(lib.join("libnixl_telemetry.so")).unwrap(),
        Path::new("libnixl_telemetry.so.0")
    );
    // The SONAME (a string of the dynamic section) is the versioned name.
    let bytes = std::fs::read(&real).unwrap();
    assert!(bytes.windows(23).any(|w| w == b"libnixl_telemetry.so.0\0"));
    // Stripped: smaller than what cargo built, the C functions still exported.
    let built = std::fs::metadata(profile.join("libnixl_telemetry.so"))
        .unwrap()
        .len();
    assert!((bytes.len() as u64) < built, "{} >= {built}", bytes.len());
    assert!(bytes.windows(21).any(|w| w == b"nixl_telemetry_create"));
    let plugins: Vec<String> = std::fs::read_dir(lib.join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        plugins.contains(&"libtelemetry_exporter_prometheus.so".to_owned()),
        "{plugins:?}"
    );
    assert!(
        !plugins.iter().any(|p| p.contains("example")),
        "{plugins:?}"
    );
    // Each exporter again for NIXL's plug-in manager (the adapter under the plug-in's name).
    let adapted: Vec<String> = std::fs::read_dir(lib.join("plugins/nixl"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut exporters: Vec<&String> = plugins
        .iter()
        .filter(|p| p.starts_with("libtelemetry_exporter_"))
        .collect();
    let mut adapted_sorted: Vec<&String> = adapted.iter().collect();
    exporters.sort();
    adapted_sorted.sort();
    assert_eq!(exporters, adapted_sorted);
    // The host of NIXL's C++ plug-ins and the adapters, with their entry points kept by the
    // strip; only the library itself carries the SONAME libnixl_telemetry.so.0 (a plug-in
    // carrying it would be taken for the library by a later dlopen of that name).
    let host = lib.join("plugins/libnixl_telemetry_cpp_plugin_host.so");
    assert!(dynamic_symbols(&host).contains(&"nixl_telemetry_cpp_bridge_inspect".to_owned()));
    for adapter in &adapted {
        let path = lib.join("plugins/nixl").join(adapter);
        assert!(dynamic_symbols(&path).contains(&"nixl_telemetry_plugin_init".to_owned()));
        assert_eq!(soname(&path), None, "{}", path.display());
    }
    for plugin in &exporters {
        let path = lib.join("plugins").join(plugin);
        assert_eq!(soname(&path), None, "{}", path.display());
    }
    assert_eq!(
        soname(&lib.join("libnixl_telemetry.so")).as_deref(),
        Some("libnixl_telemetry.so.0")
    );
    let out = Command::new(prefix.path().join("bin/nixl-telemetry"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("nixl-telemetry "));
}

/// The symbol only a library built with the `test-util` feature (the test hooks) exports.
const TEST_HOOKS_MARKER: &str = "NIXL_TELEMETRY_TEST_UTIL";

/// Builds the shipped packages as the script does (debug profile, in `target/install-check`:
/// the cargo build of this test must not share the features of the one running it), stages
/// them with `DESTDIR` under a prefix with `--libdir lib64`, then moves the tree elsewhere and
/// links a C program against it with pkg-config and with CMake.
#[test]
fn a_staged_shipped_install_is_relocatable_and_has_no_test_hooks() {
    let profile = nixl_telemetry_test_support::profile_dir();
    let target = profile
        .parent()
        .expect("target/<profile> has a parent")
        .join("install-check");
    let tmp = tempfile::tempdir().unwrap();
    let stage = tmp.path().join("stage");
    let out = Command::new("bash")
        .arg(install_sh())
        .args([
            "--debug",
            "--prefix",
            "/opt/nixl-telemetry",
            "--libdir",
            "lib64",
        ])
        .env("DESTDIR", &stage)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Everything under DESTDIR/PREFIX, the library directory as asked.
    assert_eq!(entries(&stage), ["opt"]);
    assert_eq!(entries(&stage.join("opt")), ["nixl-telemetry"]);
    let staged = stage.join("opt/nixl-telemetry");
    assert_eq!(entries(&staged), ["bin", "include", "lib64"]);
    let version = env!("CARGO_PKG_VERSION");
    let real = format!("libnixl_telemetry.so.{version}");
    assert_eq!(
        entries(&staged.join("lib64")),
        [
            "cmake",
            "libnixl_telemetry.a",
            "libnixl_telemetry.so",
            "libnixl_telemetry.so.0",
            real.as_str(),
            "pkgconfig",
            "plugins"
        ]
    );
    for file in [
        "bin/nixl-telemetry",
        "include/nixl_telemetry.h",
        "include/nixl_dropin/telemetry.h",
        "lib64/plugins/libtelemetry_exporter_prometheus.so",
        "lib64/plugins/libnixl_telemetry_cpp_plugin_host.so",
        "lib64/plugins/nixl/libtelemetry_exporter_prometheus.so",
        "lib64/cmake/nixl_telemetry/nixl_telemetryConfig.cmake",
        "lib64/pkgconfig/nixl_telemetry.pc",
    ] {
        assert!(staged.join(file).is_file(), "{file} is missing");
    }
    // No installed text names where it was staged or installed: it is all relative.
    for file in [
        "lib64/pkgconfig/nixl_telemetry.pc",
        "lib64/cmake/nixl_telemetry/nixl_telemetryConfig.cmake",
        "lib64/cmake/nixl_telemetry/nixl_telemetryConfigVersion.cmake",
    ] {
        let text = std::fs::read_to_string(staged.join(file)).unwrap();
        for absolute in [tmp.path().to_str().unwrap(), "/opt/nixl-telemetry"] {
            assert!(!text.contains(absolute), "{file} names {absolute}:\n{text}");
        }
    }

    // The shipped library exports every C function of the one cargo built for these tests, and
    // not the test hooks' marker, which that one (built with test-support's `test-util`) has.
    let shipped = dynamic_symbols(&staged.join("lib64").join(&real));
    let mut tested = dynamic_symbols(&profile.join("libnixl_telemetry.so"));
    assert!(
        tested.iter().any(|s| s == TEST_HOOKS_MARKER),
        "the library cargo built for the tests lacks {TEST_HOOKS_MARKER}: the check below \
         would see nothing"
    );
    assert!(
        !shipped.iter().any(|s| s == TEST_HOOKS_MARKER),
        "the installed library was built with the test-util feature"
    );
    tested.retain(|s| s != TEST_HOOKS_MARKER);
    let mut shipped_sorted = shipped.clone();
    shipped_sorted.sort();
    tested.sort();
    assert_eq!(shipped_sorted, tested);

    // Every shipped shared library besides the C library exports exactly its entry points
    // (`nm -D --defined-only`): no plug-in carries a second copy of the C ABI or anything else
    // a host could bind to by accident.
    let plugin_dir = staged.join("lib64/plugins");
    let mut checked = 0;
    for dir in [plugin_dir.clone(), plugin_dir.join("nixl")] {
        for name in entries(&dir).into_iter().filter(|n| n.ends_with(".so")) {
            let expected: &[&str] = if dir.ends_with("nixl") {
                // What NIXL's plug-in manager looks up.
                &["nixl_telemetry_plugin_fini", "nixl_telemetry_plugin_init"]
            } else if name == "libnixl_telemetry_cpp_plugin_host.so" {
                // What the core's loader looks up in the C++ plug-in host.
                &[
                    "nixl_telemetry_cpp_bridge_abi",
                    "nixl_telemetry_cpp_bridge_create",
                    "nixl_telemetry_cpp_bridge_destroy",
                    "nixl_telemetry_cpp_bridge_export",
                    "nixl_telemetry_cpp_bridge_inspect",
                ]
            } else {
                &["nixl_telemetry_plugin_init"]
            };
            assert_eq!(
                defined_dynamic_symbols(&dir.join(&name)),
                expected,
                "{}: exports more or other than its entry points",
                dir.join(&name).display()
            );
            checked += 1;
        }
    }
    // The five exporters, the C++ plug-in host and the five NIXL adapters.
    assert_eq!(checked, 11, "the shipped plug-ins were not all found");

    // Moved elsewhere, pkg-config still gives its directories.
    let moved = tmp.path().join("moved");
    std::fs::rename(&staged, &moved).unwrap();
    let pkg_config = |args: &[&str]| -> String {
        let out = Command::new("pkg-config")
            .args(args)
            .arg("nixl_telemetry")
            .env("PKG_CONFIG_PATH", moved.join("lib64/pkgconfig"))
            .output()
            .expect("pkg-config is needed (apt-get install pkg-config)");
        assert!(
            out.status.success(),
            "pkg-config {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let libdir = PathBuf::from(pkg_config(&["--variable=libdir"]));
    assert_eq!(
        libdir.canonicalize().unwrap(),
        moved.join("lib64").canonicalize().unwrap()
    );
    let flags = pkg_config(&["--cflags", "--libs"]);
    let dirs = |flag: &str| -> Vec<PathBuf> {
        flags
            .split_whitespace()
            .filter_map(|f| f.strip_prefix(flag))
            .map(|d| Path::new(d).canonicalize().unwrap())
            .collect()
    };
    assert_eq!(
        dirs("-I"),
        [moved.join("include").canonicalize().unwrap()],
        "{flags}"
    );
    assert_eq!(
        dirs("-L"),
        [moved.join("lib64").canonicalize().unwrap()],
        "{flags}"
    );

    // A C program built with those flags and an rpath runs without LD_LIBRARY_PATH.
    let program = tmp.path().join("event_name.c");
    std::fs::write(
        &program,
        "#include <nixl_telemetry.h>\n#include <stdio.h>\n#include <string.h>\n\
         int main(void) {\n\
             const char *name = nixl_telemetry_event_name(NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES);\n\
             if (name == NULL || strcmp(name, \"agent_tx_bytes\") != 0) return 1;\n\
             puts(name);\n\
             return 0;\n\
         }\n",
    )
    .unwrap();
    let exe = tmp.path().join("event_name");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg(&program)
        .arg("-o")
        .arg(&exe)
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .status()
        .expect("a C compiler (cc) is needed");
    assert!(status.success(), "cc against pkg-config's flags failed");
    assert_runs_printing_the_event_name(&exe);

    // And with the CMake package, from its new place.
    let project = tmp.path().join("cmake-project");
    std::fs::create_dir(&project).unwrap();
    std::fs::copy(&program, project.join("event_name.c")).unwrap();
    std::fs::write(
        project.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.16)\nproject(event_name LANGUAGES C)\n\
         find_package(nixl_telemetry CONFIG REQUIRED)\n\
         add_executable(event_name event_name.c)\n\
         target_link_libraries(event_name PRIVATE nixl_telemetry::nixl_telemetry)\n",
    )
    .unwrap();
    let build = tmp.path().join("cmake-build");
    for args in [
        vec![
            "-S".to_owned(),
            project.display().to_string(),
            "-B".to_owned(),
            build.display().to_string(),
            // CMake searches lib64/ only where the platform uses it (not on Debian): point it
            // at the package's directory, as a user of a custom --libdir does.
            format!(
                "-Dnixl_telemetry_DIR={}",
                moved.join("lib64/cmake/nixl_telemetry").display()
            ),
        ],
        vec!["--build".to_owned(), build.display().to_string()],
    ] {
        let out = Command::new("cmake").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "cmake {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_runs_printing_the_event_name(&build.join("event_name"));
}

/// Runs `exe` (the program of the staged-install test) with no `LD_LIBRARY_PATH`.
/// `scripts/bench.sh --quick`, the documented benchmark as a fresh clone runs it (the script
/// builds and installs the shipped packages itself), in the debug profile and with a few
/// iterations: it builds the C++ driver against the installed tree and runs every regime, so
/// the benchmark cannot break silently. Its cargo build is the one of the test above
/// (`target/install-check`).
#[test]
fn the_benchmark_script_runs_in_quick_mode() {
    let target = nixl_telemetry_test_support::profile_dir()
        .parent()
        .expect("target/<profile> has a parent")
        .join("install-check");
    let out = Command::new("bash")
        .arg(nixl_telemetry_test_support::workspace_root().join("scripts/bench.sh"))
        .arg("--quick")
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("QUICK RUN (--quick)"), "{stdout}");
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("regime "))
        .skip(1)
        .collect();
    for regime in [
        "append, 1 producer, no flush",
        "drop (queue full), 1 producer",
        "deactivated-metric gate, 1 producer",
        "4 producers, 100 ms flush",
        "2 producers, 50 us drain",
        "cache-resident, 1 producer",
        "cache-resident, 2 producers",
        "append floor: plain stores, no queue",
        "flush 4096 into ring (ns per flush)",
    ] {
        let row = table
            .iter()
            .find(|l| l.starts_with(regime))
            .unwrap_or_else(|| panic!("{regime}: {stdout}"));
        // best / median of both sides and the two ratios: six positive numbers.
        let numbers: Vec<f64> = row[regime.len()..]
            .split(['/', ' '])
            .filter(|t| !t.is_empty())
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(numbers.len(), 6, "{row}");
        assert!(numbers.iter().all(|v| *v > 0.0), "{row}");
    }
    // 7 producer regimes, 2 cache-resident, the append floor, the ring flush and the 2 memory
    // rows.
    assert_eq!(table.len(), 13, "{stdout}");
    assert!(
        table.iter().filter(|l| l.starts_with("memory MB")).count() == 2,
        "{stdout}"
    );
}

fn assert_runs_printing_the_event_name(exe: &Path) {
    let out = Command::new(exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        exe.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "agent_tx_bytes\n");
}

/// The names in directory `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `readelf -d`'s SONAME of `path`, if it has one.
fn soname(path: &Path) -> Option<String> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "readelf -d {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_owned()))
}

/// The names `nm -D --defined-only` lists for `path`, sorted.
fn defined_dynamic_symbols(path: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(path)
        .output()
        .expect("nm is needed (apt-get install binutils)");
    assert!(out.status.success(), "nm -D {}", path.display());
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// The names `readelf --dyn-syms` lists as defined in `path`.
fn dynamic_symbols(path: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "--wide"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "readelf --dyn-syms {}",
        path.display()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains(" UND "))
        .filter_map(|l| l.split_whitespace().nth(7).map(str::to_owned))
        .collect()
}
