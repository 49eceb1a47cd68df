/* test_nvfp4.c — serving a float checkpoint with NVFP4 routed experts (--quantize-experts nvfp4).
 *
 * On every fixture (experts dequantised from whatever format they are stored in, then quantised):
 * teacher-forced top-1 agreement of the NVFP4 model with the float reference rows, the logits'
 * max abs difference, and how many free-running greedy tokens match the float greedy tokens.
 * Prints the numbers; asserts a sane floor (FP4 experts perturb logits but must not wreck them).
 */
#include "jobs.h"

int main(int argc, char **argv) {
    char names[FX_MAX][256];
    int nf = fx_list(SLUICE_TEST_DATA, names, FX_MAX), failures = 0, tested = 0;
    for (int fi = 0; fi < nf; fi++) {
        char dir[1400];
        if (!fx_selected(SLUICE_TEST_DATA, names[fi], argc > 1 ? argv[1] : NULL)) continue;
        if (snprintf(dir, sizeof dir, "%s/%s", SLUICE_TEST_DATA, names[fi]) >= (int)sizeof dir) continue;
        fx_fixture f;
        if (fx_load(dir, names[fi], &f)) { failures++; continue; }
        sl_engine *e = open_engine(dir, 0, 0, 0, 0, "nvfp4");
        if (!e) { failures++; fx_free(&f); continue; }
        int V = f.vocab, rows = 0, agree = 0, gen = 0, gen_ok = 0, prefix = 0;
        double md = 0.0;
        for (int k = 0; k < f.n; k++) {
            const fx_prompt *p = &f.p[k];
            job j[2];
            memset(j, 0, sizeof j);
            j[0].prompt = p->seq;                /* teacher-forced: the whole fixture sequence */
            j[0].n_prompt = p->rows;
            j[0].s = greedy_sampling(1);
            j[0].s.all_logits = 1;
            j[1].prompt = p->seq;                /* free-running greedy */
            j[1].n_prompt = p->n_prompt;
            j[1].s = greedy_sampling(p->n_greedy);
            j[1].s.ignore_eos = 1;
            if (run_jobs(e, j, 2)) { failures++; continue; }
            for (int t = 0; t < p->rows && t < j[0].n_rows; t++) {
                agree += fx_argmax(j[0].rows + (size_t)t * V, V) == fx_argmax(p->logits + (size_t)t * V, V);
                double d = fx_maxdiff(j[0].rows + (size_t)t * V, p->logits + (size_t)t * V, V);
                if (!(d <= md)) md = d;
                rows++;
            }
            int pre = 1;
            for (int t = 0; t < j[1].n && t < p->n_greedy; t++) {
                int ok = j[1].toks[t] == p->seq[p->n_prompt + t];
                gen_ok += ok;
                pre &= ok;
                prefix += pre;
            }
            gen += p->n_greedy;
            free_jobs(j, 2);
        }
        double a = rows ? (double)agree / rows : 0.0;
        printf("%s nvfp4 experts: teacher-forced top-1 agreement %d/%d (%.1f%%), logits max abs diff %.3g; "
               "free-running greedy: %d/%d tokens equal, %d/%d before the first divergence\n",
               names[fi], agree, rows, 100.0 * a, md, gen_ok, gen, prefix, gen);
        /* floor: the public fixture measured 80%; random agreement would be ~1/vocab */
        double floor = !strcmp(names[fi], "tiny-v4-public") ? 0.7 : 0.5;
        if (a < floor) { fprintf(stderr, "%s: top-1 agreement %.3f below the %.2f floor\n", names[fi], a, floor); failures++; }
        sl_engine_close(e);
        fx_free(&f);
        tested++;
    }
    if (!tested && !(argc > 1 && !strcmp(argv[1], "slow"))) failures++;
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("ok\n");
    return 0;
}
