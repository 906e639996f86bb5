/*
 * dev/test/test_comm_bootstrap.c -- host-only parts of llmc/comm.h, in the single-process build (no MPI):
 *   - NCCL unique-id exchange through a shared directory: rank 0 writes, three forked "ranks" read the same
 *     blob; a stale id file (older than stale_s) is ignored and the reader times out with a FATAL; so is a young
 *     file of an earlier launch with the same run id (another launch tag: a Slurm requeue), while a reader of the
 *     same launch takes it;
 *   - the filesystem exchange refuses a directory others can write or enter (0777, 0755, 0711) and the id file has
 *     mode 0600 at every moment: a watcher stat()s the temp and final names in a tight loop while rank 0 writes
 *     the id 300 times and must see the file, always with mode 0600 (umask 0 during the writes, so a file created
 *     wider and narrowed afterwards would show);
 *   - the TCP exchange: rank 0 serves three forked clients on a local port; with a per-run secret missing, a
 *     client fails with one line; under attack (an idle client, a flood of 200 connections, a client with a wrong
 *     secret, a second process claiming an already served rank, a connection to another local address than the
 *     one bound) the real ranks still get the id, within the timeout, and the bad clients fail with one clear
 *     line each; rank 0 with a rank that never comes fails with one line naming it; the secret read from a mode-0600
 *     LLMC_BOOTSTRAP_SECRET_FILE works, one readable by others is refused with one line;
 *   - every number and every deadline of the bootstrap's input: a secret file of 1,024 bytes and a newline is taken
 *     whole, one of 1,025 is refused (never cut); a port that is not an integer in 1..65535 (abc, 99999, 0, -1,
 *     empty) is refused naming the port; a rank variable that is not an integer (LLMC_WORLD_SIZE=2x) is refused
 *     naming it; a fake rank 0 that sends its challenge one byte every 0.4 s cannot hold a client (timeout 3 s,
 *     1 s per connection) much past its timeout;
 *   - a build without OpenSSL (COMM_BOOT_HAVE_OPENSSL 0; dev/test/cli_no_openssl.sh builds one): instead of the
 *     TCP tests, the tcp: exchange and comm_init refuse with one error line; the filesystem tests run as ever;
 *   - the single-process backend: collectives are no-ops, counters stay 0, world of one;
 *   - the ring byte model (comm_ring_bytes) against 2(N-1)/N and (N-1)/N for equal chunks.
 */
#include <sys/mman.h>
#include <sys/wait.h>
#include <arpa/inet.h>
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
/* a reader of another launch of the same job (a Slurm requeue: SLURM_RESTART_COUNT raised), stale_s = 120 s */
static int fs_reader_requeued(int rank) {
    unsigned char got[128];
    if (!freopen("/dev/null", "w", stderr)) { return 99; }
    setenv("SLURM_RESTART_COUNT", "1", 1);
    comm_bootstrap_fs(g_dir, "job45", rank, got, sizeof(got), 1.0, 120.0);
    return 0; /* not reached: the earlier launch's id is ignored and the wait times out (exit 1) */
}
static int fs_reader_same_launch(int rank) {
    unsigned char got[128];
    memset(got, 0, sizeof(got));
    comm_bootstrap_fs(g_dir, "job45", rank, got, sizeof(got), 1.0, 120.0);
    return memcmp(got, g_blob, sizeof(got)) == 0 ? 0 : 1;
}
/* what the mode watcher saw: how often the id file (temp or final name) existed, and with another mode than 0600 */
typedef struct { volatile int stop; long seen, wrong; unsigned wrong_mode; } ModeWatch;
static void watch_modes(ModeWatch* w, const char* path) {
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    while (!w->stop) {
        struct stat a;
        for (int k = 0; k < 2; k++) {
            if (stat(k ? path : tmp, &a) == 0) {
                w->seen++;
                if ((a.st_mode & 0777) != 0600) { w->wrong++; w->wrong_mode = (unsigned)(a.st_mode & 0777); }
            }
        }
    }
}
static int fs_reader_short_timeout(int rank) {
    unsigned char got[128];
    freopen("/dev/null", "w", stderr);
    comm_bootstrap_fs(g_dir, "job43", rank, got, sizeof(got), 1.0, 0.0);
    return 0; /* not reached: the stale file is ignored and the wait times out (exit 1) */
}
#if COMM_BOOT_HAVE_OPENSSL
static int g_port;
static int tcp_reader(int rank) {
    unsigned char got[128];
    memset(got, 0, sizeof(got));
    comm_bootstrap_tcp("127.0.0.1", g_port, rank, 4, got, sizeof(got), 10.0);
    return memcmp(got, g_blob, sizeof(got)) == 0 ? 0 : 1;
}
#endif

