//! Every setting this library and its exporter plug-ins read ([`SETTINGS`]), and the one place
//! that resolves a setting and remembers where its value came from. Sources, highest first:
//! the options of `nixl_telemetry_create_with_options` (for the settings they cover), the
//! process environment, NIXL's configuration file ([`file`]), the default.
//!
//! [`process_settings`], the lookup every parser takes, is [`lookup`] without the origin; so every reader (the core, the TRACE exporter, the plug-ins, each with its own copy of
//! this crate) gets the file's values by the same rules. Names that are not in the table (other
//! variables, such as Dynamo's `DYN_FPM_*` or the rank variable `prometheus_mp` is told to read)
//! come from the environment only.

pub mod file;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::env::{parse_bool, parse_u64, Lookup, EMPTY_IS_UNSET_PREFIX};
use crate::error::{Error, Result};
use file::ConfigFile;

/// What type of value a setting takes: in the environment, the words the parsers of
/// [`crate::env`] accept; in the configuration file, the TOML type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A boolean word in the environment; a TOML boolean in the file.
    Bool,
    /// A decimal or `0x` hexadecimal unsigned integer; a non-negative TOML integer.
    Unsigned,
    /// Milliseconds as an unsigned integer; a non-negative TOML integer or a TOML local time
    /// (`00:00:00.100` is 100).
    Millis,
    /// Any text (a name, a path, a list); a TOML string.
    Text,
}

impl Kind {
    /// The kind's name as `nixl-telemetry config --json` and the docs say it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bool => "bool",
            Kind::Unsigned => "unsigned",
            Kind::Millis => "milliseconds",
            Kind::Text => "string",
        }
    }

    /// Checks that `value` (of setting `name`) is of this kind, with the error the setting's
    /// reader would give.
    pub fn validate(self, name: &str, value: &str) -> Result<()> {
        match self {
            Kind::Bool => parse_bool(name, value).map(drop),
            Kind::Unsigned | Kind::Millis => parse_u64(name, value).map(drop),
            Kind::Text => Ok(()),
        }
    }
}

/// One setting: its variable (and file key), kind, default and reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The variable's name, which is also its key in the configuration file.
    pub name: &'static str,
    /// The type of value it takes.
    pub kind: Kind,
    /// The value that applies when no source sets it (`None`: unset, the reader's behaviour
    /// without it).
    pub default: Option<&'static str>,
    /// Who reads it: `core`, `TRACE` or an exporter plug-in.
    pub reader: &'static str,
}

const fn setting(
    name: &'static str,
    kind: Kind,
    default: Option<&'static str>,
    reader: &'static str,
) -> Setting {
    Setting {
        name,
        kind,
        default,
        reader,
    }
}

