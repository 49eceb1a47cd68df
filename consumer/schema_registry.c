/* schema_registry.c — see schema_registry.h. The endpoints, as Confluent documents them:
 *   GET  /schemas/ids/{id}               -> {"schema": "<the schema as a JSON string>", "schemaType": ...}
 *                                           (schemaType absent = AVRO); unknown id: 404, error_code 40403
 *   POST /subjects/{subject}/versions    {"schema": "..."} -> {"id": N} (the same schema gets the same id)
 * with content type application/vnd.schemaregistry.v1+json; errors carry {"error_code": N, "message": "..."}. */
#include "schema_registry.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { ANSWER_MAX = 4 << 20 };   /* a schema answer larger than this is refused */

typedef struct {
    int32_t id;
    registry_status status;          /* REG_OK, REG_INCOMPATIBLE (for good) or REG_NOT_FOUND (until `until`) */
    sl_job_resolver *resolver;       /* REG_OK */
    char *reason;                    /* otherwise: the error line */
    double until;
} reg_entry;

struct sl_registry {
    char host[256], port[8];
    char hostport[280];              /* the Host header, and what error lines name */
    char prefix[512];                /* path before /schemas/..., without a trailing '/' */
    int timeout_ms;
    reg_entry *e;
    int n, cap;
    double down_until;               /* unreachable: ids not cached fail at once until then */
    char down_reason[320];
};

typedef struct {
    int status;
    char *body;                      /* NUL-terminated */
    size_t len;
} http_answer;

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// ---------------------------------------------------------------- URL

/* http://host[:port][/prefix] into reg's fields (reg may be NULL: check only). */
static int parse_url(const char *url, sl_registry *reg, char *err, size_t errlen) {
    if (!strncmp(url, "https://", 8)) {
        snprintf(err, errlen, "registry URL '%s': https is not supported (plain http:// only; put a local TLS "
                 "proxy in front of the registry)", url);
        return -1;
    }
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(err, errlen, "registry URL '%s' must look like http://host[:port][/path]", url);
        return -1;
    }
    const char *h = url + 7, *path = h + strcspn(h, "/"), *end;
    if (memchr(h, '@', (size_t)(path - h))) {
        snprintf(err, errlen, "registry URL '%s': credentials in the URL are not supported", url);
        return -1;
    }
    const char *port = NULL;
    if (*h == '[') {   /* [IPv6 literal] */
        end = memchr(h, ']', (size_t)(path - h));
        if (!end) goto bad;
        if (end + 1 < path && end[1] == ':') port = end + 2;
        else if (end + 1 != path) goto bad;
        h++;
    } else {
        end = memchr(h, ':', (size_t)(path - h));
        if (end) port = end + 1;
        else end = path;
    }
    size_t hl = (size_t)(end - h), pl = port ? (size_t)(path - port) : 0;
    if (hl == 0 || hl >= sizeof(reg->host) || (port && (pl == 0 || pl > 5 || strspn(port, "0123456789") < pl)) ||
        strlen(path) >= sizeof(reg->prefix))
        goto bad;
    if (reg) {
        memcpy(reg->host, h, hl);
        reg->host[hl] = 0;
        if (port) memcpy(reg->port, port, pl);
        else memcpy(reg->port, "80", 2);
        reg->port[port ? pl : 2] = 0;
        snprintf(reg->hostport, sizeof(reg->hostport), "%s%s%s:%s", h[-1] == '[' ? "[" : "", reg->host,
                 h[-1] == '[' ? "]" : "", reg->port);
        snprintf(reg->prefix, sizeof(reg->prefix), "%s", path);
        size_t n = strlen(reg->prefix);
        while (n > 0 && reg->prefix[n - 1] == '/') reg->prefix[--n] = 0;
    }
    return 0;
bad:
    snprintf(err, errlen, "registry URL '%s' must look like http://host[:port][/path]", url);
    return -1;
}

int registry_check_url(const char *url, char *err, size_t errlen) { return parse_url(url, NULL, err, errlen); }

// ---------------------------------------------------------------- HTTP/1.1, one request per connection

/* Until fd is ready for events or the deadline passes: 0, or -1 with errno (ETIMEDOUT). */
static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        double left = deadline - mono_ms();
        if (left <= 0) return errno = ETIMEDOUT, -1;
        struct pollfd p = {fd, events, 0};
        int rc = poll(&p, 1, (int)left + 1);
        if (rc > 0) return 0;
        if (rc < 0 && errno != EINTR) return -1;
    }
}

