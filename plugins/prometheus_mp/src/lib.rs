//! The multi-process Prometheus exporter plug-in (`libtelemetry_exporter_prometheus_mp.so`,
//! selected with `NIXL_TELEMETRY_EXPORTER=prometheus_mp`): every rank of a node writes its
//! series into its own store file in a shared directory, and one process serves every live
//! store of the directory at `GET /metrics` on one port, so a node is one scrape target
//! whatever its number of ranks. The store files are NIXL's (same name, size, layout and
//! locking), so a node may mix ranks running NIXL's own `prometheus_mp` and ranks running this
//! one: either side's endpoint serves both.
//!
//! - [`config`]: the variables (NIXL's, plus `NIXL_TELEMETRY_MP_SERVE` and
//!   `NIXL_TELEMETRY_MP_AGGREGATE`).
//! - [`layout`]: the 6,800-byte store layout; [`store`] writes one, [`reader`] reads one.
//! - [`store_scan`]: the store scan, the scrape-time reader of every rank's store in the
//!   directory (liveness, TTL, reaping, the scrape page).
//! - [`textfile`]: the same page as a file for node_exporter's textfile collector
//!   (`nixl-telemetry serve --textfile`).
//! - [`election`]: which process serves, and failover.
//! - [`dir`]: creating and checking the directory.
//!
//! Per agent: the exporter creates the agent's store; every flush applies the batch to it on
//! the flush thread (the producer hot path never touches it) and then polls the election, and
//! so does every empty flush, so a survivor takes over the port within about
//! `RUN_INTERVAL` + 200 ms of the serving process's exit even when it records nothing.
//! `nixl-telemetry serve --dir DIR` runs the same store scan, endpoint and election as a
//! standalone process.

pub mod config;
pub mod dir;
pub mod election;
pub mod layout;
pub mod reader;
pub mod store;
pub mod store_scan;
mod sys;
pub mod textfile;

use std::ffi::CStr;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use nixl_telemetry_base::fork::LockOrder;
use nixl_telemetry_base::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_base::Event;
use nixl_telemetry_series::hostname;

use crate::config::{MpConfig, ScanConfig};
use crate::election::Election;
use crate::store::{Identity, StoreWriter};
use crate::store_scan::StoreScan;
use nixl_telemetry_base::sync::LockUnpoisoned;

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

/// One agent's exporter: its store, and its process's part in the election (none with
/// `NIXL_TELEMETRY_MP_SERVE=0`).
pub struct PrometheusMpExporter {
    store: StoreWriter,
    election: Option<Arc<Election>>,
}

impl TelemetryPlugin for PrometheusMpExporter {
    const NAME: &'static CStr = c"prometheus_mp";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(params: &InitParams) -> Result<Self, CreateError> {
        let config = MpConfig::from_lookup(&process_settings).map_err(CreateError::InvalidParam)?;
        let dir = &config.scan.dir;
        dir::prepare(dir).map_err(|e| CreateError::Other(format!("prometheus_mp: {e}")))?;
        let id = Identity::for_this_process(
            params.agent_name,
            &hostname(),
            &config.local_rank,
            config.labels.clone(),
        );
        let store = StoreWriter::create(dir, &id, &config.buckets).map_err(|e| {
            CreateError::Other(format!(
                "prometheus_mp: cannot create the store of agent '{}' in {}: {e}",
                params.agent_name,
                dir.display()
            ))
        })?;
        let election = match config.serve {
            false => None,
            true => {
                let e = join_election(&config.scan, config.addr);
                e.poll(Instant::now()).map_err(CreateError::Other)?;
                Some(e)
            }
        };
        Ok(PrometheusMpExporter { store, election })
    }

    fn export(&mut self, events: &[Event]) -> usize {
        let applied = self.store.apply(events);
        self.tick();
        applied
    }

    fn tick(&mut self) {
        if let Some(e) = &self.election {
            e.tick(Instant::now());
        }
    }
}

nixl_telemetry_base::export_telemetry_plugin!(PrometheusMpExporter);
