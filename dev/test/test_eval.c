/*
 * dev/test/test_eval.c -- unit tests of llmc/eval.h on the committed hand-made eval files
 * dev/test/fixtures/eval_handmade.bin (version 1) and eval_handmade_u32.bin (version 2), both written by
 * dev/data/eval_suite.py from eval_handmade.jsonl (16 examples, GPT-2 tokens; dev/test/cli_eval_suite.sh checks
 * they are its output). Expected numbers below come from that jsonl and tiktoken's GPT-2 encoding.
 * Error cases: eval_parse on corrupted copies (every truncation, targeted field changes, random byte flips) and
 * eval_load in a fork()ed child (its exit status and its one stderr line).
 */
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/eval.h"
#include "dev/test/testing.h"

static const int LABELS[16] = {0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 0, 0, 0, 1, 1, 3};
static const int KS[16] = {4, 4, 4, 4, 2, 2, 4, 4, 4, 4, 3, 4, 4, 2, 4, 4};
#define V1 "dev/test/fixtures/eval_handmade.bin"
#define V2 "dev/test/fixtures/eval_handmade_u32.bin"

static uint8_t* read_all(const char* path, size_t* n) {
    FILE* f = fopen_check(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t* b = (uint8_t*)malloc_check(*n, "file");
    fread_check(b, 1, *n, f, path);
    fclose_check(f, path);
    return b;
}

/* parses buf and returns rc; err gets the message */
static int parse(const uint8_t* b, size_t n, int vocab, char* err) {
    EvalSet es;
    int rc = eval_parse(&es, b, n, vocab, err, 512);
    if (rc == 0) { eval_free(&es); }
    return rc;
}

static void put32(uint8_t* b, size_t off, uint32_t v) { for (int i = 0; i < 4; i++) { b[off + i] = (uint8_t)(v >> (8 * i)); } }
static void put16(uint8_t* b, size_t off, uint32_t v) { b[off] = (uint8_t)v; b[off + 1] = (uint8_t)(v >> 8); }

static void child_load(const char* path) {
    EvalSet es;
    eval_load(&es, path, 50257);
    exit(0);
}

/* eval_load(path) in a child: returns its exit status, stderr in err */
static int load_in_child(const char* path, char* err, size_t cap) {
    char tmpl[] = "/tmp/evaltest_stderr_XXXXXX";
    int fd = mkstemp(tmpl);
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) { dup2(fd, 2); child_load(path); }
    int status = 0;
    waitpid(pid, &status, 0);
    lseek(fd, 0, SEEK_SET);
    ssize_t r = read(fd, err, cap - 1);
    err[r > 0 ? r : 0] = '\0';
    close(fd);
    unlink(tmpl);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(void) {
    EvalSet a, b;
    char err[512];
    size_t n1, n2;
    uint8_t* f1 = read_all(V1, &n1);
    uint8_t* f2 = read_all(V2, &n2);

    /* both versions parse to the jsonl's examples; a word-width or field-order slip shows in labels, K or tokens */
    TEST_CHECK(eval_parse(&a, f1, n1, 50257, err, sizeof(err)) == 0, "version 1 fixture parses (%s)", a.num_examples ? "" : err);
    TEST_CHECK(eval_parse(&b, f2, n2, 50257, err, sizeof(err)) == 0, "version 2 fixture parses");
    int ok = a.num_examples == 16 && b.num_examples == 16 && a.version == 1 && b.version == 2;
    for (int i = 0; ok && i < 16; i++) {
        ok = a.label[i] == LABELS[i] && a.num_endings[i] == KS[i] && b.label[i] == LABELS[i] && b.num_endings[i] == KS[i];
    }
    TEST_CHECK(ok, "16 examples with the jsonl's labels and ending counts (2, 3 and 4 endings), in both versions");
    ok = a.num_tokens == b.num_tokens && memcmp(a.tokens, b.tokens, (size_t)a.num_tokens * sizeof(int)) == 0;
    TEST_CHECK(ok, "version 1 and 2 hold the same %lld tokens", (long long)a.num_tokens);
    /* example 0: context "A woman fills a kettle ..." = 15 tokens [32, 2415, 23816, ..., 1375]; endings 7, 8, 6, 8 tokens,
     * the first " waits for the water to boil." = [28364, 329, 262, 1660, 284, 20667, 13] (tiktoken gpt2) */
    const int* c0 = a.tokens + a.ctx_off[0];
    const int* e0 = a.tokens + a.end_off[a.end_base[0]];
    ok = a.ctx_len[0] == 15 && c0[0] == 32 && c0[1] == 2415 && c0[2] == 23816 && c0[14] == 1375 && e0[0] == 28364 &&
         e0[6] == 13 && a.end_len[0] == 7 && a.end_len[1] == 8 && a.end_len[2] == 6 && a.end_len[3] == 8;
    TEST_CHECK(ok, "example 0's context and endings are the GPT-2 tokens of the jsonl's text");
    TEST_CHECK(a.ctx_len[11] == 36 && a.end_len[a.end_base[11]] == 12, "example 11: 36 context tokens, first ending 12");

    /* the batch layout: B=10 takes examples 0 and 1 (8 rows); example 2's 4 rows do not fit, so rows 8-9 are empty */
    enum { B = 10, T = 64 };
    int in[B * T], tg[B * T], rex[B], rend[B];
    uint8_t mk[B * T];
    int got = eval_fill_batch(&a, 0, 16, B, T, 50256, in, tg, mk, rex, rend);
    TEST_CHECK(got == 2 && rex[0] == 0 && rend[3] == 3 && rex[4] == 1 && rend[7] == 3 && rex[8] == -1 && rex[9] == -1,
               "B=10: examples 0 and 1 in rows 0-7 (no example split over batches), rows 8-9 empty (got %d)", got);
    /* row 2 = example 0, ending 2: inputs = ctx ++ ending minus the last token, targets shifted by one, mask on the
     * ending's 6 targets (positions 14..19), pad after */
    const int* e2 = a.tokens + a.end_off[a.end_base[0] + 2];
    ok = 1;
    for (int t = 0; t < T; t++) {
        int x = t < 15 ? c0[t] : (t < 21 ? e2[t - 15] : -1);
        int y = t + 1 < 15 ? c0[t + 1] : (t + 1 < 21 ? e2[t + 1 - 15] : -1);
        int want_in = t < 20 ? x : 50256, want_tg = t < 20 ? y : 50256, want_mk = t >= 14 && t < 20;
        ok &= in[2 * T + t] == want_in && tg[2 * T + t] == want_tg && mk[2 * T + t] == want_mk;
    }
    TEST_CHECK(ok, "row 2: inputs ctx ++ ending[:-1], targets shifted by one, mask exactly on the ending's targets");
    int msum = 0;
    for (int i = 8 * T; i < B * T; i++) { msum += mk[i]; }
    TEST_CHECK(msum == 0 && in[9 * T] == 50256, "empty rows are pad with no mask");
    /* a short T: example 11 (36 + 12 tokens) keeps its last T+1 = 9 tokens: 8 of the ending's as targets */
    enum { T2 = 8 };
    int in2[4 * T2], tg2[4 * T2], rex2[4], rend2[4];
    uint8_t mk2[4 * T2];
    got = eval_fill_batch(&a, 11, 12, 4, T2, 50256, in2, tg2, mk2, rex2, rend2);
    const int* e11 = a.tokens + a.end_off[a.end_base[11]];
    ok = got == 1;
    for (int t = 0; t < T2; t++) { ok &= mk2[t] == 1 && tg2[t] == e11[4 + t] && in2[t] == e11[3 + t]; }
    TEST_CHECK(ok, "T=8: a 48-token row keeps its last 9 tokens (context dropped first), all 8 targets in the ending");

    /* scoring: losses 100 where the mask is 0 (a scorer reading unmasked positions picks garbage), and per ending a
     * constant v_k over its targets, so mean = v_k and sum = v_k * Le. Example 0 (label 0, Le 7 8 6 8): v = 1.0,
     * 1.1, 1.2, 0.95 -> means pick 3 (wrong); sums 7.0, 8.8, 7.2, 7.6 pick 0 (right): the two scores differ, so
     * swapping them fails. Example 1 (label 1): v = 2, 1, 2, 2 -> both pick 1 (right). */
    float loss[B * T];
    double v[8] = {1.0, 1.1, 1.2, 0.95, 2, 1, 2, 2};
    for (int r = 0; r < B; r++) {
        for (int t = 0; t < T; t++) { loss[r * T + t] = mk[r * T + t] ? (float)(r < 8 ? v[r] : 0) : 100.0f; }
    }
    EvalCounts cnt = {0};
    eval_score_rows(&a, loss, mk, B, T, rex, rend, &cnt);
    TEST_CHECK(cnt.n == 2 && cnt.correct_mean == 1 && cnt.correct_sum == 2 && cnt.chance_sum == 0.5,
               "scores: mean-loss 1 of 2, summed log-probability 2 of 2, chance 1/4 + 1/4 (got %g %g %g %g)",
               cnt.n, cnt.correct_mean, cnt.correct_sum, cnt.chance_sum);
    /* the per-example scores of --eval-dump: 1 + each prediction, then each ending's mean and sum, example e at
     * (e - base) words; words past K and of unscored examples untouched (a zeroed buffer summed over ranks) */
    double det[4 * EVAL_DETAIL_WORDS];
    for (int i = 0; i < 4 * EVAL_DETAIL_WORDS; i++) { det[i] = -7; }
    EvalCounts cd = {0};
    eval_score_rows_detail(&a, loss, mk, B, T, rex, rend, &cd, det + EVAL_DETAIL_WORDS, 0);
    ok = cd.n == cnt.n && cd.correct_mean == cnt.correct_mean && cd.correct_sum == cnt.correct_sum;
    const double* d0 = det + EVAL_DETAIL_WORDS;
    const double* d1 = d0 + EVAL_DETAIL_WORDS;
    ok &= d0[0] == 1 + 3 && d0[1] == 1 + 0 && d1[0] == 1 + 1 && d1[1] == 1 + 1;
    for (int e = 0; e < 2; e++) {
        for (int k = 0; k < 4; k++) {
            double vk = (float)v[4 * e + k];
            int le = a.end_len[a.end_base[e] + k];
            const double* d = e ? d1 : d0;
            ok &= d[2 + k] == vk && d[2 + EVAL_MAX_ENDINGS + k] == vk * le;
        }
        ok &= (e ? d1 : d0)[2 + 4] == -7 && (e ? d1 : d0)[2 + EVAL_MAX_ENDINGS + 4] == -7;
    }
    ok &= det[0] == -7 && d1[EVAL_DETAIL_WORDS] == -7;
    TEST_CHECK(ok, "detail: predictions 1 + (3, 0) and 1 + (1, 1), each ending's mean v_k and sum v_k * Le at its "
               "example's offset, nothing else written");
    /* ties go to the lowest ending (torch's argmin, llm.c): all losses equal -> ending 0 predicted; label 0 */
    for (int i = 0; i < B * T; i++) { loss[i] = 1.0f; }
    EvalCounts tie = {0};
    eval_score_rows(&a, loss, mk, 4, T, rex, rend, &tie);
    TEST_CHECK(tie.correct_mean == 1, "a tie in mean loss picks the first ending");
    TEST_CHECK(eval_centered(0.25, 0.25) == 0 && eval_centered(1, 0.25) == 1 && fabs(eval_centered(0.5, 0.25) - 1.0 / 3) < 1e-12,
               "centered accuracy: chance -> 0, perfect -> 1, 0.5 at chance 1/4 -> 1/3");

    /* data-parallel ranges: every example in exactly one rank's range, sizes within one */
    ok = 1;
    for (int world = 1; world <= 5; world++) {
        for (int mx = 0; mx <= 20; mx += 7) {
            int next = 0, lo = 1 << 30, hi = 0;
            for (int r = 0; r < world; r++) {
                int f, c;
                eval_example_range(16, mx, r, world, &f, &c);
                ok &= f == next;
                next = f + c;
                lo = c < lo ? c : lo; hi = c > hi ? c : hi;
            }
            ok &= next == (mx > 0 && mx < 16 ? mx : 16) && hi - lo <= 1;
        }
    }
    TEST_CHECK(ok, "eval_example_range splits min(N, max) examples into contiguous ranges over 1-5 ranks");

    /* refusals, each with its reason */
    uint8_t* c = (uint8_t*)malloc_check(n1 + 8, "copy");
    struct { size_t off; uint32_t val; int w16; const char* want; const char* what; } cases[] = {
        {0, 1234, 0, "bad magic", "magic"},
        {4, 3, 0, "unsupported version 3", "version"},
        {8, 17, 0, "example 16 at byte 2376: the file ends", "count above the examples"}, /* 17 fits in the bytes: the file ends early */
        {8, 100000, 0, "header says 100000 examples", "count beyond the file's bytes (before allocating)"},
        {12, 500, 0, "longest example is 500", "header[3] not the longest"},
        {1024, 7, 1, "START word 7", "START word"},
        {1026, 40, 1, "size field 40 bytes", "size field"},
        {1028, 5, 1, "index 5", "index"},
        {1030, 4, 1, "label 4 is not below its 4 endings", "label"},
        {1032, 1, 1, "1 endings", "one ending"},
        {1034, 0, 1, "empty context", "empty context"},
        {1036, 50257, 1, "token 50257", "token beyond the vocabulary"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(c, f1, n1);
        if (cases[i].w16) { put16(c, cases[i].off, cases[i].val); } else { put32(c, cases[i].off, cases[i].val); }
        int rc = parse(c, n1, 50257, err);
        TEST_CHECK(rc == -1 && strstr(err, cases[i].want) != NULL, "refused: %s: %s", cases[i].what, rc ? err : "(accepted)");
    }
    memcpy(c, f1, n1);
    c[n1] = 0; c[n1 + 1] = 0;
    TEST_CHECK(parse(c, n1 + 2, 50257, err) == -1 && strstr(err, "2 bytes after the last example"), "refused: trailing bytes: %s", err);
    TEST_CHECK(parse(f1, n1, 1000, err) == -1 && strstr(err, "vocabulary size 1000"), "refused: tokens beyond a model's vocabulary: %s", err);
    /* every truncation is refused (never read past the end: the sanitizer build checks the reads) */
    int trunc_ok = 1;
    for (size_t k = 0; k < n1; k++) { trunc_ok &= parse(f1, k, 50257, err) == -1; }
    for (size_t k = 0; k < n2; k += 3) { trunc_ok &= parse(f2, k, 50257, err) == -1; }
    TEST_CHECK(trunc_ok, "every truncation of both files is refused");
    /* random byte changes: accepted or refused with a message, never a crash; a change inside a token or label is
     * accepted, so some are */
    uint64_t s = 12345;
    int refused = 0, accepted = 0, msg_ok = 1;
    for (int it = 0; it < 3000; it++) {
        memcpy(c, f1, n1);
        for (int j = 0; j < 1 + it % 3; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            c[(s >> 33) % n1] = (uint8_t)(s >> 20);
        }
        err[0] = '\0';
        if (parse(c, n1, 0, err) == 0) { accepted++; } else { refused++; msg_ok &= err[0] != '\0'; }
    }
    TEST_CHECK(msg_ok && refused > 0 && accepted > 0, "3000 random corruptions: %d refused with a message, %d accepted", refused, accepted);

    /* eval_load: one error line naming the file, exit 1 */
    int st = load_in_child("dev/test/fixtures/no_such_eval.bin", err, sizeof(err));
    TEST_CHECK(st == 1 && strncmp(err, "error: eval file 'dev/test/fixtures/no_such_eval.bin': cannot open", 66) == 0 &&
               strchr(err, '\n') == err + strlen(err) - 1, "a missing file: exit 1, one line: %s", err);
    char path[] = "/tmp/evaltest_bad_XXXXXX";
    int fd = mkstemp(path);
    memcpy(c, f1, n1);
    put16(c, 1030, 9);
    if (write(fd, c, n1) != (ssize_t)n1) { perror("write"); }
    close(fd);
    st = load_in_child(path, err, sizeof(err));
    TEST_CHECK(st == 1 && strstr(err, path) && strstr(err, "example 0 at byte 1024: label 9") && strchr(err, '\n') == err + strlen(err) - 1,
               "a bad label: exit 1, one line naming the file, example and byte: %s", err);
    unlink(path);

    free(c); free(f1); free(f2);
    eval_free(&a); eval_free(&b);
    return testing_finish();
}
