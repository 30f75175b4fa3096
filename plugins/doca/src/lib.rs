//! The DOCA exporter plug-in (`libtelemetry_exporter_doca.so`, selected with
//! `NIXL_TELEMETRY_EXPORTER=doca`). It drives one or both delivery backends named by
//! `NIXL_TELEMETRY_DOCA_BACKENDS` (comma list, trimmed, de-duplicated; unset or empty:
//! `scrape`):
//!
//! - `scrape`: exactly the Prometheus exporter's series (the same engine and the same
//!   endpoint code, both from the series crate [`nixl_telemetry_series`]) at
//!   `GET /metrics` on `NIXL_TELEMETRY_DOCA_PROMETHEUS_PORT` (default 9091), 127.0.0.1 only
//!   with `NIXL_TELEMETRY_DOCA_PROMETHEUS_LOCAL`. Same rules as the Prometheus plug-in: one
//!   endpoint per process (the first agent's address wins), duplicate agent names refused, a
//!   destroyed agent's series removed, a port held by another process a benign collision
//!   (`BIND_FAILED`: one warning from the host, the agent runs without a sink). The workload
//!   labels (`NIXL_TELEMETRY_LABELS`, `NIXL_TELEMETRY_LABELS_FROM`,
//!   [`nixl_telemetry_series::labels`]) are added to every series, and with
//!   `NIXL_TELEMETRY_NATIVE_HISTOGRAMS` the native histograms are kept and served in the
//!   protobuf exposition to scrapers that ask for it, as by the Prometheus plug-in.
//! - `ipc`: every event reported through NVIDIA's DOCA Telemetry Exporter library, loaded at
//!   run time, to the DOCA Telemetry Service ([`ipc`]; the DOCA functions used are listed in
//!   [`doca`]). Without the libraries, or when DTS is unreachable: one warning, and the
//!   exporter goes on.
//!
//! Settings are read when an agent's exporter is created ([`config`]); an invalid value fails
//! the creation with a message naming the variable, an unknown backend with the list of valid
//! ones.
//!
//! # One DOCA configuration per process
//!
//! As in NIXL, the agents of a process share one DOCA context: the first agent's choice
//! (backends, histogram bounds, `ipc` sockets and library directories) is kept while any agent
//! of the process lives; a later agent asking for something else gets one warning and the
//! first agent's choice. When the last agent goes, the context is torn down and the next
//! agent chooses afresh.
//!
//! # What `export` returns
//!
//! An event counts as kept when at least one selected backend kept it. The `scrape` backend
//! keeps every event of a known type (it is in the series); the `ipc` backend keeps a batch
//! only when DOCA accepted every call, flushed, and says IPC is connected. So with `scrape`
//! selected nothing is counted lost because DTS is missing, while with `ipc` alone every event
//! DTS did not get is counted as not kept (the collector then reports the loss in its stats,
//! and logs it once).

use std::ffi::{CStr, CString};
use std::sync::{Arc, Mutex, MutexGuard};

use nixl_telemetry_base::event::xfer_stalled_event;
use nixl_telemetry_base::fork::LockOrder;
use nixl_telemetry_base::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_base::Event;
use nixl_telemetry_series::endpoint::{Membership, SharedEndpoint};
use nixl_telemetry_series::native::{DEFAULT_MAX_BUCKETS, DEFAULT_SCHEMA};
use nixl_telemetry_series::{hostname, AgentSeries, Buckets};

pub mod config;
pub mod doca;
pub mod ipc;

use config::{Backends, DocaConfig, IpcSettings};
use ipc::IpcContext;
use nixl_telemetry_base::sync::LockUnpoisoned;

/// The `scrape` backend's endpoint, shared by every agent of the process.
static ENDPOINT: SharedEndpoint = SharedEndpoint::new("DOCA");

/// The process's DOCA configuration: fixed by the first agent while any agent lives.
#[derive(Clone, Debug, PartialEq)]
struct Choice {
    backends: Backends,
    buckets: Buckets,
    ipc: IpcSettings,
}

impl Choice {
    /// What differs from `other`, in words (the `ipc` settings only matter with `ipc`).
    fn differences(&self, other: &Choice) -> Vec<String> {
        let mut d = Vec::new();
        if self.backends != other.backends {
            d.push(format!("backends '{}'", self.backends));
        }
        if self.buckets != other.buckets {
            d.push(format!("histogram buckets {:?}", self.buckets.bounds()));
        }
        if self.backends.ipc && self.ipc.sockets_dir != other.ipc.sockets_dir {
            d.push(format!(
                "IPC sockets directory {:?}",
                self.ipc
                    .sockets_dir
                    .as_deref()
                    .unwrap_or("(DOCA's default)")
            ));
        }
        if self.backends.ipc && self.ipc.lib_dir != other.ipc.lib_dir {
            d.push(format!(
                "DOCA library directory {:?}",
                self.ipc
                    .lib_dir
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "(the loader's search path)".into())
            ));
        }
        d
    }
}

struct Process {
    choice: Option<Choice>,
    agents: Vec<String>,
    ipc: Option<Arc<IpcContext>>,
    /// The fork generation (`nixl_telemetry_base::fork::generation`) the state belongs to.
    generation: u64,
}

static PROCESS: Mutex<Process> = Mutex::new(Process {
    choice: None,
    agents: Vec::new(),
    ipc: None,
    generation: 0,
});

