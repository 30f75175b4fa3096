//! The part of NVIDIA's DOCA C API that the `ipc` backend uses, loaded at run time with
//! `dlopen`: nothing of DOCA is needed to build this plug-in, and a machine without DOCA runs
//! it with the `ipc` backend degraded (one warning).
//!
//! # The DOCA functions used, and their C signatures as understood
//!
//! Read from NVIDIA's public DOCA documentation (the `doca_telemetry_exporter.h` and
//! `doca_error.h` references, and the metrics sample of the DOCA Telemetry Exporter) and from
//! how NIXL's DOCA exporter calls them. The library functions are marked
//! `DOCA_EXPERIMENTAL` in the headers; at the symbol level they are ordinary exports.
//!
//! Types:
//! ```c
//! typedef enum doca_error { DOCA_SUCCESS = 0, DOCA_ERROR_UNKNOWN = 1, ... } doca_error_t;
//! typedef enum doca_telemetry_exporter_ipc_status {
//!     DOCA_TELEMETRY_EXPORTER_IPC_STATUS_FAILED = -1,
//!     DOCA_TELEMETRY_EXPORTER_IPC_STATUS_CONNECTED,      /* 0 */
//!     DOCA_TELEMETRY_EXPORTER_IPC_STATUS_DISABLED,       /* 1 */
//! } doca_telemetry_exporter_ipc_status_t;
//! struct doca_telemetry_exporter_schema;                 /* opaque */
//! struct doca_telemetry_exporter_source;                 /* opaque */
//! typedef uint64_t doca_telemetry_exporter_timestamp_t;
//! typedef uint64_t doca_telemetry_exporter_label_set_id_t;      /* see below */
//! typedef uint64_t doca_telemetry_exporter_base_histogram_id_t; /* see below */
//! typedef uint64_t doca_telemetry_exporter_histogram_id_t;      /* see below */
//! ```
//!
//! From `libdoca_common`:
//! ```c
//! const char *doca_error_get_name(doca_error_t error);
//! ```
//!
//! From `libdoca_telemetry_exporter` (schema, source, utilities):
//! ```c
//! doca_error_t doca_telemetry_exporter_schema_init(const char *schema_name,
//!                                                  struct doca_telemetry_exporter_schema **doca_schema);
//! void doca_telemetry_exporter_schema_set_ipc_enabled(struct doca_telemetry_exporter_schema *doca_schema);
//! void doca_telemetry_exporter_schema_set_ipc_sockets_dir(struct doca_telemetry_exporter_schema *doca_schema,
//!                                                         const char *sockets_dir);
//! doca_error_t doca_telemetry_exporter_schema_start(struct doca_telemetry_exporter_schema *doca_schema);
//! doca_error_t doca_telemetry_exporter_schema_destroy(struct doca_telemetry_exporter_schema *doca_schema);
//! doca_error_t doca_telemetry_exporter_source_create(struct doca_telemetry_exporter_schema *doca_schema,
//!                                                    struct doca_telemetry_exporter_source **doca_source);
//! void doca_telemetry_exporter_source_set_id(struct doca_telemetry_exporter_source *doca_source,
//!                                            const char *source_id);
//! void doca_telemetry_exporter_source_set_tag(struct doca_telemetry_exporter_source *doca_source,
//!                                             const char *source_tag);
//! doca_error_t doca_telemetry_exporter_source_start(struct doca_telemetry_exporter_source *doca_source);
//! doca_error_t doca_telemetry_exporter_source_flush(struct doca_telemetry_exporter_source *doca_source);
//! doca_error_t doca_telemetry_exporter_source_destroy(struct doca_telemetry_exporter_source *doca_source);
//! doca_error_t doca_telemetry_exporter_get_timestamp(doca_telemetry_exporter_timestamp_t *timestamp);
//! doca_error_t doca_telemetry_exporter_check_ipc_status(struct doca_telemetry_exporter_source *doca_source,
//!                                                       doca_telemetry_exporter_ipc_status_t *status);
//! ```
//!
//! From `libdoca_telemetry_exporter` (the metrics API, DOCA 3.x):
//! ```c
//! doca_error_t doca_telemetry_exporter_metrics_create_context(struct doca_telemetry_exporter_source *doca_source);
//! doca_error_t doca_telemetry_exporter_metrics_destroy_context(struct doca_telemetry_exporter_source *doca_source);
//! doca_error_t doca_telemetry_exporter_metrics_add_constant_label(struct doca_telemetry_exporter_source *doca_source,
//!                                                                 const char *label_name,
//!                                                                 const char *label_value);
//! doca_error_t doca_telemetry_exporter_metrics_add_label_names(struct doca_telemetry_exporter_source *doca_source,
//!                                                              const char **label_names,
//!                                                              size_t num_labels,
//!                                                              doca_telemetry_exporter_label_set_id_t *label_set_id);
//! doca_error_t doca_telemetry_exporter_metrics_set_flush_interval_ms(struct doca_telemetry_exporter_source *doca_source,
//!                                                                    uint64_t flush_interval_ms);
//! doca_error_t doca_telemetry_exporter_metrics_add_counter_increment(struct doca_telemetry_exporter_source *doca_source,
//!                                                                    doca_telemetry_exporter_timestamp_t timestamp,
//!                                                                    const char *metric_name,
//!                                                                    uint64_t increment,
//!                                                                    doca_telemetry_exporter_label_set_id_t label_set_id,
//!                                                                    const char **label_values);
//! doca_error_t doca_telemetry_exporter_metrics_add_gauge(struct doca_telemetry_exporter_source *doca_source,
//!                                                        doca_telemetry_exporter_timestamp_t timestamp,
//!                                                        const char *metric_name,
//!                                                        double value,
//!                                                        doca_telemetry_exporter_label_set_id_t label_set_id,
//!                                                        const char **label_values);
//! doca_error_t doca_telemetry_exporter_metrics_add_base_histogram(struct doca_telemetry_exporter_source *doca_source,
//!                                                                 const char *metric_name,
//!                                                                 const double *bucket_bounds,
//!                                                                 size_t num_bounds,
//!                                                                 doca_telemetry_exporter_label_set_id_t label_set_id,
//!                                                                 uint64_t flush_interval_ms,
//!                                                                 doca_telemetry_exporter_base_histogram_id_t *base_id);
//! doca_error_t doca_telemetry_exporter_metrics_base_histogram_observe(struct doca_telemetry_exporter_source *doca_source,
//!                                                                     doca_telemetry_exporter_base_histogram_id_t base_id,
//!                                                                     const char **label_values,
//!                                                                     double value,
//!                                                                     doca_telemetry_exporter_histogram_id_t *histogram_id);
//! doca_error_t doca_telemetry_exporter_metrics_flush(struct doca_telemetry_exporter_source *doca_source);
//! ```
//!
//! Where the public material leaves a width open, a 64-bit type is used, which is safe on the
//! LP64 ABIs DOCA ships for (x86-64 and aarch64 pass integer arguments in 64-bit registers,
//! and a narrower out-value lands in the low bytes of a zeroed 64-bit slot): the label-set,
//! base-histogram and histogram ids (NVIDIA's sample prints a label-set id with `%zu`), the
//! label count and the two flush intervals. Gauges take a `double`, as in NVIDIA's sample.
//!
//! Deliberately not used: `doca_telemetry_exporter_metrics_histogram_flush`, whose
//! timestamp-mode enumeration values are not given in the material read. The base histograms
//! are created with a flush interval, so DOCA snapshots them itself; counters and gauges are
//! pushed by `doca_telemetry_exporter_metrics_flush` after every batch. Nor is
//! `PROMETHEUS_ENDPOINT` set: the `scrape` backend is this plug-in's own endpoint.
//!
//! # Finding the libraries
//!
//! `libdoca_common` is opened first, then `libdoca_telemetry_exporter` (whose own dependency on
//! `libdoca_common` is then satisfied by the already-loaded object of the same soname). Names
//! tried for each: `lib<name>.so`, then `lib<name>.so.3`, `.so.2`, `.so.1`. With
//! `NIXL_TELEMETRY_DOCA_LIB_DIR` set, only that directory is searched; otherwise the dynamic
//! loader's search path (`LD_LIBRARY_PATH`, the `ld.so` cache, ...), then DOCA's default
//! directory `/opt/mellanox/doca/lib/<arch>-linux-gnu`. Libraries are opened `RTLD_NOW |
//! RTLD_LOCAL` and never closed (a loaded set is reused for the rest of the process).

