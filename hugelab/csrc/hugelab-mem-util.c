/* hugelab-mem: exit with a message, the signal handlers and the flags they set. */
#include "hugelab-mem.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t g_sigint;
int g_stop;

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

void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_sigbus;
    sigaction(SIGBUS, &sa, NULL);
}

void die(int code, const char *fmt, ...)
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
void check_setup_interrupt(void)
{
    if (g_sigint)
        die(130, "interrupted during setup");
}
