//! The store scan: the scrape-time reader of every rank's store in a directory, run on every
//! scrape by the serving process (a rank that won the election, or `nixl-telemetry serve`). It
//! reads every `nixl.*.mmap` file, serves the
//! stores whose writer is alive (its `flock` is held) or left less than the stale TTL ago,
//! removes the others, and skips, with one warning per file, what it cannot use.
//!
//! Output: the `prometheus` exporter's families, names, HELP texts, types and buckets (the
//! shared encoder, [`text::encode_rows_into`]), one series per store labelled `hostname`,
//! `agent_name`, `pid`, `agent_instance` and, when set, `local_rank` (NIXL's labels, in NIXL's
//! order), then the store's workload labels if it has any, never summed across processes;
//! with [`Aggregate::Sum`], also one node total per (`hostname`, workload labels): the
//! counters and histograms summed over every rank of the directory with that host and those
//! labels, whatever their agent names (ranks are usually named apart), with no gauges and none
//! of the per-process labels (`agent_name`, `pid`, `agent_instance`, `local_rank`), so a total
//! is what `sum without (agent_name, pid, agent_instance, local_rank)` of its ranks gives (two
//! jobs on one node get a total each). No live store: an empty page. A scraper whose `Accept`
//! prefers Prometheus's protobuf exposition gets the same families and series in it
//! ([`StoreScan::scrape_as`]), with the native histograms of the stores that keep them; a
//! node total has native histograms when all its ranks keep them, merged at their lowest
//! schema.
//!
//! A store file stays open and mapped between scrapes ([`OpenStore`], keyed by its name and
//! inode, dropped when the file is gone or another file has its name), so a scrape costs one
//! directory listing and one lock probe per store rather than an open, a map and an unmap each
//! (the unmaps were most of a scrape's time in a serving rank with other threads). The listing
//! of the directory is kept too, and reused while the directory's modification time is
//! unchanged and was not recent when it was listed, on a local file system ([`Listing`]; on
//! NFS and the like every scrape lists the directory): a scrape of a directory whose
//! ranks are running costs one `statx` for the directory rather than an `open`, the `getdents`
//! and a `close` (a third of a scrape's time when the serving process's caches are cold).

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirEntryExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use nixl_telemetry_series::endpoint::http::{Format, Health};
use nixl_telemetry_series::endpoint::server::Pages;
use nixl_telemetry_series::text::{self, Row};
use nixl_telemetry_series::{AgentSnapshot, FamilyKind};

use crate::config::{Aggregate, ScanConfig};
use crate::reader::{OpenStore, ReadOutcome, StoreView};
use crate::store::is_store_name;
use crate::sys;
use nixl_telemetry_base::sync::LockUnpoisoned;

/// Files a store scan remembers having warned about (NIXL's bound).
const WARNED_PATHS: usize = 64;

/// Files of other users a store scan remembers, by path and inode, so that each is warned
/// about once for the life of the process and not opened again while it is the same file: 16,384
/// paths (about 2 MB at most). Past that, the rest are opened at every scrape and summed up in
/// one line per scrape.
pub const MAX_REFUSED_FILES: usize = 16_384;

/// A store scan as an endpoint's pages: `/metrics` is [`StoreScan::scrape_as`], made when the
/// scrape asks, `/health` is [`StoreScan::health`]: ready while at least one rank's store is
/// served (its writer alive, or updated within the stale TTL), with the ranks served and the
/// newest update's age; 503 otherwise.
pub struct ScanPages {
    scan: std::sync::Arc<StoreScan>,
}

impl ScanPages {
    /// The pages of `scan`.
    pub fn new(scan: std::sync::Arc<StoreScan>) -> ScanPages {
        ScanPages { scan }
    }
}

impl Pages for ScanPages {
    /// The protobuf exposition when the scraper's `Accept` prefers it and a store keeps native
    /// histograms, else the text page ([`StoreScan::scrape_as`]).
    fn metrics(&self, format: Format) -> (&'static str, Vec<u8>) {
        self.scan.scrape_as(format == Format::Protobuf)
    }

    fn health(&self) -> Health {
        self.scan.health()
    }
}

/// More members of a scan's `/health` JSON object, encoded (`"push":[...]`), produced when a
/// health check asks.
pub type HealthDetails = std::sync::Arc<dyn Fn() -> String + Send + Sync>;

/// Where a scan keeps its [`HealthDetails`] (shown by `Debug` as set or not).
#[derive(Default)]
struct DetailsSlot(Mutex<Option<HealthDetails>>);

impl std::fmt::Debug for DetailsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.0.lock_unpoisoned().is_some();
        f.write_str(if set { "HealthDetails(set)" } else { "None" })
    }
}

/// What one scan does with files of other users: remember them, or count them when the memory
/// is full.
struct Foreign<'a> {
    refused: &'a mut HashMap<PathBuf, (u64, u32)>,
    unnamed: &'a mut usize,
}