/// The process's state. In a child created by `fork`, the parent's (its agents, its DOCA
/// context, whose threads and sockets are the parent's) is left behind, never released: the
/// child's first agent starts afresh.
fn process() -> MutexGuard<'static, Process> {
    nixl_telemetry_base::fork::hold_across_fork(LockOrder::Plugin, &PROCESS);
    let mut p = PROCESS.lock_unpoisoned();
    let generation = nixl_telemetry_base::fork::generation();
    if p.generation != generation {
        std::mem::forget(p.ipc.take());
        p.agents.clear();
        p.choice = None;
        p.generation = generation;
    }
    p
}

/// One agent's exporter.
pub struct DocaExporter {
    agent: String,
    agent_c: CString,
    /// The agent's series in the `scrape` endpoint (`scrape` selected).
    membership: Option<Membership>,
    /// The process's DOCA context (`ipc` selected).
    ipc: Option<Arc<IpcContext>>,
}

impl TelemetryPlugin for DocaExporter {
    const NAME: &'static CStr = c"doca";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(params: &InitParams) -> Result<Self, CreateError> {
        let config =
            DocaConfig::from_lookup(&process_settings).map_err(CreateError::InvalidParam)?;
        let agent = params.agent_name;
        let agent_c = CString::new(agent)
            .map_err(|_| CreateError::InvalidParam(format!("agent name {agent:?} has a NUL")))?;
        let asked = Choice {
            backends: config.backends,
            buckets: config.buckets,
            ipc: config.ipc,
        };
        let mut p = process();
        if p.agents.iter().any(|a| a == agent) {
            return Err(CreateError::InvalidParam(format!(
                "DOCA exporter: duplicate agent name '{agent}'; each agent must have a unique \
                 name"
            )));
        }
        let choice = match &p.choice {
            Some(first) => {
                let differences = asked.differences(first);
                if !differences.is_empty() {
                    log::warn!(
                        "DOCA telemetry exporter for agent '{agent}' asked for {}, but this \
                         process's DOCA context was created with backends '{}' (and the first \
                         agent's other settings); one context is shared per process, so the \
                         first agent's choice is kept",
                        differences.join(", "),
                        first.backends
                    );
                }
                first.clone()
            }
            None => asked,
        };
        let membership = if choice.backends.scrape {
            let stalled = xfer_stalled_event(&process_settings)
                .map_err(|e| CreateError::InvalidParam(e.message))?;
            let series = AgentSeries::new(agent, &hostname(), choice.buckets.clone())
                .with_labels(config.labels.clone())
                .with_xfer_stalled(stalled)
                .with_native_histograms(
                    config.native_histograms,
                    DEFAULT_SCHEMA,
                    DEFAULT_MAX_BUCKETS,
                );
            let series = Arc::new(series);
            Some(ENDPOINT.join(config.address, series)?)
        } else {
            None
        };
        let ipc = if choice.backends.ipc {
            let context = p.ipc.get_or_insert_with(|| {
                let consequence = if choice.backends.scrape {
                    "the scrape backend is unaffected"
                } else {
                    "with ipc as the only backend, the events of this process are counted as \
                     not exported"
                };
                Arc::new(IpcContext::open(
                    &choice.ipc,
                    &choice.buckets,
                    &hostname(),
                    &config.labels,
                    consequence,
                ))
            });
            Some(context.clone())
        } else {
            None
        };
        if p.agents.is_empty() {
            log::info!(
                "DOCA telemetry exporter: backends {} for this process (first agent '{agent}')",
                choice.backends
            );
        }
        p.agents.push(agent.to_owned());
        p.choice = Some(choice);
        Ok(DocaExporter {
            agent: agent.to_owned(),
            agent_c,
            membership,
            ipc,
        })
    }

    fn export(&mut self, events: &[Event]) -> usize {
        let scraped = self.membership.as_ref().map(|m| m.apply(events));
        let pushed = self.ipc.as_ref().map(|c| c.report(&self.agent_c, events));
        // The scrape backend keeps every event of a known type, a superset of what ipc keeps.
        scraped.or(pushed).unwrap_or(0)
    }
}

impl Drop for DocaExporter {
    fn drop(&mut self) {
        // Leave the endpoint first (its own lock), then the process (never both at once).
        drop(self.membership.take());
        drop(self.ipc.take());
        let mut p = process();
        p.agents.retain(|a| *a != self.agent);
        if p.agents.is_empty() {
            p.choice = None;
            // The last agent tears the DOCA context down under the process lock, so a new
            // agent cannot set up a context (schema_init, ...) while DOCA is being torn down.
            drop(p.ipc.take());
        }
    }
}

nixl_telemetry_base::export_telemetry_plugin!(DocaExporter);

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn choice_differences_name_what_differs() {
        let scrape = Choice {
            backends: Backends::SCRAPE,
            buckets: Buckets::default(),
            ipc: IpcSettings::default(),
        };
        assert!(scrape.differences(&scrape.clone()).is_empty());
        // ipc settings do not matter without ipc.
        let mut other = scrape.clone();
        other.ipc.lib_dir = Some(PathBuf::from("/x"));
        assert!(other.differences(&scrape).is_empty());
        let ipc = Choice {
            backends: Backends {
                scrape: false,
                ipc: true,
            },
            buckets: Buckets::parse("1,2").unwrap(),
            ipc: IpcSettings {
                sockets_dir: Some("/run/dts".into()),
                lib_dir: None,
            },
        };
        let d = ipc.differences(&scrape);
        assert_eq!(d.len(), 3, "{d:?}");
        assert_eq!(d[0], "backends 'ipc'");
        assert!(d[1].starts_with("histogram buckets [1.0, 2.0]"), "{d:?}");
        assert_eq!(d[2], "IPC sockets directory \"/run/dts\"");
    }
}
