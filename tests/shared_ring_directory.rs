//! A ring directory other users may write (mode 1777, as `/tmp`), where another user planted
//! files before the agent started at the names it writes: the ring and the ring's loss file
//! (`.<agent>.lost`). Each is refused and left as it is, never written through; a refused loss
//! file is said once in the log, the agent still counts every loss in its stats, and the ring's
//! readers report what is there as untrusted rather than as a count or as no count. Runs as
//! root playing `nobody` (`test-support`'s `other_user`); skipped with a message otherwise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use nixl_telemetry_base::logging;
use nixl_telemetry_core::ring::loss_file::{self, LossCount};
use nixl_telemetry_core::{Collector, Config, ExporterChoice, MetricMask, RingReader, Status};
use nixl_telemetry_test_support::other_user::other_user_or_skip;

/// A collector writing the ring `agent` (8 records) in `dir`, flushed only on demand.
fn collector(dir: &Path, agent: &str) -> nixl_telemetry_core::Result<Collector> {
    let config = Config {
        buffer_size: 8,
        run_interval: Duration::from_secs(3600),
        exporter: ExporterChoice::Buffer(dir.to_owned(), nixl_telemetry_core::ring::layout::V4),
        enabled_metrics: MetricMask::ALL,
    };
    Collector::new(agent, config)
}

/// A world-writable sticky directory, as `/tmp` is.
fn shared_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o1777)).unwrap();
    dir
}

/// Writes `bytes` at `path` with `mode`, and gives the file to the user and group `ids`.
fn give(path: &Path, bytes: &[u8], mode: u32, (uid, gid): (u32, u32)) {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, PermissionsExt::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

/// A loss file's bytes for the ring of inode `inode`, with a count of 123456789.
fn forged_count(inode: u64) -> Vec<u8> {
    let mut bytes = loss_file::MAGIC.to_vec();
    bytes.extend(inode.to_ne_bytes());
    bytes.extend(123_456_789u64.to_ne_bytes());
    bytes
}

/// Owner, mode, size and contents (a link's target's) of what is at `path`.
fn snapshot(path: &Path) -> (u32, u32, u64, Option<Vec<u8>>) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let bytes = meta.is_file() || meta.file_type().is_symlink();
    (
        meta.uid(),
        meta.mode(),
        meta.len(),
        bytes.then(|| std::fs::read(path).unwrap()),
    )
}

/// Plants something at the loss file's name (the first path), maybe a link to the second.
type Plant = fn(&Path, &Path);

#[test]
fn what_another_user_planted_beside_a_ring_is_refused_and_never_believed() {
    let Some((uid, gid)) = other_user_or_skip() else {
        return;
    };
    let dir = shared_dir();
    let theirs = dir.path().join("theirs");
    give(&theirs, &forged_count(0), 0o644, (uid, gid));
    let owned_by_them = format!("owned by uid {uid}, not uid 0");
    // What `nobody` planted, and what the refusal says it is.
    let plants: [(&str, &str, Plant); 4] = [
        ("file", &owned_by_them, |lost, _| {
            std::fs::write(lost, forged_count(0)).unwrap();
            std::fs::set_permissions(lost, PermissionsExt::from_mode(0o666)).unwrap();
        }),
        ("private", &owned_by_them, |lost, _| {
            std::fs::write(lost, forged_count(0)).unwrap();
            std::fs::set_permissions(lost, PermissionsExt::from_mode(0o600)).unwrap();
        }),
        ("link", "a symbolic link", |lost, theirs| {
            std::os::unix::fs::symlink(theirs, lost).unwrap();
        }),
        ("fifo", "a FIFO", |lost, _| {
            let c = std::ffi::CString::new(lost.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        }),
    ];
    for (agent, what, plant) in plants {
        let ring = dir.path().join(agent);
        let lost = loss_file::path_for(&ring);
        plant(&lost, &theirs);
        std::os::unix::fs::lchown(&lost, Some(uid), Some(gid)).unwrap();
        let planted = snapshot(&lost);
        let (stats, logged) = logging::capture(|| {
            let c = collector(dir.path(), agent).unwrap();
            // 8 slots, 7 usable: one whole transfer fits, the second is lost whole.
            c.add_xfer_stats(10, true, 1, 2);
            c.add_xfer_stats(20, true, 1, 2);
            c.flush();
            c.flush();
            c.stats()
        });
        assert_eq!(stats.events_lost, 4, "{agent}: the agent still counts");
        let warnings = logging::warnings(&logged);
        assert_eq!(warnings.len(), 1, "{agent}: said once: {warnings:?}");
        let expected = format!(
            "not using {} as the loss count of telemetry ring {}: it is {what},",
            lost.display(),
            ring.display()
        );
        assert!(warnings[0].contains(&expected), "{agent}: {}", warnings[0]);
        assert!(warnings[0].contains("events_lost"), "{}", warnings[0]);
        assert_eq!(snapshot(&lost), planted, "{agent}: left as it was");
        assert_eq!(std::fs::read(&theirs).unwrap(), forged_count(0), "{agent}");
        // Readers: untrusted, not a count and not "no count".
        let reader = RingReader::open(&ring).unwrap();
        match reader.lost_events() {
            LossCount::Untrusted(why) => {
                assert!(why.starts_with(&lost.display().to_string()), "{why}")
            }
            other => panic!("{agent}: {other:?}"),
        }
        let c_path = std::ffi::CString::new(ring.as_os_str().as_encoded_bytes()).unwrap();
        let (mut r, mut count) = (std::ptr::null_mut(), 7u64);
        let mut message = [0 as std::ffi::c_char; 1024];
        // SAFETY: a valid C string, out-parameters and a writable buffer of its length; the
        // handle is closed once below.
        unsafe {
            use nixl_telemetry::{
                nixl_telemetry_last_error, nixl_telemetry_ring_close, nixl_telemetry_ring_lost,
                nixl_telemetry_ring_open, NIXL_TELEMETRY_ERR_NOT_ALLOWED, NIXL_TELEMETRY_SUCCESS,
            };
            assert_eq!(
                nixl_telemetry_ring_open(c_path.as_ptr(), &mut r),
                NIXL_TELEMETRY_SUCCESS
            );
            assert_eq!(
                nixl_telemetry_ring_lost(r, &mut count),
                NIXL_TELEMETRY_ERR_NOT_ALLOWED,
                "{agent}"
            );
            nixl_telemetry_last_error(message.as_mut_ptr(), message.len());
            nixl_telemetry_ring_close(r);
        }
        assert_eq!(count, 7, "{agent}: *out unchanged");
        // SAFETY: the function NUL-terminates what it writes into a non-empty buffer.
        let message = unsafe { std::ffi::CStr::from_ptr(message.as_ptr()) }.to_string_lossy();
        assert!(message.contains("is not trusted"), "{message}");
    }
    // The ring itself, planted: refused, left as it is, with no loss file made for it.
    let ring = dir.path().join("ring");
    give(&ring, &[0xAB; 40 + 16 * 8], 0o666, (uid, gid));
    let planted = snapshot(&ring);
    let e = collector(dir.path(), "ring").err().expect("refused");
    assert_eq!(e.status, Status::NotAllowed);
    let expected = format!(
        "refusing to use {} as a telemetry ring: it is owned by uid {uid}, not uid 0",
        ring.display()
    );
    assert!(e.message.contains(&expected), "{}", e.message);
    assert_eq!(snapshot(&ring), planted);
    assert!(
        !loss_file::path_for(&ring).exists(),
        "no loss file for a refused ring"
    );
}