/// The scan of one directory; shared with the scrape endpoint's thread.
#[derive(Debug)]
pub struct StoreScan {
    config: ScanConfig,
    ttl_ns: u64,
    warned: Mutex<VecDeque<PathBuf>>,
    warned_dir: AtomicBool,
    warned_bounds: AtomicBool,
    /// The store files kept open and mapped, by path.
    open: Mutex<HashMap<PathBuf, OpenFile>>,
    /// Files of other users, by path: their inode and owner (see [`MAX_REFUSED_FILES`]).
    refused: Mutex<HashMap<PathBuf, (u64, u32)>>,
    /// More members of `/health`'s JSON object (`serve`'s push state), if any.
    health_details: DetailsSlot,
    /// The last listing of the directory.
    listing: Mutex<Option<Listing>>,
}

/// What identifies a state of the directory: its device, inode and modification time (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
}

impl DirStamp {
    fn of(meta: &fs::Metadata) -> DirStamp {
        DirStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// Store files of the directory and their inodes, shared by a listing and the scans that
/// reuse it (no copy of the paths per scrape).
type StoreFiles = std::sync::Arc<[(PathBuf, u64)]>;

/// A store file kept open and mapped between scans.
#[derive(Debug)]
struct OpenFile {
    inode: u64,
    file: File,
    store: OpenStore,
}

/// A listing of the directory's store files, reused while the directory keeps the stamp it had
/// before it was listed: creating, removing or renaming an entry sets the directory's
/// modification time. File systems keep that time at a coarse granularity (a clock tick, or a
/// second), so two changes within one granule leave the same time: a listing is trusted only
/// when its stamp was already [`RACY_MARGIN`] old when the listing started, so any later change
/// has a later time (the idea of git's "racily clean" index entries).
#[derive(Debug)]
struct Listing {
    stamp: DirStamp,
    /// When the listing started (wall clock, as file times are).
    started: std::time::SystemTime,
    /// Whether the directory is on a local file system ([`sys::on_local_file_system`]): on
    /// another (NFS and the like), a changed directory may show its old time for a while, so
    /// its listing is never reused.
    local: bool,
    files: StoreFiles,
}

/// How old a directory's modification time must be when it is listed for the listing to be
/// reused: more than any file system's time granularity (one second for the coarsest).
const RACY_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

impl Listing {
    /// Whether the directory, now stamped `stamp`, still has this listing's entries.
    fn still_valid(&self, stamp: DirStamp) -> bool {
        let started_ns = self
            .started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        self.local
            && stamp == self.stamp
            && self.stamp.mtime_ns + RACY_MARGIN.as_nanos() as i128 <= started_ns
    }
}

impl StoreScan {
    /// The scan of `config.dir`.
    pub fn new(config: ScanConfig) -> StoreScan {
        StoreScan {
            ttl_ns: u64::try_from(config.stale_ttl.as_nanos()).unwrap_or(u64::MAX),
            config,
            warned: Mutex::new(VecDeque::new()),
            warned_dir: AtomicBool::new(false),
            warned_bounds: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            health_details: DetailsSlot::default(),
            listing: Mutex::new(None),
        }
    }

    /// The directory and the rules it scans with.
    pub fn config(&self) -> &ScanConfig {
        &self.config
    }

    /// Warns about `path` unless it already did (remembering the last 64 paths).
    fn warn_once(&self, path: &Path, why: &str) {
        let mut warned = self.warned.lock_unpoisoned();
        if warned.iter().any(|p| p == path) {
            return;
        }
        if warned.len() == WARNED_PATHS {
            warned.pop_front();
        }
        warned.push_back(path.to_owned());
        log::warn!("prometheus_mp: skipping {}: {why}", path.display());
    }

    /// Reads the directory: the stores to serve, ordered by pid and instance. Stores of
    /// departed writers older than the TTL, and invalid files nobody holds, are removed.
    pub fn live_stores(&self) -> Vec<StoreView> {
        let dir = &self.config.dir;
        let files = match self.store_files() {
            Ok((files, listed)) => {
                if listed {
                    // The directory changed: a remembered file of another user may have been
                    // replaced, even by one that reuses its inode (one `lstat` each).
                    self.refused
                        .lock_unpoisoned()
                        .retain(|path, &mut (ino, uid)| {
                            fs::symlink_metadata(path)
                                .is_ok_and(|m| m.ino() == ino && m.uid() == uid)
                        });
                }
                self.warned_dir.store(false, Ordering::Relaxed);
                files
            }
            Err(e) => {
                if !self.warned_dir.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "prometheus_mp: cannot read telemetry dir {} ({e}); serving no stores",
                        dir.display()
                    );
                }
                return Vec::new();
            }
        };
        let now = sys::monotonic_ns();
        let euid = sys::euid();
        let mut stores = Vec::new();
        let mut open = self.open.lock_unpoisoned();
        let mut refused = self.refused.lock_unpoisoned();
        let mut unnamed = 0;
        for (path, inode) in files.iter() {
            if refused.get(path).is_some_and(|(ino, _)| ino == inode) {
                // Another user's file, warned about already, and still the same file.
                continue;
            }
            let foreign = Foreign {
                refused: &mut refused,
                unnamed: &mut unnamed,
            };
            if let Some(view) = self.read_one(&mut open, foreign, path, *inode, now, euid) {
                stores.push(view);
            }
        }
        if unnamed > 0 {
            log::warn!(
                "prometheus_mp: skipping {unnamed} more files in {} owned by other users \
                 (past the {MAX_REFUSED_FILES} named one by one)",
                dir.display()
            );
        }
        // Files gone since the last scan: closed and unmapped, or forgotten.
        if !open.is_empty() || !refused.is_empty() {
            let listed: std::collections::HashSet<&Path> =
                files.iter().map(|(p, _)| p.as_path()).collect();
            open.retain(|path, _| listed.contains(path.as_path()));
            refused.retain(|path, _| listed.contains(path.as_path()));
        }
        stores.sort_by_key(|s| (s.pid, s.instance));
        stores
    }