/* The value of header `name` in the header block [h, end), or NULL; *vlen its length. */
static const char *header(const char *h, const char *end, const char *name, size_t *vlen) {
    size_t nl = strlen(name);
    for (const char *line = h; line < end;) {
        const char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (!eol) eol = end;
        if ((size_t)(eol - line) > nl && line[nl] == ':' && !strncasecmp(line, name, nl)) {
            const char *v = line + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t')) v++;
            *vlen = (size_t)(eol - v);
            return v;
        }
        line = eol + 2;
    }
    return NULL;
}

/* An answer so far (eof: the server closed): 1 complete (a filled, body malloc'd), 0 more to come, -1
 * malformed. Bodies: Content-Length, chunked, or up to the close. */
static int parse_answer(const char *buf, size_t len, int eof, http_answer *a) {
    const char *hend = memmem(buf, len, "\r\n\r\n", 4);
    if (!hend) return eof ? -1 : 0;
    if (len < 12 || strncmp(buf, "HTTP/1.", 7) || buf[8] != ' ' || strspn(buf + 9, "0123456789") < 3) return -1;
    a->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    const char *body = hend + 4, *end = buf + len, *v;
    size_t vlen;
    char *out = NULL;
    size_t n = 0;
    if ((v = header(buf, hend, "Transfer-Encoding", &vlen)) && vlen >= 7 && !strncasecmp(v + vlen - 7, "chunked", 7)) {
        out = malloc((size_t)(end - body) + 1);
        if (!out) return -1;
        for (const char *p = body;;) {
            const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
            if (!eol) goto more;
            char *x;
            unsigned long sz = strtoul(p, &x, 16);
            if (x == p) goto malformed;
            if (sz == 0) break;   /* the last chunk (trailers ignored) */
            if (sz > (size_t)(end - eol) || (size_t)(end - eol) - sz < 4) goto more;   /* CRLF data CRLF */
            memcpy(out + n, eol + 2, sz);
            n += sz;
            p = eol + 2 + sz + 2;
        }
    } else if ((v = header(buf, hend, "Content-Length", &vlen))) {
        char *x;
        unsigned long cl = strtoul(v, &x, 10);
        if (x == v) return -1;
        if ((size_t)(end - body) < cl) return eof ? -1 : 0;
        n = cl;
        if (!(out = malloc(n + 1))) return -1;
        memcpy(out, body, n);
    } else {
        if (!eof) return 0;
        n = (size_t)(end - body);
        if (!(out = malloc(n + 1))) return -1;
        memcpy(out, body, n);
    }
    out[n] = 0;
    a->body = out;
    a->len = n;
    return 1;
more:
    free(out);
    return eof ? -1 : 0;
malformed:
    free(out);
    return -1;
}

/* One request within timeout_ms: 0 with the answer (any status), or -1 with err. */
static int http_once(sl_registry *reg, const char *method, const char *path, const char *body, http_answer *a,
                     char *err, size_t errlen) {
    double deadline = mono_ms() + reg->timeout_ms;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(reg->host, reg->port, &hints, &ai);
    if (rc) {
        snprintf(err, errlen, "cannot resolve %s: %s", reg->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, p->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int ok = connect(fd, p->ai_addr, p->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) == 0) {
            socklen_t sl = sizeof(e);
            ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) == 0 && e == 0;
        } else if (!ok) {
            e = errno;   /* connect's, or ETIMEDOUT from wait_fd */
        }
        if (ok) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "connect to %s: %s", reg->hostport, e == ETIMEDOUT ? "timed out" : strerror(e));
        return -1;
    }
    size_t blen = body ? strlen(body) : 0, cap = strlen(path) + strlen(reg->hostport) + blen + 512;
    char *req = malloc(cap), *buf = NULL;
    if (!req) goto oom;
    int hl = snprintf(req, cap,
                      "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sluice\r\n"
                      "Accept: application/vnd.schemaregistry.v1+json, application/json\r\nConnection: close\r\n",
                      method, path, reg->hostport);
    if (body)
        hl += snprintf(req + hl, cap - (size_t)hl,
                       "Content-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: %zu\r\n", blen);
    hl += snprintf(req + hl, cap - (size_t)hl, "\r\n");
    if (body) memcpy(req + hl, body, blen);
    size_t total = (size_t)hl + blen, sent = 0;
    while (sent < total) {
        ssize_t k = send(fd, req + sent, total - sent, MSG_NOSIGNAL);
        if (k > 0) sent += (size_t)k;
        else if (k < 0 && errno != EAGAIN && errno != EINTR) goto io_error;
        else if (wait_fd(fd, POLLOUT, deadline)) goto io_error;
    }
    size_t len = 0, bcap = 4096;
    if (!(buf = malloc(bcap))) goto oom;
    for (;;) {
        if (len == bcap) {
            char *nb = bcap >= ANSWER_MAX ? NULL : realloc(buf, bcap * 2);
            if (!nb) {
                snprintf(err, errlen, "%s: answer larger than %d bytes", reg->hostport, ANSWER_MAX);
                goto fail;
            }
            buf = nb;
            bcap *= 2;
        }
        ssize_t k = recv(fd, buf + len, bcap - len, 0);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLIN, deadline)) goto io_error;
            continue;
        }
        if (k < 0) goto io_error;
        len += (size_t)k;
        int done = parse_answer(buf, len, k == 0, a);
        if (done < 0) {
            snprintf(err, errlen, "%s: malformed HTTP answer", reg->hostport);
            goto fail;
        }
        if (done) break;
    }
    free(req);
    free(buf);
    close(fd);
    return 0;
