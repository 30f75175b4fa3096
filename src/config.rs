//! Configuration from the `NIXL_TELEMETRY_*` environment, parsed strictly: a value that is set
//! but invalid is an error that names the variable and the value, never a silent default.
//!
//! Every parser takes a lookup function rather than reading the process environment directly,
//! so tests can supply their own environment without touching global state.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::filter::MetricMask;

/// `NIXL_TELEMETRY_ENABLE`: request telemetry (boolean word).
pub const ENV_ENABLE: &str = "NIXL_TELEMETRY_ENABLE";
/// `NIXL_TELEMETRY_BUFFER_SIZE`: staging-queue capacity and ring size in events.
pub const ENV_BUFFER_SIZE: &str = "NIXL_TELEMETRY_BUFFER_SIZE";
/// `NIXL_TELEMETRY_RUN_INTERVAL`: flush period in milliseconds.
pub const ENV_RUN_INTERVAL: &str = "NIXL_TELEMETRY_RUN_INTERVAL";
/// `NIXL_TELEMETRY_EXPORTER`: exporter name (`BUFFER`, `NOP` or a plug-in name).
pub const ENV_EXPORTER: &str = "NIXL_TELEMETRY_EXPORTER";
/// `NIXL_TELEMETRY_DIR`: directory of the BUFFER ring files.
pub const ENV_DIR: &str = "NIXL_TELEMETRY_DIR";
/// `NIXL_TELEMETRY_ENABLED_METRICS`: comma-separated glob allowlist of event names.
pub const ENV_ENABLED_METRICS: &str = "NIXL_TELEMETRY_ENABLED_METRICS";

/// Default staging-queue capacity and ring size, in events.
pub const DEFAULT_BUFFER_SIZE: usize = 4096;
/// Largest accepted buffer size, in events (2^24 events = 256 MiB per buffer): larger values
/// are refused with an error rather than risking an allocation failure inside the agent.
pub const MAX_BUFFER_SIZE: usize = 1 << 24;
/// Default flush period.
pub const DEFAULT_RUN_INTERVAL: Duration = Duration::from_millis(100);

/// Reads one variable: `Ok(None)` when unset, an error when set but not valid UTF-8.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Result<Option<String>>;

/// Looks a variable up in the process environment.
pub fn process_env(name: &str) -> Result<Option<String>> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) => v
            .into_string()
            .map(Some)
            .map_err(|v| Error::invalid(format!("{name}={v:?} is not valid UTF-8"))),
    }
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

/// Whether telemetry is requested, given `NIXL_TELEMETRY_ENABLE` and the agent's
/// `capture_telemetry` flag: the variable decides when it is set; the flag decides otherwise.
/// A false variable with a true flag logs one warning, as NIXL does.
pub fn telemetry_requested(env: Lookup, capture_telemetry: bool, agent: &str) -> Result<bool> {
    match read_bool(env, ENV_ENABLE)? {
        Some(true) => Ok(true),
        Some(false) => {
            if capture_telemetry {
                log::warn!(
                    "NIXL telemetry is disabled ({ENV_ENABLE} is false); ignoring telemetry \
                     requested through agent config for agent '{agent}'"
                );
            }
            Ok(false)
        }
        None => Ok(capture_telemetry),
    }
}

/// Where the collector sends its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExporterChoice {
    /// The shared-memory ring in this directory.
    Buffer(PathBuf),
    /// Collect only; nothing is written.
    Nop,
    /// A plug-in exporter by (case-sensitive) name.
    Plugin(String),
    /// The built-in gzip JSONL trace exporter (`TRACE`) with its `NIXL_TELEMETRY_TRACE_*`
    /// settings.
    Trace(crate::trace::TraceExporterConfig),
}

