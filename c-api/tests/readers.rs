//! The example ring readers run as processes on rings written by this library, of both layouts
//! (version 4, NIXL's, and version 5 of NIXL's open pull request #2018):
//!
//! * the C++ reader (`examples/cpp`, built here with CMake against the cargo-built
//!   `libnixl_telemetry.so`): exact output while events arrive in two bursts, Ctrl+C, `--help`,
//!   a missing file, a file of another version and a truncated file;
//! * the Python reader (`examples/python/telemetry_reader.py --once`): exact event blocks, and
//!   event-by-event agreement with [`RingReader`] on a wrapped ring of a few thousand
//!   pseudo-random events (unknown types and non-zero padding bytes included).
//!
//! Needs `cmake`, a C++17 compiler and `python3` on PATH. Cargo builds
//! `target/<profile>/libnixl_telemetry.so` (this package's library) before these tests run.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nixl_telemetry_core::ring::layout::{Layout, LAYOUTS};
use nixl_telemetry_core::{Event, RingReader, RingWriter};
use nixl_telemetry_test_support::workspace_root;

/// NIXL's event names by numeric type (with its open pull request #2047's stalled transfer),
/// written out here independently of the library.
const NAMES: [&str; 22] = [
    "agent_tx_bytes",
    "agent_rx_bytes",
    "agent_tx_requests_num",
    "agent_rx_requests_num",
    "agent_memory_registered",
    "agent_memory_deregistered",
    "agent_xfer_time",
    "agent_xfer_post_time",
    "agent_err_not_posted",
    "agent_err_invalid_param",
    "agent_err_backend",
    "agent_err_not_found",
    "agent_err_mismatch",
    "agent_err_not_allowed",
    "agent_err_repost_active",
    "agent_err_unknown",
    "agent_err_not_supported",
    "agent_err_remote_disconnect",
    "agent_err_canceled",
    "agent_err_no_telemetry",
    "agent_telemetry_events_dropped",
    "agent_err_xfer_stalled",
];

const RULE: &str = "===========================";

/// How long any reader process may take to print what is expected or to exit.
const TIMEOUT: Duration = Duration::from_secs(60);

const USAGE: &str = "Usage: telemetry_reader <telemetry_file_path>\nOptions:\n  \
                     <telemetry_file_path>    Path to the telemetry file\n";

fn expected_name(event_type: u32) -> String {
    match NAMES.get(event_type as usize) {
        Some(name) => (*name).to_owned(),
        None => format!("unknown_event_{event_type}"),
    }
}

/// One event as both readers print it.
fn block(event: &Event) -> String {
    format!(
        "\n=== NIXL Telemetry Event ===\nEvent: {}\nValue: {}\n{RULE}\n",
        expected_name(event.event_type),
        event.value
    )
}

fn blocks(events: &[Event]) -> String {
    events.iter().map(block).collect()
}

/// Parses a reader's event blocks strictly into (name, value) pairs.
fn parse_blocks(stdout: &str) -> Vec<(String, u64)> {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len() % 5,
        0,
        "not a sequence of event blocks:\n{stdout}"
    );
    lines
        .chunks(5)
        .map(|b| {
            assert_eq!(b[0], "", "{b:?}");
            assert_eq!(b[1], "=== NIXL Telemetry Event ===", "{b:?}");
            assert_eq!(b[4], RULE, "{b:?}");
            let name = b[2]
                .strip_prefix("Event: ")
                .unwrap_or_else(|| panic!("{b:?}"));
            let value = b[3]
                .strip_prefix("Value: ")
                .unwrap_or_else(|| panic!("{b:?}"));
            (
                name.to_owned(),
                value.parse().unwrap_or_else(|e| panic!("{b:?}: {e}")),
            )
        })
        .collect()
}

fn expected_pairs(events: &[Event]) -> Vec<(String, u64)> {
    events
        .iter()
        .map(|e| (expected_name(e.event_type), e.value))
        .collect()
}

/// Every event type once with its own value, edge values, and unknown types (77, u32::MAX).
fn known_sequence() -> Vec<Event> {
    let mut events: Vec<Event> = (0..22u32)
        .map(|t| Event {
            event_type: t,
            value: 1000 * (u64::from(t) + 1) + 7,
        })
        .collect();
    events.extend([
        Event {
            event_type: 77,
            value: 77,
        },
        Event {
            event_type: 0,
            value: 0,
        },
        Event {
            event_type: 1,
            value: u64::MAX,
        },
        Event {
            event_type: u32::MAX,
            value: 1 << 40,
        },
        Event {
            event_type: 20,
            value: 3,
        },
    ]);
    events
}

