/*
 * A process that forks while its collector is busy: producer threads record, the flush runs
 * every millisecond and a reader thread drains the ring, while the main thread forks children
 * again and again. Each child finds its inherited handle refused (ERR_FORKED, nothing
 * recorded), destroys it, creates its own collector and reads back what it recorded. The
 * parent waits for each child with a timeout (a hang fails the test), and at the end its ring
 * holds only its own events, each once and in each thread's order, as many as its stats say
 * were exported. Also: a BUFFER agent re-created under its name while a child of the first
 * one still lives is accepted (the child does not keep the ring's lock).
 */
#include "check.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

enum { PRODUCERS = 2, FORKS = 120, CHILD_EVENTS = 10 };

/* Under AddressSanitizer (the sanitized build of these tests), the sanitizer's own allocator is
 * not fork-safe in the toolchains we use: a child can hang in malloc on a lock a thread of the
 * parent held inside the sanitizer at the fork, whatever the library does. There, the producers
 * pause around each fork and the parent flushes between forks instead of every millisecond;
 * the plain builds run the producers and the 1 ms flush through every fork. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static pthread_mutex_t g_gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_changed = PTHREAD_COND_INITIALIZER;
static int g_paused;  /* (under ASan) the producers must wait */
static int g_waiting; /* producers waiting at the gate */

/* A producer's stop between two bursts, while the main thread forks (under ASan only). */
static void gate_pass(void) {
    if (!UNDER_ASAN) return;
    pthread_mutex_lock(&g_gate);
    while (g_paused) {
        g_waiting++;
        pthread_cond_broadcast(&g_gate_changed);
        pthread_cond_wait(&g_gate_changed, &g_gate);
        g_waiting--;
    }
    pthread_mutex_unlock(&g_gate);
}

/* Waits until every running producer is at the gate (under ASan only). */
static void gate_close(int running) {
    if (!UNDER_ASAN) return;
    pthread_mutex_lock(&g_gate);
    g_paused = 1;
    while (g_waiting < running) pthread_cond_wait(&g_gate_changed, &g_gate);
    pthread_mutex_unlock(&g_gate);
}

static void gate_open(void) {
    if (!UNDER_ASAN) return;
    pthread_mutex_lock(&g_gate);
    g_paused = 0;
    pthread_cond_broadcast(&g_gate_changed);
    pthread_mutex_unlock(&g_gate);
}

/* Parent events: type TX_BYTES, value (producer + 1) << 40 | sequence number. */
#define PRODUCER_SHIFT 40
/* A value only children record (on their inherited handle): it must never reach the parent. */
#define CHILD_MARK UINT64_C(0xC0FFEE0000000000)

static volatile int g_stop_producers;
static volatile int g_stop_reader;

struct producer {
    nixl_telemetry_t *t;
    uint64_t id;
    uint64_t recorded;
};

static void sleep_us(long us) {
    struct timespec ts;
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (us % 1000000) * 1000;
    nanosleep(&ts, NULL);
}

static void *produce(void *arg) {
    struct producer *p = (struct producer *)arg;
    uint64_t seq = 0;
    while (!g_stop_producers) {
        gate_pass();
        for (int i = 0; i < 16; i++) {
            uint64_t value = ((p->id + 1) << PRODUCER_SHIFT) | seq++;
            nixl_telemetry_status_t s =
                nixl_telemetry_update_data(p->t, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES, value);
            CHECK(s == NIXL_TELEMETRY_SUCCESS || s == NIXL_TELEMETRY_ERR_DROPPED);
        }
        sleep_us(200);
    }
    p->recorded = seq;
    return NULL;
}

struct reader {
    nixl_telemetry_ring_t *r;
    uint64_t events;
    uint64_t last[PRODUCERS];
    int seen[PRODUCERS];
};

/* Checks one event of the parent's ring: the parent's own, never seen before. */
static void check_parent_event(struct reader *rd, nixl_telemetry_event_t e) {
    rd->events++;
    if (e.event_type == NIXL_TELEMETRY_EVENT_AGENT_TELEMETRY_EVENTS_DROPPED) return;
    CHECK_U64(e.event_type, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES);
    uint64_t producer = (e.value >> PRODUCER_SHIFT) - 1;
    uint64_t seq = e.value & ((UINT64_C(1) << PRODUCER_SHIFT) - 1);
    CHECK(producer < PRODUCERS); /* no foreign event (the children's carry CHILD_MARK) */
    /* In each producer's order, each event once (a duplicated batch would go back). */
    CHECK(!rd->seen[producer] || seq > rd->last[producer]);
    rd->seen[producer] = 1;
    rd->last[producer] = seq;
}

