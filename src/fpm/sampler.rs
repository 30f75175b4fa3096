//! Sampled capture: per `(namespace, component, worker_id, dp_rank)` (the producer is the
//! writer's) the newest pending payload, written once per interval.
//!
//! A newer payload replaces the pending one, even with a lower counter; only a counter equal to
//! the last one written for its key is suppressed. Ticks come every interval on the monotonic
//! clock, the first one interval after the trace opened; missed ticks are delayed rather than
//! bursted. At a tick the pending payloads leave in key order (worker_id as a string, then
//! dp_rank as a number). Memory holds one pending payload per key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::fpm::payload::ValidPayload;
use crate::fpm::record::Source;

/// The newest pending sample of one key.
pub(crate) struct Sample {
    /// Who recorded it.
    pub(crate) source: Arc<Source>,
    /// Wall-clock milliseconds when it was recorded.
    pub(crate) observed_at_unix_ms: u64,
    /// The payload.
    pub(crate) payload: ValidPayload,
}

/// The sampling key: (namespace, component, worker_id, dp_rank).
type SampleKey = (String, String, String, u64);

fn key_of(sample: &Sample) -> SampleKey {
    (
        sample.source.namespace.clone(),
        sample.source.component.clone(),
        sample.payload.worker_id.clone(),
        sample.payload.dp_rank,
    )
}

/// What [`Sampler::offer`] did with a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offered {
    /// It is now pending (its key had nothing pending).
    Pending,
    /// It replaced the pending payload of its key (that one is coalesced).
    Replaced,
    /// Its counter was the last one written for its key: suppressed (coalesced).
    Suppressed,
}

/// The sampled-mode state of one producer writer.
pub(crate) struct Sampler {
    interval: Duration,
    next_tick: Duration,
    pending: BTreeMap<SampleKey, Sample>,
    last_written: HashMap<SampleKey, u64>,
}

impl Sampler {
    /// A sampler ticking every `interval` (at least 1 ms), the first tick one interval after
    /// `now`.
    pub(crate) fn new(interval: Duration, now: Duration) -> Sampler {
        let interval = interval.max(Duration::from_millis(1));
        Sampler {
            interval,
            next_tick: now + interval,
            pending: BTreeMap::new(),
            last_written: HashMap::new(),
        }
    }

    /// Keeps `sample` as its key's pending payload, unless its counter was just written.
    pub(crate) fn offer(&mut self, sample: Sample) -> Offered {
        let key = key_of(&sample);
        if self.last_written.get(&key) == Some(&sample.payload.counter_id) {
            return Offered::Suppressed;
        }
        match self.pending.insert(key, sample) {
            Some(_) => Offered::Replaced,
            None => Offered::Pending,
        }
    }

    /// When the next tick is due.
    pub(crate) fn next_tick(&self) -> Duration {
        self.next_tick
    }

    /// Whether a tick is due at `now`; if so, schedules the next one.
    pub(crate) fn tick(&mut self, now: Duration) -> bool {
        if now < self.next_tick {
            return false;
        }
        self.next_tick += self.interval;
        if self.next_tick <= now {
            self.next_tick = now + self.interval;
        }
        true
    }

    /// Number of keys with a pending payload.
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Takes every pending sample, in key order, as written.
    pub(crate) fn take_all(&mut self) -> Vec<Sample> {
        let taken = std::mem::take(&mut self.pending);
        taken.into_values().map(|s| self.written(s)).collect()
    }

    /// Takes the pending samples of one (namespace, component), in key order, as written.
    pub(crate) fn take_of(&mut self, namespace: &str, component: &str) -> Vec<Sample> {
        let keys: Vec<SampleKey> = self
            .pending
            .keys()
            .filter(|k| k.0 == namespace && k.1 == component)
            .cloned()
            .collect();
        let mut taken = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(sample) = self.pending.remove(&key) {
                taken.push(self.written(sample));
            }
        }
        taken
    }

    /// Records `sample`'s counter as the last one written for its key.
    fn written(&mut self, sample: Sample) -> Sample {
        self.last_written
            .insert(key_of(&sample), sample.payload.counter_id);
        sample
    }
}