use nixl_telemetry_base::dl::{self, Library};
use nixl_telemetry_base::fork::LockOrder;
use nixl_telemetry_base::sync::LockUnpoisoned;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// `doca_error_t`.
pub type DocaError = i32;
/// `DOCA_SUCCESS`.
pub const DOCA_SUCCESS: DocaError = 0;
/// `doca_telemetry_exporter_ipc_status_t`.
pub type IpcStatus = i32;
/// `DOCA_TELEMETRY_EXPORTER_IPC_STATUS_FAILED`.
pub const IPC_STATUS_FAILED: IpcStatus = -1;
/// `DOCA_TELEMETRY_EXPORTER_IPC_STATUS_CONNECTED`.
pub const IPC_STATUS_CONNECTED: IpcStatus = 0;
/// `DOCA_TELEMETRY_EXPORTER_IPC_STATUS_DISABLED`.
pub const IPC_STATUS_DISABLED: IpcStatus = 1;
/// `doca_telemetry_exporter_timestamp_t`.
pub type Timestamp = u64;
/// `doca_telemetry_exporter_label_set_id_t`.
pub type LabelSetId = u64;
/// `doca_telemetry_exporter_base_histogram_id_t`.
pub type BaseHistogramId = u64;
/// `doca_telemetry_exporter_histogram_id_t`.
pub type HistogramId = u64;

