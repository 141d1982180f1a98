/*
 * hugelab-thp: run a program with its own THP mode under the host's, through prctl.
 *
 *   hugelab-thp never PROGRAM [ARGS...]    PR_SET_THP_DISABLE: no THP for the program and
 *                                          its children, whatever the host mode
 *   hugelab-thp madvise PROGRAM [ARGS...]  PR_SET_THP_DISABLE with
 *                                          PR_THP_DISABLE_EXCEPT_ADVISED (Linux 6.18+): THP
 *                                          only where the program asks (MADV_HUGEPAGE)
 *   hugelab-thp probe MODE                 exit 0 when this kernel has MODE, 3 (with the
 *                                          reason on stderr) when it does not
 *
 * The setting lives in the mm and is inherited over fork and kept across exec, so a
 * prctl-then-exec wrapper sets it for the whole tree the program starts. /proc/PID/status
 * shows it (THP_enabled: 0 for `never`).
 *
 * Build: cc -O2 -Wall -Wextra -Werror -static hugelab-thp.c -o hugelab-thp
 * Static so the same binary runs on the host and inside guests.
 *
 * Exit codes: 2 bad arguments, 3 the kernel lacks the mode, 126 exec failed, 127 program not
 * found; otherwise the program's own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_THP_DISABLE
#define PR_SET_THP_DISABLE 41
#endif
#ifndef PR_GET_THP_DISABLE
#define PR_GET_THP_DISABLE 42
#endif
#ifndef PR_THP_DISABLE_EXCEPT_ADVISED
#define PR_THP_DISABLE_EXCEPT_ADVISED (1UL << 1) /* Linux 6.18+ */
#endif

static void usage(void)
{
    fputs("usage: hugelab-thp never|madvise PROGRAM [ARGS...]\n"
          "       hugelab-thp probe never|madvise\n", stderr);
}

/* prctl flags for `mode`, or -1 for an unknown mode. */
static long mode_flags(const char *mode)
{
    if (strcmp(mode, "never") == 0)
        return 0;
    if (strcmp(mode, "madvise") == 0)
        return (long)PR_THP_DISABLE_EXCEPT_ADVISED;
    return -1;
}

/* Set the mode on this process; 0, or 3 with the reason printed. */
static int apply(const char *mode, long flags)
{
    if (prctl(PR_SET_THP_DISABLE, 1UL, (unsigned long)flags, 0UL, 0UL) == 0)
        return 0;
    if (errno == EINVAL && flags)
        fprintf(stderr, "hugelab-thp: this kernel has no per-process THP mode '%s' "
                "(PR_THP_DISABLE_EXCEPT_ADVISED needs Linux 6.18 or newer)\n", mode);
    else
        fprintf(stderr, "hugelab-thp: prctl(PR_SET_THP_DISABLE) failed: %s\n",
                strerror(errno));
    return 3;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "probe") == 0) {
        long flags = mode_flags(argv[2]);
        if (flags < 0) {
            usage();
            return 2;
        }
        return apply(argv[2], flags);
    }
    if (argc < 3) {
        usage();
        return 2;
    }
    long flags = mode_flags(argv[1]);
    if (flags < 0) {
        fprintf(stderr, "hugelab-thp: unknown mode '%s' (never or madvise)\n", argv[1]);
        usage();
        return 2;
    }
    int rc = apply(argv[1], flags);
    if (rc)
        return rc;
    execvp(argv[2], argv + 2);
    int err = errno;
    fprintf(stderr, "hugelab-thp: cannot run %s: %s\n", argv[2], strerror(err));
    return err == ENOENT ? 127 : 126;
}