/// The validated core configuration of one collector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Staging-queue capacity (and ring size for BUFFER), in events.
    pub buffer_size: usize,
    /// Flush period.
    pub run_interval: Duration,
    /// The exporter to create.
    pub exporter: ExporterChoice,
    /// Which event types are recorded.
    pub enabled_metrics: MetricMask,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            buffer_size: DEFAULT_BUFFER_SIZE,
            run_interval: DEFAULT_RUN_INTERVAL,
            exporter: ExporterChoice::Nop,
            enabled_metrics: MetricMask::ALL,
        }
    }
}

impl Config {
    /// Reads and validates every core variable from the process environment.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(&process_env)
    }

    /// Reads and validates every core variable through `env`.
    pub fn from_lookup(env: Lookup) -> Result<Config> {
        let buffer_size = match env(ENV_BUFFER_SIZE)? {
            None => DEFAULT_BUFFER_SIZE,
            Some(v) => {
                let n = parse_u64(ENV_BUFFER_SIZE, &v)?;
                if n == 0 {
                    return Err(Error::invalid(format!("{ENV_BUFFER_SIZE} cannot be 0")));
                }
                if n > MAX_BUFFER_SIZE as u64 {
                    return Err(Error::invalid(format!(
                        "{ENV_BUFFER_SIZE}={v} is too large (at most {MAX_BUFFER_SIZE} events)"
                    )));
                }
                n as usize
            }
        };
        let run_interval = match env(ENV_RUN_INTERVAL)? {
            None => DEFAULT_RUN_INTERVAL,
            Some(v) => {
                let ms = parse_u64(ENV_RUN_INTERVAL, &v)?;
                if ms == 0 {
                    return Err(Error::invalid(format!(
                        "{ENV_RUN_INTERVAL}=0 is not a flush period: use at least 1 (milliseconds)"
                    )));
                }
                Duration::from_millis(ms)
            }
        };
        let exporter = choose_exporter(env(ENV_EXPORTER)?, env(ENV_DIR)?, env)?;
        let enabled_metrics = match env(ENV_ENABLED_METRICS)? {
            None => MetricMask::ALL,
            Some(list) => MetricMask::from_allowlist(&list),
        };
        Ok(Config {
            buffer_size,
            run_interval,
            exporter,
            enabled_metrics,
        })
    }
}

/// The exporter rule: a non-empty `NIXL_TELEMETRY_EXPORTER` names it; otherwise BUFFER when
/// `NIXL_TELEMETRY_DIR` is set, else NOP. `TRACE` reads its own settings through `env`.
fn choose_exporter(
    name: Option<String>,
    dir: Option<String>,
    env: Lookup,
) -> Result<ExporterChoice> {
    let buffer = |dir: Option<String>| match dir {
        Some(d) if !d.is_empty() => Ok(ExporterChoice::Buffer(PathBuf::from(d))),
        Some(_) => Err(Error::invalid(format!(
            "{ENV_DIR} is set but empty: set it to the directory for telemetry ring files"
        ))),
        None => Err(Error::invalid(format!(
            "{ENV_EXPORTER}=BUFFER needs {ENV_DIR} (the directory for telemetry ring files)"
        ))),
    };
    match name.as_deref() {
        Some("BUFFER") => buffer(dir),
        Some("NOP") => Ok(ExporterChoice::Nop),
        Some("TRACE") => Ok(ExporterChoice::Trace(
            crate::trace::TraceExporterConfig::from_lookup(env)?,
        )),
        Some(n) if !n.is_empty() => Ok(ExporterChoice::Plugin(n.to_owned())),
        _ if dir.is_some() => {
            log::info!("No telemetry exporter was specified, using default: BUFFER");
            buffer(dir)
        }
        _ => {
            log::info!(
                "No telemetry sink configured; using in-process telemetry collection via NOP"
            );
            Ok(ExporterChoice::Nop)
        }
    }
}