/// `struct doca_telemetry_exporter_schema` (opaque).
#[repr(C)]
pub struct Schema {
    _opaque: [u8; 0],
}

/// `struct doca_telemetry_exporter_source` (opaque).
#[repr(C)]
pub struct Source {
    _opaque: [u8; 0],
}

/// The name of an IPC status, for messages.
pub fn ipc_status_name(status: IpcStatus) -> String {
    match status {
        IPC_STATUS_CONNECTED => "connected".into(),
        IPC_STATUS_FAILED => "failed".into(),
        IPC_STATUS_DISABLED => "disabled".into(),
        other => format!("unknown status {other}"),
    }
}

macro_rules! doca_api {
    ($( $field:ident: $lib:ident $symbol:literal fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// Every DOCA function the `ipc` backend calls, resolved from the loaded libraries.
        pub struct DocaApi {
            $( #[doc = concat!("`", $symbol, "`")]
               pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
            /// Where the libraries were loaded from (for messages).
            pub origin: String,
        }

        impl DocaApi {
            /// The symbol names, in resolution order.
            pub const SYMBOLS: &'static [&'static str] = &[$($symbol),*];

            /// Resolves every symbol; the first missing one is the error.
            ///
            /// # Safety
            /// The libraries must be DOCA's (or libraries exporting these symbols with the
            /// signatures documented in this module).
            unsafe fn resolve(
                common: Library,
                exporter: Library,
                origin: String,
            ) -> Result<DocaApi, String> {
                Ok(DocaApi {
                    $( $field: {
                        let library = match stringify!($lib) {
                            "common" => common,
                            _ => exporter,
                        };
                        let p = symbol(library, $symbol)?;
                        // SAFETY: `p` is the non-null address `dlsym` found for `$symbol` in a
                        // library that, by this function's contract, exports it as a function
                        // with the C signature declared here (see the module documentation).
                        // POSIX `dlsym` requires object and function pointers to share size and
                        // representation, so the result is that function's pointer, and it
                        // stays callable because the libraries are never closed.
                        unsafe {
                            std::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($arg),*) $(-> $ret)?,
                            >(p)
                        }
                    }, )*
                    origin,
                })
            }
        }
    };
}

