/*
 * hugelab-mem: a small memory micro-benchmark whose results are sensitive to the
 * page size backing its buffer.  It maps one buffer with a chosen backing (4k,
 * THP, hugetlb 2 MiB / 1 GiB, multi-size THP, THP by MADV_COLLAPSE, shmem THP),
 * proves the backing through /proc/self/smaps, runs one workload for a fixed
 * duration, and prints ONE JSON object on stdout.
 *
 * mthp-<size> maps like thp (MADV_HUGEPAGE); which folio size the kernel gives is
 * decided by the host's per-size knobs, which hugelab sets for the arm.  The size is
 * any power of two from 8K (written 16K, 64K, 1M: as hugepages-<N>kB names it);
 * which sizes exist is the kernel's business, not this program's.
 * thp-collapse populates in 4 KiB pages (MADV_NOHUGEPAGE), then MADV_HUGEPAGE and
 * MADV_COLLAPSE over the buffer; the collapse's time and result are reported apart.
 * shmem-thp maps a memfd MAP_SHARED with MADV_HUGEPAGE (shmem_enabled 'advise').
 *
 * Build: cc -O2 -Wall -Wextra -Werror -static -pthread hugelab-mem.c -o hugelab-mem
 * Static so the same binary runs on the host and inside guests.
 *
 * Exit codes: 0 ok, 1 runtime failure, 2 bad arguments, 3 hugetlb mapping failed
 * (pool too small), 130 interrupted by SIGINT during setup.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1+ */
#endif

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

static const char *const workload_names[] = {"chase", "random", "seq-read", "seq-write",
                                             "populate"};
static const char *const backing_names[N_BACKINGS] = {
    "4k", "thp", "hugetlb-2M", "hugetlb-1G", "thp-collapse", "shmem-thp", "mthp-<size>"};

/* "mthp-64K" -> 64, "mthp-1M" -> 1024: a power of two of at least 8 kB, written as the
 * kernel's hugepages-<N>kB directories name it (1M, not 1024K); 2M is thp.  0 otherwise. */
static unsigned parse_mthp(const char *s)
{
    if (strncmp(s, "mthp-", 5) != 0 || !isdigit((unsigned char)s[5]) || s[5] == '0')
        return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(s + 5, &end, 10);
    if (errno || n > (1UL << 20) || end[0] == '\0' || end[1] != '\0')
        return 0;
    unsigned long kb = end[0] == 'M' ? n * 1024 : end[0] == 'K' ? n : 0;
    if (kb < 8 || (kb & (kb - 1)) || kb == 2048 || (end[0] == 'K' && kb % 1024 == 0))
        return 0;
    return (unsigned)kb;
}

/* A backing's name into buf: backing_names, or mthp-<size> with its size. */
static void backing_label(enum backing b, unsigned kb, char *buf, size_t n)
{
    if (b != B_MTHP)
        snprintf(buf, n, "%s", backing_names[b]);
    else if (kb % 1024 == 0)
        snprintf(buf, n, "mthp-%uM", kb / 1024);
    else
        snprintf(buf, n, "mthp-%uK", kb);
}

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
};

/* Set by the SIGINT handler; workers poll it together with g_stop. */
static volatile sig_atomic_t g_sigint;
static int g_stop; /* accessed with __atomic builtins */

static void on_sigint(int sig)
{
    (void)sig;
    g_sigint = 1;
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
}

static void on_sigbus(int sig)
{
    static const char msg[] =
        "hugelab-mem: SIGBUS while touching the buffer: the hugetlb pool ran out of pages\n";
    (void)sig;
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
        /* nothing more we can do in a signal handler */
    }
    _exit(3);
}

static int should_stop(void)
{
    return __atomic_load_n(&g_stop, __ATOMIC_RELAXED);
}

__attribute__((noreturn, format(printf, 2, 3)))
static void die(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("hugelab-mem: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

/* Setup loops call this so a Ctrl-C during a long cycle build exits promptly. */
static void check_setup_interrupt(void)
{
    if (g_sigint)
        die(130, "interrupted during setup");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------- */
/* Random numbers: splitmix64 seeds, xorshift64* streams.                     */

static uint64_t splitmix64(uint64_t *state)
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

/* ------------------------------------------------------------------------- */
/* Argument parsing                                                            */

static void usage(FILE *out)
{
    fputs("usage: hugelab-mem --workload chase|random|seq-read|seq-write|populate\n"
          "                   --backing 4k|thp|hugetlb-2M|hugetlb-1G|thp-collapse|shmem-thp|\n"
          "                             mthp-<size>\n"
          "                   --size BYTES[K|M|G|T] --threads N --duration SECONDS\n"
          "                   [--seed N] [--stride BYTES]\n"
          "       hugelab-mem --workload chase|random --interleave BACKING,BACKING[,...]\n"
          "                   --size BYTES --duration SECONDS [--window MS]\n"
          "                   [--warmup MS] [--seed N]\n"
          "\n"
          "  chase      dependent loads over a random cyclic permutation of --stride-byte\n"
          "             slots (default 64); TLB-sensitive latency (ns_per_access)\n"
          "  random     independent random 8-byte loads (ns_per_access, accesses_per_s)\n"
          "  seq-read   sequential read bandwidth (mib_per_s)\n"
          "  seq-write  sequential write bandwidth (mib_per_s)\n"
          "  populate   mmap + first-touch + munmap in a loop (ns_per_page per 4 KiB;\n"
          "             with thp-collapse each round's MADV_COLLAPSE is timed too)\n"
          "\n"
          "mthp-<size> (mthp-16K, mthp-64K, mthp-1M...) maps like thp; the folio size\n"
          "comes from the kernel's per-size knobs (hugepages-<N>kB), which hugelab sets.\n"
          "\n"
          "--interleave maps one buffer of --size per backing (a backing may repeat)\n"
          "and measures them in alternating windows of --window ms (default 20), each\n"
          "round a random order and its mirror (ABBA), until --duration; every window's\n"
          "value is reported, so drift hits every buffer alike.  Each window starts\n"
          "with --warmup ms (default a quarter of --window) run but not measured: after\n"
          "a switch the TLB and caches still hold the other buffer's state.\n"
          "\n"
          "Prints one JSON object on stdout.  Exit 2: bad arguments; exit 3: a hugetlb\n"
          "mapping failed (pool too small).  --stride applies to chase only.\n",
          out);
}

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* A backing name -> its enum (and *kb, the folio size of mthp-<size>, else 0); -1: unknown. */
static int parse_backing(const char *s, unsigned *kb)
{
    *kb = parse_mthp(s);
    if (*kb)
        return B_MTHP;
    return lookup(s, backing_names, B_MTHP);
}

/* "64M", "2GiB", "4096" -> bytes; 0 on junk or overflow. */
static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return 0;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: return 0;
    }
    if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
        end += strlen(end);
    if (*end != '\0')
        return 0;
    if (shift && v > (SIZE_MAX >> shift))
        return 0;
    return (size_t)(v << shift);
}

static uint64_t parse_u64(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end != '\0' || *s == '-')
        die(2, "bad %s '%s': expected a non-negative integer", what, s);
    return v;
}

