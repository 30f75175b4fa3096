//! The system libraries a program linking `libnixl_telemetry.a` needs are the ones rustc says the
//! static library needs (`--print native-static-libs`), and the installed CMake package and
//! pkg-config file list exactly those: a new dependency that needs one more system library
//! fails here instead of at a user's link.

use std::collections::BTreeSet;
use std::process::Command;

use nixl_telemetry_test_support::workspace_root;

/// What rustc prints for the C ABI crate's static library, without `c` (every C link has it).
/// Built in `target/install-check`, the directory of the install tests' own cargo builds (the
/// debug profile without the test hooks), so the libraries are those of the shipped build.
fn printed_by_rustc() -> BTreeSet<String> {
    let target = nixl_telemetry_test_support::profile_dir()
        .parent()
        .expect("target/<profile> has a parent")
        .join("install-check");
    let out = Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", &target)
        .args([
            "rustc",
            "-p",
            "nixl-telemetry-c-api",
            "--lib",
            "--crate-type",
            "staticlib",
            "--",
            "--print",
            "native-static-libs",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find_map(|l| l.split_once("native-static-libs:").map(|(_, libs)| libs))
        .unwrap_or_else(|| panic!("rustc printed no native-static-libs line: {stderr}"));
    let libs: BTreeSet<String> = line
        .split_whitespace()
        .map(|l| {
            l.strip_prefix("-l")
                .unwrap_or_else(|| panic!("{l}: not a -l flag"))
                .to_owned()
        })
        .filter(|l| l != "c")
        .collect();
    assert!(libs.contains("pthread"), "{libs:?}");
    libs
}

/// The `Libs.private` of the pkg-config template.
fn in_pkg_config() -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(workspace_root().join("cmake/nixl_telemetry.pc.in")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Libs.private:"))
        .expect("Libs.private in nixl_telemetry.pc.in");
    line.split_whitespace()
        .map(|l| l.strip_prefix("-l").expect("a -l flag").to_owned())
        .collect()
}

/// The static target's `INTERFACE_LINK_LIBRARIES` in the CMake package template, with CMake's
/// names for two of them (`Threads::Threads` is pthread, `${CMAKE_DL_LIBS}` is dl on Linux).
fn in_cmake_package() -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(workspace_root().join("cmake/nixl_telemetryConfig.cmake.in"))
            .unwrap();
    let lists: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("INTERFACE_LINK_LIBRARIES \""))
        .filter_map(|l| l.split_once('"').map(|(list, _)| list))
        .collect();
    assert_eq!(
        lists.len(),
        1,
        "one quoted list of system libraries: {lists:?}"
    );
    lists[0]
        .split(';')
        .map(|l| match l {
            "Threads::Threads" => "pthread".to_owned(),
            "${CMAKE_DL_LIBS}" => "dl".to_owned(),
            other => other.to_owned(),
        })
        .collect()
}

#[test]
fn the_packages_list_the_native_static_libraries_rustc_prints() {
    let printed = printed_by_rustc();
    assert_eq!(
        in_pkg_config(),
        printed,
        "cmake/nixl_telemetry.pc.in's Libs.private"
    );
    assert_eq!(
        in_cmake_package(),
        printed,
        "cmake/nixl_telemetryConfig.cmake.in's INTERFACE_LINK_LIBRARIES of the static target"
    );
}