    /// Whether a store whose heartbeat is `last_update_ns` is served without its writer.
    fn fresh(&self, last_update_ns: u64, now: u64) -> bool {
        now >= last_update_ns && now - last_update_ns <= self.ttl_ns
    }

    /// The directory's store files (regular files with a store's name; a symbolic link is not
    /// followed) and their inodes, and whether the directory was listed anew. The listing of the previous scan is reused while the
    /// directory is unchanged (see [`Listing`]): one `statx` instead of an `open`, the
    /// `getdents` and a `close`.
    fn store_files(&self) -> std::io::Result<(StoreFiles, bool)> {
        let dir = &self.config.dir;
        let stamp = DirStamp::of(&fs::metadata(dir)?);
        let mut listing = self.listing.lock_unpoisoned();
        if let Some(l) = listing.as_ref().filter(|l| l.still_valid(stamp)) {
            return Ok((l.files.clone(), false));
        }
        let started = std::time::SystemTime::now();
        let mut files = Vec::new();
        for entry in fs::read_dir(dir)?.flatten() {
            if !is_store_name(entry.file_name().as_bytes()) {
                continue;
            }
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            files.push((entry.path(), entry.ino()));
        }
        let files: StoreFiles = files.into();
        *listing = Some(Listing {
            stamp,
            started,
            local: sys::on_local_file_system(dir),
            files: files.clone(),
        });
        Ok((files, true))
    }

    /// One file: `Some` to serve it; removes it when it is stale or invalid and unheld. Keeps
    /// it open and mapped in `open` for the next scan.
    fn read_one(
        &self,
        open: &mut HashMap<PathBuf, OpenFile>,
        foreign: Foreign<'_>,
        path: &Path,
        inode: u64,
        now: u64,
        euid: u32,
    ) -> Option<StoreView> {
        if open.get(path).is_some_and(|f| f.inode != inode) {
            // Another file has the name now.
            open.remove(path);
        }
        if !open.contains_key(path) {
            // A file that cannot be opened is not ours to judge (it counts as alive).
            let file = sys::open_read_nofollow(path).ok()?;
            let meta = file.metadata().ok()?;
            if meta.uid() != euid {
                if foreign.refused.len() < MAX_REFUSED_FILES {
                    foreign
                        .refused
                        .insert(path.to_owned(), (meta.ino(), meta.uid()));
                    log::warn!(
                        "prometheus_mp: skipping {}: it is owned by uid {}, not by this user",
                        path.display(),
                        meta.uid()
                    );
                } else {
                    *foreign.unnamed += 1;
                }
                return None;
            }
            match OpenStore::map(&file, meta.len()) {
                Ok(Ok(store)) => {
                    let f = OpenFile {
                        inode: meta.ino(),
                        file,
                        store,
                    };
                    open.insert(path.to_owned(), f);
                }
                Ok(Err(outcome)) => return self.judge(path, &file, outcome, now),
                Err(e) => {
                    self.warn_once(path, &format!("it cannot be mapped ({e})"));
                    return None;
                }
            }
        }
        let OpenFile { file, store, .. } = open.get(path)?;
        let outcome = match store.read(file) {
            Ok(o) => o,
            Err(e) => {
                self.warn_once(path, &format!("it cannot be read ({e})"));
                // Mapped again (and judged as it is now) at the next scan.
                open.remove(path);
                return None;
            }
        };
        let view = self.judge(path, file, outcome, now);
        if view.is_none() && !path.exists() {
            open.remove(path);
        }
        view
    }

