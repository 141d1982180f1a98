/* hugelab-mem: what backs the buffer, as the kernel reports it: its VMA's /proc/self/smaps
 * fields, and a census of its folio sizes from /proc/self/pagemap + /proc/kpageflags. */
#include "hugelab-mem.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* Evidence from /proc/self/smaps                                              */

const char *const evidence_keys[N_EVIDENCE] = {
    "Size", "Rss", "AnonHugePages", "KernelPageSize", "MMUPageSize",
    "Private_Hugetlb", "Shared_Hugetlb", "ShmemPmdMapped", "FilePmdMapped",
    "THPeligible"}; /* THPeligible (a flag) stays last: print_evidence_fields relies on it */

void read_evidence(const void *addr, struct evidence *ev)
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

static unsigned order_of_run(uint64_t run)
{
    unsigned o = 0;
    while (((uint64_t)1 << o) < run && o + 1 < CENSUS_ORDERS)
        o++;
    return o;
}

/* The page frame and flags of n pages from `first` (0 and 0: absent); -1 with c->reason. */
static int read_frames(int pm, int kf, uintptr_t first, size_t n, uint64_t *pfn, uint64_t *fl,
                       struct census *c)
{
    if (pread(pm, pfn, n * 8, (off_t)(first * 8)) != (ssize_t)(n * 8)) {
        c->reason = "pagemap could not be read";
        return -1;
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
            return -1;
        }
        if (pread(kf, &fl[i], 8, (off_t)(pfn[i] * 8)) != 8) {
            c->reason = "/proc/kpageflags could not be read";
            return -1;
        }
    }
    return 0;
}

static void census_window(int pm, int kf, uintptr_t first, size_t n, struct census *c)
{
    uint64_t pfn[CENSUS_WINDOW], fl[CENSUS_WINDOW];
    if (read_frames(pm, kf, first, n, pfn, fl, c) != 0)
        return;
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
void folio_census(const void *base, size_t len, struct census *c)
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
