//! The `otlp` exporter's `OTEL_*` settings from NIXL's configuration file, the environment
//! winning, read through the process's settings lookup as the plug-in reads them (in a child
//! process, test-support's [`child`]: the file is read once per process).

use nixl_telemetry_base::settings::{self, process_settings};
use nixl_telemetry_push::otlp::{OtlpConfig, Temporality};
use nixl_telemetry_test_support::child;

#[test]
fn otel_settings_come_from_the_file_after_the_environment() {
    if std::env::var_os(child::CHILD_VAR).is_some() {
        let c = OtlpConfig::from_settings(&process_settings, "h").unwrap();
        assert_eq!(
            c.target.url.as_str(),
            "http://collector.example:4318/v1/metrics"
        );
        assert_eq!(c.push.interval.as_millis(), 5000);
        assert!(c.gzip);
        assert_eq!(c.temporality, Temporality::Delta);
        assert_eq!(c.resource[0], ("service.name".into(), "from-env".into()));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("nixl.cfg");
    std::fs::write(
        &cfg,
        "OTEL_EXPORTER_OTLP_ENDPOINT = 'http://collector.example:4318'\n\
         OTEL_METRIC_EXPORT_INTERVAL = 5000\nOTEL_EXPORTER_OTLP_COMPRESSION = 'gzip'\n\
         OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE = 'delta'\n\
         OTEL_SERVICE_NAME = 'from-file'\n",
    )
    .unwrap();
    let mut cmd = child::test("otel_settings_come_from_the_file_after_the_environment");
    cmd.env(child::CHILD_VAR, "1")
        .env(settings::file::CONFIG_FILE_VAR, &cfg);
    for s in settings::SETTINGS {
        cmd.env_remove(s.name);
    }
    cmd.env(settings::OTEL_SERVICE_NAME.name, "from-env");
    child::output_ok(&mut cmd, "the child reading the file");
}