doca_api! {
    error_get_name: common "doca_error_get_name" fn(DocaError) -> *const c_char;
    schema_init: exporter "doca_telemetry_exporter_schema_init"
        fn(*const c_char, *mut *mut Schema) -> DocaError;
    schema_set_ipc_enabled: exporter "doca_telemetry_exporter_schema_set_ipc_enabled"
        fn(*mut Schema);
    schema_set_ipc_sockets_dir: exporter "doca_telemetry_exporter_schema_set_ipc_sockets_dir"
        fn(*mut Schema, *const c_char);
    schema_start: exporter "doca_telemetry_exporter_schema_start" fn(*mut Schema) -> DocaError;
    schema_destroy: exporter "doca_telemetry_exporter_schema_destroy"
        fn(*mut Schema) -> DocaError;
    source_create: exporter "doca_telemetry_exporter_source_create"
        fn(*mut Schema, *mut *mut Source) -> DocaError;
    source_set_id: exporter "doca_telemetry_exporter_source_set_id"
        fn(*mut Source, *const c_char);
    source_set_tag: exporter "doca_telemetry_exporter_source_set_tag"
        fn(*mut Source, *const c_char);
    source_start: exporter "doca_telemetry_exporter_source_start" fn(*mut Source) -> DocaError;
    source_flush: exporter "doca_telemetry_exporter_source_flush" fn(*mut Source) -> DocaError;
    source_destroy: exporter "doca_telemetry_exporter_source_destroy"
        fn(*mut Source) -> DocaError;
    get_timestamp: exporter "doca_telemetry_exporter_get_timestamp"
        fn(*mut Timestamp) -> DocaError;
    check_ipc_status: exporter "doca_telemetry_exporter_check_ipc_status"
        fn(*mut Source, *mut IpcStatus) -> DocaError;
    metrics_create_context: exporter "doca_telemetry_exporter_metrics_create_context"
        fn(*mut Source) -> DocaError;
    metrics_destroy_context: exporter "doca_telemetry_exporter_metrics_destroy_context"
        fn(*mut Source) -> DocaError;
    metrics_add_constant_label: exporter "doca_telemetry_exporter_metrics_add_constant_label"
        fn(*mut Source, *const c_char, *const c_char) -> DocaError;
    metrics_add_label_names: exporter "doca_telemetry_exporter_metrics_add_label_names"
        fn(*mut Source, *const *const c_char, usize, *mut LabelSetId) -> DocaError;
    metrics_set_flush_interval_ms: exporter "doca_telemetry_exporter_metrics_set_flush_interval_ms"
        fn(*mut Source, u64) -> DocaError;
    metrics_add_counter_increment: exporter "doca_telemetry_exporter_metrics_add_counter_increment"
        fn(*mut Source, Timestamp, *const c_char, u64, LabelSetId, *const *const c_char) -> DocaError;
    metrics_add_gauge: exporter "doca_telemetry_exporter_metrics_add_gauge"
        fn(*mut Source, Timestamp, *const c_char, f64, LabelSetId, *const *const c_char) -> DocaError;
    metrics_add_base_histogram: exporter "doca_telemetry_exporter_metrics_add_base_histogram"
        fn(*mut Source, *const c_char, *const f64, usize, LabelSetId, u64, *mut BaseHistogramId) -> DocaError;
    metrics_base_histogram_observe: exporter "doca_telemetry_exporter_metrics_base_histogram_observe"
        fn(*mut Source, BaseHistogramId, *const *const c_char, f64, *mut HistogramId) -> DocaError;
    metrics_flush: exporter "doca_telemetry_exporter_metrics_flush" fn(*mut Source) -> DocaError;
}