    /// What to do with a store file's outcome: `Some` to serve it; removes it when it is stale
    /// or invalid and its writer is gone.
    fn judge(&self, path: &Path, file: &File, outcome: ReadOutcome, now: u64) -> Option<StoreView> {
        match outcome {
            ReadOutcome::Valid(view) => {
                // Updated within the TTL: served whether its writer lives or not, so the lock
                // is probed only past it.
                if self.fresh(view.last_update_ns, now) || writer_alive(file) {
                    return Some(*view);
                }
                log::info!(
                    "prometheus_mp: removing the store of departed process {} ({}): no update \
                     for longer than the stale TTL",
                    view.pid,
                    path.display()
                );
                let _ = fs::remove_file(path);
                None
            }
            ReadOutcome::Invalid { reason, quiet } => {
                if !quiet {
                    self.warn_once(path, &reason);
                }
                if !writer_alive(file) {
                    let _ = fs::remove_file(path);
                }
                None
            }
        }
    }

    /// The endpoint's health: ready while a rank's store is served, with how many and the
    /// newest update's age in seconds; unavailable, with the reason, when none is (no rank
    /// updated its store within the stale TTL, or the directory cannot be read).
    pub fn health(&self) -> nixl_telemetry_series::endpoint::http::Health {
        use nixl_telemetry_series::endpoint::http::{json_string, Health};
        let more = self
            .health_details
            .0
            .lock_unpoisoned()
            .as_ref()
            .map(|f| format!(",{}", f()))
            .unwrap_or_default();
        let stores = self.live_stores();
        let now = sys::monotonic_ns();
        let newest = stores
            .iter()
            .map(|s| now.saturating_sub(s.last_update_ns))
            .min();
        let dir = json_string(&self.config.dir.display().to_string());
        match newest {
            Some(age_ns) => Health::ready(format!(
                r#""dir":{dir},"ranks":{},"newest_update_age_s":{:.3}{more}"#,
                stores.len(),
                age_ns as f64 / 1e9
            )),
            None => Health::unavailable(
                format!(
                    "no rank has updated its store in {} within the stale TTL ({} s)",
                    self.config.dir.display(),
                    self.config.stale_ttl.as_secs()
                ),
                format!(r#""dir":{dir},"ranks":0{more}"#),
            ),
        }
    }

    /// Adds `details` to every `/health` answer of this scan (`serve` adds its push state).
    pub fn set_health_details(&self, details: HealthDetails) {
        *self.health_details.0.lock_unpoisoned() = Some(details);
    }

    /// The scrape page: every live store's series (and node totals when configured).
    pub fn scrape(&self) -> String {
        let stores = self.live_stores();
        let (text, mixed) = encode(&stores, self.config.aggregate);
        self.warn_mixed(mixed);
        text
    }

    /// The scrape response (content type and body): with `protobuf`, the protobuf exposition
    /// ([`encode_protobuf`]) when a live store keeps native histograms; otherwise (the default)
    /// the text page of [`StoreScan::scrape`].
    pub fn scrape_as(&self, protobuf: bool) -> (&'static str, Vec<u8>) {
        let stores = self.live_stores();
        if protobuf && stores.iter().any(|s| s.snapshot.native.is_some()) {
            let (body, mixed) = encode_protobuf(&stores, self.config.aggregate);
            self.warn_mixed(mixed);
            return (nixl_telemetry_series::protobuf::CONTENT_TYPE, body);
        }
        let (text, mixed) = encode(&stores, self.config.aggregate);
        self.warn_mixed(mixed);
        (text::CONTENT_TYPE, text.into_bytes())
    }

    /// Warns once that some totals have no histograms (`mixed`: their ranks' bounds differ).
    fn warn_mixed(&self, mixed: bool) {
        if mixed && !self.warned_bounds.swap(true, Ordering::Relaxed) {
            log::warn!(
                "prometheus_mp: ranks of telemetry dir {} with the same agent name use different \
                 NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US; their node totals have no histograms",
                self.config.dir.display()
            );
        }
    }
}

/// Whether a store's writer holds its lock (it is alive): the probe takes the lock only when
/// the writer is gone, and gives it back at once (the file stays open for the next scan). A
/// probe that fails counts as alive.
fn writer_alive(file: &File) -> bool {
    match sys::try_lock_exclusive(file) {
        Ok(true) => {
            sys::unlock(file);
            false
        }
        Ok(false) | Err(_) => true,
    }
}

/// One node total: the summed values of the stores of one (hostname, workload labels), whatever
/// their agent names.
struct Total {
    snapshot: AgentSnapshot,
    /// False when its stores' bucket bounds differ (then no histogram is summed).
    histograms: bool,
}

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

fn totals(stores: &[StoreView]) -> Vec<Total> {
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

/// Encodes `stores` (and their node totals with [`Aggregate::Sum`]); the flag says whether
/// some totals lost their histograms to differing bucket bounds.
pub fn encode(stores: &[StoreView], aggregate: Aggregate) -> (String, bool) {
    with_rows(stores, aggregate, |rows| {
        let mut out = String::with_capacity(rows.len() * 14 * 1024);
        text::encode_rows_into(rows, &mut out);
        out
    })
}

/// [`encode`] in the protobuf exposition: the same families, series and labels, with the native
/// histograms of the stores that keep them (and of the node totals whose ranks all do, merged
/// at the lowest schema).
pub fn encode_protobuf(stores: &[StoreView], aggregate: Aggregate) -> (Vec<u8>, bool) {
    with_rows(
        stores,
        aggregate,
        nixl_telemetry_series::protobuf::encode_rows,
    )
}

/// The rows of `stores` (and their node totals with [`Aggregate::Sum`]) given to `encode`; the
/// flag says whether some totals lost their histograms to differing bucket bounds.
fn with_rows<R>(
    stores: &[StoreView],
    aggregate: Aggregate,
    encode: impl FnOnce(&[Row]) -> R,
) -> (R, bool) {
    let ids: Vec<(String, String)> = stores
        .iter()
        .map(|s| (s.pid.to_string(), s.instance.to_string()))
        .collect();
    let labels: Vec<Vec<(&str, &str)>> = stores
        .iter()
        .zip(&ids)
        .map(|(s, (pid, instance))| {
            let mut l = vec![
                ("hostname", &*s.snapshot.hostname),
                ("agent_name", &*s.snapshot.agent_name),
                ("pid", pid.as_str()),
                ("agent_instance", instance.as_str()),
            ];
            if !s.local_rank.is_empty() {
                l.push(("local_rank", s.local_rank.as_str()));
            }
            l.extend(s.snapshot.labels.iter());
            l
        })
        .collect();
    let mut rows: Vec<Row> = stores
        .iter()
        .zip(&labels)
        .map(|(s, labels)| Row {
            snapshot: &s.snapshot,
            labels,
            kinds: &text::ALL_KINDS,
        })
        .collect();
    let totals = match aggregate {
        Aggregate::None => Vec::new(),
        Aggregate::Sum => totals(stores),
    };
    let total_labels: Vec<Vec<(&str, &str)>> = totals
        .iter()
        .map(|t| {
            std::iter::once(("hostname", &*t.snapshot.hostname))
                .chain(t.snapshot.labels.iter())
                .collect()
        })
        .collect();
    const SUMMED: [FamilyKind; 2] = [FamilyKind::Counter, FamilyKind::Histogram];
    const COUNTERS: [FamilyKind; 1] = [FamilyKind::Counter];
    rows.extend(totals.iter().zip(&total_labels).map(|(t, labels)| Row {
        snapshot: &t.snapshot,
        labels,
        kinds: if t.histograms { &SUMMED } else { &COUNTERS },
    }));
    (encode(&rows), totals.iter().any(|t| !t.histograms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Identity, StoreWriter};
    use nixl_telemetry_base::{Event, EventType};
    use nixl_telemetry_series::{text::parse, Buckets, WorkloadLabels};
    use std::time::Duration;

    fn config(dir: &Path, ttl: Duration, aggregate: Aggregate) -> ScanConfig {
        ScanConfig {
            dir: dir.to_owned(),
            stale_ttl: ttl,
            aggregate,
        }
    }

    fn writer(dir: &Path, name: &str, pid: i64, rank: &str, buckets: &Buckets) -> StoreWriter {
        let id = Identity {
            agent_name: name.into(),
            hostname: "node".into(),
            local_rank: rank.into(),
            pid,
            run_marker: 1,
            instance: 0,
            labels: WorkloadLabels::none(),
        };
        StoreWriter::create(dir, &id, buckets).unwrap()
    }

    fn value(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        parse(page)
            .unwrap()
            .into_iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len() + usize::from(s.label("status").is_some())
                    && labels.iter().all(|(k, v)| s.label(k) == Some(v))
            })
            .map(|s| s.value)
    }

    #[test]
    fn every_store_is_its_own_series_with_nixls_labels() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buckets::default();
        let a = writer(dir.path(), "same", 10, "0", &b);
        let c = writer(dir.path(), "same", 11, "", &b);
        a.apply(&[Event::new(EventType::AgentTxBytes, 999)]);
        c.apply(&[Event::new(EventType::AgentTxBytes, 1)]);
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let page = scan.scrape();
        let rank0 = [
            ("hostname", "node"),
            ("agent_name", "same"),
            ("pid", "10"),
            ("agent_instance", "0"),
            ("local_rank", "0"),
        ];
        assert_eq!(value(&page, "agent_tx_bytes_total", &rank0), Some(999.0));
        assert!(page.contains(
            "agent_tx_bytes_total{hostname=\"node\",agent_name=\"same\",pid=\"10\",\
             agent_instance=\"0\",local_rank=\"0\"} 999"
        ));
        // No local_rank label when it is empty; never summed across processes by default.
        let other = &rank0[..4];
        let mut other = other.to_vec();
        other[2] = ("pid", "11");
        assert_eq!(value(&page, "agent_tx_bytes_total", &other), Some(1.0));
        assert_eq!(value(&page, "agent_tx_bytes_total", &rank0[..2]), None);
        assert_eq!(
            parse(&page)
                .unwrap()
                .iter()
                .filter(|s| s.name == "agent_errors_total")
                .count(),
            24
        );
    }

