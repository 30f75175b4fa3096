//! NIXL's configuration file: which file is read (`$NIXL_CONFIG_FILE`, else `$HOME/.nixl.cfg`,
//! else `/etc/nixl.cfg`, the first that exists and no other), parsed once per process, and a
//! setting's value in it converted to the text the environment would hold, so the parsers of
//! [`crate::env`] take it unchanged. TOML types are strict: a value of the wrong type is an
//! error naming the file, the key and the value, never a fallback.
//!
//! The file is trusted as OpenSSH trusts its own ([`crate::trusted_file`]): a regular file of
//! this process's user or root, writable by nobody else, in a directory likewise, not a link,
//! at most [`MAX_CONFIG_FILE_BYTES`]; anything else fails the creation with a message naming the
//! file and the fix.
//!
//! Reading it once per process, and `fork`: the read itself holds no lock, so a `fork` never
//! waits for it (a slow file system, a file being written). One short lock
//! ([`crate::fork::LockOrder::ConfigFile`], which the fork handlers take) guards who reads: the
//! first thread claims the read for its process's fork generation, later ones wait for its
//! result (one read per process), and the reader publishes it. A child forked while a thread
//! of its parent reads finds a read claimed by another generation, whose thread does not exist
//! in the child: it reads the file itself when it first needs a setting, and never waits on a
//! read nobody in it will finish.
//!
//! Keys that look like this library's settings but are none of them (a `NIXL_TELEMETRY_*` typo,
//! or a `DYN_FPM_*` key: Dynamo's variables come from the environment only) would be silently
//! ignored; they are warned about once per process, with the closest known name
//! ([`ConfigFile::unknown_keys`]), after the file is read and remembered: the logger's own
//! threshold (`NIXL_LOG_LEVEL`) is read through this module, so nothing logs while it reads.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex};

use toml::value::Datetime;
use toml::Value;

use super::{Kind, Setting, DYN_FPM_VARIABLES, SETTINGS};
use crate::env::unset_if_empty;
use crate::error::{Error, Result};
use crate::fork::{hold_across_fork, LockOrder};
use crate::sync::LockUnpoisoned;
pub use crate::trusted_file::MAX_CONFIG_FILE_BYTES;

/// `NIXL_CONFIG_FILE`: the configuration file to read instead of searching.
pub const CONFIG_FILE_VAR: &str = "NIXL_CONFIG_FILE";
/// The file searched in `$HOME` when `NIXL_CONFIG_FILE` is unset.
pub const HOME_FILE_NAME: &str = ".nixl.cfg";
/// The system-wide file searched last.
pub const SYSTEM_PATH: &str = "/etc/nixl.cfg";

/// The inputs of the search for the configuration file: the process's (`Search::of_process`),
/// or chosen ones in tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Search {
    /// The value of `NIXL_CONFIG_FILE`, if set.
    pub config_file: Option<OsString>,
    /// The home directory (`$HOME`), if set and not empty.
    pub home: Option<PathBuf>,
    /// The system-wide file ([`SYSTEM_PATH`]).
    pub system: PathBuf,
}

impl Search {
    /// The search this process makes: its `NIXL_CONFIG_FILE` and `HOME`, and [`SYSTEM_PATH`].
    pub fn of_process() -> Search {
        Search {
            config_file: std::env::var_os(CONFIG_FILE_VAR),
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            system: PathBuf::from(SYSTEM_PATH),
        }
    }

    /// The file to read: `NIXL_CONFIG_FILE` when set (an error when it is empty or names
    /// nothing), else `$HOME/.nixl.cfg` if it exists, else the system file if it exists, else
    /// none.
    pub fn locate(&self) -> Result<Option<PathBuf>> {
        if let Some(named) = &self.config_file {
            if named.is_empty() {
                return Err(Error::invalid(format!(
                    "{CONFIG_FILE_VAR} is set but empty: set it to a configuration file, or \
                     unset it to search ~/{HOME_FILE_NAME} and {SYSTEM_PATH}"
                )));
            }
            let path = PathBuf::from(named);
            if !path.exists() {
                return Err(Error::invalid(format!(
                    "{CONFIG_FILE_VAR}={}: no such configuration file",
                    path.display()
                )));
            }
            return Ok(Some(path));
        }
        let home = self.home.as_ref().map(|h| h.join(HOME_FILE_NAME));
        Ok(home
            .into_iter()
            .chain([self.system.clone()])
            .find(|p| p.exists()))
    }

