//! Workload labels: `key="value"` pairs added to every series of every exporter that names
//! series, so a series tells which job (and which pod, which node of the job) it belongs to.
//! Off by default: without the two variables no label is added and the series are NIXL's.
//!
//! - `NIXL_TELEMETRY_LABELS="key=value,..."`: labels given explicitly. Pairs are separated by
//!   `,`; a pair is split at its first `=`; names and values are trimmed of ASCII whitespace;
//!   `\,` and `\\` put a comma or a backslash in a value. Empty pairs (`a=1,,b=2`, a trailing
//!   comma) are ignored.
//! - `NIXL_TELEMETRY_LABELS_FROM=slurm,kubernetes`: labels taken from the variables a scheduler
//!   sets ([`SOURCES`]); a variable that is unset (or empty) adds no label. An explicit label
//!   of the same name wins.
//!
//! Rules, each an error naming the variable: a name is a Prometheus label name
//! (`[a-zA-Z_][a-zA-Z0-9_]*`, at most [`MAX_NAME_BYTES`] bytes) that does not start with `__`
//! (Prometheus reserves those) and is none of [`RESERVED`] (the exporters' own labels, and the
//! `job`/`instance` labels Prometheus attaches to every scraped series); a name appears once;
//! a value is not empty, has no control character and is at most [`MAX_VALUE_BYTES`] bytes
//! (a longer value taken from a scheduler variable is truncated, with a warning); at most
//! [`MAX_LABELS`] labels in all. Values are escaped by the text encoder
//! ([`crate::text::escape_label_value`]) like every other label value.

use std::sync::Arc;

use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::settings::{self, process_settings};

/// `NIXL_TELEMETRY_LABELS`: explicit workload labels, `key=value,...`.
pub const ENV_LABELS: &str = settings::LABELS.name;
/// `NIXL_TELEMETRY_LABELS_FROM`: comma list of [`SOURCES`] to take labels from.
pub const ENV_LABELS_FROM: &str = settings::LABELS_FROM.name;
/// The most workload labels a process may set (each one multiplies nothing, but every series
/// carries all of them: the bound keeps pages and the scraper's index small).
pub const MAX_LABELS: usize = 16;
/// The longest label name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// The longest label value, in bytes.
pub const MAX_VALUE_BYTES: usize = 256;

/// Label names a workload label may not take: the labels the exporters set themselves, and
/// the target labels Prometheus adds to every series it scrapes (a page's own `job` or
/// `instance` would be renamed `exported_job`, `exported_instance`).
pub const RESERVED: [&str; 9] = [
    "hostname",
    "agent_name",
    "pid",
    "agent_instance",
    "local_rank",
    "le",
    "status",
    "job",
    "instance",
];

/// One scheduler whose variables `NIXL_TELEMETRY_LABELS_FROM` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The word in `NIXL_TELEMETRY_LABELS_FROM`.
    pub name: &'static str,
    /// (environment variable, label name) pairs, in label order.
    pub variables: &'static [(&'static str, &'static str)],
}

/// The schedulers and the labels each provides. Only variables that are the same for every
/// rank of a job on a node are taken (a per-rank variable such as `SLURM_PROCID` would make
/// the node totals per rank; the rank is the `local_rank` label's business).
pub const SOURCES: [Source; 2] = [
    Source {
        name: "slurm",
        variables: &[
            ("SLURM_JOB_ID", "slurm_job_id"),
            ("SLURM_JOB_NAME", "slurm_job_name"),
            ("SLURM_NODEID", "slurm_node_id"),
        ],
    },
    // The names the Kubernetes downward API is conventionally exposed under
    // (`env: - name: POD_NAME valueFrom: fieldRef: fieldPath: metadata.name`, ...).
    Source {
        name: "kubernetes",
        variables: &[
            ("POD_NAME", "k8s_pod"),
            ("POD_NAMESPACE", "k8s_namespace"),
            ("NODE_NAME", "k8s_node"),
        ],
    },
];

/// A process's workload labels, validated, in output order. Cheap to clone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadLabels(Arc<[(String, String)]>);

impl WorkloadLabels {
    /// No labels (the default: the series are NIXL's).
    pub fn none() -> WorkloadLabels {
        WorkloadLabels::default()
    }

    /// The labels of this process, through [`process_settings`]: the two settings from the
    /// environment, then NIXL's configuration file; the scheduler variables (not settings of
    /// this library) from the environment only.
    pub fn from_env() -> Result<WorkloadLabels, String> {
        WorkloadLabels::from_lookup(&process_settings)
    }

