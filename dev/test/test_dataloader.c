/*
 * dev/test/test_dataloader.c -- unit tests of llmc/dataloader.h on small synthetic shards.
 * Token value at offset i of shard s is s*1000 + i, so the first input token identifies the window.
 * Version 2 shards (uint32 ids): the same streams in the other width read identically (alone and mixed with
 * version 1), ids above 65535 and up to 2^31 - 1 arrive unchanged, and sizes, versions, the vocabulary limit and
 * ids >= 2^31 are refused with one line.
 * Error cases run in a fork()ed child; the test checks its exit status and its stderr line.
 */
#include <sys/resource.h>
#include <sys/wait.h>
#include "llmc/dataloader.h"
#include "dev/test/testing.h"

static char g_dir[256];

/* writes a shard with the given header fields and `ntok` tokens s*1000+i */
static void write_shard(const char* name, int magic, int version, int header_count, int ntok, int s) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE* f = fopen_check(path, "wb");
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic; header[1] = version; header[2] = header_count;
    fwrite(header, sizeof(int32_t), 256, f);
    for (int i = 0; i < ntok; i++) { uint16_t t = (uint16_t)(s * 1000 + i); fwrite(&t, 2, 1, f); }
    fclose_check(f, path);
}

/* writes a shard of the given version with header count `header_count` and the `ntok` ids toks[] stored as `width`
 * bytes each (2 or 4; a width that does not match the version makes a damaged file) */
static void write_shard_ids(const char* name, int version, int header_count, const uint32_t* toks, int ntok, int width) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE* f = fopen_check(path, "wb");
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = DATALOADER_MAGIC; header[1] = version; header[2] = header_count;
    fwrite(header, sizeof(int32_t), 256, f);
    for (int i = 0; i < ntok; i++) {
        if (width == 2) { uint16_t t = (uint16_t)toks[i]; fwrite(&t, 2, 1, f); } else { fwrite(&toks[i], 4, 1, f); }
    }
    fclose_check(f, path);
}

/* the ids s*1000 + i of write_shard's shard s, as a version 2 (uint32) shard */
static void write_shard_v2(const char* name, int ntok, int s) {
    uint32_t toks[64];
    for (int i = 0; i < ntok; i++) { toks[i] = (uint32_t)(s * 1000 + i); }
    write_shard_ids(name, 2, ntok, toks, ntok, 4);
}

static void write_raw(const char* name, size_t bytes) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE* f = fopen_check(path, "wb");
    for (size_t i = 0; i < bytes; i++) { fputc(0, f); }
    fclose_check(f, path);
}

/* runs fn(arg) in a child with stderr captured into err; returns the exit status (or 128+signal) */
typedef void (*ChildFn)(const void* arg);
static int run_in_child(ChildFn fn, const void* arg, char* err, size_t cap) {
    char tmpl[] = "/tmp/dltest_stderr_XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) { perror("mkstemp"); exit(2); }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        fn(arg);
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, err, cap - 1);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(tmpl);
    if (WIFEXITED(status)) { return WEXITSTATUS(status); }
    return 128 + WTERMSIG(status);
}

static int count_lines(const char* s) {
    int n = 0;
    for (; *s; s++) { if (*s == '\n') { n++; } }
    return n;
}

typedef struct { const char* pattern; int B, T, rank, nproc; } InitArgs;
static void child_init(const void* a) {
    const InitArgs* ia = (const InitArgs*)a;
    DataLoader dl;
    dataloader_init(&dl, ia->pattern, ia->B, ia->T, ia->rank, ia->nproc, 0, 0);
    dataloader_free(&dl);
}

/* window id = shard*100 + window index, decoded from the first input token (B*T = 8) */
static int window_id(const DataLoader* dl) {
    int t = dl->inputs[0];
    return (t / 1000) * 100 + (t % 1000) / (dl->B * dl->T);
}

/* checks that inputs/targets are the exact consecutive tokens of one window */
static int window_consistent(const DataLoader* dl) {
    int n = dl->B * dl->T;
    int t0 = dl->inputs[0];
    if ((t0 % 1000) % n != 0) { return 0; }
    for (int i = 0; i < n; i++) {
        if (dl->inputs[i] != t0 + i || dl->targets[i] != t0 + i + 1) { return 0; }
    }
    return 1;
}

