//! The lookup every parser of a setting is given ([`process_settings`]), and its routing to the
//! host in a plug-in's copy of this crate ([`route_to_host`]), so that the process reads its
//! configuration file once.

use std::sync::OnceLock;

use super::lookup::lookup;
use crate::error::Result;

/// Looks a setting up as a collector does: in the process environment (an empty
/// `NIXL_TELEMETRY_*` value is unset, [`crate::env::unset_if_empty`]), else, for a setting this
/// library knows ([`SETTINGS`](super::SETTINGS)), in NIXL's configuration file: [`lookup`] without the origin,
/// the [`Lookup`](crate::env::Lookup) every parser of a collector's settings is given. An error when the value is
/// not UTF-8, or when the file is needed and cannot be read or gives the wrong type.
///
/// In a plug-in whose host offers the settings service ([`route_to_host`]), the host looks it
/// up: the process reads its configuration file once, whichever part of it asks first.
pub fn process_settings(name: &str) -> Result<Option<String>> {
    if let Some(host_lookup) = HOST_LOOKUP.get() {
        return host_lookup(name);
    }
    Ok(lookup(name)?.map(|s| s.value))
}

/// A lookup by the host's rule, in a plug-in's copy of this crate (see [`route_to_host`]).
pub type HostLookup = fn(&str) -> Result<Option<String>>;

/// The host's lookup, once a plug-in has routed its settings there.
static HOST_LOOKUP: OnceLock<HostLookup> = OnceLock::new();

/// Makes [`process_settings`] ask the host through `lookup` from now on (the plug-in side of the
/// host services, `crate::plugin::services`, calls it; the first lookup given stays).
pub fn route_to_host(lookup: HostLookup) {
    let _ = HOST_LOOKUP.set(lookup);
}
