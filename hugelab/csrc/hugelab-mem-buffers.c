/* hugelab-mem: mapping a buffer with a backing (4k, THP, mTHP, hugetlb, MADV_COLLAPSE,
 * shmem THP), its layout (which bytes are touched), touching it, collapsing it. */
#include "hugelab-mem.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
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

static int map_4k(size_t size, size_t align, struct mapping *m)
{
    if (map_guarded(round_up(size, BASE_PAGE), align, 0, m) != 0)
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

/* Maps `size` bytes with the backing or exits with a message (3 for hugetlb pools); 4k
 * buffers aligned to `align4k`. */
static void map_aligned(enum backing b, const char *name, size_t size, size_t align4k,
                        struct mapping *m)
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
        rc = map_4k(size, align4k, m);
    if (rc != 0)
        die(1, "%s mapping of %zu bytes failed: %s", name, size, strerror(errno));
}

void map_buffer(enum backing b, const char *name, size_t size, struct mapping *m)
{
    map_aligned(b, name, size, BASE_PAGE, m);
}

void map_regions(enum backing b, const char *name, size_t size, struct mapping *m)
{
    map_aligned(b, name, size, PMD_SIZE, m);
}

void unmap_buffer(struct mapping *m)
{
    munmap(m->resv, m->resv_len);
}

/* First touch of every base page: a write, so the kernel allocates a real page. */
void populate(char *base, size_t len)
{
    for (size_t off = 0; off < len; off += BASE_PAGE)
        base[off] = (char)1;
}

/* Writes the first byte of every base page of every span of the layout. */
void populate_layout(char *base, const struct layout *l)
{
    for (size_t i = 0; i < l->count; i++)
        populate(base + i * l->step, l->span);
}

void dense_layout(size_t size, struct layout *l)
{
    l->span = l->step = size;
    l->count = 1;
}

void buffer_layout(const struct config *cfg, struct layout *l)
{
    if (!cfg->sparse) {
        dense_layout(cfg->size, l);
        return;
    }
    l->span = cfg->touch_pages * BASE_PAGE;
    l->step = PMD_SIZE;
    l->count = cfg->size / PMD_SIZE;
}

uint64_t layout_expected_kb(const struct layout *l, size_t page)
{
    if (page <= l->step) /* a page never holds two spans: each span's pages, whole */
        return (uint64_t)l->count * round_up(l->span, page) / 1024;
    return round_up(l->count * l->step, page) / 1024; /* every page holds a span */
}

size_t backing_fault_size(const struct config *cfg)
{
    switch (cfg->backing) {
    case B_4K: return BASE_PAGE;
    case B_MTHP: return (size_t)cfg->mthp_kb * 1024;
    case B_HUGE1G: return 1UL << 30;
    default: return PMD_SIZE; /* thp, thp-collapse, shmem-thp, hugetlb-2M */
    }
}

/* Collapses the whole buffer into PMD-size THP.  MADV_HUGEPAGE first: MADV_COLLAPSE
 * refuses a VM_NOHUGEPAGE range (EINVAL), and the populate phase set that flag. */
void collapse_buffer(struct mapping *m, struct collapse_rec *c)
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
    c->attempts = 1;
}

/* collapse_buffer, again while it fails with EAGAIN, up to COLLAPSE_TRIES attempts: the
 * setup's collapse decides the arm's pages, so a transient failure is not its answer (the
 * timed loop's collapses are each one attempt, counted as they come). */
void collapse_setup(struct mapping *m, struct collapse_rec *c)
{
    double spent = 0;
    int tries = 0;
    do {
        if (tries > 0)
            usleep(COLLAPSE_WAIT_US);
        collapse_buffer(m, c);
        spent += c->seconds;
        tries++;
    } while (c->err == EAGAIN && tries < COLLAPSE_TRIES);
    c->seconds = spent;
    c->attempts = tries;
}
