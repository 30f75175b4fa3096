//! One agent's series pushed by a plug-in (`remote_write`, `otlp`): the series the flush thread
//! updates, the labels they are pushed with (`agent_name`, `hostname` and `instance` where the
//! protocol wants them as labels, `local_rank`, then the workload labels for the push
//! counters), and the push loop, built the same way for both protocols.

use std::sync::Arc;

use nixl_telemetry_base::event::xfer_stalled_event;
use nixl_telemetry_base::plugin::author::CreateError;
use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_base::Event;
use nixl_telemetry_series::native::{DEFAULT_MAX_BUCKETS, DEFAULT_SCHEMA};
use nixl_telemetry_series::{AgentSeries, Buckets, WorkloadLabels};

use crate::pusher::{Payload, PushConfig, Pusher};
use crate::rows::{instance, rank_label, Labels, Source, INSTANCE_LABEL};
use crate::target::{Client, Target};

/// One agent's series and the loop that pushes them (stopped, with the last push, when
/// dropped).
pub struct AgentPush {
    series: Arc<AgentSeries>,
    _pusher: Pusher,
}

impl AgentPush {
    /// Creates the series of `agent` on `host` (`NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`, the rank
    /// variable, the workload labels and `NIXL_TELEMETRY_XFER_STALLED_EVENT` are read here) and starts pushing them to `target` with
    /// the payload `payload` makes of the labelled snapshots and of the labels of the sender's
    /// own counters. `host_label`: whether the series carry `hostname` and the sender's
    /// identity ([`crate::rows::instance`]) as labels (remote-write; OTLP has them as the
    /// resource's `host.name` and `service.instance.id`). `native_histograms`: whether the
    /// series keep native histograms (see [`nixl_telemetry_series::native`]).
    pub fn start(
        agent: &str,
        host: &str,
        host_label: bool,
        native_histograms: bool,
        target: Target,
        push: PushConfig,
        payload: impl FnOnce(Source, Labels) -> Box<dyn Payload>,
    ) -> Result<AgentPush, CreateError> {
        let buckets = Buckets::from_env().map_err(|e| CreateError::InvalidParam(e.message))?;
        let rank = rank_label(&process_settings).map_err(CreateError::InvalidParam)?;
        let workload = WorkloadLabels::from_env().map_err(CreateError::InvalidParam)?;
        let stalled = xfer_stalled_event(&process_settings)
            .map_err(|e| CreateError::InvalidParam(e.message))?;
        let series = Arc::new(
            AgentSeries::new(agent, host, buckets)
                .with_labels(workload)
                .with_xfer_stalled(stalled)
                .with_native_histograms(native_histograms, DEFAULT_SCHEMA, DEFAULT_MAX_BUCKETS),
        );
        let client = Client::new(target).map_err(CreateError::InvalidParam)?;
        let mut labels = vec![("agent_name".to_owned(), agent.to_owned())];
        if host_label {
            labels.push(("hostname".to_owned(), host.to_owned()));
            let id = instance(&process_settings, host).map_err(CreateError::InvalidParam)?;
            labels.push((INSTANCE_LABEL.to_owned(), id));
        }
        labels.extend(rank);
        let mut own_labels = labels.clone();
        own_labels.extend(series.labels().pairs().iter().cloned());
        let source: Source = {
            let series = series.clone();
            Box::new(move || vec![(series.snapshot(), labels.clone())])
        };
        let name = push.name.clone();
        let pusher = Pusher::start(client, payload(source, own_labels), push).map_err(|e| {
            CreateError::Other(format!("{name}: cannot start the push thread: {e}"))
        })?;
        Ok(AgentPush {
            series,
            _pusher: pusher,
        })
    }

    /// Applies a flushed batch to the series; returns how many events were kept.
    pub fn apply(&self, events: &[Event]) -> usize {
        self.series.apply(events)
    }
}