#define NWIN 15
static const int k_ids[NWIN] = {0, 1, 2, 3, 4, 100, 101, 102, 200, 201, 202, 203, 204, 205, 206};
static int id_slot(int id) {
    for (int i = 0; i < NWIN; i++) { if (k_ids[i] == id) { return i; } }
    return -1;
}

/* reads one full epoch over nproc ranks; checks every window exactly once and consistency */
static void check_epoch_coverage(const char* pattern, int nproc, int shuffle, uint64_t seed) {
    DataLoader dls[3];
    for (int r = 0; r < nproc; r++) { dataloader_init(&dls[r], pattern, 2, 4, r, nproc, shuffle, seed); }
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[NWIN] = {0};
        int consistent = 1, bad_id = 0, reads = 0;
        for (int r = 0; r < nproc; r++) {
            int expect_reads = (NWIN - r + nproc - 1) / nproc;
            for (int k = 0; k < expect_reads; k++) {
                dataloader_next_batch(&dls[r]);
                DataLoaderState st;
                dataloader_get_state(&dls[r], &st);
                if (st.epoch != (uint64_t)epoch) { consistent = 0; }
                if (!window_consistent(&dls[r])) { consistent = 0; }
                int slot = id_slot(window_id(&dls[r]));
                if (slot < 0) { bad_id = 1; } else { seen[slot]++; }
                reads++;
            }
        }
        int once = 1;
        for (int i = 0; i < NWIN; i++) { if (seen[i] != 1) { once = 0; } }
        TEST_CHECK(once && !bad_id && reads == NWIN,
                   "epoch %d, %d rank(s), shuffle=%d: every one of the 15 windows read exactly once (%d reads)",
                   epoch, nproc, shuffle, reads);
        TEST_CHECK(consistent, "epoch %d, %d rank(s), shuffle=%d: inputs are consecutive tokens, targets shifted by one, epoch counter %d",
                   epoch, nproc, shuffle, epoch);
    }
    for (int r = 0; r < nproc; r++) { dataloader_free(&dls[r]); }
}

static void read_sequence(DataLoader* dl, int* ids, int n) {
    for (int i = 0; i < n; i++) { dataloader_next_batch(dl); ids[i] = window_id(dl); }
}

static void child_set_state_wrong_rank(const void* a) {
    DataLoader dl;
    dataloader_init(&dl, (const char*)a, 2, 4, 1, 2, 0, 0);
    DataLoaderState st = {0, 2}; /* position 2 belongs to rank 0 */
    dataloader_set_state(&dl, &st);
}

static void child_vocab_limit(const void* a) {
    DataLoader dl;
    dataloader_init(&dl, (const char*)a, 2, 4, 0, 1, 0, 0);
    dataloader_set_vocab_limit(&dl, 1005); /* shard 0 tokens are 0..40; shard 1 starts at 1000 */
    for (int i = 0; i < 6; i++) { dataloader_next_batch(&dl); }
}

static void child_too_many_ranks(const void* a) {
    DataLoader dl;
    dataloader_init(&dl, (const char*)a, 2, 4, 4, 5, 0, 0); /* 1 shard with 2 windows, rank 4 of 5 */
    dataloader_next_batch(&dl);
}

/* mappings of files whose name contains `needle` in /proc/self/maps (-1 if it cannot be read) */
static int count_maps(const char* needle) {
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) { return -1; }
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f)) { if (strstr(line, needle)) { n++; } }
    fclose(f);
    return n;
}

/* 3,000 shards (the fault: every shard stayed mapped, so ~65,530 shards hit the kernel's map limit): a shuffled
 * epoch over all of them reads every window right while at most DATALOADER_MAP_CACHE shards are mapped; with
 * RLIMIT_NOFILE at 16 (no shard file stays open) in a child */
