//! FPM trace configuration from the `DYN_FPM_*` environment, with Dynamo's rules:
//!
//! - `DYN_FPM_TRACE` is the master switch: `1/0`, `true/false`, `on/off`, `yes/no`, trimmed and
//!   case-insensitive. Unset means off and no other variable is read; an explicit false also
//!   ignores the other variables (even invalid ones). Any other value, including the empty
//!   string, disables tracing with one warning.
//! - When the switch is on, every other variable is validated, in both modes. If any is invalid,
//!   tracing is off for the whole process, with one warning naming the variable and its value.
//!
//! A value that is not valid UTF-8 counts as invalid (Dynamo treats it as unset and uses the
//! default): an operator who set a variable meant something by it, so tracing stays off rather
//! than silently running with a setting they did not choose.
//!
//! Parsing is pure ([`FpmPolicy::from_lookup`]); the warning is logged by
//! [`FpmPolicy::evaluate`], and [`FpmPolicy::process`] evaluates the process environment
//! once, so a process logs the warning at most once however many producers it opens.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::env::Lookup;
pub use crate::fpm::queue::DEFAULT_QUEUE_MAX_BYTES;
pub use crate::segments::writer::{DEFAULT_MAX_SEGMENTS, DEFAULT_ROLL_BYTES};
use crate::settings::{self, process_settings};

/// `DYN_FPM_TRACE`: the master switch.
pub const ENV_TRACE: &str = settings::DYN_FPM_TRACE;
/// `DYN_FPM_OUTPUT_PATH`: the output prefix.
pub const ENV_OUTPUT_PATH: &str = settings::DYN_FPM_OUTPUT_PATH;
/// `DYN_FPM_MODE`: `sampled` or `full`.
pub const ENV_MODE: &str = settings::DYN_FPM_MODE;
/// `DYN_FPM_SAMPLE_INTERVAL_MS`: the sampling interval in milliseconds.
pub const ENV_SAMPLE_INTERVAL_MS: &str = settings::DYN_FPM_SAMPLE_INTERVAL_MS;
/// `DYN_FPM_JSONL_GZ_ROLL_BYTES`: the uncompressed size at which a segment rolls.
pub const ENV_ROLL_BYTES: &str = settings::DYN_FPM_JSONL_GZ_ROLL_BYTES;
/// `DYN_FPM_MAX_SEGMENTS`: segments kept per producer, the active one included.
pub const ENV_MAX_SEGMENTS: &str = settings::DYN_FPM_MAX_SEGMENTS;
/// `DYN_FPM_QUEUE_MAX_BYTES`: the bytes of recorded payloads a producer's queue holds at most
/// (this library's addition to Dynamo's variables).
pub const ENV_QUEUE_MAX_BYTES: &str = settings::DYN_FPM_QUEUE_MAX_BYTES;

/// Default output prefix.
pub const DEFAULT_OUTPUT_PATH: &str = "/tmp/dynamo-fpm";
/// Default sampling interval.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(5000);

/// How payloads are selected for persistence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// The newest changed payload per (source, worker_id, dp_rank), once per interval.
    Sampled,
    /// Every valid payload, heartbeats included, in arrival order.
    Full,
}

impl CaptureMode {
    /// The lowercase name written in the envelope's `capture_mode`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CaptureMode::Sampled => "sampled",
            CaptureMode::Full => "full",
        }
    }
}

/// A validated, enabled trace configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FpmConfig {
    /// Output prefix (`DYN_FPM_OUTPUT_PATH`, trimmed); a trailing `.jsonl.gz`/`.jsonl` is
    /// removed when segment names are built.
    pub output_path: PathBuf,
    /// Capture mode.
    pub mode: CaptureMode,
    /// Sampling interval (used in sampled mode only; always positive).
    pub sample_interval: Duration,
    /// Roll threshold in uncompressed bytes (positive).
    pub roll_bytes: u64,
    /// Segments kept per producer, the active one included (positive).
    pub max_segments: usize,
    /// Bytes of recorded payloads a producer's queue holds at most (positive); the oldest are
    /// dropped, and counted, to stay under it.
    pub queue_max_bytes: usize,
}

