/* job_resolver.h — Avro schema resolution of a producer's Job schema (the writer schema, e.g. from a
 * schema registry) into the worker's (schemas/job.avsc, the reader schema).
 *
 * Avro's rules: record fields are matched by name in any order; writer fields the reader does not have
 * are skipped; reader fields the writer lacks take the reader schema's default (no default: the schemas
 * are incompatible); int is read as long, float or double, long as float or double, float as double; a
 * writer type is read as the first branch of a reader union it resolves to; every branch of a writer
 * union must resolve; records match by unqualified name; enums and fixed types must be equal.
 *
 * avro-c 1.11 has the resolved reader (avro_resolved_reader_new) that does the matching at read time,
 * but it knows no defaults (a reader field missing from the writer is an error) and on several
 * incompatible pairs it frees memory twice instead of failing. So job_resolver_new checks the pair
 * first and gives avro-c only compatible ones: the reader schema narrowed to the fields the writer has
 * (every nested record too). job_resolver_read reads the writer's bytes through that resolved reader
 * and copies them into a value of the worker's Job schema, filling the missing fields from the
 * defaults in schemas/job.avsc. Writer bytes are walked first (avro_scan.h), as the built-in decoder
 * does, so hostile lengths never reach avro-c, nor more array and map items than the message has bytes
 * (a writer's items may take no bytes, e.g. null), nor more values in all than a few per byte (each
 * such item may be a record of many null fields): the work of a decode stays linear in the message.
 *
 * A resolver is used by one thread at a time (avro-c's error text is process-wide).
 */
#ifndef SLUICE_JOB_RESOLVER_H
#define SLUICE_JOB_RESOLVER_H

#include <avro.h>
#include <stddef.h>

typedef struct sl_job_resolver sl_job_resolver;

/* A resolver for Jobs written with writer_json (an Avro schema). -1 with err naming the first field that
 * does not resolve (e.g. "field 'prompt': writer type int matches no branch of the reader's union"),
 * or the parse error. */
int job_resolver_new(const char *writer_json, size_t len, sl_job_resolver **out, char *err, size_t errlen);
void job_resolver_free(sl_job_resolver *r);

/* Read one bare Avro record of the writer schema into dst, a generic value of the worker's Job schema
 * (reset first). -1 with err on truncated, malformed or trailing bytes. */
int job_resolver_read(sl_job_resolver *r, const void *buf, size_t len, avro_value_t *dst, char *err,
                      size_t errlen);

#endif
