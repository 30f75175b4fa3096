/* A shared library that is not a telemetry plug-in: it lacks nixl_telemetry_plugin_init. */
int
not_a_plugin_function(int x) {
    return x + 1;
}
