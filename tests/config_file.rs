//! NIXL's configuration file as collectors read it: each case runs in a child process (the
//! file is read once per process, from the process's `HOME` and `NIXL_CONFIG_FILE`) with a
//! temporary `HOME` and no other NIXL setting in its environment. (That every
//! `NIXL_TELEMETRY_*` name of the repository is declared is checked by
//! `tools/tests/settings_declared.rs`.)

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use nixl_telemetry_base::settings::{self, Origin, SETTINGS};
use nixl_telemetry_core::config::Options;
use nixl_telemetry_core::{Collector, EventType, RingReader, Status};
use nixl_telemetry_test_support::child;

/// The variable that tells the child which case to run.
const CASE: &str = child::CHILD_VAR;

/// A temporary `HOME` (with `rings/` and `opts/` directories) for one child.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["rings", "opts"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        Home { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes `$HOME/.nixl.cfg`; `@HOME@` in `text` stands for the directory.
    fn write_cfg(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path(rel);
        let home = self.dir.path().to_str().unwrap();
        std::fs::write(&path, text.replace("@HOME@", home)).unwrap();
        path
    }

    /// Runs `case` in a child with this `HOME`, no NIXL setting but `env`, and asserts it passed.
    fn run(&self, case: &str, env: &[(&str, &OsStr)]) {
        let mut cmd = child::test("child");
        cmd.env(CASE, case)
            .env("HOME", self.dir.path())
            .env_remove(settings::file::CONFIG_FILE_VAR);
        for s in SETTINGS {
            cmd.env_remove(s.name);
        }
        cmd.envs(env.iter().copied());
        child::output_ok(&mut cmd, &format!("case {case}"));
    }
}

fn home_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap())
}

fn create_error() -> nixl_telemetry_core::Error {
    Collector::from_env("agent", true)
        .err()
        .expect("creation must fail")
}

fn ring_capacity(path: &Path) -> u64 {
    RingReader::open(path).unwrap().capacity()
}