    /// Locates and reads the file (none found: `Ok(None)`).
    pub fn load(&self) -> Result<Option<ConfigFile>> {
        self.locate()?.map(|p| ConfigFile::read(&p)).transpose()
    }
}

/// This process's configuration file, located and parsed on first use and remembered, error
/// included, for the life of the process (as NIXL reads it once). The read holds no lock a fork
/// waits for (see the module documentation).
pub fn process_file() -> &'static Result<Option<ConfigFile>> {
    /// The file once read (a leaked box: it lives as long as the process).
    static LOADED: AtomicPtr<Result<Option<ConfigFile>>> = AtomicPtr::new(std::ptr::null_mut());
    /// The fork generation whose thread is reading the file, while one is; held only to claim
    /// the read or to publish it (the fork handlers take it too).
    static READER: Mutex<Option<u64>> = Mutex::new(None);
    /// Signalled when the read is published (or given up).
    static PUBLISHED: Condvar = Condvar::new();
    let loaded = || {
        // SAFETY: only ever set to a leaked, never freed box (below).
        unsafe { LOADED.load(Ordering::Acquire).as_ref() }
    };
    if let Some(loaded) = loaded() {
        return loaded;
    }
    hold_across_fork(LockOrder::ConfigFile, &READER);
    {
        let mut reader = READER.lock_unpoisoned();
        loop {
            if let Some(loaded) = loaded() {
                return loaded;
            }
            let generation = crate::fork::generation();
            match *reader {
                // Another thread of this process reads: its result is this one's.
                Some(theirs) if theirs == generation => {
                    #[cfg(any(test, feature = "test-util"))]
                    test_hooks::waiting_for_the_reader();
                    reader = PUBLISHED.wait(reader).unwrap_or_else(|e| e.into_inner());
                }
                // Nobody reads, or a thread of the parent this process was forked from, which
                // does not exist here: this thread reads.
                _ => {
                    *reader = Some(generation);
                    break;
                }
            }
        }
    }
    /// Gives the read up if it unwinds, so the threads waiting for it read instead of hanging.
    struct Claim;
    impl Drop for Claim {
        fn drop(&mut self) {
            *READER.lock_unpoisoned() = None;
            PUBLISHED.notify_all();
        }
    }
    let claim = Claim;
    #[cfg(any(test, feature = "test-util"))]
    test_hooks::pause_while_reading();
    let loaded: &'static Result<Option<ConfigFile>> =
        Box::leak(Box::new(Search::of_process().load()));
    {
        let _reader = READER.lock_unpoisoned();
        LOADED.store(std::ptr::from_ref(loaded).cast_mut(), Ordering::Release);
    }
    drop(claim);
    // Once per process: only the thread that read the file gets here, and the logger (which
    // reads NIXL_LOG_LEVEL through this function) now finds the file read.
    if let Ok(Some(file)) = loaded {
        for message in file.unknown_keys() {
            log::warn!("{message}");
        }
    }
    loaded
}