impl DocaApi {
    /// `doca_error_get_name(e)`, e.g. `DOCA_ERROR_INITIALIZATION`.
    pub fn error_name(&self, e: DocaError) -> String {
        // SAFETY: `error_get_name` was resolved from libdoca_common, which stays loaded for the
        // rest of the process, as `const char *doca_error_get_name(doca_error_t)`: it takes the
        // code by value (any value, unknown ones included) and reads no memory of ours.
        let p = unsafe { (self.error_get_name)(e) };
        if p.is_null() {
            return format!("doca_error_t {e}");
        }
        // SAFETY: `p` is non-null, and DOCA returns its error names as NUL-terminated strings
        // of static storage in a library that is never unloaded; the borrow is copied into an
        // owned `String` at once.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The address of `name` in `library`; a missing symbol is an error carrying `dlerror`'s message
/// (`symbol NAME is missing (...)`).
fn symbol(library: Library, name: &str) -> Result<*mut c_void, String> {
    let c = CString::new(name).expect("symbol names have no NUL");
    library
        .symbol(&c)
        .map(|p| p.as_ptr())
        .map_err(|e| e.to_string())
}

/// The library base names, in opening order.
const COMMON: &str = "doca_common";
const EXPORTER: &str = "doca_telemetry_exporter";
/// File-name suffixes tried for each library.
const SUFFIXES: [&str; 4] = [".so", ".so.3", ".so.2", ".so.1"];

/// The candidates for library `base`: full paths in `dir`, or bare names for the loader's
/// search path followed by DOCA's default directory.
fn candidates(base: &str, dir: Option<&Path>) -> Vec<String> {
    let names = SUFFIXES.iter().map(|s| format!("lib{base}{s}"));
    match dir {
        Some(d) => names.map(|n| d.join(n).display().to_string()).collect(),
        None => {
            let default_dir = PathBuf::from(format!(
                "/opt/mellanox/doca/lib/{}-linux-gnu",
                std::env::consts::ARCH
            ));
            let bare: Vec<String> = names.collect();
            let mut all = bare.clone();
            all.extend(
                bare.iter()
                    .map(|n| default_dir.join(n).display().to_string()),
            );
            all
        }
    }
}

/// Opens the first candidate of `base` that loads; the error lists what was tried.
fn open(base: &str, dir: Option<&Path>) -> Result<(Library, String), String> {
    let mut tried = Vec::new();
    for name in candidates(base, dir) {
        // With a directory, skip files that are not there (their dlerror says nothing more).
        if dir.is_some() && !Path::new(&name).exists() {
            continue;
        }
        let c = CString::new(name.as_bytes()).map_err(|_| format!("{name:?} contains NUL"))?;
        // SAFETY: loading runs the library's initialisers: that trust is placed in what DOCA's
        // directory (or `NIXL_TELEMETRY_DOCA_LIB_DIR`) holds, as for any linked library. A
        // `Library` is never closed, which is what lets `load` hand out `'static` tables of
        // function pointers into the library.
        let e = match unsafe { Library::open(&c, dl::NOW_LOCAL) } {
            Ok(library) => return Ok((library, name)),
            Err(e) => e.to_string(),
        };
        // A name that is simply not there says nothing worth repeating.
        if !e.contains("No such file or directory") {
            tried.push(e);
        }
    }
    let place = match dir {
        Some(d) => format!("in {}", d.display()),
        None => "on the loader's search path or in /opt/mellanox/doca/lib".into(),
    };
    Err(if tried.is_empty() {
        format!("lib{base}.so was not found {place}")
    } else {
        format!(
            "lib{base}.so could not be loaded {place}: {}",
            tried.join("; ")
        )
    })
}

/// Successfully loaded API tables by library directory; never freed (the libraries stay
/// loaded for the rest of the process).
static LOADED: Mutex<Vec<(Option<PathBuf>, &'static DocaApi)>> = Mutex::new(Vec::new());

/// Loads (or reuses) DOCA's libraries from `dir` (see the module documentation) and resolves
/// every symbol used. The error says what is missing.
pub fn load(dir: Option<&Path>) -> Result<&'static DocaApi, String> {
    nixl_telemetry_base::fork::hold_across_fork(LockOrder::Plugin, &LOADED);
    let mut loaded = LOADED.lock_unpoisoned();
    if let Some((_, api)) = loaded.iter().find(|(d, _)| d.as_deref() == dir) {
        return Ok(api);
    }
    let (common, common_name) = open(COMMON, dir)?;
    let (exporter, exporter_name) = open(EXPORTER, dir)?;
    let origin = format!("{exporter_name} and {common_name}");
    // SAFETY: `common` and `exporter` are libdoca_common and libdoca_telemetry_exporter (`open`
    // found them by those names), whose exports `resolve` assumes have the signatures
    // documented at the top of this module; they are never closed.
    let api = unsafe { DocaApi::resolve(common, exporter, origin.clone()) }
        .map_err(|e| format!("{origin}: {e}"))?;
    let api: &'static DocaApi = Box::leak(Box::new(api));
    loaded.push((dir.map(Path::to_owned), api));
    Ok(api)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_the_documented_order() {
        assert_eq!(
            candidates("doca_common", Some(Path::new("/d"))),
            [
                "/d/libdoca_common.so",
                "/d/libdoca_common.so.3",
                "/d/libdoca_common.so.2",
                "/d/libdoca_common.so.1"
            ]
        );
        let c = candidates("doca_telemetry_exporter", None);
        assert_eq!(c[0], "libdoca_telemetry_exporter.so");
        assert_eq!(c.len(), 8);
        assert!(c[4].starts_with("/opt/mellanox/doca/lib/"), "{c:?}");
    }

    #[test]
    fn an_empty_directory_names_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("doca-none-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = load(Some(&dir)).err().unwrap();
        assert!(e.contains("libdoca_common.so was not found in"), "{e}");
        assert!(e.contains(&dir.display().to_string()), "{e}");
        let _ = std::fs::remove_dir(&dir);
        assert_eq!(DocaApi::SYMBOLS.len(), 24);
        assert_eq!(ipc_status_name(IPC_STATUS_FAILED), "failed");
        assert_eq!(ipc_status_name(7), "unknown status 7");
    }
}