/// The child's side of every case (does nothing in the parent).
#[test]
fn child() {
    let Some(case) = std::env::var_os(CASE) else {
        return;
    };
    let home = home_dir();
    let cfg = home.join(".nixl.cfg");
    match case.to_str().unwrap() {
        "file_values_make_a_ring" => {
            let c = Collector::from_env("agent", false).unwrap();
            assert_eq!(c.exporter_name(), "BUFFER");
            c.update_data(EventType::AgentTxBytes, 5);
            c.close();
            assert_eq!(ring_capacity(&home.join("rings/agent")), 64);
            let effective = Options::default().effective().unwrap();
            let origin = |name: &str| {
                let e = effective.iter().find(|e| e.setting.name == name).unwrap();
                (e.value.clone(), e.origin.clone())
            };
            assert_eq!(
                origin("NIXL_TELEMETRY_BUFFER_SIZE"),
                (Some("64".into()), Origin::File(cfg.clone()))
            );
            assert_eq!(
                origin("NIXL_TELEMETRY_RUN_INTERVAL"),
                (Some("250".into()), Origin::File(cfg.clone()))
            );
            assert_eq!(origin("NIXL_TELEMETRY_EXPORTER"), (None, Origin::Default));
        }
        "environment_then_options_win" => {
            // The environment sets the buffer size (32) over the file's 64.
            let c = Collector::from_env("env-agent", false).unwrap();
            c.close();
            assert_eq!(ring_capacity(&home.join("rings/env-agent")), 32);
            // Options win over both.
            let options = Options {
                dir: Some(home.join("opts").to_str().unwrap().to_owned()),
                buffer_size: Some(16),
                ..Options::default()
            };
            let c = Collector::with_options("opt-agent", &options).unwrap();
            c.close();
            assert_eq!(ring_capacity(&home.join("opts/opt-agent")), 16);
            let effective = options.effective().unwrap();
            let origins: Vec<(&str, Origin)> = effective
                .iter()
                .filter(|e| e.setting.name.ends_with("_DIR") || e.setting.name.ends_with("SIZE"))
                .filter(|e| e.origin != Origin::Default)
                .map(|e| (e.setting.name, e.origin.clone()))
                .collect();
            assert_eq!(
                origins,
                [
                    ("NIXL_TELEMETRY_BUFFER_SIZE", Origin::Option),
                    ("NIXL_TELEMETRY_DIR", Origin::Option),
                ]
            );
        }
        "empty_variable_lets_the_file_apply" => {
            let c = Collector::from_env("agent", false).unwrap();
            assert_eq!(c.exporter_name(), "BUFFER");
            c.close();
            assert!(home.join("rings/agent").exists());
        }
        "wrong_type_names_file_key_value" => {
            let e = create_error();
            assert_eq!(e.status, Status::InvalidParam);
            assert_eq!(
                e.message,
                format!(
                    "{}: NIXL_TELEMETRY_ENABLE = \"yes\" is not a boolean: write true or false \
                     (a TOML boolean, without quotes)",
                    cfg.display()
                )
            );
            assert_eq!(Options::default().check().unwrap_err(), e);
        }
        "typos_are_warned_once_when_the_file_is_read" => {
            // The first read of the file warns, on the reading thread, once per unknown key;
            // the keys are ignored (the collector is made from the rest).
            let (c, logged) = nixl_telemetry_base::logging::capture(|| {
                Collector::from_env("agent", false).unwrap()
            });
            assert_eq!(c.exporter_name(), "BUFFER");
            c.close();
            let cfg = cfg.display();
            assert_eq!(
                nixl_telemetry_base::logging::warnings(&logged),
                [
                    format!(
                        "{cfg}: DYN_FPM_TRACE is ignored: Dynamo's DYN_FPM_* variables are read \
                         from the environment only; set it there"
                    ),
                    format!(
                        "{cfg}: NIXL_TELEMETRY_LABEL_FROM is not a setting of NIXL telemetry \
                         and is ignored: did you mean NIXL_TELEMETRY_LABELS_FROM?"
                    ),
                    format!(
                        "{cfg}: NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL is not a setting of NIXL \
                         telemetry and is ignored: did you mean \
                         NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS?"
                    ),
                ]
            );
            // Not again in this process, whatever reads the settings next.
            let (_, logged) = nixl_telemetry_base::logging::capture(|| {
                let c = Collector::from_env("again", false).unwrap();
                c.close();
                Options::default().effective().unwrap()
            });
            assert!(
                nixl_telemetry_base::logging::warnings(&logged).is_empty(),
                "{logged:?}"
            );
        }
        "invalid_file_value_names_the_file" => {
            let e = create_error();
            assert_eq!(
                e.message,
                format!(
                    "NIXL_TELEMETRY_BUFFER_SIZE cannot be 0 (NIXL_TELEMETRY_BUFFER_SIZE is set \
                     in {})",
                    cfg.display()
                )
            );
            assert_eq!(Options::default().check().unwrap_err(), e);
            // An option replacing the value: creation succeeds.
            let options = Options {
                buffer_size: Some(8),
                ..Options::default()
            };
            Collector::with_options("agent", &options).unwrap().close();
        }
        "broken_file_is_an_error" => {
            let e = create_error();
            assert!(
                e.message.starts_with(&format!("{}:1:", cfg.display())),
                "{}",
                e.message
            );
            assert!(e.message.contains("not valid TOML"), "{}", e.message);
            // Read once: the same error again, and for every setting the environment leaves
            // unset.
            assert_eq!(create_error(), e);
            assert_eq!(Options::default().effective().unwrap_err(), e);
        }
        "missing_named_file_is_an_error" => {
            let e = create_error();
            assert_eq!(
                e.message,
                format!(
                    "NIXL_CONFIG_FILE={}: no such configuration file",
                    home.join("absent.cfg").display()
                )
            );
        }
        "named_file_over_home" => {
            let c = Collector::from_env("agent", false).unwrap();
            c.close();
            assert_eq!(ring_capacity(&home.join("rings/agent")), 128);
            assert_eq!(
                settings::config_file_path(),
                Ok(Some(home.join("named.cfg")))
            );
        }
        "plugin_reads_the_file" => {
            // The plug-in asks the host, which reads NIXL_TELEMETRY_MULTIPROC_DIR (and the
            // core's NIXL_PLUGIN_DIR) from the file: its store appears there.
            let c = Collector::from_env("mp-agent", false).unwrap();
            assert_eq!(c.exporter_name(), "prometheus_mp");
            let stores = std::fs::read_dir(home.join("mp")).unwrap().count();
            c.close();
            assert!(stores > 0, "no store file in {}", home.join("mp").display());
        }
        other => panic!("unknown case {other}"),
    }
}

