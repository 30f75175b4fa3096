//! What the push exporters push: snapshots with their labels ([`Source`]), the workload
//! label this process adds (`local_rank`), and the sender's identity ([`instance`]): the
//! remote-write `instance` label and OTLP's `service.instance.id`, so that two processes
//! describing themselves alike (same agent name, host and rank) still push two series, as two
//! scrape targets would, whatever PID namespace each runs in ([`default_instance`]); and what
//! a receiver says when two senders share one identity anyway ([`shared_identity`]).

use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::settings;
use nixl_telemetry_series::AgentSnapshot;

/// Label (or attribute) names and values of one set of series.
pub type Labels = Vec<(String, String)>;

/// What a push exporter pushes, taken on the push thread: snapshots with their labels (one per
/// agent in a plug-in; one per rank store for `nixl-telemetry serve`).
pub type Source = Box<dyn FnMut() -> Vec<(AgentSnapshot, Labels)> + Send>;

/// `NIXL_TELEMETRY_RANK_ENV`: the name of the variable whose value is the `local_rank` label
/// (default `LOCAL_RANK`), as for the multi-process Prometheus exporter. (Hook: when the
/// series crate gains shared workload labels, the push exporters take theirs from there.)
pub const ENV_RANK_ENV: &str = settings::RANK_ENV.name;

/// The `local_rank` label of this process, if its rank variable is set: `(name, value)`.
pub fn rank_label(settings: Lookup) -> Result<Option<(String, String)>, String> {
    let var = settings(ENV_RANK_ENV)
        .map_err(|e| e.message)?
        .unwrap_or_else(|| settings::RANK_ENV.default_str().to_owned());
    let value = nixl_telemetry_base::env::environment(&var).map_err(|e| e.message)?;
    Ok(value
        .filter(|v| !v.is_empty())
        .map(|v| ("local_rank".to_owned(), v)))
}

/// `NIXL_TELEMETRY_PUSH_INSTANCE`: the identity a pushing process gives itself.
pub const ENV_INSTANCE: &str = settings::PUSH_INSTANCE.name;

/// The name of the remote-write label that carries the sender's identity (Prometheus' own name
/// for a scrape target).
pub const INSTANCE_LABEL: &str = "instance";

/// The OTLP resource attribute that carries the sender's identity (Prometheus' OTLP receiver
/// turns it into `instance`).
pub const INSTANCE_ATTRIBUTE: &str = "service.instance.id";

/// The identity of this process as a sender: `NIXL_TELEMETRY_PUSH_INSTANCE` when set (and not
/// blank), else [`default_instance`]; OTLP's `service.instance.id` is this value too.
pub fn instance(settings: Lookup, host: &str) -> Result<String, String> {
    match settings(ENV_INSTANCE).map_err(|e| e.message)? {
        Some(v) if !v.trim().is_empty() => {
            let v = v.trim();
            if v.chars().any(char::is_control) {
                return Err(format!(
                    "{ENV_INSTANCE}='{}': control characters are not allowed",
                    v.escape_debug()
                ));
            }
            Ok(v.to_owned())
        }
        _ => Ok(default_instance(host)),
    }
}

/// The inode of the host's initial PID namespace (the kernel's `PROC_PID_INIT_INO`, fixed since
/// Linux 3.8): `/proc/self/ns/pid` reads `pid:[4026531836]` in it.
const INIT_PID_NAMESPACE: &str = "pid:[4026531836]";

/// The identity of this process when none is configured, unique among the processes of a host
/// whatever their PID namespaces, and the same for every call in one process (every agent,
/// every start of a push loop, every plug-in's copy of this crate), new in a forked child:
///
/// - `<host>:<pid>` in the host's initial PID namespace, where a pid is unique;
/// - `<host>:<pid>-<tag>` in any other one (a container, `unshare --pid`), where two processes
///   may have the same pid (each is pid 1 of its own namespace) and the same host name (the
///   containers of one pod share it). `<tag>` is 8 hex digits of a hash (64-bit FNV-1a) of the
///   PID namespace (`/proc/self/ns/pid`), the boot (`/proc/sys/kernel/random/boot_id`, which
///   tells hosts apart) and the process's start time (`/proc/self/stat`): two live processes
///   with one host name and pid differ in their namespace, so their tags differ unless the
///   hash collides (one chance in 2^32).
///
/// When the namespace cannot be read (no `/proc`), the tag is added too, made of what can be
/// read.
pub fn default_instance(host: &str) -> String {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let namespace = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stat = read("/proc/self/stat");
    // The start time is the 22nd field; the 2nd (the command's name, in parentheses) may hold
    // spaces, so count after its closing parenthesis (field 3 onwards).
    let started = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .unwrap_or_default();
    let boot = read("/proc/sys/kernel/random/boot_id");
    identity(host, std::process::id(), &namespace, boot.trim(), started)
}

/// [`default_instance`] of the process `pid` on `host`, in PID namespace `namespace` (as
/// `/proc/self/ns/pid` reads), on boot `boot`, started at `started` (clock ticks since boot).
fn identity(host: &str, pid: u32, namespace: &str, boot: &str, started: &str) -> String {
    if namespace == INIT_PID_NAMESPACE {
        return format!("{host}:{pid}");
    }
    let h = fnv1a([namespace, boot, started, &pid.to_string()]);
    format!("{host}:{pid}-{:08x}", (h ^ (h >> 32)) as u32)
}