impl Default for FpmConfig {
    fn default() -> Self {
        FpmConfig {
            output_path: PathBuf::from(DEFAULT_OUTPUT_PATH),
            mode: CaptureMode::Sampled,
            sample_interval: DEFAULT_SAMPLE_INTERVAL,
            roll_bytes: DEFAULT_ROLL_BYTES,
            max_segments: DEFAULT_MAX_SEGMENTS,
            queue_max_bytes: DEFAULT_QUEUE_MAX_BYTES,
        }
    }
}

/// The outcome of reading the `DYN_FPM_*` environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FpmPolicy {
    /// Tracing is on with this configuration.
    Enabled(FpmConfig),
    /// Tracing is off: `DYN_FPM_TRACE` is unset or false.
    Off,
    /// Tracing is off because a value is invalid; the message names the variable and value.
    Invalid(String),
}

impl FpmPolicy {
    /// Parses the policy through `env`, without logging.
    pub fn from_lookup(env: Lookup) -> FpmPolicy {
        let switch = match env(ENV_TRACE) {
            Ok(None) => return FpmPolicy::Off,
            Ok(Some(v)) => v,
            Err(e) => return FpmPolicy::Invalid(e.message),
        };
        match parse_switch(&switch) {
            Some(false) => return FpmPolicy::Off,
            Some(true) => {}
            None => {
                return FpmPolicy::Invalid(format!(
                    "{ENV_TRACE}='{switch}' is not one of 1/0, true/false, on/off, yes/no"
                ))
            }
        }
        match read_enabled(env) {
            Ok(config) => FpmPolicy::Enabled(config),
            Err(message) => FpmPolicy::Invalid(message),
        }
    }

    /// Parses the policy through `env` and logs one warning when it is invalid.
    pub fn evaluate(env: Lookup) -> FpmPolicy {
        let policy = FpmPolicy::from_lookup(env);
        policy.warn_if_invalid();
        policy
    }

    /// The one warning about an invalid configuration.
    fn warn_if_invalid(&self) {
        if let FpmPolicy::Invalid(why) = self {
            log::warn!("invalid FPM trace configuration; tracing disabled: {why}");
        }
    }

    /// The policy of this process: the process environment, evaluated (and warned about) once.
    pub fn process() -> &'static FpmPolicy {
        static POLICY: OnceLock<FpmPolicy> = OnceLock::new();
        if let Some(policy) = POLICY.get() {
            return policy;
        }
        crate::logging::init();
        // Worked out before, not inside, the `OnceLock`'s initialisation: reading the settings
        // (or logging) may read NIXL's configuration file, which may be slow, and a child
        // forked meanwhile would wait forever for the parent's thread to finish the `OnceLock`.
        // Should two threads work it out at once, the one that publishes it warns.
        let first = POLICY
            .set(FpmPolicy::from_lookup(&process_settings))
            .is_ok();
        let policy = POLICY.get().expect("set above, by this thread or another");
        if first {
            policy.warn_if_invalid();
        }
        policy
    }

    /// The configuration, when tracing is on.
    pub fn config(&self) -> Option<&FpmConfig> {
        match self {
            FpmPolicy::Enabled(c) => Some(c),
            _ => None,
        }
    }
}

