/* fuzz_replay_main.c — the main() of a libFuzzer target built without libFuzzer: feeds every file
 * named on the command line (directories: every file in them) to LLVMFuzzerTestOneInput once, each
 * in a buffer of exactly its size so that ASan sees an over-read. Used by the fuzz_*_replay ctests,
 * which replay the committed corpora with any compiler. Fails when no file was found (a missing
 * corpus must not pass silently); a target that finds a violation aborts.
 *   fuzz_X_replay FILE|DIR...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path, long *files)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "%s: cannot read\n", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    (*files)++;
    return 0;
}

int main(int argc, char **argv)
{
    long files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: not found\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i], &files)) return 1;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "%s: cannot list\n", argv[i]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            if (run_file(p, &files)) {
                closedir(d);
                return 1;
            }
        }
        closedir(d);
    }
    if (files == 0) {
        fprintf(stderr, "%s: no input files\n", argv[0]);
        return 1;
    }
    printf("%s: %ld inputs replayed, no failure\n", argv[0], files);
    return 0;
}
