//! The DOCA exporter's settings, read from the environment when an agent's exporter is created
//! and parsed strictly: a value that is set but invalid is an error naming the variable.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use nixl_telemetry_base::env::{read_bool, Lookup};
use nixl_telemetry_base::settings;
use nixl_telemetry_series::endpoint::address_from_env;
use nixl_telemetry_series::{Buckets, WorkloadLabels};

/// `NIXL_TELEMETRY_DOCA_BACKENDS`: comma list of `scrape` and/or `ipc` (default `scrape`).
pub const ENV_BACKENDS: &str = settings::DOCA_BACKENDS.name;
/// `NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT`: TCP port of the `scrape` backend (default 9091).
pub const ENV_PORT: &str = settings::DOCA_PROMETHEUS_PORT.name;
/// `NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL`: the `scrape` backend binds 127.0.0.1 only.
pub const ENV_LOCAL: &str = settings::DOCA_PROMETHEUS_LOCAL.name;
/// `NIXL_TELEMETRY_DOCA_IPC_SOCKETS_DIR`: the DTS IPC sockets directory (default: DOCA's,
/// `/opt/mellanox/doca/services/telemetry/ipc_sockets`).
pub const ENV_IPC_SOCKETS_DIR: &str = settings::DOCA_IPC_SOCKETS_DIR.name;
/// `NIXL_TELEMETRY_DOCA_LIB_DIR`: the directory holding NVIDIA's DOCA libraries
/// (`libdoca_telemetry_exporter.so*`, `libdoca_common.so*`). When set, only this directory is
/// searched; unset or empty, the dynamic loader's search path and then DOCA's default
/// installation directory are.
pub const ENV_LIB_DIR: &str = settings::DOCA_LIB_DIR.name;
/// The default port of the `scrape` backend.
pub const DEFAULT_PORT: u16 = settings::DOCA_PROMETHEUS_PORT.default_u16();

/// The delivery backends an agent asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backends {
    /// Serve the series at `GET /metrics` (Prometheus text format), like the Prometheus plug-in.
    pub scrape: bool,
    /// Push every event to the DOCA Telemetry Service through NVIDIA's library.
    pub ipc: bool,
}

impl Backends {
    /// The default: `scrape` only.
    pub const SCRAPE: Backends = Backends {
        scrape: true,
        ipc: false,
    };

    /// Parses the value of [`ENV_BACKENDS`]: tokens separated by commas, each trimmed of ASCII
    /// whitespace, empty tokens ignored, repetitions ignored; no token at all means `scrape`.
    /// Tokens are case-sensitive, as in NIXL.
    pub fn parse(value: &str) -> Result<Backends, String> {
        let mut b = Backends {
            scrape: false,
            ipc: false,
        };
        for token in value
            .split(',')
            .map(|t| t.trim_matches(|c: char| c.is_ascii_whitespace()))
        {
            match token {
                "" => {}
                "scrape" => b.scrape = true,
                "ipc" => b.ipc = true,
                other => {
                    return Err(format!(
                        "{ENV_BACKENDS}: unknown backend '{other}'; valid backends are 'scrape', \
                         'ipc'"
                    ))
                }
            }
        }
        if !b.scrape && !b.ipc {
            b = Backends::SCRAPE;
        }
        Ok(b)
    }
}

impl fmt::Display for Backends {
    /// `scrape`, `ipc` or `scrape, ipc`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.scrape, self.ipc) {
            (true, true) => f.write_str("scrape, ipc"),
            (false, true) => f.write_str("ipc"),
            _ => f.write_str("scrape"),
        }
    }
}

/// Where the `ipc` backend finds the DOCA libraries and the DTS sockets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpcSettings {
    /// [`ENV_IPC_SOCKETS_DIR`]; `None` leaves DOCA's default.
    pub sockets_dir: Option<String>,
    /// [`ENV_LIB_DIR`]; `None` searches the loader path and DOCA's default directory.
    pub lib_dir: Option<PathBuf>,
}

/// Everything one agent's exporter reads from the environment.
#[derive(Clone, Debug, PartialEq)]
pub struct DocaConfig {
    /// The backends asked for.
    pub backends: Backends,
    /// The `scrape` endpoint address (parsed even when only `ipc` is asked for, so an invalid
    /// port is reported whatever the backends, as NIXL does).
    pub address: SocketAddr,
    /// Histogram bounds (`NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`), for both backends.
    pub buckets: Buckets,
    /// The `ipc` settings.
    pub ipc: IpcSettings,
    /// The workload labels of the `scrape` backend's series.
    pub labels: WorkloadLabels,
    /// `NIXL_TELEMETRY_NATIVE_HISTOGRAMS`: the `scrape` backend keeps native histograms (DOCA's
    /// metrics API has fixed-bound histograms only, so `ipc` sends the classic ones).
    pub native_histograms: bool,
}

fn non_empty(env: Lookup, name: &str) -> Result<Option<String>, String> {
    Ok(env(name)
        .map_err(|e| e.message)?
        .filter(|v| !v.trim().is_empty()))
}