/// A deterministic pseudo-random generator (splitmix64).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Mostly known types, sometimes unknown ones; values of every magnitude.
    fn events(&mut self, n: usize) -> Vec<Event> {
        (0..n)
            .map(|_| {
                let r = self.next();
                let event_type = match r % 64 {
                    0 => 22 + (self.next() % 1000) as u32,
                    1 => u32::MAX,
                    _ => ((r >> 8) % 22) as u32,
                };
                let shift = self.next() % 64;
                Event {
                    event_type,
                    value: self.next() >> shift,
                }
            })
            .collect()
    }
}

fn have_tool(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a build step, panicking with its output when it fails.
fn build_step(what: &str, cmd: &mut Command) {
    eprintln!("readers: running {cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Holds an exclusive flock on `path` until dropped (closing the file releases it).
fn lock_file(path: &Path) -> File {
    use std::os::fd::AsRawFd;
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    // SAFETY: flock on a valid, open descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        rc,
        0,
        "cannot lock {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    file
}

/// Configures and builds `examples/cpp` into `target/<profile>/examples-cpp-build` (once per
/// test process; concurrent test processes sharing the target directory take turns).
fn build_cpp_reader() -> PathBuf {
    let profile = nixl_telemetry_test_support::profile_dir();
    let lib = profile.join("libnixl_telemetry.so");
    assert!(
        lib.is_file(),
        "{} is missing: run cargo build first (the C++ reader links the cargo-built library)",
        lib.display()
    );
    assert!(
        have_tool("cmake"),
        "cmake not found on PATH: install cmake and a C++ compiler, e.g. apt-get install cmake g++"
    );
    let build = profile.join("examples-cpp-build");
    let _lock = lock_file(&profile.join("examples-cpp-build.lock"));
    build_step(
        "cmake configure of examples/cpp",
        Command::new("cmake")
            .arg("-S")
            .arg(workspace_root().join("examples/cpp"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DNIXL_TELEMETRY_LIB_DIR={}", profile.display()))
            .arg(format!(
                "-DNIXL_TELEMETRY_INCLUDE_DIR={}",
                workspace_root().join("include").display()
            )),
    );
    build_step(
        "cmake --build of examples/cpp",
        Command::new("cmake").arg("--build").arg(&build).arg("-j2"),
    );
    let exe = build.join("telemetry_reader");
    assert!(exe.is_file(), "{} was not built", exe.display());
    exe
}

fn cpp_reader() -> &'static Path {
    static READER: OnceLock<PathBuf> = OnceLock::new();
    READER.get_or_init(build_cpp_reader)
}

fn cpp_command() -> Command {
    let mut cmd = Command::new(cpp_reader());
    cmd.env_remove("NIXL_LOG_LEVEL");
    cmd
}

fn python_command() -> Command {
    assert!(
        have_tool("python3"),
        "python3 not found on PATH: the Python reader tests need it"
    );
    let mut cmd = Command::new("python3");
    cmd.arg(workspace_root().join("examples/python/telemetry_reader.py"));
    cmd
}

/// A running reader whose stdout is collected as it arrives.
struct Live {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stdout_thread: Option<JoinHandle<()>>,
    stderr_thread: Option<JoinHandle<Vec<u8>>>,
}

impl Live {
    fn spawn(cmd: &mut Command) -> Live {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stdout);
        let stdout_thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match out.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().unwrap().extend_from_slice(&buf[..n]),
                }
            }
        });
        let stderr_thread = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = err.read_to_end(&mut v);
            v
        });
        Live {
            child,
            stdout,
            stdout_thread: Some(stdout_thread),
            stderr_thread: Some(stderr_thread),
        }
    }

    fn stdout_now(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Waits until stdout is at least as long as `expected`, then checks that it starts with it.
    fn wait_for_stdout(&mut self, expected: &str) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let now = self.stdout_now();
            if now.len() >= expected.len() {
                assert!(
                    now.starts_with(expected),
                    "unexpected output:\n--- got ---\n{now}\n--- expected (prefix) ---\n{expected}"
                );
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the stdout thread collect the last bytes before reporting.
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "the reader exited ({status}) before printing everything:\n--- got ---\n{}\n\
                     --- expected (prefix) ---\n{expected}",
                    self.stdout_now()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {TIMEOUT:?} waiting for output:\n--- got ---\n{now}\n\
                 --- expected (prefix) ---\n{expected}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn interrupt(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0, "kill(SIGINT)");
    }

    /// Waits (with a deadline) for the exit; returns the status, stdout and stderr.
    fn finish(&mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the reader did not exit within {TIMEOUT:?}; stdout so far:\n{}",
                    self.stdout_now()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.stdout_thread.take().unwrap().join().unwrap();
        let stderr = self.stderr_thread.take().unwrap().join().unwrap();
        (
            status,
            self.stdout_now(),
            String::from_utf8_lossy(&stderr).into_owned(),
        )
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a command to completion (with a deadline): status, stdout, stderr.
fn run(cmd: &mut Command) -> (ExitStatus, String, String) {
    Live::spawn(cmd).finish()
}

fn opening_lines(path: &Path) -> String {
    let p = path.display();
    format!(
        "Telemetry path: {p}\nOpening telemetry buffer: {p}\nPress Ctrl+C to stop reading \
         telemetry...\n"
    )
}

#[test]
fn cpp_reader_prints_every_event_live_and_stops_on_ctrl_c() {
    for layout in LAYOUTS {
        cpp_reader_prints_every_event_of(layout);
    }
}

fn cpp_reader_prints_every_event_of(layout: Layout) {
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create_with(dir.path(), "agent-cpp", 64, layout).unwrap();
    let events = known_sequence();
    let (first, second) = events.split_at(10);
    assert_eq!(ring.push_batch(first), first.len());
    let path = ring.path().to_owned();

    let mut live = Live::spawn(cpp_command().arg(&path));
    let header = format!(
        "{}Successfully opened telemetry buffer (version: {})\nBuffer capacity: 64 events\n",
        opening_lines(&path),
        layout.version
    );
    live.wait_for_stdout(&format!("{header}{}", blocks(first)));
    // The second burst arrives while the reader polls the empty ring.
    assert_eq!(ring.push_batch(second), second.len());
    live.wait_for_stdout(&format!("{header}{}", blocks(&events)));

    live.interrupt();
    let (status, stdout, stderr) = live.finish();
    assert_eq!(status.code(), Some(0), "{status}; stderr:\n{stderr}");
    let expected = format!(
        "{header}{}\nTotal events read: {}\nFinal buffer size: 0 events\n",
        blocks(&events),
        events.len()
    );
    assert_eq!(stdout, expected);
    assert_eq!(stderr, "");
    assert!(ring.is_empty(), "the reader consumed the events");
}

#[test]
fn python_reader_prints_the_same_event_blocks() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let ring = RingWriter::create_with(dir.path(), "agent-py", 64, layout).unwrap();
        let events = known_sequence();
        assert_eq!(ring.push_batch(&events), events.len());

        let (status, stdout, stderr) = run(python_command()
            .arg("--telemetry_path")
            .arg(ring.path())
            .arg("--once"));
        assert_eq!(status.code(), Some(0), "{status}; stderr:\n{stderr}");
        assert_eq!(stdout, blocks(&events));
        for line in [
            format!(
                "Successfully opened telemetry buffer (version: {})",
                layout.version
            ),
            format!("Total events read: {}", events.len()),
            "Final buffer size: 0 events".to_owned(),
        ] {
            assert!(stderr.contains(&line), "{line}: {stderr}");
        }
        assert!(ring.is_empty(), "the reader consumed the events");
    }
}

