/*
 * The FPM trace C ABI from C: open through the DYN_FPM_* environment (twice: the second handle
 * shares the trace), record a typed payload, a msgpack payload built by hand and an invalid one,
 * read the counters, close gracefully and check the segment file; a child process that exits
 * without closing its trace still writes it. NULL arguments return a status, never crash.
 */
#define _POSIX_C_SOURCE 200809L

#include "nixl_telemetry_fpm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                     \
        }                                                                   \
    } while (0)

/* A tiny msgpack writer: just what an FPM payload needs. */
typedef struct {
    uint8_t bytes[512];
    size_t len;
} buf_t;

static void put(buf_t *b, uint8_t v) { b->bytes[b->len++] = v; }

static void put_be64(buf_t *b, uint64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8) put(b, (uint8_t)(v >> shift));
}

static void put_str(buf_t *b, const char *s) {
    size_t n = strlen(s);
    put(b, (uint8_t)(0xa0 | n)); /* fixstr: shorter than 32 bytes */
    memcpy(b->bytes + b->len, s, n);
    b->len += n;
}

static void put_uint(buf_t *b, uint64_t v) {
    put(b, 0xcf);
    put_be64(b, v);
}

static void put_double(buf_t *b, double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    put(b, 0xcb);
    put_be64(b, bits);
}

static void put_requests(buf_t *b, int scheduled) {
    put(b, (uint8_t)(0x80 | (scheduled ? 7 : 6)));
    put_str(b, "num_prefill_requests"); put_uint(b, 1);
    put_str(b, "sum_prefill_tokens"); put_uint(b, 128);
    put_str(b, "var_prefill_length"); put_double(b, 0.0);
    if (scheduled) { put_str(b, "sum_prefill_kv_tokens"); put_uint(b, 64); }
    put_str(b, "num_decode_requests"); put_uint(b, 2);
    put_str(b, "sum_decode_kv_tokens"); put_uint(b, 4096);
    put_str(b, "var_decode_kv_tokens"); put_double(b, 1.5);
}

static void build_payload(buf_t *b, uint64_t counter) {
    b->len = 0;
    put(b, 0x87); /* fixmap of 7 */
    put_str(b, "version"); put(b, 0x01);
    put_str(b, "worker_id"); put_str(b, "w");
    put_str(b, "dp_rank"); put(b, 0x00);
    put_str(b, "counter_id"); put_uint(b, counter);
    put_str(b, "wall_time"); put_double(b, 0.25);
    put_str(b, "scheduled_requests"); put_requests(b, 1);
    put_str(b, "queued_requests"); put_requests(b, 0);
}

