//! The agents exposed by one endpoint: agents join and leave, names are unique, and a scrape
//! takes a snapshot without blocking the agents' updates (the lock only guards the list of
//! agents, held while cloning it; updates never take it).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::{AgentSeries, AgentSnapshot};
use nixl_telemetry_base::sync::LockUnpoisoned;

/// An agent of this name is already registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateAgent(pub String);

impl fmt::Display for DuplicateAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "duplicate agent name '{}'; each agent must have a unique name",
            self.0
        )
    }
}

impl std::error::Error for DuplicateAgent {}

/// The set of agents of one endpoint, in the order they joined.
#[derive(Debug, Default)]
pub struct Registry {
    agents: Mutex<Vec<Arc<AgentSeries>>>,
}

impl Registry {
    /// An empty registry (usable in a `static`).
    pub const fn new() -> Registry {
        Registry {
            agents: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<AgentSeries>>> {
        self.agents.lock_unpoisoned()
    }

    /// Adds an agent; refuses a name already present.
    pub fn add(&self, agent: Arc<AgentSeries>) -> Result<(), DuplicateAgent> {
        let mut agents = self.lock();
        if agents.iter().any(|a| a.agent_name() == agent.agent_name()) {
            return Err(DuplicateAgent(agent.agent_name().to_owned()));
        }
        agents.push(agent);
        Ok(())
    }

    /// Removes this very agent (by identity); returns whether it was present.
    pub fn remove(&self, agent: &Arc<AgentSeries>) -> bool {
        let mut agents = self.lock();
        let before = agents.len();
        agents.retain(|a| !Arc::ptr_eq(a, agent));
        agents.len() != before
    }

    /// The number of agents.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no agent is registered.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The agents' names, in joining order.
    pub fn names(&self) -> Vec<String> {
        self.lock()
            .iter()
            .map(|a| a.agent_name().to_owned())
            .collect()
    }

    /// A snapshot of every agent, in joining order.
    pub fn snapshot(&self) -> Vec<AgentSnapshot> {
        let agents: Vec<Arc<AgentSeries>> = self.lock().clone();
        agents.iter().map(|a| a.snapshot()).collect()
    }

    /// The scrape body: every agent's series in the Prometheus text format 0.0.4.
    pub fn encode_text(&self) -> String {
        crate::text::encode(&self.snapshot())
    }

    /// The scrape response (content type and body): the protobuf exposition when `protobuf` is
    /// asked for and an agent keeps native histograms (the only series it adds), else text.
    pub fn encode(&self, protobuf: bool) -> (&'static str, Vec<u8>) {
        let snapshots = self.snapshot();
        if protobuf && snapshots.iter().any(|s| s.native.is_some()) {
            (
                crate::protobuf::CONTENT_TYPE,
                crate::protobuf::encode(&snapshots),
            )
        } else {
            (
                crate::text::CONTENT_TYPE,
                crate::text::encode(&snapshots).into_bytes(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buckets;
    use nixl_telemetry_base::event::{Event, EventType};

    fn agent(name: &str) -> Arc<AgentSeries> {
        Arc::new(AgentSeries::new(name, "h", Buckets::default()))
    }

    #[test]
    fn agents_join_leave_and_names_are_unique() {
        let r = Registry::new();
        assert!(r.is_empty());
        let a = agent("a");
        let b = agent("b");
        r.add(a.clone()).unwrap();
        r.add(b.clone()).unwrap();
        let e = r.add(agent("a")).unwrap_err();
        assert_eq!(e, DuplicateAgent("a".into()));
        assert!(e.to_string().contains("duplicate agent name 'a'"), "{e}");
        assert_eq!(r.names(), ["a", "b"]);
        a.observe(Event::new(EventType::AgentTxBytes, 5));
        let snaps = r.snapshot();
        assert_eq!(snaps.len(), 2);
        assert_eq!(snaps[0].counter(EventType::AgentTxBytes), 5);
        assert_eq!(snaps[1].counter(EventType::AgentTxBytes), 0);
        // Removing by identity: a different agent of the same name is not removed.
        assert!(!r.remove(&agent("a")));
        assert!(r.remove(&a));
        assert!(!r.remove(&a));
        assert_eq!(r.names(), ["b"]);
        // The name is free again.
        r.add(agent("a")).unwrap();
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn an_empty_registry_encodes_nothing() {
        assert_eq!(Registry::new().encode_text(), "");
    }

    #[test]
    fn protobuf_is_served_only_with_native_histograms() {
        let r = Registry::new();
        r.add(agent("a")).unwrap();
        let text = (crate::text::CONTENT_TYPE, r.encode_text().into_bytes());
        assert_eq!(r.encode(true), text);
        assert_eq!(r.encode(false), text);
        r.add(Arc::new(
            AgentSeries::new("b", "h", Buckets::default()).with_native_histograms(true, 3, 160),
        ))
        .unwrap();
        let (content_type, body) = r.encode(true);
        assert_eq!(content_type, crate::protobuf::CONTENT_TYPE);
        assert_eq!(body, crate::protobuf::encode(&r.snapshot()));
        assert_eq!(r.encode(false).0, crate::text::CONTENT_TYPE);
    }
}
