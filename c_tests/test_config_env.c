/*
 * The environment read by nixl_telemetry_create: when telemetry is requested at all
 * (NIXL_TELEMETRY_ENABLE and the capture flag, with the one warning to the log callback),
 * invalid values of every core variable and of the exporter choice, and agent names that would
 * escape NIXL_TELEMETRY_DIR (or a symbolic link in place of the ring file).
 */
#include "check.h"

/* Number of entries in `dir`, excluding "." and "..". */
static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    }
    closedir(d);
    return n;
}

static void test_not_requested(void) {
    env_clear();
    nixl_telemetry_t *t = SENTINEL_HANDLE;

    /* NIXL_TELEMETRY_ENABLE unset, capture false: not requested, nothing created. */
    CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("not requested");

    /* ENABLE false with capture true: NO_TELEMETRY plus exactly one warning to the callback. */
    struct log_capture cap;
    memset(&cap, 0, sizeof cap);
    nixl_telemetry_set_log_callback(capture_log, &cap);
    env_set("NIXL_TELEMETRY_ENABLE", "n");
    t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(t == NULL);
    CHECK(cap.calls == 1);
    CHECK(cap.warnings == 1);
    CHECK(cap.last_level == NIXL_TELEMETRY_LOG_WARN);
    CHECK(cap.seen_user_data == &cap);
    CHECK(strstr(cap.last_message, "NIXL_TELEMETRY_ENABLE") != NULL);

    /* ENABLE false with capture false: no warning. */
    t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(t == NULL);
    CHECK(cap.calls == 1);

    /* Every false word, case-insensitive. */
    static const char *const no_words[] = {"n", "NO", "off", "False", "disable", "0"};
    for (size_t i = 0; i < sizeof no_words / sizeof no_words[0]; i++) {
        env_set("NIXL_TELEMETRY_ENABLE", no_words[i]);
        t = SENTINEL_HANDLE;
        CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
        CHECK(t == NULL);
    }
    CHECK(cap.calls == 1);

    /* Back to stderr: the callback sees nothing more (the warning goes to stderr). */
    nixl_telemetry_set_log_callback(NULL, NULL);
    env_set("NIXL_TELEMETRY_ENABLE", "off");
    fprintf(stderr, "(expected: one telemetry warning on stderr follows)\n");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(cap.calls == 1);

    /* Every true word, with capture false: ENABLE decides (NOP exporter, nothing written). */
    static const char *const yes_words[] = {"y", "Yes", "ON", "true", "ENABLE", "1"};
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    for (size_t i = 0; i < sizeof yes_words / sizeof yes_words[0]; i++) {
        env_set("NIXL_TELEMETRY_ENABLE", yes_words[i]);
        t = NULL;
        CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_SUCCESS);
        CHECK(t != NULL);
        nixl_telemetry_destroy(t);
    }
    /* ENABLE unset, capture true: requested by the agent. */
    CHECK(unsetenv("NIXL_TELEMETRY_ENABLE") == 0);
    t = NULL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK(t != NULL);
    nixl_telemetry_destroy(t);
    env_clear();
}

struct env_case {
    const char *var;
    const char *value;
    const char *message; /* must appear in the last error */
};

static void test_invalid_env(void) {
    static const struct env_case cases[] = {
        {"NIXL_TELEMETRY_ENABLE", "maybe", "NIXL_TELEMETRY_ENABLE='maybe'"},
        {"NIXL_TELEMETRY_ENABLE", " yes", "NIXL_TELEMETRY_ENABLE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "0", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "12abc", "NIXL_TELEMETRY_BUFFER_SIZE='12abc'"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "-4", "NIXL_TELEMETRY_BUFFER_SIZE='-4'"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", " 64", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "99999999999", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_BUFFER_SIZE", "18446744073709551616", "NIXL_TELEMETRY_BUFFER_SIZE"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "-1", "NIXL_TELEMETRY_RUN_INTERVAL='-1'"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "0", "NIXL_TELEMETRY_RUN_INTERVAL"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "100ms", "NIXL_TELEMETRY_RUN_INTERVAL='100ms'"},
        {"NIXL_TELEMETRY_RUN_INTERVAL", "1.5", "NIXL_TELEMETRY_RUN_INTERVAL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        env_clear();
        env_set("NIXL_TELEMETRY_ENABLE", "y");
        env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
        env_set(cases[i].var, cases[i].value);
        nixl_telemetry_t *t = SENTINEL_HANDLE;
        nixl_telemetry_status_t s = nixl_telemetry_create("agent", true, &t);
        if (s != NIXL_TELEMETRY_ERR_INVALID_PARAM) {
            fprintf(stderr, "case %s='%s'\n", cases[i].var, cases[i].value);
        }
        CHECK_STATUS(s, NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK(t == NULL);
        if (!strstr(last_error(), cases[i].message)) {
            fprintf(stderr, "case %s='%s': message lacks \"%s\"\n", cases[i].var,
                    cases[i].value, cases[i].message);
        }
        CHECK_LAST_ERROR_HAS(cases[i].message);
    }

    char *dir = make_tmpdir();

    /* BUFFER needs a power-of-two size; nothing is created. */
    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    env_set("NIXL_TELEMETRY_DIR", dir);
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "12");
    nixl_telemetry_t *t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("NIXL_TELEMETRY_BUFFER_SIZE");
    CHECK_LAST_ERROR_HAS("power of 2");
    CHECK(dir_entries(dir) == 0);

    /* ... while NOP accepts any size, also in hexadecimal. */
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_destroy(t);
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "0x40");
    env_set("NIXL_TELEMETRY_RUN_INTERVAL", "0X10");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_destroy(t);
    CHECK(dir_entries(dir) == 0);

    /* BUFFER without a directory, or with an empty one. */
    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("NIXL_TELEMETRY_DIR");
    env_set("NIXL_TELEMETRY_DIR", ""); /* empty is unset: still no directory */
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK_LAST_ERROR_HAS("NIXL_TELEMETRY_DIR");

    /* An unknown exporter is NOT_FOUND (plug-in names are case-sensitive). */
    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "nosuch");
    t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NOT_FOUND);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("Failed to load telemetry plugin: nosuch");
    env_set("NIXL_TELEMETRY_EXPORTER", "buffer");
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_ERR_NOT_FOUND);

    /* Bad agent names whatever the exporter: empty, not UTF-8. */
    env_set("NIXL_TELEMETRY_EXPORTER", "NOP");
    t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("bad\xff", true, &t), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    CHECK_LAST_ERROR_HAS("UTF-8");

    env_clear();
    rm_rf(dir);
    free(dir);
}

