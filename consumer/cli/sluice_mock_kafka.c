/* sluice-mock-kafka — librdkafka's in-process mock cluster for tests and the demo.
 *
 *   sluice-mock-kafka [--brokers N] [--partitions P] [--topics a,b,...]
 *
 * Prints the bootstrap servers as its first stdout line, pre-creates sluice.jobs, sluice.results,
 * sluice.chunks, sluice.jobs.dlq and the listed topics with P partitions (default 4), then runs until
 * SIGTERM/SIGINT. Limits of the mock (librdkafka 2.0.2): no transactions' abort markers,
 * group.instance.id ignored, ~3 s before a group's first assignment.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: sluice-mock-kafka [--brokers N] [--partitions P] [--topics a,b,...]\n"
                   "Starts librdkafka's mock cluster; first stdout line = bootstrap servers; runs until SIGTERM.\n");
            return 0;
        } else if (!strcmp(argv[i], "--brokers") && i + 1 < argc) {
            if (parse_pos(argv[++i], "--brokers", &brokers)) return 2;
        } else if (!strcmp(argv[i], "--partitions") && i + 1 < argc) {
            if (parse_pos(argv[++i], "--partitions", &partitions)) return 2;
        } else if (!strcmp(argv[i], "--topics") && i + 1 < argc) {
            topics = argv[++i];
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
    printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    while (!g_stop) pause();
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
