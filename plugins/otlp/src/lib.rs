//! The OTLP exporter plug-in (`libtelemetry_exporter_otlp.so`, selected with
//! `NIXL_TELEMETRY_EXPORTER=otlp`): every agent's metrics pushed as OTLP/HTTP protobuf to
//! `/v1/metrics` through the shared push loop; the mapping, the `OTEL_*` configuration and the
//! temporality are `nixl_telemetry_push::otlp`'s.

use std::ffi::CStr;

use nixl_telemetry_base::plugin::author::{CreateError, InitParams, TelemetryPlugin};
use nixl_telemetry_base::settings::process_settings;
use nixl_telemetry_base::Event;
use nixl_telemetry_push::otlp::{exponential_histograms, Otlp, OtlpConfig};
use nixl_telemetry_push::AgentPush;
use nixl_telemetry_series::hostname;

/// One agent's exporter: its series, pushed by its own loop until dropped.
pub struct OtlpExporter(AgentPush);

impl TelemetryPlugin for OtlpExporter {
    const NAME: &'static CStr = c"otlp";
    const VERSION: &'static CStr = c"0.1.0";

    fn create(params: &InitParams) -> Result<Self, CreateError> {
        let host = hostname();
        // Its resource's `service.instance.id` is the sender's identity (the push crate's).
        let config = OtlpConfig::from_settings(&process_settings, &host)
            .map_err(CreateError::InvalidParam)?;
        let exponential =
            exponential_histograms(&process_settings).map_err(CreateError::InvalidParam)?;
        let push = AgentPush::start(
            params.agent_name,
            &host,
            false,
            exponential,
            config.target.clone(),
            config.push.clone(),
            |source, own_attributes| Box::new(Otlp::new(source, own_attributes, &config, &host)),
        )?;
        Ok(OtlpExporter(push))
    }

    fn export(&mut self, events: &[Event]) -> usize {
        self.0.apply(events)
    }
}

nixl_telemetry_base::export_telemetry_plugin!(OtlpExporter);