io_error:
    snprintf(err, errlen, "%s %s on %s: %s", method, path, reg->hostport,
             errno == ETIMEDOUT ? "no answer in time" : strerror(errno));
    goto fail;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    free(req);
    free(buf);
    close(fd);
    return -1;
}

/* http_once, again (after 100 ms, then 200 ms) while the network fails or the registry answers 5xx:
 * 0 with the last answer, or -1 with err. */
static int http_request(sl_registry *reg, const char *method, const char *path, const char *body, http_answer *a,
                        char *err, size_t errlen) {
    for (int i = 0; i < REGISTRY_ATTEMPTS; i++) {
        if (i) nanosleep(&(struct timespec){0, 100000000L << (i - 1)}, NULL);
        memset(a, 0, sizeof(*a));
        if (http_once(reg, method, path, body, a, err, errlen)) continue;
        if (a->status < 500 || i == REGISTRY_ATTEMPTS - 1) return 0;
        free(a->body);
    }
    return -1;
}

/* "HTTP 404 (40403 Schema not found)" from an error answer. */
static void answer_reason(const http_answer *a, char *out, size_t outlen) {
    json_t *j = json_loadb(a->body, a->len, 0, NULL);
    json_t *code = json_object_get(j, "error_code"), *msg = json_object_get(j, "message");
    if (json_is_integer(code) && json_is_string(msg))
        snprintf(out, outlen, "HTTP %d (%lld %s)", a->status, (long long)json_integer_value(code), json_string_value(msg));
    else
        snprintf(out, outlen, "HTTP %d", a->status);
    json_decref(j);
}

// ---------------------------------------------------------------- client

int registry_new(const char *url, int timeout_ms, sl_registry **out, char *err, size_t errlen) {
    sl_registry *reg = calloc(1, sizeof(*reg));
    if (!reg) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (parse_url(url, reg, err, errlen)) {
        free(reg);
        return -1;
    }
    reg->timeout_ms = timeout_ms;
    *out = reg;
    return 0;
}

void registry_free(sl_registry *reg) {
    if (!reg) return;
    for (int i = 0; i < reg->n; i++) {
        job_resolver_free(reg->e[i].resolver);
        free(reg->e[i].reason);
    }
    free(reg->e);
    free(reg);
}

/* id's entry: the cached one, else a free one (one never answered, or not found and expired, is reused);
 * NULL: out of memory. */
static reg_entry *entry(sl_registry *reg, int32_t id, double now) {
    reg_entry *spare = NULL;
    for (int i = 0; i < reg->n; i++) {
        if (reg->e[i].id == id) return &reg->e[i];
        if (!spare && (reg->e[i].status == REG_UNREACHABLE || (reg->e[i].status == REG_NOT_FOUND && now >= reg->e[i].until)))
            spare = &reg->e[i];
    }
    if (!spare) {
        if (reg->n == reg->cap) {
            int cap = reg->cap ? reg->cap * 2 : 16;
            reg_entry *e = realloc(reg->e, (size_t)cap * sizeof(*e));
            if (!e) return NULL;
            reg->e = e;
            reg->cap = cap;
        }
        spare = &reg->e[reg->n++];
    } else {
        free(spare->reason);
    }
    memset(spare, 0, sizeof(*spare));
    spare->id = id;
    spare->status = REG_UNREACHABLE;   /* never answered */
    return spare;
}

static registry_status settle(reg_entry *e, registry_status st, double until, const char *reason, char *err,
                              size_t errlen) {
    e->status = st;
    e->until = until;
    free(e->reason);
    e->reason = strdup(reason);
    snprintf(err, errlen, "%s", reason);
    return st;
}

