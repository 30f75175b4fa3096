//! `nixl-telemetry config`: the effective settings with their origins and `--check`, run with
//! a temporary `HOME` and no NIXL setting in the environment but those a test sets.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use nixl_telemetry_base::settings::SETTINGS;

/// A temporary `HOME` for the command.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `nixl-telemetry config ARGS` with this `HOME`, `env` and no other NIXL setting.
    fn config(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::cargo_bin("nixl-telemetry").unwrap();
        cmd.arg("config")
            .args(args)
            .env("HOME", self.path())
            .env_remove("NIXL_CONFIG_FILE");
        for s in SETTINGS {
            cmd.env_remove(s.name);
        }
        cmd.envs(env.iter().copied());
        cmd
    }

    fn stdout(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = self
            .config(args, env)
            .assert()
            .success()
            .get_output()
            .clone();
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `config ARGS`, expects exit status 1, and returns stderr.
    fn failure(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = self.config(args, env).assert().code(1).get_output().clone();
        assert!(out.stdout.is_empty());
        String::from_utf8(out.stderr).unwrap()
    }
}

/// The line of `text` that sets or leaves unset `name`.
fn line_of<'t>(text: &'t str, name: &str) -> &'t str {
    text.lines()
        .find(|l| {
            let rest = l.split_whitespace().nth(1).unwrap_or("");
            rest == name || rest.starts_with(&format!("{name}="))
        })
        .unwrap_or_else(|| panic!("no line for {name} in\n{text}"))
}

#[test]
fn config_shows_each_value_and_its_origin() {
    let home = Home::new();
    let cfg = home.write(
        ".nixl.cfg",
        "NIXL_TELEMETRY_DIR = '/from/file'\nNIXL_TELEMETRY_BUFFER_SIZE = 64\n\
         NIXL_TELEMETRY_RUN_INTERVAL = 00:00:01.5\nNIXL_PLUGIN_DIR = '/plugins'\n\
         SOME_OTHER_NIXL_KEY = 'ignored'\n",
    );
    let text = home.stdout(&[], &[("NIXL_TELEMETRY_BUFFER_SIZE", "32")]);
    let file = format!("file:{}", cfg.display());
    assert_eq!(
        text.lines().next().unwrap(),
        format!("# configuration file: {}", cfg.display())
    );
    let width = file.len();
    for (name, expected) in [
        (
            "NIXL_TELEMETRY_DIR",
            format!("{file}  NIXL_TELEMETRY_DIR=/from/file"),
        ),
        (
            "NIXL_TELEMETRY_BUFFER_SIZE",
            format!("{:<width$}  NIXL_TELEMETRY_BUFFER_SIZE=32", "environment"),
        ),
        (
            "NIXL_TELEMETRY_RUN_INTERVAL",
            format!("{file}  NIXL_TELEMETRY_RUN_INTERVAL=1500"),
        ),
        (
            "NIXL_PLUGIN_DIR",
            format!("{file}  NIXL_PLUGIN_DIR=/plugins"),
        ),
        (
            "NIXL_TELEMETRY_EXPORTER",
            format!("{:<width$}  NIXL_TELEMETRY_EXPORTER (unset)", "default"),
        ),
        (
            "NIXL_TELEMETRY_PROMETHEUS_PORT",
            format!("{:<width$}  NIXL_TELEMETRY_PROMETHEUS_PORT=9090", "default"),
        ),
    ] {
        assert_eq!(line_of(&text, name), expected);
    }
    assert_eq!(text.lines().count(), SETTINGS.len() + 1, "{text}");
    assert!(!text.contains("SOME_OTHER_NIXL_KEY"));
}