/// Every setting read by this library and its exporter plug-ins (a test keeps it complete).
pub const SETTINGS: &[Setting] = &[
    setting("NIXL_TELEMETRY_ENABLE", Kind::Bool, None, "core"),
    setting(
        "NIXL_TELEMETRY_BUFFER_SIZE",
        Kind::Unsigned,
        Some("4096"),
        "core",
    ),
    setting(
        "NIXL_TELEMETRY_RUN_INTERVAL",
        Kind::Millis,
        Some("100"),
        "core",
    ),
    setting("NIXL_TELEMETRY_EXPORTER", Kind::Text, None, "core"),
    setting("NIXL_TELEMETRY_DIR", Kind::Text, None, "core"),
    setting("NIXL_TELEMETRY_ENABLED_METRICS", Kind::Text, None, "core"),
    setting("NIXL_PLUGIN_DIR", Kind::Text, None, "core"),
    setting("NIXL_LOG_LEVEL", Kind::Text, Some("WARN"), "core"),
    setting(
        "NIXL_TELEMETRY_TRACE_PATH",
        Kind::Text,
        Some("/tmp/nixl-telemetry"),
        "TRACE",
    ),
    setting(
        "NIXL_TELEMETRY_TRACE_ROLL_BYTES",
        Kind::Unsigned,
        Some("268435456"),
        "TRACE",
    ),
    setting(
        "NIXL_TELEMETRY_TRACE_MAX_SEGMENTS",
        Kind::Unsigned,
        Some("4"),
        "TRACE",
    ),
    setting(
        "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US",
        Kind::Text,
        Some(
            "10,25,50,100,250,500,1000,2500,5000,10000,25000,50000,100000,250000,500000,\
             1000000,5000000,10000000",
        ),
        "prometheus, prometheus_mp, doca, remote_write, otlp",
    ),
    setting(
        "NIXL_TELEMETRY_LABELS",
        Kind::Text,
        None,
        "prometheus, prometheus_mp, doca",
    ),
    setting(
        "NIXL_TELEMETRY_LABELS_FROM",
        Kind::Text,
        None,
        "prometheus, prometheus_mp, doca",
    ),
    setting(
        "NIXL_TELEMETRY_PROMETHEUS_PORT",
        Kind::Unsigned,
        Some("9090"),
        "prometheus, prometheus_mp",
    ),
    setting(
        "NIXL_TELEMETRY_PROMETHEUS_LOCAL",
        Kind::Bool,
        Some("false"),
        "prometheus, prometheus_mp",
    ),
    setting(
        "NIXL_TELEMETRY_MULTIPROC_DIR",
        Kind::Text,
        None,
        "prometheus_mp",
    ),
    setting(
        "NIXL_TELEMETRY_RANK_ENV",
        Kind::Text,
        Some("LOCAL_RANK"),
        "prometheus_mp, remote_write, otlp",
    ),
    setting(
        "NIXL_TELEMETRY_MP_STALE_TTL",
        Kind::Unsigned,
        Some("30"),
        "prometheus_mp",
    ),
    setting(
        "NIXL_TELEMETRY_MP_SERVE",
        Kind::Bool,
        Some("true"),
        "prometheus_mp",
    ),
    setting(
        "NIXL_TELEMETRY_MP_AGGREGATE",
        Kind::Text,
        Some("none"),
        "prometheus_mp",
    ),
    setting(
        "NIXL_TELEMETRY_DOCA_BACKENDS",
        Kind::Text,
        Some("scrape"),
        "doca",
    ),
    setting(
        "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT",
        Kind::Unsigned,
        Some("9091"),
        "doca",
    ),
    setting(
        "NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL",
        Kind::Bool,
        Some("false"),
        "doca",
    ),
    setting(
        "NIXL_TELEMETRY_DOCA_IPC_SOCKETS_DIR",
        Kind::Text,
        None,
        "doca",
    ),
    setting("NIXL_TELEMETRY_DOCA_LIB_DIR", Kind::Text, None, "doca"),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_URL",
        Kind::Text,
        None,
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS",
        Kind::Millis,
        Some("15000"),
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_TIMEOUT_MS",
        Kind::Millis,
        Some("10000"),
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_FINAL_PUSH_MS",
        Kind::Millis,
        Some("5000"),
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_HEADERS",
        Kind::Text,
        None,
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_USER",
        Kind::Text,
        None,
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_BASIC_AUTH_PASSWORD_FILE",
        Kind::Text,
        None,
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_BEARER_TOKEN_FILE",
        Kind::Text,
        None,
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_REMOTE_WRITE_CA_FILE",
        Kind::Text,
        None,
        "remote_write",
    ),
    setting(
        "NIXL_TELEMETRY_OTLP_FINAL_PUSH_MS",
        Kind::Millis,
        Some("5000"),
        "otlp",
    ),
];

/// The setting named `name`, if this library knows it.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The options struct of `nixl_telemetry_create_with_options`.
    Option,
    /// The process environment.
    Environment,
    /// This configuration file.
    File(PathBuf),
    /// No source set it: the default applies.
    Default,
}

