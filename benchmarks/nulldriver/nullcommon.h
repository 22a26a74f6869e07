/* What both null drivers share: handles, fake device addresses, host functions run at a sync.
 *
 * A null driver is a benchmark's test double of a GPU driver library: every call succeeds at once
 * with plausible outputs and touches no hardware. Device addresses are fake (never dereference
 * them); host and managed allocations are real memory, since callers may write to them. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void (*null_host_fn)(void *);

static uint64_t null_handles = 0x10000;            /* streams, events, modules, functions, contexts */
static uint64_t null_device_top = 0x7e0000000000ULL; /* the next fake device address */
static pthread_mutex_t null_lock = PTHREAD_MUTEX_INITIALIZER; /* guards null_pending */
static struct { null_host_fn fn; void *data; } *null_pending;
static size_t null_pending_count, null_pending_capacity;

/* A launch's extra array must be [BUFFER_POINTER, blob, BUFFER_SIZE, &size, END] (or absent). */
static int null_extra_ok(void **extra, void *end_marker) {
    return !extra || (extra[0] == (void *)1 && extra[1] && extra[2] == (void *)2 && extra[3] && extra[4] == end_marker
                      && *(size_t *)extra[3] <= 4096);
}

static void *null_handle(void) { return (void *)__atomic_add_fetch(&null_handles, 16, __ATOMIC_RELAXED); }

/* What the driver was asked for, counted so that a benchmark can say per operation how many host
 * functions and timing events a runtime made (work a real GPU makes expensive). Read and reset from
 * the benchmark through null_count and null_reset_counts. */
enum { NULL_HOST_FUNCTIONS, NULL_EVENTS_TIMED, NULL_EVENTS_UNTIMED, NULL_RECORDS_TIMED, NULL_RECORDS_UNTIMED,
       NULL_LAUNCHES, NULL_COPIES, NULL_COUNTERS };
static const char *const null_counter_names[NULL_COUNTERS] = {
    "host_functions", "events_timed", "events_untimed", "records_timed", "records_untimed", "launches", "copies"};
static uint64_t null_counts[NULL_COUNTERS];

static void null_counted(int counter) { __atomic_add_fetch(&null_counts[counter], 1, __ATOMIC_RELAXED); }

/* Handles are multiples of 16, so an event's handle carries whether it was created with timing in
 * bit 3: a record counts as timed or not without a table, even for events a runtime pools and reuses. */
#define NULL_TIMED_EVENT 0x8u

static void *null_event(int timed) {
    null_counted(timed ? NULL_EVENTS_TIMED : NULL_EVENTS_UNTIMED);
    return (void *)((uintptr_t)null_handle() | (timed ? NULL_TIMED_EVENT : 0));
}

static void null_event_recorded(const void *event) {
    null_counted((uintptr_t)event & NULL_TIMED_EVENT ? NULL_RECORDS_TIMED : NULL_RECORDS_UNTIMED);
}

/* The count named `name` (one of null_counter_names) since the last reset; UINT64_MAX for an unknown name. */
__attribute__((visibility("default"))) uint64_t null_count(const char *name) {
    for (int i = 0; i < NULL_COUNTERS; i++)
        if (strcmp(name, null_counter_names[i]) == 0) return __atomic_load_n(&null_counts[i], __ATOMIC_RELAXED);
    return UINT64_MAX;
}

__attribute__((visibility("default"))) void null_reset_counts(void) {
    for (int i = 0; i < NULL_COUNTERS; i++) __atomic_store_n(&null_counts[i], 0, __ATOMIC_RELAXED);
}

static uint64_t null_device_alloc(size_t size) {
    return __atomic_fetch_add(&null_device_top, (size + 255) & ~(uint64_t)255, __ATOMIC_RELAXED) + 256;
}

static void *null_host_alloc(size_t size) {
    void *p = NULL;
    return posix_memalign(&p, 4096, size ? size : 1) == 0 ? p : NULL;
}

/* Host functions wait for the next synchronising call (every stream counts as done by then). */
static int null_enqueue_host(null_host_fn fn, void *data) {
    null_counted(NULL_HOST_FUNCTIONS);
    pthread_mutex_lock(&null_lock);
    if (null_pending_count == null_pending_capacity) {
        size_t capacity = null_pending_capacity ? 2 * null_pending_capacity : 64;
        void *grown = realloc(null_pending, capacity * sizeof *null_pending);
        if (!grown) { pthread_mutex_unlock(&null_lock); return 2; } /* out of memory, both APIs */
        null_pending = grown;
        null_pending_capacity = capacity;
    }
    null_pending[null_pending_count].fn = fn;
    null_pending[null_pending_count++].data = data;
    pthread_mutex_unlock(&null_lock);
    return 0;
}

static int null_run_host(void) {
    for (;;) {
        pthread_mutex_lock(&null_lock);
        size_t count = null_pending_count;
        void *taken = null_pending;
        null_pending = NULL;
        null_pending_count = null_pending_capacity = 0;
        pthread_mutex_unlock(&null_lock);
        if (!count) { free(taken); return 0; }
        struct { null_host_fn fn; void *data; } *calls = taken;
        for (size_t i = 0; i < count; i++) calls[i].fn(calls[i].data);
        free(taken);
    }
}
