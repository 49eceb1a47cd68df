/* sluice-mock-kafka — librdkafka's in-process mock cluster for tests and the demo.
 *
 *   sluice-mock-kafka [--brokers N] [--partitions P] [--topics a,b,...] [--topic-error T=ERR[:S]]...
 *                     [--request-error API=ERR:COUNT]... [--control FIFO]
 *
 * Prints the bootstrap servers as its first stdout line, pre-creates sluice.jobs, sluice.results,
 * sluice.chunks, sluice.jobs.dlq and the listed topics with P partitions (default 4), then runs until
 * SIGTERM/SIGINT. --topic-error (for tests of failure handling) creates topic T if needed and makes
 * the cluster answer metadata requests for it with error ERR (a librdkafka error name such as
 * TOPIC_AUTHORIZATION_FAILED), for S seconds when given, else for good. --request-error makes every
 * broker answer its next COUNT requests of API (Produce, Fetch, OffsetCommit, JoinGroup, SyncGroup,
 * Heartbeat, InitProducerId, ...) with ERR. --control FIFO (the fault suite's control channel) reads one
 * command a line from FIFO (created when missing) while the cluster runs and answers each with one
 * stdout line, "ok ..." or "error ...":
 *   down [ID] | up [ID]              broker ID (default: every broker) refuses connections / is back
 *   request-error API ERR COUNT      as --request-error, from now on
 *   pending API                      "ok pending API N": injected errors of API not yet answered
 *   topic-error TOPIC ERR|NO_ERROR   metadata for TOPIC answers ERR / the error is cleared
 * Limits of the mock (librdkafka 2.0.2): no transactions' abort markers, group.instance.id ignored,
 * ~3 s before a group's first assignment, Metadata requests take no injected request errors (use
 * topic-error).
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;
static void on_signal(int s) {
    (void)s;
    g_stop = 1;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk;
    if (strcmp(fac, "CONFWARN") != 0 && level <= 4) fprintf(stderr, "sluice-mock-kafka: %s: %s\n", fac, buf);
}

#define MAX_TOPIC_ERRORS 16
struct topic_error {
    char topic[256];
    rd_kafka_resp_err_t err;
    double clear_at;                 /* seconds since start; 0 = never */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "T=ERR[:S]" -> te; one clear line and -1 on a bad spec */
static int parse_topic_error(const char *spec, struct topic_error *te) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof(te->topic)) {
        fprintf(stderr, "sluice-mock-kafka: --topic-error wants TOPIC=ERROR[:SECONDS], got '%s'\n", spec);
        return -1;
    }
    memcpy(te->topic, spec, (size_t)(eq - spec));
    te->topic[eq - spec] = 0;
    char name[128];
    const char *colon = strchr(eq + 1, ':');
    size_t nl = colon ? (size_t)(colon - eq - 1) : strlen(eq + 1);
    if (nl == 0 || nl >= sizeof(name)) {
        fprintf(stderr, "sluice-mock-kafka: --topic-error '%s': missing error name\n", spec);
        return -1;
    }
    memcpy(name, eq + 1, nl);
    name[nl] = 0;
    const struct rd_kafka_err_desc *d;
    size_t n;
    rd_kafka_get_err_descs(&d, &n);
    te->err = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (size_t i = 0; i < n; i++)
        if (d[i].name && d[i].code > 0 && !strcmp(d[i].name, name)) te->err = d[i].code;
    if (!te->err) {
        fprintf(stderr, "sluice-mock-kafka: --topic-error '%s': '%s' is not a Kafka broker error name\n", spec, name);
        return -1;
    }
    te->clear_at = 0;
    if (colon) {
        char *end;
        double secs = strtod(colon + 1, &end);
        if (colon[1] == 0 || *end || !(secs > 0) || secs > 86400) {
            fprintf(stderr, "sluice-mock-kafka: --topic-error '%s': bad seconds '%s'\n", spec, colon + 1);
            return -1;
        }
        te->clear_at = secs;
    }
    return 0;
}

