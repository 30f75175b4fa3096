//! Simulated scale, measured: `--senders N` simulated nodes, each pushing its 8 ranks' series to
//! one real Prometheus remote-write receiver (Debian's `prometheus`, on loopback) through this
//! crate's own payload ([`RemoteWrite`]), client and push loop, as `nixl-telemetry serve
//! --push-only --remote-write` does for a node. Prints one row of a markdown table (`--header`
//! prints its head): per-sender bytes and CPU per push, the receiver's CPU and the samples it
//! ingests per second, and whether every sender's totals are exact in Prometheus at the end
//! (the run fails when they are not).
//!
//! A node is a sender of its own: host `sim-node-<i>`, identity `instance="sim-node-<i>:<pid>"`
//! ([`rows::instance`]), ranks labelled as `serve` labels stores (`agent_name`, `pid`,
//! `agent_instance`, `local_rank`) with the workload labels of a Slurm job
//! (`NIXL_TELEMETRY_LABELS_FROM=slurm` and `NIXL_TELEMETRY_LABELS=team=infer`, read by
//! [`WorkloadLabels::from_lookup`]), its push counters labelled `pusher="serve"`. One feeder
//! thread plays the ranks' flushes: every 100 ms it applies a batch of transfers (writes and
//! reads, sizes 4 KiB to 16 MiB, times 1 µs to 128 ms) to every rank's series, so counters and
//! histograms move between pushes, and keeps each node's totals. Senders start spread over one
//! interval, as unsynchronised nodes would push.
//!
//! Measured over `--seconds` after two intervals of warm-up:
//! - a sender's CPU per push: its push thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) from the
//!   start of building a body to the receiver's answer (snapshots, encoding, snappy, HTTP),
//!   and the wall time of the same span (which grows when the receiver cannot keep up: a
//!   sender waits for the answer before it waits an interval, so pushes then come less often);
//! - bytes per push: the push loop's own counters (bytes of accepted bodies / accepted pushes);
//! - the receiver's CPU: utime + stime of the Prometheus process (`/proc/<pid>/stat`);
//! - samples ingested: `prometheus_tsdb_head_samples_appended_total` from Prometheus' own
//!   `/metrics`; its head series and resident memory at the end.
//!
//! Then the feeder stops, every sender makes its last push (dropping the pushers), and
//! Prometheus is asked, per `hostname`: 8 series, and the sums of `agent_tx_bytes_total`,
//! `agent_rx_bytes_total`, `agent_xfer_time_us_count` and `_sum` equal to the node's totals,
//! and `nixl_telemetry_push_attempts_total` equal to the sender's attempts before its last push.
//!
//! Not a test: `scripts/bench-scale.sh` builds it in release and prints the table for several N.
//!
//! ```text
//! cargo run --release -p nixl-telemetry-push --example scale -- --senders 50 --seconds 30
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_push::remote_write::{RemoteWrite, DEFAULT_FINAL_PUSH_MS, DEFAULT_TIMEOUT_MS};
use nixl_telemetry_push::{
    rows, Body, Client, Labels, Payload, PushConfig, PushStats, PushStatsSnapshot, Pusher, Source,
    Target,
};
use nixl_telemetry_series::{AgentSeries, Buckets, WorkloadLabels};
use nixl_telemetry_test_support::prometheus::Prometheus;
use nixl_telemetry_test_support::thread_cpu;

/// Ranks per node.
const RANKS: usize = 8;
/// Nodes per simulated Slurm job (`slurm_job_id`, `slurm_node_id`).
const NODES_PER_JOB: usize = 64;
/// How often the feeder applies a batch (the collector's flush interval).
const FLUSH: Duration = Duration::from_millis(100);

const USAGE: &str = "\
usage: scale [--senders N] [--seconds S] [--interval-ms MS] [--transfers-per-s T] [--header]

  --senders N          simulated nodes, one sender each, 8 ranks each (default 10)
  --seconds S          length of the measurement, after two intervals of warm-up (default 30)
  --interval-ms MS     push interval (default 1000)
  --transfers-per-s T  transfers per rank per second fed between pushes (default 100)
  --header             print the head of the table and exit
";

struct Options {
    senders: usize,
    seconds: u64,
    interval: Duration,
    transfers_per_s: u64,
}

