//! What a declaration is: the [`Kind`] of value a setting takes, who reads it ([`Consumer`]) and
//! the [`Setting`] itself, whose typed defaults its readers take at compile time. The
//! declarations are in the table (`table.rs`).

use crate::env::{parse_bool, parse_u64};
use crate::error::Result;

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

/// Who reads a setting: the core library, its built-in TRACE exporter, or an exporter plug-in
/// (with the CLI's `serve` and `push`, which share the plug-ins' configuration code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Consumer {
    /// The core library (the collector's settings and the exporter choice).
    Core,
    /// The built-in `TRACE` exporter.
    Trace,
    /// The `prometheus` plug-in.
    Prometheus,
    /// The `prometheus_mp` plug-in (and `nixl-telemetry serve`).
    PrometheusMp,
    /// The `doca` plug-in.
    Doca,
    /// The `remote_write` plug-in (and `nixl-telemetry serve --remote-write`, `push`).
    RemoteWrite,
    /// The `otlp` plug-in (and `nixl-telemetry serve --otlp`, `push`).
    Otlp,
}

impl Consumer {
    /// The name `nixl-telemetry config` and the docs show: `core`, `TRACE` or the plug-in's.
    pub const fn name(self) -> &'static str {
        match self {
            Consumer::Core => "core",
            Consumer::Trace => "TRACE",
            Consumer::Prometheus => "prometheus",
            Consumer::PrometheusMp => "prometheus_mp",
            Consumer::Doca => "doca",
            Consumer::RemoteWrite => "remote_write",
            Consumer::Otlp => "otlp",
        }
    }

    /// The page of the book (relative to `docs/`) that describes this consumer's settings.
    pub const fn page(self) -> &'static str {
        match self {
            Consumer::Core => "configuration.md#the-cores-variables",
            Consumer::Trace => "exporters/builtin.md#trace",
            Consumer::Prometheus => "exporters/prometheus.md",
            Consumer::PrometheusMp => "exporters/prometheus-mp.md#settings",
            Consumer::Doca => "exporters/doca.md#settings",
            Consumer::RemoteWrite => "exporters/push.md#remote_write",
            Consumer::Otlp => "exporters/push.md#otlp",
        }
    }
}

/// One setting's declaration: its variable (and file key), kind, default, readers and one
/// line of documentation. Each is a named constant of the settings module
/// ([`PROMETHEUS_PORT`](super::PROMETHEUS_PORT), ...), which its readers use for the name and the
/// default; [`SETTINGS`](super::SETTINGS) lists them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The variable's name, which is also its key in the configuration file.
    pub name: &'static str,
    /// The type of value it takes.
    pub kind: Kind,
    /// The value that applies when no source sets it (`None`: unset, the reader's behaviour
    /// without it).
    pub default: Option<&'static str>,
    /// Who reads it.
    pub readers: &'static [Consumer],
    /// What it does, in one line.
    pub doc: &'static str,
}

impl Setting {
    /// The readers' names joined with `, ` (`prometheus, prometheus_mp`).
    pub fn readers_text(&self) -> String {
        let names: Vec<&str> = self.readers.iter().map(|c| c.name()).collect();
        names.join(", ")
    }

    /// The default as text; a compile-time error (in a `const`) when the setting has none.
    pub const fn default_str(&self) -> &'static str {
        match self.default {
            Some(d) => d,
            None => panic!("this setting has no default"),
        }
    }

    /// The default as an unsigned decimal integer; a compile-time error (in a `const`) when
    /// there is none or it is not one.
    pub const fn default_u64(&self) -> u64 {
        let (n, end) = decimal(self.default_str().as_bytes(), 0);
        assert!(
            end == self.default_str().len(),
            "the default is not a decimal integer"
        );
        n
    }

    /// [`Setting::default_u64`] as a port number (it must fit).
    pub const fn default_u16(&self) -> u16 {
        let n = self.default_u64();
        assert!(n <= u16::MAX as u64, "the default does not fit in 16 bits");
        n as u16
    }

    /// The default as a boolean (`true` or `false`); a compile-time error otherwise.
    pub const fn default_bool(&self) -> bool {
        match self.default_str().as_bytes() {
            b"true" => true,
            b"false" => false,
            _ => panic!("the default is not true or false"),
        }
    }

    /// The default as a comma list of exactly `N` decimal integers, as floating-point numbers
    /// (the histogram bounds); a compile-time error otherwise.
    pub const fn default_list<const N: usize>(&self) -> [f64; N] {
        let text = self.default_str().as_bytes();
        let mut out = [0.0; N];
        let (mut i, mut at) = (0, 0);
        while i < N {
            let (n, end) = decimal(text, at);
            assert!(end > at, "a list item is not a decimal integer");
            out[i] = n as f64;
            i += 1;
            if i < N {
                assert!(end < text.len() && text[end] == b',', "too few list items");
                at = end + 1;
            } else {
                assert!(end == text.len(), "too many list items");
            }
        }
        out
    }
}

/// The decimal integer at `text[at..]`: its value and the index after its last digit.
const fn decimal(text: &[u8], at: usize) -> (u64, usize) {
    let (mut n, mut i) = (0u64, at);
    while i < text.len() && text[i].is_ascii_digit() {
        n = n * 10 + (text[i] - b'0') as u64;
        i += 1;
    }
    (n, i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{
        DIR, HISTOGRAM_BUCKETS_US, MP_SERVE, PROMETHEUS_LOCAL, PROMETHEUS_PORT, RANK_ENV,
        TRACE_ROLL_BYTES,
    };

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
    fn typed_defaults_are_read_from_the_declarations() {
        assert_eq!(PROMETHEUS_PORT.default_u16(), 9090);
        assert_eq!(TRACE_ROLL_BYTES.default_u64(), 1 << 28);
        assert!(MP_SERVE.default_bool());
        assert!(!PROMETHEUS_LOCAL.default_bool());
        assert_eq!(RANK_ENV.default_str(), "LOCAL_RANK");
        let bounds: [f64; 18] = HISTOGRAM_BUCKETS_US.default_list();
        assert_eq!((bounds[0], bounds[17]), (10.0, 10_000_000.0));
        let two = Setting {
            default: Some("3,12"),
            ..HISTOGRAM_BUCKETS_US
        };
        assert_eq!(two.default_list::<2>(), [3.0, 12.0]);
        for (bad, n) in [("3,12", 3), ("3,12", 1), ("3,x", 2), ("3,,4", 3)] {
            let s = Setting {
                default: Some(bad),
                ..HISTOGRAM_BUCKETS_US
            };
            let caught = std::panic::catch_unwind(|| match n {
                1 => s.default_list::<1>().len(),
                2 => s.default_list::<2>().len(),
                _ => s.default_list::<3>().len(),
            });
            assert!(caught.is_err(), "{bad} as {n} items");
        }
        let not_a_number = Setting {
            default: Some("9090x"),
            ..PROMETHEUS_PORT
        };
        assert!(std::panic::catch_unwind(|| not_a_number.default_u64()).is_err());
        assert!(std::panic::catch_unwind(|| DIR.default_str()).is_err());
    }
}