/// 64-bit FNV-1a of `parts`, each followed by a 0 byte: a hash that is the same in every build
/// (unlike the standard library's), so every copy of this crate in a process agrees.
fn fnv1a<'a>(parts: impl IntoIterator<Item = &'a str>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Whether a receiver's refusal `message` says that samples of one series came twice for one
/// time or went back in time (Prometheus' and Mimir's `duplicate sample for timestamp`, `out of
/// order sample`, `err-mimir-sample-out-of-order`, ...): what a receiver answers when two
/// senders push the same series, which one identity shared by two processes makes.
pub fn shared_identity(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "duplicate sample",
        "out of order",
        "out-of-order",
        "duplicate-timestamp",
    ]
    .iter()
    .any(|sign| m.contains(sign))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nixl_telemetry_base::env::fixed_env;

    #[test]
    fn the_instance_is_the_default_unless_set() {
        let none = fixed_env(&[]);
        let pid = std::process::id();
        let id = instance(&none, "node-1").unwrap();
        assert_eq!(id, default_instance("node-1"));
        assert!(id.starts_with(&format!("node-1:{pid}")), "{id}");
        let blank = fixed_env(&[(ENV_INSTANCE, "  ")]);
        assert_eq!(instance(&blank, "n").unwrap(), default_instance("n"));
        let set = fixed_env(&[(ENV_INSTANCE, " job-7/rank-0 ")]);
        assert_eq!(instance(&set, "n").unwrap(), "job-7/rank-0");
        let bad = fixed_env(&[(ENV_INSTANCE, "a\nb")]);
        let e = instance(&bad, "n").unwrap_err();
        assert!(e.starts_with(ENV_INSTANCE), "{e}");
    }

    #[test]
    fn the_default_tells_apart_processes_of_one_pid_in_two_pid_namespaces() {
        let boot = "6d62b451-75df-4bcd-bc9f-d8ddc4c7cae1";
        // The host's namespace: a pid is unique there, the identity is as it always was.
        assert_eq!(identity("n", 7, INIT_PID_NAMESPACE, boot, "100"), "n:7");
        // Two containers of one pod: one host name, each process pid 1 of its namespace,
        // started in the same clock tick.
        let a = identity("pod", 1, "pid:[4026532174]", boot, "100");
        let b = identity("pod", 1, "pid:[4026532175]", boot, "100");
        assert_ne!(a, b);
        for id in [&a, &b] {
            let tag = id.strip_prefix("pod:1-").unwrap_or_else(|| panic!("{id}"));
            assert!(
                tag.len() == 8 && tag.chars().all(|c| c.is_ascii_hexdigit()),
                "{id}"
            );
        }
        // The same namespace on another host (another boot), or a pid reused later.
        assert_ne!(
            a,
            identity("pod", 1, "pid:[4026532174]", "other-boot", "100")
        );
        assert_ne!(a, identity("pod", 1, "pid:[4026532174]", boot, "101"));
        // No /proc: a tag all the same.
        assert!(identity("n", 7, "", "", "").starts_with("n:7-"));
        // The same process asks twice (every agent, every plug-in's copy): the same value.
        assert_eq!(default_instance("h"), default_instance("h"));
    }

    #[test]
    fn a_forked_child_has_an_identity_of_its_own() {
        use std::io::Read;
        use std::os::fd::FromRawFd;
        let parent = default_instance("h");
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only works out its identity, writes it and exits without unwinding.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let id = default_instance("h");
            // SAFETY: writes the bytes of `id` to the pipe's write end, then ends the child at
            // once (no destructor or atexit handler of the parent's runs in it).
            unsafe {
                libc::write(fds[1], id.as_ptr().cast(), id.len());
                libc::_exit(0);
            }
        }
        // SAFETY: the write end is this process's descriptor, closed once here; the read end is
        // owned by the `File` from here on.
        let mut read = unsafe {
            libc::close(fds[1]);
            std::fs::File::from_raw_fd(fds[0])
        };
        let mut child = String::new();
        read.read_to_string(&mut child).unwrap();
        let mut status = 0;
        // SAFETY: waits for the child forked above, writing its status into `status`.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(child.starts_with(&format!("h:{pid}")), "{child}");
        assert_ne!(child, parent);
        assert_eq!(default_instance("h"), parent, "the parent's is unchanged");
    }

    #[test]
    fn duplicate_and_out_of_order_refusals_say_the_identity_may_be_shared() {
        for m in [
            "out of order sample",
            "duplicate sample for timestamp; overwrite not allowed",
            "err-mimir-sample-out-of-order: the sample has been rejected",
            "err-mimir-sample-duplicate-timestamp",
            "Out-Of-Order sample",
        ] {
            assert!(shared_identity(m), "{m}");
        }
        for m in ["", "label name invalid", "too old sample", "HTTP 400"] {
            assert!(!shared_identity(m), "{m}");
        }
    }
}
