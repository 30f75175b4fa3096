//! The ring's loss count, in a small file beside it that NIXL's readers never open:
//! `<dir>/.<ring name>.lost`, 24 bytes in native byte order: the magic `NIXLLOST`, the inode of
//! the ring file it counts for, and the events the writer could not put into that ring (a
//! reader behind, a flush larger than the ring) since it created it.
//!
//! The `BUFFER` exporter creates it with each ring (count 0), rewrites the count (one `pwrite`
//! of 8 bytes) after a flush that lost events, at most once per 10 ms (a later count is
//! written by the next flush, idle ones included, so it is at most one run interval late). The
//! file outlives the agent as the ring does, so a look after the job still sees what the ring
//! lost; it is reset when the ring is created again.
//!
//! The ring's directory may be shared (mode 1777, as `/tmp`), so the name may hold something
//! another user planted before the agent started. The writer uses only a file of its own, as it
//! does for the ring ([`owner_only::open_own_file`]: a regular file with a single link, of its
//! user, never through a link) that no one else may write (no group or other write bit: another
//! process could hold it open and rewrite the count at will); anything else is refused and left
//! as it is, and the agent keeps no loss file for that ring (the exporter says so once; its
//! stats still count every loss). Readers (the C reader API, the Python package, the CLI) read
//! the file with `pread`, never through a mapping, and tell three cases apart ([`LossCount`]):
//! a count they believe (a regular file of the ring file's owner, not writable by others, of
//! exactly [`SIZE`] bytes, naming the inode of the ring they opened), no count (no file: a ring
//! written by NIXL; or a file of the ring's owner left by an earlier ring), and a file they must
//! not believe (another user's, a link, not a regular file, writable by others), which they
//! report as untrusted rather than as a number or as no count.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::owner_only::{self, not_file_of, OwnFileError};

/// The file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"NIXLLOST";
/// The file's size.
pub const SIZE: usize = 24;
/// Offset of the ring's inode (u64).
const INODE_OFFSET: usize = 8;
/// Offset of the count (u64).
const COUNT_OFFSET: u64 = 16;

/// The loss file of the ring at `ring`: `.<name>.lost` in the same directory.
pub fn path_for(ring: &Path) -> PathBuf {
    let name = ring
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    ring.with_file_name(format!(".{name}.lost"))
}

/// Whether a directory entry named `name` is a loss file (so directory scans skip it).
pub fn is_loss_file_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".lost")
}

/// The writer's handle on a ring's loss file (dropping it leaves the file, with its count).
#[derive(Debug)]
pub struct LossFile {
    file: File,
    lost: u64,
    /// The count in the file.
    written: u64,
    /// When it was last written (`None`: not since the file was made).
    written_at: Option<Instant>,
}

/// The shortest time between two writes of the count.
const WRITE_INTERVAL: Duration = Duration::from_millis(10);

impl LossFile {
    /// Creates (or resets) the loss file of the ring at `ring`, whose inode is `ring_inode`,
    /// owner-only, with a count of 0. Refused, and left as it is, when what is at its name is
    /// not this user's own file or others may write it (see the module documentation).
    pub fn create(ring: &Path, ring_inode: u64) -> Result<LossFile, OwnFileError> {
        let path = path_for(ring);
        let file = owner_only::open_own_file(&path, false)?;
        let meta = file.metadata().map_err(OwnFileError::Io)?;
        if let Some(what) = writable_by_others(&meta) {
            return Err(OwnFileError::Refused(what));
        }
        let mut bytes = [0u8; SIZE];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[INODE_OFFSET..INODE_OFFSET + 8].copy_from_slice(&ring_inode.to_ne_bytes());
        owner_only::set_file_mode(&file)
            .and_then(|()| file.set_len(SIZE as u64))
            .and_then(|()| file.write_all_at(&bytes, 0))
            .map_err(OwnFileError::Io)?;
        Ok(LossFile {
            file,
            lost: 0,
            written: 0,
            written_at: None,
        })
    }

    /// Adds `n` events to the count and writes it, unless it was written less than 10 ms
    /// before `now` ([`LossFile::sync`] writes it then).
    pub fn add(&mut self, n: u64, now: Instant) -> io::Result<()> {
        self.lost += n;
        if self
            .written_at
            .is_some_and(|at| now.saturating_duration_since(at) < WRITE_INTERVAL)
        {
            return Ok(());
        }
        self.write_count(now)
    }

    /// Writes the count if the file does not hold it yet.
    pub fn sync(&mut self) -> io::Result<()> {
        self.write_count(Instant::now())
    }

