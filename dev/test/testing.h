/*
 * dev/test/testing.h -- the tiny test protocol every test program uses.
 *
 * Each check prints one line: "ok - <description>" or "not ok - <description> [file:line]".
 * dev/test/run_tests.sh counts those lines over all test programs and prints the
 * final "N passed, M failed". A test program must call testing_finish() and return
 * its value; a program that crashes or exits non-zero without printing a "not ok"
 * line is counted as one failure by the runner.
 *
 * Usage:
 *   TEST_CHECK(err < 1e-5, "layernorm forward max rel err %.2e", err);
 *   return testing_finish();
 */
#ifndef LLMC_TESTING_H
#define LLMC_TESTING_H
#include <stdio.h>
#include <stdlib.h>

static int testing_passed = 0;
static int testing_failed = 0;

#define TEST_CHECK(cond, ...)                                              \
    do {                                                                   \
        if (cond) {                                                        \
            testing_passed++;                                              \
            printf("ok - ");                                               \
            printf(__VA_ARGS__);                                           \
            printf("\n");                                                  \
        } else {                                                           \
            testing_failed++;                                              \
            printf("not ok - ");                                           \
            printf(__VA_ARGS__);                                           \
            printf("  [%s:%d]\n", __FILE__, __LINE__);                     \
        }                                                                  \
        fflush(stdout);                                                    \
    } while (0)

/* the whole file at path as a NUL-terminated malloc'ed string (its length in *n_out when n_out is not NULL); NULL
 * when it cannot be opened */
static inline char* testing_read_file(const char* path, size_t* n_out) {
    FILE* f = fopen(path, "rb");
    if (!f) { if (n_out) { *n_out = 0; } return NULL; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    if (buf) { buf[got] = '\0'; }
    fclose(f);
    if (n_out) { *n_out = got; }
    return buf;
}

/* prints the per-program summary; returns the exit status for main() */
static inline int testing_finish(void) {
    printf("# %d passed, %d failed\n", testing_passed, testing_failed);
    return testing_failed ? 1 : 0;
}

#endif /* LLMC_TESTING_H */
