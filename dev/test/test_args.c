/*
 * dev/test/test_args.c -- unit tests of llmc/args.h.
 * Successful parses run in-process; every error case runs args_parse in a fork()ed child and
 * checks the exit status (1), that stderr is exactly one line, and what that line says.
 * Also llmc/utils.h's launcher_rank (a launcher's rank variable counts only with its size variable agreeing, so a
 * stale SLURM_PROCID does not make a lone process leave its errors to a rank 0 that does not exist) and FATAL_ALL
 * (a rank > 0 still alive after the grace period prints the line too).
 */
#include <fcntl.h>
#include <sys/wait.h>
#define FATAL_ALL_GRACE_S 1 /* llmc/utils.h: FATAL_ALL's wait on a rank > 0, 30 s in the trainer */
#include "llmc/args.h"
#include "dev/test/testing.h"

typedef struct {
    int batch, seqlen, n, nk, ge;
    float lr;
    char* input;
    char* out_dir;
} Config;

static void config_defaults(Config* c) {
    c->batch = 4; c->seqlen = 64; c->n = 0; c->nk = 0; c->ge = 0;
    c->lr = 3e-4f;
    c->input = (char*)"data/train_*.bin";
    c->out_dir = NULL;
}

#define N_SPECS 8
static void make_specs(Config* c, ArgSpec* s) {
    ArgSpec specs[N_SPECS] = {
        {"b", "batch-size", ARG_INT, &c->batch, 1, 1024, "micro-batch size per process"},
        {"t", "seq-len", ARG_INT, &c->seqlen, 1, 1024, "sequence length"},
        {"n", "checkpoint-every", ARG_INT, &c->n, 0, INFINITY, "checkpoint every n steps"},
        {"nk", "checkpoints-keep", ARG_INT, &c->nk, 0, INFINITY, "checkpoints to keep"},
        {"ge", "recompute-gelu", ARG_INT, &c->ge, 0, 1, "recompute GELU"},
        {"l", "learning-rate", ARG_FLOAT, &c->lr, 0, 1, "peak learning rate"},
        {"i", "input-train", ARG_STRING, &c->input, -INFINITY, INFINITY, "train shard glob"},
        {"o", "output-dir", ARG_STRING, &c->out_dir, -INFINITY, INFINITY, "output directory"},
    };
    memcpy(s, specs, sizeof(specs));
}

/* parses a NULL-terminated argument list in-process */
static int parse_list(Config* c, const char** list) {
    char* argv[32];
    int argc = 0;
    argv[argc++] = (char*)"train";
    for (; *list; list++) { argv[argc++] = (char*)*list; }
    argv[argc] = NULL;
    ArgSpec specs[N_SPECS];
    config_defaults(c);
    make_specs(c, specs);
    return args_parse(specs, N_SPECS, argc, argv, "train", "test program");
}

/* runs parse_list in a child; captures stderr and stdout; returns exit status */
static int parse_in_child(const char** list, char* err, size_t cap, char* outbuf, size_t outcap) {
    char t1[] = "/tmp/argtest_err_XXXXXX", t2[] = "/tmp/argtest_out_XXXXXX";
    int fe = mkstemp(t1), fo = mkstemp(t2);
    if (fe < 0 || fo < 0) { perror("mkstemp"); exit(2); }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fe, 2); dup2(fo, 1);
        Config c;
        int r = parse_list(&c, list);
        fflush(stdout);
        exit(r == 1 ? 42 : 0); /* 42: help requested */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    lseek(fe, 0, SEEK_SET); lseek(fo, 0, SEEK_SET);
    ssize_t n = read(fe, err, cap - 1); err[n > 0 ? n : 0] = '\0';
    n = read(fo, outbuf, outcap - 1); outbuf[n > 0 ? n : 0] = '\0';
    close(fe); close(fo); unlink(t1); unlink(t2);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int count_lines(const char* s) {
    int n = 0;
    for (; *s; s++) { if (*s == '\n') { n++; } }
    return n;
}

