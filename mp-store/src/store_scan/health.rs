//! `/health` of a store scan, and the scan as an endpoint's pages ([`ScanPages`]).

use std::sync::Mutex;

use nixl_telemetry_series::endpoint::http::{Format, Health, Probe};
use nixl_telemetry_series::endpoint::server::Pages;

use super::StoreScan;
use crate::sys;
use nixl_telemetry_base::sync::LockUnpoisoned;

/// A store scan as an endpoint's pages: `/metrics` is [`StoreScan::scrape_as`], made when the
/// scrape asks, `/health` is [`StoreScan::health`]: ready while at least one rank's store is
/// served (its writer alive, or updated within the stale TTL), with the ranks served and the
/// newest update's age; 503 otherwise.
pub struct ScanPages {
    scan: std::sync::Arc<StoreScan>,
}

impl ScanPages {
    /// The pages of `scan`.
    pub fn new(scan: std::sync::Arc<StoreScan>) -> ScanPages {
        ScanPages { scan }
    }
}

impl Pages for ScanPages {
    /// The protobuf exposition when the scraper's `Accept` prefers it and a store keeps native
    /// histograms, else the text page ([`StoreScan::scrape_as`]).
    fn metrics(&self, format: Format) -> (&'static str, Vec<u8>) {
        self.scan.scrape_as(format == Format::Protobuf)
    }

    fn health(&self) -> Health {
        self.scan.health()
    }

    fn liveness(&self) -> Health {
        self.scan.liveness()
    }
}

/// More of a scan's health, asked at every probe (`serve` adds its pushes' delivery and its
/// loop's liveness): its details follow the scan's, and when it is unavailable so is the
/// answer.
pub type HealthDetails = std::sync::Arc<dyn Fn(Probe) -> Health + Send + Sync>;

/// Where a scan keeps its [`HealthDetails`] (shown by `Debug` as set or not).
#[derive(Default)]
pub(super) struct DetailsSlot(Mutex<Option<HealthDetails>>);

impl std::fmt::Debug for DetailsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.0.lock_unpoisoned().is_some();
        f.write_str(if set { "HealthDetails(set)" } else { "None" })
    }
}

impl StoreScan {
    /// The endpoint's health: ready while a rank's store is served, with how many and the
    /// newest update's age in seconds; unavailable, with the reason, when none is (no rank
    /// updated its store within the stale TTL, or the directory cannot be read). Both say how
    /// many times a store was skipped because its writer was publishing at every try
    /// (`skipped_mid_update`, in this process).
    pub fn health(&self) -> Health {
        use nixl_telemetry_series::endpoint::http::json_string;
        let stores = self.live_stores();
        let now = sys::monotonic_ns();
        let newest = stores
            .iter()
            .map(|s| now.saturating_sub(s.last_update_ns))
            .min();
        let dir = json_string(&self.config.dir.display().to_string());
        let more = format!(
            r#","skipped_mid_update":{}"#,
            super::removal::skipped_mid_update()
        );
        let own = match newest {
            Some(age_ns) => Health::ready(format!(
                r#""dir":{dir},"ranks":{},"newest_update_age_s":{:.3}{more}"#,
                stores.len(),
                age_ns as f64 / 1e9
            )),
            None => Health::unavailable(
                format!(
                    "no rank has updated its store in {} within the stale TTL ({} s)",
                    self.config.dir.display(),
                    self.config.stale_ttl.as_secs()
                ),
                format!(r#""dir":{dir},"ranks":0{more}"#),
            ),
        };
        own.and(self.more_health(Probe::Ready))
    }

    /// The endpoint's liveness: what [`HealthDetails`] says, else alive.
    pub fn liveness(&self) -> Health {
        self.more_health(Probe::Live)
    }

    fn more_health(&self, probe: Probe) -> Health {
        let more = self.health_details.0.lock_unpoisoned().clone();
        more.map_or_else(|| Health::ready(String::new()), |f| f(probe))
    }

    /// Adds `details` to every health answer of this scan (`serve` adds its push state).
    pub fn set_health_details(&self, details: HealthDetails) {
        *self.health_details.0.lock_unpoisoned() = Some(details);
    }
}