/// Fills the 4 padding bytes of every record of a ring of `layout` with 0xFF: readers must
/// ignore them.
fn dirty_padding(path: &Path, layout: Layout, capacity: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    for i in 0..capacity {
        let at = layout.header_size + 16 * i + 4;
        bytes[at..at + 4].fill(0xFF);
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn python_reader_and_ring_reader_agree_on_a_wrapped_random_ring() {
    for layout in LAYOUTS {
        readers_agree_on_a_wrapped_random_ring(layout);
    }
}

fn readers_agree_on_a_wrapped_random_ring(layout: Layout) {
    const CAPACITY: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let ring = RingWriter::create_with(dir.path(), "agent-random", CAPACITY, layout).unwrap();
    let mut rng = SplitMix(0x5EED_1234_ABCD_0042);

    // Advance the positions near the end of the ring, so that the next batch wraps around.
    let before = rng.events(3000);
    assert_eq!(ring.push_batch(&before), before.len());
    let drained: Vec<Event> = RingReader::open(ring.path()).unwrap().collect();
    assert_eq!(drained, before);

    let events = rng.events(CAPACITY - 1);
    assert_eq!(ring.push_batch(&events), events.len(), "the ring is full");
    let header = RingReader::open(ring.path()).unwrap().header();
    assert!(
        header.write_pos < header.read_pos,
        "the unread events wrap around the end: {header:?}"
    );
    assert!(events.iter().any(|e| e.event_type >= 22));

    let rust_copy = dir.path().join("copy-rust");
    let python_copy = dir.path().join("copy-python");
    for copy in [&rust_copy, &python_copy] {
        std::fs::copy(ring.path(), copy).unwrap();
        dirty_padding(copy, layout, CAPACITY);
    }

    let from_rust: Vec<Event> = RingReader::open(&rust_copy).unwrap().collect();
    assert_eq!(from_rust, events);

    let (status, stdout, stderr) = run(python_command()
        .arg("--telemetry_path")
        .arg(&python_copy)
        .arg("--once"));
    assert_eq!(status.code(), Some(0), "{status}; stderr:\n{stderr}");
    let from_python = parse_blocks(&stdout);
    let rust_pairs: Vec<(String, u64)> = from_rust.iter().map(|e| (e.name(), e.value)).collect();
    assert_eq!(from_python.len(), events.len());
    for (i, (py, rs)) in from_python.iter().zip(&rust_pairs).enumerate() {
        assert_eq!(
            py, rs,
            "event {i} differs between the Python reader and RingReader"
        );
    }
    assert_eq!(from_python, expected_pairs(&events));

    // Both readers consumed everything the same way and wrote nothing but read_pos.
    assert_eq!(
        std::fs::read(&rust_copy).unwrap(),
        std::fs::read(&python_copy).unwrap()
    );
    assert!(RingReader::open(&python_copy).unwrap().is_empty());
}

#[test]
fn cpp_reader_help_and_usage() {
    let cases: [&[&str]; 3] = [&[], &["-h"], &["--help"]];
    for args in cases {
        let (status, stdout, stderr) = run(cpp_command().args(args));
        assert_eq!(status.code(), Some(0), "{args:?}");
        assert_eq!(stdout, USAGE, "{args:?}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn cpp_reader_refuses_missing_wrong_version_and_truncated_files() {
    let dir = tempfile::tempdir().unwrap();

    let missing = dir.path().join("missing");
    let (status, stdout, stderr) = run(cpp_command().arg(&missing));
    assert_eq!(status.code(), Some(1));
    assert_eq!(stdout, format!("Telemetry path: {}\n", missing.display()));
    assert_eq!(
        stderr,
        format!("Telemetry file {} does not exist\n", missing.display())
    );

    // A version-3 header (NIXL's C++ reader would delete this file; ours leaves it).
    let mut v3 = vec![0u8; 40 + 16 * 8];
    v3[16..20].copy_from_slice(&3i32.to_ne_bytes());
    v3[20..24].copy_from_slice(&3i32.to_ne_bytes());
    v3[24..32].copy_from_slice(&8u64.to_ne_bytes());
    v3[32..40].copy_from_slice(&7u64.to_ne_bytes());
    let wrong_version = dir.path().join("v3");
    std::fs::write(&wrong_version, &v3).unwrap();

    // A valid version-4 header of capacity 16, but only 4 records of data.
    let mut short = vec![0u8; 40 + 16 * 4];
    short[16..20].copy_from_slice(&4i32.to_ne_bytes());
    short[20..24].copy_from_slice(&4i32.to_ne_bytes());
    short[24..32].copy_from_slice(&16u64.to_ne_bytes());
    short[32..40].copy_from_slice(&15u64.to_ne_bytes());
    let truncated = dir.path().join("truncated");
    std::fs::write(&truncated, &short).unwrap();

    for (path, contents, needle) in [
        (
            &wrong_version,
            &v3,
            "version mismatch: expected 4 or 5, got 3",
        ),
        (&truncated, &short, "truncated"),
    ] {
        let (status, stdout, stderr) = run(cpp_command().arg(path));
        assert_eq!(status.code(), Some(1), "{}: {stderr}", path.display());
        assert_eq!(stdout, opening_lines(path));
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("Error: "), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
        assert_eq!(
            &std::fs::read(path).unwrap(),
            contents,
            "{} left untouched",
            path.display()
        );
    }
}
