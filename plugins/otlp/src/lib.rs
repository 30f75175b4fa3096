//! The OTLP exporter plug-in (`libtelemetry_exporter_otlp.so`, selected with
//! `NIXL_TELEMETRY_EXPORTER=otlp`): every agent's metrics pushed as OTLP/HTTP protobuf to
//! `/v1/metrics` through the shared push loop; the mapping, the `OTEL_*` configuration and the
//! temporality are `nixl_telemetry_push::otlp`'s.

use std::ffi::CStr;
use std::sync::Arc;

use nixl_telemetry::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry::settings::process_settings;
use nixl_telemetry::Event;
use nixl_telemetry_push::otlp::{Otlp, OtlpConfig};
use nixl_telemetry_push::{Client, Pusher, Source};
use nixl_telemetry_series::{hostname, AgentSeries, Buckets, WorkloadLabels};

/// One agent's exporter: its series, pushed by its own loop until dropped.
pub struct OtlpExporter {
    series: Arc<AgentSeries>,
    _pusher: Pusher,
}

impl TelemetryPlugin for OtlpExporter {
    const NAME: &'static CStr = c"otlp";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(params: &InitParams) -> Result<Self, CreateError> {
        let config = OtlpConfig::from_env(&nixl_telemetry::env::environment, &process_settings)
            .map_err(CreateError::InvalidParam)?;
        let buckets = Buckets::from_env().map_err(|e| CreateError::InvalidParam(e.message))?;
        let rank = nixl_telemetry_push::rank_label(&process_settings)
            .map_err(CreateError::InvalidParam)?;
        let host = hostname();
        let workload = WorkloadLabels::from_env().map_err(CreateError::InvalidParam)?;
        let series =
            Arc::new(AgentSeries::new(params.agent_name, &host, buckets).with_labels(workload));
        let client = Client::new(config.target.clone()).map_err(CreateError::InvalidParam)?;
        let mut own_attributes;
        let source: Source = {
            let series = series.clone();
            let mut attrs = vec![("agent_name".to_owned(), params.agent_name.to_owned())];
            attrs.extend(rank);
            own_attributes = attrs.clone();
            own_attributes.extend(series.labels().pairs().iter().cloned());
            Box::new(move || vec![(series.snapshot(), attrs.clone())])
        };
        let payload = Otlp::new(source, own_attributes, &config, &host);
        let pusher = Pusher::start(client, Box::new(payload), config.push)
            .map_err(|e| CreateError::Other(format!("otlp: cannot start the push thread: {e}")))?;
        Ok(OtlpExporter {
            series,
            _pusher: pusher,
        })
    }

    fn export(&mut self, events: &[Event]) -> usize {
        self.series.apply(events)
    }
}

nixl_telemetry::export_telemetry_plugin!(OtlpExporter);
