//! One process's store file, written as NIXL writes it: created owner-only and unnamed, locked
//! with an exclusive `flock` for the writer's life, sized to 6,800 bytes plus our extensions
//! (the workload labels when the writer has some, the native histograms when it keeps them,
//! and the publication sequence, see [`crate::layout`]), filled (magic last, with release
//! ordering), then published under its final name `nixl.<pid>.<run marker>.<instance>.mmap` in
//! one step (`file`). Dropping the writer unmaps and closes it (releasing the lock) and leaves
//! the file for the store scan, which serves it for the stale TTL and then removes it.
//!
//! [`StoreWriter::apply`] runs on the agent's collector's flush thread, inside the exporter's
//! export: the producer hot path never touches the store. The writer keeps its own copy of the
//! store's values (`values`): a batch updates the copy, then what it changed is published into
//! the file as one update under the publication sequence, so a reader in another process sees
//! the store before the batch or after it, never in between.
//!
//! **A file someone else touched never costs the host process, nor the values.** The mapping is
//! guarded against SIGBUS; before each batch the writer checks the file's size and magic (and
//! puts the guard back on top), and at most once a second ([`CHECK_INTERVAL`], also while idle,
//! [`StoreWriter::check`], and when it is dropped) what its path names. A store truncated under
//! its name is made whole again in place; one deleted (or whose directory was deleted) is
//! created again under its name; one whose name another file took is created again under a new
//! instance number, the other file left alone. Each is filled from the writer's copy, so
//! nothing recorded is lost; one warning says so, and one more if it cannot be done (retried
//! every [`CHECK_INTERVAL`] meanwhile).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nixl_telemetry_base::fork::Generation;
use nixl_telemetry_base::sync::LockUnpoisoned;
use nixl_telemetry_base::Event;
use nixl_telemetry_series::{Buckets, WorkloadLabels};

use crate::layout::MAX_BUCKETS;
use crate::sys;

mod file;
#[cfg(test)]
mod repair_tests;
#[cfg(test)]
mod tests;
mod values;

use file::{Damage, StoreFile};
use values::Values;

/// How often, at most, a writer checks what its store's path names (and retries making a
/// store it could not make again).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How many names in a row a store made again tries before it gives up until the next check.
const MAX_RENAMES: usize = 16;

/// The next instance number of this process's stores.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);

/// What a store says about its writer (its labels) besides the values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The agent's name (at most 255 bytes are kept).
    pub agent_name: String,
    /// The host name (at most 127 bytes).
    pub hostname: String,
    /// The local rank, empty for none (at most 63 bytes).
    pub local_rank: String,
    /// The writer's process id.
    pub pid: i64,
    /// The process's run marker (`CLOCK_REALTIME` ns when the process first created a store).
    pub run_marker: u64,
    /// The exporter's number within the process, from 0.
    pub instance: u64,
    /// The workload labels, kept in the store's labels extension (none: no labels extension).
    pub labels: WorkloadLabels,
}

impl Identity {
    /// The identity of a new store of this process: its pid, its run marker and the next
    /// instance number.
    pub fn for_this_process(
        agent_name: &str,
        hostname: &str,
        local_rank: &str,
        labels: WorkloadLabels,
    ) -> Identity {
        static RUN_MARKER: OnceLock<u64> = OnceLock::new();
        Identity {
            agent_name: agent_name.to_owned(),
            hostname: hostname.to_owned(),
            local_rank: local_rank.to_owned(),
            pid: i64::from(std::process::id()),
            run_marker: *RUN_MARKER.get_or_init(sys::realtime_ns),
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            labels,
        }
    }

    /// The store's file name.
    pub fn file_name(&self) -> String {
        format!(
            "nixl.{}.{}.{}.mmap",
            self.pid, self.run_marker, self.instance
        )
    }
}

/// Whether `name` is a store file name (`nixl.*.mmap`), as the store scan matches it.
pub fn is_store_name(name: &[u8]) -> bool {
    name.len() >= b"nixl..mmap".len() && name.starts_with(b"nixl.") && name.ends_with(b".mmap")
}

/// A live store: the writer's copy of its values and the file they are published in.
pub struct StoreWriter {
    dir: PathBuf,
    /// The process that created the writer: a forked child checks and repairs nothing.
    created: Generation,
    /// Only the flush thread takes it (and the thread that drops the writer).
    state: Mutex<State>,
}

struct State {
    id: Identity,
    values: Values,
    /// The published file; `None` while it could not be made again.
    file: Option<StoreFile>,
    /// When the path was last checked (or a store last made again).
    checked_at: Instant,
    /// The path last published (the file's, or the one to make again).
    path: PathBuf,
    warned_repair: bool,
    warned_failure: bool,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter")
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

impl StoreWriter {
    /// Creates, fills and publishes the store of `id` in `dir` with histograms over `buckets`
    /// (at most [`MAX_BUCKETS`] bounds). Names longer than the layout holds are truncated
    /// with a warning.
    pub fn create(dir: &Path, id: &Identity, buckets: &Buckets) -> std::io::Result<StoreWriter> {
        StoreWriter::create_with(dir, id, buckets, false)
    }