/* "4k,thp,4k": the backings of the interleaved buffers (a backing may repeat: A/A). */
static void parse_interleave(const char *list, struct config *cfg)
{
    char buf[512];
    if (strlen(list) >= sizeof buf)
        die(2, "--interleave list is too long");
    strcpy(buf, list);
    cfg->n_inter = 0;
    if (buf[0] == ',' || strstr(buf, ",,") || buf[strlen(buf) - 1] == ',')
        die(2, "--interleave '%s' has an empty backing", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        unsigned kb;
        int idx = parse_backing(tok, &kb);
        if (idx < 0)
            die(2, "unknown backing '%s' in --interleave", tok);
        if (cfg->n_inter == MAX_INTERLEAVE)
            die(2, "--interleave takes at most %d buffers", MAX_INTERLEAVE);
        cfg->inter_kb[cfg->n_inter] = kb;
        backing_label((enum backing)idx, kb, cfg->inter_name[cfg->n_inter],
                      sizeof cfg->inter_name[0]);
        cfg->inter[cfg->n_inter++] = (enum backing)idx;
    }
    if (cfg->n_inter < 2)
        die(2, "--interleave needs at least two backings, e.g. 4k,thp");
    cfg->backing = cfg->inter[0];
    cfg->mthp_kb = cfg->inter_kb[0];
    snprintf(cfg->name, sizeof cfg->name, "%s", cfg->inter_name[0]);
}