impl fmt::Display for Origin {
    /// `option`, `environment`, `file:<path>` or `default`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Option => f.write_str("option"),
            Origin::Environment => f.write_str("environment"),
            Origin::File(path) => write!(f, "file:{}", path.display()),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sourced {
    /// The value, as the environment would hold it.
    pub value: String,
    /// Its source.
    pub origin: Origin,
}

/// Reads `name` from the process environment (an empty `NIXL_TELEMETRY_*` value is unset),
/// else, for a setting of [`SETTINGS`], from this process's configuration file (read once).
pub fn lookup(name: &str) -> Result<Option<Sourced>> {
    lookup_in(name, &crate::env::environment, file::process_file)
}

/// [`lookup`] through the environment `env` and the configuration file `file` (called only
/// when the environment does not set a known setting).
fn lookup_in<'f>(
    name: &str,
    env: Lookup,
    file: impl FnOnce() -> &'f Result<Option<ConfigFile>>,
) -> Result<Option<Sourced>> {
    if let Some(value) = env(name)? {
        return Ok(Some(Sourced {
            value,
            origin: Origin::Environment,
        }));
    }
    let Some(setting) = find(name) else {
        return Ok(None);
    };
    match file() {
        Err(e) => Err(e.clone()),
        Ok(None) => Ok(None),
        Ok(Some(f)) => Ok(f.value(setting)?.map(|value| Sourced {
            value,
            origin: Origin::File(f.path().to_owned()),
        })),
    }
}

/// [`lookup`] for a path setting (`NIXL_PLUGIN_DIR`): the environment's value is taken as it
/// is, without requiring UTF-8.
pub fn lookup_os(name: &str) -> Result<Option<OsString>> {
    match std::env::var_os(name) {
        Some(v) if !v.is_empty() || !name.starts_with(EMPTY_IS_UNSET_PREFIX) => Ok(Some(v)),
        _ => Ok(lookup(name)?.map(|s| OsString::from(s.value))),
    }
}

/// One setting's effective value and its origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    /// The setting.
    pub setting: &'static Setting,
    /// Its value; with origin [`Origin::Default`], the default (`None`: unset).
    pub value: Option<String>,
    /// Where the value came from.
    pub origin: Origin,
}

/// Looks a setting up as a collector does: in the process environment (an empty
/// `NIXL_TELEMETRY_*` value is unset, [`crate::env::unset_if_empty`]), else, for a setting this
/// library knows ([`SETTINGS`]), in NIXL's configuration file: [`lookup`] without the origin,
/// the [`Lookup`] every parser of a collector's settings is given. An error when the value is
/// not UTF-8, or when the file is needed and cannot be read or gives the wrong type.
///
/// In a plug-in whose host offers the settings service ([`route_to_host`]), the host looks it
/// up: the process reads its configuration file once, whichever part of it asks first.
pub fn process_settings(name: &str) -> Result<Option<String>> {
    if let Some(host_lookup) = HOST_LOOKUP.get() {
        return host_lookup(name);
    }
    Ok(lookup(name)?.map(|s| s.value))
}

/// A lookup by the host's rule, in a plug-in's copy of this crate (see [`route_to_host`]).
pub type HostLookup = fn(&str) -> Result<Option<String>>;

/// The host's lookup, once a plug-in has routed its settings there.
static HOST_LOOKUP: OnceLock<HostLookup> = OnceLock::new();

/// Makes [`process_settings`] ask the host through `lookup` from now on (the plug-in side of the
/// host services, `crate::plugin::services`, calls it; the first lookup given stays).
pub fn route_to_host(lookup: HostLookup) {
    let _ = HOST_LOOKUP.set(lookup);
}