    /// Sets the directory's modification time to `mtime`.
    fn set_dir_mtime(dir: &Path, mtime: std::time::SystemTime) {
        let since = mtime.duration_since(std::time::UNIX_EPOCH).unwrap();
        let t = libc::timespec {
            tv_sec: since.as_secs() as libc::time_t,
            tv_nsec: since.subsec_nanos() as libc::c_long,
        };
        let times = [t, t];
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path and two timespecs, both alive for the call.
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }

    fn pids(scan: &StoreScan) -> Vec<i64> {
        scan.live_stores().iter().map(|s| s.pid).collect()
    }

    #[test]
    fn the_listing_is_reused_only_while_the_directory_is_unchanged_and_not_racy() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buckets::default();
        let _a = writer(dir.path(), "a", 10, "0", &b);
        let scan = StoreScan::new(config(dir.path(), Duration::from_secs(30), Aggregate::None));
        // On a file system that is not local, every scan lists the directory (checked below).
        let local = sys::on_local_file_system(dir.path());
        // A directory changed long ago: its listing is kept.
        let old = std::time::SystemTime::now() - Duration::from_secs(60);
        set_dir_mtime(dir.path(), old);
        assert_eq!(pids(&scan), [10]);
        // A new store sets the directory's time: listed again.
        let _b = writer(dir.path(), "b", 11, "1", &b);
        assert_eq!(pids(&scan), [10, 11]);
        set_dir_mtime(dir.path(), old);
        assert_eq!(pids(&scan), [10, 11]);
        // A change that left the directory's time as it was (as one within the same time
        // granule would): the old listing is still used, which shows that it is reused.
        let _c = writer(dir.path(), "c", 12, "2", &b);
        set_dir_mtime(dir.path(), old);
        if local {
            assert_eq!(pids(&scan), [10, 11], "the listing is reused");
        } else {
            assert_eq!(
                pids(&scan),
                [10, 11, 12],
                "not reused off a local file system"
            );
            return;
        }
        // A time that was recent when the directory was listed is not trusted: the same kind
        // of change is seen.
        let recent = std::time::SystemTime::now();
        set_dir_mtime(dir.path(), recent);
        assert_eq!(pids(&scan), [10, 11, 12]);
        let _d = writer(dir.path(), "d", 13, "3", &b);
        set_dir_mtime(dir.path(), recent);
        assert_eq!(
            pids(&scan),
            [10, 11, 12, 13],
            "a racy listing is not reused"
        );
    }

    #[test]
    fn liveness_is_the_lock_then_the_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let b = Buckets::default();
        let live = writer(dir.path(), "live", 1, "", &b);
        let gone = writer(dir.path(), "gone", 2, "", &b);
        let gone_path = gone.path().to_owned();
        drop(gone);
        // Within a long TTL a departed writer's store is still served.
        let long = StoreScan::new(config(
            dir.path(),
            Duration::from_secs(3600),
            Aggregate::None,
        ));
        let names = |c: &StoreScan| -> Vec<String> {
            c.live_stores()
                .iter()
                .map(|s| s.snapshot.agent_name.to_string())
                .collect()
        };
        assert_eq!(names(&long), ["live", "gone"]);
        assert!(gone_path.exists());
        // With TTL 0 it is stale: removed; the live writer stays whatever its age.
        let zero = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        assert_eq!(names(&zero), ["live"]);
        assert!(!gone_path.exists());
        assert!(live.path().exists());
        assert_eq!(names(&zero), ["live"]);
        // An empty directory, or a missing one (one warning), gives an empty page.
        drop(live);
        assert_eq!(zero.scrape(), "");
        let missing = StoreScan::new(config(
            &dir.path().join("nope"),
            Duration::ZERO,
            Aggregate::None,
        ));
        let (pages, logged) =
            nixl_telemetry_base::logging::capture(|| (missing.scrape(), missing.scrape()));
        assert_eq!(pages, (String::new(), String::new()));
        assert_eq!(nixl_telemetry_base::logging::warnings(&logged).len(), 1);
    }

    /// A store file of schema 2 in `dir` (unknown to this reader), and the descriptor holding
    /// its lock (its writer, alive while it is open).
    fn held_store_of_schema_2(dir: &Path) -> (PathBuf, File) {
        let mut schema2 = vec![0u8; crate::layout::STORE_SIZE];
        schema2[..8].copy_from_slice(b"NIXLMPS1");
        schema2[8] = 2;
        let path = dir.join("nixl.7.1.0.mmap");
        std::fs::write(&path, &schema2).unwrap();
        let holder = crate::sys::open_file(&path, false).unwrap();
        assert!(crate::sys::try_lock_exclusive(&holder).unwrap());
        (path, holder)
    }

    #[test]
    fn bad_files_are_skipped_with_one_warning_and_removed_when_unheld() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("nixl.5.1.0.mmap");
        std::fs::write(&small, [1u8; 16]).unwrap();
        let zero = dir.path().join("nixl.6.1.0.mmap");
        std::fs::write(&zero, vec![0u8; crate::layout::STORE_SIZE]).unwrap();
        let (held, _holder) = held_store_of_schema_2(dir.path());
        std::fs::write(dir.path().join("not-a-store.txt"), "x").unwrap();
        std::os::unix::fs::symlink(&held, dir.path().join("nixl.8.1.0.mmap")).unwrap();
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let (stores, logged) = nixl_telemetry_base::logging::capture(|| {
            let first = scan.live_stores();
            (first, scan.live_stores())
        });
        assert!(stores.0.is_empty() && stores.1.is_empty());
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings.iter().any(|w| w.contains("16 bytes")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("schema 2")),
            "{warnings:?}"
        );
        // Unheld invalid files are gone; the held one, other files and the link stay.
        assert!(!small.exists() && !zero.exists());
        assert!(held.exists());
        assert!(dir.path().join("not-a-store.txt").exists());
        assert!(dir
            .path()
            .join("nixl.8.1.0.mmap")
            .symlink_metadata()
            .is_ok());
    }

    #[test]
    fn another_users_store_is_skipped_with_one_warning_and_kept() {
        if crate::sys::euid() != 0 {
            return; // only root can give a file away
        }
        let dir = tempfile::tempdir().unwrap();
        let w = writer(dir.path(), "foreign", 9, "", &Buckets::default());
        let path = w.path().to_owned();
        drop(w);
        std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let (stores, logged) =
            nixl_telemetry_base::logging::capture(|| (scan.live_stores(), scan.live_stores()));
        assert!(stores.0.is_empty() && stores.1.is_empty());
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("owned by uid 12345"),
            "{}",
            warnings[0]
        );
        assert!(path.exists(), "never removed");
    }

    /// 5,000 files of another user with store names in a shared directory: each is warned about
    /// once for the life of the scan (they gave 5,000 warnings at every scrape, each file
    /// reopened), then skipped without being opened while it is the same file; a file replaced
    /// under its name is looked at again. Needs root, to give files away; otherwise it says why.
    #[test]
    fn foreign_files_are_warned_about_once_each_and_not_reopened() {
        if crate::sys::euid() != 0 {
            eprintln!("skipped: not root, so files cannot be given to another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mine = writer(dir.path(), "mine", 1, "", &Buckets::default());
        for i in 0..5000 {
            let path = dir.path().join(format!("nixl.{}.1.0.mmap", 100_000 + i));
            std::fs::write(&path, [0u8; 16]).unwrap();
            std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        }
        let scan = StoreScan::new(config(dir.path(), Duration::ZERO, Aggregate::None));
        let (first, logged) = nixl_telemetry_base::logging::capture(|| scan.live_stores());
        assert_eq!(first.len(), 1, "my store is served");
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 5000);
        assert!(warnings.iter().all(|w| w.contains("owned by uid 12345")));
        let (second, logged) =
            nixl_telemetry_base::logging::capture(|| (scan.live_stores(), scan.live_stores()));
        assert_eq!((second.0.len(), second.1.len()), (1, 1));
        assert!(
            nixl_telemetry_base::logging::warnings(&logged).is_empty(),
            "warned again"
        );
        assert_eq!(scan.refused.lock_unpoisoned().len(), 5000);
        // Replaced under the same name (a new inode): looked at, and warned about, again.
        let replaced = dir.path().join("nixl.100000.1.0.mmap");
        std::fs::remove_file(&replaced).unwrap();
        std::fs::write(&replaced, [0u8; 16]).unwrap();
        std::os::unix::fs::chown(&replaced, Some(12346), None).unwrap();
        // A changed directory is listed again at once only when it is not too recent (see
        // `Listing`): drop the listing, as a later scrape would.
        *scan.listing.lock_unpoisoned() = None;
        let (_, logged) = nixl_telemetry_base::logging::capture(|| scan.live_stores());
        let warnings = nixl_telemetry_base::logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("owned by uid 12346"),
            "{}",
            warnings[0]
        );
        drop(mine);
    }

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
                assert_eq!(len > crate::layout::STORE_SIZE as u64, !j.is_empty());
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

    fn native_writer(dir: &Path, pid: i64, native: bool) -> StoreWriter {
        let id = Identity {
            agent_name: format!("rank{pid}"),
            hostname: "node".into(),
            local_rank: pid.to_string(),
            pid,
            run_marker: 1,
            instance: 0,
            labels: WorkloadLabels::none(),
        };
        StoreWriter::create_with(dir, &id, &Buckets::default(), native).unwrap()
    }

    /// Native histograms in the protobuf scrape: each rank's, and the node total's merged at the
    /// lower schema; the text page is the same as without them; text stays the default.
    #[test]
    fn the_protobuf_scrape_carries_each_ranks_native_histograms_and_their_total() {
        use nixl_telemetry_series::native::bucket_index;
        use nixl_telemetry_series::protobuf;
        let (on_dir, off_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let ranks: Vec<Vec<u64>> = vec![
            (1..=200).map(|k| 10 * k).collect(),
            // Far apart: this rank's histogram drops its schema.
            (0..60).map(|k| 1u64 << (k % 60)).collect(),
        ];
        let mut writers = Vec::new();
        for (dir, native) in [(on_dir.path(), true), (off_dir.path(), false)] {
            for (i, values) in ranks.iter().enumerate() {
                let w = native_writer(dir, i as i64 + 1, native);
                let batch: Vec<Event> = values
                    .iter()
                    .flat_map(|&v| {
                        [
                            Event::new(EventType::AgentXferTime, v),
                            Event::new(EventType::AgentTxBytes, v * 4),
                        ]
                    })
                    .collect();
                w.apply(&batch);
                writers.push(w);
            }
        }
        let scan = |dir: &Path| StoreScan::new(config(dir, Duration::ZERO, Aggregate::Sum));
        let (on, off) = (scan(on_dir.path()), scan(off_dir.path()));
        // Text: the same page, native histograms or not; the default, and the answer to a
        // protobuf scraper where no store keeps native histograms.
        let text_on = on.scrape();
        assert_eq!(text_on, off.scrape());
        assert_eq!(
            on.scrape_as(false),
            (text::CONTENT_TYPE, text_on.into_bytes())
        );
        assert_eq!(off.scrape_as(true).0, text::CONTENT_TYPE);
        let (content_type, body) = on.scrape_as(true);
        assert_eq!(content_type, protobuf::CONTENT_TYPE);
        let families = protobuf::decode(&body).unwrap();
        let family = |n: &str| families.iter().find(|f| f.name == n).unwrap();
        let pid = |m: &protobuf::Metric| {
            m.label
                .iter()
                .find(|l| l.name == "pid")
                .map(|l| l.value.clone())
        };
        let time = family("agent_xfer_time_us");
        assert_eq!(time.metric.len(), 3, "two ranks and their total");
        let as_native = |m: &protobuf::Metric| {
            let h = m.histogram.as_ref().unwrap();
            let mut index = 0;
            let mut count = 0i64;
            let mut buckets = Vec::new();
            let mut deltas = h.positive_delta.iter();
            for s in &h.positive_span {
                index += s.offset;
                for _ in 0..s.length {
                    count += deltas.next().unwrap();
                    buckets.push((index, count as u64));
                    index += 1;
                }
            }
            (h.schema, h.sample_count, buckets)
        };
        let expected = |values: &[u64], schema: i32| {
            let mut b = std::collections::BTreeMap::new();
            for &v in values {
                *b.entry(bucket_index(v as f64, schema as i8))
                    .or_insert(0u64) += 1;
            }
            b.into_iter().collect::<Vec<_>>()
        };
        let mut schemas = Vec::new();
        for (i, values) in ranks.iter().enumerate() {
            let m = time
                .metric
                .iter()
                .find(|m| pid(m) == Some((i + 1).to_string()))
                .unwrap();
            let (schema, count, buckets) = as_native(m);
            assert_eq!(count, values.len() as u64);
            assert_eq!(buckets, expected(values, schema));
            schemas.push(schema);
        }
        assert!(schemas[1] < schemas[0], "{schemas:?}");
        let total = time.metric.iter().find(|m| pid(m).is_none()).unwrap();
        let (schema, count, buckets) = as_native(total);
        assert_eq!(schema, schemas[1], "the lower schema");
        assert_eq!(count, 260);
        let all: Vec<u64> = ranks.concat();
        assert_eq!(buckets, expected(&all, schema));
        assert_eq!(
            total.histogram.as_ref().unwrap().bucket.len(),
            18,
            "classic too"
        );
        // The size families: each rank and the total.
        assert_eq!(family("agent_tx_request_size_bytes").metric.len(), 3);
        // A rank without native histograms: its series stay, the total has none.
        let plain = native_writer(on_dir.path(), 3, false);
        plain.apply(&[Event::new(EventType::AgentXferTime, 5)]);
        let families = protobuf::decode(&on.scrape_as(true).1).unwrap();
        let time = families
            .iter()
            .find(|f| f.name == "agent_xfer_time_us")
            .unwrap();
        let native: Vec<(Option<String>, bool)> = time
            .metric
            .iter()
            .map(|m| (pid(m), m.histogram.as_ref().unwrap().zero_threshold > 0.0))
            .collect();
        assert_eq!(
            native,
            [
                (Some("1".into()), true),
                (Some("2".into()), true),
                (Some("3".into()), false),
                (None, false)
            ]
        );
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