    /// The labels `env` gives ([`ENV_LABELS`], [`ENV_LABELS_FROM`] and the variables of
    /// [`SOURCES`]). Errors name the variable.
    pub fn from_lookup(env: Lookup) -> Result<WorkloadLabels, String> {
        let settings = env;
        let scheduler = env;
        let mut pairs = match settings(ENV_LABELS).map_err(|e| e.message)? {
            Some(v) => parse_list(&v)
                .and_then(|p| WorkloadLabels::from_pairs(p.clone()).map(|_| p))
                .map_err(|e| format!("{ENV_LABELS}='{v}': {e}"))?,
            None => Vec::new(),
        };
        let explicit = pairs.len();
        if let Some(from) = settings(ENV_LABELS_FROM).map_err(|e| e.message)? {
            for word in from.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                let source = SOURCES
                    .iter()
                    .find(|s| s.name.eq_ignore_ascii_case(word))
                    .ok_or_else(|| {
                        let known: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
                        format!(
                            "{ENV_LABELS_FROM}='{from}': unknown source '{word}' (use a comma \
                             list of {})",
                            known.join(", ")
                        )
                    })?;
                let before = pairs.len();
                for (var, label) in source.variables {
                    let Some(value) = scheduler(var).map_err(|e| e.message)? else {
                        continue;
                    };
                    let value = value.trim();
                    if value.is_empty() || pairs[..explicit].iter().any(|(n, _)| n == label) {
                        continue;
                    }
                    let kept = truncate_str(value, MAX_VALUE_BYTES);
                    if kept.len() < value.len() {
                        log::warn!(
                            "{ENV_LABELS_FROM}: {var} is longer than {MAX_VALUE_BYTES} bytes; \
                             label {label} keeps '{kept}'"
                        );
                    }
                    if !pairs[explicit..].iter().any(|(n, _)| n == label) {
                        pairs.push(((*label).to_owned(), kept.to_owned()));
                    }
                }
                if pairs.len() == before {
                    log::warn!(
                        "{ENV_LABELS_FROM} names {} but none of {} is set (or an explicit label \
                         of {ENV_LABELS} replaces it): no label taken from it",
                        source.name,
                        source
                            .variables
                            .iter()
                            .map(|(v, _)| *v)
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
        }
        WorkloadLabels::from_pairs(pairs)
            .map_err(|e| format!("{ENV_LABELS} with {ENV_LABELS_FROM}: {e}"))
    }

    /// Validates `pairs` (see the module documentation); the error says what is wrong, the
    /// caller names the variable.
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Result<WorkloadLabels, String> {
        if pairs.len() > MAX_LABELS {
            return Err(format!(
                "{} labels; at most {MAX_LABELS} are allowed",
                pairs.len()
            ));
        }
        for (i, (name, value)) in pairs.iter().enumerate() {
            check_name(name)?;
            check_value(name, value)?;
            if pairs[..i].iter().any(|(n, _)| n == name) {
                return Err(format!("label '{name}' is given twice"));
            }
        }
        Ok(WorkloadLabels(pairs.into()))
    }

    /// The labels, in output order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// The labels as borrowed `(name, value)` pairs, for [`crate::text::Row`] labels.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// True when there is no label.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of label `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// Splits a [`ENV_LABELS`] value into (name, value) pairs, unvalidated (see the module
/// documentation for the syntax).
pub fn parse_list(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars();
    let mut finish = |entry: &str| -> Result<(), String> {
        if entry.trim().is_empty() {
            return Ok(());
        }
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("'{}' is not a key=value pair", entry.trim()))?;
        pairs.push((name.trim().to_owned(), value.trim().to_owned()));
        Ok(())
    };
    loop {
        match chars.next() {
            None => break,
            Some('\\') => match chars.next() {
                Some(c @ (',' | '\\')) => current.push(c),
                Some(c) => {
                    return Err(format!(
                        "unknown escape '\\{c}' (only '\\,' and '\\\\' are escapes)"
                    ))
                }
                None => return Err("it ends with an unterminated escape '\\'".into()),
            },
            Some(',') => finish(&std::mem::take(&mut current))?,
            Some(c) => current.push(c),
        }
    }
    finish(&current)?;
    Ok(pairs)
}

fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "label name '{name}' is not a Prometheus label name (letters, digits and '_', not \
             starting with a digit)"
        ));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "label name '{name}' is longer than {MAX_NAME_BYTES} bytes"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "label name '{name}' starts with '__', which Prometheus reserves"
        ));
    }
    if RESERVED.contains(&name) {
        return Err(format!(
            "label name '{name}' is reserved (the exporters and Prometheus set {})",
            RESERVED.join(", ")
        ));
    }
    Ok(())
}

fn check_value(name: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!(
            "label '{name}' has an empty value (Prometheus treats it as no label)"
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!(
            "the value of label '{name}' contains a control character"
        ));
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "the value of label '{name}' is longer than {MAX_VALUE_BYTES} bytes"
        ));
    }
    Ok(())
}

