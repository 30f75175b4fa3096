/*
 * The ring reader (nixl_telemetry_ring_open/pop/len/capacity/close) on files it did not write:
 * malformed, truncated, foreign-version or unreadable files are refused and left unchanged; a
 * hand-written ring is read with only read_pos written back; the ring files written by NIXL
 * itself (NIXL_TELEMETRY_FIXTURES, read from copies), and our version-5 one, are read exactly;
 * a reader learns from nixl_telemetry_ring_check that its ring was replaced or deleted.
 */
#include "check.h"

static void copy_file(const char *from, const char *to) {
    size_t len = 0;
    unsigned char *data = read_file(from, &len);
    if (!data) {
        fprintf(stderr, "cannot read fixture %s: %s\n", from, strerror(errno));
    }
    CHECK(data != NULL);
    write_file(to, data, len);
    free(data);
}

static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, sizeof v); }
static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, sizeof v); }
static void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, sizeof v); }
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A ring image: header plus `records` zeroed records (calloc'ed, `*len` bytes). */
static unsigned char *ring_image(uint64_t write_pos, uint64_t read_pos, int32_t version,
                                 uint64_t capacity, uint64_t mask, size_t records, size_t *len) {
    *len = RING_HEADER + records * RING_RECORD;
    unsigned char *b = (unsigned char *)calloc(1, *len);
    CHECK(b != NULL);
    put_u64(b + 0, write_pos);
    put_u64(b + 8, read_pos);
    put_i32(b + 16, version);
    put_i32(b + 20, 4);
    put_u64(b + 24, capacity);
    put_u64(b + 32, mask);
    return b;
}

/* ring_open refuses a bad file with `expected` and leaves it byte-for-byte unchanged. */
static void expect_open_refused_at(const char *file, int line, const char *path,
                                   const unsigned char *data, size_t len,
                                   nixl_telemetry_status_t expected, const char *message) {
    char what[512];
    nixl_telemetry_ring_t *r = SENTINEL_RING;
    nixl_telemetry_status_t s = nixl_telemetry_ring_open(path, &r);
    g_checks++;
    if (s != expected) {
        snprintf(what, sizeof what, "ring_open(%s) returned %d (%s), expected %d (%s)", path,
                 (int)s, status_name(s), (int)expected, status_name(expected));
        fail_at(file, line, what);
    }
    g_checks++;
    if (r != NULL) fail_at(file, line, "*out is NULL after a failed ring_open");
    g_checks++;
    if (message && !strstr(last_error(), message)) {
        snprintf(what, sizeof what, "ring_open(%s): last error contains \"%s\"", path, message);
        fail_at(file, line, what);
    }
    g_checks++;
    if (data && !file_equals(path, data, len)) {
        snprintf(what, sizeof what, "ring_open(%s) left the file unchanged", path);
        fail_at(file, line, what);
    }
}
#define EXPECT_OPEN_REFUSED(path, data, len, expected, message) \
    expect_open_refused_at(__FILE__, __LINE__, path, data, len, expected, message)

static void test_ring_open_bad_files(void) {
    char *dir = make_tmpdir();
    size_t len = 0;
    unsigned char *img;

    char *missing = path_join(dir, "missing");
    EXPECT_OPEN_REFUSED(missing, NULL, 0, NIXL_TELEMETRY_ERR_NOT_FOUND, "missing");
    CHECK(!path_exists(missing));
    free(missing);

    char *empty = path_join(dir, "empty");
    write_file(empty, "", 0);
    EXPECT_OPEN_REFUSED(empty, (const unsigned char *)"", 0, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(empty);

    char *tiny = path_join(dir, "tiny");
    write_file(tiny, "0123456789", 10);
    EXPECT_OPEN_REFUSED(tiny, (const unsigned char *)"0123456789", 10,
                        NIXL_TELEMETRY_ERR_MISMATCH, "too small");
    free(tiny);

    char *v3 = path_join(dir, "version3");
    img = ring_image(2, 0, 3, 16, 15, 16, &len);
    put_u32(img + RING_HEADER, 5);
    put_u64(img + RING_HEADER + 8, 55);
    write_file(v3, img, len);
    EXPECT_OPEN_REFUSED(v3, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "version");
    CHECK(path_exists(v3));
    free(img);
    free(v3);

    char *v0 = path_join(dir, "version0");
    img = ring_image(0, 0, 0, 16, 15, 16, &len);
    write_file(v0, img, len);
    EXPECT_OPEN_REFUSED(v0, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "version");
    free(img);
    free(v0);

    char *cap12 = path_join(dir, "cap12");
    img = ring_image(0, 0, 4, 12, 11, 12, &len);
    write_file(cap12, img, len);
    EXPECT_OPEN_REFUSED(cap12, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "power of two");
    free(img);
    free(cap12);

    char *cap0 = path_join(dir, "cap0");
    img = ring_image(0, 0, 4, 0, 0, 4, &len);
    write_file(cap0, img, len);
    EXPECT_OPEN_REFUSED(cap0, img, len, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(img);
    free(cap0);

    char *badmask = path_join(dir, "badmask");
    img = ring_image(0, 0, 4, 16, 7, 16, &len);
    write_file(badmask, img, len);
    EXPECT_OPEN_REFUSED(badmask, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "mask");
    free(img);
    free(badmask);

    char *trunc = path_join(dir, "truncated");
    img = ring_image(3, 0, 4, 16, 15, 8, &len); /* 16 records announced, 8 present */
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "truncated");
    free(img);
    img = ring_image(0, 0, 4, 16, 15, 0, &len); /* header only */
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, "truncated");
    free(img);
    img = ring_image(0, 0, 4, 16, 15, 16, &len); /* one byte short */
    write_file(trunc, img, len - 1);
    EXPECT_OPEN_REFUSED(trunc, img, len - 1, NIXL_TELEMETRY_ERR_MISMATCH, "truncated");
    free(img);
    /* Capacities whose size overflows or exceeds any file. */
    img = ring_image(0, 0, 4, (uint64_t)1 << 62, ((uint64_t)1 << 62) - 1, 4, &len);
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(img);
    img = ring_image(0, 0, 4, (uint64_t)1 << 63, ((uint64_t)1 << 63) - 1, 4, &len);
    write_file(trunc, img, len);
    EXPECT_OPEN_REFUSED(trunc, img, len, NIXL_TELEMETRY_ERR_MISMATCH, NULL);
    free(img);
    free(trunc);

    /* A directory is not a ring (the exact status is not specified; it must fail). */
    nixl_telemetry_ring_t *r = SENTINEL_RING;
    CHECK(nixl_telemetry_ring_open(dir, &r) < 0);
    CHECK(r == NULL);

    /* Unreadable for a non-root user: NOT_ALLOWED. */
    if (geteuid() != 0) {
        char *locked = path_join(dir, "locked");
        img = ring_image(0, 0, 4, 8, 7, 8, &len);
        write_file(locked, img, len);
        CHECK(chmod(locked, 0400) == 0);
        EXPECT_OPEN_REFUSED(locked, img, len, NIXL_TELEMETRY_ERR_NOT_ALLOWED, NULL);
        free(img);
        free(locked);
    }

    /* A valid hand-written ring: garbage padding ignored, larger file accepted, read_pos
     * written back to the file, the rest untouched. */
    char *good = path_join(dir, "good");
    img = ring_image(3, 0, 4, 8, 7, 9, &len); /* one extra trailing record */
    for (uint32_t i = 0; i < 3; i++) {
        unsigned char *rec = img + RING_HEADER + i * RING_RECORD;
        put_u32(rec, 10 + i);
        put_u32(rec + 4, 0xFFFFFFFFu); /* padding: must be ignored */
        put_u64(rec + 8, 100 + i);
    }
    write_file(good, img, len);
    r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(good, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(nixl_telemetry_ring_capacity(r), 8);
    CHECK_U64(nixl_telemetry_ring_len(r), 3);
    {
        static const uint32_t types[] = {10, 11, 12};
        static const uint64_t values[] = {100, 101, 102};
        EXPECT_EVENTS(r, types, values, 3);
    }
    nixl_telemetry_ring_close(r);
    {
        size_t n = 0;
        unsigned char *now = read_file(good, &n);
        CHECK(now != NULL);
        CHECK_U64(n, len);
        CHECK_U64(get_u64(now + 8), 3); /* read_pos advanced to write_pos */
        put_u64(img + 8, 3);
        CHECK(memcmp(now, img, len) == 0);
        free(now);
    }
    free(img);
    free(good);

    rm_rf(dir);
    free(dir);
}

/* Reads a copy of the ring fixture `name` of layout `version` (4: a 40-byte header, read_pos
 * at 8; 5: a 512-byte header, read_pos at 256) and checks its events and that only read_pos
 * moved. */
static void check_fixture(const char *fixtures, const char *tmp, const char *name,
                          int32_t version, uint64_t capacity, const uint32_t *types,
                          const uint64_t *values, size_t n, uint64_t final_read_pos) {
    const size_t header = version == NIXL_TELEMETRY_RING_VERSION_5 ? 512 : RING_HEADER;
    const size_t read_pos = version == NIXL_TELEMETRY_RING_VERSION_5 ? 256 : 8;
    char *orig = path_join(fixtures, name);
    char *copy = path_join(tmp, name);
    size_t orig_len = 0;
    unsigned char *orig_data = read_file(orig, &orig_len);
    if (!orig_data) fprintf(stderr, "fixture %s is missing\n", orig);
    CHECK(orig_data != NULL);
    CHECK_U64(orig_len, header + capacity * RING_RECORD);
    copy_file(orig, copy);

    nixl_telemetry_ring_t *r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(copy, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK(nixl_telemetry_ring_version(r) == version);
    CHECK_U64(nixl_telemetry_ring_capacity(r), capacity);
    CHECK_U64(nixl_telemetry_ring_len(r), n);
    EXPECT_EVENTS(r, types, values, n);
    CHECK_U64(nixl_telemetry_ring_len(r), 0);
    nixl_telemetry_ring_close(r);

    /* Popping advanced read_pos in the copy; the original is untouched. */
    size_t copy_len = 0;
    unsigned char *copy_data = read_file(copy, &copy_len);
    CHECK(copy_data != NULL);
    CHECK_U64(copy_len, orig_len);
    CHECK_U64(get_u64(copy_data + read_pos), final_read_pos);
    CHECK(memcmp(copy_data, orig_data, read_pos) == 0); /* before read_pos */
    CHECK(memcmp(copy_data + read_pos + 8, orig_data + read_pos + 8, orig_len - read_pos - 8) ==
          0); /* the rest */
    CHECK(file_equals(orig, orig_data, orig_len));
    free(copy_data);
    free(orig_data);
    free(copy);
    free(orig);
}

static void test_fixtures(void) {
    const char *fixtures = getenv("NIXL_TELEMETRY_FIXTURES");
    if (!fixtures || !*fixtures) {
        fprintf(stderr, "NIXL_TELEMETRY_FIXTURES is not set (ctest sets it): cannot read the "
                        "NIXL-written ring fixtures\n");
    }
    CHECK(fixtures != NULL && *fixtures);
    char *tmp = make_tmpdir();
    {
        uint32_t types[12];
        uint64_t values[12];
        for (uint32_t i = 0; i < 12; i++) {
            types[i] = 8 + i;
            values[i] = 1008 + i;
        }
        check_fixture(fixtures, tmp, "nixl-ring-v4-cap16-wrapped.bin", 4, 16, types, values, 12,
                      4);
    }
    {
        uint32_t types[7];
        uint64_t values[7];
        for (uint32_t i = 0; i < 7; i++) {
            types[i] = NIXL_TELEMETRY_EVENT_AGENT_XFER_TIME;
            values[i] = 50u * i;
        }
        check_fixture(fixtures, tmp, "nixl-ring-v4-cap8-full.bin", 4, 8, types, values, 7, 7);
    }
    check_fixture(fixtures, tmp, "nixl-ring-v4-cap4096-empty.bin", 4, 4096, NULL, NULL, 0, 0);
    {
        /* Ours: NIXL has not merged the version-5 layout, so no NIXL-written file exists. The
         * unread events end with the dropped-events report and the stalled transfer (20, 21). */
        const char *ours = getenv("NIXL_TEST_OWN_FIXTURES");
        CHECK(ours != NULL && *ours);
        static const uint32_t types[12] = {8, 9, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
        uint64_t values[12];
        for (uint32_t i = 0; i < 12; i++) values[i] = 1000 + types[i];
        if (ours && *ours)
            check_fixture(ours, tmp, "nixl-telemetry-ring-v5-cap16-wrapped.bin", 5, 16, types,
                          values, 12, 4);
    }
    rm_rf(tmp);
    free(tmp);
}

static void test_ring_check_sees_a_replaced_ring(void) {
    char *dir = make_tmpdir();
    char *path = path_join(dir, "agent");
    size_t len = 0;
    unsigned char *img = ring_image(0, 0, 4, 8, 7, 8, &len);
    write_file(path, img, len);
    free(img);
    nixl_telemetry_ring_t *r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_ring_check(r), NIXL_TELEMETRY_SUCCESS);
    /* Written as NIXL writes it: no loss count. */
    uint64_t lost = 99;
    CHECK_STATUS(nixl_telemetry_ring_lost(r, &lost), NIXL_TELEMETRY_ERR_NOT_FOUND);
    CHECK_U64(lost, 99);
    nixl_telemetry_event_t e;
    CHECK_STATUS(nixl_telemetry_ring_pop(r, &e), NIXL_TELEMETRY_EMPTY);

    /* A writer with another size replaces the file: pop still sees an empty ring... */
    char *next = path_join(dir, "agent.next");
    img = ring_image(1, 0, 4, 16, 15, 16, &len);
    put_u32(img + RING_HEADER, 3);
    put_u64(img + RING_HEADER + 8, 33);
    write_file(next, img, len);
    free(img);
    CHECK(rename(next, path) == 0);
    CHECK_STATUS(nixl_telemetry_ring_pop(r, &e), NIXL_TELEMETRY_EMPTY);
    /* ...and the check tells it to reopen, which reads the new ring. */
    CHECK_STATUS(nixl_telemetry_ring_check(r), NIXL_TELEMETRY_ERR_MISMATCH);
    CHECK_LAST_ERROR_HAS("another file");
    nixl_telemetry_ring_close(r);
    r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_ring_pop(r, &e), NIXL_TELEMETRY_SUCCESS);
    CHECK(e.event_type == 3 && e.value == 33);

    CHECK(unlink(path) == 0);
    CHECK_STATUS(nixl_telemetry_ring_check(r), NIXL_TELEMETRY_ERR_MISMATCH);
    CHECK_LAST_ERROR_HAS("deleted");
    nixl_telemetry_ring_close(r);
    CHECK_STATUS(nixl_telemetry_ring_check(NULL), NIXL_TELEMETRY_ERR_INVALID_PARAM);
    free(next);
    free(path);
    rm_rf(dir);
    free(dir);
}

int main(void) {
    tests_begin();
    RUN(test_ring_open_bad_files);
    RUN(test_ring_check_sees_a_replaced_ring);
    RUN(test_fixtures);
    return tests_end();
}
