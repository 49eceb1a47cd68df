/* job_diff.h — field-by-field comparison of two decoded Jobs for the fuzz targets (fuzz_job: a round trip;
 * fuzz_job_resolver: a round trip and two decoders against each other). */
#ifndef SLUICE_FUZZ_JOB_DIFF_H
#define SLUICE_FUZZ_JOB_DIFF_H

#include <stdint.h>
#include <string.h>

#include "codec.h"

static int same_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static int same_opt_str(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* The first field in which jobs a and b differ ("id", "prompt", "a flag", ...), or NULL when they are the same job;
 * the id compared as far as the encoder writes it (strlen) when ids_as_c. */
static const char *job_diff(const sl_job *a, const sl_job *b, int ids_as_c)
{
#define DIFF(what) return what
    if (ids_as_c ? strcmp(a->id, b->id) != 0 : !same_bytes(a->id, a->id_len, b->id, b->id_len)) DIFF("id");
    if (a->prompt_is_text != b->prompt_is_text) DIFF("prompt kind");
    if (a->prompt_is_text ? !same_bytes(a->prompt_text, a->prompt_text_len, b->prompt_text, b->prompt_text_len)
                          : a->n_prompt_ids != b->n_prompt_ids ||
                                (a->n_prompt_ids &&
                                 memcmp(a->prompt_ids, b->prompt_ids, (size_t)a->n_prompt_ids * sizeof(int32_t))))
        DIFF("prompt");
    if (a->max_tokens != b->max_tokens || a->top_k != b->top_k || a->priority != b->priority) DIFF("an int field");
    if (memcmp(&a->temperature, &b->temperature, sizeof a->temperature) || memcmp(&a->top_p, &b->top_p, sizeof a->top_p) ||
        memcmp(&a->min_p, &b->min_p, sizeof a->min_p) ||
        memcmp(&a->repetition_penalty, &b->repetition_penalty, sizeof a->repetition_penalty))
        DIFF("a float field");
    if (a->has_seed != b->has_seed || (a->has_seed && a->seed != b->seed)) DIFF("seed");
    if (a->has_deadline != b->has_deadline || (a->has_deadline && a->deadline_ms != b->deadline_ms)) DIFF("deadline");
    if (a->ignore_eos != b->ignore_eos || a->logprobs != b->logprobs || a->stream != b->stream ||
        a->thinking != b->thinking)
        DIFF("a flag");
    if (!same_opt_str(a->tenant, b->tenant) || !same_opt_str(a->reply_topic, b->reply_topic))
        DIFF("tenant or reply_topic");
    if (a->n_stop != b->n_stop || a->n_stop_ids != b->n_stop_ids) DIFF("stop count");
    for (int i = 0; i < a->n_stop; i++)
        if (!same_bytes(a->stop[i], a->stop_len[i], b->stop[i], b->stop_len[i])) DIFF("stop");
    if (a->n_stop_ids && memcmp(a->stop_ids, b->stop_ids, (size_t)a->n_stop_ids * sizeof(int32_t)))
        DIFF("stop_token_ids");
    if (a->n_meta != b->n_meta) DIFF("metadata count");
    for (int i = 0; i < a->n_meta; i++)
        if (strcmp(a->meta_k[i], b->meta_k[i]) || strcmp(a->meta_v[i], b->meta_v[i])) DIFF("metadata");
    if (a->n_messages != b->n_messages) DIFF("message count");
    for (int i = 0; i < a->n_messages; i++) {
        const sl_job_message *x = &a->messages[i], *y = &b->messages[i];
        if (strcmp(x->role, y->role) || !same_bytes(x->content, x->content_len, y->content, y->content_len) ||
            (x->reasoning_content == NULL) != (y->reasoning_content == NULL) ||
            (x->reasoning_content && !same_bytes(x->reasoning_content, x->reasoning_content_len, y->reasoning_content,
                                                 y->reasoning_content_len)))
            DIFF("a message");
    }
    return NULL;
#undef DIFF
}

#endif
