//! The multi-process Prometheus exporter plug-in (`libtelemetry_exporter_prometheus_mp.so`,
//! selected with `NIXL_TELEMETRY_EXPORTER=prometheus_mp`): every rank of a node writes its
//! series into its own store file in a shared directory, and one process serves every live
//! store of the directory at `GET /metrics` on one port, so a node is one scrape target
//! whatever its number of ranks. The store files are NIXL's (same name, size, layout and
//! locking), so a node may mix ranks running NIXL's own `prometheus_mp` and ranks running this
//! one: either side's endpoint serves both.
//!
//! The store layout, writer, reader, directory scan, election and settings are the
//! [`nixl_telemetry_mp_store`] library's; this crate is the plug-in around them.
//!
//! Per agent: the exporter creates the agent's store; every flush applies the batch to it on
//! the flush thread (the producer hot path never touches it) and then polls the election, and
//! so does every empty flush, so a survivor takes over the port within about
//! `RUN_INTERVAL` + 200 ms of the serving process's exit even when it records nothing. Every
//! flush, empty or not, and the agent's destruction also check the store: one that another
//! process truncated, deleted or replaced is made again from the writer's own copy of its
//! values (see [`nixl_telemetry_mp_store::store`]).
//! `nixl-telemetry serve --dir DIR` runs the same store scan, endpoint and election as a
//! standalone process.
//!
//! With `NIXL_TELEMETRY_NATIVE_HISTOGRAMS=true` the store also keeps native histograms (in its
//! native-histograms extension, see [`nixl_telemetry_mp_store::layout`]), which the node's
//! endpoint serves to a scraper that asks for the protobuf exposition.

use std::ffi::CStr;
use std::sync::Arc;
use std::time::Instant;

use nixl_telemetry_base::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_base::Event;
use nixl_telemetry_mp_store::config::MpConfig;
use nixl_telemetry_mp_store::dir;
use nixl_telemetry_mp_store::election::Election;
use nixl_telemetry_mp_store::join_election;
use nixl_telemetry_mp_store::store::{Identity, StoreWriter};
use nixl_telemetry_series::hostname;

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
        let store =
            StoreWriter::create_with(dir, &id, &config.buckets, config.native).map_err(|e| {
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
        self.poll_election();
        applied
    }

    /// An idle flush: the store is checked (another process may have truncated, deleted or
    /// replaced it: it is made again), then the election polled.
    fn tick(&mut self) {
        self.store.check();
        self.poll_election();
    }
}

impl PrometheusMpExporter {
    fn poll_election(&self) {
        if let Some(e) = &self.election {
            e.tick(Instant::now());
        }
    }
}

nixl_telemetry_base::export_telemetry_plugin!(PrometheusMpExporter);
