/*
 * hugelab-mem's shared declarations: the configuration, the buffer, evidence and census
 * records, the run state shared by the access loops and the printers, and the small
 * helpers every part calls (die, clocks, random numbers, the inner access loops).
 *
 * One file per job: hugelab-mem.c (main, the single-buffer run), -args.c (the command
 * line and --help), -util.c (signals, exit, shared flags), -buffers.c (mapping a backing), -evidence.c
 * (smaps and the folio census), -access.c (the chase setup and the measuring threads),
 * -interleave.c (the interleaved windows) and -output.c (the JSON).
 */
#ifndef HUGELAB_MEM_H
#define HUGELAB_MEM_H

#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define TOOL_VERSION 1
#define MAX_INTERLEAVE 8
#define BASE_PAGE 4096UL
#define PMD_SIZE (2UL << 20)
#define CHUNK_LOADS 4096UL          /* loads between stop-flag checks (chase/random) */
#define SEQ_CHUNK (256UL << 10)     /* bytes between stop-flag checks (seq) */

enum workload { W_CHASE, W_RANDOM, W_SEQ_READ, W_SEQ_WRITE, W_POPULATE };
enum backing {
    B_4K, B_THP, B_HUGE2M, B_HUGE1G, B_COLLAPSE, B_SHMEM,
    B_MTHP, /* mthp-<size>: the size is config.mthp_kb (interleave: inter_kb) */
    N_BACKINGS
};

#define N_WORKLOADS 5
extern const char *const workload_names[N_WORKLOADS];
extern const char *const backing_names[N_BACKINGS];

struct config {
    enum workload workload;
    enum backing backing;
    unsigned mthp_kb; /* mthp-<size>: the folio size in kB */
    char name[32];    /* the backing as given: backing_names, or mthp-<size> */
    size_t size;
    unsigned threads;
    double duration;
    uint64_t seed;
    size_t stride;
    int stride_given;
    /* --interleave: one buffer per backing, measured in alternating windows */
    unsigned n_inter;
    enum backing inter[MAX_INTERLEAVE];
    unsigned inter_kb[MAX_INTERLEAVE]; /* each interleaved mthp buffer's folio size */
    char inter_name[MAX_INTERLEAVE][32];
    double window;
    double warmup;     /* seconds run, unmeasured, after each switch of buffer */
    int warmup_given;
    /* --touch-fraction: a sparse layout of whole 2 MiB regions (see struct layout) */
    int sparse;
    double touch_fraction;
    size_t touch_pages; /* ceil(touch_fraction * 512): 4 KiB pages written per region */
};

/* ---- The buffer's layout: which bytes the workload touches --------------------------- */
/*
 * `count` spans of `span` bytes, each starting `step` bytes after the one before.  Dense
 * (the default): one span, the whole buffer.  Sparse (--touch-fraction f): one span per
 * 2 MiB region, its first ceil(f*512) 4 KiB pages; the rest of each region is never touched,
 * so the resident memory is computable per page size (layout_expected_kb).
 */
struct layout {
    size_t span, step, count;
};

void buffer_layout(const struct config *cfg, struct layout *l);
void dense_layout(size_t size, struct layout *l);
/* kB the touched memory takes in pages (folios) of `page` bytes: each page holding a
 * touched byte is resident whole. */
uint64_t layout_expected_kb(const struct layout *l, size_t page);
/* The page size whose whole pages back this backing's touched memory. */
size_t backing_fault_size(const struct config *cfg);

/* ---- hugelab-mem-util.c: exit, signals, the stop flags ---------------------------- */

/* Set by the SIGINT handler; workers poll it together with g_stop. */
extern volatile sig_atomic_t g_sigint;
extern int g_stop; /* accessed with __atomic builtins */

__attribute__((noreturn, format(printf, 2, 3)))
void die(int code, const char *fmt, ...);
void check_setup_interrupt(void);
void install_signals(void);

