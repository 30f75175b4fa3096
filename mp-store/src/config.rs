//! The `prometheus_mp` settings, read when an agent's exporter is created. NIXL's variables
//! mean what they mean in NIXL; `NIXL_TELEMETRY_MP_SERVE` and `NIXL_TELEMETRY_MP_AGGREGATE` are
//! ours. A value that is set but invalid is an error naming the variable, never a default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use nixl_telemetry_base::env::{parse_u64, read_bool, Lookup};
use nixl_telemetry_base::settings;
use nixl_telemetry_series::{Buckets, WorkloadLabels};

use crate::layout::{truncate_str, LOCAL_RANK_LEN, MAX_BUCKETS};

/// `NIXL_TELEMETRY_MULTIPROC_DIR`: the directory of the store files (required).
pub const ENV_MULTIPROC_DIR: &str = settings::MULTIPROC_DIR.name;
/// `NIXL_TELEMETRY_PROMETHEUS_PORT`: the scrape port, as for the `prometheus` exporter.
pub const ENV_PORT: &str = settings::PROMETHEUS_PORT.name;
/// `NIXL_TELEMETRY_PROMETHEUS_LOCAL`: bind 127.0.0.1 only.
pub const ENV_LOCAL: &str = settings::PROMETHEUS_LOCAL.name;
/// The default scrape port.
pub const DEFAULT_PORT: u16 = settings::PROMETHEUS_PORT.default_u16();
/// `NIXL_TELEMETRY_RANK_ENV`: the name of the variable whose value is the `local_rank` label.
pub const ENV_RANK_ENV: &str = settings::RANK_ENV.name;
/// The rank variable when `NIXL_TELEMETRY_RANK_ENV` is unset.
pub const DEFAULT_RANK_ENV: &str = settings::RANK_ENV.default_str();
/// `NIXL_TELEMETRY_MP_STALE_TTL`: seconds a departed process's store is still served.
pub const ENV_STALE_TTL: &str = settings::MP_STALE_TTL.name;
/// The default stale TTL, in seconds.
pub const DEFAULT_STALE_TTL_SECS: u64 = settings::MP_STALE_TTL.default_u64();
/// `NIXL_TELEMETRY_MP_SERVE`: boolean, default true; false makes this process write its
/// store without ever taking part in the election (a `nixl-telemetry serve` sidecar serves).
pub const ENV_SERVE: &str = settings::MP_SERVE.name;
/// `NIXL_TELEMETRY_NATIVE_HISTOGRAMS`: the store keeps native histograms.
pub const ENV_NATIVE_HISTOGRAMS: &str = settings::NATIVE_HISTOGRAMS.name;
/// `NIXL_TELEMETRY_MP_AGGREGATE`: `sum` adds node totals beside the per-rank series.
pub const ENV_AGGREGATE: &str = settings::MP_AGGREGATE.name;

/// Whether a scrape adds per-node totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Aggregate {
    /// Per-rank series only (NIXL's output).
    #[default]
    None,
    /// Also one series per (hostname, agent_name, workload labels) without `pid`,
    /// `agent_instance` and `local_rank`: counters and histograms summed over the ranks,
    /// gauges omitted.
    Sum,
}

impl Aggregate {
    /// Parses a value of [`ENV_AGGREGATE`] (or of `serve --aggregate`): `sum`, or `none`/empty
    /// for none; `name` is what an error calls it.
    pub fn parse(name: &str, value: &str) -> Result<Aggregate, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Ok(Aggregate::None),
            "sum" => Ok(Aggregate::Sum),
            _ => Err(format!(
                "{name}='{value}' is not a valid aggregation: use 'sum' (node totals beside the \
                 per-rank series) or 'none'"
            )),
        }
    }
}

/// What a store scan of a directory needs (a serving rank, or `nixl-telemetry serve`).
#[derive(Clone, Debug, PartialEq)]
pub struct ScanConfig {
    /// The directory of the store files.
    pub dir: PathBuf,
    /// How long a store whose writer is gone is still served after its last update.
    pub stale_ttl: Duration,
    /// Node totals or not.
    pub aggregate: Aggregate,
}

/// Every setting of one agent's `prometheus_mp` exporter.
#[derive(Clone, Debug, PartialEq)]
pub struct MpConfig {
    /// Directory, TTL and aggregation.
    pub scan: ScanConfig,
    /// The scrape address (`0.0.0.0:9090` by default).
    pub addr: SocketAddr,
    /// The `local_rank` label (empty: none), at most 63 bytes.
    pub local_rank: String,
    /// Histogram bounds, at most 32.
    pub buckets: Buckets,
    /// Whether this process takes part in the election to serve.
    pub serve: bool,
    /// The workload labels its store carries (`NIXL_TELEMETRY_LABELS`,
    /// `NIXL_TELEMETRY_LABELS_FROM`).
    pub labels: WorkloadLabels,
    /// Whether its store keeps native histograms (`NIXL_TELEMETRY_NATIVE_HISTOGRAMS`), in the
    /// store's native-histograms extension ([`crate::layout`]).
    pub native: bool,
}

