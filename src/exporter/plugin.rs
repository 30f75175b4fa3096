//! A loaded exporter plug-in as an [`Exporter`]: one agent's state inside the plug-in, created
//! with the host services (logging, event names) and destroyed exactly once.

use std::ffi::{c_char, c_void, CString};

use crate::c_string::text_in_c_buffer;
use crate::constants::*;
use crate::error::{Error, Result, Status};
use crate::event::Event;
use crate::exporter::Exporter;
use crate::plugin::host::{host_event_name, host_log, HOST_SERVICES};
use crate::plugin::{self, abi::nixl_telemetry_plugin_params_t, Creator, LoadedPlugin};

/// One agent's exporter inside a plug-in.
pub struct PluginExporter {
    plugin: LoadedPlugin,
    state: *mut c_void,
    name: String,
}

// SAFETY: the plug-in contract allows calls from any thread, one at a time per state; the
// collector serialises export calls and destroys the state once.
unsafe impl Send for PluginExporter {}

impl Exporter for PluginExporter {
    fn export_batch(&mut self, events: &[Event]) -> usize {
        // SAFETY: `state` came from this plug-in's create; events are valid for the call.
        unsafe { (self.plugin.export)(self.state, events.as_ptr(), events.len()) }.min(events.len())
    }

    fn name(&self) -> &str {
        &self.name
    }

    /// An idle flush reaches the plug-in as a batch of 0 events.
    fn tick(&mut self) {
        self.export_batch(&[]);
    }
}

impl Drop for PluginExporter {
    fn drop(&mut self) {
        // SAFETY: destroying the state exactly once.
        unsafe { (self.plugin.destroy)(self.state) }
    }
}

impl PluginExporter {
    /// Loads plug-in `name` and creates its exporter for `agent`. A scrape-port collision
    /// (`NIXL_TELEMETRY_ERR_BIND_FAILED`) returns `BindFailed` (with the plug-in's message).
    pub fn create(name: &str, agent: &str, capacity: usize) -> Result<PluginExporter> {
        let plugin = plugin::load(name)?;
        let agent_c = CString::new(agent)
            .map_err(|_| Error::invalid(format!("agent name {agent:?} contains NUL")))?;
        let mut state: *mut c_void = std::ptr::null_mut();
        let mut message = [0 as c_char; 1024];
        let status = match plugin.create {
            Creator::Native(create) => {
                let params = nixl_telemetry_plugin_params_t {
                    struct_size: std::mem::size_of::<nixl_telemetry_plugin_params_t>(),
                    agent_name: agent_c.as_ptr(),
                    max_events_buffered: capacity,
                    host_log: Some(host_log),
                    host_event_name: Some(host_event_name),
                    host: &HOST_SERVICES,
                };
                // SAFETY: all pointers are valid for the call; the plug-in writes at most
                // `len` bytes.
                unsafe { create(&params, &mut state, message.as_mut_ptr(), message.len()) }
            }
            Creator::NixlCpp(nixl) => plugin::create_nixl_cpp(
                nixl,
                &agent_c,
                capacity,
                Some(host_log),
                &mut state,
                &mut message,
            ),
        };
        // At most len - 1 bytes: a plug-in that filled the whole buffer left no room for its NUL.
        let text = text_in_c_buffer(&message[..message.len() - 1]);
        let text = if text.is_empty() {
            "no message".to_owned()
        } else {
            text
        };
        match status {
            NIXL_TELEMETRY_SUCCESS => Ok(PluginExporter {
                plugin,
                state,
                name: name.to_owned(),
            }),
            // Logged by the caller that decides to run without a sink (`Collector::from_env`,
            // NIXL's `create()`); the explicit constructor throws instead, as NIXL's does.
            NIXL_TELEMETRY_ERR_BIND_FAILED => Err(Error::new(Status::BindFailed, text)),
            NIXL_TELEMETRY_ERR_INVALID_PARAM => Err(Error::invalid(format!(
                "Failed to create telemetry exporter {name}: {text}"
            ))),
            NIXL_TELEMETRY_ERR_PANIC => Err(Error::new(
                Status::Panic,
                format!("Failed to create telemetry exporter {name}: {text}"),
            )),
            _ => Err(Error::new(
                Status::Unknown,
                format!("Failed to create telemetry exporter {name}: {text}"),
            )),
        }
    }
}
