//! The node totals (with [`crate::config::Aggregate::Sum`]): one per (`hostname`, workload
//! labels), the counters and histograms summed over every rank of the directory with that host
//! and those labels, whatever their agent names (ranks are usually named apart), with no gauges
//! and none of the per-process labels (`agent_name`, `pid`, `agent_instance`, `local_rank`), so
//! a total is what `sum without (agent_name, pid, agent_instance, local_rank)` of its ranks
//! gives (two jobs on one node get a total each). A total has native histograms when all its
//! ranks keep them, merged at their lowest schema, and no histograms when its ranks' bucket
//! bounds differ.

use nixl_telemetry_series::AgentSnapshot;

use crate::reader::StoreView;

/// One node total: the summed values of the stores of one (hostname, workload labels), whatever
/// their agent names.
pub(super) struct Total {
    pub(super) snapshot: AgentSnapshot,
    /// False when its stores' bucket bounds differ (then no histogram is summed).
    pub(super) histograms: bool,
}

/// Adds the values of a rank's snapshot `s` into `total`.
fn add_into(total: &mut Total, s: &AgentSnapshot) {
    for (t, v) in total.snapshot.counters.iter_mut().zip(&s.counters) {
        *t = t.wrapping_add(*v);
    }
    // Native histograms: merged at the lower schema of the two, and only while every rank of
    // the total keeps them (a total of some ranks only would undercount).
    match (&mut total.snapshot.native, &s.native) {
        (Some(t), Some(h)) => t.iter_mut().zip(h.iter()).for_each(|(t, h)| t.merge(h)),
        (t, _) => *t = None,
    }
    if !total.histograms {
        return;
    }
    if total
        .snapshot
        .histograms
        .iter()
        .zip(&s.histograms)
        .any(|(t, h)| t.bounds != h.bounds)
    {
        total.histograms = false;
        return;
    }
    for (t, h) in total.snapshot.histograms.iter_mut().zip(&s.histograms) {
        for (tb, hb) in t.buckets.iter_mut().zip(&h.buckets) {
            *tb = tb.wrapping_add(*hb);
        }
        t.sum = t.sum.wrapping_add(h.sum);
    }
}