/// Parses the master switch: `Some(true)`, `Some(false)` or `None` for anything else.
pub fn parse_switch(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// Parses a positive integer as Dynamo does: trimmed, decimal (a leading `+` is accepted),
/// neither 0 nor negative, fractional, empty or out of range.
pub fn parse_positive(name: &str, value: &str) -> Result<u64, String> {
    let n: u64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{name}='{value}' must be a positive integer"))?;
    if n == 0 {
        return Err(format!("{name}='{value}' must be greater than zero"));
    }
    Ok(n)
}

fn read_enabled(env: Lookup) -> Result<FpmConfig, String> {
    let get = |name: &str| env(name).map_err(|e| e.message);
    let mut config = FpmConfig::default();
    if let Some(v) = get(ENV_OUTPUT_PATH)? {
        let trimmed = v.trim();
        if trimmed.is_empty() {
            return Err(format!("{ENV_OUTPUT_PATH}='{v}' must not be empty"));
        }
        config.output_path = PathBuf::from(trimmed);
    }
    if let Some(v) = get(ENV_MODE)? {
        config.mode = match v.trim().to_ascii_lowercase().as_str() {
            "sampled" => CaptureMode::Sampled,
            "full" => CaptureMode::Full,
            _ => return Err(format!("{ENV_MODE}='{v}' must be sampled or full")),
        };
    }
    if let Some(v) = get(ENV_SAMPLE_INTERVAL_MS)? {
        config.sample_interval = Duration::from_millis(parse_positive(ENV_SAMPLE_INTERVAL_MS, &v)?);
    }
    if let Some(v) = get(ENV_ROLL_BYTES)? {
        config.roll_bytes = parse_positive(ENV_ROLL_BYTES, &v)?;
    }
    if let Some(v) = get(ENV_MAX_SEGMENTS)? {
        let n = parse_positive(ENV_MAX_SEGMENTS, &v)?;
        config.max_segments = usize::try_from(n)
            .map_err(|_| format!("{ENV_MAX_SEGMENTS}='{v}' must be a positive integer"))?;
    }
    if let Some(v) = get(ENV_QUEUE_MAX_BYTES)? {
        let n = parse_positive(ENV_QUEUE_MAX_BYTES, &v)?;
        config.queue_max_bytes = usize::try_from(n)
            .map_err(|_| format!("{ENV_QUEUE_MAX_BYTES}='{v}' must be a positive integer"))?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_read_are_the_ones_the_configuration_file_knows() {
        // A DYN_FPM_* key in NIXL's configuration file is reported by the base crate's list.
        assert_eq!(
            [
                ENV_TRACE,
                ENV_OUTPUT_PATH,
                ENV_MODE,
                ENV_SAMPLE_INTERVAL_MS,
                ENV_ROLL_BYTES,
                ENV_MAX_SEGMENTS,
                ENV_QUEUE_MAX_BYTES
            ],
            settings::DYN_FPM_VARIABLES
        );
    }
    use crate::env::fixed_env as env_of;
    use crate::logging;

    fn policy(pairs: &[(&str, &str)]) -> FpmPolicy {
        FpmPolicy::from_lookup(&env_of(pairs))
    }

    fn invalid(pairs: &[(&str, &str)]) -> String {
        match policy(pairs) {
            FpmPolicy::Invalid(m) => m,
            other => panic!("{pairs:?} gave {other:?}"),
        }
    }

    #[test]
    fn unset_switch_is_off_and_reads_nothing_else() {
        assert_eq!(policy(&[]), FpmPolicy::Off);
        assert_eq!(policy(&[(ENV_MODE, "bogus")]), FpmPolicy::Off);
    }

    #[test]
    fn enabled_defaults() {
        assert_eq!(
            policy(&[(ENV_TRACE, "1")]),
            FpmPolicy::Enabled(FpmConfig {
                output_path: "/tmp/dynamo-fpm".into(),
                mode: CaptureMode::Sampled,
                sample_interval: Duration::from_millis(5000),
                roll_bytes: 268_435_456,
                max_segments: 4,
                queue_max_bytes: 64 << 20,
            })
        );
    }

    #[test]
    fn master_switch_accepts_only_documented_forms() {
        for on in ["1", "true", "TRUE", " on ", "Yes", "yes\n"] {
            assert!(
                matches!(policy(&[(ENV_TRACE, on)]), FpmPolicy::Enabled(_)),
                "{on:?}"
            );
        }
        for off in ["0", "false", "OFF", " no "] {
            assert_eq!(policy(&[(ENV_TRACE, off)]), FpmPolicy::Off, "{off:?}");
        }
        for bad in ["", "  ", "enabled", "2", "maybe", "y", "enable"] {
            let m = invalid(&[(ENV_TRACE, bad)]);
            assert!(m.contains(&format!("DYN_FPM_TRACE='{bad}'")), "{m}");
        }
    }

    #[test]
    fn explicit_false_ignores_other_settings() {
        assert_eq!(
            policy(&[
                (ENV_TRACE, "no"),
                (ENV_MODE, "bogus"),
                (ENV_SAMPLE_INTERVAL_MS, "0"),
                (ENV_OUTPUT_PATH, " "),
            ]),
            FpmPolicy::Off
        );
    }

    #[test]
    fn accepts_full_mode_and_numeric_overrides() {
        let p = policy(&[
            (ENV_TRACE, "yes"),
            (ENV_OUTPUT_PATH, " /var/log/fpm "),
            (ENV_MODE, " FULL "),
            (ENV_SAMPLE_INTERVAL_MS, "250"),
            (ENV_ROLL_BYTES, "4096"),
            (ENV_MAX_SEGMENTS, " 7 "),
            (ENV_QUEUE_MAX_BYTES, "1048576"),
        ]);
        assert_eq!(
            p,
            FpmPolicy::Enabled(FpmConfig {
                output_path: "/var/log/fpm".into(),
                mode: CaptureMode::Full,
                sample_interval: Duration::from_millis(250),
                roll_bytes: 4096,
                max_segments: 7,
                queue_max_bytes: 1 << 20,
            })
        );
        assert_eq!(
            policy(&[
                (ENV_TRACE, "on"),
                (ENV_MODE, "Sampled"),
                (ENV_ROLL_BYTES, "+5")
            ])
            .config()
            .map(|c| (c.mode, c.roll_bytes)),
            Some((CaptureMode::Sampled, 5))
        );
    }

    #[test]
    fn each_invalid_value_disables_the_whole_trace_naming_it() {
        let numeric = [
            ENV_SAMPLE_INTERVAL_MS,
            ENV_ROLL_BYTES,
            ENV_MAX_SEGMENTS,
            ENV_QUEUE_MAX_BYTES,
        ];
        for var in numeric {
            for bad in [
                "0",
                "-1",
                "1.5",
                "",
                " ",
                "not-a-number",
                "18446744073709551616",
                "10ms",
            ] {
                // Validated in both modes.
                for mode in ["sampled", "full"] {
                    let m = invalid(&[(ENV_TRACE, "1"), (ENV_MODE, mode), (var, bad)]);
                    assert!(m.contains(&format!("{var}='{bad}'")), "{m}");
                }
            }
        }
        for bad in ["", "   ", "\t"] {
            let m = invalid(&[(ENV_TRACE, "1"), (ENV_OUTPUT_PATH, bad)]);
            assert!(
                m.contains(ENV_OUTPUT_PATH) && m.contains("must not be empty"),
                "{m}"
            );
        }
        for bad in ["", "sample", "all", "full-ish"] {
            let m = invalid(&[(ENV_TRACE, "1"), (ENV_MODE, bad)]);
            assert!(m.contains(&format!("DYN_FPM_MODE='{bad}'")), "{m}");
        }
        // One invalid value among valid ones still disables the whole trace.
        invalid(&[
            (ENV_TRACE, "1"),
            (ENV_MODE, "full"),
            (ENV_ROLL_BYTES, "4096"),
            (ENV_MAX_SEGMENTS, "0"),
        ]);
    }

    #[test]
    fn invalid_configuration_logs_exactly_one_warning() {
        let (p, logged) = logging::capture(|| {
            FpmPolicy::evaluate(&env_of(&[(ENV_TRACE, "1"), (ENV_MAX_SEGMENTS, "-3")]))
        });
        assert!(matches!(p, FpmPolicy::Invalid(_)));
        let w = logging::warnings(&logged);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("DYN_FPM_MAX_SEGMENTS='-3'"), "{}", w[0]);

        let (_, logged) =
            logging::capture(|| FpmPolicy::evaluate(&env_of(&[(ENV_TRACE, "maybe")])));
        assert_eq!(logging::warnings(&logged).len(), 1);
        let (_, logged) = logging::capture(|| FpmPolicy::evaluate(&env_of(&[])));
        assert!(logging::warnings(&logged).is_empty());
        let (_, logged) = logging::capture(|| FpmPolicy::evaluate(&env_of(&[(ENV_TRACE, "1")])));
        assert!(logging::warnings(&logged).is_empty());
    }

    #[test]
    fn non_utf8_values_are_invalid() {
        let env = |name: &str| {
            if name == ENV_TRACE {
                Ok(Some("1".to_owned()))
            } else if name == ENV_MODE {
                Err(crate::Error::invalid(format!(
                    "{name}=\"\\xff\" is not valid UTF-8"
                )))
            } else {
                Ok(None)
            }
        };
        assert!(
            matches!(FpmPolicy::from_lookup(&env), FpmPolicy::Invalid(m) if m.contains(ENV_MODE))
        );
    }
}
