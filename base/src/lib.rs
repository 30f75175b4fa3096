//! What the nixl-telemetry core (`nixl-telemetry`) and its exporter plug-ins share, and nothing
//! more: a plug-in `.so` links this crate, never the core, so it carries no staging queue, ring,
//! FPM writer or plug-in loader.
//!
//! - **The model**: [`constants`] (every number of the C ABIs), [`event`] (the event types and
//!   the 16-byte record), [`error`], [`mod@env`] (strict parsing of settings' values).
//! - **The exporter plug-in ABI** ([`plugin`]): its C types, the services a host offers a
//!   plug-in, the helpers for writing a plug-in in Rust, and the trust check of a plug-in file
//!   (the loader's and the NIXL adapter's).
//! - **The process services**: [`settings`] (every setting, and the one lookup: environment,
//!   then NIXL's configuration file, read once per process), [`fork`] (the `pthread_atfork`
//!   handlers and what they protect), [`logging`]. A process has one of each: in the core's
//!   library they are this crate's own; in a plug-in loaded by a host, the host's, reached
//!   through the host services of the plug-in ABI ([`plugin::host`]), so a plug-in reads the
//!   host's configuration, joins the host's fork handlers and logs through the host.
//! - **Shared helpers**: [`owner_only`] (owner-only files and the writer's `flock`),
//!   [`trusted_file`] (the one trust rule of the files read: configuration, secret and plug-in
//!   files), [`fault_guard`] (surviving a
//!   mapped file truncated under its mapping), [`dl`] (`dlopen` and `dlsym`, for the core's
//!   plug-in loader and the plug-ins that load a library), [`sync`] (the poison-ignoring lock),
//!   [`worker`] (the one background loop), [`c_string`].

pub mod c_string;
pub mod constants;
pub mod dl;
pub mod env;
pub mod error;
pub mod event;
pub mod fault_guard;
pub mod fork;
pub mod logging;
pub mod owner_only;
pub mod plugin;
pub mod settings;
pub mod sync;
pub mod trusted_file;
pub mod worker;

pub use error::{Error, Result, Status};
pub use event::{Event, EventType, MetricDescriptor, METRIC_DESCRIPTORS};