    /// Writes the count if the file does not hold it yet, at `now`.
    fn write_count(&mut self, now: Instant) -> io::Result<()> {
        if self.written == self.lost {
            return Ok(());
        }
        self.file
            .write_all_at(&self.lost.to_ne_bytes(), COUNT_OFFSET)?;
        self.written = self.lost;
        self.written_at = Some(now);
        Ok(())
    }

    /// The count written.
    pub fn lost(&self) -> u64 {
        self.lost
    }
}

/// What a reader finds beside a ring ([`read`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LossCount {
    /// The count of the ring's writer.
    Counted(u64),
    /// No count for this ring: no loss file (a ring written by NIXL, or a writer that could not
    /// keep one), or a file of the ring's owner that is not this ring's count (an earlier
    /// ring's, or not a loss file).
    Unknown,
    /// A file at the loss file's name that its readers must not believe (another user's, a
    /// link, not a regular file, writable by others): why, as "`<path>` is ...".
    Untrusted(String),
}

/// Why a loss file others may write is not trusted, if they may: "writable by group or others
/// (mode 0666)".
fn writable_by_others(meta: &Metadata) -> Option<String> {
    (meta.mode() & 0o022 != 0).then(|| {
        format!(
            "writable by group or others (mode {:04o})",
            meta.mode() & 0o7777
        )
    })
}