registry_status registry_job_resolver(sl_registry *reg, int32_t id, sl_job_resolver **out, char *err,
                                      size_t errlen) {
    double now = mono_ms();
    reg_entry *e = entry(reg, id, now);
    if (!e) {
        snprintf(err, errlen, "schema id %d: out of memory", (int)id);
        return REG_UNREACHABLE;
    }
    if (e->status == REG_OK) {
        *out = e->resolver;
        return REG_OK;
    }
    if (e->status == REG_INCOMPATIBLE || (e->status == REG_NOT_FOUND && now < e->until)) {
        snprintf(err, errlen, "%s", e->reason);
        return e->status;
    }
    if (now < reg->down_until) {
        snprintf(err, errlen, "schema registry unreachable: %s (schema id %d not fetched; asked again in %.1f s)",
                 reg->down_reason, (int)id, (reg->down_until - now) / 1e3);
        return REG_UNREACHABLE;
    }
    char path[600], why[320], line[1024];
    snprintf(path, sizeof(path), "%s/schemas/ids/%d", reg->prefix, (int)id);
    http_answer a;
    int rc = http_request(reg, "GET", path, NULL, &a, why, sizeof(why));
    if (rc == 0 && a.status != 200 && a.status != 404) {
        answer_reason(&a, why, sizeof(why));   /* e.g. 401: the registry is there but will not serve us */
        free(a.body);
        rc = -1;
    }
    if (rc) {
        reg->down_until = mono_ms() + REGISTRY_RECHECK_MS;
        snprintf(reg->down_reason, sizeof(reg->down_reason), "%s", why);
        snprintf(err, errlen, "schema registry unreachable: %s (schema id %d, %d attempts)", why, (int)id,
                 REGISTRY_ATTEMPTS);
        return REG_UNREACHABLE;
    }
    registry_status st;
    if (a.status == 404) {
        answer_reason(&a, why, sizeof(why));
        snprintf(line, sizeof(line), "schema id %d not found in the schema registry at %s: %s", (int)id, reg->hostport,
                 why);
        st = settle(e, REG_NOT_FOUND, mono_ms() + REGISTRY_RECHECK_MS, line, err, errlen);
    } else {
        json_t *j = json_loadb(a.body, a.len, 0, NULL);
        json_t *schema = json_object_get(j, "schema"), *type = json_object_get(j, "schemaType");
        char rerr[512];
        sl_job_resolver *r = NULL;
        if (!json_is_string(schema)) {
            snprintf(line, sizeof(line), "schema registry unreachable: %s answered schema id %d without a schema",
                     reg->hostport, (int)id);
            snprintf(err, errlen, "%s", line);
            st = REG_UNREACHABLE;   /* not cached: asked again next time */
        } else if (json_is_string(type) && strcmp(json_string_value(type), "AVRO") != 0) {
            snprintf(line, sizeof(line), "schema id %d is a %s schema, not Avro", (int)id, json_string_value(type));
            st = settle(e, REG_INCOMPATIBLE, 0, line, err, errlen);
        } else if (job_resolver_new(json_string_value(schema), json_string_length(schema), &r, rerr, sizeof(rerr))) {
            snprintf(line, sizeof(line), "schema id %d does not resolve to the worker's Job schema: %s", (int)id, rerr);
            st = settle(e, REG_INCOMPATIBLE, 0, line, err, errlen);
        } else {
            e->status = st = REG_OK;
            e->resolver = *out = r;
        }
        json_decref(j);
    }
    free(a.body);
    return st;
}

int registry_register(sl_registry *reg, const char *subject, const char *schema_json, int32_t *id, char *err,
                      size_t errlen) {
    char path[1600], why[320];
    int n = snprintf(path, sizeof(path), "%s/subjects/", reg->prefix);
    for (const unsigned char *s = (const unsigned char *)subject; *s && n < (int)sizeof(path) - 16; s++) {
        if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("-._~", *s))
            path[n++] = (char)*s;
        else
            n += snprintf(path + n, sizeof(path) - (size_t)n, "%%%02X", *s);
    }
    snprintf(path + n, sizeof(path) - (size_t)n, "/versions");
    json_t *req = json_pack("{s:s}", "schema", schema_json);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    http_answer a;
    int rc = http_request(reg, "POST", path, body, &a, why, sizeof(why));
    free(body);
    if (rc) {
        snprintf(err, errlen, "schema registry unreachable: %s", why);
        return -1;
    }
    json_t *j = json_loadb(a.body, a.len, 0, NULL), *jid = json_object_get(j, "id");
    rc = -1;
    if (a.status != 200) {
        answer_reason(&a, why, sizeof(why));
        snprintf(err, errlen, "the schema registry at %s refused the schema for subject '%s': %s", reg->hostport,
                 subject, why);
    } else if (!json_is_integer(jid) || json_integer_value(jid) < 0 || json_integer_value(jid) > 0x7fffffff) {
        snprintf(err, errlen, "the schema registry at %s answered no schema id for subject '%s'", reg->hostport, subject);
    } else {
        *id = (int32_t)json_integer_value(jid);
        rc = 0;
    }
    json_decref(j);
    free(a.body);
    return rc;
}