/// A lookup over fixed `(name, value)` pairs instead of the process environment: for tests,
/// and for hosts that configure telemetry programmatically (use it with the `from_lookup`
/// constructors).
pub fn fixed_env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| Ok(map.get(k).cloned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::EventType;

    /// Builds a lookup over fixed pairs.
    pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>> {
        fixed_env(pairs)
    }

    fn config(pairs: &[(&str, &str)]) -> Result<Config> {
        Config::from_lookup(&env_of(pairs))
    }

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

    #[test]
    fn defaults_select_nop() {
        let c = config(&[]).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn buffer_size_and_interval_are_validated() {
        assert_eq!(config(&[(ENV_BUFFER_SIZE, "32")]).unwrap().buffer_size, 32);
        for (var, bad) in [
            (ENV_BUFFER_SIZE, "0"),
            (ENV_BUFFER_SIZE, "-4"),
            (ENV_BUFFER_SIZE, "abc"),
            (ENV_BUFFER_SIZE, "64k"),
            (ENV_BUFFER_SIZE, "99999999999"),
            (ENV_RUN_INTERVAL, "0"),
            (ENV_RUN_INTERVAL, "100ms"),
            (ENV_RUN_INTERVAL, "-5"),
        ] {
            let e = config(&[(var, bad)]).unwrap_err();
            assert!(e.message.contains(var), "{}", e.message);
            assert_eq!(e.status, crate::Status::InvalidParam);
        }
        assert_eq!(
            config(&[(ENV_RUN_INTERVAL, "10000")]).unwrap().run_interval,
            Duration::from_secs(10)
        );
    }

    #[test]
    fn exporter_choice_follows_the_rule() {
        let pick = |p: &[(&str, &str)]| config(p).map(|c| c.exporter);
        assert_eq!(
            pick(&[(ENV_DIR, "/tmp/t")]),
            Ok(ExporterChoice::Buffer("/tmp/t".into()))
        );
        assert_eq!(
            pick(&[(ENV_DIR, "/tmp/t"), (ENV_EXPORTER, "")]),
            Ok(ExporterChoice::Buffer("/tmp/t".into()))
        );
        assert_eq!(
            pick(&[(ENV_DIR, "/tmp/t"), (ENV_EXPORTER, "NOP")]),
            Ok(ExporterChoice::Nop)
        );
        assert_eq!(
            pick(&[(ENV_EXPORTER, "prometheus")]),
            Ok(ExporterChoice::Plugin("prometheus".into()))
        );
        assert!(pick(&[(ENV_EXPORTER, "BUFFER")])
            .unwrap_err()
            .message
            .contains(ENV_DIR));
        assert!(pick(&[(ENV_DIR, "")])
            .unwrap_err()
            .message
            .contains(ENV_DIR));
    }

    #[test]
    fn enable_flag_and_capture_flag() {
        let req = |p: &[(&str, &str)], cap| telemetry_requested(&env_of(p), cap, "a");
        assert_eq!(req(&[], false), Ok(false));
        assert_eq!(req(&[], true), Ok(true));
        assert_eq!(req(&[(ENV_ENABLE, "yes")], false), Ok(true));
        assert_eq!(req(&[(ENV_ENABLE, "n")], true), Ok(false));
        assert!(req(&[(ENV_ENABLE, "sometimes")], true)
            .unwrap_err()
            .message
            .contains("NIXL_TELEMETRY_ENABLE='sometimes'"));
    }

    #[test]
    fn enabled_metrics_builds_the_mask() {
        let c = config(&[(ENV_ENABLED_METRICS, " agent_tx_bytes , agent_err_* ")]).unwrap();
        assert!(c.enabled_metrics.contains(EventType::AgentTxBytes));
        assert!(c.enabled_metrics.contains(EventType::AgentErrBackend));
        assert!(!c.enabled_metrics.contains(EventType::AgentRxBytes));
        assert_eq!(
            config(&[(ENV_ENABLED_METRICS, " , ")])
                .unwrap()
                .enabled_metrics,
            MetricMask::ALL
        );
    }
}
