//! What `nixl-telemetry config` and a collector's creation report about the settings: each one's
//! effective value and origin ([`effective`]), the values of the wrong kind ([`check_kinds`]),
//! the configuration file's unknown keys ([`unknown_file_keys`]), and errors that say which file
//! a value came from ([`with_file_sources`]).

use std::path::PathBuf;

use super::file;
use super::lookup::{lookup, Origin, Sourced};
use super::setting::Setting;
use super::table::SETTINGS;
use crate::error::{Error, Result};

/// One setting's effective value and its origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    /// The setting.
    pub setting: &'static Setting,
    /// Its value; with origin [`Origin::Default`], the default (`None`: unset).
    pub value: Option<String>,
    /// Where the value came from.
    pub origin: Origin,
    /// Why the value cannot be used (a file value of the wrong type: the error a collector's
    /// creation would give), from [`effective_all`]; `value` is then the file's text.
    pub problem: Option<String>,
}

/// What the options of `nixl_telemetry_create_with_options` give a setting, by name (`None`
/// for a setting they leave unset); see `config::Options::value_of`.
pub type OptionValue<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The effective value of every setting of [`SETTINGS`] for a collector created with options
/// giving `option` (none at all: as `nixl_telemetry_create` would see them), in table order.
/// An error when the configuration file cannot be read or holds a value of the wrong type for
/// a setting the environment does not override (the first such value: [`effective_all`] marks
/// them all instead).
pub fn effective(option: OptionValue) -> Result<Vec<Effective>> {
    let all = effective_all(option)?;
    if let Some(problem) = all.iter().find_map(|e| e.problem.clone()) {
        return Err(Error::invalid(problem));
    }
    Ok(all)
}

/// [`effective`], but a value that cannot be used (of the wrong type in the file) is not an
/// error: its entry carries the problem ([`Effective::problem`]) and the value as the file
/// writes it, so that every setting can be shown with the faulty ones marked. An error only
/// when the configuration file cannot be read, or a variable is not UTF-8.
pub fn effective_all(option: OptionValue) -> Result<Vec<Effective>> {
    SETTINGS
        .iter()
        .map(|setting| {
            let sourced = match option(setting.name) {
                Some(value) => Some(Sourced {
                    value,
                    origin: Origin::Option,
                }),
                None => match lookup(setting.name) {
                    Ok(sourced) => sourced,
                    Err(e) => {
                        // The file itself, or a variable that is not UTF-8: nothing to show.
                        let Ok(Some(file)) = file::process_file() else {
                            return Err(e);
                        };
                        let Some(written) = file.written(setting.name) else {
                            return Err(e);
                        };
                        return Ok(Effective {
                            setting,
                            value: Some(written),
                            origin: Origin::File(file.path().to_owned()),
                            problem: Some(e.message),
                        });
                    }
                },
            };
            Ok(match sourced {
                Some(Sourced { value, origin }) => Effective {
                    setting,
                    value: Some(value),
                    origin,
                    problem: None,
                },
                None => Effective {
                    setting,
                    value: setting.default.map(str::to_owned),
                    origin: Origin::Default,
                    problem: None,
                },
            })
        })
        .collect()
}

/// The messages about the configuration file's keys that look like settings but are none, or
/// that the file cannot set ([`file::ConfigFile::unknown_keys`]); none without a file. An error
/// when the file cannot be read.
pub fn unknown_file_keys() -> Result<Vec<String>> {
    match file::process_file() {
        Ok(Some(f)) => Ok(f.unknown_keys()),
        Ok(None) => Ok(Vec::new()),
        Err(e) => Err(e.clone()),
    }
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
    use super::*;

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
}
