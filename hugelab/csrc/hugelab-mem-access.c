/* hugelab-mem: the access patterns -- the chase cycle's setup, and the threads that run a
 * workload over the buffer for the duration and count what they did. */
#include "hugelab-mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

uint64_t g_loop_collapses, g_loop_collapse_failures, g_loop_collapse_ns;

/* ------------------------------------------------------------------------- */
/* Chase setup: Sattolo's algorithm gives a single random cycle.               */

/* A huge-page-backed scratch array speeds up the random swaps; it is freed
 * before measuring and never merges with the measured buffer's VMA. */
static uint32_t *alloc_perm(size_t n, size_t *len_out)
{
    size_t len = round_up(n * sizeof(uint32_t), PMD_SIZE);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die(1, "cannot allocate %zu bytes for the chase permutation: %s", len, strerror(errno));
    madvise(p, len, MADV_HUGEPAGE);
    *len_out = len;
    return p;
}

/* Sattolo's shuffle of 0..n-1 into a cyclic permutation.  The random index of
 * the swap PF iterations ahead is prefetched, so many cache misses overlap. */
#define PF 16
static void sattolo(uint32_t *a, size_t n, uint64_t seed)
{
    uint64_t st = seed, rng = splitmix64(&st) | 1;
    size_t ring[PF];
    for (size_t i = 0; i < n; i++)
        a[i] = (uint32_t)i;
    /* iteration for index i (n-1 down to 1) swaps a[i] with a[j], j in [0, i) */
    for (size_t k = 0; k < PF; k++) {
        ring[k] = k + 1 < n ? bounded(xorshift64s(&rng), n - 1 - k) : 0;
    }
    for (size_t i = n - 1, k = 0; i >= 1; i--, k++) {
        size_t slot = k % PF, j = ring[slot];
        if (i > PF) {
            size_t ahead = i - PF;
            ring[slot] = bounded(xorshift64s(&rng), ahead);
            __builtin_prefetch(&a[ring[slot]], 1, 0);
        }
        uint32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
        if ((k & 0xFFFFF) == 0)
            check_setup_interrupt();
    }
}

size_t chase_slots(const struct layout *l, size_t stride)
{
    return l->span / stride * l->count;
}

/* Slot i's address: span/stride slots at the start of each span (dense: one span). */
static char *slot_at(char *base, const struct layout *l, size_t stride, size_t i)
{
    size_t per_span = l->span / stride;
    return base + i / per_span * l->step + i % per_span * stride;
}

/* Slot i points at slot perm[i]: a sequential pass over the buffer. */
static void link_slots(char *base, const struct layout *l, size_t stride, const uint32_t *perm,
                       size_t n)
{
    for (size_t i = 0; i < n; i++)
        *(void **)slot_at(base, l, stride, i) = slot_at(base, l, stride, perm[i]);
}

void build_chase(char *base, const struct layout *l, size_t stride, uint64_t seed)
{
    size_t plen, nslots = chase_slots(l, stride);
    if (nslots > UINT32_MAX)
        die(2, "chase over %zu slots is too large (max %u)", nslots, UINT32_MAX);
    uint32_t *perm = alloc_perm(nslots, &plen);
    sattolo(perm, nslots, seed);
    check_setup_interrupt();
    link_slots(base, l, stride, perm, nslots);
    munmap(perm, plen);
}

/* ------------------------------------------------------------------------- */
/* Threads: a start barrier, a main thread that sleeps for the duration.        */

struct worker {
    pthread_t tid;
    unsigned index;
    const struct config *cfg;
    char *base;          /* buffer (or slice for seq) */
    size_t len;          /* bytes this worker covers (seq: in each of its spans) */
    struct layout lay;   /* the buffer's layout (seq: this worker's spans) */
    size_t nslots;       /* chase/random: number of slots/words in the whole buffer */
    size_t start;        /* chase: starting slot */
    pthread_barrier_t *barrier;
    /* results */
    double elapsed;      /* seconds this worker spent measuring */
    uint64_t ops;        /* loads (chase/random), bytes (seq), pages (populate) */
    uint64_t checksum;
};

struct worker *alloc_workers(unsigned n)
{
    struct worker *ws = calloc(n, sizeof *ws);
    if (!ws)
        die(1, "out of memory");
    return ws;
}

