//! What the push exporters push: snapshots with their labels ([`Source`]), and the workload
//! label this process adds (`local_rank`).

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
