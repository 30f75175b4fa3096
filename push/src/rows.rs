//! What the push exporters push: snapshots with their labels ([`Source`]), the workload
//! label this process adds (`local_rank`), and the sender's identity ([`instance`]): the
//! remote-write `instance` label and OTLP's `service.instance.id`, so that two processes
//! describing themselves alike (same agent name, host and rank) still push two series, as two
//! scrape targets would.

use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::settings;
use nixl_telemetry_series::AgentSnapshot;

/// Label (or attribute) names and values of one set of series.
pub type Labels = Vec<(String, String)>;

/// What a push exporter pushes, taken on the push thread: snapshots with their labels (one per
/// agent in a plug-in; one per rank store for `nixl-telemetry serve`).
pub type Source = Box<dyn FnMut() -> Vec<(AgentSnapshot, Labels)> + Send>;

/// `NIXL_TELEMETRY_RANK_ENV`: the name of the variable whose value is the `local_rank` label
/// (default `LOCAL_RANK`), as for the multi-process Prometheus exporter. (Hook: when the
/// series crate gains shared workload labels, the push exporters take theirs from there.)
pub const ENV_RANK_ENV: &str = settings::RANK_ENV.name;

/// The `local_rank` label of this process, if its rank variable is set: `(name, value)`.
pub fn rank_label(settings: Lookup) -> Result<Option<(String, String)>, String> {
    let var = settings(ENV_RANK_ENV)
        .map_err(|e| e.message)?
        .unwrap_or_else(|| settings::RANK_ENV.default_str().to_owned());
    let value = nixl_telemetry_base::env::environment(&var).map_err(|e| e.message)?;
    Ok(value
        .filter(|v| !v.is_empty())
        .map(|v| ("local_rank".to_owned(), v)))
}

/// `NIXL_TELEMETRY_PUSH_INSTANCE`: the identity a pushing process gives itself.
pub const ENV_INSTANCE: &str = settings::PUSH_INSTANCE.name;

/// The name of the remote-write label that carries the sender's identity (Prometheus' own name
/// for a scrape target).
pub const INSTANCE_LABEL: &str = "instance";

/// The OTLP resource attribute that carries the sender's identity (Prometheus' OTLP receiver
/// turns it into `instance`).
pub const INSTANCE_ATTRIBUTE: &str = "service.instance.id";

/// The identity of this process as a sender: `NIXL_TELEMETRY_PUSH_INSTANCE` when set (and not
/// blank), else `<host>:<pid>`, the value OTLP's `service.instance.id` has by default.
pub fn instance(settings: Lookup, host: &str) -> Result<String, String> {
    match settings(ENV_INSTANCE).map_err(|e| e.message)? {
        Some(v) if !v.trim().is_empty() => {
            let v = v.trim();
            if v.chars().any(char::is_control) {
                return Err(format!(
                    "{ENV_INSTANCE}='{}': control characters are not allowed",
                    v.escape_debug()
                ));
            }
            Ok(v.to_owned())
        }
        _ => Ok(format!("{host}:{}", std::process::id())),
    }
}

/// Sets `service.instance.id` in OTLP resource attributes to `instance` unless they already
/// name one (`OTEL_RESOURCE_ATTRIBUTES=service.instance.id=...` wins, as OpenTelemetry says).
pub fn with_instance(resource: &mut Vec<(String, String)>, instance: &str) {
    if !resource.iter().any(|(k, _)| k == INSTANCE_ATTRIBUTE) {
        resource.push((INSTANCE_ATTRIBUTE.to_owned(), instance.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::env::fixed_env;

    #[test]
    fn the_instance_is_host_and_pid_unless_set() {
        let none = fixed_env(&[]);
        let pid = std::process::id();
        assert_eq!(instance(&none, "node-1").unwrap(), format!("node-1:{pid}"));
        let blank = fixed_env(&[(ENV_INSTANCE, "  ")]);
        assert_eq!(instance(&blank, "n").unwrap(), format!("n:{pid}"));
        let set = fixed_env(&[(ENV_INSTANCE, " job-7/rank-0 ")]);
        assert_eq!(instance(&set, "n").unwrap(), "job-7/rank-0");
        let bad = fixed_env(&[(ENV_INSTANCE, "a\nb")]);
        let e = instance(&bad, "n").unwrap_err();
        assert!(e.starts_with(ENV_INSTANCE), "{e}");
    }

    #[test]
    fn a_configured_service_instance_id_wins() {
        let mut r = vec![("service.name".to_owned(), "nixl".to_owned())];
        with_instance(&mut r, "h:1");
        assert_eq!(r[1], (INSTANCE_ATTRIBUTE.to_owned(), "h:1".to_owned()));
        with_instance(&mut r, "h:2");
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].1, "h:1");
    }
}
