/*
 * dev/test/test_tokenizer.c -- unit tests of llmc/tokenizer.h.
 * A small synthetic tokenizer file (256 single bytes + a few merges + EOT) exercises loading,
 * decoding, the UTF-8 printer, the pre-tokenizer and BPE merge order. If the real GPT-2 file
 * dev/data/gpt2_tokenizer.bin exists, known GPT-2 encodings are checked too.
 */
#include "llmc/tokenizer.h"
#include "dev/test/testing.h"

static char g_dir[256];

/* writes a tokenizer file with the given header and tokens (NULL-terminated list after the 256 bytes) */
static void write_tokenizer(const char* path, int magic, int version, int eot, const char** extra, int n_extra,
                            int truncate_last) {
    FILE* f = fopen_check(path, "wb");
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic; header[1] = version; header[2] = 256 + n_extra; header[3] = eot;
    fwrite(header, sizeof(int32_t), 256, f);
    for (int b = 0; b < 256; b++) { unsigned char len = 1, c = (unsigned char)b; fwrite(&len, 1, 1, f); fwrite(&c, 1, 1, f); }
    for (int i = 0; i < n_extra; i++) {
        unsigned char len = (unsigned char)strlen(extra[i]);
        fwrite(&len, 1, 1, f);
        size_t w = len;
        if (truncate_last && i == n_extra - 1) { w = len / 2; }
        fwrite(extra[i], 1, w, f);
    }
    fclose_check(f, path);
}

static const char* k_extra[] = {
    "he",           /* 256 */
    "ll",           /* 257 */
    "hell",         /* 258 */
    "hello",        /* 259 */
    " w",           /* 260 */
    "or",           /* 261 */
    " wor",         /* 262 */
    "ld",           /* 263 */
    " world",       /* 264 */
    "bc",           /* 265: lower id than "ab", so "abc" -> a + bc */
    "ab",           /* 266 */
    "\xF0\x9F",     /* 267: first half of U+1F917 */
    "\xA4\x97",     /* 268: second half */
    "<|endoftext|>",/* 269: EOT, never produced by encoding */
    "'s",           /* 270 */
    " 123",         /* 271 */
};
#define N_EXTRA ((int)(sizeof(k_extra) / sizeof(k_extra[0])))

static int ids_equal(const int* a, int na, const int* b, int nb) {
    if (na != nb) { return 0; }
    for (int i = 0; i < na; i++) { if (a[i] != b[i]) { return 0; } }
    return 1;
}

/* decodes ids and concatenates; returns length */
static size_t decode_all(const Tokenizer* t, const int* ids, int n, char* out, size_t cap) {
    size_t m = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char* s = tokenizer_decode(t, (uint32_t)ids[i], &len);
        if (s == NULL || m + len >= cap) { return (size_t)-1; }
        memcpy(out + m, s, len);
        m += len;
    }
    out[m] = '\0';
    return m;
}

/* runs the printer over ids; returns total bytes, and number of bytes printed before the last id */
static size_t print_ids(const Tokenizer* t, const uint32_t* ids, int n, unsigned char* out, size_t* before_last) {
    TokenPrinter p;
    token_printer_init(&p);
    char buf[TOKEN_PRINTER_MAX_OUT];
    size_t m = 0;
    *before_last = 0;
    for (int i = 0; i < n; i++) {
        if (i == n - 1) { *before_last = m; }
        size_t k = token_printer_feed(&p, t, ids[i], buf, sizeof(buf));
        memcpy(out + m, buf, k);
        m += k;
    }
    size_t k = token_printer_flush(&p, buf, sizeof(buf));
    memcpy(out + m, buf, k);
    return m + k;
}

static void check_split(const char* text, const char** expected, int n_expected) {
    size_t n = strlen(text), i = 0;
    int k = 0, ok = 1;
    while (i < n) {
        size_t len = tokenizer_pretokenize_next(text, n, i);
        if (len == 0 || k >= n_expected || strlen(expected[k]) != len || memcmp(expected[k], text + i, len) != 0) { ok = 0; break; }
        i += len;
        k++;
    }
    TEST_CHECK(ok && k == n_expected, "pre-tokenizer splits \"%s\" into the %d GPT-2 chunks (matched %d)", text, n_expected, k);
}