static inline int should_stop(void)
{
    return __atomic_load_n(&g_stop, __ATOMIC_RELAXED);
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Random numbers: splitmix64 seeds, xorshift64* streams ----------------------- */

static inline uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t xorshift64s(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [0, bound) without a division (Lemire's multiply-high). */
static inline uint64_t bounded(uint64_t r, uint64_t bound)
{
    return (uint64_t)(((unsigned __int128)r * bound) >> 64);
}

static inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* ---- hugelab-mem-args.c -------------------------------------------------------------- */

void parse_args(int argc, char **argv, struct config *cfg);

/* ---- hugelab-mem-buffers.c: a buffer with a backing ------------------------------------ */

struct mapping {
    char *base;     /* what the workload uses */
    size_t len;     /* mapped length starting at base (rounded to the page size) */
    char *resv;     /* the whole PROT_NONE reservation around it (guards, alignment) */
    size_t resv_len;
};

/* One MADV_COLLAPSE over a populated buffer: its own wall time and result. */
struct collapse_rec {
    int done;
    int err;        /* 0, or the errno of MADV_COLLAPSE (or of MADV_HUGEPAGE before it) */
    double seconds; /* MADV_COLLAPSE alone (every attempt's, not the waits between) */
    int attempts;   /* MADV_COLLAPSEs made: more than one after a transient EAGAIN */
};

/* The setup's collapse: tried again after EAGAIN (the kernel's "temporary resource
 * contention", seen on a loaded host), up to this many times, COLLAPSE_WAIT_US apart. */
#define COLLAPSE_TRIES 3
#define COLLAPSE_WAIT_US 20000

void map_buffer(enum backing b, const char *name, size_t size, struct mapping *m);
void unmap_buffer(struct mapping *m);
void populate(char *base, size_t len);
void populate_layout(char *base, const struct layout *l);
/* map_buffer, with 4k buffers 2 MiB-aligned too: a sparse layout's regions are PMDs. */
void map_regions(enum backing b, const char *name, size_t size, struct mapping *m);
void collapse_buffer(struct mapping *m, struct collapse_rec *c);
void collapse_setup(struct mapping *m, struct collapse_rec *c);

/* ---- hugelab-mem-evidence.c: /proc/self/smaps and the folio census --------------------- */

#define N_EVIDENCE 10
extern const char *const evidence_keys[N_EVIDENCE];

struct evidence {
    long long v[N_EVIDENCE]; /* -1: field absent */
    int found;
};

#define CENSUS_ORDERS 19     /* folio orders 0 (4 KiB) .. 18 (1 GiB) */

struct census {
    int available;
    const char *reason;
    uint64_t by_order[CENSUS_ORDERS]; /* pages in folios of each order */
    uint64_t hugetlb, partial, other, absent, sampled;
};

void read_evidence(const void *addr, struct evidence *ev);
void folio_census(const void *base, size_t len, struct census *c);

/* ---- hugelab-mem-access.c: the chase cycle and the measuring threads ------------------ */

/* CHUNK_LOADS dependent loads along the chase cycle. */
static inline void **chase_chunk(void **p)
{
    for (size_t k = 0; k < CHUNK_LOADS; k += 8) {
        p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
        p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
    }
    return p;
}

/* Sparse: CHUNK_LOADS random 8-byte loads over the touched words only -- a span by the
 * high bits of each random number, a word of it by the low 32 bits. */
static inline uint64_t sparse_random_chunk(const char *base, const struct layout *l,
                                           uint64_t *rng)
{
    uint64_t sum = 0, words = l->span / 8;
    for (size_t k = 0; k < CHUNK_LOADS; k += 2) {
        uint64_t r = xorshift64s(rng), q = xorshift64s(rng);
        sum += *(const uint64_t *)(base + bounded(r, l->count) * l->step +
                                   (((q & 0xFFFFFFFFULL) * words) >> 32) * 8);
        sum += *(const uint64_t *)(base + bounded(q, l->count) * l->step +
                                   (((r & 0xFFFFFFFFULL) * words) >> 32) * 8);
    }
    return sum;
}

/* CHUNK_LOADS independent random 8-byte loads; their sum keeps them from being elided. */
static inline uint64_t random_chunk(const uint64_t *words, uint64_t nwords, uint64_t *rng)
{
    uint64_t sum = 0;
    for (size_t k = 0; k < CHUNK_LOADS; k += 4) {
        sum += words[bounded(xorshift64s(rng), nwords)];
        sum += words[bounded(xorshift64s(rng), nwords)];
        sum += words[bounded(xorshift64s(rng), nwords)];
        sum += words[bounded(xorshift64s(rng), nwords)];
    }
    return sum;
}

/* Collapse counts of the populate loop's rounds (thp-collapse), summed by workers. */
extern uint64_t g_loop_collapses, g_loop_collapse_failures, g_loop_collapse_ns;

/* What a single-buffer run measured and proved. */
struct outcome {
    double wall, setup, thread_time;
    uint64_t ops, checksum;
    struct evidence ev_setup, ev_end;
    struct collapse_rec collapse; /* thp-collapse: the setup's collapse (not measured) */
    struct evidence ev_before_collapse;
    struct census census; /* folio sizes of the buffer after setup */
};

struct worker; /* one measuring thread's share and results */

/* The chase's slots: `stride` bytes each, span/stride to a span of the layout. */
size_t chase_slots(const struct layout *l, size_t stride);
void build_chase(char *base, const struct layout *l, size_t stride, uint64_t seed);
struct worker *alloc_workers(unsigned n);
void measure(const struct config *cfg, struct worker *ws, char *base, struct outcome *o);

/* ---- hugelab-mem-interleave.c: one buffer per backing, measured in turn ---------------- */

struct ibuf {
    struct mapping m;
    void **p;                /* chase: where the walk stands */
    uint64_t rng, sum;       /* random */
    double setup;
    struct evidence ev_setup, ev_end, ev_before_collapse;
    struct census census;
    struct collapse_rec collapse;
    double *win_ns;          /* ns per access of each of this buffer's windows */
    unsigned n_win;
    double time;
    uint64_t ops;
};

/* The windows' order (buffer indexes) and the measuring's wall time. */
struct rounds {
    unsigned *order;
    unsigned n_order;
    double wall;
};

int run_interleaved(const struct config *cfg);

/* ---- hugelab-mem-output.c: one JSON object on stdout ----------------------------------- */

void print_json(const struct config *cfg, const struct outcome *o);
void print_interleaved(const struct config *cfg, const struct ibuf *b, const struct rounds *r);

#endif /* HUGELAB_MEM_H */