static double thread_begin(struct worker *w)
{
    pthread_barrier_wait(w->barrier);
    return now_s();
}

static void *chase_worker(void *arg)
{
    struct worker *w = arg;
    void **p = (void **)slot_at(w->base, &w->lay, w->cfg->stride, w->start);
    uint64_t n = 0;
    double t0 = thread_begin(w);
    do {
        p = chase_chunk(p);
        n += CHUNK_LOADS;
    } while (!should_stop());
    w->elapsed = now_s() - t0;
    w->ops = n;
    w->checksum = (uint64_t)((char *)p - w->base);
    return NULL;
}

static void *random_worker(void *arg)
{
    struct worker *w = arg;
    const uint64_t *words = (const uint64_t *)w->base;
    uint64_t nwords = w->nslots, sum = 0, n = 0;
    uint64_t seed_state = w->cfg->seed ^ (0x5851F42D4C957F2DULL * (w->index + 1));
    uint64_t rng = splitmix64(&seed_state) | 1;
    double t0 = thread_begin(w);
    if (w->cfg->sparse) {
        do {
            sum += sparse_random_chunk(w->base, &w->lay, &rng);
            n += CHUNK_LOADS;
        } while (!should_stop());
    } else {
        do {
            sum += random_chunk(words, nwords, &rng);
            n += CHUNK_LOADS;
        } while (!should_stop());
    }
    w->elapsed = now_s() - t0;
    w->ops = n;
    w->checksum = sum;
    return NULL;
}

/* Eight independent accumulators keep many loads in flight without SIMD code;
 * a software prefetch 4 KiB ahead keeps streaming across 4 KiB page boundaries,
 * where hardware prefetchers stop (prefetches never fault past the end). */
#define PREFETCH_WORDS 512
static uint64_t sum_words(const uint64_t *q, size_t nwords)
{
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i + 8 <= nwords; i += 8) {
        __builtin_prefetch(q + i + PREFETCH_WORDS);
        a0 += q[i]; a1 += q[i + 1]; a2 += q[i + 2]; a3 += q[i + 3];
        a4 += q[i + 4]; a5 += q[i + 5]; a6 += q[i + 6]; a7 += q[i + 7];
    }
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

static void fill_words(uint64_t *q, size_t nwords, uint64_t v)
{
    for (size_t i = 0; i + 8 <= nwords; i += 8) {
        q[i] = v; q[i + 1] = v; q[i + 2] = v; q[i + 3] = v;
        q[i + 4] = v; q[i + 5] = v; q[i + 6] = v; q[i + 7] = v;
    }
}

static void *seq_worker(void *arg)
{
    struct worker *w = arg;
    int write = w->cfg->workload == W_SEQ_WRITE;
    uint64_t bytes = 0, sum = 0, pass = 0;
    size_t len = w->len / 64 * 64;
    double t0 = thread_begin(w);
    do {
        pass++;
        for (size_t s = 0; s < w->lay.count && !should_stop(); s++) {
            char *span = w->base + s * w->lay.step;
            for (size_t off = 0; off < len && !should_stop(); off += SEQ_CHUNK) {
                size_t n = len - off < SEQ_CHUNK ? len - off : SEQ_CHUNK;
                uint64_t *q = (uint64_t *)(span + off);
                if (write)
                    fill_words(q, n / 8, pass);
                else
                    sum += sum_words(q, n / 8);
                bytes += n;
            }
        }
    } while (!should_stop());
    w->elapsed = now_s() - t0;
    w->ops = bytes;
    w->checksum = write ? ((uint64_t *)w->base)[0] + pass : sum;
    return NULL;
}

static void *populate_worker(void *arg)
{
    struct worker *w = arg;
    uint64_t pages = 0, sum = 0;
    double t0 = thread_begin(w);
    do {
        struct mapping m;
        map_buffer(w->cfg->backing, w->cfg->name, w->len, &m);
        populate(m.base, w->len);
        if (w->cfg->backing == B_COLLAPSE) {
            struct collapse_rec c;
            collapse_buffer(&m, &c);
            __atomic_add_fetch(&g_loop_collapses, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&g_loop_collapse_ns, (uint64_t)(c.seconds * 1e9), __ATOMIC_RELAXED);
            if (c.err)
                __atomic_add_fetch(&g_loop_collapse_failures, 1, __ATOMIC_RELAXED);
        }
        sum += (unsigned char)m.base[w->len - 1];
        unmap_buffer(&m);
        pages += (w->len + BASE_PAGE - 1) / BASE_PAGE;
    } while (!should_stop());
    w->elapsed = now_s() - t0;
    w->ops = pages;
    w->checksum = sum;
    return NULL;
}

