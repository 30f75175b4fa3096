//! The core configuration of a collector from the `NIXL_TELEMETRY_*` environment, parsed
//! strictly ([`crate::env`]): whether telemetry is requested, the buffer size, the flush period,
//! the metric allowlist and the exporter ([`ExporterChoice`], whose rule lives with the
//! exporters).

use std::time::Duration;

use crate::env::{parse_u64, read_bool, Lookup};
use crate::error::{Error, Result};
use crate::exporter::{ExporterChoice, ENV_DIR, ENV_EXPORTER};
use crate::filter::MetricMask;
use crate::settings::{self, process_settings};

/// `NIXL_TELEMETRY_ENABLE`: request telemetry (boolean word).
pub const ENV_ENABLE: &str = settings::ENABLE.name;
/// `NIXL_TELEMETRY_BUFFER_SIZE`: staging-queue capacity and ring size in events.
pub const ENV_BUFFER_SIZE: &str = settings::BUFFER_SIZE.name;
/// `NIXL_TELEMETRY_RUN_INTERVAL`: flush period in milliseconds.
pub const ENV_RUN_INTERVAL: &str = settings::RUN_INTERVAL.name;
/// `NIXL_TELEMETRY_ENABLED_METRICS`: comma-separated glob allowlist of event names.
pub const ENV_ENABLED_METRICS: &str = settings::ENABLED_METRICS.name;

/// Default staging-queue capacity and ring size, in events.
pub const DEFAULT_BUFFER_SIZE: usize = settings::BUFFER_SIZE.default_u64() as usize;
/// Largest accepted buffer size, in events (2^24 events = 256 MiB per buffer): larger values
/// are refused with an error rather than risking an allocation failure inside the agent.
pub const MAX_BUFFER_SIZE: usize = 1 << 24;
/// Default flush period.
pub const DEFAULT_RUN_INTERVAL: Duration =
    Duration::from_millis(settings::RUN_INTERVAL.default_u64());

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
        Config::from_lookup(&process_settings)
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
        let exporter = ExporterChoice::from_lookup(env)?;
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

/// Settings given programmatically (`nixl_telemetry_create_with_options`, the C++
/// `nixlTelemetry(agent_name, exporter_name)` constructor). Each one that is `Some` replaces the
/// variable it names; every other setting is still read from the environment, with the same
/// parsing and validation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Replaces `NIXL_TELEMETRY_EXPORTER` (an empty name counts as unset, as in the variable).
    pub exporter: Option<String>,
    /// Replaces `NIXL_TELEMETRY_BUFFER_SIZE`.
    pub buffer_size: Option<u64>,
    /// Replaces `NIXL_TELEMETRY_RUN_INTERVAL` (milliseconds).
    pub run_interval_ms: Option<u64>,
    /// Replaces `NIXL_TELEMETRY_DIR`.
    pub dir: Option<String>,
    /// Replaces `NIXL_TELEMETRY_ENABLED_METRICS`.
    pub enabled_metrics: Option<String>,
}

impl Options {
    /// The value this set of options gives variable `name`, if any (an empty string is unset,
    /// as an empty variable is).
    pub(crate) fn value_of(&self, name: &str) -> Option<String> {
        let text = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        match name {
            ENV_EXPORTER => text(&self.exporter),
            ENV_BUFFER_SIZE => self.buffer_size.map(|n| n.to_string()),
            ENV_RUN_INTERVAL => self.run_interval_ms.map(|n| n.to_string()),
            ENV_DIR => text(&self.dir),
            ENV_ENABLED_METRICS => text(&self.enabled_metrics),
            _ => None,
        }
    }

    /// Reads and validates the configuration: these options first, then `env`.
    pub fn config(&self, env: Lookup) -> Result<Config> {
        let overlay = |name: &str| match self.value_of(name) {
            Some(v) => Ok(Some(v)),
            None => env(name),
        };
        Config::from_lookup(&overlay)
    }

    /// The effective value and origin of every setting for a collector created with these
    /// options ([`settings::effective`]).
    pub fn effective(&self) -> Result<Vec<settings::Effective>> {
        settings::effective(&|name| self.value_of(name))
    }

    /// [`Options::effective`], but a value of the wrong type in the file is marked on its entry
    /// instead of failing ([`settings::effective_all`]).
    pub fn effective_all(&self) -> Result<Vec<settings::Effective>> {
        settings::effective_all(&|name| self.value_of(name))
    }