impl DocaConfig {
    /// Reads every setting through `env`. Errors name the variable and the value.
    pub fn from_lookup(env: Lookup) -> Result<DocaConfig, String> {
        let backends = match env(ENV_BACKENDS).map_err(|e| e.message)? {
            None => Backends::parse(settings::DOCA_BACKENDS.default_str())?,
            Some(v) => Backends::parse(&v)?,
        };
        let address = address_from_env(env, ENV_PORT, ENV_LOCAL, DEFAULT_PORT)?;
        let buckets = Buckets::from_lookup(env).map_err(|e| e.message)?;
        let ipc = IpcSettings {
            sockets_dir: non_empty(env, ENV_IPC_SOCKETS_DIR)?,
            lib_dir: non_empty(env, ENV_LIB_DIR)?.map(PathBuf::from),
        };
        let labels = WorkloadLabels::from_lookup(env)?;
        let native_histograms = read_bool(env, settings::NATIVE_HISTOGRAMS.name)
            .map_err(|e| e.message)?
            .unwrap_or(settings::NATIVE_HISTOGRAMS.default_bool());
        Ok(DocaConfig {
            backends,
            address,
            buckets,
            ipc,
            labels,
            native_histograms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> std::result::Result<DocaConfig, String> {
        let env = nixl_telemetry_base::env::fixed_env(pairs);
        DocaConfig::from_lookup(&env)
    }

    #[test]
    fn backends_are_trimmed_deduplicated_and_default_to_scrape() {
        let both = Backends {
            scrape: true,
            ipc: true,
        };
        let ipc = Backends {
            scrape: false,
            ipc: true,
        };
        for (value, expected) in [
            ("", Backends::SCRAPE),
            ("  ", Backends::SCRAPE),
            (",", Backends::SCRAPE),
            ("scrape", Backends::SCRAPE),
            ("ipc", ipc),
            (" ipc ,ipc", ipc),
            ("scrape,ipc", both),
            ("scrape,ipc, scrape", both),
            ("\tipc , scrape,,", both),
        ] {
            assert_eq!(Backends::parse(value), Ok(expected), "{value:?}");
        }
        assert_eq!(both.to_string(), "scrape, ipc");
        assert_eq!(ipc.to_string(), "ipc");
        assert_eq!(Backends::SCRAPE.to_string(), "scrape");
    }

    #[test]
    fn an_unknown_backend_is_an_error_listing_the_valid_ones() {
        for (value, token) in [
            ("prometheus", "prometheus"),
            ("scrape,dts", "dts"),
            ("IPC", "IPC"),
            ("scrape ipc", "scrape ipc"),
        ] {
            assert_eq!(
                Backends::parse(value),
                Err(format!(
                    "NIXL_TELEMETRY_DOCA_BACKENDS: unknown backend '{token}'; valid backends are \
                     'scrape', 'ipc'"
                ))
            );
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let c = config(&[]).unwrap();
        assert_eq!(c.backends, Backends::SCRAPE);
        assert_eq!(c.address, "0.0.0.0:9091".parse().unwrap());
        assert_eq!(c.buckets, Buckets::default());
        assert_eq!(c.ipc, IpcSettings::default());
        let c = config(&[
            (ENV_BACKENDS, "ipc"),
            (ENV_PORT, "9200"),
            (ENV_LOCAL, "yes"),
            ("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", "1,2,3"),
            (ENV_IPC_SOCKETS_DIR, "/run/dts"),
            (ENV_LIB_DIR, "/opt/doca/lib"),
        ])
        .unwrap();
        assert_eq!(c.address, "127.0.0.1:9200".parse().unwrap());
        assert_eq!(c.buckets.bounds(), &[1.0, 2.0, 3.0]);
        assert_eq!(c.ipc.sockets_dir.as_deref(), Some("/run/dts"));
        assert_eq!(c.ipc.lib_dir, Some(PathBuf::from("/opt/doca/lib")));
        // Empty directories mean "not set".
        let c = config(&[(ENV_IPC_SOCKETS_DIR, ""), (ENV_LIB_DIR, " ")]).unwrap();
        assert_eq!(c.ipc, IpcSettings::default());
    }

    #[test]
    fn invalid_values_name_the_variable() {
        for (pairs, text) in [
            (
                &[(ENV_PORT, "0")][..],
                "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT='0' is out of range",
            ),
            (
                &[(ENV_PORT, "x"), (ENV_BACKENDS, "ipc")][..],
                "NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT='x'",
            ),
            (
                &[(ENV_LOCAL, "maybe")][..],
                "NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL='maybe' is not a boolean",
            ),
            (
                &[("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", "5,4")][..],
                "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US='5,4' is invalid",
            ),
            (&[(ENV_BACKENDS, "ipc,x")][..], "unknown backend 'x'"),
        ] {
            let e = config(pairs).unwrap_err();
            assert!(e.contains(text), "{pairs:?}: {e}");
        }
    }
}
