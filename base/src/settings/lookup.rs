//! Where a setting's value comes from: [`lookup`] reads the process environment, then, for a
//! setting of the table, NIXL's configuration file, and says which ([`Origin`]).

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use super::file::{self, ConfigFile};
use super::table::find;
use crate::env::{Lookup, EMPTY_IS_UNSET_PREFIX};
use crate::error::Result;

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
/// else, for a setting of [`SETTINGS`](super::SETTINGS), from this process's configuration file (read once).
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::env::fixed_env;
    use crate::error::Error;

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
}