/* expects exit 1 with one stderr line containing all of the given substrings */
static void expect_error(const char** list, const char* what, const char* sub1, const char* sub2) {
    char err[4096], out[4096];
    int rc = parse_in_child(list, err, sizeof(err), out, sizeof(out));
    int ok = rc == 1 && count_lines(err) == 1 && strncmp(err, "error: ", 7) == 0 &&
             (sub1 == NULL || strstr(err, sub1)) && (sub2 == NULL || strstr(err, sub2));
    char* nl = strchr(err, '\n');
    if (nl) { *nl = '\0'; }
    TEST_CHECK(ok, "%s: exit 1 and one line mentioning '%s'%s%s (rc %d: %s)", what, sub1 ? sub1 : "",
               sub2 ? " and " : "", sub2 ? sub2 : "", rc, err);
}

/* launcher_rank with only the given variables set (NULL-terminated name, value pairs) */
static int rank_with(const char* const* kv) {
    const char* all[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
                         "SLURM_PROCID", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) { unsetenv(all[i]); }
    for (int i = 0; kv[i]; i += 2) { setenv(kv[i], kv[i + 1], 1); }
    return launcher_rank();
}

static void test_launcher_rank(void) {
    const char* none[] = {NULL};
    const char* ompi[] = {"OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "4", NULL};
    const char* slurm[] = {"SLURM_PROCID", "3", "SLURM_NTASKS", "4", NULL};
    const char* stale[] = {"SLURM_PROCID", "3", NULL};
    const char* stale1[] = {"SLURM_PROCID", "3", "SLURM_NTASKS", "1", NULL};
    const char* outside[] = {"OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "4", NULL};
    const char* pmix[] = {"PMIX_RANK", "1", NULL};
    TEST_CHECK(rank_with(none) == 0 && rank_with(ompi) == 2 && rank_with(slurm) == 3 && rank_with(pmix) == 1,
               "launcher_rank: 0 without a launcher; Open MPI's, Slurm's and PMIx's rank under their launchers");
    TEST_CHECK(rank_with(stale) == 0 && rank_with(stale1) == 0 && rank_with(outside) == 0,
               "launcher_rank: a SLURM_PROCID without SLURM_NTASKS, with a job of 1 task, or a rank outside the size "
               "counts as 0 (this process prints its own errors)");
    /* a rank > 0 that no launcher ends: FATAL_ALL prints its line after the grace period instead of exiting silent */
    const char* alone[] = {"SLURM_PROCID", "1", "SLURM_NTASKS", "2", NULL};
    char t1[] = "/tmp/argtest_fatal_XXXXXX";
    int fe = mkstemp(t1);
    if (fe < 0) { perror("mkstemp"); exit(2); }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fe, 2);
        rank_with(alone);
        FATAL_ALL("flag -b is 0; expected 1..1024");
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char err[1024];
    lseek(fe, 0, SEEK_SET);
    ssize_t n = read(fe, err, sizeof(err) - 1); err[n > 0 ? n : 0] = '\0';
    close(fe); unlink(t1);
    int lines = count_lines(err);
    char* nl = strchr(err, '\n');
    if (nl) { *nl = '\0'; }
    TEST_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && lines == 1 && strstr(err, "flag -b is 0"),
               "FATAL_ALL on a rank > 0 that no launcher ends: the line is printed after the %d s grace period, exit 1 "
               "(%s)", FATAL_ALL_GRACE_S, err);
    rank_with(none);
}