static void test_synthetic(void) {
    char path[512];
    snprintf(path, sizeof(path), "%s/tok.bin", g_dir);
    write_tokenizer(path, TOKENIZER_MAGIC, 2, 269, k_extra, N_EXTRA, 0);
    Tokenizer t;
    int ok = tokenizer_init(&t, path);
    TEST_CHECK(ok == 1 && t.vocab_size == 256 + (uint32_t)N_EXTRA && t.eot_token == 269,
               "synthetic tokenizer loads (vocab %u, eot %d)", t.vocab_size, t.eot_token);
    size_t len = 99;
    const char* s = tokenizer_decode(&t, 264, &len);
    TEST_CHECK(s && len == 6 && memcmp(s, " world", 6) == 0, "decode(264) = \" world\"");
    s = tokenizer_decode(&t, 65, &len);
    TEST_CHECK(s && len == 1 && s[0] == 'A', "decode(65) = \"A\"");
    TEST_CHECK(tokenizer_decode(&t, 256 + N_EXTRA, &len) == NULL && len == 0, "decode of id == vocab size is NULL");
    TEST_CHECK(tokenizer_decode(&t, 0xFFFFFFFFu, NULL) == NULL, "decode of id 2^32-1 is NULL");

    int ids[64];
    int n = tokenizer_encode(&t, "hello world", ids, 64);
    int e1[] = {259, 264};
    TEST_CHECK(ids_equal(ids, n, e1, 2), "encode(\"hello world\") = [259, 264] (got %d ids, first %d)", n, n > 0 ? ids[0] : -1);
    n = tokenizer_encode(&t, "abc", ids, 64);
    int e2[] = {'a', 265};
    TEST_CHECK(ids_equal(ids, n, e2, 2), "BPE merges the lowest-id pair first: \"abc\" -> [a, bc] not [ab, c] (got %d ids: %d %d)",
               n, n > 0 ? ids[0] : -1, n > 1 ? ids[1] : -1);
    n = tokenizer_encode(&t, "hellhello", ids, 64);
    int e3[] = {259 - 1, 259};
    TEST_CHECK(ids_equal(ids, n, e3, 2), "\"hellhello\" -> [hell, hello]");
    n = tokenizer_encode(&t, "it's 123", ids, 64);
    int e4[] = {'i', 't', 270, ' ', '1', '2', '3'};
    TEST_CHECK(ids_equal(ids, n, e4, 7), "contraction chunk merges; \" 123\" stays bytes (no merge chain to 271): got %d ids", n);
    n = tokenizer_encode(&t, "<|endoftext|>", ids, 64);
    int has_eot = 0;
    for (int i = 0; i < n && i < 64; i++) { if (ids[i] == 269) { has_eot = 1; } }
    TEST_CHECK(n == 13 && !has_eot, "the EOT text is encoded as plain bytes, never as the EOT id (n=%d)", n);
    n = tokenizer_encode(&t, "hello world", ids, 1);
    TEST_CHECK(n == 2 && ids[0] == 259, "max_ids smaller than needed: returns the full count 2, writes the first id");
    n = tokenizer_encode(&t, "", ids, 64);
    TEST_CHECK(n == 0, "encode of the empty string gives 0 ids");

    const char* text = "  hello\tworld's\n\n abc!? \xC3\xA9t\xC3\xA9 12,345  ";
    n = tokenizer_encode(&t, text, ids, 64);
    char dec[256];
    size_t m = decode_all(&t, ids, n, dec, sizeof(dec));
    TEST_CHECK(n > 0 && n <= 64 && m == strlen(text) && memcmp(dec, text, m) == 0, "encode then decode round-trips mixed text (%d ids)", n);

    /* printer: emoji split across tokens 267 + 268, nothing printed until complete */
    uint32_t emoji[] = {267, 268};
    unsigned char out[4096];
    size_t before;
    size_t k = print_ids(&t, emoji, 2, out, &before);
    TEST_CHECK(k == 4 && before == 0 && memcmp(out, "\xF0\x9F\xA4\x97", 4) == 0, "printer holds F0 9F until A4 97 completes the character");
    uint32_t cut[] = {267, 'x'};
    k = print_ids(&t, cut, 2, out, &before);
    TEST_CHECK(k == 4 && memcmp(out, "\xEF\xBF\xBDx", 4) == 0, "truncated sequence followed by ASCII -> U+FFFD then 'x'");
    uint32_t lone[] = {'a', 0x80, 'b'};
    k = print_ids(&t, lone, 3, out, &before);
    TEST_CHECK(k == 5 && memcmp(out, "a\xEF\xBF\xBD" "b", 5) == 0, "lone continuation byte -> U+FFFD");
    uint32_t dangling[] = {'a', 267};
    k = print_ids(&t, dangling, 2, out, &before);
    TEST_CHECK(k == 4 && memcmp(out, "a\xEF\xBF\xBD", 4) == 0, "flush turns a held incomplete character into U+FFFD");
    uint32_t overlong[] = {0xC0, 0xAF};
    k = print_ids(&t, overlong, 2, out, &before);
    TEST_CHECK(k == 6 && memcmp(out, "\xEF\xBF\xBD\xEF\xBF\xBD", 6) == 0, "overlong C0 AF -> two U+FFFD");
    uint32_t surrogate[] = {0xED, 0xA0, 0x80};
    k = print_ids(&t, surrogate, 3, out, &before);
    TEST_CHECK(k == 9, "UTF-8 encoded surrogate ED A0 80 is not emitted (3 x U+FFFD, got %zu bytes)", k);
    uint32_t two[] = {0xC3, 0xA9};
    k = print_ids(&t, two, 2, out, &before);
    TEST_CHECK(k == 2 && before == 0 && memcmp(out, "\xC3\xA9", 2) == 0, "two-byte character split across tokens printed whole");
    uint32_t bad_id[] = {'a', 99999};
    k = print_ids(&t, bad_id, 2, out, &before);
    TEST_CHECK(k == 4 && memcmp(out, "a\xEF\xBF\xBD", 4) == 0, "out-of-range id prints U+FFFD");
    tokenizer_free(&t);

    /* invalid files: load returns -1 after one error line; a missing file 0 after one warning line */
    snprintf(path, sizeof(path), "%s/bad_magic.bin", g_dir);
    write_tokenizer(path, 20240326, 2, 269, k_extra, N_EXTRA, 0);
    TEST_CHECK(tokenizer_init(&t, path) == -1 && !t.init_ok, "wrong magic -> -1 (an error), not loaded");
    TEST_CHECK(tokenizer_encode(&t, "hi", ids, 64) == -1 && tokenizer_decode(&t, 65, NULL) == NULL,
               "unloaded tokenizer: encode -1, decode NULL");
    snprintf(path, sizeof(path), "%s/bad_version.bin", g_dir);
    write_tokenizer(path, TOKENIZER_MAGIC, 3, 269, k_extra, N_EXTRA, 0);
    TEST_CHECK(tokenizer_init(&t, path) == -1, "version 3 -> not loaded");
    snprintf(path, sizeof(path), "%s/bad_eot.bin", g_dir);
    write_tokenizer(path, TOKENIZER_MAGIC, 2, 5000, k_extra, N_EXTRA, 0);
    TEST_CHECK(tokenizer_init(&t, path) == -1, "EOT id outside the vocabulary -> not loaded");
    snprintf(path, sizeof(path), "%s/trunc.bin", g_dir);
    write_tokenizer(path, TOKENIZER_MAGIC, 2, 269, k_extra, N_EXTRA, 1);
    TEST_CHECK(tokenizer_init(&t, path) == -1, "truncated token bytes -> not loaded");
    snprintf(path, sizeof(path), "%s/does_not_exist.bin", g_dir);
    TEST_CHECK(tokenizer_init(&t, path) == 0, "missing file -> not loaded (training would continue)");

    /* terminal-safe printing: newline and tab pass, C0/DEL as \xHH, C1 (C2 80..9F) as \u00HH, invalid UTF-8 as
     * \xHH, other UTF-8 unchanged */
    {
        const char in[] = "a\n\tb\x1b[2J\x07\r\x08\x7f\xc2\x9b\xc3\xa9\xff\xf0\x9f\xa4\x97z";
        const char want[] = "a\n\tb\\x1b[2J\\x07\\x0d\\x08\\x7f\\u009b\xc3\xa9\\xff\xf0\x9f\xa4\x97z";
        FILE* f = tmpfile();
        fwrite_terminal_safe(f, in, sizeof(in) - 1);
        rewind(f);
        char got[128] = {0};
        size_t n = fread(got, 1, sizeof(got) - 1, f);
        fclose(f);
        TEST_CHECK(n == sizeof(want) - 1 && memcmp(got, want, n) == 0,
                   "fwrite_terminal_safe escapes ESC, BEL, CR, BS, DEL, C1 and invalid bytes, keeps \\n \\t and UTF-8 (%s)", got);
    }

    const char* s1[] = {"Hello", " world", "'s", " ", " test", "\n\n", " 123", "abc", "!!", "  "};
    check_split("Hello world's  test\n\n 123abc!!  ", s1, 10);
    const char* s2[] = {"don", "'t", " you", "'ll", " I", "'m", " we", "'ve", " they", "'re", " he", "'d"};
    check_split("don't you'll I'm we've they're he'd", s2, 12);
    const char* s3[] = {"a", "\n", "b", " \xC3\xA9t\xC3\xA9", " ...'", "x"};
    check_split("a\nb \xC3\xA9t\xC3\xA9 ...'x", s3, 6);
}