static void many_shards_epoch(const void* arg) {
    (void)arg;
    struct rlimit rl = {16, 16};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) { exit(3); }
    char pattern[300];
    snprintf(pattern, sizeof(pattern), "%s/many_*.bin", g_dir);
    DataLoader dl;
    dataloader_init(&dl, pattern, 1, 8, 0, 1, 1, 7);
    if (dl.num_shards != 3000 || dataloader_windows_per_epoch(&dl) != 6000) { exit(4); }
    int max_maps = 0;
    unsigned char* seen = (unsigned char*)calloc(6000, 1);
    for (int k = 0; k < 6000; k++) {
        dataloader_next_batch(&dl);
        int first = dl.inputs[0]; /* shard s holds the tokens 20s+i, i < 20; its window w starts at token 8w */
        int shard = first / 20, w = (first % 20) / 8;
        if (first % 20 != 8 * w || w > 1) { exit(5); }
        for (int i = 0; i < 8; i++) {
            if (dl.inputs[i] != first + i || dl.targets[i] != first + i + 1) { exit(6); }
        }
        seen[shard * 2 + w]++;
        if (k % 500 == 0) { int m = count_maps("/many_"); if (m > max_maps) { max_maps = m; } }
    }
    for (int i = 0; i < 6000; i++) { if (seen[i] != 1) { exit(7); } }
    int m = count_maps("/many_");
    if (m > max_maps) { max_maps = m; }
    dataloader_free(&dl);
    printf("many shards: at most %d mapped\n", max_maps);
    exit(max_maps >= 1 && max_maps <= DATALOADER_MAP_CACHE && count_maps("/many_") == 0 ? 0 : 8);
}

static void check_many_shards(void) {
    char name[64], err[2048];
    for (int s = 0; s < 3000; s++) { /* tokens 20s .. 20s+19, unique over all shards */
        char path[600];
        snprintf(name, sizeof(name), "many_%05d.bin", s);
        snprintf(path, sizeof(path), "%s/%s", g_dir, name);
        FILE* f = fopen_check(path, "wb");
        int32_t header[256] = {DATALOADER_MAGIC, 1, 20};
        uint16_t tok[20];
        for (int i = 0; i < 20; i++) { tok[i] = (uint16_t)(20 * s + i); }
        fwrite(header, sizeof(int32_t), 256, f);
        fwrite(tok, sizeof(uint16_t), 20, f);
        fclose_check(f, path);
    }
    int rc = run_in_child(many_shards_epoch, NULL, err, sizeof(err));
    TEST_CHECK(rc == 0, "3000 shards, 16 open files allowed: a shuffled epoch reads each of the 6000 windows once, "
               "right, with at most %d shards mapped at a time (exit %d: 4 counts, 5/6 data, 7 coverage, 8 maps) %s",
               DATALOADER_MAP_CACHE, rc, err);
}

/* reads n windows of B=2, T=4 (or, seq = 1, the first n sequences of T+1 tokens into row 1) and returns all inputs
 * and targets (of row 1 only for sequences: row 0 is never written) into out[16 n] */
static void read_all(const char* pattern, int shuffle, int n, int seq, int* out) {
    DataLoader dl;
    dataloader_init(&dl, pattern, 2, 4, 0, 1, shuffle, 99);
    dataloader_set_vocab_limit(&dl, 1 << 20);
    for (int k = 0; k < n; k++) {
        if (seq) { dataloader_load_sequence(&dl, (size_t)k, 1); } else { dataloader_next_batch(&dl); }
        int off = seq ? 4 : 0, len = seq ? 4 : 8;
        memset(out + (size_t)k * 16, 0, 16 * sizeof(int));
        memcpy(out + (size_t)k * 16, dl.inputs + off, (size_t)len * sizeof(int));
        memcpy(out + (size_t)k * 16 + 8, dl.targets + off, (size_t)len * sizeof(int));
    }
    dataloader_free(&dl);
}

static void child_init_limit(const void* a) { /* reads every window of the one shard `a` with the limit 70000 */
    DataLoader dl;
    dataloader_init(&dl, (const char*)a, 1, 4, 0, 1, 0, 0);
    dataloader_set_vocab_limit(&dl, 70000);
    for (size_t i = 0; i < dataloader_windows_per_epoch(&dl); i++) { dataloader_next_batch(&dl); }
    dataloader_free(&dl);
}

static void child_read_all(const void* a) { /* every window and sequence of the shards `a`, no vocabulary limit */
    DataLoader dl;
    dataloader_init(&dl, (const char*)a, 1, 4, 0, 1, 0, 0);
    for (size_t i = 0; i < dataloader_windows_per_epoch(&dl); i++) { dataloader_next_batch(&dl); }
    for (size_t j = 0; j < dataloader_sequences(&dl); j++) { dataloader_load_sequence(&dl, j, 0); }
    dataloader_free(&dl);
}