int main(void) {
    Config c;
    { const char* a[] = {NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.batch == 4 && c.seqlen == 64 && c.lr == 3e-4f && strcmp(c.input, "data/train_*.bin") == 0 && c.out_dir == NULL,
                 "no arguments: returns 0, defaults untouched"); }
    { const char* a[] = {"-b", "8", "-t", "128", "-l", "0.001", "-o", "out dir", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.batch == 8 && c.seqlen == 128 && c.lr == 0.001f && strcmp(c.out_dir, "out dir") == 0,
                 "short forms: int, float and string values"); }
    { const char* a[] = {"--batch-size", "16", "--learning-rate=2.5e-4", "--output-dir=/tmp/x", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.batch == 16 && c.lr == 2.5e-4f && strcmp(c.out_dir, "/tmp/x") == 0, "long forms with space and '='"); }
    { const char* a[] = {"-batch-size", "2", "-ge", "1", "-nk", "3", "-n", "5", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.batch == 2 && c.ge == 1 && c.nk == 3 && c.n == 5, "-<long>, -ge, and -n vs -nk (exact match wins): n=%d nk=%d", c.n, c.nk); }
    { const char* a[] = {"-nk", "7", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.nk == 7 && c.n == 0, "-nk alone sets nk only"); }
    { const char* a[] = {"-n", "9", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.n == 9 && c.nk == 0, "-n alone sets n only"); }
    { const char* a[] = {"--b=3", "-t=32", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.batch == 3 && c.seqlen == 32, "--<short>=value and -<short>=value"); }
    { const char* a[] = {"-b", "1", "-b", "1024", "-l", "0", "-l", "1", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.batch == 1024 && c.lr == 1.0f, "inclusive bounds accepted; the last occurrence wins"); }
    { const char* a[] = {"-l", "-0", "-i", "-weird-name", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.lr == 0.0f && strcmp(c.input, "-weird-name") == 0, "values starting with '-' are values"); }
    { const char* a[] = {"-o", "", "--input-train=", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.out_dir && c.out_dir[0] == '\0' && c.input[0] == '\0', "empty string values are accepted ('' = caller's 'none')"); }
    { const char* a[] = {"-t", "+12", NULL};
      int r = parse_list(&c, a);
      TEST_CHECK(r == 0 && c.seqlen == 12, "explicit + sign accepted"); }

    /* a repeated flag: the last value is used, and one note line on stdout says so (never silent) */
    {
        const char* a[] = {"-b", "4", "--batch-size", "8", "-batch-size=16", "-l", "0.5", NULL};
        char err[4096], out[4096];
        int rc = parse_in_child(a, err, sizeof(err), out, sizeof(out));
        int r = parse_list(&c, a);
        int one_note = count_lines(out) == 1 &&
                       strcmp(out, "note: flag -b, --batch-size was given 3 times; the last value, 16, is used\n") == 0;
        out[strcspn(out, "\n")] = '\0';
        TEST_CHECK(rc == 0 && r == 0 && c.batch == 16 && err[0] == '\0' && one_note,
                   "a flag given 3 times (-b, --batch-size, -batch-size=): the last value, one note line naming the flag "
                   "(stdout: '%s')", out);
    }

    /* help */
    {
        const char* a[] = {"-b", "12", "--help", NULL};
        char err[8192], out[8192];
        int rc = parse_in_child(a, err, sizeof(err), out, sizeof(out));
        TEST_CHECK(rc == 42 && err[0] == '\0', "--help: args_parse returns 1, nothing on stderr (rc %d)", rc);
        TEST_CHECK(strstr(out, "-b, --batch-size <int>") && strstr(out, "micro-batch size per process (default: 12; range 1..1024)"),
                   "help line for -b shows type, text, current value as default and range");
        TEST_CHECK(strstr(out, "-l, --learning-rate <float>") && strstr(out, "(default: 0.0003; range 0..1)"), "help line for a float flag");
        TEST_CHECK(strstr(out, "-o, --output-dir <string>") && strstr(out, "(default: none)"), "help line for a NULL string default");
        TEST_CHECK(strstr(out, "-nk, --checkpoints-keep <int>") && strstr(out, "range 0..inf"), "help lists -nk with an open range");
        TEST_CHECK(strstr(out, "usage: train") && strstr(out, "test program"), "help prints usage and the header");
        ArgSpec specs[N_SPECS];
        config_defaults(&c);
        make_specs(&c, specs);
        int all = 1;
        for (int i = 0; i < N_SPECS; i++) { if (!strstr(out, specs[i].long_name)) { all = 0; } }
        TEST_CHECK(all, "help lists every flag of the table");
        const char* h[] = {"-h", NULL};
        rc = parse_in_child(h, err, sizeof(err), out, sizeof(out));
        TEST_CHECK(rc == 42 && strstr(out, "--batch-size"), "-h also prints the help");
    }

    /* config output */
    {
        const char* a[] = {"-b", "8", "-i", "a\"b\\c", NULL};
        parse_list(&c, a);
        ArgSpec specs[N_SPECS];
        make_specs(&c, specs);
        char* js = args_config_json(specs, N_SPECS);
        TEST_CHECK(strstr(js, "\"batch-size\":8") && strstr(js, "\"input-train\":\"a\\\"b\\\\c\"") && strstr(js, "\"output-dir\":null") &&
                   strstr(js, "\"learning-rate\":0.000300000014"),
                   "args_config_json: ints, escaped strings, null, floats (%s)", js);
        free(js);
    }

    /* errors */
    { const char* a[] = {"--batch-sise", "4", NULL}; expect_error(a, "misspelled long flag", "--batch-sise", "did you mean -b, --batch-size"); }
    { const char* a[] = {"--batch", "4", NULL}; expect_error(a, "abbreviation is not accepted", "--batch", "did you mean -b, --batch-size"); }
    { const char* a[] = {"-zz", "4", NULL}; expect_error(a, "unknown flag without a close match", "unknown flag '-zz'", NULL); }
    { const char* a[] = {"-b", NULL}; expect_error(a, "missing value", "'-b' needs a <int> value", NULL); }
    { const char* a[] = {"--learning-rate", NULL}; expect_error(a, "missing value of a long flag", "--learning-rate", "needs a <float> value"); }
    { const char* a[] = {"-b", "4x", NULL}; expect_error(a, "trailing garbage", "expects an integer", "'4x'"); }
    { const char* a[] = {"-b", "four", NULL}; expect_error(a, "non-numeric int", "expects an integer", "'four'"); }
    { const char* a[] = {"-b", "4.5", NULL}; expect_error(a, "fraction for an int", "expects an integer", "'4.5'"); }
    { const char* a[] = {"-b=", NULL}; expect_error(a, "empty value", "empty", NULL); }
    { const char* a[] = {"-l", "1e-3abc", NULL}; expect_error(a, "float with trailing garbage", "expects a number", "'1e-3abc'"); }
    { const char* a[] = {"-l", "nan", NULL}; expect_error(a, "NaN float", "not a finite float", NULL); }
    { const char* a[] = {"-l", "1e39", NULL}; expect_error(a, "float overflow", "not a finite float", NULL); }
    { const char* a[] = {"-b", "0", NULL}; expect_error(a, "int below range", "out of range", "1 <= value <= 1024"); }
    { const char* a[] = {"-b", "1025", NULL}; expect_error(a, "int above range", "out of range", "1 <= value <= 1024"); }
    { const char* a[] = {"-n", "-1", NULL}; expect_error(a, "int below an open range", "out of range", "0 <= value <= inf"); }
    { const char* a[] = {"-b", "99999999999", NULL}; expect_error(a, "int overflow", "does not fit in a 32-bit int", NULL); }
    { const char* a[] = {"-l", "1.5", NULL}; expect_error(a, "float above range", "out of range", "0 <= value <= 1"); }
    { const char* a[] = {"-b", "4", "extra", NULL}; expect_error(a, "stray positional argument", "unexpected positional argument 'extra'", NULL); }
    { const char* a[] = {"stray", "-b", "4", NULL}; expect_error(a, "positional argument first", "'stray'", NULL); }
    { const char* a[] = {"-b", "4", "--", "tail", NULL}; expect_error(a, "positional argument after --", "'tail'", NULL); }
    { const char* a[] = {"--help=1", NULL}; expect_error(a, "value given to --help", "takes no value", NULL); }

    test_launcher_rank();
    return testing_finish();
}