/// What the options of `nixl_telemetry_create_with_options` give a setting, by name (`None`
/// for a setting they leave unset); see `config::Options::value_of`.
pub type OptionValue<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The effective value of every setting of [`SETTINGS`] for a collector created with options
/// giving `option` (none at all: as `nixl_telemetry_create` would see them), in table order.
/// An error when the configuration file cannot be read or holds a value of the wrong type for
/// a setting the environment does not override.
pub fn effective(option: OptionValue) -> Result<Vec<Effective>> {
    SETTINGS
        .iter()
        .map(|setting| {
            let sourced = match option(setting.name) {
                Some(value) => Some(Sourced {
                    value,
                    origin: Origin::Option,
                }),
                None => lookup(setting.name)?,
            };
            Ok(match sourced {
                Some(Sourced { value, origin }) => Effective {
                    setting,
                    value: Some(value),
                    origin,
                },
                None => Effective {
                    setting,
                    value: setting.default.map(str::to_owned),
                    origin: Origin::Default,
                },
            })
        })
        .collect()
}

/// The file this process reads settings from (`None`: none was found), or why it cannot.
pub fn config_file_path() -> Result<Option<PathBuf>> {
    match file::process_file() {
        Ok(f) => Ok(f.as_ref().map(|f| f.path().to_owned())),
        Err(e) => Err(e.clone()),
    }
}

/// Checks every value set in a source (not the defaults) for its kind, with the error the
/// setting's reader would give (including settings only an exporter that is not chosen reads),
/// after the configuration file itself. `option` as for [`effective`].
pub fn check_kinds(option: OptionValue) -> Result<()> {
    for e in effective(option)? {
        if let (Some(value), false) = (&e.value, e.origin == Origin::Default) {
            e.setting
                .kind
                .validate(e.setting.name, value)
                .map_err(|err| with_file_sources(err, option))?;
        }
    }
    Ok(())
}

/// Whether `message` names variable `name` as a whole word (`NIXL_TELEMETRY_ENABLE` is not
/// named by `NIXL_TELEMETRY_ENABLED_METRICS`).
fn names(message: &str, name: &str) -> bool {
    let is_name_char = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
    message.match_indices(name).any(|(at, _)| {
        let before = message[..at].chars().next_back();
        let after = message[at + name.len()..].chars().next();
        !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
    })
}

