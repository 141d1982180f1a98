/* Helpers shared by the protocol modules: the random numbers, the clock, error text, and a
 * TCP connection with a buffered line reader (RESP and memcached's text protocol). */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "reqmix.h"

uint64_t rm_next(rm_rng *r)
{
    /* splitmix64: small, fast, and fine for picking keys */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rm_below(rm_rng *r, uint64_t n)
{
    return n ? (uint64_t)(((unsigned __int128)rm_next(r) * n) >> 64) : 0;
}

int64_t rm_range(rm_rng *r, int64_t lo, int64_t hi)
{
    if (hi < lo)
        return lo;
    return lo + (int64_t)rm_below(r, (uint64_t)(hi - lo) + 1);
}

uint64_t rm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void rm_err(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, RM_ERRLEN, fmt, ap);
    va_end(ap);
}

int rm_connect(const char *hostport, rm_sock *s, char *err)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) {
        rm_err(err, "address %s is not HOST:PORT", hostport);
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0) {
        rm_err(err, "cannot resolve %s: %s", hostport, gai_strerror(rc));
        return -1;
    }
    s->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (s->fd < 0 || connect(s->fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        rm_err(err, "cannot connect to %s: %s", hostport, strerror(errno));
        if (s->fd >= 0)
            close(s->fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->beg = s->end = 0;
    return 0;
}

int rm_send(rm_sock *s, const char *data, size_t len, char *err)
{
    while (len > 0) {
        ssize_t n = send(s->fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rm_err(err, "send failed: %s", strerror(errno));
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

static int fill(rm_sock *s, char *err)
{
    if (s->beg > 0) {
        memmove(s->buf, s->buf + s->beg, s->end - s->beg);
        s->end -= s->beg;
        s->beg = 0;
    }
    if (s->end == sizeof s->buf) {
        rm_err(err, "reply line longer than %zu bytes", sizeof s->buf);
        return -1;
    }
    ssize_t n;
    do
        n = recv(s->fd, s->buf + s->end, sizeof s->buf - s->end, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        rm_err(err, "server closed the connection%s%s", n < 0 ? ": " : "",
               n < 0 ? strerror(errno) : "");
        return -1;
    }
    s->end += (size_t)n;
    return 0;
}

/* The next line without its CRLF; valid until the next call on `s`. */
int rm_line(rm_sock *s, char **line, size_t *len, char *err)
{
    for (;;) {
        char *start = s->buf + s->beg;
        char *nl = memchr(start, '\n', s->end - s->beg);
        if (nl) {
            *line = start;
            *len = (size_t)(nl - start);
            if (*len > 0 && start[*len - 1] == '\r')
                (*len)--;
            start[*len] = 0;
            s->beg = (size_t)(nl - s->buf) + 1;
            return 0;
        }
        if (fill(s, err) != 0)
            return -1;
    }
}

/* Consume `n` bytes (a value's body and its CRLF). */
int rm_skip(rm_sock *s, size_t n, char *err)
{
    while (n > 0) {
        if (s->beg == s->end) {
            s->beg = s->end = 0;
            if (fill(s, err) != 0)
                return -1;
        }
        size_t have = s->end - s->beg, take = have < n ? have : n;
        s->beg += take;
        n -= take;
    }
    return 0;
}

int rm_key(char *out, size_t cap, long idx)
{
    return snprintf(out, cap, "key:%012ld", idx);
}

char *rm_value(long size)
{
    char *v = malloc((size_t)size + 1);
    if (v) {
        memset(v, 'x', (size_t)size);
        v[size] = 0;
    }
    return v;
}