/// The node totals of `stores`, in the order their first rank comes.
pub(super) fn totals(stores: &[StoreView]) -> Vec<Total> {
    let mut totals: Vec<Total> = Vec::new();
    for s in stores {
        let snap = &s.snapshot;
        match totals
            .iter_mut()
            .find(|t| t.snapshot.hostname == snap.hostname && t.snapshot.labels == snap.labels)
        {
            Some(t) => add_into(t, snap),
            None => totals.push(Total {
                snapshot: snap.clone(),
                histograms: true,
            }),
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{config, value, writer};
    use super::super::StoreScan;
    use crate::config::Aggregate;
    use crate::store::{Identity, StoreWriter};
    use nixl_telemetry_base::{Event, EventType};
    use nixl_telemetry_series::{text::parse, Buckets, WorkloadLabels};
    use std::time::Duration;

    #[test]
    fn node_totals_sum_counters_and_histograms_without_gauges() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buckets::new(&[10.0, 100.0]).unwrap();
        let r0 = writer(dir.path(), "w", 1, "0", &b);
        let r1 = writer(dir.path(), "w", 2, "1", &b);
        // Another agent name: summed into the same node total.
        let other = writer(dir.path(), "x", 3, "2", &b);
        r0.apply(&[
            Event::new(EventType::AgentTxBytes, 100),
            Event::new(EventType::AgentXferTime, 5),
        ]);
        r1.apply(&[
            Event::new(EventType::AgentTxBytes, 20),
            Event::new(EventType::AgentXferTime, 50),
            Event::new(EventType::AgentErrCanceled, 1),
        ]);
        other.apply(&[Event::new(EventType::AgentTxBytes, 3)]);
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::Sum));
        let page = scan.scrape();
        let total = [("hostname", "node")];
        assert_eq!(value(&page, "agent_tx_bytes_total", &total), Some(123.0));
        assert_eq!(
            value(
                &page,
                "agent_tx_bytes_total",
                &[total[0], ("agent_name", "w")]
            ),
            None
        );
        assert_eq!(value(&page, "agent_tx_last_bytes", &total), None);
        let le = |v| [total[0], ("le", v)];
        assert_eq!(
            value(&page, "agent_xfer_time_us_bucket", &le("10")),
            Some(1.0)
        );
        assert_eq!(
            value(&page, "agent_xfer_time_us_bucket", &le("+Inf")),
            Some(2.0)
        );
        assert_eq!(value(&page, "agent_xfer_time_us_sum", &total), Some(55.0));
        let errors: Vec<f64> = parse(&page)
            .unwrap()
            .into_iter()
            .filter(|s| {
                s.name == "agent_errors_total"
                    && s.label("pid").is_none()
                    && s.label("agent_name").is_none()
                    && s.label("status") == Some("canceled")
            })
            .map(|s| s.value)
            .collect();
        assert_eq!(errors, [1.0]);
        // The per-rank series are all still there.
        assert_eq!(
            value(
                &page,
                "agent_tx_last_bytes",
                &[
                    total[0],
                    ("agent_name", "w"),
                    ("pid", "2"),
                    ("agent_instance", "0"),
                    ("local_rank", "1")
                ]
            ),
            Some(20.0)
        );
    }

    #[test]
    fn each_rank_carries_its_own_workload_labels_and_totals_are_per_job() {
        let dir = tempfile::tempdir().unwrap();
        let job = |id: &str| {
            WorkloadLabels::from_pairs(vec![("slurm_job_id".into(), id.into())]).unwrap()
        };
        let writers: Vec<StoreWriter> = [("7", 1, 100), ("7", 2, 20), ("8", 3, 5), ("", 4, 1)]
            .iter()
            .map(|&(j, pid, bytes)| {
                let id = Identity {
                    agent_name: "w".into(),
                    hostname: "node".into(),
                    local_rank: (pid - 1).to_string(),
                    pid,
                    run_marker: 1,
                    instance: 0,
                    labels: if j.is_empty() {
                        WorkloadLabels::none()
                    } else {
                        job(j)
                    },
                };
                let w = StoreWriter::create(dir.path(), &id, &Buckets::default()).unwrap();
                w.apply(&[Event::new(EventType::AgentTxBytes, bytes)]);
                let len = std::fs::metadata(w.path()).unwrap().len();
                // NIXL's bytes and the publication extension, the labels between them.
                let unlabelled = crate::layout::STORE_SIZE + crate::layout::SEQUENCE_EXTENSION_SIZE;
                assert_eq!(len > unlabelled as u64, !j.is_empty());
                w
            })
            .collect();
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::Sum));
        let page = scan.scrape();
        let rank = |pid: &str, local_rank: &str, job: &str| {
            let mut l = vec![
                ("hostname", "node"),
                ("agent_name", "w"),
                ("pid", pid),
                ("agent_instance", "0"),
                ("local_rank", local_rank),
            ];
            if !job.is_empty() {
                l.push(("slurm_job_id", job));
            }
            value(&page, "agent_tx_bytes_total", &l)
        };
        assert_eq!(rank("1", "0", "7"), Some(100.0));
        assert_eq!(rank("3", "2", "8"), Some(5.0));
        assert_eq!(rank("4", "3", ""), Some(1.0));
        let total = |job: Option<&str>| {
            let mut l = vec![("hostname", "node")];
            l.extend(job.map(|j| ("slurm_job_id", j)));
            value(&page, "agent_tx_bytes_total", &l)
        };
        assert_eq!(total(Some("7")), Some(120.0));
        assert_eq!(total(Some("8")), Some(5.0));
        assert_eq!(total(None), Some(1.0));
        // The label follows NIXL's labels, before `le`.
        assert!(
            page.contains(
                "agent_xfer_time_us_bucket{hostname=\"node\",agent_name=\"w\",pid=\"1\",\
                 agent_instance=\"0\",local_rank=\"0\",slurm_job_id=\"7\",le=\"10\"} 0\n"
            ),
            "{page}"
        );
        drop(writers);
    }

    /// Eight ranks of one job named apart (`rank0` ... `rank7`, the usual case) and two of
    /// another job on one host: one node total per job, equal to the sum of its ranks, without
    /// `agent_name`.
    #[test]
    fn one_total_per_host_and_job_whatever_the_agent_names() {
        let dir = tempfile::tempdir().unwrap();
        let writers: Vec<StoreWriter> = (0..10i64)
            .map(|i| {
                let job = if i < 8 { "7" } else { "8" };
                let id = Identity {
                    agent_name: format!("rank{i}"),
                    hostname: "node".into(),
                    local_rank: (i % 8).to_string(),
                    pid: 100 + i,
                    run_marker: 1,
                    instance: 0,
                    labels: WorkloadLabels::from_pairs(vec![("slurm_job_id".into(), job.into())])
                        .unwrap(),
                };
                let w = StoreWriter::create(dir.path(), &id, &Buckets::default()).unwrap();
                w.apply(&[
                    Event::new(EventType::AgentTxBytes, 1000 * (i as u64 + 1)),
                    Event::new(EventType::AgentXferTime, 10 * (i as u64 + 1)),
                ]);
                w
            })
            .collect();
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::Sum));
        let page = scan.scrape();
        let samples = parse(&page).unwrap();
        let totals: Vec<(Vec<(String, String)>, f64)> = samples
            .iter()
            .filter(|s| s.name == "agent_tx_bytes_total" && s.label("pid").is_none())
            .map(|s| (s.labels.clone(), s.value))
            .collect();
        let label = |job: &str| {
            vec![
                ("hostname".to_owned(), "node".to_owned()),
                ("slurm_job_id".to_owned(), job.to_owned()),
            ]
        };
        // 1000 + ... + 8000, and 9000 + 10000.
        assert_eq!(
            totals,
            [(label("7"), 36_000.0), (label("8"), 19_000.0)],
            "{page}"
        );
        let ranks: f64 = samples
            .iter()
            .filter(|s| {
                s.name == "agent_tx_bytes_total"
                    && s.label("pid").is_some()
                    && s.label("slurm_job_id") == Some("7")
            })
            .map(|s| s.value)
            .sum();
        assert_eq!(ranks, 36_000.0);
        let count = [("hostname", "node"), ("slurm_job_id", "7")];
        assert_eq!(value(&page, "agent_xfer_time_us_count", &count), Some(8.0));
        assert_eq!(value(&page, "agent_xfer_time_us_sum", &count), Some(360.0));
        drop(writers);
    }

    #[test]
    fn totals_of_ranks_with_different_bounds_have_no_histograms() {
        let dir = tempfile::tempdir().unwrap();
        let _a = writer(dir.path(), "w", 1, "", &Buckets::new(&[10.0]).unwrap());
        let _b = writer(dir.path(), "w", 2, "", &Buckets::new(&[20.0]).unwrap());
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::Sum));
        let (pages, logged) =
            nixl_telemetry_base::logging::capture(|| (scan.scrape(), scan.scrape()));
        assert_eq!(nixl_telemetry_base::logging::warnings(&logged).len(), 1);
        let total = [("hostname", "node")];
        assert_eq!(value(&pages.0, "agent_tx_bytes_total", &total), Some(0.0));
        assert_eq!(value(&pages.0, "agent_xfer_time_us_count", &total), None);
        // Each rank keeps its own le set.
        assert!(pages.0.contains("le=\"10\"") && pages.0.contains("le=\"20\""));
    }
}
