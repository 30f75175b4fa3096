//! The multi-process store: every rank of a node writes its series into its own store file in
//! a shared directory, and one process serves every live store of the directory at
//! `GET /metrics` on one port. The store files are NIXL's (same name, size, layout and
//! locking), so a node may mix ranks running NIXL's own `prometheus_mp` and ranks running ours.
//!
//! The `prometheus_mp` exporter plug-in (`plugins/prometheus_mp`) writes a store per agent and
//! takes part in the election; `nixl-telemetry serve` scans, serves, pushes or writes the page
//! of a directory as a standalone process. Both build on this crate:
//!
//! - [`config`]: the variables (NIXL's, plus `NIXL_TELEMETRY_MP_SERVE` and
//!   `NIXL_TELEMETRY_MP_AGGREGATE`).
//! - [`layout`]: the 6,800-byte store layout and our extensions after it (workload labels,
//!   native histograms); [`store`] writes one, [`reader`] reads one.
//! - [`store_scan`]: the store scan, the scrape-time reader of every rank's store in the
//!   directory (liveness, TTL, reaping, the scrape page).
//! - [`textfile`]: the same page as a file for node_exporter's textfile collector
//!   (`nixl-telemetry serve --textfile`).
//! - [`election`]: which process serves, and failover; [`join_election`] is this process's
//!   part in it.
//! - [`dir`]: creating and checking the directory.

pub mod config;
pub mod dir;
pub mod election;
pub mod layout;
pub mod reader;
pub mod store;
pub mod store_scan;
mod sys;
pub mod textfile;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use nixl_telemetry_base::fork::LockOrder;
use nixl_telemetry_base::sync::LockUnpoisoned;

use crate::config::ScanConfig;
use crate::election::Election;
use crate::store_scan::StoreScan;

/// The elections this process takes part in, one per (directory, address), shared by its
/// agents: one endpoint per process and address, as with the `prometheus` exporter.
static ELECTIONS: Mutex<Vec<Weak<Election>>> = Mutex::new(Vec::new());

/// This process's election for `scan.dir` (canonicalised) on `addr`: the running one if
/// another agent of the process already takes part (its TTL and aggregation hold), else a new
/// one. Elections inherited through a fork are the parent's: a child takes part in its own.
pub fn join_election(scan: &ScanConfig, addr: SocketAddr) -> Arc<Election> {
    let dir = std::fs::canonicalize(&scan.dir).unwrap_or_else(|_| scan.dir.clone());
    nixl_telemetry_base::fork::hold_across_fork(LockOrder::Plugin, &ELECTIONS);
    let mut all = ELECTIONS.lock_unpoisoned();
    all.retain(|w| w.upgrade().is_some_and(|e| !e.inherited()));
    if let Some(e) = all
        .iter()
        .filter_map(Weak::upgrade)
        .find(|e| e.dir() == dir && e.addr() == addr)
    {
        return e;
    }
    let scan = Arc::new(StoreScan::new(ScanConfig {
        dir,
        ..scan.clone()
    }));
    let e = Arc::new(Election::new(scan, addr));
    all.push(Arc::downgrade(&e));
    e
}