/// `s` cut to at most `max` bytes at a character boundary (the layout of `prometheus_mp`'s
/// store fields and the label values share it).
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::env::fixed_env;

    fn labels(
        settings: &[(&str, &str)],
        sched: &[(&str, &str)],
    ) -> Result<Vec<(String, String)>, String> {
        let all: Vec<(&str, &str)> = settings.iter().chain(sched).copied().collect();
        WorkloadLabels::from_lookup(&fixed_env(&all)).map(|l| l.pairs().to_vec())
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn unset_means_no_labels() {
        assert_eq!(labels(&[], &[("SLURM_JOB_ID", "7")]).unwrap(), []);
        assert!(WorkloadLabels::none().is_empty());
    }

    #[test]
    fn explicit_labels_parse_with_escapes_and_trimming() {
        let l = labels(
            &[(
                ENV_LABELS,
                " team = infra , job_desc=a\\,b=c\\\\d ,, model=llama,",
            )],
            &[],
        )
        .unwrap();
        assert_eq!(
            l,
            pairs(&[
                ("team", "infra"),
                ("job_desc", "a,b=c\\d"),
                ("model", "llama")
            ])
        );
    }

    #[test]
    fn scheduler_labels_follow_the_documented_mapping() {
        let sched = [
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_NODEID", "3"),
            ("SLURM_PROCID", "17"),
            ("POD_NAME", "vllm-0"),
            ("POD_NAMESPACE", "serving"),
            ("NODE_NAME", "gpu-node-9"),
        ];
        let l = labels(&[(ENV_LABELS_FROM, "slurm, Kubernetes")], &sched).unwrap();
        assert_eq!(
            l,
            pairs(&[
                ("slurm_job_id", "4242"),
                ("slurm_job_name", "train"),
                ("slurm_node_id", "3"),
                ("k8s_pod", "vllm-0"),
                ("k8s_namespace", "serving"),
                ("k8s_node", "gpu-node-9"),
            ])
        );
        // Explicit labels come first and win over a scheduler's label of the same name;
        // unset scheduler variables add nothing.
        let l = labels(
            &[
                (ENV_LABELS, "slurm_job_id=mine,team=a"),
                (ENV_LABELS_FROM, "slurm"),
            ],
            &[("SLURM_JOB_ID", "4242"), ("SLURM_NODEID", "0")],
        )
        .unwrap();
        assert_eq!(
            l,
            pairs(&[
                ("slurm_job_id", "mine"),
                ("team", "a"),
                ("slurm_node_id", "0")
            ])
        );
        // A long job name is truncated with a warning, not fatal.
        let long = "n".repeat(300);
        let (l, logged) = nixl_telemetry_base::logging::capture(|| {
            labels(&[(ENV_LABELS_FROM, "slurm")], &[("SLURM_JOB_NAME", &long)]).unwrap()
        });
        assert_eq!(l[0].1.len(), MAX_VALUE_BYTES);
        let w = nixl_telemetry_base::logging::warnings(&logged);
        assert!(
            w.len() == 1 && w[0].contains("SLURM_JOB_NAME is longer than 256"),
            "{w:?}"
        );
        // A source none of whose variables is set: no label, one warning naming them.
        let (l, logged) = nixl_telemetry_base::logging::capture(|| {
            labels(&[(ENV_LABELS_FROM, "kubernetes")], &[]).unwrap()
        });
        assert!(l.is_empty());
        let w = nixl_telemetry_base::logging::warnings(&logged);
        assert!(
            w.len() == 1 && w[0].contains("names kubernetes but none of POD_NAME"),
            "{w:?}"
        );
    }

    #[test]
    fn bad_labels_are_errors_naming_the_variable() {
        let err = |s: &[(&str, &str)]| labels(s, &[]).unwrap_err();
        for (value, why) in [
            ("my-job=1", "not a Prometheus label name"),
            ("1job=1", "not a Prometheus label name"),
            ("__name__=x", "Prometheus reserves"),
            ("pid=3", "reserved"),
            ("job=x", "reserved"),
            ("hostname=x", "reserved"),
            ("__meta=x", "starts with '__'"),
            ("a=1,b", "'b' is not a key=value pair"),
            ("a=1\\", "unterminated escape"),
            ("a=\\n", "unknown escape"),
            ("a=", "empty value"),
            ("a=1,a=2", "given twice"),
            ("a=x\ty", "control character"),
        ] {
            let e = err(&[(ENV_LABELS, value)]);
            assert!(e.contains(ENV_LABELS) && e.contains(why), "{value}: {e}");
        }
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}=v")).collect();
        let e = err(&[(ENV_LABELS, &many.join(","))]);
        assert!(e.contains(ENV_LABELS) && e.contains("at most 16"), "{e}");
        let e = err(&[(ENV_LABELS, &format!("a={}", "v".repeat(257)))]);
        assert!(e.contains("longer than 256"), "{e}");
        let e = err(&[(ENV_LABELS_FROM, "slurm,pbs")]);
        assert!(
            e.contains(ENV_LABELS_FROM) && e.contains("unknown source 'pbs'"),
            "{e}"
        );
    }
}
