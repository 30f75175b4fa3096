//! Reading settings strictly: the shape of the lookup every parser takes ([`Lookup`]: the
//! process's settings, [`crate::settings::process_settings`], or fixed pairs in tests), the
//! process environment alone ([`environment`]), and NIXL's boolean and integer syntax. A value
//! that is set but invalid is an error that names the variable and the value, never a silent
//! default.

use crate::error::{Error, Result};

/// Reads one variable: `Ok(None)` when unset, an error when set but not valid UTF-8.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Result<Option<String>>;

/// Variables whose empty value means unset ([`unset_if_empty`]).
pub const EMPTY_IS_UNSET_PREFIX: &str = "NIXL_TELEMETRY_";

/// The rule for empty values: a `NIXL_TELEMETRY_*` variable set to the empty string counts as
/// unset (deployment templates such as Helm charts render unset settings as `VAR=""`), so its
/// default applies. Other variables (`NIXL_LOG_LEVEL`, `NIXL_PLUGIN_DIR`, `DYN_FPM_*`) keep
/// their own rules.
pub fn unset_if_empty(name: &str, value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty() || !name.starts_with(EMPTY_IS_UNSET_PREFIX))
}

/// Looks a variable up in the process environment alone; an empty `NIXL_TELEMETRY_*` value is
/// unset ([`unset_if_empty`]).
pub fn environment(name: &str) -> Result<Option<String>> {
    let value = match std::env::var_os(name) {
        None => None,
        Some(v) => Some(
            v.into_string()
                .map_err(|v| Error::invalid(format!("{name}={v:?} is not valid UTF-8")))?,
        ),
    };
    Ok(unset_if_empty(name, value))
}

/// The words NIXL accepts for true and false (case-insensitive).
const TRUE_WORDS: [&str; 6] = ["y", "yes", "on", "true", "enable", "1"];
const FALSE_WORDS: [&str; 6] = ["n", "no", "off", "false", "disable", "0"];

/// Parses a boolean word (`y/yes/on/true/enable/1`, `n/no/off/false/disable/0`,
/// case-insensitive) from variable `name`.
pub fn parse_bool(name: &str, value: &str) -> Result<bool> {
    let lower = value.to_ascii_lowercase();
    if TRUE_WORDS.contains(&lower.as_str()) {
        Ok(true)
    } else if FALSE_WORDS.contains(&lower.as_str()) {
        Ok(false)
    } else {
        Err(Error::invalid(format!(
            "{name}='{value}' is not a boolean: use one of {} to enable or {} to disable",
            TRUE_WORDS.join("/"),
            FALSE_WORDS.join("/")
        )))
    }
}

/// Parses an unsigned integer as NIXL does: decimal, or hexadecimal with `0x`/`0X`; no sign,
/// no whitespace, no trailing characters, no overflow.
pub fn parse_u64(name: &str, value: &str) -> Result<u64> {
    let (digits, radix) = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => (hex, 16),
        None => (value, 10),
    };
    let well_formed = !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
    if !well_formed {
        return Err(Error::invalid(format!(
            "{name}='{value}' is not an unsigned integer (decimal or 0x hexadecimal, no sign, \
             spaces or suffix)"
        )));
    }
    u64::from_str_radix(digits, radix)
        .map_err(|_| Error::invalid(format!("{name}='{value}' is out of range")))
}

/// Reads an optional boolean variable.
pub fn read_bool(env: Lookup, name: &str) -> Result<Option<bool>> {
    env(name)?.map(|v| parse_bool(name, &v)).transpose()
}

/// A lookup over fixed `(name, value)` pairs instead of the process environment, for the
/// `from_lookup` constructors in tests: the raw parser input, without the empty-is-unset rule
/// of [`crate::settings::process_settings`], so parsers can be tested on empty values. A test hook (feature
/// `test-util`).
#[cfg(any(test, feature = "test-util"))]
pub fn fixed_env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| Ok(map.get(k).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_accept_nixl_words_only() {
        for w in ["y", "YES", "On", "true", "ENABLE", "1"] {
            assert_eq!(parse_bool("V", w), Ok(true), "{w}");
        }
        for w in ["n", "No", "OFF", "false", "Disable", "0"] {
            assert_eq!(parse_bool("V", w), Ok(false), "{w}");
        }
        for w in ["", "2", "maybe", " yes", "yes ", "tru"] {
            let e = parse_bool("NIXL_X", w).unwrap_err();
            assert!(
                e.message.contains(&format!("NIXL_X='{w}'")),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn empty_telemetry_variables_are_unset() {
        let some = |v: &str| Some(v.to_owned());
        for name in [
            "NIXL_TELEMETRY_ENABLE",
            "NIXL_TELEMETRY_DIR",
            "NIXL_TELEMETRY_X",
        ] {
            assert_eq!(unset_if_empty(name, some("")), None, "{name}");
            assert_eq!(unset_if_empty(name, some(" ")), some(" "), "{name}");
            assert_eq!(unset_if_empty(name, some("1")), some("1"), "{name}");
            assert_eq!(unset_if_empty(name, None), None, "{name}");
        }
        for name in ["NIXL_LOG_LEVEL", "NIXL_PLUGIN_DIR", "DYN_FPM_TRACE"] {
            assert_eq!(unset_if_empty(name, some("")), some(""), "{name}");
        }
        // Through the process environment (a name no other test uses).
        std::env::set_var("NIXL_TELEMETRY_ENV_RS_UNIT_TEST", "");
        assert_eq!(
            crate::settings::process_settings("NIXL_TELEMETRY_ENV_RS_UNIT_TEST"),
            Ok(None)
        );
        std::env::remove_var("NIXL_TELEMETRY_ENV_RS_UNIT_TEST");
    }

    #[test]
    fn integers_are_strict() {
        assert_eq!(parse_u64("V", "4096"), Ok(4096));
        assert_eq!(parse_u64("V", "0x1000"), Ok(4096));
        assert_eq!(parse_u64("V", "0X10"), Ok(16));
        for bad in [
            "", "-1", "+1", " 1", "1 ", "12abc", "0x", "1.5", "100ms", "0xg",
        ] {
            let e = parse_u64("NIXL_V", bad).unwrap_err();
            assert!(
                e.message.contains(&format!("NIXL_V='{bad}'")),
                "{}",
                e.message
            );
        }
        assert!(parse_u64("V", "18446744073709551616")
            .unwrap_err()
            .message
            .contains("out of range"));
    }
}
