/* HTTP/1.1 GETs of `--keyspace` paths (/key:%012d) over keep-alive connections: a cache
 * (Varnish) whose every miss is cached. A SET is a GET as well: the preload asks each path
 * once, so every object is in the cache before the windows. */
#define _GNU_SOURCE /* strcasestr */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kv.h"

static size_t encode(const kv_conn *c, char *out, const char *key, int klen, int is_set)
{
    (void)c;
    (void)klen;
    (void)is_set;
    return (size_t)sprintf(out, "GET /%s HTTP/1.1\r\nHost: hugelab\r\n\r\n", key);
}

/* A chunked body: hex size lines, each chunk and its CRLF, until the 0 chunk and its
 * trailer's empty line. */
static int chunked(kv_conn *c, char *err)
{
    char *line;
    size_t len;
    for (;;) {
        if (rm_line(&c->sock, &line, &len, err) != 0)
            return -1;
        char *end;
        long n = strtol(line, &end, 16);
        if (end == line || n < 0) {
            rm_err(err, "bad HTTP chunk size: %.200s", line);
            return -1;
        }
        if (n == 0)
            break;
        if (rm_skip(&c->sock, (size_t)n + 2, err) != 0)
            return -1;
    }
    do
        if (rm_line(&c->sock, &line, &len, err) != 0)
            return -1;
    while (len > 0);
    return 0;
}

/* The status line (a 200, else an error), the headers, then the body by its Content-Length
 * or its chunks. */
static int reply(kv_conn *c, char *err)
{
    char *line;
    size_t len;
    if (rm_line(&c->sock, &line, &len, err) != 0)
        return -1;
    if (strncmp(line, "HTTP/1.1 200", 12) != 0) {
        rm_err(err, "unexpected HTTP reply: %.200s", line);
        return -1;
    }
    long length = -1;
    int chunks = 0;
    for (;;) {
        if (rm_line(&c->sock, &line, &len, err) != 0)
            return -1;
        if (len == 0)
            break;
        if (strncasecmp(line, "Content-Length:", 15) == 0) {
            char *end;
            length = strtol(line + 15, &end, 10);
            if (end == line + 15 || length < 0) {
                rm_err(err, "bad HTTP Content-Length: %.200s", line);
                return -1;
            }
        } else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0 &&
                   strcasestr(line + 18, "chunked"))
            chunks = 1;
    }
    if (chunks)
        return chunked(c, err);
    if (length < 0) {
        rm_err(err, "HTTP reply with neither Content-Length nor chunks");
        return -1;
    }
    return rm_skip(&c->sock, (size_t)length, err);
}

static const kv_codec codec = {encode, reply};
const rm_proto rm_http = KV_PROTO("http", &codec);
