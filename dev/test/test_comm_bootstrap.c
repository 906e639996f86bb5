/*
 * dev/test/test_comm_bootstrap.c -- host-only parts of llmc/comm.h, in the single-process build (no MPI):
 *   - NCCL unique-id exchange through a shared directory: rank 0 writes, three forked "ranks" read the same
 *     blob; a stale id file (older than stale_s) is ignored and the reader times out with a FATAL;
 *   - the TCP exchange: rank 0 serves three forked clients on a local port;
 *   - the single-process backend: collectives are no-ops, counters stay 0, world of one;
 *   - the ring byte model (comm_ring_bytes) against 2(N-1)/N and (N-1)/N for equal chunks.
 */
#include <sys/wait.h>
#include "dev/test/testing.h"
#include "llmc/comm.h"

/* runs fn(rank) in `n` child processes, returns how many exited 0 */
static int fork_ranks(int n, int first_rank, int (*fn)(int)) {
    pid_t pids[16];
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0) { _exit(fn(first_rank + i)); }
    }
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) { ok++; }
    }
    return ok;
}

static char g_dir[256];
static unsigned char g_blob[128];

static int fs_reader(int rank) {
    unsigned char got[128];
    memset(got, 0, sizeof(got));
    comm_bootstrap_fs(g_dir, "job42", rank, got, sizeof(got), 10.0, 120.0);
    return memcmp(got, g_blob, sizeof(got)) == 0 ? 0 : 1;
}
static int fs_reader_short_timeout(int rank) {
    unsigned char got[128];
    freopen("/dev/null", "w", stderr);
    comm_bootstrap_fs(g_dir, "job43", rank, got, sizeof(got), 1.0, 0.0);
    return 0; /* not reached: the stale file is ignored and the wait times out (exit 1) */
}
static int g_port;
static int tcp_reader(int rank) {
    unsigned char got[128];
    memset(got, 0, sizeof(got));
    comm_bootstrap_tcp("127.0.0.1", g_port, rank, 4, got, sizeof(got), 10.0);
    return memcmp(got, g_blob, sizeof(got)) == 0 ? 0 : 1;
}

int main(void) {
    for (int i = 0; i < 128; i++) { g_blob[i] = (unsigned char)(i * 37 + 11); }
    snprintf(g_dir, sizeof(g_dir), "/tmp/llmc_boot.%d", (int)getpid());
    mkdir(g_dir, 0700);

    /* filesystem: readers start first and wait for rank 0's file */
    pid_t readers = fork();
    if (readers == 0) { _exit(fork_ranks(3, 1, fs_reader) == 3 ? 0 : 1); }
    usleep(300000);
    comm_bootstrap_fs(g_dir, "job42", 0, g_blob, sizeof(g_blob), 10.0, 120.0);
    int st = 0;
    waitpid(readers, &st, 0);
    TEST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fs exchange: 3 ranks read rank 0's id (written after they started waiting)");
    char path[512];
    comm_bootstrap_fs_path(path, sizeof(path), g_dir, "job42");
    comm_bootstrap_fs_cleanup(g_dir, "job42");
    TEST_CHECK(!file_exists(path), "fs exchange: rank 0 removes the id file after the group formed");

    /* a stale file: written "long ago" (stale_s = 0 and a timestamp in the past) is rejected */
    comm_bootstrap_fs_path(path, sizeof(path), g_dir, "job43");
    FILE* f = fopen(path, "wb");
    uint64_t magic = COMM_BOOT_MAGIC;
    int64_t old = (int64_t)time(NULL) - 3600;
    fwrite(&magic, sizeof(magic), 1, f); fwrite(&old, sizeof(old), 1, f); fwrite(g_blob, 1, sizeof(g_blob), f);
    fclose(f);
    TEST_CHECK(fork_ranks(1, 1, fs_reader_short_timeout) == 0, "fs exchange: a stale id file of an earlier run is ignored (reader times out with an error)");
    remove(path);

    /* TCP: rank 0 serves 3 clients */
    g_port = 20000 + (int)(getpid() % 20000);
    pid_t clients = fork();
    if (clients == 0) { _exit(fork_ranks(3, 1, tcp_reader) == 3 ? 0 : 1); }
    comm_bootstrap_tcp("127.0.0.1", g_port, 0, 4, g_blob, sizeof(g_blob), 10.0);
    waitpid(clients, &st, 0);
    TEST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tcp exchange on port %d: 3 ranks got rank 0's id", g_port);
    rmdir(g_dir);

    /* single-process backend */
    Comm c;
    comm_init(&c, NULL, NULL, "", 10.0);
    float x[5] = {1, 2, 3, 4, 5};
    comm_all_reduce(&c, x, COMM_F32, 5);
    comm_reduce_scatter_owned(&c, x, COMM_F32, 0, 5, 5);
    comm_all_gather_owned(&c, x, COMM_F32, 0, 5, 5);
    double h = 2.5;
    comm_all_reduce_host_f64(&c, &h, 1);
    comm_barrier(&c);
    TEST_CHECK(c.world == 1 && c.rank == 0 && x[4] == 5 && h == 2.5 && c.total.bytes_sent == 0,
               "single-process backend: world of one, collectives leave data unchanged, 0 bytes counted");
    comm_finalize(&c);

    /* ring byte model */
    for (int N = 2; N <= 8; N++) {
        Comm m;
        memset(&m, 0, sizeof(m));
        m.world = N;
        int ok = 1;
        for (m.rank = 0; m.rank < N; m.rank++) {
            size_t s, r;
            comm_ring_bytes(&m, 0, (size_t)N * 1000, 1000, 4, 0, &s, &r);
            if (s != (size_t)(N - 1) * 4000 || r != s) { ok = 0; }
            comm_ring_bytes(&m, 0, (size_t)N * 1000, 1000, 2, 1, &s, &r);
            if (s != (size_t)(N - 1) * 2000 || r != s) { ok = 0; }
        }
        TEST_CHECK(ok, "ring model, N=%d: reduce-scatter and all-gather move (N-1)/N of the buffer per rank", N);
    }
    return testing_finish();
}
