//! A file system that really fills up: a tmpfs of a few pages mounted on a fresh temporary
//! directory, so a write on it fails with ENOSPC (and a write into a mapping of one of its files
//! with SIGBUS) as on a full disk. Mounting needs root (`CAP_SYS_ADMIN`): [`SmallFs::mount`]
//! says why it cannot otherwise, which a test that cannot run prints when it skips.

use std::io::Write;
use std::path::Path;

/// A mounted tmpfs of a given size, unmounted (lazily, so an open file never keeps it) and its
/// directory removed when dropped.
pub struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts a tmpfs of `bytes` bytes (rounded up to whole pages by the kernel) with mode 1777
    /// on a new temporary directory; `Err` with the reason when this process cannot mount.
    pub fn mount(bytes: u64) -> Result<SmallFs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a directory: {e}"))?;
        let target = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes())
            .expect("a temporary directory's path has no NUL byte");
        let options = std::ffi::CString::new(format!("size={bytes},mode=1777")).expect("no NUL");
        // SAFETY: NUL-terminated strings that outlive the call; no other memory is passed.
        let mounted = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            return Err(format!(
                "cannot mount a tmpfs (needs root): {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(SmallFs { dir })
    }

    /// The mounted directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Appends to the file `name` (created if needed) until the file system is full, and checks
    /// that it stopped for that reason (ENOSPC); returns the bytes appended.
    pub fn fill(&self, name: &str) -> u64 {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join(name))
            .expect("the filler file opens");
        let page = [0xAAu8; 4096];
        let mut written = 0;
        loop {
            match file.write(&page) {
                Ok(0) => panic!("a write of the filler wrote nothing"),
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return written,
                Err(e) => panic!("the filler stopped on {e}, not on a full file system"),
            }
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.dir.path().as_os_str().as_encoded_bytes())
            .expect("no NUL byte");
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}
