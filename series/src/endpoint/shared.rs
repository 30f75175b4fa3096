//! A plug-in's process-wide endpoint, shared by the agents of the process: the first agent
//! binds the address (its address wins), later agents' series join the running endpoint,
//! duplicate agent names are refused, a leaving agent's series disappear, and the endpoint
//! stops (freeing the port) when the last agent leaves.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use nixl_telemetry_base::fork::LockOrder;
use nixl_telemetry_base::plugin::author::CreateError;
use nixl_telemetry_base::Event;

use crate::{AgentSeries, Registry};

use super::http::{Format, Health};
use super::server::{BindError, Limits, Pages, Server};
use nixl_telemetry_base::sync::LockUnpoisoned;

/// Why an agent could not join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinError {
    /// Another agent of this process has the same name.
    Duplicate(String),
    /// The address is held by another process: benign, the agent runs without a sink.
    AddressInUse(String),
    /// The endpoint could not be started for another reason.
    Other(String),
}

impl JoinError {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            JoinError::Duplicate(m) | JoinError::AddressInUse(m) | JoinError::Other(m) => m,
        }
    }
}

/// How a plug-in's `create` reports a failed join: a duplicate name is an invalid parameter, an
/// address held by another process a benign `BIND_FAILED` (the host logs one warning and the
/// agent runs without a sink), anything else an error.
impl From<JoinError> for CreateError {
    fn from(e: JoinError) -> CreateError {
        match e {
            JoinError::Duplicate(m) => CreateError::InvalidParam(m),
            JoinError::AddressInUse(m) => CreateError::BindFailed(m),
            JoinError::Other(m) => CreateError::Other(m),
        }
    }
}

struct Running {
    registry: Arc<Registry>,
    server: Server,
}

/// A plug-in endpoint's pages: every agent's series; healthy while the process serves (its
/// `/health` says how many agents it serves).
struct RegistryPages(Arc<Registry>);

impl Pages for RegistryPages {
    fn metrics(&self, format: Format) -> (&'static str, Vec<u8>) {
        self.0.encode(format == Format::Protobuf)
    }

    fn health(&self) -> Health {
        Health::ready(format!(r#""agents":{}"#, self.0.len()))
    }
}

/// One plug-in's endpoint (a `static` of the plug-in).
pub struct SharedEndpoint {
    exporter: &'static str,
    limits: Limits,
    running: Mutex<Option<Running>>,
}

impl SharedEndpoint {
    /// An endpoint not yet bound; `exporter` names the plug-in in messages ("Prometheus").
    pub const fn new(exporter: &'static str) -> SharedEndpoint {
        SharedEndpoint {
            exporter,
            limits: Limits {
                max_connections: 32,
                max_head_bytes: 8 * 1024,
                request_timeout: std::time::Duration::from_secs(10),
                write_timeout: std::time::Duration::from_secs(10),
                linger: std::time::Duration::from_secs(1),
            },
            running: Mutex::new(None),
        }
    }

    /// The running endpoint, if it runs in this process: one inherited through a fork (its
    /// server's thread does not exist in the child, and its socket is closed there) is left
    /// behind, never released, and the child's first agent binds its own.
    fn lock(&'static self) -> MutexGuard<'static, Option<Running>> {
        nixl_telemetry_base::fork::hold_across_fork(LockOrder::Plugin, &self.running);
        let mut running = self.running.lock_unpoisoned();
        if running.as_ref().is_some_and(|r| r.server.inherited()) {
            std::mem::forget(running.take());
        }
        running
    }

    /// Adds `series` to the endpoint, binding `addr` first if the endpoint is not running. An
    /// agent asking for another address while it runs joins it anyway, with a warning.
    pub fn join(
        &'static self,
        addr: SocketAddr,
        series: Arc<AgentSeries>,
    ) -> Result<Membership, JoinError> {
        let mut running = self.lock();
        if let Some(r) = running.as_ref() {
            let serving = r.server.local_addr();
            let same =
                serving.ip() == addr.ip() && (serving.port() == addr.port() || addr.port() == 0);
            r.registry
                .add(series.clone())
                .map_err(|d| JoinError::Duplicate(format!("{} exporter: {d}", self.exporter)))?;
            if !same {
                log::warn!(
                    "{} telemetry endpoint of this process already serves {serving}; agent \
                     '{}' asked for {addr} and joins it (the first agent's address wins)",
                    self.exporter,
                    series.agent_name()
                );
            }
            return Ok(Membership {
                endpoint: self,
                series,
            });
        }
        let registry = Arc::new(Registry::new());
        registry
            .add(series.clone())
            .expect("a new registry has no agents");
        let metrics = Arc::new(RegistryPages(registry.clone()));
        let server = Server::bind(addr, self.limits, metrics).map_err(|e| match e {
            BindError::AddrInUse(_) => JoinError::AddressInUse(format!(
                "{} telemetry endpoint '{addr}' could not be bound (likely already in use by \
                 another process)",
                self.exporter
            )),
            BindError::Other(e) => JoinError::Other(format!(
                "{} telemetry endpoint '{addr}' could not be started: {e}",
                self.exporter
            )),
        })?;
        log::info!(
            "{} telemetry endpoint serving http://{}/metrics",
            self.exporter,
            server.local_addr()
        );
        *running = Some(Running { registry, server });
        Ok(Membership {
            endpoint: self,
            series,
        })
    }

    /// The address being served, if running.
    pub fn local_addr(&'static self) -> Option<SocketAddr> {
        self.lock().as_ref().map(|r| r.server.local_addr())
    }

    /// The names of the agents being served, in joining order.
    pub fn agents(&'static self) -> Vec<String> {
        self.lock()
            .as_ref()
            .map(|r| r.registry.names())
            .unwrap_or_default()
    }

    fn leave(&'static self, series: &Arc<AgentSeries>) {
        let mut running = self.lock();
        let Some(r) = running.as_ref() else {
            return;
        };
        r.registry.remove(series);
        if r.registry.is_empty() {
            // Dropping the server joins its thread and closes the listening socket.
            let stopped = running.take();
            drop(stopped);
        }
    }
}

/// An agent's place in the endpoint; dropping it removes the agent's series (and stops the
/// endpoint if it was the last agent).
pub struct Membership {
    endpoint: &'static SharedEndpoint,
    series: Arc<AgentSeries>,
}

impl Membership {
    /// The agent's series.
    pub fn series(&self) -> &Arc<AgentSeries> {
        &self.series
    }

    /// Applies a batch of events to the agent's series (lock-free); returns how many applied.
    pub fn apply(&self, events: &[Event]) -> usize {
        self.series.apply(events)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.endpoint.leave(&self.series);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_join_becomes_the_matching_create_error() {
        let m = || "m".to_owned();
        assert!(matches!(
            CreateError::from(JoinError::Duplicate(m())),
            CreateError::InvalidParam(s) if s == "m"
        ));
        assert!(matches!(
            CreateError::from(JoinError::AddressInUse(m())),
            CreateError::BindFailed(s) if s == "m"
        ));
        assert!(matches!(
            CreateError::from(JoinError::Other(m())),
            CreateError::Other(s) if s == "m"
        ));
    }
}