fn options() -> Result<Option<Options>, String> {
    let mut o = Options {
        senders: 10,
        seconds: 30,
        interval: Duration::from_millis(1000),
        transfers_per_s: 100,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = args.next().ok_or(format!("{name} needs a value"))?;
            match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{name} {v}: give a positive integer")),
            }
        };
        match arg.as_str() {
            "--senders" => o.senders = value("--senders")? as usize,
            "--seconds" => o.seconds = value("--seconds")?,
            "--interval-ms" => o.interval = Duration::from_millis(value("--interval-ms")?),
            "--transfers-per-s" => o.transfers_per_s = value("--transfers-per-s")?,
            "--header" => {
                println!("{}", header());
                return Ok(None);
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(None);
            }
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    Ok(Some(o))
}

fn header() -> String {
    let columns = [
        "nodes (x8 ranks)",
        "interval",
        "pushes/s",
        "samples/push",
        "bytes/push",
        "sender CPU/push mean (p99)",
        "push wall time median (p99)",
        "samples/s ingested",
        "receiver CPU",
        "receiver CPU per 1k samples",
        "head series",
        "receiver RSS",
        "failed pushes",
        "totals exact",
    ];
    let head = format!("| {} |", columns.join(" | "));
    let rule = format!("|{}", "---|".repeat(columns.len()));
    format!("{head}\n{rule}")
}