#[test]
fn config_json_and_the_search_order() {
    let home = Home::new();
    let etc_like = home.write("named.cfg", "NIXL_TELEMETRY_EXPORTER = 'NOP'\n");
    home.write(".nixl.cfg", "NIXL_TELEMETRY_EXPORTER = 'BUFFER'\n");
    let named = etc_like.to_str().unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&home.stdout(&["--json"], &[("NIXL_CONFIG_FILE", named)])).unwrap();
    assert_eq!(doc["file"], named);
    let settings = doc["settings"].as_array().unwrap();
    assert_eq!(settings.len(), SETTINGS.len());
    let exporter = settings
        .iter()
        .find(|s| s["name"] == "NIXL_TELEMETRY_EXPORTER")
        .unwrap();
    assert_eq!(
        exporter,
        &serde_json::json!({
            "name": "NIXL_TELEMETRY_EXPORTER", "kind": "string", "value": "NOP",
            "origin": format!("file:{named}"), "reader": "core",
            "doc": nixl_telemetry_base::settings::EXPORTER.doc, "error": null,
        })
    );
    assert_eq!(doc["unknown_keys"], serde_json::json!([]));
    // No file at all.
    let empty = Home::new();
    let doc: serde_json::Value = serde_json::from_str(&empty.stdout(&["--json"], &[])).unwrap();
    assert_eq!(doc["file"], serde_json::Value::Null);
    assert!(doc["settings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["origin"] == "default"));
}

#[test]
fn config_doc_puts_each_doc_line_above_its_setting() {
    let home = Home::new();
    let text = home.stdout(&["--doc"], &[]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * SETTINGS.len() + 1, "{text}");
    for (s, pair) in SETTINGS.iter().zip(lines[1..].chunks(2)) {
        assert_eq!(pair[0], format!("# {} ({})", s.doc, s.readers_text()));
        assert_eq!(
            pair[1]
                .split_whitespace()
                .nth(1)
                .map(|n| n.split('=').next()),
            Some(Some(s.name))
        );
    }
    let port = nixl_telemetry_base::settings::PROMETHEUS_PORT;
    assert!(text.contains(&format!("# {} (prometheus, prometheus_mp)\n", port.doc)));
}

#[test]
fn check_accepts_a_valid_configuration() {
    let home = Home::new();
    home.write(
        ".nixl.cfg",
        "NIXL_TELEMETRY_DIR = '/nonexistent/rings'\nNIXL_TELEMETRY_ENABLE = true\n",
    );
    assert_eq!(
        home.stdout(&["--check"], &[]),
        "ok: a collector would use BUFFER (rings of version 4 in /nonexistent/rings), 4096 \
         events, a flush every 100 ms\n"
    );
    // The ring's layout, from the file too (NIXL's open pull request #2018's).
    home.write(
        ".nixl.cfg",
        "NIXL_TELEMETRY_DIR = '/nonexistent/rings'\nNIXL_TELEMETRY_RING_VERSION = 5\n",
    );
    assert!(home.stdout(&["--check"], &[]).starts_with(
        "ok: a collector would use BUFFER (rings of version 5 in /nonexistent/rings)"
    ));
    // Nothing was created.
    assert!(!Path::new("/nonexistent").exists());
}

#[test]
fn check_fails_as_creation_would() {
    let home = Home::new();
    let cfg = home.write(".nixl.cfg", "NIXL_TELEMETRY_PROMETHEUS_LOCAL = 'yes'\n");
    let cfg = cfg.display();
    // A wrong TOML type, even for a setting of an exporter that is not chosen.
    assert_eq!(
        home.failure(&["--check"], &[]),
        format!(
            "nixl-telemetry: error: {cfg}: NIXL_TELEMETRY_PROMETHEUS_LOCAL = \"yes\" is not a \
             boolean: write true or false (a TOML boolean, without quotes)\n"
        )
    );
    // The environment overrides it.
    home.stdout(&["--check"], &[("NIXL_TELEMETRY_PROMETHEUS_LOCAL", "off")]);
    // A value the core refuses names the file it came from.
    home.write(".nixl.cfg", "NIXL_TELEMETRY_RUN_INTERVAL = 0\n");
    assert_eq!(
        home.failure(&["--check"], &[]),
        format!(
            "nixl-telemetry: error: NIXL_TELEMETRY_RUN_INTERVAL=0 is not a flush period: use at \
             least 1 (milliseconds) (NIXL_TELEMETRY_RUN_INTERVAL is set in {cfg})\n"
        )
    );
    // A negative integer.
    home.write(".nixl.cfg", "NIXL_TELEMETRY_TRACE_MAX_SEGMENTS = -2\n");
    assert!(home.failure(&["--check"], &[]).contains(&format!(
        "{cfg}: NIXL_TELEMETRY_TRACE_MAX_SEGMENTS = -2 is negative"
    )));
    // The TRACE exporter's settings, from the environment.
    assert!(home
        .failure(
            &["--check"],
            &[
                ("NIXL_TELEMETRY_EXPORTER", "TRACE"),
                ("NIXL_TELEMETRY_TRACE_MAX_SEGMENTS", "0")
            ]
        )
        .contains("NIXL_TELEMETRY_TRACE_MAX_SEGMENTS cannot be 0"));
    // BUFFER without a directory (and a file that sets nothing).
    home.write(".nixl.cfg", "");
    assert!(home
        .failure(&["--check"], &[("NIXL_TELEMETRY_EXPORTER", "BUFFER")])
        .contains("NIXL_TELEMETRY_EXPORTER=BUFFER needs NIXL_TELEMETRY_DIR"));
}

#[test]
fn a_file_that_cannot_be_used_fails_both_forms() {
    let home = Home::new();
    let broken = home.write(".nixl.cfg", "NIXL_TELEMETRY_DIR = \n");
    for args in [&[][..], &["--check"], &["--json"]] {
        let err = home.failure(args, &[]);
        assert!(
            err.starts_with(&format!("nixl-telemetry: error: {}:1:", broken.display())),
            "{err}"
        );
    }
    let absent = home.path().join("absent.cfg");
    let err = home.failure(
        &["--check"],
        &[("NIXL_CONFIG_FILE", absent.to_str().unwrap())],
    );
    assert_eq!(
        err,
        format!(
            "nixl-telemetry: error: NIXL_CONFIG_FILE={}: no such configuration file\n",
            absent.display()
        )
    );
}

#[test]
fn check_fails_on_a_typo_naming_the_closest_setting() {
    let home = Home::new();
    let cfg = home.write(
        ".nixl.cfg",
        "NIXL_TELEMETRY_LABEL_FROM = 'slurm'\nNIXL_TELEMETRY_REMOTE_WRITE_INTERVAL = 1000\n\
         OTHER_SUBSYSTEM = 1\n",
    );
    let cfg = cfg.display();
    assert_eq!(
        home.failure(&["--check"], &[]),
        format!(
            "nixl-telemetry: error: {cfg}: NIXL_TELEMETRY_LABEL_FROM is not a setting of NIXL \
             telemetry and is ignored: did you mean NIXL_TELEMETRY_LABELS_FROM?\n{cfg}: \
             NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL is not a setting of NIXL telemetry and is \
             ignored: did you mean NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS?\n"
        )
    );
    // The listing shows them as warnings, and succeeds.
    let listing = home.stdout(&[], &[]);
    assert!(
        listing.contains(&format!(
            "# warning: {cfg}: NIXL_TELEMETRY_LABEL_FROM is not a setting of NIXL telemetry"
        )),
        "{listing}"
    );
    // Spelt right, the check passes (and other subsystems' keys are not judged).
    home.write(
        ".nixl.cfg",
        "NIXL_TELEMETRY_LABELS_FROM = 'slurm'\nNIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS = 1000\n\
         OTHER_SUBSYSTEM = 1\n",
    );
    assert!(home.stdout(&["--check"], &[]).starts_with("ok: "));
}

#[test]
fn config_lists_every_setting_with_the_faulty_ones_marked() {
    let home = Home::new();
    let cfg = home.write(
        ".nixl.cfg",
        "NIXL_TELEMETRY_PROMETHEUS_LOCAL = 'yes'\nNIXL_TELEMETRY_BUFFER_SIZE = 64\n",
    );
    let cfg = cfg.display();
    let out = home.config(&[], &[]).assert().code(1).get_output().clone();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    let error = format!(
        "{cfg}: NIXL_TELEMETRY_PROMETHEUS_LOCAL = \"yes\" is not a boolean: write true or false \
         (a TOML boolean, without quotes)"
    );
    assert_eq!(stderr, format!("nixl-telemetry: error: {error}\n"));
    // Every setting is listed, the faulty one marked with its value as the file writes it.
    for s in SETTINGS {
        line_of(&stdout, s.name);
    }
    assert!(
        line_of(&stdout, "NIXL_TELEMETRY_PROMETHEUS_LOCAL").ends_with(&format!(
            "NIXL_TELEMETRY_PROMETHEUS_LOCAL=\"yes\"  # ERROR: {error}"
        ))
    );
    assert!(
        line_of(&stdout, "NIXL_TELEMETRY_BUFFER_SIZE").ends_with("NIXL_TELEMETRY_BUFFER_SIZE=64")
    );
    assert_eq!(stdout.matches("# ERROR").count(), 1, "{stdout}");
    // --json too, with an "error" per setting.
    let out = home
        .config(&["--json"], &[])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |name: &str| {
        doc["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        row("NIXL_TELEMETRY_PROMETHEUS_LOCAL")["error"],
        error.as_str()
    );
    assert_eq!(
        row("NIXL_TELEMETRY_BUFFER_SIZE")["error"],
        serde_json::Value::Null
    );
}

#[test]
fn the_otlp_settings_come_from_the_file_after_the_environment() {
    let home = Home::new();
    let cfg = home.write(
        ".nixl.cfg",
        "OTEL_EXPORTER_OTLP_ENDPOINT = 'http://collector:4318'\nOTEL_METRIC_EXPORT_INTERVAL = \
         5000\nOTEL_SERVICE_NAME = 'from-file'\n\
         OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION = \
         'base2_exponential_bucket_histogram'\n",
    );
    let out = home.stdout(&[], &[("OTEL_SERVICE_NAME", "from-env")]);
    assert_eq!(
        line_of(&out, "OTEL_EXPORTER_OTLP_ENDPOINT")
            .split_whitespace()
            .collect::<Vec<_>>(),
        [
            format!("file:{}", cfg.display()),
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318".to_owned()
        ]
    );
    assert!(line_of(&out, "OTEL_METRIC_EXPORT_INTERVAL").ends_with("=5000"));
    assert!(line_of(&out, "OTEL_SERVICE_NAME").starts_with("environment "));
    assert_eq!(
        line_of(
            &out,
            "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"
        )
        .split_whitespace()
        .collect::<Vec<_>>(),
        [
            format!("file:{}", cfg.display()),
            "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION=\
             base2_exponential_bucket_histogram"
                .to_owned()
        ]
    );
    // Not a key the file warns about as unknown.
    assert!(!out.contains("# warning"), "{out}");
    // A wrong type is caught as for every setting.
    home.write(".nixl.cfg", "OTEL_METRIC_EXPORT_INTERVAL = '5s'\n");
    assert!(home
        .failure(&["--check"], &[])
        .contains("OTEL_METRIC_EXPORT_INTERVAL = \"5s\" is not a duration in milliseconds"));
}
