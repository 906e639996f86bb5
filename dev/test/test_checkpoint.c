/*
 * dev/test/test_checkpoint.c -- the checkpoint directory of llmc/checkpoint.h (llmc/README.md, "Training state and
 * checkpoints", crash safety):
 *   - names: steps of 10^8 and more (9 and 10 digits, up to INT_MAX) are read back whole, from every kind of file;
 *     temp files and other names are not checkpoints;
 *   - pruning (-nk): the complete checkpoints beyond the newest `keep` go; so do the files of a step older than the
 *     newest complete checkpoint that lost its DONE marker (a prune killed between removing the marker and the files:
 *     simulated by removing only the marker) or never got one, whatever process count wrote them; the newest complete
 *     checkpoint, an unmarked newer step (a checkpoint being written), temp files and foreign files stay; -nk 0 keeps
 *     every complete checkpoint and still removes the unusable files; steps of 10^8 and more are pruned like others.
 */
#include "dev/test/testing.h"
#include "llmc/checkpoint.h"

static char g_dir[256];

static void touch(const char* name) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE* f = fopen(path, "wb");
    fputs("x", f);
    fclose(f);
}
static int exists(const char* name) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    return file_exists(path);
}
/* the files of a checkpoint at step st written by `ranks` processes; with done = 0 its marker is missing */
static void make_checkpoint(int st, int ranks, int done) {
    char name[128];
    snprintf(name, sizeof(name), "model_%08d.bin", st);
    touch(name);
    for (int r = 0; r < ranks; r++) {
        snprintf(name, sizeof(name), "state_%08d_%05d.bin", st, r);
        touch(name);
    }
    if (done) {
        snprintf(name, sizeof(name), "DONE_%08d", st);
        touch(name);
    }
}
/* 1 when dir holds exactly the names in want[] (n of them), else prints what differs */
static int holds_exactly(const char* const* want, int n) {
    int ok = 1, count = 0;
    for (int i = 0; i < n; i++) {
        if (!exists(want[i])) { printf("  missing: %s\n", want[i]); ok = 0; }
    }
    DIR* d = opendir(g_dir);
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') { continue; }
        int listed = 0;
        for (int i = 0; i < n; i++) { listed |= strcmp(e->d_name, want[i]) == 0; }
        if (!listed) { printf("  unexpected: %s\n", e->d_name); ok = 0; }
        count++;
    }
    closedir(d);
    return ok && count == n;
}
static void clear_dir(void) {
    DIR* d = opendir(g_dir);
    struct dirent* e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') { continue; }
        snprintf(path, sizeof(path), "%s/%s", g_dir, e->d_name);
        remove(path);
    }
    closedir(d);
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/llmc_ckpt.%d", (int)getpid());
    mkdir(g_dir, 0700);

    /* names: steps of 10^8 and more are read whole */
    int k = -1;
    TEST_CHECK(checkpoint_name_step("DONE_123456789", &k) == 123456789 && k == 0 &&
               checkpoint_name_step("model_2147483647.bin", &k) == 2147483647 && k == 1 &&
               checkpoint_name_step("state_100000000_00003.bin", &k) == 100000000 && k == 1 &&
               checkpoint_name_step("gradres_00000042_00001.bin", &k) == 42 && k == 1 &&
               checkpoint_name_step("gradrese_00000043_00001.bin", &k) == 43 && k == 1,
               "checkpoint names: steps of 9 and 10 digits (10^8 .. INT_MAX) are read whole from every kind of file");
    TEST_CHECK(checkpoint_name_step("model_00000042.bin.tmp", NULL) < 0 && checkpoint_name_step("DONE_0000004", NULL) < 0 &&
               checkpoint_name_step("model_2147483648.bin", NULL) < 0 && checkpoint_name_step("state_00000042.bin", NULL) < 0 &&
               checkpoint_name_step("DONE_00000042x", NULL) < 0 && checkpoint_name_step("log.jsonl", NULL) < 0,
               "checkpoint names: temp files, short or overflowing steps, missing ranks and other names are not checkpoints");
    make_checkpoint(99999999, 1, 1);
    make_checkpoint(123456789, 1, 1);
    int n = 0;
    TEST_CHECK(checkpoint_latest_step(g_dir, "DONE_", &n) == 123456789 && n == 2,
               "the newest complete checkpoint after step 10^8 is found (step %d)", checkpoint_latest_step(g_dir, "DONE_", NULL));
    checkpoint_prune(g_dir, 123456789, 1, 1);
    const char* big[3] = {"DONE_123456789", "model_123456789.bin", "state_123456789_00000.bin"};
    TEST_CHECK(holds_exactly(big, 3), "-nk 1 after step 123456789 removes the checkpoint at step 99999999");
    clear_dir();

    /* a prune killed between removing the marker and the files: the next prune removes them */
    make_checkpoint(2, 2, 1);
    make_checkpoint(4, 2, 1);
    make_checkpoint(6, 2, 1);
    char p2[512];
    snprintf(p2, sizeof(p2), "%s/DONE_00000002", g_dir);
    remove(p2);                    /* the kill: marker gone, model and states left */
    make_checkpoint(8, 2, 1);      /* the resumed run's next checkpoint */
    checkpoint_prune(g_dir, 8, 2, 2);
    const char* after[8] = {"DONE_00000006", "model_00000006.bin", "state_00000006_00000.bin", "state_00000006_00001.bin",
                            "DONE_00000008", "model_00000008.bin", "state_00000008_00000.bin", "state_00000008_00001.bin"};
    TEST_CHECK(holds_exactly(after, 8),
               "-nk 2: the files of step 2 left by a prune killed after removing its marker are removed by the next prune, "
               "step 4 beyond -nk too; steps 6 and 8 stay");
    clear_dir();

    /* what stays: the newest complete checkpoint, a newer step being written, temp and foreign files; unmarked
     * files older than the newest complete checkpoint go, of any process count (4 here, 2 now), also with -nk 0 */
    make_checkpoint(3, 4, 0);      /* a write killed before its marker, by a 4-process run */
    make_checkpoint(5, 2, 1);
    make_checkpoint(7, 2, 0);      /* being written */
    touch("model_00000007.bin.tmp");
    touch("notes.txt");
    touch("model_final.bin");
    checkpoint_prune(g_dir, 5, 0, 2);
    const char* kept[10] = {"DONE_00000005", "model_00000005.bin", "state_00000005_00000.bin", "state_00000005_00001.bin",
                            "model_00000007.bin", "state_00000007_00000.bin", "state_00000007_00001.bin",
                            "model_00000007.bin.tmp", "notes.txt", "model_final.bin"};
    TEST_CHECK(holds_exactly(kept, 10),
               "-nk 0: the unmarked files of step 3 (4 processes) go; the newest complete checkpoint, the unmarked newer "
               "step 7 (being written), a temp file and foreign files stay");
    make_checkpoint(9, 2, 1);
    make_checkpoint(11, 2, 1);
    checkpoint_prune(g_dir, 11, 0, 2);
    TEST_CHECK(exists("DONE_00000005") && exists("DONE_00000009") && exists("DONE_00000011") &&
               !exists("model_00000007.bin") && !exists("state_00000007_00001.bin") && exists("model_00000007.bin.tmp"),
               "-nk 0 keeps every complete checkpoint; step 7, now older than the newest complete one, is removed");
    clear_dir();
    rmdir(g_dir);
    return testing_finish();
}
