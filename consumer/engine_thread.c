/* engine_thread.c — see engine_thread.h. */
#include "engine_thread.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint64_t req;
    void *tag;
    double t_submit, t_first;
} active_req;

struct eng_thread {
    sl_engine *e;
    int wake_fd;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    eng_cmd *cmds;                   /* under mu */
    int n_cmds, cap_cmds;
    eng_event *evs;                  /* under mu */
    int n_evs, cap_evs;
    eng_stats stats;                 /* under mu */
    int fault;                       /* under mu: a step failed (a device fault); its requests are gone */
    char fault_why[160];
    /* engine-thread private */
    active_req *act;
    int n_act, cap_act;
    eng_event *out;
    int n_out, cap_out;
};

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static eng_event *out_push(eng_thread *t) {
    if (grow((void **)&t->out, &t->cap_out, t->n_out + 1, sizeof(eng_event))) {
        fprintf(stderr, "sluice-worker: engine thread out of memory\n");
        abort();   /* losing an event would lose a job's finish; the supervisor restarts us */
    }
    eng_event *ev = &t->out[t->n_out++];
    memset(ev, 0, sizeof(*ev));
    return ev;
}

static active_req *find_req(eng_thread *t, uint64_t req) {
    for (int i = 0; i < t->n_act; i++)
        if (t->act[i].req == req) return &t->act[i];
    return NULL;
}

static void run_cmd(eng_thread *t, eng_cmd *c, int faulted) {
    if (c->kind == ECMD_SUBMIT && faulted) {   /* the worker hands the job back */
        free(c->prompt);
        free((void *)c->s.stop_ids);
    } else if (c->kind == ECMD_SUBMIT) {
        uint64_t req;
        char err[160];
        if (sl_engine_submit(t->e, c->prompt, c->n_prompt, &c->s, (uint64_t)(uintptr_t)c->tag, &req, err,
                             sizeof(err)) != 0) {
            eng_event *ev = out_push(t);
            ev->kind = EEV_FINISH;
            ev->tag = c->tag;
            ev->reason = SL_FINISH_ERROR;
            ev->n_prompt = c->n_prompt;
            snprintf(ev->error, sizeof(ev->error), "%s", err);
        } else {
            if (grow((void **)&t->act, &t->cap_act, t->n_act + 1, sizeof(active_req))) abort();
            active_req *a = &t->act[t->n_act++];
            a->req = req;
            a->tag = c->tag;
            a->t_submit = mono_ms();
            a->t_first = 0;
        }
        free(c->prompt);
        free((void *)c->s.stop_ids);
    } else {
        for (int i = 0; i < t->n_act; i++)
            if (t->act[i].tag == c->tag) sl_engine_finish(t->e, t->act[i].req, c->reason);
    }
}

static void drain_engine(eng_thread *t) {
    sl_event ev;
    double now = mono_ms();
    while (sl_engine_poll(t->e, &ev) == 1) {
        active_req *a = find_req(t, ev.req);
        if (ev.kind == SL_EV_TOKEN) {
            eng_event *o = out_push(t);
            o->kind = EEV_TOKEN;
            o->tag = (void *)(uintptr_t)ev.tag;
            o->token = ev.token;
            o->logprob = ev.logprob;
            if (a && a->t_first == 0) a->t_first = now;
        } else if (ev.kind == SL_EV_FINISH) {
            eng_event *o = out_push(t);
            o->kind = EEV_FINISH;
            o->tag = (void *)(uintptr_t)ev.tag;
            o->reason = ev.reason;
            o->n_prompt = ev.n_prompt;
            o->n_generated = ev.n_generated;
            if (ev.error) snprintf(o->error, sizeof(o->error), "%s", ev.error);
            if (a) {
                double first = a->t_first ? a->t_first : now;
                o->ttft_ms = first - a->t_submit;
                o->decode_ms = now - first;
                *a = t->act[--t->n_act];
            }
        }
    }
}

/* After a failed step: the engine finished every request with ERROR; none of them is the job's fault, so no finish
 * goes out as a result: the worker hands the jobs back (eng_thread_fault). */
static void drain_fault(eng_thread *t) {
    sl_event ev;
    char why[160] = "";
    while (sl_engine_poll(t->e, &ev) == 1) {
        if (ev.kind != SL_EV_FINISH) continue;
        if (!why[0] && ev.error) snprintf(why, sizeof(why), "%s", ev.error);
    }
    t->n_act = 0;   /* the engine holds no request any more */
    pthread_mutex_lock(&t->mu);
    t->fault = 1;
    snprintf(t->fault_why, sizeof(t->fault_why), "%s", why[0] ? why : "engine step failed");
    pthread_mutex_unlock(&t->mu);
}