/// Reads the stale TTL variable through `env` (default 30 s).
pub fn stale_ttl_from(env: Lookup) -> Result<Duration, String> {
    match env(ENV_STALE_TTL).map_err(|e| e.message)? {
        None => Ok(Duration::from_secs(DEFAULT_STALE_TTL_SECS)),
        Some(v) => {
            let secs = parse_u64(ENV_STALE_TTL, &v).map_err(|e| e.message)?;
            // NIXL clamps the TTL to the range of an i64 count of nanoseconds.
            Ok(Duration::from_nanos(
                secs.saturating_mul(1_000_000_000).min(i64::MAX as u64),
            ))
        }
    }
}

/// Reads the aggregation variable through `env` (default none).
pub fn aggregate_from(env: Lookup) -> Result<Aggregate, String> {
    match env(ENV_AGGREGATE).map_err(|e| e.message)? {
        None => Aggregate::parse(ENV_AGGREGATE, settings::MP_AGGREGATE.default_str()),
        Some(v) => Aggregate::parse(ENV_AGGREGATE, &v),
    }
}

/// Reads the scrape address variables through `env`.
pub fn addr_from(env: Lookup) -> Result<SocketAddr, String> {
    nixl_telemetry_series::endpoint::address_from_env(env, ENV_PORT, ENV_LOCAL, DEFAULT_PORT)
}

