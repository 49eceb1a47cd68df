/* pool.c — a small persistent thread pool for the CPU backend.
 *
 * cpu_pool_run(fn, n) cuts [0,n) into one contiguous range per thread; the calling thread does
 * range 0 and waits for the others. Workers sleep on a condition variable between runs; a
 * generation counter tells them a new run has started.
 */
#include "cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct cpu_pool {
    int n_threads;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    unsigned long gen;
    int pending;
    int quit;
    cpu_task_fn fn;
    void *arg;
    int n;
    float **scratch;
    size_t scratch_floats;
};

typedef struct { cpu_pool *p; int id; } worker_arg;

static void run_range(cpu_pool *p, int id) {
    int n = p->n, T = p->n_threads;
    int i0 = (int)((long)n * id / T), i1 = (int)((long)n * (id + 1) / T);
    if (i1 > i0) p->fn(p->arg, i0, i1, id);
}

static void *worker(void *a) {
    worker_arg *wa = a;
    cpu_pool *p = wa->p;
    int id = wa->id;
    free(wa);
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->start, &p->mu);
        if (p->quit) { pthread_mutex_unlock(&p->mu); return NULL; }
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_range(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

cpu_pool *cpu_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) n_threads = 256;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = 1;
    p->scratch = calloc((size_t)n_threads, sizeof *p->scratch);
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    if (!p->scratch || !p->th) { cpu_pool_destroy(p); return NULL; }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) break;
        wa->p = p;
        wa->id = i;
        if (pthread_create(&p->th[i], NULL, worker, wa) != 0) { free(wa); break; }
        p->n_threads = i + 1;
    }
    return p;
}

void cpu_pool_destroy(cpu_pool *p) {
    if (!p) return;
    if (p->th) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n_threads; i++) pthread_join(p->th[i], NULL);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->start);
        pthread_cond_destroy(&p->done);
    }
    if (p->scratch)
        for (int i = 0; i < p->n_threads; i++) free(p->scratch[i]);
    free(p->scratch);
    free(p->th);
    free(p);
}

int cpu_pool_threads(const cpu_pool *p) { return p->n_threads; }

void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *arg, int n) {
    if (n <= 0) return;
    if (p->n_threads == 1 || n == 1) { fn(arg, 0, n, 0); return; }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->pending = p->n_threads - 1;
    p->gen++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    run_range(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int cpu_pool_reserve(cpu_pool *p, size_t floats) {
    if (floats <= p->scratch_floats) return 0;
    for (int i = 0; i < p->n_threads; i++) {
        float *s = realloc(p->scratch[i], floats * sizeof(float));
        if (!s) return -1;
        p->scratch[i] = s;
    }
    p->scratch_floats = floats;
    return 0;
}

float *cpu_pool_scratch(cpu_pool *p, int thread) { return p->scratch[thread]; }