/* librdkafka's broker error name -> code; 0 when the name is not a broker error */
static rd_kafka_resp_err_t err_by_name(const char *name) {
    const struct rd_kafka_err_desc *d;
    size_t n;
    rd_kafka_get_err_descs(&d, &n);
    if (!strcmp(name, "NO_ERROR")) return RD_KAFKA_RESP_ERR_NO_ERROR;
    for (size_t i = 0; i < n; i++)
        if (d[i].name && d[i].code > 0 && !strcmp(d[i].name, name)) return d[i].code;
    return (rd_kafka_resp_err_t)-1;
}

/* Kafka protocol API keys of the requests a worker sends (rdkafka_mock.h takes the numbers) */
static const struct {
    const char *name;
    int16_t key;
} API_KEYS[] = {{"Produce", 0},       {"Fetch", 1},      {"ListOffsets", 2},     {"Metadata", 3},
                {"OffsetCommit", 8},  {"OffsetFetch", 9}, {"FindCoordinator", 10}, {"JoinGroup", 11},
                {"Heartbeat", 12},    {"LeaveGroup", 13}, {"SyncGroup", 14},      {"ApiVersion", 18},
                {"InitProducerId", 22}};

static int api_by_name(const char *name) {
    for (size_t i = 0; i < sizeof(API_KEYS) / sizeof(API_KEYS[0]); i++)
        if (!strcmp(API_KEYS[i].name, name)) return API_KEYS[i].key;
    return -1;
}

/* COUNT errors ERR for the next requests of API on every broker; -1 with a reason in why */
static int push_request_errors(rd_kafka_mock_cluster_t *mc, int brokers, const char *api, const char *errname,
                               long count, char *why, size_t whylen) {
    int key = api_by_name(api);
    rd_kafka_resp_err_t e = err_by_name(errname);
    if (key < 0) return snprintf(why, whylen, "unknown request type '%s'", api), -1;
    if (key == 3) return snprintf(why, whylen, "the mock's Metadata handler takes no request errors: use topic-error"), -1;
    if ((int)e <= 0) return snprintf(why, whylen, "'%s' is not a Kafka broker error name", errname), -1;
    if (count < 1 || count > 1000) return snprintf(why, whylen, "COUNT must be 1..1000, got %ld", count), -1;
    for (int b = 1; b <= brokers; b++)
        for (long i = 0; i < count; i++) {
            rd_kafka_resp_err_t r = rd_kafka_mock_broker_push_request_error_rtts(mc, b, (int16_t)key, 1, e, 0);
            if (r) return snprintf(why, whylen, "broker %d: %s", b, rd_kafka_err2str(r)), -1;
        }
    return 0;
}

/* "API=ERR:COUNT" */
static int parse_request_error(rd_kafka_mock_cluster_t *mc, int brokers, const char *spec) {
    char api[64], name[128], why[256];
    long count;
    const char *eq = strchr(spec, '='), *colon = eq ? strchr(eq, ':') : NULL;
    char *end;
    if (!eq || !colon || eq == spec || (size_t)(eq - spec) >= sizeof(api) || colon == eq + 1 ||
        (size_t)(colon - eq - 1) >= sizeof(name)) {
        fprintf(stderr, "sluice-mock-kafka: --request-error wants API=ERROR:COUNT, got '%s'\n", spec);
        return -1;
    }
    memcpy(api, spec, (size_t)(eq - spec));
    api[eq - spec] = 0;
    memcpy(name, eq + 1, (size_t)(colon - eq - 1));
    name[colon - eq - 1] = 0;
    count = strtol(colon + 1, &end, 10);
    if (colon[1] == 0 || *end) count = -1;
    if (push_request_errors(mc, brokers, api, name, count, why, sizeof(why))) {
        fprintf(stderr, "sluice-mock-kafka: --request-error '%s': %s\n", spec, why);
        return -1;
    }
    return 0;
}

