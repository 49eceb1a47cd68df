/* sampler.h — next-token selection from one row of logits, per request.
 *
 * Order of operations (sl_sampler_dist):
 *   1. repetition penalty p != 1 (CTRL rule) over every distinct token of the history
 *      (prompt + generated): logit > 0 ? logit / p : logit * p
 *   2. z = logits / temperature (temperature 0 = greedy: z = logits)
 *   3. greedy (temperature < 1e-5 or top_k 1): the argmax of z, lowest id on ties; no random draw
 *   4. otherwise p = softmax(z), then in this order, each on the survivors of the previous one:
 *      top_k (the k most likely; ties -> lower id), top_p (the smallest most-likely-first prefix
 *      whose renormalised mass reaches top_p, at least one token), min_p (keep p >= min_p·p_max);
 *      renormalise; draw u in [0,1) from the request's RNG and walk the survivors in token-id order.
 * logprob reported = log-softmax of z (after the penalty and the temperature; temperature 1 when
 * greedy) at the chosen token, BEFORE top-k/top-p/min-p truncation (what vLLM/OpenAI report).
 *
 * The RNG is splitmix64 seeded with the request's seed and advanced once per sampled token, so a
 * request's tokens depend only on its seed, prompt and settings, never on batching or preemption.
 */
#ifndef SLUICE_SAMPLER_H
#define SLUICE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct { uint64_t s; } sl_rng;
void sl_rng_seed(sl_rng *r, uint64_t seed);
uint64_t sl_rng_next(sl_rng *r);
double sl_rng_uniform(sl_rng *r);          /* [0, 1), 53 bits */

typedef struct {
    int V;
    float *z;              /* processed logits (steps 1-2) */
    float *p;              /* final distribution (step 4; greedy: one-hot) */
    int *idx;              /* work: sort order */
    unsigned char *seen;   /* work: penalty marks */
    double lse;            /* log-sum-exp of z */
} sl_sampler;

int sl_sampler_init(sl_sampler *w, int vocab);
void sl_sampler_free(sl_sampler *w);

/* 0, or -1 with one line (temperature < 0 or not finite, top_k < 0, top_p not in (0,1],
 * min_p not in [0,1], repetition_penalty <= 0, max_tokens < 1, n_stop_ids < 0 or ids NULL). */
int sl_sampling_check(const sl_sampling *s, char *err, size_t errlen);
int sl_sampling_is_greedy(const sl_sampling *s);

/* Steps 1-4 into w->z, w->p, w->lse; returns the greedy token if greedy, else -1. */
int sl_sampler_dist(sl_sampler *w, const sl_sampling *s, const float *logits,
                    const int32_t *hist, int n_hist);
/* Choose the next token (draws from rng unless greedy); *logprob as documented above. */
int32_t sl_sample(sl_sampler *w, const sl_sampling *s, const float *logits,
                  const int32_t *hist, int n_hist, sl_rng *rng, float *logprob);

#endif