/// A process's CPU time (user + system), from `/proc/<pid>/stat`.
fn process_cpu(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // After the command's name (in parentheses, which may hold spaces): state is field 3, utime
    // and stime fields 14 and 15.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// A process's resident memory, in MiB, from `/proc/<pid>/status`.
fn rss_mib(pid: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib / 1024.0
}

/// The sum of the samples of `name` (every label set) in Prometheus' own `/metrics`.
fn own_metric(base: &str, name: &str) -> f64 {
    let url = url::Url::parse(&format!("{base}/metrics")).unwrap();
    let body = nixl_telemetry_push::http::get(&url, "text/plain", Duration::from_secs(60), 1 << 26)
        .expect("Prometheus' /metrics");
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The remote-write payload, with the push thread's CPU time of each accepted push (from the
/// start of building its body to the receiver's answer) recorded.
struct Measured {
    inner: RemoteWrite,
    started: Option<(Duration, Instant)>,
    cpu: Arc<Mutex<Vec<Push>>>,
}

/// One accepted push: its push thread's CPU time and its wall time, from the start of building
/// its body to the receiver's answer.
#[derive(Clone, Copy, Debug)]
struct Push {
    cpu: Duration,
    wall: Duration,
}

impl Payload for Measured {
    fn build(&mut self, pushes: &PushStatsSnapshot) -> Body {
        self.started = Some((thread_cpu(), Instant::now()));
        self.inner.build(pushes)
    }

    fn sent(&mut self, answer: &[u8]) {
        self.inner.sent(answer);
        if let Some((cpu, wall)) = self.started.take() {
            self.cpu.lock().unwrap().push(Push {
                cpu: thread_cpu() - cpu,
                wall: wall.elapsed(),
            });
        }
    }
}

/// One simulated node: its ranks' series and its sender.
struct Node {
    host: String,
    ranks: Vec<Arc<AgentSeries>>,
    pusher: Option<Pusher>,
    stats: Arc<PushStats>,
    cpu: Arc<Mutex<Vec<Push>>>,
}

impl Node {
    /// Node `i`'s series, labelled as `serve` labels a job's stores.
    fn new(i: usize) -> Node {
        let host = format!("sim-node-{i}");
        let job = (1000 + i / NODES_PER_JOB).to_string();
        let node_id = (i % NODES_PER_JOB).to_string();
        let env = move |name: &str| -> nixl_telemetry_base::Result<Option<String>> {
            Ok(match name {
                "NIXL_TELEMETRY_LABELS_FROM" => Some("slurm".into()),
                "NIXL_TELEMETRY_LABELS" => Some("team=infer".into()),
                "SLURM_JOB_ID" => Some(job.clone()),
                "SLURM_JOB_NAME" => Some("llama-serve".into()),
                "SLURM_NODEID" => Some(node_id.clone()),
                _ => None,
            })
        };
        let workload = WorkloadLabels::from_lookup(&env).expect("workload labels");
        let ranks = (0..RANKS)
            .map(|r| {
                Arc::new(
                    AgentSeries::new(&format!("agent-{r}"), &host, Buckets::default())
                        .with_labels(workload.clone()),
                )
            })
            .collect();
        Node {
            host,
            ranks,
            pusher: None,
            stats: Arc::default(),
            cpu: Arc::default(),
        }
    }

    /// Starts pushing the node's 8 ranks to `url` every `interval`.
    fn start(&mut self, url: &str, interval: Duration) {
        let none = |_: &str| -> nixl_telemetry_base::Result<Option<String>> { Ok(None) };
        let instance = rows::instance(&none, &self.host).unwrap();
        let workload = self.ranks[0].labels().clone();
        let labels: Vec<Labels> = (0..RANKS)
            .map(|r| {
                vec![
                    ("hostname".into(), self.host.clone()),
                    (rows::INSTANCE_LABEL.into(), instance.clone()),
                    ("agent_name".into(), format!("agent-{r}")),
                    ("pid".into(), (4000 + r).to_string()),
                    ("agent_instance".into(), format!("{:016x}", 0x5ca1e + r)),
                    ("local_rank".into(), r.to_string()),
                ]
            })
            .collect();
        let ranks = self.ranks.clone();
        let source: Source = Box::new(move || {
            ranks
                .iter()
                .zip(&labels)
                .map(|(s, l)| (s.snapshot(), l.clone()))
                .collect()
        });
        let mut own_labels: Labels = vec![
            ("hostname".into(), self.host.clone()),
            (rows::INSTANCE_LABEL.into(), instance),
            ("pusher".into(), "serve".into()),
        ];
        own_labels.extend(workload.pairs().iter().cloned());
        let payload = Measured {
            inner: RemoteWrite::new(source, own_labels),
            started: None,
            cpu: self.cpu.clone(),
        };
        let timeout = Duration::from_millis(DEFAULT_TIMEOUT_MS);
        let client = Client::new(Target::new(url::Url::parse(url).unwrap(), timeout)).unwrap();
        let config = PushConfig {
            name: format!("remote_write {}", self.host),
            interval,
            timeout,
            final_timeout: Duration::from_millis(DEFAULT_FINAL_PUSH_MS),
            final_setting: nixl_telemetry_push::remote_write::ENV_FINAL_PUSH_MS,
        };
        let pusher = Pusher::start(client, Box::new(payload), config).expect("push thread");
        self.stats = pusher.counters();
        self.pusher = Some(pusher);
    }
}

/// What a node's ranks recorded, summed over them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Totals {
    tx_bytes: u64,
    rx_bytes: u64,
    transfers: u64,
    time_us: u64,
}

/// Plays the ranks' flushes until `stop`: every [`FLUSH`], `per_batch` transfers applied to
/// every rank. Returns each node's totals and the feeder's CPU time.
fn feed(
    nodes: Vec<Vec<Arc<AgentSeries>>>,
    per_batch: u64,
    stop: Arc<AtomicBool>,
) -> (Vec<Totals>, Duration) {
    let mut totals = vec![Totals::default(); nodes.len()];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut batch = Vec::with_capacity(per_batch as usize * 4);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for (node, total) in nodes.iter().zip(&mut totals) {
            for rank in node {
                batch.clear();
                for _ in 0..per_batch {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let size = 4096u64 << (rng % 13);
                    let time = (1 + (rng >> 8) % 1000) << ((rng >> 20) % 8);
                    let write = !(rng >> 32).is_multiple_of(4);
                    batch.push(Event::new(
                        EventType::AgentXferPostTime,
                        2 + (rng >> 40) % 60,
                    ));
                    batch.push(Event::new(EventType::AgentXferTime, time));
                    if write {
                        batch.push(Event::new(EventType::AgentTxBytes, size));
                        batch.push(Event::new(EventType::AgentTxRequestsNum, 1));
                        total.tx_bytes += size;
                    } else {
                        batch.push(Event::new(EventType::AgentRxBytes, size));
                        batch.push(Event::new(EventType::AgentRxRequestsNum, 1));
                        total.rx_bytes += size;
                    }
                    total.transfers += 1;
                    total.time_us += time;
                }
                assert_eq!(rank.apply(&batch), batch.len(), "every event kept");
            }
        }
        next += FLUSH;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    (totals, thread_cpu())
}

/// The state of the run at one moment.
struct Mark {
    at: Instant,
    receiver_cpu: Duration,
    samples: f64,
    /// Per sender: its push counters and how many pushes' CPU times it has recorded.
    senders: Vec<(PushStatsSnapshot, usize)>,
}

fn mark(nodes: &[Node], pid: &str, base: &str) -> Mark {
    Mark {
        at: Instant::now(),
        receiver_cpu: process_cpu(pid),
        samples: own_metric(base, "prometheus_tsdb_head_samples_appended_total"),
        senders: nodes
            .iter()
            .map(|n| (n.stats.snapshot(), n.cpu.lock().unwrap().len()))
            .collect(),
    }
}

/// What a query should give for a node, from its totals and its sender's final counters.
type Expected = fn(&Totals, &PushStatsSnapshot) -> u64;

/// Every node's totals as Prometheus has them, compared with what it recorded: the mismatches,
/// each with the index of its node (None: not one node's).
fn check(
    prom: &Prometheus,
    nodes: &[Node],
    totals: &[Totals],
    last: &[PushStatsSnapshot],
) -> Vec<(Option<usize>, String)> {
    let by_host = |promql: &str| -> HashMap<String, f64> {
        prom.by_label("hostname", promql)
            .unwrap_or_else(|| panic!("query {promql}"))
            .into_iter()
            .collect()
    };
    let expect: [(&str, Expected); 6] = [
        ("count by (hostname) (agent_tx_bytes_total)", |_, _| {
            RANKS as u64
        }),
        ("sum by (hostname) (agent_tx_bytes_total)", |t, _| {
            t.tx_bytes
        }),
        ("sum by (hostname) (agent_rx_bytes_total)", |t, _| {
            t.rx_bytes
        }),
        ("sum by (hostname) (agent_xfer_time_us_count)", |t, _| {
            t.transfers
        }),
        ("sum by (hostname) (agent_xfer_time_us_sum)", |t, _| {
            t.time_us
        }),
        // The last push carries the attempts before it.
        (
            "sum by (hostname) (nixl_telemetry_push_attempts_total)",
            |_, s| s.attempts - 1,
        ),
    ];
    let mut wrong = Vec::new();
    for (promql, want) in expect {
        let got = by_host(promql);
        if got.len() != nodes.len() {
            let message = format!("{promql}: {} hosts, not {}", got.len(), nodes.len());
            wrong.push((None, message));
        }
        for (i, ((node, total), stats)) in nodes.iter().zip(totals).zip(last).enumerate() {
            let want = want(total, stats) as f64;
            match got.get(&node.host) {
                Some(&v) if v == want => {}
                v => wrong.push((
                    Some(i),
                    format!("{promql} {}: {v:?}, not {want}", node.host),
                )),
            }
        }
    }
    wrong
}

/// Exits with 1 when a total is not exact for a reason other than a failed last push, with 2
/// on a bad argument; returns (rather than `exit`) so that Prometheus and its directory are
/// removed.
fn main() -> ExitCode {
    let o = match options() {
        Ok(Some(o)) => o,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale: {e}");
            return ExitCode::from(2);
        }
    };
    let work = tempfile::tempdir().unwrap();
    let prom = Prometheus::start(work.path(), None, None);
    let pid = prom.pid().expect("running").to_string();
    let url = prom.write_url();
    let base = url.trim_end_matches("/api/v1/write").to_owned();

    let mut nodes: Vec<Node> = (0..o.senders).map(Node::new).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let ranks = nodes.iter().map(|n| n.ranks.clone()).collect();
        let per_batch = (o.transfers_per_s * FLUSH.as_millis() as u64 / 1000).max(1);
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("feeder".into())
            .spawn(move || feed(ranks, per_batch, stop))
            .unwrap()
    };
    // Senders spread over one interval, as nodes that are not synchronised.
    let start = Instant::now();
    let n = nodes.len() as u32;
    for (i, node) in nodes.iter_mut().enumerate() {
        std::thread::sleep(
            (start + o.interval * i as u32 / n).saturating_duration_since(Instant::now()),
        );
        node.start(&url, o.interval);
    }
    std::thread::sleep(o.interval * 2);

    let a = mark(&nodes, &pid, &base);
    std::thread::sleep(Duration::from_secs(o.seconds));
    let b = mark(&nodes, &pid, &base);
    let head_series = own_metric(&base, "prometheus_tsdb_head_series");
    let rss = rss_mib(&pid);

    let final_timeout = Duration::from_millis(DEFAULT_FINAL_PUSH_MS);
    stop.store(true, Ordering::Relaxed);
    let (totals, feeder_cpu) = feeder.join().unwrap();
    // Every sender's last push, all at once, as at the end of a job.
    let ending: Vec<PushStatsSnapshot> = nodes.iter().map(|n| n.stats.snapshot()).collect();
    // Whether dropping the pusher gave up waiting for its last push.
    let late: Vec<bool> = std::thread::scope(|s| {
        let drops: Vec<_> = nodes
            .iter_mut()
            .map(|node| {
                let pusher = node.pusher.take();
                s.spawn(move || {
                    let start = Instant::now();
                    drop(pusher);
                    start.elapsed() >= final_timeout
                })
            })
            .collect();
        drops.into_iter().map(|d| d.join().unwrap()).collect()
    });
    let last: Vec<PushStatsSnapshot> = nodes.iter().map(|n| n.stats.snapshot()).collect();
    let wrong = check(&prom, &nodes, &totals, &last);
    // A sender whose last push failed or did not end within the final push's bound (the
    // receiver is overloaded) lacks what changed since its push before; any other mismatch is
    // a bug.
    let lost: Vec<usize> = (0..nodes.len())
        .filter(|&i| late[i] || last[i].failures > ending[i].failures)
        .collect();
    let unexplained: Vec<&String> = wrong
        .iter()
        .filter(|(i, _)| i.is_none_or(|i| !lost.contains(&i)))
        .map(|(_, m)| m)
        .collect();
    let inexact = {
        let mut hosts: Vec<usize> = wrong.iter().filter_map(|(i, _)| *i).collect();
        hosts.sort_unstable();
        hosts.dedup();
        hosts.len()
    };
    let exact = match (inexact, lost.len()) {
        (0, _) if wrong.is_empty() => "yes".to_owned(),
        (n, l) => format!(
            "**no**: {n} of {} ({l} last pushes failed or timed out)",
            nodes.len()
        ),
    };

    let secs = (b.at - a.at).as_secs_f64();
    let (mut pushes, mut failed, mut bytes) = (0u64, 0u64, 0u64);
    let mut window: Vec<Push> = Vec::new();
    for (node, ((sa, ca), (sb, cb))) in nodes.iter().zip(a.senders.iter().zip(&b.senders)) {
        pushes += sb.successes - sa.successes;
        failed += sb.failures - sa.failures;
        bytes += sb.bytes - sa.bytes;
        window.extend_from_slice(&node.cpu.lock().unwrap()[*ca..*cb]);
    }
    let mut cpu: Vec<Duration> = window.iter().map(|p| p.cpu).collect();
    cpu.sort();
    let mut wall: Vec<Duration> = window.iter().map(|p| p.wall).collect();
    wall.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = us(cpu.iter().sum::<Duration>()) / cpu.len().max(1) as f64;
    let p99 = |v: &[Duration]| v.get(v.len() * 99 / 100).copied().map_or(0.0, us);
    let samples = b.samples - a.samples;
    let receiver = (b.receiver_cpu - a.receiver_cpu).as_secs_f64();
    let total_failed: u64 = last.iter().map(|s| s.failures).sum();
    println!(
        "| {} | {} s | {:.1} | {:.0} | {:.0} | {:.0} µs ({:.0} µs) | {:.1} ms ({:.0} ms) | {:.0} | {:.0} % of a core | {:.0} µs | {:.0} | {:.0} MiB | {} | {} |",
        o.senders,
        o.interval.as_secs_f64(),
        pushes as f64 / secs,
        samples / pushes.max(1) as f64,
        bytes as f64 / pushes.max(1) as f64,
        mean,
        p99(&cpu),
        wall.get(wall.len() / 2).copied().map_or(0.0, us) / 1000.0,
        p99(&wall) / 1000.0,
        samples / secs,
        100.0 * receiver / secs,
        receiver * 1e6 / (samples / 1000.0).max(1.0),
        head_series,
        rss,
        failed,
        exact,
    );
    eprintln!(
        "scale: {} senders, {secs:.1} s measured: {pushes} pushes ({failed} failed; {total_failed} \
         failed in the whole run); the feeder used {:.1} s of CPU in all",
        o.senders,
        feeder_cpu.as_secs_f64()
    );
    for (_, w) in wrong.iter().take(10) {
        eprintln!("scale: not exact: {w}");
    }
    if !unexplained.is_empty() {
        for w in unexplained.iter().take(10) {
            eprintln!("scale: not exact although the last push was made: {w}");
        }
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
