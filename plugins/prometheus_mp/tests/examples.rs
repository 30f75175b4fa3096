//! `examples/kubernetes/` stays true: its manifests set only variables the library and this
//! plug-in read, give the sidecar only options `nixl-telemetry serve` has, and scrape the port
//! name the pods declare.

use std::path::{Path, PathBuf};
use std::process::Command;

use nixl_telemetry_mp_store::config;

fn manifests() -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/kubernetes");
    let mut files: Vec<(PathBuf, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    files
}

#[test]
fn manifests_use_known_variables_options_and_port_names() {
    let known = [
        nixl_telemetry_core::config::ENV_ENABLE,
        nixl_telemetry_core::exporter::ENV_EXPORTER,
        config::ENV_MULTIPROC_DIR,
        config::ENV_PORT,
        config::ENV_LOCAL,
        config::ENV_RANK_ENV,
        config::ENV_STALE_TTL,
        config::ENV_SERVE,
        config::ENV_AGGREGATE,
        nixl_telemetry_series::labels::ENV_LABELS,
        nixl_telemetry_series::labels::ENV_LABELS_FROM,
    ];
    let cli = nixl_telemetry_test_support::profile_dir().join("nixl-telemetry");
    let help = Command::new(&cli).args(["serve", "--help"]).output();
    let help = String::from_utf8(help.expect("nixl-telemetry is built").stdout).unwrap();
    for (path, text) in manifests() {
        for (i, _) in text.match_indices("NIXL_TELEMETRY_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            assert!(known.contains(&name.as_str()), "{}: {name}", path.display());
        }
        for line in text.lines().filter(|l| l.trim_start().starts_with("args:")) {
            assert!(line.contains("\"serve\""), "{line}");
            for option in line.split('"').filter(|w| w.starts_with("--")) {
                assert!(
                    help.contains(option),
                    "{}: serve has no {option}",
                    path.display()
                );
            }
        }
        // Pods declare the port `nixl-metrics`; monitors and services scrape it by name.
        assert!(text.contains("nixl-metrics"), "{}", path.display());
    }
}