static void *read_ring(void *arg) {
    struct reader *rd = (struct reader *)arg;
    for (;;) {
        int stopping = g_stop_reader;
        nixl_telemetry_event_t e;
        nixl_telemetry_status_t s;
        while ((s = nixl_telemetry_ring_pop(rd->r, &e)) == NIXL_TELEMETRY_SUCCESS) {
            check_parent_event(rd, e);
        }
        CHECK_STATUS(s, NIXL_TELEMETRY_EMPTY);
        if (stopping) return NULL; /* empty after the last flush */
        sleep_us(100);
    }
}

/* Waits for `pid` for at most 60 s; a child still running then is killed and fails the test. */
static void wait_child(pid_t pid) {
    int status = 0;
    for (int waited_ms = 0;; waited_ms++) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        CHECK(w == 0 || w == pid);
        if (w == pid) break;
        if (waited_ms >= 60000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CHECK(!"a forked child hung");
        }
        sleep_us(1000);
    }
    CHECK(WIFEXITED(status));
    CHECK_U64(WEXITSTATUS(status), 0);
}

/* The child: the inherited handle is refused; a collector of its own works. */
static void child_main(nixl_telemetry_t *inherited, const char *dir) {
    nixl_telemetry_stats_t stats;
    /* The logging sink's lock is not left held by a parent's thread. */
    struct log_capture cap;
    memset(&cap, 0, sizeof cap);
    nixl_telemetry_set_log_callback(capture_log, &cap);
    CHECK_STATUS(nixl_telemetry_update_data(inherited, NIXL_TELEMETRY_EVENT_AGENT_TX_BYTES,
                                            CHILD_MARK),
                 NIXL_TELEMETRY_ERR_FORKED);
    CHECK_LAST_ERROR_HAS("forked");
    CHECK_STATUS(nixl_telemetry_add_xfer_stats(inherited, 1, true, CHILD_MARK, 1),
                 NIXL_TELEMETRY_ERR_FORKED);
    CHECK_STATUS(nixl_telemetry_update_error(inherited, -3), NIXL_TELEMETRY_ERR_FORKED);
    CHECK_STATUS(nixl_telemetry_flush(inherited), NIXL_TELEMETRY_ERR_FORKED);
    CHECK_STATUS(nixl_telemetry_get_stats(inherited, &stats), NIXL_TELEMETRY_ERR_FORKED);
    nixl_telemetry_destroy(inherited); /* releases nothing of the parent's, never panics */
    CHECK(strstr(last_error(), "internal error") == NULL);
    /* One message for all the refusals. */
    CHECK(cap.calls == 1);
    CHECK(cap.last_level == NIXL_TELEMETRY_LOG_ERROR);
    CHECK(strstr(cap.last_message, "forked") != NULL);
    nixl_telemetry_set_log_callback(NULL, NULL);

    char name[64];
    snprintf(name, sizeof name, "child-%ld", (long)getpid());
    buffer_env(dir, "3600000");
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "64");
    nixl_telemetry_t *own = NULL;
    CHECK_STATUS(nixl_telemetry_create(name, true, &own), NIXL_TELEMETRY_SUCCESS);
    char *path = path_join(dir, name);
    nixl_telemetry_ring_t *r = NULL;
    CHECK_STATUS(nixl_telemetry_ring_open(path, &r), NIXL_TELEMETRY_SUCCESS);
    uint32_t types[CHILD_EVENTS];
    uint64_t values[CHILD_EVENTS];
    for (int i = 0; i < CHILD_EVENTS; i++) {
        types[i] = NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES;
        values[i] = CHILD_MARK | (uint64_t)i;
        CHECK_STATUS(nixl_telemetry_update_data(own, types[i], values[i]),
                     NIXL_TELEMETRY_SUCCESS);
    }
    CHECK_STATUS(nixl_telemetry_flush(own), NIXL_TELEMETRY_SUCCESS);
    EXPECT_EVENTS(r, types, values, CHILD_EVENTS);
    stats = get_stats(own);
    CHECK_U64(stats.events_exported, CHILD_EVENTS);
    nixl_telemetry_ring_close(r);
    nixl_telemetry_destroy(own);
    CHECK(unlink(path) == 0);
    free(path);
}