    /// [`StoreWriter::create`], keeping native histograms of
    /// [`nixl_telemetry_series::NATIVE_EVENTS`] (schema 3 at first, at most
    /// [`crate::layout::NATIVE_MAX_BUCKETS`] buckets each) in the store's native-histograms
    /// extension when `native` is true (see [`crate::layout`]).
    pub fn create_with(
        dir: &Path,
        id: &Identity,
        buckets: &Buckets,
        native: bool,
    ) -> std::io::Result<StoreWriter> {
        if buckets.bounds().len() > MAX_BUCKETS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} histogram bounds; a store holds at most {MAX_BUCKETS}",
                    buckets.bounds().len()
                ),
            ));
        }
        let values = Values::new(id, buckets, native);
        let path = dir.join(id.file_name());
        let (extension, placed) = values.extension();
        let file = StoreFile::create(&path, values.words(), &extension, &placed)?;
        Ok(StoreWriter {
            dir: dir.to_owned(),
            created: Generation::current(),
            state: Mutex::new(State {
                id: id.clone(),
                values,
                file: Some(file),
                checked_at: Instant::now(),
                path,
                warned_repair: false,
                warned_failure: false,
            }),
        })
    }

    /// The store's path (another one after its name was taken by another file).
    pub fn path(&self) -> PathBuf {
        self.state.lock_unpoisoned().path.clone()
    }

    /// Applies a batch (see `values`) and publishes it, after checking the file (see the module
    /// documentation): a damaged store is made again first. Returns how many events were
    /// applied.
    pub fn apply(&self, events: &[Event]) -> usize {
        let mut state = self.state.lock_unpoisoned();
        let applied = state.values.apply(events);
        if applied > 0 {
            state.repair(&self.dir, Instant::now(), false);
            let State { values, file, .. } = &mut *state;
            if let Some(file) = file {
                values.publish(file);
            }
        }
        applied
    }

    /// Checks the store while the agent is idle (its exporter's tick): at most once every
    /// [`CHECK_INTERVAL`] what its path names, and every time its size and magic; a damaged
    /// store is made again.
    pub fn check(&self) {
        if !self.created.inherited() {
            self.state
                .lock_unpoisoned()
                .repair(&self.dir, Instant::now(), false);
        }
    }
}

impl Drop for StoreWriter {
    /// Checks the store's path one last time, so that the store the scan serves for the stale
    /// TTL after the writer is gone holds its last values.
    fn drop(&mut self) {
        if !self.created.inherited() {
            self.state
                .lock_unpoisoned()
                .repair(&self.dir, Instant::now(), true);
        }
    }
}

impl State {
    /// Makes the store again when another process damaged it (see the module documentation);
    /// the path is checked when [`CHECK_INTERVAL`] has passed, and when `closing` (the writer
    /// is dropped: there is no later try).
    fn repair(&mut self, dir: &Path, now: Instant, closing: bool) {
        let due = closing || now.duration_since(self.checked_at) >= CHECK_INTERVAL;
        let damage = match &self.file {
            Some(file) => file.damage(due),
            // Could not be made again: retried when due.
            None if due => Some(Damage::Deleted),
            None => None,
        };
        if due {
            self.checked_at = now;
        }
        let Some(damage) = damage else {
            return;
        };
        let old = self.path.clone();
        match self.remake(dir, damage) {
            Ok(()) => {
                if !std::mem::replace(&mut self.warned_repair, true) {
                    let renamed = match self.path == old {
                        true => String::new(),
                        false => format!(" as {}", self.path.display()),
                    };
                    log::warn!(
                        "prometheus_mp: store {} was {} by another process; made it again{renamed} \
                         from this process's copy of its values (nothing recorded is lost)",
                        old.display(),
                        damage.done()
                    );
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut self.warned_failure, true) || closing {
                    let then = match closing {
                        true => "its last values are not published".to_owned(),
                        false => format!(
                            "retrying every {} s; the rank is missing from the node's page \
                             meanwhile",
                            CHECK_INTERVAL.as_secs()
                        ),
                    };
                    log::warn!(
                        "prometheus_mp: store {} was {} by another process and cannot be made \
                         again ({e}): {then}",
                        old.display(),
                        damage.done(),
                    );
                }
            }
        }
    }

    /// Makes the store again after `damage`, from the writer's copy.
    fn remake(&mut self, dir: &Path, damage: Damage) -> std::io::Result<()> {
        let (extension, placed) = self.values.extension();
        if damage == Damage::Truncated {
            if let Some(file) = self.file.take() {
                self.file = Some(file.restore(self.values.words(), &extension)?);
                return Ok(());
            }
        }
        self.file = None;
        if damage == Damage::Replaced {
            self.rename();
        }
        if !dir.exists() {
            crate::dir::prepare(dir).map_err(std::io::Error::other)?;
        }
        // Another file has the name (taken meanwhile, or an instance number in use): it is
        // left alone, and the store takes the next number.
        for _ in 0..MAX_RENAMES {
            match StoreFile::create(&self.path, self.values.words(), &extension, &placed) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => self.rename(),
                created => {
                    self.file = Some(created?);
                    return Ok(());
                }
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{MAX_RENAMES} names in a row are taken"),
        ))
    }

    /// The store gets the next instance number of the process, and the name that goes with it.
    fn rename(&mut self) {
        self.id.instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        self.values.set_instance(self.id.instance);
        self.path.set_file_name(self.id.file_name());
    }
}