impl MpConfig {
    /// Reads every setting through `env`. Errors name the variable.
    pub fn from_lookup(env: Lookup) -> Result<MpConfig, String> {
        let dir = match env(ENV_MULTIPROC_DIR).map_err(|e| e.message)? {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => {
                return Err(format!(
                    "prometheus_mp exporter requires {ENV_MULTIPROC_DIR} to be set (the \
                     directory, on a local file system, shared by the ranks of this node)"
                ))
            }
        };
        let buckets = Buckets::from_lookup(env).map_err(|e| e.message)?;
        if buckets.bounds().len() > MAX_BUCKETS {
            return Err(format!(
                "{} has {} bounds; the prometheus_mp store holds at most {MAX_BUCKETS}",
                nixl_telemetry_series::ENV_HISTOGRAM_BUCKETS_US,
                buckets.bounds().len()
            ));
        }
        let rank_var = env(ENV_RANK_ENV)
            .map_err(|e| e.message)?
            .unwrap_or_else(|| DEFAULT_RANK_ENV.to_owned());
        let mut local_rank = match rank_var.as_str() {
            "" => String::new(),
            var => env(var).map_err(|e| e.message)?.unwrap_or_default(),
        };
        if local_rank.len() >= LOCAL_RANK_LEN {
            log::warn!(
                "prometheus_mp: the local rank '{local_rank}' (from {rank_var}) exceeds {} \
                 bytes and is truncated",
                LOCAL_RANK_LEN - 1
            );
            local_rank = truncate_str(&local_rank, LOCAL_RANK_LEN - 1).to_owned();
        }
        Ok(MpConfig {
            scan: ScanConfig {
                dir,
                stale_ttl: stale_ttl_from(env)?,
                aggregate: aggregate_from(env)?,
            },
            addr: addr_from(env)?,
            local_rank,
            buckets,
            serve: read_bool(env, ENV_SERVE)
                .map_err(|e| e.message)?
                .unwrap_or(settings::MP_SERVE.default_bool()),
            labels: WorkloadLabels::from_lookup(env)?,
            native: read_bool(env, ENV_NATIVE_HISTOGRAMS)
                .map_err(|e| e.message)?
                .unwrap_or(settings::NATIVE_HISTOGRAMS.default_bool()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::env::fixed_env;

    fn config(pairs: &[(&str, &str)]) -> Result<MpConfig, String> {
        MpConfig::from_lookup(&fixed_env(pairs))
    }

    #[test]
    fn defaults_with_only_the_directory() {
        let c = config(&[(ENV_MULTIPROC_DIR, "/tmp/mp")]).unwrap();
        assert_eq!(c.scan.dir, PathBuf::from("/tmp/mp"));
        assert_eq!(c.scan.stale_ttl, Duration::from_secs(30));
        assert_eq!(c.scan.aggregate, Aggregate::None);
        assert_eq!(c.addr, "0.0.0.0:9090".parse().unwrap());
        assert_eq!(c.local_rank, "");
        assert_eq!(c.buckets, Buckets::default());
        assert!(c.serve);
        assert!(c.labels.is_empty());
        assert!(!c.native);
    }

    #[test]
    fn bad_workload_labels_fail_naming_the_variable() {
        let d = (ENV_MULTIPROC_DIR, "/d");
        for (var, value, text) in [
            (
                "NIXL_TELEMETRY_LABELS",
                "my-job=1",
                "'my-job' is not a Prometheus label name",
            ),
            ("NIXL_TELEMETRY_LABELS", "local_rank=1", "reserved"),
            (
                "NIXL_TELEMETRY_LABELS",
                "a=1,b",
                "'b' is not a key=value pair",
            ),
            ("NIXL_TELEMETRY_LABELS_FROM", "lsf", "unknown source 'lsf'"),
        ] {
            let e = config(&[d, (var, value)]).unwrap_err();
            assert!(e.starts_with(var) && e.contains(text), "{e}");
        }
    }

    #[test]
    fn every_variable_is_read() {
        let c = config(&[
            (ENV_MULTIPROC_DIR, "/d"),
            (ENV_PORT, "9200"),
            (ENV_LOCAL, "yes"),
            ("LOCAL_RANK", "3"),
            (ENV_STALE_TTL, "0"),
            (ENV_SERVE, "off"),
            (ENV_AGGREGATE, "SUM"),
            ("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", "1,2,3"),
            ("NIXL_TELEMETRY_LABELS", "team=kv"),
            ("NIXL_TELEMETRY_LABELS_FROM", "slurm"),
            ("SLURM_JOB_ID", "77"),
            (ENV_NATIVE_HISTOGRAMS, "true"),
        ])
        .unwrap();
        assert!(c.native);
        assert_eq!(
            c.labels.pairs(),
            [
                ("team".to_owned(), "kv".to_owned()),
                ("slurm_job_id".to_owned(), "77".to_owned())
            ]
        );
        assert_eq!(c.addr, "127.0.0.1:9200".parse().unwrap());
        assert_eq!(c.local_rank, "3");
        assert_eq!(c.scan.stale_ttl, Duration::ZERO);
        assert_eq!(c.scan.aggregate, Aggregate::Sum);
        assert!(!c.serve);
        assert_eq!(c.buckets.bounds(), [1.0, 2.0, 3.0]);
        // Another rank variable, an empty one (no label), an unset target (no label).
        let pick = |pairs: &[(&str, &str)]| config(pairs).unwrap().local_rank;
        let d = (ENV_MULTIPROC_DIR, "/d");
        assert_eq!(
            pick(&[
                d,
                (ENV_RANK_ENV, "RANK"),
                ("RANK", "5"),
                ("LOCAL_RANK", "1")
            ]),
            "5"
        );
        assert_eq!(pick(&[d, (ENV_RANK_ENV, ""), ("LOCAL_RANK", "1")]), "");
        assert_eq!(pick(&[d, (ENV_RANK_ENV, "NOPE")]), "");
        let long = "r".repeat(100);
        let (rank, logged) =
            nixl_telemetry_base::logging::capture(|| pick(&[d, ("LOCAL_RANK", &long)]));
        assert_eq!(rank.len(), 63);
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert!(warnings.len() == 1 && warnings[0].contains("exceeds 63 bytes"));
        // A huge TTL is clamped, not an error.
        let c = config(&[d, (ENV_STALE_TTL, "18446744073709551615")]).unwrap();
        assert_eq!(c.scan.stale_ttl, Duration::from_nanos(i64::MAX as u64));
    }

    #[test]
    fn invalid_settings_name_the_variable() {
        let d = (ENV_MULTIPROC_DIR, "/d");
        let many: Vec<String> = (1..=33).map(|i| i.to_string()).collect();
        let many = many.join(",");
        for (pairs, text) in [
            (vec![], "requires NIXL_TELEMETRY_MULTIPROC_DIR to be set"),
            (
                vec![(ENV_MULTIPROC_DIR, "")],
                "requires NIXL_TELEMETRY_MULTIPROC_DIR",
            ),
            (
                vec![d, (ENV_PORT, "0")],
                "NIXL_TELEMETRY_PROMETHEUS_PORT='0'",
            ),
            (
                vec![d, (ENV_LOCAL, "maybe")],
                "NIXL_TELEMETRY_PROMETHEUS_LOCAL",
            ),
            (
                vec![d, (ENV_STALE_TTL, "-1")],
                "NIXL_TELEMETRY_MP_STALE_TTL='-1'",
            ),
            (vec![d, (ENV_SERVE, "2")], "NIXL_TELEMETRY_MP_SERVE='2'"),
            (
                vec![d, (ENV_NATIVE_HISTOGRAMS, "sometimes")],
                "NIXL_TELEMETRY_NATIVE_HISTOGRAMS='sometimes'",
            ),
            (
                vec![d, (ENV_AGGREGATE, "avg")],
                "NIXL_TELEMETRY_MP_AGGREGATE='avg'",
            ),
            (
                vec![d, ("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", "5,4")],
                "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US",
            ),
            (
                vec![d, ("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", &many)],
                "has 33 bounds; the prometheus_mp store holds at most 32",
            ),
        ] {
            let e = config(&pairs).unwrap_err();
            assert!(e.contains(text), "{pairs:?}: {e}");
        }
        let bounds: Vec<String> = (1..=32).map(|i| i.to_string()).collect();
        let bounds = bounds.join(",");
        assert!(config(&[d, ("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US", &bounds)]).is_ok());
    }
}