static void test_children_of_a_busy_collector(void) {
    char *dir = make_tmpdir();
    buffer_env(dir, UNDER_ASAN ? "3600000" : "1");
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "65536");
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("parent", true, &t), NIXL_TELEMETRY_SUCCESS);
    char *path = path_join(dir, "parent");
    struct reader rd;
    memset(&rd, 0, sizeof rd);
    CHECK_STATUS(nixl_telemetry_ring_open(path, &rd.r), NIXL_TELEMETRY_SUCCESS);

    pthread_t reader_thread;
    CHECK(pthread_create(&reader_thread, NULL, read_ring, &rd) == 0);
    struct producer producers[PRODUCERS];
    pthread_t threads[PRODUCERS];
    for (unsigned i = 0; i < PRODUCERS; i++) {
        producers[i].t = t;
        producers[i].id = i;
        producers[i].recorded = 0;
        CHECK(pthread_create(&threads[i], NULL, produce, &producers[i]) == 0);
    }
    for (int i = 0; i < FORKS; i++) {
        fflush(NULL);
        gate_close(PRODUCERS);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            child_main(t, dir);
            _exit(0);
        }
        gate_open();
        wait_child(pid);
        if (UNDER_ASAN) CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    }
    g_stop_producers = 1;
    for (unsigned i = 0; i < PRODUCERS; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
    }
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    nixl_telemetry_stats_t s = get_stats(t);
    g_stop_reader = 1;
    CHECK(pthread_join(reader_thread, NULL) == 0);
    printf("fork: %d children; parent accepted %" PRIu64 " dropped %" PRIu64 " exported %" PRIu64
           " lost %" PRIu64 "; its reader read %" PRIu64 "\n",
           FORKS, s.events_accepted, s.events_dropped, s.events_exported, s.events_lost,
           rd.events);
    /* The parent's stats are what its reader read: no child wrote into its ring. */
    CHECK_U64(rd.events, s.events_exported);
    CHECK_U64(s.events_accepted + s.events_dropped,
              producers[0].recorded + producers[1].recorded);
    CHECK_U64(s.events_exported + s.events_lost, s.events_accepted + s.drop_reports);
    nixl_telemetry_ring_close(rd.r);
    nixl_telemetry_destroy(t);
    free(path);
    rm_rf(dir);
    free(dir);
}

static void test_a_restarted_agent_is_accepted_while_a_child_lives(void) {
    char *dir = make_tmpdir();
    buffer_env(dir, "3600000");
    env_set("NIXL_TELEMETRY_BUFFER_SIZE", "64");
    nixl_telemetry_t *t = NULL;
    CHECK_STATUS(nixl_telemetry_create("restarted", true, &t), NIXL_TELEMETRY_SUCCESS);
    /* The child says when fork() has returned in it. Until then it shares the ring file's
     * open file description, and so its flock, with the parent: the library's fork handler
     * puts /dev/null over the descriptor in the child, but only once the child runs. Without
     * waiting, a re-creation racing a child not yet scheduled (a loaded machine) was refused
     * as a ring owned by another live writer. */
    int ready[2];
    CHECK(pipe(ready) == 0);
    fflush(NULL);
    pid_t sleeper = fork();
    CHECK(sleeper >= 0);
    if (sleeper == 0) {
        /* Past fork(): the fork handlers have run, the lock is released. */
        close(ready[0]);
        (void)!write(ready[1], "r", 1);
        close(ready[1]);
        /* Bounded and detached from the test's output, so a failing parent never leaves it
         * holding ctest's pipes. */
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        sleep(60);
        _exit(0);
    }
    close(ready[1]);
    char byte = 0;
    CHECK(read(ready[0], &byte, 1) == 1 && byte == 'r');
    close(ready[0]);
    /* The agent goes; its child lives on. */
    nixl_telemetry_destroy(t);
    t = NULL;
    CHECK_STATUS(nixl_telemetry_create("restarted", true, &t), NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_update_data(t, NIXL_TELEMETRY_EVENT_AGENT_RX_BYTES, 5),
                 NIXL_TELEMETRY_SUCCESS);
    CHECK_STATUS(nixl_telemetry_flush(t), NIXL_TELEMETRY_SUCCESS);
    CHECK_U64(get_stats(t).events_exported, 1);
    nixl_telemetry_destroy(t);
    CHECK(kill(sleeper, SIGKILL) == 0);
    int status = 0;
    CHECK(waitpid(sleeper, &status, 0) == sleeper);
    rm_rf(dir);
    free(dir);
}

int main(void) {
    tests_begin();
    RUN(test_children_of_a_busy_collector);
    RUN(test_a_restarted_agent_is_accepted_while_a_child_lives);
    return tests_end();
}
