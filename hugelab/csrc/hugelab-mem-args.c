/* hugelab-mem: the command line (--help, the options, their checks) into a struct config. */
#include "hugelab-mem.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const workload_names[N_WORKLOADS] = {"chase", "random", "seq-read", "seq-write",
                                                 "populate"};
const char *const backing_names[N_BACKINGS] = {
    "4k", "thp", "hugetlb-2M", "hugetlb-1G", "thp-collapse", "shmem-thp", "mthp-<size>"};

static const struct option opts[] = {
    {"workload", required_argument, 0, 'w'}, {"backing", required_argument, 0, 'b'},
    {"size", required_argument, 0, 's'},     {"threads", required_argument, 0, 't'},
    {"duration", required_argument, 0, 'd'}, {"seed", required_argument, 0, 'r'},
    {"stride", required_argument, 0, 'S'},   {"help", no_argument, 0, 'h'},
    {"interleave", required_argument, 0, 'I'}, {"window", required_argument, 0, 'W'},
    {"warmup", required_argument, 0, 'U'}, {"touch-fraction", required_argument, 0, 'F'},
    {0, 0, 0, 0}};

/* Which of the required options were given (--interleave counts as the backing). */
struct seen {
    int workload, backing, size;
};

static void usage(FILE *out)
{
    fputs("usage: hugelab-mem --workload chase|random|seq-read|seq-write|populate\n"
          "                   --backing 4k|thp|hugetlb-2M|hugetlb-1G|thp-collapse|shmem-thp|\n"
          "                             mthp-<size>\n"
          "                   --size BYTES[K|M|G|T] --threads N --duration SECONDS\n"
          "                   [--seed N] [--stride BYTES] [--touch-fraction F]\n"
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
          "--touch-fraction F (0 < F <= 1) writes only the first ceil(F*512) 4 KiB pages\n"
          "of each 2 MiB region (--size: whole regions) and the workload (chase, random,\n"
          "seq-read, seq-write) visits only those; \"layout\" in the output gives the\n"
          "touched kB and the resident kB each page size should then hold.\n"
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

/* The whole of s as a finite number, divided by `scale`, in *out; -1 on junk. */
static int parse_double(const char *s, double scale, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end) / scale;
    return errno || end == s || *end != '\0' || !isfinite(*out) ? -1 : 0;
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

/* --workload, --backing, --interleave: names. */
static void parse_name_option(int c, const char *arg, struct config *cfg, struct seen *seen)
{
    int idx;
    switch (c) {
    case 'w':
        if ((idx = lookup(arg, workload_names, N_WORKLOADS)) < 0)
            die(2, "unknown workload '%s' (chase|random|seq-read|seq-write|populate)", arg);
        cfg->workload = (enum workload)idx;
        seen->workload = 1;
        break;
    case 'b':
        if (cfg->n_inter)
            die(2, "--backing and --interleave exclude each other");
        if ((idx = parse_backing(arg, &cfg->mthp_kb)) < 0)
            die(2, "unknown backing '%s' (4k|thp|hugetlb-2M|hugetlb-1G|thp-collapse|"
                   "shmem-thp|mthp-<size>, a size like 16K, 64K or 1M)", arg);
        cfg->backing = (enum backing)idx;
        backing_label(cfg->backing, cfg->mthp_kb, cfg->name, sizeof cfg->name);
        seen->backing = 1;
        break;
    default: /* 'I' */
        if (seen->backing)
            die(2, "--backing and --interleave exclude each other");
        parse_interleave(arg, cfg);
        seen->backing = 1;
        break;
    }
}

/* --size, --threads, --seed, --stride: integers. */
static void parse_int_option(int c, const char *arg, struct config *cfg, struct seen *seen)
{
    uint64_t t;
    switch (c) {
    case 's':
        if ((cfg->size = parse_size(arg)) == 0)
            die(2, "bad size '%s': expected BYTES with optional K/M/G/T suffix", arg);
        seen->size = 1;
        break;
    case 't':
        t = parse_u64(arg, "thread count");
        if (t < 1 || t > 1024)
            die(2, "bad thread count '%s': expected 1..1024", arg);
        cfg->threads = (unsigned)t;
        break;
    case 'r':
        cfg->seed = parse_u64(arg, "seed");
        break;
    default: /* 'S' */
        if ((cfg->stride = parse_size(arg)) == 0 || cfg->stride % 8 != 0)
            die(2, "bad stride '%s': expected a positive multiple of 8 bytes", arg);
        cfg->stride_given = 1;
        break;
    }
}

/* --duration (seconds), --window and --warmup (milliseconds, kept in seconds). */
static void parse_time_option(int c, const char *arg, struct config *cfg)
{
    switch (c) {
    case 'd':
        if (parse_double(arg, 1.0, &cfg->duration) || cfg->duration <= 0 ||
            cfg->duration > 1e6)
            die(2, "bad duration '%s': expected seconds > 0", arg);
        break;
    case 'W':
        if (parse_double(arg, 1000.0, &cfg->window) || cfg->window < 0.001 ||
            cfg->window > 10.0)
            die(2, "bad window '%s': expected milliseconds in 1..10000", arg);
        break;
    default: /* 'U' */
        if (parse_double(arg, 1000.0, &cfg->warmup) || cfg->warmup < 0.0 ||
            cfg->warmup > 10.0)
            die(2, "bad warmup '%s': expected milliseconds in 0..10000", arg);
        cfg->warmup_given = 1;
        break;
    }
}

/* --touch-fraction: 0 < F <= 1, and the pages of each 2 MiB region it touches. */
static void parse_fraction(const char *arg, struct config *cfg)
{
    double f;
    if (parse_double(arg, 1.0, &f) || !(f > 0.0) || f > 1.0)
        die(2, "bad touch fraction '%s': expected a number in (0, 1]", arg);
    cfg->sparse = 1;
    cfg->touch_fraction = f;
    double pages = f * (double)(PMD_SIZE / BASE_PAGE); /* ceil, without libm */
    cfg->touch_pages = (size_t)pages;
    if ((double)cfg->touch_pages < pages)
        cfg->touch_pages++;
}

__attribute__((noreturn))
static void die_missing_value(char **argv)
{
    for (int idx = 0; opts[idx].name; idx++)
        if (opts[idx].val == optopt)
            die(2, "option --%s needs a value (see --help)", opts[idx].name);
    die(2, "option '%s' needs a value (see --help)", argv[optind - 1]);
}

static void parse_option(int c, char **argv, struct config *cfg, struct seen *seen)
{
    switch (c) {
    case 'h':
        usage(stdout);
        exit(0);
    case ':':
        die_missing_value(argv);
    case 'w': case 'b': case 'I':
        parse_name_option(c, optarg, cfg, seen);
        break;
    case 's': case 't': case 'r': case 'S':
        parse_int_option(c, optarg, cfg, seen);
        break;
    case 'd': case 'W': case 'U':
        parse_time_option(c, optarg, cfg);
        break;
    case 'F':
        parse_fraction(optarg, cfg);
        break;
    default:
        die(2, "unknown option '%s' (see --help)", argv[optind - 1]);
    }
}

/* --touch-fraction with the rest: whole regions, a workload that visits touched pages
 * only, room for every thread. */
static void check_sparse(const struct config *cfg)
{
    size_t regions = cfg->size / PMD_SIZE, span = cfg->touch_pages * BASE_PAGE;
    if (cfg->n_inter)
        die(2, "--touch-fraction and --interleave exclude each other");
    if (cfg->workload == W_POPULATE)
        die(2, "--touch-fraction applies to chase, random, seq-read and seq-write "
               "(populate's buffers come and go)");
    if (cfg->size % PMD_SIZE != 0)
        die(2, "--touch-fraction needs --size in whole 2 MiB regions, not %zu bytes", cfg->size);
    if (cfg->workload == W_CHASE && cfg->stride > span)
        die(2, "--stride %zu is larger than the %zu bytes touched per 2 MiB region",
            cfg->stride, span);
    if (cfg->workload == W_CHASE && span / cfg->stride * regions < 2 * (size_t)cfg->threads)
        die(2, "the touched pages hold too few %zu-byte slots for %u thread(s)", cfg->stride,
            cfg->threads);
    if ((cfg->workload == W_SEQ_READ || cfg->workload == W_SEQ_WRITE) && regions < cfg->threads)
        die(2, "%zu regions of 2 MiB are too few for %u thread(s)", regions, cfg->threads);
}

/* The options together: required ones, combinations, sizes the workload can use. */
static void check_args(struct config *cfg, const struct seen *seen)
{
    if (!seen->workload || !seen->backing || !seen->size)
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
    if (cfg->sparse) {
        check_sparse(cfg);
        return;
    }
    if (cfg->workload == W_CHASE && cfg->size / cfg->stride < 2 * (size_t)cfg->threads)
        die(2, "size %zu holds too few %zu-byte slots for %u thread(s)", cfg->size,
            cfg->stride, cfg->threads);
    if ((cfg->workload == W_SEQ_READ || cfg->workload == W_SEQ_WRITE) &&
        cfg->size / cfg->threads < 64)
        die(2, "size %zu is too small for %u thread(s)", cfg->size, cfg->threads);
}

void parse_args(int argc, char **argv, struct config *cfg)
{
    struct seen seen = {0, 0, 0};
    int c;

    memset(cfg, 0, sizeof *cfg);
    cfg->threads = 1;
    cfg->duration = 1.0;
    cfg->seed = 1;
    cfg->stride = 64;
    cfg->window = 0.02;
    cfg->touch_fraction = 1.0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1)
        parse_option(c, argv, cfg, &seen);
    if (optind < argc)
        die(2, "unexpected argument '%s' (see --help)", argv[optind]);
    check_args(cfg, &seen);
}