/// The loss count beside the ring at `ring`, whose inode is `ring_inode` and owner
/// `ring_owner` (see [`LossCount`]). One `open` (without following a link or waiting on a
/// FIFO), one `fstat` and one `pread`.
pub fn read(ring: &Path, ring_inode: u64, ring_owner: u32) -> LossCount {
    let path = path_for(ring);
    let distrust = |meta: &Metadata| {
        let what = not_file_of(meta, ring_owner).or_else(|| writable_by_others(meta))?;
        Some(LossCount::Untrusted(format!(
            "{} is {what}",
            path.display()
        )))
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(file) => file,
        // A link (ELOOP), or another user's file this reader may not open: what is there.
        Err(_) => {
            let meta = std::fs::symlink_metadata(&path);
            return meta
                .ok()
                .as_ref()
                .and_then(distrust)
                .unwrap_or(LossCount::Unknown);
        }
    };
    let Ok(meta) = file.metadata() else {
        return LossCount::Unknown;
    };
    if let Some(untrusted) = distrust(&meta) {
        return untrusted;
    }
    let mut bytes = [0u8; SIZE];
    if meta.len() != SIZE as u64 || file.read_exact_at(&mut bytes, 0).is_err() {
        return LossCount::Unknown;
    }
    let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if bytes[..8] == MAGIC && word(INODE_OFFSET) == ring_inode {
        LossCount::Counted(word(COUNT_OFFSET as usize))
    } else {
        LossCount::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use LossCount::{Counted, Unknown};

    #[test]
    fn a_count_is_read_back_only_for_its_own_ring() {
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("agent");
        assert_eq!(path_for(&ring), dir.path().join(".agent.lost"));
        assert!(is_loss_file_name(".agent.lost") && !is_loss_file_name("agent"));
        let me = crate::owner_only::euid();
        let read = |ring: &Path, inode: u64| read(ring, inode, me);
        assert_eq!(read(&ring, 7), Unknown, "no file: unknown");
        let mut f = LossFile::create(&ring, 7).unwrap();
        assert_eq!(read(&ring, 7), Counted(0));
        let t0 = Instant::now();
        f.add(3, t0).unwrap();
        assert_eq!(
            read(&ring, 7),
            Counted(3),
            "a first loss is written at once"
        );
        f.add(4, t0 + Duration::from_millis(9)).unwrap();
        assert_eq!(read(&ring, 7), Counted(3), "not rewritten within 10 ms");
        f.sync().unwrap();
        assert_eq!((read(&ring, 7), f.lost()), (Counted(7), 7));
        let later = Instant::now() + Duration::from_secs(1);
        f.add(1, later).unwrap();
        f.add(1, later + Duration::from_millis(10)).unwrap();
        assert_eq!(
            read(&ring, 7),
            Counted(9),
            "rewritten 10 ms after the last write"
        );
        assert_eq!(read(&ring, 8), Unknown, "another ring's count");
        let newer = LossFile::create(&ring, 8).unwrap();
        assert_eq!(read(&ring, 8), Counted(0), "reset with a new ring");
        drop(f);
        assert_eq!(
            read(&ring, 8),
            Counted(0),
            "the older writer leaves the newer one's file"
        );
        drop(newer);
        assert_eq!(read(&ring, 8), Counted(0), "the count outlives its writer");
        std::fs::remove_file(path_for(&ring)).unwrap();
        std::fs::write(path_for(&ring), b"not a loss file at all!!").unwrap();
        assert_eq!(read(&ring, 8), Unknown);
    }

    /// A loss file's bytes for the ring of inode 7, with a count of 123456789.
    fn forged() -> [u8; SIZE] {
        let mut bytes = [0u8; SIZE];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[INODE_OFFSET..INODE_OFFSET + 8].copy_from_slice(&7u64.to_ne_bytes());
        bytes[16..].copy_from_slice(&123_456_789u64.to_ne_bytes());
        bytes
    }

    fn untrusted(count: LossCount) -> String {
        match count {
            LossCount::Untrusted(why) => why,
            other => panic!("believed or unknown: {other:?}"),
        }
    }

    /// A directory with the ring `agent`'s name, its loss file's, and `elsewhere`, a file
    /// holding [`forged`] bytes.
    struct Planted {
        _dir: tempfile::TempDir,
        ring: PathBuf,
        lost: PathBuf,
        elsewhere: PathBuf,
    }

    fn planted() -> Planted {
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("agent");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, forged()).unwrap();
        Planted {
            lost: path_for(&ring),
            ring,
            elsewhere,
            _dir: dir,
        }
    }

    #[test]
    fn a_link_a_fifo_a_file_of_another_size_owner_or_mode_is_not_believed() {
        let p = planted();
        let (ring, lost, me) = (&p.ring, &p.lost, crate::owner_only::euid());
        std::os::unix::fs::symlink(&p.elsewhere, lost).unwrap();
        let why = untrusted(read(ring, 7, me));
        assert_eq!(why, format!("{} is a symbolic link", lost.display()));
        std::fs::remove_file(lost).unwrap();
        std::fs::copy(&p.elsewhere, lost).unwrap();
        std::fs::set_permissions(lost, PermissionsExt::from_mode(0o644)).unwrap();
        assert_eq!(read(ring, 7, me), Counted(123_456_789));
        let why = untrusted(read(ring, 7, me.wrapping_add(1)));
        assert!(why.ends_with(&format!("is owned by uid {me}, not uid {}", me + 1)));
        std::fs::set_permissions(lost, PermissionsExt::from_mode(0o666)).unwrap();
        let why = untrusted(read(ring, 7, me));
        assert!(
            why.ends_with("writable by group or others (mode 0666)"),
            "{why}"
        );
        let mut longer = forged().to_vec();
        longer.push(0);
        std::fs::remove_file(lost).unwrap();
        std::fs::write(lost, longer).unwrap();
        assert_eq!(read(ring, 7, me), Unknown, "not exactly 24 bytes");
        std::fs::remove_file(lost).unwrap();
        mkfifo(lost);
        let why = untrusted(read(ring, 7, me));
        assert!(why.ends_with("is a FIFO"), "not waited on: {why}");
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// What the writer finds at the loss file's name before it starts (here this user's own
    /// link, FIFO, file others may write and hard-linked file; another user's in
    /// `tests/shared_ring_directory.rs`) is refused and left as it is, and readers do not believe it.
    #[test]
    fn the_writer_refuses_what_is_not_its_own_private_file_and_changes_nothing() {
        let p = planted();
        let (ring, lost, me) = (&p.ring, &p.lost, crate::owner_only::euid());
        let refused = |expected: &str| match LossFile::create(ring, 7) {
            Err(OwnFileError::Refused(what)) => assert_eq!(what, expected),
            other => panic!("{expected}: {other:?}"),
        };
        std::os::unix::fs::symlink(&p.elsewhere, lost).unwrap();
        refused("a symbolic link");
        std::fs::remove_file(lost).unwrap();
        mkfifo(lost);
        refused("a FIFO");
        std::fs::remove_file(lost).unwrap();
        std::fs::hard_link(&p.elsewhere, lost).unwrap();
        refused("a file with other hard links");
        std::fs::remove_file(lost).unwrap();
        std::fs::write(lost, forged()).unwrap();
        std::fs::set_permissions(lost, PermissionsExt::from_mode(0o666)).unwrap();
        refused("writable by group or others (mode 0666)");
        assert_eq!(std::fs::read(lost).unwrap(), forged());
        assert_eq!(std::fs::read(&p.elsewhere).unwrap(), forged());
        assert!(matches!(read(ring, 7, me), LossCount::Untrusted(_)));
        // A file of this user that only it may write is its own: reset for the new ring.
        std::fs::set_permissions(lost, PermissionsExt::from_mode(0o644)).unwrap();
        LossFile::create(ring, 7).unwrap();
        assert_eq!(read(ring, 7, me), Counted(0));
        let mode = std::fs::metadata(lost).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
    }
}
