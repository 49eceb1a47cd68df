/* sluice-mock-kafka — librdkafka's in-process mock cluster for tests and the demo.
 *
 *   sluice-mock-kafka [--brokers N] [--partitions P] [--topics a,b,...] [--topic-error T=ERR[:S]]...
 *
 * Prints the bootstrap servers as its first stdout line, pre-creates sluice.jobs, sluice.results,
 * sluice.chunks, sluice.jobs.dlq and the listed topics with P partitions (default 4), then runs until
 * SIGTERM/SIGINT. --topic-error (for tests of failure handling) creates topic T if needed and makes
 * the cluster answer metadata requests for it with error ERR (a librdkafka error name such as
 * TOPIC_AUTHORIZATION_FAILED), for S seconds when given, else for good. Limits of the mock (librdkafka 2.0.2): no transactions' abort markers,
 * group.instance.id ignored, ~3 s before a group's first assignment.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    const char *topics = "";
    struct topic_error te[MAX_TOPIC_ERRORS];
    int n_te = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: sluice-mock-kafka [--brokers N] [--partitions P] [--topics a,b,...]\n"
                   "                         [--topic-error TOPIC=ERROR[:SECONDS]]...\n"
                   "Starts librdkafka's mock cluster; first stdout line = bootstrap servers; runs until SIGTERM.\n"
                   "--topic-error: metadata for TOPIC answers ERROR (e.g. TOPIC_AUTHORIZATION_FAILED),\n"
                   "for SECONDS when given (then the topic works), else until exit.\n");
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
        usleep(50000);
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
