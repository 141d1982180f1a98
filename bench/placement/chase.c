/* Where a buffer lands in physical memory: does it change how fast it is read?
 *
 *   chase PAGES REPEATS STEPS GROUP SMALL
 *
 * Maps PAGES x 2 MiB (hugetlb 2 MiB pages, or with SMALL=1 ordinary 4 KiB pages, THP off for
 * them), then for each group of GROUP consecutive 2 MiB pieces runs a dependent pointer chase
 * over one line in each of the group's 4 KiB pages (random order, random line): STEPS steps,
 * in REPEATS rounds over every group (round-robin, so that the machine's drift falls on every
 * group alike). One line per group: the first piece's page frame number (from
 * /proc/self/pagemap; needs root), each round's ns per step, and their minimum. Built by
 * bench/placement/placement.py with -O2 -Wall -Wextra. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PIECE (2UL << 20)
#define LINES_PER_PAGE 64
#define PAGES_PER_PIECE 512
#define MAX_GROUP 256

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t order[PAGES_PER_PIECE * MAX_GROUP];
static void **slot[PAGES_PER_PIECE * MAX_GROUP];

/* Link one line in each 4 KiB page of [base, base + m pages) into one random cycle. */
static void link_cycle(char *base, size_t m, uint64_t *seed) {
    for (size_t i = 0; i < m; i++) order[i] = i;
    for (size_t i = m - 1; i > 0; i--) {
        size_t j = next(seed) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < m; i++)
        slot[i] = (void **)(base + order[i] * 4096 + (next(seed) % LINES_PER_PAGE) * 64);
    for (size_t i = 0; i < m; i++) *slot[i] = (void *)slot[(i + 1) % m];
}

static double chase_ns(void **p, long steps) {
    double t0 = now();
    for (long s = 0; s < steps; s++) p = (void **)*p;
    double ns = (now() - t0) * 1e9 / (double)steps;
    if (p == NULL) puts("");  /* keeps the chase */
    return ns;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: chase PAGES REPEATS STEPS GROUP SMALL\n");
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10), g = strtoul(argv[4], NULL, 10);
    int reps = atoi(argv[2]), small = atoi(argv[5]);
    long steps = atol(argv[3]);
    if (n == 0 || g == 0 || g > MAX_GROUP || g > n || reps < 1 || steps < 1) {
        fprintf(stderr, "chase: PAGES, GROUP (at most %d and PAGES), REPEATS and STEPS must be "
                "positive\n", MAX_GROUP);
        return 2;
    }
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (small ? 0 : MAP_HUGETLB);
    char *buf = mmap(NULL, n * PIECE, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (buf == MAP_FAILED) {
        perror("chase: mmap");
        return 1;
    }
    if (small && madvise(buf, n * PIECE, MADV_NOHUGEPAGE) != 0) {
        perror("chase: madvise");
        return 1;
    }
    memset(buf, 1, n * PIECE);
    int pagemap = open("/proc/self/pagemap", O_RDONLY);
    uint64_t seed = 88172645463325252ULL;
    size_t ng = n / g;
    void ***start = calloc(ng, sizeof *start);
    double *ns = calloc(ng * (size_t)reps, sizeof *ns);
    if (start == NULL || ns == NULL) {
        perror("chase: calloc");
        return 1;
    }
    for (size_t i = 0; i < ng; i++) {
        link_cycle(buf + i * g * PIECE, PAGES_PER_PIECE * g, &seed);
        start[i] = slot[0];
    }
    for (int k = 0; k < reps; k++)
        for (size_t i = 0; i < ng; i++) ns[i * (size_t)reps + (size_t)k] = chase_ns(start[i], steps);
    for (size_t i = 0; i < ng; i++) {
        uint64_t entry = 0;
        off_t at = (off_t)((uintptr_t)(buf + i * g * PIECE) / 4096 * 8);
        if (pagemap < 0 || pread(pagemap, &entry, 8, at) != 8) entry = 0;
        printf("%llx", (unsigned long long)(entry & ((1ULL << 55) - 1)));
        double best = 1e9;
        for (int k = 0; k < reps; k++) {
            double v = ns[i * (size_t)reps + (size_t)k];
            best = v < best ? v : best;
            printf(" %.3f", v);
        }
        printf(" min %.3f\n", best);
    }
    return 0;
}
