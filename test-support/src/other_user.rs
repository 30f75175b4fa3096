//! Playing another user of a shared node: tests that need a second user (a file planted in a
//! shared directory, a configuration file owned by someone else) run as root and act as
//! `nobody` through [`other_user`].

use std::ffi::CStr;

/// The user id and group id of `nobody`, when this process can act as that user (it runs as
/// root); `None` otherwise, with the reason, which a test that cannot run prints when it skips.
pub fn other_user() -> Result<(u32, u32), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: cannot act as another user (nobody)".into());
    }
    let name: &CStr = c"nobody";
    // SAFETY: a NUL-terminated name; getpwnam returns NULL or a pointer to static storage,
    // read at once.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    // SAFETY: not NULL: a valid passwd record until the next getpw* call.
    match unsafe { entry.as_ref() } {
        Some(pw) => Ok((pw.pw_uid, pw.pw_gid)),
        None => Err("this machine has no user nobody".into()),
    }
}

/// [`other_user`], or `None` after printing why a test that needs it is skipped.
pub fn other_user_or_skip() -> Option<(u32, u32)> {
    other_user().map_err(|why| eprintln!("skipped: {why}")).ok()
}

/// Runs `program` with `args` as `nobody` (see [`other_user`]) and asserts that it succeeded.
pub fn run_as_other_user(program: &str, args: &[&std::ffi::OsStr]) {
    use std::os::unix::process::CommandExt;
    let (uid, gid) = other_user().expect("another user");
    let out = std::process::Command::new(program)
        .args(args)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The name of the file [`plant_store_files`] makes for `i`: a `prometheus_mp` store's name.
pub fn planted_store_name(i: usize) -> String {
    format!("nixl.{}.1.0.mmap", 100_000 + i)
}

/// Creates the files `range` of `nobody` (see [`other_user`]) in `dir` with store names
/// ([`planted_store_name`]), as another user of a shared directory could: in turn a copy of
/// `store`, 16 bytes of junk, and an empty file nobody may read (mode 000).
pub fn plant_store_files(dir: &std::path::Path, range: std::ops::Range<usize>, store: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let (uid, _) = other_user().expect("another user");
    for i in range {
        let path = dir.join(planted_store_name(i));
        match i % 3 {
            0 => std::fs::write(&path, store),
            1 => std::fs::write(&path, [7u8; 16]),
            _ => std::fs::write(&path, [])
                .and_then(|()| std::fs::set_permissions(&path, PermissionsExt::from_mode(0o000))),
        }
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        std::os::unix::fs::chown(&path, Some(uid), None).unwrap();
    }
}

/// Removes the files `range` that [`plant_store_files`] made in `dir`.
pub fn remove_store_files(dir: &std::path::Path, range: std::ops::Range<usize>) {
    for i in range {
        std::fs::remove_file(dir.join(planted_store_name(i))).unwrap();
    }
}