/* BPE of one chunk by its definition (tiktoken's rule, one rescan of every adjacent pair per merge: O(n^2)): merge
 * the pair whose concatenation is the token of lowest id, the leftmost of equal ones; the reference for
 * tokenizer_bpe_chunk's heap. Returns the number of ids (n at most). */
static int bpe_by_rescan(const Tokenizer* t, const char* s, int n, int* ids) {
    int* st = (int*)malloc(sizeof(int) * n);
    int* ln = (int*)malloc(sizeof(int) * n);
    int m = n;
    for (int i = 0; i < n; i++) { st[i] = i; ln[i] = 1; }
    for (;;) {
        int best = -1, bk = 0;
        for (int k = 0; k + 1 < m; k++) {
            int id = tokenizer_lookup(t, s + st[k], (size_t)(ln[k] + ln[k + 1]));
            if (id >= 0 && (best < 0 || id < best)) { best = id; bk = k; }
        }
        if (best < 0) { break; }
        ln[bk] += ln[bk + 1];
        for (int k = bk + 1; k + 1 < m; k++) { st[k] = st[k + 1]; ln[k] = ln[k + 1]; }
        m--;
    }
    for (int k = 0; k < m; k++) { ids[k] = tokenizer_lookup(t, s + st[k], (size_t)ln[k]); }
    free(st); free(ln);
    return m;
}