    /// Validates the configuration a collector created with these options would get, without
    /// creating anything: the configuration file, every set value's kind (including settings
    /// only an exporter that is not chosen reads), and the core configuration with the exporter
    /// choice (the `TRACE` settings included): the error is the one creation would give. Then
    /// the file's keys: a key that looks like a setting but is none (a typo) or that the file
    /// cannot set (`DYN_FPM_*`), which creation only warns about, is an error here, one line
    /// each ([`settings::unknown_file_keys`]).
    pub fn check(&self) -> Result<Config> {
        settings::check_kinds(&|name| self.value_of(name))?;
        let config = self
            .config(&process_settings)
            .map_err(|err| self.with_file_sources(err))?;
        let unknown = settings::unknown_file_keys()?;
        if !unknown.is_empty() {
            return Err(Error::invalid(unknown.join("\n")));
        }
        Ok(config)
    }

    /// `error`, naming the configuration file for every setting it names that came from the
    /// file rather than from these options ([`settings::with_file_sources`]).
    pub fn with_file_sources(&self, error: Error) -> Error {
        settings::with_file_sources(error, &|name| self.value_of(name))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::EventType;

    /// Builds a lookup over fixed pairs.
    pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>> {
        crate::env::fixed_env(pairs)
    }

    fn config(pairs: &[(&str, &str)]) -> Result<Config> {
        Config::from_lookup(&env_of(pairs))
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
    fn empty_values_are_unset() {
        // As the process environment reads them (`process_settings` applies the rule).
        let raw = env_of(&[
            (ENV_ENABLE, ""),
            (ENV_BUFFER_SIZE, ""),
            (ENV_RUN_INTERVAL, ""),
            (ENV_ENABLED_METRICS, ""),
            (crate::exporter::ENV_EXPORTER, ""),
            (crate::exporter::ENV_DIR, ""),
        ]);
        let env = |name: &str| Ok(crate::env::unset_if_empty(name, raw(name)?));
        assert_eq!(Config::from_lookup(&env), Ok(Config::default()));
        assert_eq!(telemetry_requested(&env, true, "a"), Ok(true));
        assert_eq!(telemetry_requested(&env, false, "a"), Ok(false));
        // The parsers alone still refuse an empty value, for a lookup without the rule.
        assert!(config(&[(ENV_BUFFER_SIZE, "")]).is_err());
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

    #[test]
    fn options_replace_only_the_variables_they_set() {
        let env = env_of(&[(ENV_BUFFER_SIZE, "64"), (ENV_RUN_INTERVAL, "7")]);
        let options = Options {
            exporter: Some("BUFFER".into()),
            dir: Some("/tmp/opts".into()),
            buffer_size: Some(128),
            ..Options::default()
        };
        let c = options.config(&env).unwrap();
        assert_eq!(c.buffer_size, 128);
        assert_eq!(c.run_interval, Duration::from_millis(7));
        assert_eq!(
            c.exporter,
            ExporterChoice::Buffer("/tmp/opts".into(), crate::ring::layout::V4)
        );
        assert_eq!(Options::default().config(&env).unwrap().buffer_size, 64);
        let empty = Options {
            exporter: Some(String::new()),
            ..Options::default()
        };
        let env = env_of(&[(ENV_EXPORTER, "NOP"), (ENV_DIR, "/tmp/opts")]);
        assert_eq!(empty.config(&env).unwrap().exporter, ExporterChoice::Nop);
        let bad = Options {
            run_interval_ms: Some(0),
            ..Options::default()
        };
        assert!(bad.config(&env).is_err());
    }

    #[test]
    fn core_defaults_match_the_readers() {
        use crate::config::{DEFAULT_BUFFER_SIZE, DEFAULT_RUN_INTERVAL};
        use crate::exporter::trace::{TraceExporterConfig, DEFAULT_TRACE_PATH};
        use crate::settings::find;
        let default = |name: &str| find(name).unwrap().default.unwrap();
        assert_eq!(
            default("NIXL_TELEMETRY_BUFFER_SIZE"),
            DEFAULT_BUFFER_SIZE.to_string()
        );
        assert_eq!(
            default("NIXL_TELEMETRY_RUN_INTERVAL"),
            DEFAULT_RUN_INTERVAL.as_millis().to_string()
        );
        let trace = TraceExporterConfig::default();
        assert_eq!(default("NIXL_TELEMETRY_TRACE_PATH"), DEFAULT_TRACE_PATH);
        assert_eq!(
            default("NIXL_TELEMETRY_TRACE_ROLL_BYTES"),
            trace.roll_bytes.to_string()
        );
        assert_eq!(
            default("NIXL_TELEMETRY_TRACE_MAX_SEGMENTS"),
            trace.max_segments.to_string()
        );
    }
}
