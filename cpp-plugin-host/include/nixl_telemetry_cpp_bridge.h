/*
 * The C functions of libnixl_telemetry_cpp_plugin_host.so, which libnixl_telemetry opens when a
 * plug-in reports NIXL's C++ plug-in API version 2. Private to the library and its bridge (not
 * installed); the Rust side is src/plugin/cpp_bridge.rs. No function throws.
 *
 * The bridge's C++ code (cpp-plugin-host/src/bridge.cpp) defines each function under the name
 * with `_impl` appended; its Rust crate exports them under these names (a Rust cdylib exports
 * only what Rust defines).
 *
 * `plugin` is the nixlTelemetryPlugin object a version-2 plug-in's nixl_telemetry_plugin_init()
 * returned; `state` is one agent's exporter. Messages are NUL-terminated and truncated to
 * `error_len` bytes. Status values are NIXL_TELEMETRY_SUCCESS or NIXL_TELEMETRY_ERR_*.
 */
#ifndef NIXL_TELEMETRY_CPP_BRIDGE_H
#define NIXL_TELEMETRY_CPP_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "nixl_telemetry.h"

/** The version of these functions; the library refuses a bridge with another one. */
#define NIXL_TELEMETRY_CPP_BRIDGE_ABI 1

#ifdef __cplusplus
extern "C" {
#endif

/** Logs a message through the host (`level`: NIXL_TELEMETRY_LOG_*). */
typedef void (*nixl_telemetry_cpp_bridge_log_fn_t)(int32_t level, const char *message);

/** Returns NIXL_TELEMETRY_CPP_BRIDGE_ABI. */
uint32_t
nixl_telemetry_cpp_bridge_abi(void);

/** Checks `plugin` and copies its name and version strings. */
int32_t
nixl_telemetry_cpp_bridge_inspect(const void *plugin,
                                  char *name,
                                  size_t name_len,
                                  char *version,
                                  size_t version_len,
                                  char *error,
                                  size_t error_len);

/**
 * Creates the exporter of `agent_name` through the plug-in's creator. A nixlTelemetryBindFailed
 * is NIXL_TELEMETRY_ERR_BIND_FAILED (with its message); any other exception, or a creator that
 * returns no exporter, is NIXL_TELEMETRY_ERR_UNKNOWN. `log` (may be NULL) is kept for export.
 */
int32_t
nixl_telemetry_cpp_bridge_create(const void *plugin,
                                 const char *agent_name,
                                 size_t max_events_buffered,
                                 nixl_telemetry_cpp_bridge_log_fn_t log,
                                 void **state,
                                 char *error,
                                 size_t error_len);

/**
 * Calls exportEvent for each event, in order, inside one withBatch (also for count 0, as NIXL's
 * flush does every run interval). Returns how many returned NIXL_SUCCESS; an event whose
 * exportEvent failed or threw is not counted (the first failure of each kind is logged).
 */
size_t
nixl_telemetry_cpp_bridge_export(void *state, const nixl_telemetry_event_t *events, size_t count);

/** Destroys the exporter. */
void
nixl_telemetry_cpp_bridge_destroy(void *state);

#ifdef __cplusplus
}
#endif

#endif /* NIXL_TELEMETRY_CPP_BRIDGE_H */