/* long single chunks (one letter repeated, two alternating, random letters, random bytes >= 0x80, which all count as
 * letters) encode to the ids of the rescan definition: the heap's order and its stale-entry test are the rule's */
static void test_long_chunks(const Tokenizer* t) {
    enum { N = 3000 };
    static char text[N + 1];
    static int got[N + 1], want[N + 1];
    const char* kinds[4] = {"one letter", "two letters", "random letters", "random non-ASCII bytes"};
    unsigned int rng = 12345u;
    for (int kind = 0; kind < 4; kind++) {
        for (int i = 0; i < N; i++) {
            rng = rng * 1103515245u + 12345u;
            unsigned int r = rng >> 16;
            text[i] = kind == 0 ? 'a' : kind == 1 ? "ab"[i % 2] : kind == 2 ? (char)('a' + r % 26) : (char)(0x80 + r % 128);
        }
        text[N] = '\0';
        size_t chunk = tokenizer_pretokenize_next(text, N, 0);
        int n = tokenizer_encode(t, text, got, N + 1);
        int m = bpe_by_rescan(t, text, N, want);
        TEST_CHECK(chunk == N && ids_equal(got, n, want, m), "GPT-2: a %d-byte chunk of %s encodes as the rescan "
                   "definition of BPE does (%d ids, reference %d)", N, kinds[kind], n, m);
    }
}

static void test_real_gpt2(void) {
    const char* path = "dev/data/gpt2_tokenizer.bin";
    if (!file_exists(path)) {
        printf("# %s not found: real GPT-2 checks skipped\n", path);
        return;
    }
    Tokenizer t;
    TEST_CHECK(tokenizer_init(&t, path) == 1 && t.vocab_size == 50257 && t.eot_token == 50256,
               "GPT-2 tokenizer loads: vocab 50257, EOT 50256");
    if (!t.init_ok) { return; }
    uint32_t emoji[] = {8582, 97, 245};
    unsigned char out[256];
    size_t before;
    size_t k = print_ids(&t, emoji, 3, out, &before);
    TEST_CHECK(k == 4 && before == 0 && memcmp(out, "\xF0\x9F\xA4\x97", 4) == 0,
               "GPT-2 ids [8582, 97, 245] print exactly F0 9F A4 97, nothing before the last id (%zu bytes, %zu early)", k, before);
    int ids[256];
    int n = tokenizer_encode(&t, "Hello world", ids, 256);
    int e1[] = {15496, 995};
    TEST_CHECK(ids_equal(ids, n, e1, 2), "GPT-2 encode(\"Hello world\") = [15496, 995] (got %d ids: %d %d)", n, n > 0 ? ids[0] : -1, n > 1 ? ids[1] : -1);
    const char* fox = " the quick brown fox";
    n = tokenizer_encode(&t, fox, ids, 256);
    char dec[512];
    size_t m = decode_all(&t, ids, n, dec, sizeof(dec));
    TEST_CHECK(n == 4 && m == strlen(fox) && memcmp(dec, fox, m) == 0, "GPT-2 \" the quick brown fox\" round-trips in 4 tokens (%d)", n);
    int e2[] = {262, 2068, 7586, 21831};
    TEST_CHECK(ids_equal(ids, n, e2, 4), "GPT-2 \" the quick brown fox\" = [262, 2068, 7586, 21831]");
    n = tokenizer_encode(&t, "<|endoftext|>", ids, 256);
    int has_eot = 0;
    for (int i = 0; i < n; i++) { if (ids[i] == 50256) { has_eot = 1; } }
    TEST_CHECK(n > 1 && !has_eot, "GPT-2: the EOT string is encoded as text, not as id 50256");
    test_long_chunks(&t);
    tokenizer_free(&t);
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/test_tokenizer_XXXXXX");
    if (mkdtemp(g_dir) == NULL) { perror("mkdtemp"); return 1; }
    test_synthetic();
    test_real_gpt2();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) { fprintf(stderr, "warning: could not remove %s\n", g_dir); }
    return testing_finish();
}