/* Sleeps until `deadline` (CLOCK_MONOTONIC seconds) or a SIGINT. */
static void sleep_until(double deadline)
{
    struct timespec ts;
    ts.tv_sec = (time_t)deadline;
    ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
    while (!g_sigint) {
        int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        if (rc != EINTR)
            break;
    }
}

/* Starts the workers, lets them run for the duration, stops and joins them.
 * Workers block SIGINT so that it always reaches the sleeping main thread. */
static double run_workers(struct worker *ws, unsigned n, void *(*fn)(void *), double duration)
{
    pthread_barrier_t barrier;
    sigset_t block, old;
    pthread_barrier_init(&barrier, NULL, n + 1);
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (unsigned i = 0; i < n; i++) {
        ws[i].barrier = &barrier;
        int rc = pthread_create(&ws[i].tid, NULL, fn, &ws[i]);
        if (rc != 0)
            die(1, "pthread_create failed: %s", strerror(rc));
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_barrier_wait(&barrier);
    double t0 = now_s();
    sleep_until(t0 + duration);
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < n; i++)
        pthread_join(ws[i].tid, NULL);
    double wall = now_s() - t0;
    pthread_barrier_destroy(&barrier);
    return wall;
}

/* Seq: a slice of the buffer each (dense), or an equal run of its spans (sparse). */
static void plan_seq(const struct config *cfg, struct worker *w, char *base, unsigned i)
{
    if (!cfg->sparse) {
        size_t share = cfg->size / cfg->threads / 64 * 64;
        w->base = base + share * i;
        w->len = share;
        dense_layout(share, &w->lay);
        return;
    }
    size_t spans = w->lay.count / cfg->threads;
    w->base = base + spans * i * w->lay.step;
    w->len = w->lay.span;
    w->lay.count = spans;
}

/* Splits the buffer among the workers according to the workload. */
static void plan_workers(const struct config *cfg, struct worker *ws, char *base)
{
    struct layout lay;
    buffer_layout(cfg, &lay);
    size_t nslots = cfg->workload == W_CHASE ? chase_slots(&lay, cfg->stride) : cfg->size / 8;
    for (unsigned i = 0; i < cfg->threads; i++) {
        struct worker *w = &ws[i];
        memset(w, 0, sizeof *w);
        w->index = i;
        w->cfg = cfg;
        w->nslots = nslots;
        w->start = nslots / cfg->threads * i;
        w->base = base;
        w->len = cfg->size;
        w->lay = lay;
        if (cfg->workload == W_SEQ_READ || cfg->workload == W_SEQ_WRITE)
            plan_seq(cfg, w, base, i);
        else if (cfg->workload == W_POPULATE)
            w->len = round_up(cfg->size / cfg->threads, BASE_PAGE);
    }
}

static void *(*worker_fn(enum workload w))(void *)
{
    switch (w) {
    case W_CHASE: return chase_worker;
    case W_RANDOM: return random_worker;
    case W_SEQ_READ:
    case W_SEQ_WRITE: return seq_worker;
    default: return populate_worker;
    }
}

static void collect(struct worker *ws, unsigned n, struct outcome *o)
{
    for (unsigned i = 0; i < n; i++) {
        o->ops += ws[i].ops;
        o->thread_time += ws[i].elapsed;
        o->checksum ^= ws[i].checksum + 0x9E3779B97F4A7C15ULL * i;
    }
}

/* The workload over `base` (NULL for populate, which maps its own) on cfg->threads
 * workers for the duration: o->wall, ops, thread_time and checksum. */
void measure(const struct config *cfg, struct worker *ws, char *base, struct outcome *o)
{
    plan_workers(cfg, ws, base);
    o->wall = run_workers(ws, cfg->threads, worker_fn(cfg->workload), cfg->duration);
    collect(ws, cfg->threads, o);
}