/// Adds to `error`, for every setting it names whose value came from the configuration file
/// (and not from an option: `option` as for [`effective`]), which file that was: `...
/// (NIXL_TELEMETRY_BUFFER_SIZE is set in /etc/nixl.cfg)`. Errors that already name the file
/// are left as they are.
pub fn with_file_sources(mut error: Error, option: OptionValue) -> Error {
    for setting in SETTINGS {
        if !names(&error.message, setting.name) || option(setting.name).is_some() {
            continue;
        }
        if let Ok(Some(Sourced {
            origin: Origin::File(path),
            ..
        })) = lookup(setting.name)
        {
            let path = path.display().to_string();
            if !error.message.contains(&path) {
                error.message = format!("{} ({} is set in {path})", error.message, setting.name);
            }
        }
    }
    error
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::env::fixed_env;

    fn parsed(text: &str) -> Result<Option<ConfigFile>> {
        ConfigFile::parse(Path::new("/etc/nixl.cfg"), text).map(Some)
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let file = parsed("NIXL_TELEMETRY_DIR = '/from-file'\nNIXL_TELEMETRY_ENABLE = true");
        let env = fixed_env(&[("NIXL_TELEMETRY_DIR", "/from-env"), ("LOCAL_RANK", "3")]);
        let get = |name: &str| lookup_in(name, &env, || &file);
        assert_eq!(
            get("NIXL_TELEMETRY_DIR"),
            Ok(Some(Sourced {
                value: "/from-env".into(),
                origin: Origin::Environment
            }))
        );
        assert_eq!(
            get("NIXL_TELEMETRY_ENABLE"),
            Ok(Some(Sourced {
                value: "true".into(),
                origin: Origin::File("/etc/nixl.cfg".into())
            }))
        );
        assert_eq!(get("NIXL_TELEMETRY_EXPORTER"), Ok(None));
        // Names outside the table come from the environment only.
        assert_eq!(get("LOCAL_RANK").unwrap().unwrap().value, "3");
        let other = parsed("DYN_FPM_TRACE = 'x'");
        assert_eq!(lookup_in("DYN_FPM_TRACE", &env, || &other), Ok(None));
    }

    #[test]
    fn the_file_is_consulted_only_for_what_the_environment_leaves_unset() {
        let broken: Result<Option<ConfigFile>> = Err(Error::invalid("/x.cfg:1:1: broken"));
        let env = fixed_env(&[("NIXL_TELEMETRY_DIR", "/from-env")]);
        assert_eq!(
            lookup_in("NIXL_TELEMETRY_DIR", &env, || &broken)
                .unwrap()
                .unwrap()
                .value,
            "/from-env"
        );
        assert_eq!(
            lookup_in("NIXL_TELEMETRY_ENABLE", &env, || &broken),
            broken.clone().map(|_| None)
        );
        // A value of the wrong type behind an environment value is never looked at.
        let wrong = parsed("NIXL_TELEMETRY_DIR = 1");
        assert!(lookup_in("NIXL_TELEMETRY_DIR", &env, || &wrong).is_ok());
        assert!(lookup_in("NIXL_TELEMETRY_DIR", &fixed_env(&[]), || &wrong).is_err());
    }

    #[test]
    fn an_empty_telemetry_variable_lets_the_file_apply() {
        // The environment lookup applies the empty-is-unset rule (as `environment` does).
        let raw = fixed_env(&[("NIXL_TELEMETRY_DIR", ""), ("NIXL_LOG_LEVEL", "")]);
        let env = |name: &str| Ok(crate::env::unset_if_empty(name, raw(name)?));
        let file = parsed("NIXL_TELEMETRY_DIR = '/from-file'\nNIXL_LOG_LEVEL = 'DEBUG'");
        assert_eq!(
            lookup_in("NIXL_TELEMETRY_DIR", &env, || &file)
                .unwrap()
                .unwrap()
                .value,
            "/from-file"
        );
        // NIXL_LOG_LEVEL keeps its own rule: an empty value is a value.
        assert_eq!(
            lookup_in("NIXL_LOG_LEVEL", &env, || &file)
                .unwrap()
                .unwrap()
                .value,
            ""
        );
    }

    #[test]
    fn kinds_validate_as_the_readers_parse() {
        assert!(Kind::Bool.validate("V", "enable").is_ok());
        assert!(Kind::Bool
            .validate("V", "2")
            .unwrap_err()
            .message
            .contains("V='2'"));
        assert!(Kind::Unsigned.validate("V", "0x10").is_ok());
        assert!(Kind::Millis
            .validate("V", "100ms")
            .unwrap_err()
            .message
            .contains("V='100ms'"));
        assert!(Kind::Text.validate("V", "").is_ok());
    }

    #[test]
    fn names_are_matched_as_whole_words() {
        assert!(names(
            "NIXL_TELEMETRY_ENABLE='x' is bad",
            "NIXL_TELEMETRY_ENABLE"
        ));
        assert!(names("bad (NIXL_TELEMETRY_DIR)", "NIXL_TELEMETRY_DIR"));
        assert!(!names(
            "NIXL_TELEMETRY_ENABLED_METRICS='x'",
            "NIXL_TELEMETRY_ENABLE"
        ));
        assert!(!names(
            "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT",
            "NIXL_TELEMETRY_PROMETHEUS_PORT"
        ));
    }

    #[test]
    fn every_setting_is_listed_once_with_a_default_of_its_kind() {
        for (i, s) in SETTINGS.iter().enumerate() {
            assert_eq!(
                find(s.name),
                Some(&SETTINGS[i]),
                "{} is listed twice",
                s.name
            );
            if let Some(d) = s.default {
                assert_eq!(s.kind.validate(s.name, d), Ok(()), "{}", s.name);
            }
        }
    }
}
