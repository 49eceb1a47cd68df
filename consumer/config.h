/* config.h — sluice-worker configuration: `key=value` file lines plus `--set key=value` overrides.
 *
 * Every key the worker knows is listed in config.c with its default and type; an unknown key, a value
 * of the wrong type or a missing required key is an error with one line in err. Keys starting with
 * `kafka.` are not checked here: they are passed to librdkafka as is (`kafka.consumer.X` only to the
 * consumer, `kafka.producer.X` only to the producer, plain `kafka.X` to both). Later settings win:
 * file lines in order, then each --set in order. Values are kept as strings; the typed getters read
 * them (cfg_validate has already checked that they parse).
 */
#ifndef SLUICE_CONFIG_FILE_H
#define SLUICE_CONFIG_FILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *key;
    char *value;
} cfg_entry;

typedef struct {
    cfg_entry *e;
    int n, cap;
} cfg;

void cfg_init(cfg *c);            /* empty; defaults come from cfg_get's table */
void cfg_free(cfg *c);
/* Set one `key=value` (string "k=v"), or key and value separately. 0 or -1 with err. */
int cfg_set_kv(cfg *c, const char *kv, char *err, size_t errlen);
int cfg_set(cfg *c, const char *key, const char *value, char *err, size_t errlen);
/* Read a file of `key=value` lines ('#' comments, blank lines, spaces around key and value trimmed). */
int cfg_load_file(cfg *c, const char *path, char *err, size_t errlen);
/* Check every key is known (or kafka.*), every value parses, and required keys are present. */
int cfg_validate(const cfg *c, char *err, size_t errlen);

/* The value set for key, else its default (NULL for a kafka.* key never set). */
const char *cfg_get(const cfg *c, const char *key);
int64_t cfg_int(const cfg *c, const char *key);
/* Print every known key with its default and meaning (for --help and the README). */
void cfg_print_reference(void *FILE_stream);

#endif