/// Test hooks (feature `test-util`): hold the first read of the process's file until the test
/// lets it go, as a slow file system would, so a test can fork while it runs; count the threads
/// that waited for another's read.
#[cfg(any(test, feature = "test-util"))]
pub mod test_hooks {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};

    use crate::sync::LockUnpoisoned;

    /// The fork generation whose reads are held (`u64::MAX`: none): a child forked meanwhile
    /// reads without waiting for a release that would never come in it.
    static HELD_IN: AtomicU64 = AtomicU64::new(u64::MAX);
    /// (reads waiting at the gate, released).
    static GATE: Mutex<(usize, bool)> = Mutex::new((0, false));
    static CHANGED: Condvar = Condvar::new();
    static WAITERS: AtomicUsize = AtomicUsize::new(0);

    /// From now on, a read of the configuration file in this process waits, once begun, until
    /// [`release_reads`].
    pub fn hold_reads() {
        *GATE.lock_unpoisoned() = (0, false);
        HELD_IN.store(crate::fork::generation(), Ordering::SeqCst);
    }

    /// Waits until a read waits at the gate of [`hold_reads`].
    pub fn wait_for_a_held_read() {
        let mut gate = GATE.lock_unpoisoned();
        while gate.0 == 0 {
            gate = CHANGED.wait(gate).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Lets every held read go on (and later ones not wait).
    pub fn release_reads() {
        GATE.lock_unpoisoned().1 = true;
        HELD_IN.store(u64::MAX, Ordering::SeqCst);
        CHANGED.notify_all();
    }

    /// Whether [`release_reads`] was called since [`hold_reads`].
    pub fn reads_released() -> bool {
        GATE.lock_unpoisoned().1
    }

    /// How many reads reached the gate since [`hold_reads`].
    pub fn reads_held() -> usize {
        GATE.lock_unpoisoned().0
    }

    /// How many times a thread waited for another thread's read of the file.
    pub fn waits_for_the_reader() -> usize {
        WAITERS.load(Ordering::SeqCst)
    }

    pub(super) fn waiting_for_the_reader() {
        WAITERS.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn pause_while_reading() {
        if HELD_IN.load(Ordering::SeqCst) != crate::fork::generation() {
            return;
        }
        let mut gate = GATE.lock_unpoisoned();
        gate.0 += 1;
        CHANGED.notify_all();
        while !gate.1 {
            gate = CHANGED.wait(gate).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A parsed configuration file: top-level keys named like the variables they stand for.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigFile {
    path: PathBuf,
    table: toml::Table,
}

impl ConfigFile {
    /// Reads and parses the file at `path`. Errors name the file.
    pub fn read(path: &Path) -> Result<ConfigFile> {
        let bytes =
            crate::trusted_file::read_trusted(path, MAX_CONFIG_FILE_BYTES).map_err(|why| {
                Error::invalid(format!("the configuration file {} {why}", path.display()))
            })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            Error::invalid(format!(
                "the configuration file {} is not UTF-8 (at byte {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ))
        })?;
        ConfigFile::parse(path, &text)
    }

    /// Parses `text` as the content of the file at `path` (which names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<ConfigFile> {
        let table = text.parse::<toml::Table>().map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| line_and_column(text, s.start))
                .unwrap_or((1, 1));
            Error::invalid(format!(
                "{}:{line}:{column}: the configuration file is not valid TOML: {}",
                path.display(),
                e.message().trim_end()
            ))
        })?;
        Ok(ConfigFile {
            path: path.to_owned(),
            table,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One message for each top-level key of the file that looks like a setting of this
    /// library but is none (a `NIXL_TELEMETRY_*` key that is not declared in [`SETTINGS`]) or
    /// that the file cannot set (a `DYN_FPM_*` key: Dynamo's variables come from the
    /// environment only), sorted by key. Each names the file and the key, says that it
    /// is ignored, and names the closest known name when there is one near enough. Other keys
    /// (other NIXL subsystems' settings) are not this library's to judge.
    pub fn unknown_keys(&self) -> Vec<String> {
        let path = self.path.display();
        let mut out = Vec::new();
        for key in self.table.keys() {
            if key.starts_with(TELEMETRY_PREFIX) && !SETTINGS.iter().any(|s| s.name == key) {
                let names = SETTINGS.iter().map(|s| s.name);
                let advice = match closest(key, names, TELEMETRY_PREFIX.len()) {
                    Some(name) => format!("did you mean {name}?"),
                    None => "nixl-telemetry config --doc lists the settings".to_owned(),
                };
                out.push(format!(
                    "{path}: {key} is not a setting of NIXL telemetry and is ignored: {advice}"
                ));
            } else if DYN_FPM_VARIABLES.contains(&key.as_str()) {
                out.push(format!(
                    "{path}: {key} is ignored: Dynamo's DYN_FPM_* variables are read from the \
                     environment only; set it there"
                ));
            } else if key.starts_with(DYN_FPM_PREFIX) {
                let advice =
                    match closest(key, DYN_FPM_VARIABLES.iter().copied(), DYN_FPM_PREFIX.len()) {
                        Some(name) => format!("did you mean {name}? (from the environment only)"),
                        None => "they are read from the environment only".to_owned(),
                    };
                out.push(format!(
                    "{path}: {key} is not a DYN_FPM_* variable of the FPM trace and is \
                     ignored: {advice}"
                ));
            }
        }
        out
    }

    /// How the file writes `name`'s value (strings quoted), if it has the key: for showing a
    /// value that [`ConfigFile::value`] refuses.
    pub fn written(&self, name: &str) -> Option<String> {
        self.table.get(name).map(shown)
    }

    /// The value the file gives `setting`, as the environment would hold it: `None` when the
    /// key is absent (or, for a `NIXL_TELEMETRY_*` setting, an empty string, as in the
    /// environment). A value whose TOML type does not fit the setting's kind is an error
    /// naming the file, the key and the value.
    pub fn value(&self, setting: &Setting) -> Result<Option<String>> {
        let Some(value) = self.table.get(setting.name) else {
            return Ok(None);
        };
        let wrong = |what: &str| {
            Error::invalid(format!(
                "{}: {} = {} {what}",
                self.path.display(),
                setting.name,
                shown(value)
            ))
        };
        let text = match (setting.kind, value) {
            (Kind::Bool, Value::Boolean(b)) => b.to_string(),
            (Kind::Bool, _) => {
                return Err(wrong(
                    "is not a boolean: write true or false (a TOML boolean, without quotes)",
                ))
            }
            (Kind::Unsigned | Kind::Millis, Value::Integer(n)) if *n < 0 => {
                return Err(wrong("is negative: write an unsigned integer"))
            }
            (Kind::Unsigned | Kind::Millis, Value::Integer(n)) => n.to_string(),
            (Kind::Unsigned, _) => {
                return Err(wrong(
                    "is not an unsigned integer: write a TOML integer such as 4096, without \
                     quotes",
                ))
            }
            (Kind::Millis, _) => match value.as_datetime().and_then(local_time_ms) {
                Some(ms) => ms.to_string(),
                None => {
                    return Err(wrong(
                        "is not a duration in milliseconds: write a TOML integer (100) or a \
                         local time (00:00:00.100)",
                    ))
                }
            },
            (Kind::Text, Value::String(s)) => s.clone(),
            (Kind::Text, _) => return Err(wrong("is not a string: write it in double quotes")),
        };
        Ok(unset_if_empty(setting.name, Some(text)))
    }
}

/// The prefix of this library's own settings (all but `NIXL_LOG_LEVEL`, `NIXL_PLUGIN_DIR` and
/// the OpenTelemetry ones); other `NIXL_*` keys may be other NIXL subsystems'.
const TELEMETRY_PREFIX: &str = "NIXL_TELEMETRY_";
/// The prefix of Dynamo's FPM variables.
const DYN_FPM_PREFIX: &str = "DYN_FPM_";

/// The name among `names` closest to `key` by edit distance, if near enough: at most half the
/// length of what follows the common prefix of `prefix_len` bytes (and at least 2 edits are
/// allowed), so that a typo is named and an unrelated key is not.
fn closest<'n>(
    key: &str,
    names: impl Iterator<Item = &'n str>,
    prefix_len: usize,
) -> Option<&'n str> {
    let allowed = (key.len().saturating_sub(prefix_len) / 2).max(2);
    names
        .map(|name| (levenshtein(key, name), name))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// The Levenshtein distance of `a` and `b` (insertions, deletions, substitutions of chars).
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// A TOML local time (no date, no offset) as milliseconds: h·3600000 + m·60000 + s·1000 +
/// ns/10⁶ (truncated). `None` for any other date-time.
fn local_time_ms(t: &Datetime) -> Option<u64> {
    match (t.date, t.time, t.offset) {
        (None, Some(time), None) => Some(
            u64::from(time.hour) * 3_600_000
                + u64::from(time.minute) * 60_000
                + u64::from(time.second) * 1_000
                + u64::from(time.nanosecond) / 1_000_000,
        ),
        _ => None,
    }
}

/// How an error shows a file value: strings quoted, arrays and tables by what they are.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Integer(n) => n.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(t) => t.to_string(),
        Value::Array(_) => "(an array)".to_owned(),
        Value::Table(_) => "(a table)".to_owned(),
    }
}

/// The 1-based line and column of byte `offset` of `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::find;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::parse(Path::new("/cfg/nixl.cfg"), text).unwrap()
    }

    fn value(text: &str, name: &str) -> Result<Option<String>> {
        file(text).value(find(name).unwrap())
    }

    #[test]
    fn values_of_the_right_type_become_environment_text() {
        let f = "NIXL_TELEMETRY_ENABLE = true\nNIXL_TELEMETRY_BUFFER_SIZE = 0x100\n\
                 NIXL_TELEMETRY_RUN_INTERVAL = 250\nNIXL_TELEMETRY_DIR = '/tmp/rings'\n\
                 NIXL_TELEMETRY_PROMETHEUS_LOCAL = false\nNIXL_TELEMETRY_EXPORTER = ''\n\
                 NIXL_LOG_LEVEL = ''\nOTHER_SUBSYSTEM = [1, 2]\n";
        let some = |v: &str| Ok(Some(v.to_owned()));
        assert_eq!(value(f, "NIXL_TELEMETRY_ENABLE"), some("true"));
        assert_eq!(value(f, "NIXL_TELEMETRY_BUFFER_SIZE"), some("256"));
        assert_eq!(value(f, "NIXL_TELEMETRY_RUN_INTERVAL"), some("250"));
        assert_eq!(value(f, "NIXL_TELEMETRY_DIR"), some("/tmp/rings"));
        assert_eq!(value(f, "NIXL_TELEMETRY_PROMETHEUS_LOCAL"), some("false"));
        assert_eq!(value(f, "NIXL_TELEMETRY_ENABLED_METRICS"), Ok(None));
        // An empty string is unset for NIXL_TELEMETRY_* settings, as in the environment.
        assert_eq!(value(f, "NIXL_TELEMETRY_EXPORTER"), Ok(None));
        assert_eq!(value(f, "NIXL_LOG_LEVEL"), some(""));
    }

    #[test]
    fn unknown_keys_are_named_with_the_closest_known_name() {
        let f = file(
            "NIXL_TELEMETRY_LABEL_FROM = 'slurm'\nNIXL_TELEMETRY_REMOTE_WRITE_INTERVAL = 5\n\
             NIXL_TELEMETRY_PROMETHEUS_PROT = 1\nNIXL_TELEMETRY_XYZZY = 1\n\
             DYN_FPM_OUTPUTPATH = '/x'\nDYN_FPM_MODE = 'full'\nDYN_FPM_SOMETHING_ELSE = 1\n\
             NIXL_TELEMETRY_DIR = '/d'\nOTEL_SERVICE_NAME = 's'\nNIXL_LOG_LEVEL = 'INFO'\n\
             NIXL_OTHER_SUBSYSTEM = 1\nOTHER = 2\n",
        );
        let ignored = "is not a setting of NIXL telemetry and is ignored";
        assert_eq!(
            f.unknown_keys(),
            [
                "/cfg/nixl.cfg: DYN_FPM_MODE is ignored: Dynamo's DYN_FPM_* variables are read \
                 from the environment only; set it there"
                    .to_owned(),
                "/cfg/nixl.cfg: DYN_FPM_OUTPUTPATH is not a DYN_FPM_* variable of the FPM trace \
                 and is ignored: did you mean DYN_FPM_OUTPUT_PATH? (from the environment only)"
                    .to_owned(),
                "/cfg/nixl.cfg: DYN_FPM_SOMETHING_ELSE is not a DYN_FPM_* variable of the FPM \
                 trace and is ignored: they are read from the environment only"
                    .to_owned(),
                format!(
                    "/cfg/nixl.cfg: NIXL_TELEMETRY_LABEL_FROM {ignored}: did you mean \
                     NIXL_TELEMETRY_LABELS_FROM?"
                ),
                format!(
                    "/cfg/nixl.cfg: NIXL_TELEMETRY_PROMETHEUS_PROT {ignored}: did you mean \
                     NIXL_TELEMETRY_PROMETHEUS_PORT?"
                ),
                format!(
                    "/cfg/nixl.cfg: NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL {ignored}: did you mean \
                     NIXL_TELEMETRY_REMOTE_WRITE_INTERVAL_MS?"
                ),
                format!(
                    "/cfg/nixl.cfg: NIXL_TELEMETRY_XYZZY {ignored}: nixl-telemetry config --doc \
                     lists the settings"
                ),
            ]
        );
        assert!(file("NIXL_TELEMETRY_DIR = '/d'\n")
            .unknown_keys()
            .is_empty());
    }

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("", ""), 0);
        assert_eq!(levenshtein("abc", ""), 3);
        assert_eq!(levenshtein("", "ab"), 2);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("LABEL_FROM", "LABELS_FROM"), 1);
        assert_eq!(levenshtein("PROT", "PORT"), 2);
        let names = ["NIXL_TELEMETRY_DIR", "NIXL_TELEMETRY_LABELS"];
        assert_eq!(
            closest("NIXL_TELEMETRY_LABEL", names.into_iter(), 15),
            Some("NIXL_TELEMETRY_LABELS")
        );
        assert_eq!(closest("NIXL_TELEMETRY_XYZZY", names.into_iter(), 15), None);
    }

    #[test]
    fn milliseconds_as_a_local_time() {
        let ms = |t: &str| {
            value(
                &format!("NIXL_TELEMETRY_RUN_INTERVAL = {t}"),
                "NIXL_TELEMETRY_RUN_INTERVAL",
            )
        };
        assert_eq!(ms("00:00:00.250"), Ok(Some("250".into())));
        assert_eq!(ms("01:02:03.0045"), Ok(Some("3723004".into())));
        assert_eq!(ms("00:00:02"), Ok(Some("2000".into())));
        for bad in [
            "1979-05-27T00:00:01",
            "1979-05-27T00:00:01Z",
            "1979-05-27",
            "1.5",
            "'100'",
            "-1",
        ] {
            let e = ms(bad).unwrap_err();
            assert!(
                e.message
                    .starts_with("/cfg/nixl.cfg: NIXL_TELEMETRY_RUN_INTERVAL = "),
                "{bad}: {}",
                e.message
            );
        }
    }

    #[test]
    fn a_wrong_type_names_the_file_the_key_and_the_value() {
        let cases = [
            (
                "NIXL_TELEMETRY_ENABLE = \"yes\"",
                "NIXL_TELEMETRY_ENABLE",
                "= \"yes\" is not a boolean",
            ),
            (
                "NIXL_TELEMETRY_ENABLE = 1",
                "NIXL_TELEMETRY_ENABLE",
                "= 1 is not a boolean",
            ),
            (
                "NIXL_TELEMETRY_DIR = true",
                "NIXL_TELEMETRY_DIR",
                "= true is not a string",
            ),
            (
                "NIXL_TELEMETRY_BUFFER_SIZE = -1",
                "NIXL_TELEMETRY_BUFFER_SIZE",
                "= -1 is negative",
            ),
            (
                "NIXL_TELEMETRY_BUFFER_SIZE = '64'",
                "NIXL_TELEMETRY_BUFFER_SIZE",
                "= \"64\" is not an unsigned integer",
            ),
            (
                "NIXL_TELEMETRY_MP_STALE_TTL = 1.5",
                "NIXL_TELEMETRY_MP_STALE_TTL",
                "= 1.5 is not an unsigned integer",
            ),
            (
                "NIXL_PLUGIN_DIR = ['/a']",
                "NIXL_PLUGIN_DIR",
                "= (an array) is not a string",
            ),
            (
                "[NIXL_LOG_LEVEL]\nx = 1",
                "NIXL_LOG_LEVEL",
                "= (a table) is not a string",
            ),
        ];
        for (text, name, what) in cases {
            let e = value(text, name).unwrap_err();
            assert_eq!(e.status, crate::Status::InvalidParam);
            assert!(
                e.message
                    .starts_with(&format!("/cfg/nixl.cfg: {name} {what}")),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn a_file_that_does_not_parse_names_the_file_and_the_place() {
        let e = ConfigFile::parse(
            Path::new("/cfg/x.cfg"),
            "A = 1\nNIXL_TELEMETRY_DIR = /tmp\n",
        )
        .unwrap_err();
        assert!(
            e.message
                .starts_with("/cfg/x.cfg:2:22: the configuration file is not valid TOML"),
            "{}",
            e.message
        );
        let e = ConfigFile::parse(Path::new("/cfg/x.cfg"), "A = 1\nA = 2\n").unwrap_err();
        assert!(e.message.starts_with("/cfg/x.cfg:2:"), "{}", e.message);
    }

    /// A search in a temporary directory: `home/` as `$HOME`, `etc/nixl.cfg` as the system
    /// file, `named.cfg` for `NIXL_CONFIG_FILE`.
    struct Place {
        root: tempfile::TempDir,
    }

    impl Place {
        fn new() -> Place {
            let root = tempfile::tempdir().unwrap();
            std::fs::create_dir(root.path().join("home")).unwrap();
            std::fs::create_dir(root.path().join("etc")).unwrap();
            Place { root }
        }
        fn path(&self, rel: &str) -> PathBuf {
            self.root.path().join(rel)
        }
        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let p = self.path(rel);
            std::fs::write(&p, text).unwrap();
            p
        }
        fn search(&self, named: Option<&str>) -> Search {
            Search {
                config_file: named.map(|n| self.path(n).into_os_string()),
                home: Some(self.path("home")),
                system: self.path("etc/nixl.cfg"),
            }
        }
    }

    #[test]
    fn the_first_file_found_is_the_only_one_read() {
        let place = Place::new();
        let dir = find("NIXL_TELEMETRY_DIR").unwrap();
        let dir_in = |s: &Search| s.load().unwrap().unwrap().value(dir).unwrap().unwrap();
        assert_eq!(place.search(None).load(), Ok(None));
        place.write(
            "etc/nixl.cfg",
            "NIXL_TELEMETRY_DIR = '/etc-dir'\nNIXL_TELEMETRY_ENABLE = true",
        );
        assert_eq!(dir_in(&place.search(None)), "/etc-dir");
        place.write("home/.nixl.cfg", "NIXL_TELEMETRY_DIR = '/home-dir'");
        assert_eq!(dir_in(&place.search(None)), "/home-dir");
        // Only the first file is read: the system file's other keys do not apply.
        let home = place.search(None).load().unwrap().unwrap();
        assert_eq!(home.path(), place.path("home/.nixl.cfg"));
        assert_eq!(home.value(find("NIXL_TELEMETRY_ENABLE").unwrap()), Ok(None));
        place.write("named.cfg", "NIXL_TELEMETRY_DIR = '/named-dir'");
        assert_eq!(dir_in(&place.search(Some("named.cfg"))), "/named-dir");
        // No HOME: the system file.
        let no_home = Search {
            home: None,
            ..place.search(None)
        };
        assert_eq!(dir_in(&no_home), "/etc-dir");
    }

    #[test]
    fn a_broken_file_is_an_error_and_the_next_is_not_tried() {
        let place = Place::new();
        place.write("etc/nixl.cfg", "NIXL_TELEMETRY_DIR = '/etc-dir'");
        let home = place.write("home/.nixl.cfg", "NIXL_TELEMETRY_DIR = ");
        let e = place.search(None).load().unwrap_err();
        assert!(
            e.message.starts_with(&format!("{}:1:", home.display())),
            "{}",
            e.message
        );
        let named = place.write("named.cfg", "[[");
        let e = place.search(Some("named.cfg")).load().unwrap_err();
        assert!(
            e.message.starts_with(&format!("{}:1:", named.display())),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_missing_or_empty_named_file_is_an_error() {
        let place = Place::new();
        place.write("home/.nixl.cfg", "NIXL_TELEMETRY_DIR = '/home-dir'");
        let e = place.search(Some("absent.cfg")).load().unwrap_err();
        assert_eq!(
            e.message,
            format!(
                "NIXL_CONFIG_FILE={}: no such configuration file",
                place.path("absent.cfg").display()
            )
        );
        let empty = Search {
            config_file: Some(OsString::new()),
            ..place.search(None)
        };
        assert!(empty
            .load()
            .unwrap_err()
            .message
            .contains("NIXL_CONFIG_FILE is set but empty"));
        // A directory is not readable as a file.
        let e = place.search(Some("home")).load().unwrap_err();
        assert!(
            e.message.starts_with("the configuration file")
                && e.message.ends_with("is a directory, not a regular file"),
            "{}",
            e.message
        );
    }
}
