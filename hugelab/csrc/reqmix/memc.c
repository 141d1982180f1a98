/* memcached's text protocol: get and set of `--keyspace` keys with `--value-size` byte
 * values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"

static size_t encode(const kv_conn *c, char *out, const char *key, int klen, int is_set)
{
    (void)klen;
    if (!is_set)
        return (size_t)sprintf(out, "get %s\r\n", key);
    size_t n = (size_t)sprintf(out, "set %s 0 0 %ld\r\n", key, c->value_size);
    return kv_set_value(c, out, n);
}

/* STORED for a set; for a get, VALUE lines with their data until END. */
static int reply(kv_conn *c, char *err)
{
    char *line;
    size_t len;
    for (;;) {
        if (rm_line(&c->sock, &line, &len, err) != 0)
            return -1;
        if (strcmp(line, "STORED") == 0 || strcmp(line, "END") == 0)
            return 0;
        if (strncmp(line, "VALUE ", 6) != 0) {
            rm_err(err, "unexpected memcached reply: %.200s", line);
            return -1;
        }
        char *last = strrchr(line, ' ');
        long bytes = strtol(last + 1, NULL, 10);
        if (rm_skip(&c->sock, (size_t)bytes + 2, err) != 0)
            return -1;
    }
}

static const kv_codec codec = {encode, reply};
const rm_proto rm_memc = KV_PROTO("memcached", &codec);