/* one control command; answers one stdout line */
static void control_command(rd_kafka_mock_cluster_t *mc, int brokers, char *line) {
    char *save = NULL, *words[5] = {0};
    int n = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t && n < 5; t = strtok_r(NULL, " \t\r", &save)) words[n++] = t;
    if (n == 0) return;
    char why[256] = "";
    int ok = 0;
    if ((!strcmp(words[0], "down") || !strcmp(words[0], "up")) && n <= 2) {
        int lo = 1, hi = brokers;
        if (n == 2) {
            char *end;
            long id = strtol(words[1], &end, 10);
            if (*end || id < 1 || id > brokers) {
                printf("error %s: no broker '%s'\n", words[0], words[1]);
                fflush(stdout);
                return;
            }
            lo = hi = (int)id;
        }
        ok = 1;
        for (int b = lo; b <= hi; b++) {
            rd_kafka_resp_err_t r = words[0][0] == 'd' ? rd_kafka_mock_broker_set_down(mc, b) : rd_kafka_mock_broker_set_up(mc, b);
            if (r) ok = 0, snprintf(why, sizeof(why), "broker %d: %s", b, rd_kafka_err2str(r));
        }
    } else if (!strcmp(words[0], "request-error") && n == 4) {
        char *end;
        long count = strtol(words[3], &end, 10);
        if (*end) count = -1;
        ok = push_request_errors(mc, brokers, words[1], words[2], count, why, sizeof(why)) == 0;
    } else if (!strcmp(words[0], "pending") && n == 2) {
        int key = api_by_name(words[1]);
        if (key < 0) {
            snprintf(why, sizeof(why), "unknown request type '%s'", words[1]);
        } else {
            size_t total = 0;
            for (int b = 1; b <= brokers; b++) {
                size_t c = 0;
                rd_kafka_mock_broker_error_stack_cnt(mc, b, (int16_t)key, &c);
                total += c;
            }
            printf("ok pending %s %zu\n", words[1], total);
            fflush(stdout);
            return;
        }
    } else if (!strcmp(words[0], "topic-error") && n == 3) {
        rd_kafka_resp_err_t e = err_by_name(words[2]);
        if ((int)e < 0) {
            snprintf(why, sizeof(why), "'%s' is not a Kafka broker error name", words[2]);
        } else {
            rd_kafka_mock_topic_set_error(mc, words[1], e);
            ok = 1;
        }
    } else {
        snprintf(why, sizeof(why), "unknown command (down [ID], up [ID], request-error API ERR COUNT, pending API, "
                                   "topic-error TOPIC ERR)");
    }
    if (ok) {
        printf("ok");
        for (int i = 0; i < n; i++) printf(" %s", words[i]);
        printf("\n");
    } else {
        printf("error %s: %s\n", words[0], why);
    }
    fflush(stdout);
}

