//! The ring's loss count, in a small file beside it that NIXL's readers never open:
//! `<dir>/.<ring name>.lost`, 24 bytes in native byte order: the magic `NIXLLOST`, the inode of
//! the ring file it counts for, and the events the writer could not put into that ring (a
//! reader behind, a flush larger than the ring) since it created it.
//!
//! The `BUFFER` exporter creates it with each ring (count 0), rewrites the count (one `pwrite`
//! of 8 bytes) after a flush that lost events, at most once per 10 ms (a later count is
//! written by the next flush, idle ones included, so it is at most one run interval late). The
//! file outlives the agent as the ring does, so a look after the job still sees what the ring
//! lost; it is reset when the ring is created again. Readers (the C reader API, the Python
//! package, the CLI) read it with `pread`, never through a mapping, and trust it only when it
//! is a regular file (not a link: opened with `O_NOFOLLOW`) of the ring file's owner, of
//! exactly [`SIZE`] bytes, whose inode field is the one of the ring they opened: a count left
//! by an earlier ring under the same name, or planted by another user of a shared directory, is
//! never reported. A ring written by NIXL has no such file, and its readers report the count as
//! unknown.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::owner_only;

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
    /// owner-only, with a count of 0.
    pub fn create(ring: &Path, ring_inode: u64) -> io::Result<LossFile> {
        let path = path_for(ring);
        let file = owner_only::open_file(&path, false)?;
        owner_only::set_file_mode(&file)?;
        let mut bytes = [0u8; SIZE];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[INODE_OFFSET..INODE_OFFSET + 8].copy_from_slice(&ring_inode.to_ne_bytes());
        file.set_len(SIZE as u64)?;
        file.write_all_at(&bytes, 0)?;
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

/// The loss count beside the ring at `ring`, whose inode is `ring_inode` and owner
/// `ring_owner`: `None` when there is no loss file for that ring that can be trusted (a ring
/// written by NIXL, an earlier ring's file, a link, a file of another user or of another size).
pub fn read(ring: &Path, ring_inode: u64, ring_owner: u32) -> Option<u64> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path_for(ring))
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != ring_owner || meta.len() != SIZE as u64 {
        return None;
    }
    let mut bytes = [0u8; SIZE];
    file.read_exact_at(&mut bytes, 0).ok()?;
    let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    (bytes[..8] == MAGIC && word(INODE_OFFSET) == ring_inode).then(|| word(COUNT_OFFSET as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_read_back_only_for_its_own_ring() {
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("agent");
        assert_eq!(path_for(&ring), dir.path().join(".agent.lost"));
        assert!(is_loss_file_name(".agent.lost") && !is_loss_file_name("agent"));
        let me = crate::owner_only::euid();
        let read = |ring: &Path, inode: u64| read(ring, inode, me);
        assert_eq!(read(&ring, 7), None, "no file: unknown");
        let mut f = LossFile::create(&ring, 7).unwrap();
        assert_eq!(read(&ring, 7), Some(0));
        let t0 = Instant::now();
        f.add(3, t0).unwrap();
        assert_eq!(read(&ring, 7), Some(3), "a first loss is written at once");
        f.add(4, t0 + Duration::from_millis(9)).unwrap();
        assert_eq!(read(&ring, 7), Some(3), "not rewritten within 10 ms");
        f.sync().unwrap();
        assert_eq!((read(&ring, 7), f.lost()), (Some(7), 7));
        let later = Instant::now() + Duration::from_secs(1);
        f.add(1, later).unwrap();
        f.add(1, later + Duration::from_millis(10)).unwrap();
        assert_eq!(
            read(&ring, 7),
            Some(9),
            "rewritten 10 ms after the last write"
        );
        assert_eq!(read(&ring, 8), None, "another ring's count");
        let newer = LossFile::create(&ring, 8).unwrap();
        assert_eq!(read(&ring, 8), Some(0), "reset with a new ring");
        drop(f);
        assert_eq!(
            read(&ring, 8),
            Some(0),
            "the older writer leaves the newer one's file"
        );
        drop(newer);
        assert_eq!(read(&ring, 8), Some(0), "the count outlives its writer");
        std::fs::remove_file(path_for(&ring)).unwrap();
        std::fs::write(path_for(&ring), b"not a loss file at all!!").unwrap();
        assert_eq!(read(&ring, 8), None);
    }

    #[test]
    fn a_link_a_file_of_another_size_or_owner_is_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("agent");
        let me = crate::owner_only::euid();
        let elsewhere = dir.path().join("elsewhere");
        let mut bytes = [0u8; SIZE];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[INODE_OFFSET..INODE_OFFSET + 8].copy_from_slice(&7u64.to_ne_bytes());
        bytes[16..].copy_from_slice(&123_456_789u64.to_ne_bytes());
        std::fs::write(&elsewhere, bytes).unwrap();
        std::os::unix::fs::symlink(&elsewhere, path_for(&ring)).unwrap();
        assert_eq!(read(&ring, 7, me), None, "a link is not followed");
        std::fs::remove_file(path_for(&ring)).unwrap();
        std::fs::copy(&elsewhere, path_for(&ring)).unwrap();
        assert_eq!(read(&ring, 7, me), Some(123_456_789));
        assert_eq!(
            read(&ring, 7, me.wrapping_add(1)),
            None,
            "not the ring's owner"
        );
        let mut longer = bytes.to_vec();
        longer.push(0);
        std::fs::write(path_for(&ring), longer).unwrap();
        assert_eq!(read(&ring, 7, me), None, "not exactly 24 bytes");
    }
}