const RINGS: &str = "NIXL_TELEMETRY_ENABLE = true\nNIXL_TELEMETRY_DIR = '@HOME@/rings'\n\
                     NIXL_TELEMETRY_BUFFER_SIZE = 64\nNIXL_TELEMETRY_RUN_INTERVAL = 00:00:00.250\n\
                     OTHER_NIXL_SUBSYSTEM = { anything = 1 }\n";

#[test]
fn a_collector_uses_the_file_of_home() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", RINGS);
    home.run("file_values_make_a_ring", &[]);
}

#[test]
fn the_environment_and_the_options_win_over_the_file() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", RINGS);
    home.run(
        "environment_then_options_win",
        &[("NIXL_TELEMETRY_BUFFER_SIZE", "32".as_ref())],
    );
}

#[test]
fn an_empty_telemetry_variable_is_unset_so_the_file_applies() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", RINGS);
    home.run(
        "empty_variable_lets_the_file_apply",
        &[("NIXL_TELEMETRY_DIR", "".as_ref())],
    );
}

#[test]
fn a_wrong_type_fails_creation_naming_file_key_and_value() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", "NIXL_TELEMETRY_ENABLE = \"yes\"\n");
    home.run("wrong_type_names_file_key_value", &[]);
}

#[test]
fn typos_in_the_file_are_warned_once_with_the_closest_name() {
    let home = Home::new();
    home.write_cfg(
        ".nixl.cfg",
        &format!(
            "{RINGS}NIXL_TELEMETRY_LABEL_FROM = 'slurm'\nNIXL_TELEMETRY_REMOTE_WRITE_INTERVAL = \
             1000\nDYN_FPM_TRACE = true\nOTHER_SUBSYSTEM_KEY = 1\n"
        ),
    );
    home.run("typos_are_warned_once_when_the_file_is_read", &[]);
}

#[test]
fn an_invalid_value_from_the_file_names_the_file() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", "NIXL_TELEMETRY_BUFFER_SIZE = 0\n");
    home.run("invalid_file_value_names_the_file", &[]);
}

#[test]
fn a_file_that_does_not_parse_fails_creation() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", "NIXL_TELEMETRY_ENABLE = tru\n");
    home.run("broken_file_is_an_error", &[]);
}

#[test]
fn a_missing_named_file_fails_creation() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", RINGS);
    let absent = home.path("absent.cfg");
    home.run(
        "missing_named_file_is_an_error",
        &[(settings::file::CONFIG_FILE_VAR, absent.as_os_str())],
    );
}

#[test]
fn the_named_file_wins_over_home() {
    let home = Home::new();
    home.write_cfg(".nixl.cfg", RINGS);
    let named = home.write_cfg(
        "named.cfg",
        "NIXL_TELEMETRY_ENABLE = true\nNIXL_TELEMETRY_DIR = '@HOME@/rings'\n\
         NIXL_TELEMETRY_BUFFER_SIZE = 128\n",
    );
    home.run(
        "named_file_over_home",
        &[(settings::file::CONFIG_FILE_VAR, named.as_os_str())],
    );
}

#[test]
fn an_exporter_plugin_reads_the_file_too() {
    let plugins = nixl_telemetry_test_support::built_plugins(&["prometheus_mp"]);
    let home = Home::new();
    std::fs::create_dir(home.path("mp")).unwrap();
    home.write_cfg(
        ".nixl.cfg",
        &format!(
            "NIXL_TELEMETRY_ENABLE = true\nNIXL_TELEMETRY_EXPORTER = 'prometheus_mp'\n\
             NIXL_PLUGIN_DIR = '{}'\nNIXL_TELEMETRY_MULTIPROC_DIR = '@HOME@/mp'\n\
             NIXL_TELEMETRY_MP_SERVE = false\nNIXL_TELEMETRY_PROMETHEUS_LOCAL = true\n",
            plugins.display()
        ),
    );
    home.run("plugin_reads_the_file", &[]);
}