static int parse_pos(const char *s, const char *what, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < 1 || v > 10000) {
        fprintf(stderr, "sluice-mock-kafka: %s must be a positive integer, got '%s'\n", what, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    int brokers = 1, partitions = 4;
    const char *topics = "", *control = NULL;
    const char *request_errors[MAX_TOPIC_ERRORS];
    int n_re = 0;
    struct topic_error te[MAX_TOPIC_ERRORS];
    int n_te = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: sluice-mock-kafka [--brokers N] [--partitions P] [--topics a,b,...]\n"
                   "                         [--topic-error TOPIC=ERROR[:SECONDS]]... [--request-error API=ERROR:COUNT]...\n"
                   "                         [--control FIFO]\n"
                   "Starts librdkafka's mock cluster; first stdout line = bootstrap servers; runs until SIGTERM.\n"
                   "--topic-error: metadata for TOPIC answers ERROR (e.g. TOPIC_AUTHORIZATION_FAILED),\n"
                   "for SECONDS when given (then the topic works), else until exit.\n"
                   "--request-error: every broker answers its next COUNT requests of API (Produce, Fetch,\n"
                   "OffsetCommit, JoinGroup, SyncGroup, Heartbeat, InitProducerId, ...) with ERROR.\n"
                   "--control FIFO: read commands from FIFO (created if missing), one a line, each answered by\n"
                   "one stdout line (ok ... | error ...): down [ID], up [ID], request-error API ERROR COUNT,\n"
                   "pending API, topic-error TOPIC ERROR|NO_ERROR.\n");
            return 0;
        } else if (!strcmp(argv[i], "--brokers") && i + 1 < argc) {
            if (parse_pos(argv[++i], "--brokers", &brokers)) return 2;
        } else if (!strcmp(argv[i], "--partitions") && i + 1 < argc) {
            if (parse_pos(argv[++i], "--partitions", &partitions)) return 2;
        } else if (!strcmp(argv[i], "--topics") && i + 1 < argc) {
            topics = argv[++i];
        } else if (!strcmp(argv[i], "--topic-error") && i + 1 < argc) {
            if (n_te == MAX_TOPIC_ERRORS) {
                fprintf(stderr, "sluice-mock-kafka: at most %d --topic-error options\n", MAX_TOPIC_ERRORS);
                return 2;
            }
            if (parse_topic_error(argv[++i], &te[n_te++])) return 2;
        } else if (!strcmp(argv[i], "--request-error") && i + 1 < argc) {
            if (n_re == MAX_TOPIC_ERRORS) {
                fprintf(stderr, "sluice-mock-kafka: at most %d --request-error options\n", MAX_TOPIC_ERRORS);
                return 2;
            }
            request_errors[n_re++] = argv[++i];
        } else if (!strcmp(argv[i], "--control") && i + 1 < argc) {
            control = argv[++i];
        } else {
            fprintf(stderr, "sluice-mock-kafka: unknown argument '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, log_cb);   /* stdout carries only the bootstrap line */
    /* the mock cluster needs a handle to live in; a producer with no bootstrap servers is enough */
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "sluice-mock-kafka: %s\n", err);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (!mc) {
        fprintf(stderr, "sluice-mock-kafka: cannot start the mock cluster\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    const char *defaults[] = {"sluice.jobs", "sluice.results", "sluice.chunks", "sluice.jobs.dlq"};
    for (int i = 0; i < 4; i++) {
        rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(mc, defaults[i], partitions, brokers < 3 ? brokers : 3);
        if (e) {
            fprintf(stderr, "sluice-mock-kafka: create %s: %s\n", defaults[i], rd_kafka_err2str(e));
            return 1;
        }
    }
    char *list = strdup(topics);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(mc, t, partitions, brokers < 3 ? brokers : 3);
        if (e) {
            fprintf(stderr, "sluice-mock-kafka: create %s: %s\n", t, rd_kafka_err2str(e));
            return 1;
        }
    }
    free(list);
    for (int i = 0; i < n_te; i++) {
        /* an existing topic (a default one) answers "already exists": fine, the error is what matters */
        (void)rd_kafka_mock_topic_create(mc, te[i].topic, partitions, brokers < 3 ? brokers : 3);
        rd_kafka_mock_topic_set_error(mc, te[i].topic, te[i].err);
    }
    for (int i = 0; i < n_re; i++)
        if (parse_request_error(mc, brokers, request_errors[i])) return 2;
    /* opened read-write: the FIFO always has a writer, so reads never see end-of-file between commands */
    int ctl = -1;
    if (control) {
        if (mkfifo(control, 0600) && errno != EEXIST) {
            fprintf(stderr, "sluice-mock-kafka: --control %s: %s\n", control, strerror(errno));
            return 1;
        }
        ctl = open(control, O_RDWR | O_NONBLOCK);
        struct stat st;
        if (ctl < 0 || fstat(ctl, &st) || !S_ISFIFO(st.st_mode)) {
            fprintf(stderr, "sluice-mock-kafka: --control %s: %s\n", control, ctl < 0 ? strerror(errno) : "not a FIFO");
            return 1;
        }
    }
    char cbuf[1024];
    size_t clen = 0;
    double t0 = now_s();
    printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    while (!g_stop) {
        for (int i = 0; i < n_te; i++)
            if (te[i].clear_at > 0 && now_s() - t0 >= te[i].clear_at) {
                rd_kafka_mock_topic_set_error(mc, te[i].topic, RD_KAFKA_RESP_ERR_NO_ERROR);
                fprintf(stderr, "sluice-mock-kafka: %s: error cleared\n", te[i].topic);
                te[i].clear_at = 0;
            }
        if (ctl < 0) {
            usleep(50000);
            continue;
        }
        struct pollfd pfd = {.fd = ctl, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0) continue;
        ssize_t got = read(ctl, cbuf + clen, sizeof(cbuf) - 1 - clen);
        if (got <= 0) continue;
        clen += (size_t)got;
        char *nl;
        while ((nl = memchr(cbuf, '\n', clen))) {
            *nl = 0;
            control_command(mc, brokers, cbuf);
            clen -= (size_t)(nl + 1 - cbuf);
            memmove(cbuf, nl + 1, clen);
        }
        if (clen == sizeof(cbuf) - 1) clen = 0;   /* a line longer than any command: drop it */
    }
    if (ctl >= 0) close(ctl);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