static void test_hostile_agent_names(void) {
    char *base = make_tmpdir();
    char *dir = path_join(base, "rings");
    char *sub = path_join(dir, "a");
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(mkdir(sub, 0700) == 0); /* so that "a/b" would be creatable without the check */

    env_clear();
    env_set("NIXL_TELEMETRY_ENABLE", "y");
    env_set("NIXL_TELEMETRY_EXPORTER", "BUFFER");
    env_set("NIXL_TELEMETRY_DIR", dir);
    env_set("NIXL_TELEMETRY_RUN_INTERVAL", "3600000");

    static const char *const names[] = {"../x", "a/b", ".", "..", "../../x", "/tmp/x", "a/"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        nixl_telemetry_t *t = SENTINEL_HANDLE;
        nixl_telemetry_status_t s = nixl_telemetry_create(names[i], true, &t);
        if (s != NIXL_TELEMETRY_ERR_INVALID_PARAM) fprintf(stderr, "agent name '%s'\n", names[i]);
        CHECK_STATUS(s, NIXL_TELEMETRY_ERR_INVALID_PARAM);
        CHECK(t == NULL);
        CHECK_LAST_ERROR_HAS("agent name");
        if (t && t != SENTINEL) nixl_telemetry_destroy(t);
    }
    /* Nothing was created anywhere: base holds only rings/, rings/ only a/, a/ nothing. */
    CHECK(dir_entries(base) == 1);
    CHECK(dir_entries(dir) == 1);
    CHECK(dir_entries(sub) == 0);

    /* A name that is fine creates exactly DIR/<name>. */
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("..fine", true, &t), NIXL_TELEMETRY_SUCCESS);
    char *ok = path_join(dir, "..fine");
    CHECK(path_exists(ok));
    nixl_telemetry_destroy(t);
    free(ok);

    /* A symbolic link in place of the ring file is refused and left alone. */
    char *target = path_join(base, "target");
    char *link = path_join(dir, "linked");
    write_file(target, "keep", 4);
    CHECK(symlink(target, link) == 0);
    t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("linked", true, &t), NIXL_TELEMETRY_ERR_NOT_ALLOWED);
    CHECK(t == NULL);
    CHECK(file_equals(target, (const unsigned char *)"keep", 4));
    free(target);
    free(link);

    env_clear();
    rm_rf(base);
    free(sub);
    free(dir);
    free(base);
}

/* An empty NIXL_TELEMETRY_* value counts as unset (as Helm charts render unset values). */
static void test_empty_is_unset(void) {
    static const char *const vars[] = {
        "NIXL_TELEMETRY_ENABLE",      "NIXL_TELEMETRY_BUFFER_SIZE", "NIXL_TELEMETRY_RUN_INTERVAL",
        "NIXL_TELEMETRY_EXPORTER",    "NIXL_TELEMETRY_DIR",         "NIXL_TELEMETRY_ENABLED_METRICS",
        "NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US",
    };
    env_clear();
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        env_set(vars[i], "");
    }
    /* ENABLE empty: the capture flag decides. */
    nixl_telemetry_t *t = SENTINEL_HANDLE;
    CHECK_STATUS(nixl_telemetry_create("agent", false, &t), NIXL_TELEMETRY_ERR_NO_TELEMETRY);
    CHECK(t == NULL);
    t = NULL;
    CHECK_STATUS(nixl_telemetry_create("agent", true, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK(t != NULL);
    nixl_telemetry_destroy(t);
    env_clear();
    CHECK(unsetenv("NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US") == 0);
}

int main(void) {
    tests_begin();
    RUN(test_not_requested);
    RUN(test_invalid_env);
    RUN(test_empty_is_unset);
    RUN(test_hostile_agent_names);
    return tests_end();
}