/* version 2 (uint32) shards: the version 1 streams of train_00[012] rewritten as v2_00[012] (and as a mix of both
 * versions) read window for window and sequence for sequence identically, shuffled or not; ids above 65535 arrive
 * unchanged; a v2 header over a uint16 body, the vocabulary limit and ids >= 2^31 are refused with one line */
static void check_version2(const char* pattern_v1, uint64_t fp_v1) {
    char pv2[600], pmix[600], p[600], err[4096];
    write_shard_v2("v2_000.bin", 41, 0);
    write_shard_v2("v2_001.bin", 29, 1);
    write_shard_v2("v2_002.bin", 57, 2);
    write_shard("mix_000.bin", DATALOADER_MAGIC, 1, 41, 41, 0);
    write_shard_v2("mix_001.bin", 29, 1);
    write_shard("mix_002.bin", DATALOADER_MAGIC, 1, 57, 57, 2);
    snprintf(pv2, sizeof(pv2), "%s/v2_*.bin", g_dir);
    snprintf(pmix, sizeof(pmix), "%s/mix_*.bin", g_dir);
    static int a[2 * 40 * 16], b[2 * 40 * 16], c[2 * 40 * 16];
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        read_all(pattern_v1, shuffle, 2 * NWIN, 0, a);
        read_all(pv2, shuffle, 2 * NWIN, 0, b);
        read_all(pmix, shuffle, 2 * NWIN, 0, c);
        TEST_CHECK(memcmp(a, b, 2 * NWIN * 16 * sizeof(int)) == 0 && memcmp(a, c, 2 * NWIN * 16 * sizeof(int)) == 0,
                   "shuffle=%d: the same token streams as version 2 shards, and as a mix of versions 1 and 2, give the "
                   "same inputs and targets as version 1 over two epochs (30 windows)", shuffle);
    }
    read_all(pattern_v1, 0, 30, 1, a); /* (41-1)/4 + (29-1)/4 + (57-1)/4 = 10 + 7 + 14 = 31 sequences */
    read_all(pmix, 0, 30, 1, c);
    TEST_CHECK(memcmp(a, c, 30 * 16 * sizeof(int)) == 0, "load_sequence over a mix of versions equals version 1's");
    DataLoader dl;
    dataloader_init(&dl, pv2, 2, 4, 0, 1, 0, 0);
    TEST_CHECK(dataloader_fingerprint(&dl) != fp_v1, "the fingerprint hashes tokens as stored: version 2 of the same "
               "stream is other data to a resume (documented)");
    dataloader_free(&dl);
    /* ids beyond uint16 (a reader that kept 16 bits would read 4464 for 70000), the largest int32 id */
    uint32_t big[13] = {65535, 65536, 70000, 69999, 131071, 1u << 20, 0, 65537, 2147483647u, 3, 70001, 65535, 100000};
    write_shard_ids("big_000.bin", 2, 13, big, 13, 4);
    snprintf(p, sizeof(p), "%s/big_000.bin", g_dir);
    dataloader_init(&dl, p, 1, 4, 0, 1, 0, 0);
    int same = dataloader_windows_per_epoch(&dl) == 3;
    for (int w = 0; w < 3; w++) {
        dataloader_next_batch(&dl);
        for (int i = 0; i < 4; i++) {
            if ((uint32_t)dl.inputs[i] != big[4 * w + i] || (uint32_t)dl.targets[i] != big[4 * w + i + 1]) { same = 0; }
        }
    }
    dataloader_load_sequence(&dl, 2, 0);
    for (int i = 0; i < 4; i++) { if ((uint32_t)dl.inputs[i] != big[8 + i] || (uint32_t)dl.targets[i] != big[9 + i]) { same = 0; } }
    dataloader_free(&dl);
    TEST_CHECK(same, "version 2 ids 65535, 65536, 70000, 2^20 and 2^31-1 arrive unchanged in inputs and targets "
               "(windows and load_sequence)");
    int rc = run_in_child(child_init_limit, p, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "big_000.bin") && strstr(err, "token id 70000 at token offset 2") &&
               strstr(err, "vocabulary size is 70000") && count_lines(err) == 1,
               "a version 2 id >= the vocabulary (70000 of V 70000) is refused naming shard, id and offset (%s)", err);
    uint32_t ok_ids[9] = {65536, 69999, 0, 1, 65535, 69998, 7, 66000, 69999};
    write_shard_ids("fits_000.bin", 2, 9, ok_ids, 9, 4);
    snprintf(p, sizeof(p), "%s/fits_000.bin", g_dir);
    rc = run_in_child(child_init_limit, p, err, sizeof(err));
    TEST_CHECK(rc == 0, "version 2 ids up to V-1 = 69999 pass the vocabulary limit (rc %d: %s)", rc, err);
    uint32_t huge[9] = {1, 2, 3, 4, 5, 6, 7, 2147483648u, 9};
    write_shard_ids("huge_000.bin", 2, 9, huge, 9, 4);
    snprintf(p, sizeof(p), "%s/huge_000.bin", g_dir);
    rc = run_in_child(child_read_all, p, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "huge_000.bin") && strstr(err, "2147483648") && strstr(err, "offset 7") &&
               count_lines(err) == 1, "a version 2 id >= 2^31 is refused without a vocabulary limit (%s)", err);
    write_shard_ids("narrow_000.bin", 2, 13, big, 13, 2);
    snprintf(p, sizeof(p), "%s/narrow_000.bin", g_dir);
    rc = run_in_child(child_read_all, p, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "narrow_000.bin") && strstr(err, "version 2") && strstr(err, "1050 bytes") &&
               strstr(err, "expected 1076 = 1024 + 4 * 13") && count_lines(err) == 1,
               "a version 2 header over 2-byte ids is refused by its size (%s)", err);
    uint32_t wide[13];
    for (int i = 0; i < 13; i++) { wide[i] = (uint32_t)i; }
    write_shard_ids("wide_000.bin", 1, 13, wide, 13, 4); /* a v1 header over uint32 ids */
    snprintf(p, sizeof(p), "%s/wide_000.bin", g_dir);
    rc = run_in_child(child_read_all, p, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "wide_000.bin") && strstr(err, "version 1") && strstr(err, "expected 1050") &&
               count_lines(err) == 1, "a version 1 header over 4-byte ids is refused by its size (%s)", err);
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/test_dataloader_XXXXXX");
    if (mkdtemp(g_dir) == NULL) { perror("mkdtemp"); return 1; }
    /* B=2, T=4 -> 8 tokens per batch, window needs 9 tokens */
    write_shard("train_000.bin", DATALOADER_MAGIC, 1, 41, 41, 0); /* 5 windows */
    write_shard("train_001.bin", DATALOADER_MAGIC, 1, 29, 29, 1); /* 3 windows + leftover */
    write_shard("train_002.bin", DATALOADER_MAGIC, 1, 57, 57, 2); /* 7 windows */
    char pattern[512];
    snprintf(pattern, sizeof(pattern), "%s/train_*.bin", g_dir);

    DataLoader dl;
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 0, 0);
    TEST_CHECK(dl.num_shards == 3, "glob finds the 3 shards (got %d)", dl.num_shards);
    TEST_CHECK(dataloader_windows_per_epoch(&dl) == NWIN, "windows per epoch = 5+3+7 = 15 (got %zu)", dataloader_windows_per_epoch(&dl));
    int seq[40];
    read_sequence(&dl, seq, NWIN);
    int inorder = 1;
    for (int i = 0; i < NWIN; i++) { if (seq[i] != k_ids[i]) { inorder = 0; } }
    TEST_CHECK(inorder, "unshuffled single rank reads shards in order and windows in order");
    dataloader_next_batch(&dl);
    DataLoaderState st;
    dataloader_get_state(&dl, &st);
    TEST_CHECK(st.epoch == 1 && window_id(&dl) == 0 && st.position == 1,
               "after 15 windows the next batch starts epoch 1 at window 0 (epoch %llu, id %d, pos %llu)",
               (unsigned long long)st.epoch, window_id(&dl), (unsigned long long)st.position);
    dataloader_reset(&dl);
    dataloader_next_batch(&dl);
    dataloader_get_state(&dl, &st);
    TEST_CHECK(st.epoch == 0 && window_id(&dl) == 0, "reset returns to epoch 0, window 0");
    /* load_window */
    int lw_ok = 1;
    for (int k = 0; k < NWIN; k++) {
        dataloader_load_window(&dl, (size_t)k);
        if (window_id(&dl) != k_ids[k] || !window_consistent(&dl)) { lw_ok = 0; }
    }
    dataloader_get_state(&dl, &st);
    TEST_CHECK(lw_ok, "load_window(k) loads window k of the unshuffled order");
    TEST_CHECK(st.position == 1 && st.epoch == 0, "load_window does not move the read position");
    uint64_t fp_all = dataloader_fingerprint(&dl);
    dataloader_free(&dl);

    for (int nproc = 1; nproc <= 3; nproc++) {
        check_epoch_coverage(pattern, nproc, 0, 0);
        check_epoch_coverage(pattern, nproc, 1, 1234);
    }

    /* shuffling: determinism and sensitivity to the seed */
    DataLoader a, b, c;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 1, 42);
    dataloader_init(&b, pattern, 2, 4, 0, 1, 1, 42);
    dataloader_init(&c, pattern, 2, 4, 0, 1, 1, 43);
    int sa[30], sb[30], sc[30];
    read_sequence(&a, sa, 30);
    read_sequence(&b, sb, 30);
    read_sequence(&c, sc, 30);
    TEST_CHECK(memcmp(sa, sb, sizeof(sa)) == 0, "same seed -> identical window order over two epochs");
    TEST_CHECK(memcmp(sa, sc, sizeof(sa)) != 0, "different seed -> different window order");
    TEST_CHECK(memcmp(sa, sa + NWIN, NWIN * sizeof(int)) != 0, "shuffled epoch 1 order differs from epoch 0");
    int identity = 1;
    for (int i = 0; i < NWIN; i++) { if (sa[i] != k_ids[i]) { identity = 0; } }
    TEST_CHECK(!identity, "shuffled order is not the unshuffled order");
    /* windows of a shard stay contiguous within an epoch */
    int changes = 0;
    for (int i = 1; i < NWIN; i++) { if (sa[i] / 100 != sa[i - 1] / 100) { changes++; } }
    TEST_CHECK(changes == 2, "shuffle keeps each shard's windows contiguous (2 shard changes, got %d)", changes);
    /* exact resume, across an epoch boundary */
    dataloader_reset(&a);
    int first7[7];
    read_sequence(&a, first7, 7);
    dataloader_get_state(&a, &st);
    int cont_a[20], cont_b[20];
    read_sequence(&a, cont_a, 20);
    DataLoader r;
    dataloader_init(&r, pattern, 2, 4, 0, 1, 1, 42);
    dataloader_set_state(&r, &st);
    read_sequence(&r, cont_b, 20);
    TEST_CHECK(memcmp(cont_a, cont_b, sizeof(cont_a)) == 0, "set_state(get_state) in a fresh loader continues identically (20 batches, crossing an epoch)");
    TEST_CHECK(memcmp(first7, sa, sizeof(first7)) == 0, "reset of a shuffled loader replays the same order");
    dataloader_free(&a); dataloader_free(&b); dataloader_free(&c); dataloader_free(&r);
    /* multi-rank resume */
    DataLoader m0, m1;
    dataloader_init(&m0, pattern, 2, 4, 1, 2, 1, 7);
    int tmp[5];
    read_sequence(&m0, tmp, 5);
    dataloader_get_state(&m0, &st);
    read_sequence(&m0, cont_a, 10);
    dataloader_init(&m1, pattern, 2, 4, 1, 2, 1, 7);
    dataloader_set_state(&m1, &st);
    read_sequence(&m1, cont_b, 10);
    TEST_CHECK(memcmp(cont_a, cont_b, 10 * sizeof(int)) == 0, "rank 1 of 2 resumes identically from its state");
    dataloader_free(&m0); dataloader_free(&m1);

    /* fingerprint */
    char pattern01[512];
    snprintf(pattern01, sizeof(pattern01), "%s/train_00[01].bin", g_dir);
    DataLoader f1, f2;
    dataloader_init(&f1, pattern, 2, 4, 0, 1, 1, 5);
    dataloader_init(&f2, pattern01, 2, 4, 0, 1, 0, 0);
    TEST_CHECK(dataloader_fingerprint(&f1) == fp_all, "fingerprint depends on the data, not on shuffle/seed");
    TEST_CHECK(dataloader_fingerprint(&f2) != fp_all, "fingerprint differs for a different shard set");
    dataloader_free(&f1); dataloader_free(&f2);

    /* error cases */
    char err[4096];
    char bad_pattern[600];
    snprintf(bad_pattern, sizeof(bad_pattern), "%s/nothing_*.bin", g_dir);
    InitArgs ia = {bad_pattern, 2, 4, 0, 1};
    int rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, bad_pattern) && count_lines(err) == 1,
               "no matching shard: exit 1, one line naming the pattern (rc %d: %s)", rc, err);

    write_shard("short_000.bin", DATALOADER_MAGIC, 1, 5, 5, 0);
    char p[600];
    snprintf(p, sizeof(p), "%s/short_*.bin", g_dir);
    ia.pattern = p;
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "short_000.bin") && strstr(err, "5 tokens") && strstr(err, "9") && count_lines(err) == 1,
               "shard shorter than B*T+1 refused with its name, count and the needed 9 (rc %d: %s)", rc, err);
    ia.B = 1; ia.T = 4; /* the same shard is fine when B*T+1 = 5 */
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 0, "shard of exactly B*T+1 tokens is accepted (rc %d: %s)", rc, err);
    ia.B = 2;

    write_shard("magic_000.bin", 20240326, 1, 41, 41, 0);
    snprintf(p, sizeof(p), "%s/magic_*.bin", g_dir);
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "magic_000.bin") && strstr(err, "20240326") && strstr(err, "20240520") && strstr(err, "prepare.py"),
               "wrong magic refused: found and expected values, file name, how to regenerate (%s)", err);

    write_shard("version_000.bin", DATALOADER_MAGIC, 3, 41, 41, 0);
    snprintf(p, sizeof(p), "%s/version_*.bin", g_dir);
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "version_000.bin") && strstr(err, "version 3") && strstr(err, "expected 1") &&
               strstr(err, "or 2") && count_lines(err) == 1, "unknown version 3 refused naming both known ones (%s)", err);

    write_shard("trunc_000.bin", DATALOADER_MAGIC, 1, 41, 30, 0);
    snprintf(p, sizeof(p), "%s/trunc_*.bin", g_dir);
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "trunc_000.bin") && strstr(err, "1084") && strstr(err, "1106") && strstr(err, "prepare.py"),
               "truncated shard refused with found (1084) and expected (1106) sizes (%s)", err);

    write_shard("long_000.bin", DATALOADER_MAGIC, 1, 41, 45, 0);
    snprintf(p, sizeof(p), "%s/long_*.bin", g_dir);
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "long_000.bin"), "shard with trailing bytes beyond its count refused (%s)", err);

    write_raw("tiny_000.bin", 100);
    snprintf(p, sizeof(p), "%s/tiny_*.bin", g_dir);
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "tiny_000.bin") && strstr(err, "100 bytes"), "file smaller than the header refused (%s)", err);

    ia.pattern = pattern; ia.B = 0;
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "B=0"), "B=0 refused (%s)", err);
    ia.B = 2; ia.rank = 2; ia.nproc = 2;
    rc = run_in_child(child_init, &ia, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "rank 2"), "rank >= number of processes refused (%s)", err);

    rc = run_in_child(child_set_state_wrong_rank, pattern, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "rank 1 of 2"), "set_state with another rank's position refused (%s)", err);
    rc = run_in_child(child_vocab_limit, pattern, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "train_001.bin") && strstr(err, "1005"), "token id >= vocab limit refused naming the shard (%s)", err);
    snprintf(p, sizeof(p), "%s/train_001.bin", g_dir); /* 3 windows */
    rc = run_in_child(child_too_many_ranks, p, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "rank 4"), "more ranks than windows refused instead of spinning (%s)", err);

    check_version2(pattern, fp_all);
    check_many_shards();

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) { fprintf(stderr, "warning: could not remove %s\n", g_dir); }
    return testing_finish();
}