static void *thread_main(void *arg) {
    eng_thread *t = arg;
    eng_cmd *cmds = NULL;
    int cap_cmds = 0;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (!t->stop && t->n_cmds == 0 && t->n_act == 0) pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop) {
            pthread_mutex_unlock(&t->mu);
            break;
        }
        /* swap the command list out */
        eng_cmd *tmp = t->cmds;
        int n = t->n_cmds, c = t->cap_cmds;
        t->cmds = cmds;
        t->cap_cmds = cap_cmds;
        t->n_cmds = 0;
        cmds = tmp;
        cap_cmds = c;
        const int faulted = t->fault;
        pthread_mutex_unlock(&t->mu);

        for (int i = 0; i < n; i++) run_cmd(t, &cmds[i], faulted);
        double t0 = mono_ms();
        int ran = 0;
        if (!faulted && sl_engine_active(t->e) > 0) ran = sl_engine_step(t->e);
        if (ran < 0) drain_fault(t);
        else drain_engine(t);
        double dt = mono_ms() - t0;
        sl_engine_stats es;
        sl_engine_get_stats(t->e, &es);

        pthread_mutex_lock(&t->mu);
        t->stats.e = es;
        t->stats.steps += ran > 0;
        t->stats.busy_s += dt * 1e-3;
        t->stats.batch = t->n_act > 0 && ran > 0 ? ran : 0;
        int wake = ran < 0;
        if (t->n_out > 0) {
            if (grow((void **)&t->evs, &t->cap_evs, t->n_evs + t->n_out, sizeof(eng_event))) abort();
            wake |= t->n_evs == 0;
            memcpy(t->evs + t->n_evs, t->out, (size_t)t->n_out * sizeof(eng_event));
            t->n_evs += t->n_out;
            t->n_out = 0;
        }
        pthread_mutex_unlock(&t->mu);
        if (wake) {
            char b = 1;
            if (write(t->wake_fd, &b, 1) < 0) { /* pipe full: the reader is awake anyway */
            }
        }
    }
    free(cmds);
    return NULL;
}

int eng_thread_start(eng_thread **out, sl_engine *e, int wake_fd) {
    eng_thread *t = calloc(1, sizeof(*t));
    if (!t) return -1;
    t->e = e;
    t->wake_fd = wake_fd;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    sl_engine_get_stats(e, &t->stats.e);   /* the state budget before the first step */
    if (pthread_create(&t->th, NULL, thread_main, t) != 0) {
        free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void eng_thread_stop(eng_thread *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->th, NULL);
    for (int i = 0; i < t->n_cmds; i++) {
        free(t->cmds[i].prompt);
        free((void *)t->cmds[i].s.stop_ids);
    }
    free(t->cmds);
    free(t->evs);
    free(t->act);
    free(t->out);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

int eng_thread_send(eng_thread *t, const eng_cmd *cmds, int n) {
    if (n == 0) return 0;
    pthread_mutex_lock(&t->mu);
    if (grow((void **)&t->cmds, &t->cap_cmds, t->n_cmds + n, sizeof(eng_cmd))) {
        pthread_mutex_unlock(&t->mu);
        return -1;
    }
    memcpy(t->cmds + t->n_cmds, cmds, (size_t)n * sizeof(eng_cmd));
    t->n_cmds += n;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

int eng_thread_take(eng_thread *t, eng_event **evs) {
    pthread_mutex_lock(&t->mu);
    int n = t->n_evs;
    *evs = NULL;
    if (n > 0) {
        *evs = t->evs;
        t->evs = NULL;
        t->n_evs = 0;
        t->cap_evs = 0;
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

int eng_thread_fault(eng_thread *t, char *why, size_t n) {
    pthread_mutex_lock(&t->mu);
    const int f = t->fault;
    if (f && why && n) snprintf(why, n, "%s", t->fault_why);
    pthread_mutex_unlock(&t->mu);
    return f;
}

void eng_thread_stats(eng_thread *t, eng_stats *out) {
    pthread_mutex_lock(&t->mu);
    *out = t->stats;
    pthread_mutex_unlock(&t->mu);
}