static void parse_args(int argc, char **argv, struct config *cfg)
{
    static const struct option opts[] = {
        {"workload", required_argument, 0, 'w'}, {"backing", required_argument, 0, 'b'},
        {"size", required_argument, 0, 's'},     {"threads", required_argument, 0, 't'},
        {"duration", required_argument, 0, 'd'}, {"seed", required_argument, 0, 'r'},
        {"stride", required_argument, 0, 'S'},   {"help", no_argument, 0, 'h'},
        {"interleave", required_argument, 0, 'I'}, {"window", required_argument, 0, 'W'},
        {"warmup", required_argument, 0, 'U'}, {0, 0, 0, 0}};
    int have_w = 0, have_b = 0, have_s = 0, c, idx;
    char *end;

    memset(cfg, 0, sizeof *cfg);
    cfg->threads = 1;
    cfg->duration = 1.0;
    cfg->seed = 1;
    cfg->stride = 64;
    cfg->window = 0.02;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if ((idx = lookup(optarg, workload_names, 5)) < 0)
                die(2, "unknown workload '%s' (chase|random|seq-read|seq-write|populate)",
                    optarg);
            cfg->workload = (enum workload)idx;
            have_w = 1;
            break;
        case 'b':
            if (cfg->n_inter)
                die(2, "--backing and --interleave exclude each other");
            if ((idx = parse_backing(optarg, &cfg->mthp_kb)) < 0)
                die(2, "unknown backing '%s' (4k|thp|hugetlb-2M|hugetlb-1G|thp-collapse|"
                       "shmem-thp|mthp-<size>, a size like 16K, 64K or 1M)", optarg);
            cfg->backing = (enum backing)idx;
            backing_label(cfg->backing, cfg->mthp_kb, cfg->name, sizeof cfg->name);
            have_b = 1;
            break;
        case 's':
            if ((cfg->size = parse_size(optarg)) == 0)
                die(2, "bad size '%s': expected BYTES with optional K/M/G/T suffix", optarg);
            have_s = 1;
            break;
        case 't': {
            uint64_t t = parse_u64(optarg, "thread count");
            if (t < 1 || t > 1024)
                die(2, "bad thread count '%s': expected 1..1024", optarg);
            cfg->threads = (unsigned)t;
            break;
        }
        case 'd':
            errno = 0;
            cfg->duration = strtod(optarg, &end);
            if (errno || end == optarg || *end != '\0' || !isfinite(cfg->duration) ||
                cfg->duration <= 0 || cfg->duration > 1e6)
                die(2, "bad duration '%s': expected seconds > 0", optarg);
            break;
        case 'r':
            cfg->seed = parse_u64(optarg, "seed");
            break;
        case 'S':
            if ((cfg->stride = parse_size(optarg)) == 0 || cfg->stride % 8 != 0)
                die(2, "bad stride '%s': expected a positive multiple of 8 bytes", optarg);
            cfg->stride_given = 1;
            break;
        case 'I':
            if (have_b)
                die(2, "--backing and --interleave exclude each other");
            parse_interleave(optarg, cfg);
            have_b = 1;
            break;
        case 'W':
            errno = 0;
            cfg->window = strtod(optarg, &end) / 1000.0;
            if (errno || end == optarg || *end != '\0' || !isfinite(cfg->window) ||
                cfg->window < 0.001 || cfg->window > 10.0)
                die(2, "bad window '%s': expected milliseconds in 1..10000", optarg);
            break;
        case 'U':
            errno = 0;
            cfg->warmup = strtod(optarg, &end) / 1000.0;
            if (errno || end == optarg || *end != '\0' || !isfinite(cfg->warmup) ||
                cfg->warmup < 0.0 || cfg->warmup > 10.0)
                die(2, "bad warmup '%s': expected milliseconds in 0..10000", optarg);
            cfg->warmup_given = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case ':':
            for (idx = 0; opts[idx].name; idx++)
                if (opts[idx].val == optopt)
                    die(2, "option --%s needs a value (see --help)", opts[idx].name);
            die(2, "option '%s' needs a value (see --help)", argv[optind - 1]);
        default:
            die(2, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die(2, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!have_w || !have_b || !have_s)
        die(2, "--workload, --backing and --size are required (see --help)");
    if (cfg->stride_given && cfg->workload != W_CHASE)
        die(2, "--stride applies to the chase workload only");
    if (cfg->n_inter && cfg->workload != W_CHASE && cfg->workload != W_RANDOM)
        die(2, "--interleave measures the chase and random workloads only");
    if (cfg->n_inter && cfg->threads != 1)
        die(2, "--interleave runs one thread");
    if (cfg->warmup_given && !cfg->n_inter)
        die(2, "--warmup goes with --interleave");
    if (cfg->n_inter && !cfg->warmup_given)
        cfg->warmup = cfg->window / 4.0;
    if (cfg->n_inter && cfg->duration < 2 * cfg->n_inter * (cfg->window + cfg->warmup))
        die(2, "--duration %.3g s is too short for one round of %u windows of %.3g ms "
            "(+ %.3g ms warm-up each)", cfg->duration, 2 * cfg->n_inter,
            cfg->window * 1000.0, cfg->warmup * 1000.0);
    if (cfg->size < BASE_PAGE)
        die(2, "size %zu is too small: at least 4096 bytes", cfg->size);
    if (cfg->workload == W_CHASE && cfg->size / cfg->stride < 2 * (size_t)cfg->threads)
        die(2, "size %zu holds too few %zu-byte slots for %u thread(s)", cfg->size,
            cfg->stride, cfg->threads);
    if ((cfg->workload == W_SEQ_READ || cfg->workload == W_SEQ_WRITE) &&
        cfg->size / cfg->threads < 64)
        die(2, "size %zu is too small for %u thread(s)", cfg->size, cfg->threads);
}

/* ------------------------------------------------------------------------- */
/* Mapping a buffer with a backing                                             */

struct mapping {
    char *base;     /* what the workload uses */
    size_t len;     /* mapped length starting at base (rounded to the page size) */
    char *resv;     /* the whole PROT_NONE reservation around it (guards, alignment) */
    size_t resv_len;
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static size_t backing_page_size(enum backing b)
{
    switch (b) {
    case B_HUGE2M: return 2UL << 20;
    case B_HUGE1G: return 1UL << 30;
    default: return BASE_PAGE;
    }
}

/*
 * Maps `len` bytes aligned to `align` inside a PROT_NONE reservation that leaves
 * at least one guard page on each side.  The guards keep the buffer in a VMA of
 * its own (thread stacks and scratch arrays would otherwise merge with it), so
 * the /proc/self/smaps evidence describes exactly this buffer.
 */
static int map_guarded(size_t len, size_t align, int extra_flags, struct mapping *m)
{
    size_t resv_len = len + align + 2 * BASE_PAGE;
    char *resv = mmap(NULL, resv_len, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (resv == MAP_FAILED)
        return -1;
    char *base = (char *)round_up((uintptr_t)resv + BASE_PAGE, align);
    void *p = mmap(base, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | extra_flags, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(resv, resv_len);
        errno = e;
        return -1;
    }
    m->base = base;
    m->len = len;
    m->resv = resv;
    m->resv_len = resv_len;
    return 0;
}

static int map_hugetlb(enum backing b, size_t size, struct mapping *m)
{
    int shift = b == B_HUGE1G ? 30 : 21;
    size_t page = backing_page_size(b);
    return map_guarded(round_up(size, page), page, MAP_HUGETLB | (shift << MAP_HUGE_SHIFT), m);
}

/* THP can only back 2 MiB-aligned, 2 MiB-sized extents of the range. */
static int map_thp(size_t size, struct mapping *m)
{
    if (map_guarded(round_up(size, PMD_SIZE), PMD_SIZE, 0, m) != 0)
        return -1;
    if (madvise(m->base, m->len, MADV_HUGEPAGE) != 0)
        fprintf(stderr, "hugelab-mem: warning: madvise(MADV_HUGEPAGE) failed: %s\n",
                strerror(errno));
    return 0;
}

static int map_4k(size_t size, struct mapping *m)
{
    if (map_guarded(round_up(size, BASE_PAGE), BASE_PAGE, 0, m) != 0)
        return -1;
    /* EINVAL means a kernel without THP: the mapping is 4 KiB-backed anyway. */
    madvise(m->base, m->len, MADV_NOHUGEPAGE);
    return 0;
}

/* Populated in 4 KiB pages first (MADV_NOHUGEPAGE); collapse_buffer() comes later. */
static int map_collapse(size_t size, struct mapping *m)
{
    if (map_guarded(round_up(size, PMD_SIZE), PMD_SIZE, 0, m) != 0)
        return -1;
    madvise(m->base, m->len, MADV_NOHUGEPAGE);
    return 0;
}

/* A memfd (shmem) mapped shared over the reserved range; its THP follows shmem_enabled. */
static int map_shmem(size_t size, struct mapping *m)
{
    size_t len = round_up(size, PMD_SIZE);
    if (map_guarded(len, PMD_SIZE, 0, m) != 0)
        return -1;
    int fd = memfd_create("hugelab-mem", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0 ||
        mmap(m->base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        munmap(m->resv, m->resv_len);
        errno = e;
        return -1;
    }
    close(fd); /* the mapping keeps the file */
    if (madvise(m->base, m->len, MADV_HUGEPAGE) != 0)
        fprintf(stderr, "hugelab-mem: warning: madvise(MADV_HUGEPAGE) on shmem failed: %s\n",
                strerror(errno));
    return 0;
}

/* Maps `size` bytes with the backing or exits with a message (3 for hugetlb pools). */
static void map_buffer(enum backing b, const char *name, size_t size, struct mapping *m)
{
    int rc;
    if (b == B_HUGE2M || b == B_HUGE1G) {
        rc = map_hugetlb(b, size, m);
        if (rc != 0) {
            int e = errno;
            die(3, "%s mapping of %zu bytes failed: %s -- is the %s pool large enough? "
                   "see /sys/kernel/mm/hugepages",
                name, round_up(size, backing_page_size(b)), strerror(e),
                b == B_HUGE1G ? "1 GiB" : "2 MiB");
        }
        return;
    }
    if (b == B_THP || b == B_MTHP)
        rc = map_thp(size, m); /* the folio size comes from the host's per-size knobs */
    else if (b == B_COLLAPSE)
        rc = map_collapse(size, m);
    else if (b == B_SHMEM)
        rc = map_shmem(size, m);
    else
        rc = map_4k(size, m);
    if (rc != 0)
        die(1, "%s mapping of %zu bytes failed: %s", name, size, strerror(errno));
}

static void unmap_buffer(struct mapping *m)
{
    munmap(m->resv, m->resv_len);
}

/* First touch of every base page: a write, so the kernel allocates a real page. */
static void populate(char *base, size_t len)
{
    for (size_t off = 0; off < len; off += BASE_PAGE)
        base[off] = (char)1;
}

/* One MADV_COLLAPSE over a populated buffer: its own wall time and result. */
struct collapse_rec {
    int done;
    int err;        /* 0, or the errno of MADV_COLLAPSE (or of MADV_HUGEPAGE before it) */
    double seconds; /* MADV_COLLAPSE alone */
};

/* Collapses the whole buffer into PMD-size THP.  MADV_HUGEPAGE first: MADV_COLLAPSE
 * refuses a VM_NOHUGEPAGE range (EINVAL), and the populate phase set that flag. */
static void collapse_buffer(struct mapping *m, struct collapse_rec *c)
{
    c->done = 1;
    c->err = 0;
    c->seconds = 0;
    if (madvise(m->base, m->len, MADV_HUGEPAGE) != 0) {
        c->err = errno;
        return;
    }
    double t0 = now_s();
    int rc = madvise(m->base, m->len, MADV_COLLAPSE);
    c->seconds = now_s() - t0;
    c->err = rc == 0 ? 0 : errno;
}

static const char *errno_name(int e)
{
    switch (e) {
    case 0: return "0";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case EBUSY: return "EBUSY";
    case EFAULT: return "EFAULT";
    case ENOSYS: return "ENOSYS";
    default: return "EOTHER";
    }
}

/* Collapse counts of the populate loop's rounds (thp-collapse), summed by workers. */
static uint64_t g_loop_collapses, g_loop_collapse_failures, g_loop_collapse_ns;

/* ------------------------------------------------------------------------- */
/* Evidence from /proc/self/smaps                                              */

#define N_EVIDENCE 10
static const char *const evidence_keys[N_EVIDENCE] = {
    "Size", "Rss", "AnonHugePages", "KernelPageSize", "MMUPageSize",
    "Private_Hugetlb", "Shared_Hugetlb", "ShmemPmdMapped", "FilePmdMapped",
    "THPeligible"}; /* THPeligible (a flag) stays last: print_evidence_fields relies on it */

struct evidence {
    long long v[N_EVIDENCE]; /* -1: field absent */
    int found;
};

static void read_evidence(const void *addr, struct evidence *ev)
{
    char line[512];
    int in_vma = 0;
    uintptr_t a = (uintptr_t)addr;
    FILE *f = fopen("/proc/self/smaps", "r");

    for (int i = 0; i < N_EVIDENCE; i++)
        ev->v[i] = -1;
    ev->found = 0;
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        if (sscanf(line, "%lx-%lx ", &s, &e) == 2) {
            if (in_vma)
                break; /* the next VMA starts: done */
            in_vma = a >= s && a < e;
            ev->found |= in_vma;
            continue;
        }
        if (!in_vma)
            continue;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        for (int i = 0; i < N_EVIDENCE; i++)
            if (strcmp(line, evidence_keys[i]) == 0)
                ev->v[i] = strtoll(colon + 1, NULL, 10);
    }
    fclose(f);
}

static void print_evidence_fields(const struct evidence *ev)
{
    for (int i = 0; i < N_EVIDENCE; i++) {
        int last = i == N_EVIDENCE - 1;
        const char *suffix = last ? "" : "_kB"; /* THPeligible is a flag, not a size */
        if (ev->v[i] < 0)
            printf("\"%s%s\":null%s", evidence_keys[i], suffix, last ? "" : ",");
        else
            printf("\"%s%s\":%lld%s", evidence_keys[i], suffix, ev->v[i], last ? "" : ",");
    }
}

/* ------------------------------------------------------------------------- */
/* Threads: a start barrier, a main thread that sleeps for the duration.        */

struct worker {
    pthread_t tid;
    unsigned index;
    const struct config *cfg;
    char *base;          /* buffer (or slice for seq) */
    size_t len;          /* bytes this worker covers */
    size_t nslots;       /* chase/random: number of slots/words in the whole buffer */
    size_t start;        /* chase: starting slot */
    pthread_barrier_t *barrier;
    /* results */
    double elapsed;      /* seconds this worker spent measuring */
    uint64_t ops;        /* loads (chase/random), bytes (seq), pages (populate) */
    uint64_t checksum;
};

static double thread_begin(struct worker *w)
{
    pthread_barrier_wait(w->barrier);
    return now_s();
}

/* CHUNK_LOADS dependent loads along the chase cycle. */
static inline void **chase_chunk(void **p)
{
    for (size_t k = 0; k < CHUNK_LOADS; k += 8) {
        p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
        p = (void **)*p; p = (void **)*p; p = (void **)*p; p = (void **)*p;
    }
    return p;
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

static void *chase_worker(void *arg)
{
    struct worker *w = arg;
    size_t stride = w->cfg->stride;
    void **p = (void **)(w->base + w->start * stride);
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
    do {
        sum += random_chunk(words, nwords, &rng);
        n += CHUNK_LOADS;
    } while (!should_stop());
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
        for (size_t off = 0; off < len && !should_stop(); off += SEQ_CHUNK) {
            size_t n = len - off < SEQ_CHUNK ? len - off : SEQ_CHUNK;
            uint64_t *q = (uint64_t *)(w->base + off);
            if (write)
                fill_words(q, n / 8, pass);
            else
                sum += sum_words(q, n / 8);
            bytes += n;
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

/* Slot i points at slot perm[i]: a sequential pass over the buffer. */
static void link_slots(char *base, size_t stride, const uint32_t *perm, size_t n)
{
    for (size_t i = 0; i < n; i++)
        *(void **)(base + i * stride) = base + (size_t)perm[i] * stride;
}

static void build_chase(char *base, size_t nslots, size_t stride, uint64_t seed)
{
    size_t plen;
    if (nslots > UINT32_MAX)
        die(2, "chase over %zu slots is too large (max %u)", nslots, UINT32_MAX);
    uint32_t *perm = alloc_perm(nslots, &plen);
    sattolo(perm, nslots, seed);
    check_setup_interrupt();
    link_slots(base, stride, perm, nslots);
    munmap(perm, plen);
}

/* ------------------------------------------------------------------------- */
/* Folio census of the buffer: /proc/self/pagemap + /proc/kpageflags            */
/*
 * The same rules as hugelab.trial.folios.classify: a present page without compound flags
 * is a 4 KiB page; a run of a head and its tails at consecutive PFNs is one folio of
 * 2^ceil(log2 run) pages (THP flag), a hugetlb page (HUGE flag) or another compound page.
 * Read once after setup, by the process itself, while the buffer is stable: a sampler in
 * another process can race with a populate loop that unmaps and maps its buffer.
 */
#define KPF_HEAD (1ULL << 15)
#define KPF_TAIL (1ULL << 16)
#define KPF_HUGE_ (1ULL << 17)
#define KPF_THP_ (1ULL << 22)
#define PM_PRESENT_ (1ULL << 63)
#define PM_PFN (((uint64_t)1 << 55) - 1)
#define CENSUS_WINDOW 512    /* pages: 2 MiB, no folio up to PMD size crosses one */
#define CENSUS_BUDGET 16384  /* pages read at most: 64 MiB in evenly spread windows */
#define CENSUS_ORDERS 19     /* folio orders 0 (4 KiB) .. 18 (1 GiB) */

struct census {
    int available;
    const char *reason;
    uint64_t by_order[CENSUS_ORDERS]; /* pages in folios of each order */
    uint64_t hugetlb, partial, other, absent, sampled;
};

static unsigned order_of_run(uint64_t run)
{
    unsigned o = 0;
    while (((uint64_t)1 << o) < run && o + 1 < CENSUS_ORDERS)
        o++;
    return o;
}

static void census_window(int pm, int kf, uintptr_t first, size_t n, struct census *c)
{
    uint64_t pfn[CENSUS_WINDOW], fl[CENSUS_WINDOW];
    if (pread(pm, pfn, n * 8, (off_t)(first * 8)) != (ssize_t)(n * 8)) {
        c->reason = "pagemap could not be read";
        return;
    }
    for (size_t i = 0; i < n; i++) {
        fl[i] = 0;
        if (!(pfn[i] & PM_PRESENT_)) {
            pfn[i] = 0;
            continue;
        }
        pfn[i] &= PM_PFN;
        if (pfn[i] == 0) {
            c->reason = "pagemap hides page frame numbers (reading them needs root)";
            return;
        }
        if (pread(kf, &fl[i], 8, (off_t)(pfn[i] * 8)) != 8) {
            c->reason = "/proc/kpageflags could not be read";
            return;
        }
    }
    for (size_t i = 0; i < n;) {
        if (!pfn[i]) {
            c->absent++;
            i++;
            continue;
        }
        if (!(fl[i] & (KPF_HEAD | KPF_TAIL))) {
            c->by_order[0]++;
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && pfn[j] == pfn[i] + (j - i) && (fl[j] & KPF_TAIL) && !(fl[j] & KPF_HEAD))
            j++;
        uint64_t run = j - i;
        if (fl[i] & KPF_HUGE_)
            c->hugetlb += run;
        else if (!(fl[i] & KPF_THP_))
            c->other += run;
        else if (!(fl[i] & KPF_HEAD))
            c->partial += run;
        else
            c->by_order[order_of_run(run)] += run;
        i = j;
    }
    c->sampled += n;
}

/* The folio sizes of [base, base+len): whole when it fits the budget, else evenly spread
 * windows (the buffer is 2 MiB-aligned, so the windows are too). */
static void folio_census(const void *base, size_t len, struct census *c)
{
    memset(c, 0, sizeof *c);
    c->reason = "";
    int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    int kf = open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
    if (pm < 0 || kf < 0) {
        c->reason = kf < 0 ? "/proc/kpageflags is not readable (needs root)"
                           : "/proc/self/pagemap is not readable";
    } else {
        uintptr_t first = (uintptr_t)base / BASE_PAGE;
        size_t pages = len / BASE_PAGE, windows = (pages + CENSUS_WINDOW - 1) / CENSUS_WINDOW;
        size_t want = pages <= CENSUS_BUDGET ? windows : CENSUS_BUDGET / CENSUS_WINDOW;
        if (!pages)
            c->reason = "empty buffer";
        for (size_t k = 0; k < want && !*c->reason; k++) {
            /* window k of `want` spread evenly over all `windows` (none left out at the end) */
            size_t off = (size_t)((uint64_t)k * windows / want) * CENSUS_WINDOW;
            census_window(pm, kf, first + off,
                          pages - off < CENSUS_WINDOW ? pages - off : CENSUS_WINDOW, c);
        }
        c->available = !*c->reason;
    }
    if (pm >= 0)
        close(pm);
    if (kf >= 0)
        close(kf);
}

static void print_size_label(uint64_t kb)
{
    if (kb % 1048576 == 0)
        printf("\"%lluG\"", (unsigned long long)(kb / 1048576));
    else if (kb % 1024 == 0)
        printf("\"%lluM\"", (unsigned long long)(kb / 1024));
    else
        printf("\"%lluK\"", (unsigned long long)kb);
}

/* The census in hugelab.trial.folios' schema (kB), as `"folios":{...}`. */
static void print_census(const struct census *c)
{
    const uint64_t kb = BASE_PAGE / 1024;
    if (!c->available) {
        printf("\"folios\":{\"available\":false,\"reason\":\"%s\",\"source\":\"hugelab-mem\"}",
               c->reason);
        return;
    }
    uint64_t present = c->hugetlb + c->partial + c->other;
    for (unsigned o = 0; o < CENSUS_ORDERS; o++)
        present += c->by_order[o];
    printf("\"folios\":{\"available\":true,\"source\":\"hugelab-mem\",\"samples\":1,"
           "\"folios_kb\":{");
    int first = 1;
    for (unsigned o = 0; o < CENSUS_ORDERS; o++) {
        if (!c->by_order[o])
            continue;
        printf(first ? "" : ",");
        print_size_label(((uint64_t)1 << o) * kb);
        printf(":%llu", (unsigned long long)(c->by_order[o] * kb));
        first = 0;
    }
    printf("},\"hugetlb_kb\":%llu,\"partial_kb\":%llu,\"other_kb\":%llu,\"present_kb\":%llu,"
           "\"absent_kb\":%llu,\"sampled_kb\":%llu}",
           (unsigned long long)(c->hugetlb * kb), (unsigned long long)(c->partial * kb),
           (unsigned long long)(c->other * kb), (unsigned long long)(present * kb),
           (unsigned long long)(c->absent * kb), (unsigned long long)(c->sampled * kb));
}

/* ------------------------------------------------------------------------- */
/* Output                                                                      */

struct outcome {
    double wall, setup, thread_time;
    uint64_t ops, checksum;
    struct evidence ev_setup, ev_end;
    struct collapse_rec collapse; /* thp-collapse: the setup's collapse (not measured) */
    struct evidence ev_before_collapse;
    struct census census; /* folio sizes of the buffer after setup */
};

static void print_metrics(const struct config *cfg, const struct outcome *o)
{
    double bytes_mib = (double)o->ops / (1024.0 * 1024.0);
    switch (cfg->workload) {
    case W_CHASE:
    case W_RANDOM:
        printf("\"ns_per_access\":%.4f,\"accesses\":%llu,\"accesses_per_s\":%.1f",
               o->thread_time * 1e9 / (double)o->ops, (unsigned long long)o->ops,
               (double)o->ops / o->wall);
        break;
    case W_SEQ_READ:
    case W_SEQ_WRITE:
        printf("\"mib_per_s\":%.2f,\"bytes\":%llu,\"passes\":%.3f", bytes_mib / o->wall,
               (unsigned long long)o->ops, (double)o->ops / (double)cfg->size);
        break;
    case W_POPULATE:
        printf("\"ns_per_page\":%.3f,\"gib_per_s\":%.4f,\"pages\":%llu",
               o->thread_time * 1e9 / (double)o->ops,
               (double)o->ops * BASE_PAGE / (1024.0 * 1024.0 * 1024.0) / o->wall,
               (unsigned long long)o->ops);
        break;
    }
}

static void print_primary(enum workload w)
{
    const char *name = "ns_per_access", *unit = "ns", *better = "lower";
    if (w == W_SEQ_READ || w == W_SEQ_WRITE) {
        name = "mib_per_s";
        unit = "MiB/s";
        better = "higher";
    } else if (w == W_POPULATE) {
        name = "ns_per_page";
    }
    printf("\"primary\":{\"name\":\"%s\",\"unit\":\"%s\",\"better\":\"%s\"}", name, unit, better);
}

static void print_json(const struct config *cfg, const struct outcome *o)
{
    printf("{\"tool\":\"hugelab-mem\",\"version\":%d,\"workload\":\"%s\",\"backing\":\"%s\","
           "\"size_bytes\":%zu,\"threads\":%u,\"seed\":%llu,",
           TOOL_VERSION, workload_names[cfg->workload], cfg->name, cfg->size,
           cfg->threads, (unsigned long long)cfg->seed);
    if (cfg->workload == W_CHASE)
        printf("\"stride_bytes\":%zu,", cfg->stride);
    printf("\"duration_s\":%.6f,\"setup_s\":%.6f,\"interrupted\":%s,\"checksum\":%llu,",
           o->wall, o->setup, g_sigint ? "true" : "false", (unsigned long long)o->checksum);
    printf("\"metrics\":{");
    print_metrics(cfg, o);
    printf("},");
    print_primary(cfg->workload);
    if (cfg->mthp_kb)
        printf(",\"mthp_kb\":%u", cfg->mthp_kb);
    if (o->collapse.done) {
        printf(",\"collapse\":{\"result\":\"%s\",\"errno\":%d,\"seconds\":%.6f",
               errno_name(o->collapse.err), o->collapse.err, o->collapse.seconds);
        if (cfg->workload == W_POPULATE)
            printf(",\"loop_collapses\":%llu,\"loop_failures\":%llu,\"loop_seconds\":%.6f",
                   (unsigned long long)g_loop_collapses,
                   (unsigned long long)g_loop_collapse_failures,
                   (double)g_loop_collapse_ns * 1e-9);
        printf(",\"before\":{");
        print_evidence_fields(&o->ev_before_collapse);
        printf("}}");
    }
    printf(",\"evidence\":{");
    print_evidence_fields(&o->ev_end);
    printf(",\"after_populate\":{");
    print_evidence_fields(&o->ev_setup);
    printf("},");
    print_census(&o->census);
    printf("}}\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------------- */

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_sigbus;
    sigaction(SIGBUS, &sa, NULL);
}

/* Splits the buffer among the workers according to the workload. */
static void plan_workers(const struct config *cfg, struct worker *ws, char *base)
{
    size_t nslots = cfg->workload == W_CHASE ? cfg->size / cfg->stride : cfg->size / 8;
    size_t share = cfg->size / cfg->threads / 64 * 64;
    for (unsigned i = 0; i < cfg->threads; i++) {
        struct worker *w = &ws[i];
        memset(w, 0, sizeof *w);
        w->index = i;
        w->cfg = cfg;
        w->nslots = nslots;
        w->start = nslots / cfg->threads * i;
        w->base = base;
        w->len = cfg->size;
        if (cfg->workload == W_SEQ_READ || cfg->workload == W_SEQ_WRITE) {
            w->base = base + share * i;
            w->len = share;
        } else if (cfg->workload == W_POPULATE) {
            w->len = round_up(cfg->size / cfg->threads, BASE_PAGE);
        }
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

/* ------------------------------------------------------------------------- */
/* Interleaved windows: one buffer per backing, measured in turn.              */

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

/* Runs buffer b's workload until `deadline`; returns the seconds measured. */
static double run_window(const struct config *cfg, struct ibuf *b, double deadline,
                         uint64_t *ops)
{
    uint64_t n = 0;
    double t0 = now_s(), t;
    if (cfg->workload == W_CHASE) {
        void **p = b->p;
        do {
            p = chase_chunk(p);
            n += CHUNK_LOADS;
        } while ((t = now_s()) < deadline && !g_sigint);
        b->p = p;
    } else {
        const uint64_t *words = (const uint64_t *)b->m.base;
        uint64_t nwords = cfg->size / 8, sum = b->sum, rng = b->rng;
        do {
            sum += random_chunk(words, nwords, &rng);
            n += CHUNK_LOADS;
        } while ((t = now_s()) < deadline && !g_sigint);
        b->sum = sum;
        b->rng = rng;
    }
    *ops = n;
    return t - t0;
}

/* Faults the buffers in turn, 2 MiB of each at a time, in a random order per turn: the
 * kernel hands them physical memory from the same places, so no buffer gets the better
 * part of memory by being populated first (in a VM, regions of guest-physical memory can
 * differ by 10% in latency). */
static void populate_interleaved(struct ibuf *b, unsigned nb, uint64_t seed)
{
    size_t len = 0;
    unsigned perm[MAX_INTERLEAVE];
    for (unsigned i = 0; i < nb; i++)
        len = b[i].m.len > len ? b[i].m.len : len;
    uint64_t st = seed ^ 0x9E3779B97F4A7C15ULL;
    for (size_t off = 0; off < len; off += PMD_SIZE) {
        for (unsigned i = 0; i < nb; i++)
            perm[i] = i;
        for (unsigned i = nb - 1; i > 0; i--) {
            unsigned j = (unsigned)bounded(splitmix64(&st), i + 1);
            unsigned tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp;
        }
        for (unsigned i = 0; i < nb; i++) {
            struct mapping *m = &b[perm[i]].m;
            if (off < m->len)
                populate(m->base + off, off + PMD_SIZE <= m->len ? PMD_SIZE : m->len - off);
        }
    }
}

static void setup_ibuf(const struct config *cfg, enum backing bk, struct ibuf *b)
{
    double t0 = now_s();
    if (bk == B_COLLAPSE) {
        read_evidence(b->m.base, &b->ev_before_collapse);
        collapse_buffer(&b->m, &b->collapse);
    }
    /* the same seed for every buffer: A/A buffers walk the same permutation */
    if (cfg->workload == W_CHASE)
        build_chase(b->m.base, cfg->size / cfg->stride, cfg->stride, cfg->seed);
    b->p = (void **)b->m.base;
    uint64_t st = cfg->seed;
    b->rng = splitmix64(&st) | 1;
    read_evidence(b->m.base, &b->ev_setup);
    folio_census(b->m.base, b->m.len, &b->census);
    b->setup = now_s() - t0;
    check_setup_interrupt();
}

static void print_window_list(const double *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        printf("%s%.4f", i ? "," : "", v[i]);
}

static int run_interleaved(const struct config *cfg)
{
    unsigned nb = cfg->n_inter;
    struct ibuf b[MAX_INTERLEAVE];
    memset(b, 0, sizeof b);
    size_t max_win = (size_t)(cfg->duration / cfg->window) + 4 * nb + 8;
    unsigned *order = calloc(max_win, sizeof *order);
    if (!order)
        die(1, "out of memory");
    double t_map = now_s();
    for (unsigned i = 0; i < nb; i++) {
        b[i].win_ns = calloc(max_win, sizeof(double));
        if (!b[i].win_ns)
            die(1, "out of memory");
        map_buffer(cfg->inter[i], cfg->inter_name[i], cfg->size, &b[i].m);
    }
    populate_interleaved(b, nb, cfg->seed);
    double populated = (now_s() - t_map) / nb;
    for (unsigned i = 0; i < nb; i++) {
        setup_ibuf(cfg, cfg->inter[i], &b[i]);
        b[i].setup += populated;
    }
    /* Rounds: a random order of the buffers, then its mirror (ABBA...), until the
     * duration is spent; only whole rounds run, so every buffer has as many windows. */
    uint64_t st = cfg->seed ^ 0xA5A5A5A5DEADBEEFULL;
    unsigned perm[MAX_INTERLEAVE], n_order = 0;
    double t_start = now_s(), t_end = t_start + cfg->duration;
    while (!g_sigint) {
        double round = 2.0 * nb * (cfg->window + cfg->warmup);
        if (n_order && now_s() + round > t_end)
            break;
        if (n_order + 2 * nb > max_win)
            break;
        for (unsigned i = 0; i < nb; i++)
            perm[i] = i;
        for (unsigned i = nb - 1; i > 0; i--) {
            unsigned j = (unsigned)bounded(splitmix64(&st), i + 1);
            unsigned tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp;
        }
        for (unsigned half = 0; half < 2; half++) {
            for (unsigned i = 0; i < nb; i++) {
                unsigned k = half ? perm[nb - 1 - i] : perm[i];
                uint64_t ops;
                if (cfg->warmup > 0.0) /* after the switch: run, do not measure */
                    run_window(cfg, &b[k], now_s() + cfg->warmup, &ops);
                double secs = run_window(cfg, &b[k], now_s() + cfg->window, &ops);
                b[k].win_ns[b[k].n_win++] = secs * 1e9 / (double)ops;
                b[k].time += secs;
                b[k].ops += ops;
                order[n_order++] = k;
            }
        }
    }
    double wall = now_s() - t_start;
    for (unsigned i = 0; i < nb; i++)
        read_evidence(b[i].m.base, &b[i].ev_end);

    printf("{\"tool\":\"hugelab-mem\",\"version\":%d,\"mode\":\"interleaved\","
           "\"workload\":\"%s\",\"size_bytes\":%zu,\"threads\":1,\"seed\":%llu,",
           TOOL_VERSION, workload_names[cfg->workload], cfg->size,
           (unsigned long long)cfg->seed);
    if (cfg->workload == W_CHASE)
        printf("\"stride_bytes\":%zu,", cfg->stride);
    printf("\"duration_s\":%.6f,\"window_s\":%.6f,\"warmup_s\":%.6f,\"interrupted\":%s,",
           wall, cfg->window, cfg->warmup, g_sigint ? "true" : "false");
    print_primary(cfg->workload);
    printf(",\"order\":[");
    for (unsigned i = 0; i < n_order; i++)
        printf("%s%u", i ? "," : "", order[i]);
    printf("],\"buffers\":[");
    for (unsigned i = 0; i < nb; i++) {
        uint64_t checksum = cfg->workload == W_CHASE
                                ? (uint64_t)((char *)b[i].p - b[i].m.base) : b[i].sum;
        printf("%s{\"backing\":\"%s\",\"setup_s\":%.6f,\"checksum\":%llu,\"metrics\":{"
               "\"ns_per_access\":%.4f,\"accesses\":%llu,\"accesses_per_s\":%.1f},"
               "\"windows_ns\":[", i ? "," : "", cfg->inter_name[i], b[i].setup,
               (unsigned long long)checksum,
               b[i].ops ? b[i].time * 1e9 / (double)b[i].ops : 0.0,
               (unsigned long long)b[i].ops, b[i].time > 0 ? (double)b[i].ops / b[i].time : 0.0);
        print_window_list(b[i].win_ns, b[i].n_win);
        printf("]");
        if (cfg->inter_kb[i])
            printf(",\"mthp_kb\":%u", cfg->inter_kb[i]);
        if (b[i].collapse.done) {
            printf(",\"collapse\":{\"result\":\"%s\",\"errno\":%d,\"seconds\":%.6f,\"before\":{",
                   errno_name(b[i].collapse.err), b[i].collapse.err, b[i].collapse.seconds);
            print_evidence_fields(&b[i].ev_before_collapse);
            printf("}}");
        }
        printf(",\"evidence\":{");
        print_evidence_fields(&b[i].ev_end);
        printf(",\"after_populate\":{");
        print_evidence_fields(&b[i].ev_setup);
        printf("},");
        print_census(&b[i].census);
        printf("}}");
    }
    printf("]}\n");
    fflush(stdout);
    for (unsigned i = 0; i < nb; i++) {
        unmap_buffer(&b[i].m);
        free(b[i].win_ns);
    }
    free(order);
    return g_sigint ? 130 : 0;
}

int main(int argc, char **argv)
{
    struct config cfg;
    struct outcome o;
    struct mapping m = {0};
    memset(&o, 0, sizeof o);
    parse_args(argc, argv, &cfg);
    install_signals();
    if (cfg.n_inter)
        return run_interleaved(&cfg);

    struct worker *ws = calloc(cfg.threads, sizeof *ws);
    if (!ws)
        die(1, "out of memory");
    double t_setup = now_s();
    if (cfg.workload == W_POPULATE) {
        /* One untimed map+touch proves the backing; the timed loop maps its own. */
        map_buffer(cfg.backing, cfg.name, round_up(cfg.size / cfg.threads, BASE_PAGE), &m);
        populate(m.base, round_up(cfg.size / cfg.threads, BASE_PAGE));
        if (cfg.backing == B_COLLAPSE) {
            read_evidence(m.base, &o.ev_before_collapse);
            collapse_buffer(&m, &o.collapse);
        }
        read_evidence(m.base, &o.ev_setup);
        folio_census(m.base, round_up(cfg.size / cfg.threads, BASE_PAGE), &o.census);
        unmap_buffer(&m);
        m.base = NULL;
    } else {
        map_buffer(cfg.backing, cfg.name, cfg.size, &m);
        populate(m.base, m.len);
        if (cfg.backing == B_COLLAPSE) {
            read_evidence(m.base, &o.ev_before_collapse);
            collapse_buffer(&m, &o.collapse);
        }
        if (cfg.workload == W_CHASE)
            build_chase(m.base, cfg.size / cfg.stride, cfg.stride, cfg.seed);
        read_evidence(m.base, &o.ev_setup);
        folio_census(m.base, m.len, &o.census);
    }
    o.setup = now_s() - t_setup;
    check_setup_interrupt();

    plan_workers(&cfg, ws, m.base);
    o.wall = run_workers(ws, cfg.threads, worker_fn(cfg.workload), cfg.duration);
    collect(ws, cfg.threads, &o);

    if (m.base)
        read_evidence(m.base, &o.ev_end);
    else
        o.ev_end = o.ev_setup;
    if ((m.base && !o.ev_end.found) || !o.ev_setup.found)
        fprintf(stderr, "hugelab-mem: warning: buffer not found in /proc/self/smaps\n");
    print_json(&cfg, &o);
    if (m.base)
        unmap_buffer(&m);
    free(ws);
    return g_sigint ? 130 : 0;
}