int main(void) {
    char dir[] = "/tmp/nixl-fpm-c-test-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s/fpm", dir);
    setenv("DYN_FPM_TRACE", "yes", 1);
    setenv("DYN_FPM_OUTPUT_PATH", prefix, 1);
    setenv("DYN_FPM_MODE", "FULL", 1);

    /* NULL arguments. */
    CHECK(nixl_telemetry_fpm_trace_open("ns", "c", "p", NULL) == NIXL_TELEMETRY_ERR_INVALID_PARAM);
    nixl_telemetry_fpm_trace_t *t = NULL;
    CHECK(nixl_telemetry_fpm_trace_open(NULL, "c", "p", &t) == NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(t == NULL);
    char msg[256];
    CHECK(nixl_telemetry_last_error(msg, sizeof msg) > 0);
    CHECK(strstr(msg, "namespace") != NULL);
    CHECK(nixl_telemetry_fpm_trace_record(NULL, NULL) == NIXL_TELEMETRY_ERR_INVALID_PARAM);
    CHECK(nixl_telemetry_fpm_trace_record_msgpack(NULL, NULL, 0) == NIXL_TELEMETRY_ERR_INVALID_PARAM);
    nixl_telemetry_fpm_trace_close(NULL);

    CHECK(nixl_telemetry_fpm_trace_open("default", "backend", "c-test", &t) == NIXL_TELEMETRY_SUCCESS);
    CHECK(t != NULL);
    if (t == NULL) return 1;
    /* One relay per data-parallel rank opens the same trace again: a second handle on it. */
    nixl_telemetry_fpm_trace_t *second = NULL;
    CHECK(nixl_telemetry_fpm_trace_open("default", "backend", "c-test", &second) ==
          NIXL_TELEMETRY_SUCCESS);
    CHECK(second != NULL && second != t);

    nixl_telemetry_fpm_payload_t p;
    memset(&p, 0, sizeof p);
    p.version = 1;
    p.worker_id = "w";
    p.dp_rank = 0;
    p.counter_id = 1;
    p.wall_time = 0.5;
    p.scheduled_requests.num_decode_requests = 4;
    CHECK(nixl_telemetry_fpm_trace_record(t, &p) == NIXL_TELEMETRY_SUCCESS);
    /* Closing one handle releases it only; the other keeps recording into the same trace. */
    nixl_telemetry_fpm_trace_close(second);

    buf_t b;
    build_payload(&b, 2);
    CHECK(nixl_telemetry_fpm_trace_record_msgpack(t, b.bytes, b.len) == NIXL_TELEMETRY_SUCCESS);
    const uint8_t junk[] = {0xc1};
    CHECK(nixl_telemetry_fpm_trace_record_msgpack(t, junk, sizeof junk) == NIXL_TELEMETRY_SUCCESS);

    CHECK(nixl_telemetry_fpm_trace_flush(t) == NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_fpm_trace_stats_t s;
    CHECK(nixl_telemetry_fpm_trace_get_stats(t, &s) == NIXL_TELEMETRY_SUCCESS);
    CHECK(s.recorded == 3);
    CHECK(s.written == 2);
    CHECK(s.rejected == 1);
    CHECK(s.dropped == 0);
    nixl_telemetry_fpm_trace_close(t);

    char segment[300];
    snprintf(segment, sizeof segment, "%s.c-test.000000.jsonl.gz", prefix);
    FILE *f = fopen(segment, "rb");
    CHECK(f != NULL);
    if (f) {
        unsigned char magic[2] = {0, 0};
        CHECK(fread(magic, 1, 2, f) == 2);
        CHECK(magic[0] == 0x1f && magic[1] == 0x8b);
        fclose(f);
        unlink(segment);
    }

    /* A child that exits without closing its trace: the exit handler writes it. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        nixl_telemetry_fpm_trace_t *left_open = NULL;
        if (nixl_telemetry_fpm_trace_open("default", "backend", "c-exit", &left_open) !=
            NIXL_TELEMETRY_SUCCESS)
            _exit(2);
        p.counter_id = 7;
        if (nixl_telemetry_fpm_trace_record(left_open, &p) != NIXL_TELEMETRY_SUCCESS) _exit(3);
        exit(0);
    }
    if (pid > 0) {
        int status = -1;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        char command[400];
        snprintf(command, sizeof command, "gzip -cd '%s.c-exit.000000.jsonl.gz'", prefix);
        FILE *rows = popen(command, "r");
        CHECK(rows != NULL);
        if (rows) {
            char line[2048];
            int found = 0;
            while (fgets(line, sizeof line, rows))
                if (strstr(line, "\"counter_id\":7")) found++;
            CHECK(pclose(rows) == 0);
            CHECK(found == 1);
        }
        snprintf(segment, sizeof segment, "%s.c-exit.000000.jsonl.gz", prefix);
        unlink(segment);
    }
    char lock[300];
    snprintf(lock, sizeof lock, "%s.c-test.lock", prefix);
    unlink(lock);
    snprintf(lock, sizeof lock, "%s.c-exit.lock", prefix);
    unlink(lock);
    rmdir(dir);

    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("test_fpm_trace: all checks passed\n");
    return 0;
}