/* runs fn(arg) in a child process with stderr to errfile (NULL: /dev/null); returns its pid */
static pid_t spawn(int (*fn)(int), int arg, const char* errfile) {
    pid_t p = fork();
    if (p == 0) {
        if (!freopen(errfile ? errfile : "/dev/null", "w", stderr)) { _exit(99); }
        _exit(fn(arg));
    }
    return p;
}
static int exit_code(pid_t p) {
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
/* 1 when file holds exactly one line, an "error:" line containing want */
static int one_error_line(const char* file, const char* want) {
    char buf[4096];
    FILE* f = fopen(file, "r");
    if (!f) { return 0; }
    size_t k = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[k] = '\0';
    int lines = 0;
    for (size_t i = 0; i < k; i++) { lines += buf[i] == '\n'; }
    if (lines != 1 || strncmp(buf, "error:", 6) != 0 || !strstr(buf, want)) {
        fprintf(stderr, "  (%s: %s)\n", file, buf);
        return 0;
    }
    return 1;
}
#if COMM_BOOT_HAVE_OPENSSL
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define GOOD_SECRET "0123456789abcdef-test-secret"
static CommBootTcp g_tcp; /* the adversarial test's parameters: short timeouts */

/* g_tcp for 127.0.0.1:port with the good secret, the whole-exchange timeout and the per-connection timeout (s) */
static void tcp_options(int port, double timeout_s, double io_timeout_s) {
    memset(&g_tcp, 0, sizeof(g_tcp));
    g_tcp.host = "127.0.0.1";
    g_tcp.port = port;
    g_tcp.secret = (const unsigned char*)GOOD_SECRET;
    g_tcp.secret_len = strlen(GOOD_SECRET);
    g_tcp.timeout_s = timeout_s;
    g_tcp.io_timeout_s = io_timeout_s;
}
static int tcp_client(int rank) {
    unsigned char got[128];
    memset(got, 0, sizeof(got));
    comm_bootstrap_tcp_join(&g_tcp, rank, got, sizeof(got));
    return memcmp(got, g_blob, sizeof(got)) == 0 ? 0 : 1;
}
static int tcp_wrong_secret(int rank) {
    g_tcp.secret = (const unsigned char*)"not-the-secret-of-this-run";
    g_tcp.secret_len = strlen((const char*)g_tcp.secret);
    return tcp_client(rank);
}
static int connect_local(const char* ip) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_tcp.port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) { close(fd); return -1; }
    return fd;
}
/* connects at 0.1 s and says nothing for 2 s (longer than the per-connection timeout) */
static int tcp_idle(int unused) {
    (void)unused;
    usleep(100000);
    int fd = connect_local("127.0.0.1");
    sleep(2);
    if (fd >= 0) { close(fd); }
    return fd >= 0 ? 0 : 1;
}
/* at 0.1 s, 200 connections: half silent, half sending 76 bytes of garbage; held open for 2 s */
static int tcp_flood(int unused) {
    (void)unused;
    usleep(100000);
    int fds[200], opened = 0;
    unsigned char junk[COMM_BOOT_ANSWER];
    memset(junk, 0x5a, sizeof(junk));
    for (int i = 0; i < 200; i++) {
        fds[i] = connect_local("127.0.0.1");
        if (fds[i] >= 0) {
            opened++;
            if (i % 2) { (void)!write(fds[i], junk, sizeof(junk)); }
        }
    }
    sleep(2);
    for (int i = 0; i < 200; i++) { if (fds[i] >= 0) { close(fds[i]); } }
    return opened == 200 ? 0 : 1;
}
/* rank 0 listens on 127.0.0.1 only: another loopback address (127.0.0.2) must be refused */
static int tcp_other_address(int unused) {
    (void)unused;
    int fd = connect_local("127.0.0.2");
    if (fd >= 0) { close(fd); return 1; }
    return 0;
}
static int tcp_no_secret(int rank) {
    unsetenv("LLMC_BOOTSTRAP_SECRET");
    unsetenv("LLMC_BOOTSTRAP_SECRET_FILE");
    unsigned char got[128];
    comm_bootstrap_tcp("127.0.0.1", g_tcp.port, rank, 2, got, sizeof(got), 1.0);
    return 0;
}
static char g_secret_file[300];
/* a client reading its secret from LLMC_BOOTSTRAP_SECRET_FILE (rank 0 has it in the environment) */
static int tcp_secret_file(int rank) {
    unsetenv("LLMC_BOOTSTRAP_SECRET");
    setenv("LLMC_BOOTSTRAP_SECRET_FILE", g_secret_file, 1);
    unsigned char got[128];
    memset(got, 0, sizeof(got));
    comm_bootstrap_tcp("127.0.0.1", g_port + 4, rank, 2, got, sizeof(got), 5.0);
    return memcmp(got, g_blob, sizeof(got)) == 0 ? 0 : 1;
}
/* reads the secret from LLMC_BOOTSTRAP_SECRET_FILE (set by the caller to a FIFO); SIGALRM ends a wait in open() */
static int secret_from_file(int unused) {
    (void)unused;
    alarm(10);
    unsetenv("LLMC_BOOTSTRAP_SECRET");
    setenv("LLMC_BOOTSTRAP_SECRET_FILE", g_secret_file, 1);
    unsigned char secret[COMM_BOOT_SECRET_MAX];
    comm_bootstrap_secret(secret, sizeof(secret));
    return 0;
}
/* the secret file holds 1,024 bytes and a newline: read whole (exit 0 when all 1,024 bytes came back) */
static int secret_1024(int unused) {
    (void)unused;
    unsetenv("LLMC_BOOTSTRAP_SECRET");
    setenv("LLMC_BOOTSTRAP_SECRET_FILE", g_secret_file, 1);
    unsigned char secret[COMM_BOOT_SECRET_MAX];
    size_t len = comm_bootstrap_secret(secret, sizeof(secret));
    return len == 1024 && secret[0] == 'a' && secret[1023] == 'z' ? 0 : 1;
}
static const char* g_spec; /* an --nccl-init value for exchange_spec */
static int exchange_spec(int rank) {
    unsetenv("LLMC_BOOTSTRAP_SECRET");
    unsetenv("LLMC_BOOTSTRAP_SECRET_FILE");
    unsigned char got[128];
    char fsdir[256];
    comm_bootstrap_exchange(g_spec, "job46", rank, 2, got, sizeof(got), 1.0, fsdir, sizeof(fsdir));
    return 0;
}
static int init_group(int unused) {
    (void)unused;
    setenv("LLMC_WORLD_SIZE", "2x", 1);
    Comm c;
    comm_init(&c, NULL, NULL, "", 1.0);
    return 0;
}
/* a fake rank 0 on g_tcp.port: sends each connection its 40-byte challenge one byte every 0.4 s (until killed) */
static int tcp_slowloris(int unused) {
    (void)unused;
    int srv = socket(AF_INET, SOCK_STREAM, 0), yes = 1;
    setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_tcp.port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(srv, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(srv, 16) != 0) { return 1; }
    unsigned char hello[COMM_BOOT_HELLO];
    uint64_t magic = COMM_BOOT_MAGIC;
    memcpy(hello, &magic, 8);
    memset(hello + 8, 7, COMM_BOOT_NONCE);
    for (;;) {
        int fd = accept(srv, NULL, NULL);
        for (int i = 0; fd >= 0 && i < COMM_BOOT_HELLO; i++) {
            if (send(fd, hello + i, 1, MSG_NOSIGNAL) != 1) { break; }
            usleep(400000);
        }
        if (fd >= 0) { close(fd); }
    }
}
static int tcp_server_missing_rank(int world) {
    comm_bootstrap_tcp_serve(&g_tcp, world, g_blob, sizeof(g_blob));
    return 0;
}
static int tcp_delayed(int rank_and_delay_ms) {
    usleep((useconds_t)(rank_and_delay_ms / 10) * 1000);
    return tcp_client(rank_and_delay_ms % 10);
}
static int tcp_init_accepted(int unused) {
    (void)unused;
    Comm c;
    comm_init(&c, NULL, NULL, "tcp:127.0.0.1:29123", 1.0);
    comm_finalize(&c);
    return c.world == 1 ? 0 : 1;
}
#else
/* a build without OpenSSL: the TCP exchange (as comm_init_device calls it) and comm_init refuse tcp: */
static int tcp_exchange_refused(int rank) {
    unsigned char got[128];
    char fsdir[64];
    setenv("LLMC_BOOTSTRAP_SECRET", "0123456789abcdef-test-secret", 1);
    comm_bootstrap_exchange("tcp:127.0.0.1:29123", "job45", rank, 2, got, sizeof(got), 1.0, fsdir, sizeof(fsdir));
    return 0; /* not reached */
}
static int tcp_init_refused(int unused) {
    (void)unused;
    Comm c;
    comm_init(&c, NULL, NULL, "tcp:127.0.0.1:29123", 1.0);
    return 0; /* not reached */
}
#endif
static int fs_open_dir(int rank) {
    unsigned char got[128];
    comm_bootstrap_fs(g_dir, "job44", rank, got, sizeof(got), 1.0, 120.0);
    return 0;
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
    uint64_t magic = COMM_BOOT_MAGIC, tag = comm_bootstrap_launch_tag();
    int64_t old = (int64_t)time(NULL) - 3600;
    fwrite(&magic, sizeof(magic), 1, f); fwrite(&old, sizeof(old), 1, f); fwrite(&tag, sizeof(tag), 1, f);
    fwrite(g_blob, 1, sizeof(g_blob), f);
    fclose(f);
    chmod(path, 0600);
    TEST_CHECK(fork_ranks(1, 1, fs_reader_short_timeout) == 0, "fs exchange: a stale id file of an earlier run is ignored (reader times out with an error)");
    remove(path);

    /* a young id file of an earlier launch with the same run id (a requeued Slurm job keeps SLURM_JOB_ID and raises
     * SLURM_RESTART_COUNT): ignored by the requeued launch's readers, taken by a reader of the same launch */
    setenv("SLURM_JOB_ID", "4242", 1);
    unsetenv("SLURM_RESTART_COUNT");
    comm_bootstrap_fs(g_dir, "job45", 0, g_blob, sizeof(g_blob), 10.0, 120.0);
    TEST_CHECK(fork_ranks(1, 1, fs_reader_requeued) == 0,
               "fs exchange: a 0 s old id file of the launch before a requeue (same run id) is ignored (times out)");
    TEST_CHECK(fork_ranks(1, 1, fs_reader_same_launch) == 1, "fs exchange: ... while a reader of that launch takes it");
    comm_bootstrap_fs_cleanup(g_dir, "job45");
    unsetenv("SLURM_JOB_ID");

    /* the id file is private at every moment of its creation: a watcher stat()s both names in a tight loop while rank
     * 0 writes the id 300 times; umask 0, so a file created with fopen's 0666 and narrowed afterwards would show */
    char errf[512];
    snprintf(errf, sizeof(errf), "%s/err", g_dir);
    comm_bootstrap_fs_path(path, sizeof(path), g_dir, "job44");
    ModeWatch* w = (ModeWatch*)mmap(NULL, sizeof(ModeWatch), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(w, 0, sizeof(*w));
    pid_t watcher = fork();
    if (watcher == 0) { watch_modes(w, path); _exit(0); }
    mode_t old_mask = umask(0);
    for (int i = 0; i < 300; i++) { comm_bootstrap_fs(g_dir, "job44", 0, g_blob, sizeof(g_blob), 10.0, 120.0); }
    umask(old_mask);
    w->stop = 1;
    waitpid(watcher, &st, 0);
    struct stat fst;
    TEST_CHECK(stat(path, &fst) == 0 && (fst.st_mode & 0777) == 0600 && w->seen > 0 && w->wrong == 0,
               "fs exchange: the id file had mode 0600 at every moment of 300 writes (seen %ld times, %ld with another "
               "mode, e.g. %04o)", w->seen, w->wrong, w->wrong_mode);
    munmap(w, sizeof(ModeWatch));
    comm_bootstrap_fs_cleanup(g_dir, "job44");
    /* a directory others can write, read or enter is refused, by rank 0 and the readers alike, with one line */
    char errd[512];
    snprintf(errd, sizeof(errd), "/tmp/llmc_boot_err.%d", (int)getpid());
    const unsigned modes[3] = {0777, 0755, 0711};
    for (int i = 0; i < 3; i++) {
        chmod(g_dir, modes[i]);
        int rc0 = exit_code(spawn(fs_open_dir, 0, errd)), rc1 = exit_code(spawn(fs_open_dir, 1, errd));
        TEST_CHECK(rc0 == 1 && rc1 == 1 && one_error_line(errd, "only you can enter") && !file_exists(path),
                   "fs exchange: a directory of mode %04o is refused by rank 0 and the readers (one error line, no id "
                   "file written)", modes[i]);
    }
    chmod(g_dir, 0700);

#if COMM_BOOT_HAVE_OPENSSL
    /* TCP: rank 0 serves 3 clients, secret from the environment */
    setenv("LLMC_BOOTSTRAP_SECRET", GOOD_SECRET, 1);
    g_port = 20000 + (int)(getpid() % 20000);
    pid_t clients = fork();
    if (clients == 0) { _exit(fork_ranks(3, 1, tcp_reader) == 3 ? 0 : 1); }
    comm_bootstrap_tcp("127.0.0.1", g_port, 0, 4, g_blob, sizeof(g_blob), 10.0);
    waitpid(clients, &st, 0);
    TEST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tcp exchange on port %d: 3 ranks got rank 0's id", g_port);

    /* no secret: one line saying how to set one */
    g_tcp.port = g_port + 1;
    TEST_CHECK(exit_code(spawn(tcp_no_secret, 1, errf)) == 1 && one_error_line(errf, "LLMC_BOOTSTRAP_SECRET"),
               "tcp exchange without a per-run secret: one error line naming LLMC_BOOTSTRAP_SECRET");

    /* under attack: world of 4, per-connection timeout 0.5 s, whole exchange 8 s */
    tcp_options(g_port + 2, 8.0, 0.5);
    char err_wrong[512], err_dup[512];
    snprintf(err_wrong, sizeof(err_wrong), "%s/err_wrong", g_dir);
    snprintf(err_dup, sizeof(err_dup), "%s/err_dup", g_dir);
    pid_t idle = spawn(tcp_idle, 0, NULL);         /* at 0.1 s, once rank 0 listens */
    pid_t flood = spawn(tcp_flood, 0, NULL);       /* at 0.1 s */
    double t0 = now_s();
    pid_t real[3], wrong, dup, other;
    real[0] = spawn(tcp_delayed, 3000 + 1, NULL);  /* rank 1 at 0.3 s */
    wrong = spawn(tcp_wrong_secret, 2, err_wrong); /* wrong secret claiming rank 2, at once */
    dup = spawn(tcp_delayed, 8000 + 1, err_dup);   /* a second rank 1 at 0.8 s */
    other = spawn(tcp_other_address, 0, NULL);
    real[1] = spawn(tcp_delayed, 15000 + 2, NULL); /* ranks 2 and 3 at 1.5 s */
    real[2] = spawn(tcp_delayed, 15000 + 3, NULL);
    comm_bootstrap_tcp_serve(&g_tcp, 4, g_blob, sizeof(g_blob));
    double took = now_s() - t0;
    int real_ok = 0;
    for (int i = 0; i < 3; i++) { real_ok += exit_code(real[i]) == 0; }
    TEST_CHECK(real_ok == 3 && took < g_tcp.timeout_s,
               "tcp under attack (idle client, 200-connection flood, wrong secret, duplicate rank): the 3 real ranks got "
               "the id, rank 0 done in %.1f s (timeout %.0f s)", took, g_tcp.timeout_s);
    TEST_CHECK(exit_code(wrong) == 1 && one_error_line(err_wrong, "secret differs"),
               "tcp: a client with a wrong secret is rejected with one error line");
    TEST_CHECK(exit_code(dup) == 1 && one_error_line(err_dup, "already served rank 1"),
               "tcp: a second process claiming an already served rank gets one error line");
    TEST_CHECK(exit_code(other) == 0, "tcp: rank 0 listens on the given address only (127.0.0.2 refused)");
    TEST_CHECK(exit_code(idle) == 0 && exit_code(flood) == 0,
               "tcp: the idle client and all 200 flood connections did connect to rank 0 (the attack took place)");

    /* a rank that never comes: rank 0 fails within its timeout with one line naming it */
    g_tcp.timeout_s = 1.0;
    g_tcp.port = g_port + 3;
    t0 = now_s();
    pid_t srv = spawn(tcp_server_missing_rank, 3, errf);
    pid_t only1 = spawn(tcp_delayed, 1000 + 1, NULL);
    int src = exit_code(srv);
    took = now_s() - t0;
    TEST_CHECK(src == 1 && exit_code(only1) == 0 && took < 3.0 && one_error_line(errf, "rank 2 never authenticated"),
               "tcp: rank 0 missing rank 2 fails after %.1f s (timeout 1 s) with one error line naming it", took);
    /* the secret from a file: accepted with mode 0600 (and a trailing newline), refused when others can read it */
    snprintf(g_secret_file, sizeof(g_secret_file), "%s/secret", g_dir);
    FILE* sf = fopen(g_secret_file, "w");
    fprintf(sf, "%s\n", GOOD_SECRET);
    fclose(sf);
    chmod(g_secret_file, 0600);
    pid_t fc = spawn(tcp_secret_file, 1, NULL);
    comm_bootstrap_tcp("127.0.0.1", g_port + 4, 0, 2, g_blob, sizeof(g_blob), 5.0);
    TEST_CHECK(exit_code(fc) == 0, "tcp: a client with LLMC_BOOTSTRAP_SECRET_FILE (mode 0600) authenticates");
    chmod(g_secret_file, 0644);
    TEST_CHECK(exit_code(spawn(tcp_secret_file, 1, errf)) == 1 && one_error_line(errf, "readable by nobody else"),
               "tcp: a secret file others can read (mode 0644) is refused with one error line");
    remove(g_secret_file);
    /* a FIFO as the secret file: refused at once, never waited on in open() (the child's alarm would end a wait) */
    mkfifo(g_secret_file, 0600);
    TEST_CHECK(exit_code(spawn(secret_from_file, 0, errf)) == 1 && one_error_line(errf, "not a regular file but a FIFO"),
               "a FIFO as LLMC_BOOTSTRAP_SECRET_FILE is refused at once with one error line");
    remove(g_secret_file);
    /* the secret file is taken whole: 1,024 bytes and a newline are the secret, one byte more is refused */
    sf = fopen(g_secret_file, "w");
    for (int i = 0; i < 1024; i++) { fputc(i == 1023 ? 'z' : 'a', sf); }
    fputc('\n', sf);
    fclose(sf);
    chmod(g_secret_file, 0600);
    TEST_CHECK(exit_code(spawn(secret_1024, 0, NULL)) == 0, "a secret file of 1,024 bytes and a newline is read whole");
    sf = fopen(g_secret_file, "a");
    fputc('x', sf);
    fclose(sf);
    TEST_CHECK(exit_code(spawn(secret_from_file, 0, errf)) == 1 && one_error_line(errf, "more than 1024 bytes"),
               "a secret file of 1,026 bytes is refused with one error line, not cut to its first 1,024");
    remove(g_secret_file);
    /* every number of the input in range: the port of tcp:HOST:PORT, the group size from the environment */
    const char* bad_ports[5] = {"abc", "99999", "0", "-1", ""};
    for (int i = 0; i < 5; i++) {
        char spec[64], want[64];
        snprintf(spec, sizeof(spec), "tcp:127.0.0.1:%s", bad_ports[i]);
        snprintf(want, sizeof(want), "port '%s' is not an integer in 1..65535", bad_ports[i]);
        g_spec = spec;
        TEST_CHECK(exit_code(spawn(exchange_spec, 1, errf)) == 1 && one_error_line(errf, want),
                   "--nccl-init %s is refused with one line naming the port", spec);
    }
    TEST_CHECK(exit_code(spawn(init_group, 0, errf)) == 1 && one_error_line(errf, "LLMC_WORLD_SIZE is '2x'"),
               "LLMC_WORLD_SIZE=2x is refused with one line naming the variable (not read as 2)");
    /* a fake rank 0 trickling its challenge (one byte every 0.4 s: 16 s for 40 bytes, each byte well inside a
     * per-read timeout) cannot keep a client past its whole-exchange deadline */
    tcp_options(g_port + 5, 3.0, 1.0);
    pid_t slow = spawn(tcp_slowloris, 0, NULL);
    usleep(200000);
    t0 = now_s();
    int slow_rc = exit_code(spawn(tcp_client, 1, errf));
    took = now_s() - t0;
    kill(slow, SIGKILL);
    exit_code(slow);
    TEST_CHECK(slow_rc == 1 && took < 4.5 && one_error_line(errf, "could not get the id"),
               "tcp: a fake rank 0 sending one byte every 0.4 s: the client gives up after %.1f s (timeout 3 s) with one "
               "error line", took);
    remove(err_wrong); remove(err_dup);
    /* with OpenSSL, naming tcp: to comm_init is no error (a world of one never uses it) */
    TEST_CHECK(exit_code(spawn(tcp_init_accepted, 0, NULL)) == 0, "tcp: accepted by comm_init in a build with OpenSSL");
#else
    /* without OpenSSL (a build that did not find <openssl/hmac.h>): no TCP exchange, one line naming what is missing */
    TEST_CHECK(exit_code(spawn(tcp_exchange_refused, 0, errf)) == 1 && one_error_line(errf, "this build has no OpenSSL"),
               "no OpenSSL: rank 0's tcp: exchange refuses with one error line naming OpenSSL");
    TEST_CHECK(exit_code(spawn(tcp_exchange_refused, 1, errf)) == 1 && one_error_line(errf, "--nccl-init tcp:127.0.0.1:29123"),
               "no OpenSSL: a client's tcp: exchange refuses with one error line naming the flag");
    TEST_CHECK(exit_code(spawn(tcp_init_refused, 0, errf)) == 1 && one_error_line(errf, "install libssl-dev"),
               "no OpenSSL: comm_init refuses tcp: with one error line saying what to install");
#endif
    remove(errf); remove(errd);
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
