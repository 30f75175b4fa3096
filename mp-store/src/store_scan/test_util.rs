//! What the store scan's tests share: a scan's configuration, a rank's store, a sample of a
//! text page, and setting a directory's modification time.

use std::path::Path;
use std::time::Duration;

use crate::config::{Aggregate, ScanConfig};
use crate::store::{Identity, StoreWriter};
use nixl_telemetry_series::{text::parse, Buckets, WorkloadLabels};

/// The scan of `dir` with stale TTL `ttl` and `aggregate`.
pub(super) fn config(dir: &Path, ttl: Duration, aggregate: Aggregate) -> ScanConfig {
    ScanConfig {
        dir: dir.to_owned(),
        stale_ttl: ttl,
        aggregate,
    }
}

/// A store of host `node` in `dir`: agent `name`, process `pid`, local rank `rank`, classic
/// buckets `buckets`, no workload labels.
pub(super) fn writer(
    dir: &Path,
    name: &str,
    pid: i64,
    rank: &str,
    buckets: &Buckets,
) -> StoreWriter {
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

/// The value of the sample `name` of `page` whose labels are exactly `labels` (and `status`,
/// when it has one), if any.
pub(super) fn value(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
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

/// Sets the directory's modification time to `mtime`.
pub(super) fn set_dir_mtime(dir: &Path, mtime: std::time::SystemTime) {
    use std::os::unix::ffi::OsStrExt;
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
