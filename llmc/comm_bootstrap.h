/*
 * llmc/comm_bootstrap.h -- starting a process group without MPI, for llmc/comm.h (llmc/README.md, "Collectives and
 * the process grid"):
 *   - rank, group size and rank on the node from the environment (the launcher's variables: LLMC_RANK /
 *     LLMC_WORLD_SIZE / LLMC_LOCAL_RANK set by hand or by a script, Slurm's SLURM_PROCID / SLURM_NTASKS /
 *     SLURM_LOCALID, OpenMPI's OMPI_COMM_WORLD_*, PMI's PMI_RANK / PMI_SIZE);
 *   - sending a blob (NCCL's unique id, 128 bytes) from rank 0 to every rank through a shared filesystem
 *     ("fs:DIR") or TCP ("tcp:HOST:PORT"), the `--nccl-init` methods;
 *   - FNV-1a hashing (config hashes, run ids; Fowler, Noll, Vo, "FNV hash", IETF draft-eastlake-fnv).
 * Host-only C11 (POSIX sockets and files), no MPI and no CUDA. Units: timeouts in seconds, blobs in bytes.
 * Errors: an exchange that fails or times out prints one line "error: NCCL id exchange: ... [file:line]" naming
 * the path or HOST:PORT and what to check, and exits with status 1 (FATAL, llmc/utils.h). A TCP peer that does not
 * prove the per-run secret (HMAC-SHA256 challenge-response, OpenSSL libcrypto: link -lcrypto where
 * comm_bootstrap_tcp is called) is refused; a filesystem id in a directory others can enter is refused. A build
 * without OpenSSL (COMM_BOOT_HAVE_OPENSSL 0) has no TCP exchange: "tcp:" refuses with one line naming what is missing.
 * Header-only: static inline functions, no globals. Included by llmc/comm.h; usable on its own.
 */
#ifndef LLMC_COMM_BOOTSTRAP_H
#define LLMC_COMM_BOOTSTRAP_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netdb.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/time.h>

/* COMM_BOOT_HAVE_OPENSSL: 1 when the TCP exchange's HMAC-SHA256 and random nonces come from OpenSSL's libcrypto; 0
 * when the build has no OpenSSL (the Makefile passes -DLLMC_NO_OPENSSL when it cannot preprocess <openssl/hmac.h>;
 * builds without that flag ask the preprocessor). Without it the TCP exchange is not compiled at all and every
 * entry to it refuses with one line (comm_bootstrap_require_tcp); the filesystem exchange and MPI work as ever. */
#if defined(LLMC_NO_OPENSSL)
#define COMM_BOOT_HAVE_OPENSSL 0
#elif defined(__has_include)
#if __has_include(<openssl/hmac.h>)
#define COMM_BOOT_HAVE_OPENSSL 1
#else
#define COMM_BOOT_HAVE_OPENSSL 0
#endif
#else
#define COMM_BOOT_HAVE_OPENSSL 1
#endif
#if COMM_BOOT_HAVE_OPENSSL
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#endif

#include "utils.h"

/* FNV-1a over n bytes, chained through h (config hashes, run ids); the same hash as fnv1a64 (llmc/utils.h) */
static inline uint64_t comm_hash64(uint64_t h, const void* data, size_t n) { return fnv1a64(h, data, n); }

#define COMM_BOOT_MAGIC 0x6c6c6d63626f6f74ULL /* "llmcboot": first 8 bytes of every id file and TCP message */

/* ---------------------------------------------------------------- the environment */

/* reads an int in [0, 2^24] from the first set environment variable of names (NULL-terminated); -1 if none is set;
 * FATAL naming the variable when its value is not such an integer (parse_int_range, llmc/utils.h) */
static inline int comm_env_int(const char* const* names) {
    for (int i = 0; names[i]; i++) {
        const char* v = getenv(names[i]);
        long long x = 0;
        if (!v || !v[0]) { continue; }
        if (!parse_int_range(v, 0, 1 << 24, &x)) {
            FATAL("process group: environment variable %s is '%s'; expected an integer in 0..%d", names[i], v, 1 << 24);
        }
        return (int)x;
    }
    return -1;
}

/* rank, group size and rank on this node as the launcher's environment states them; -1 for what it does not say */
static inline void comm_env_group(int* rank, int* world, int* local_rank) {
    static const char* const rank_vars[] = {"LLMC_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
    static const char* const world_vars[] = {"LLMC_WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    static const char* const local_vars[] = {"LLMC_LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", NULL};
    *rank = comm_env_int(rank_vars);
    *world = comm_env_int(world_vars);
    *local_rank = comm_env_int(local_vars);
}

/* the run id naming the id file of the filesystem exchange: $LLMC_RUN_ID, else $SLURM_JOB_ID, else "default" */
static inline const char* comm_bootstrap_run_id(void) {
    const char* run_id = getenv("LLMC_RUN_ID");
    if (!run_id || !run_id[0]) { run_id = getenv("SLURM_JOB_ID"); }
    if (!run_id || !run_id[0]) { run_id = "default"; }
    return run_id;
}

/* ---------------------------------------------------------------- shared filesystem */

/* A tag of this launch of the job, the same on every process of one launch and different on the next (a restart,
 * a Slurm requeue, a second srun or mpirun): FNV-1a of the per-launch variables the launchers set, of those present:
 * $LLMC_LAUNCH_ID (for launchers of your own), Slurm's SLURM_JOB_ID, SLURM_STEP_ID and SLURM_RESTART_COUNT (a requeue
 * keeps the job id and raises the count), PMIx's PMIX_NAMESPACE and Open MPI's OMPI_MCA_ess_base_jobid (new for every
 * mpirun). 0 when none is set: then only the age of an id file tells an earlier launch's (see comm_bootstrap_fs). */
static inline uint64_t comm_bootstrap_launch_tag(void) {
    static const char* const vars[] = {"LLMC_LAUNCH_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT",
                                       "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", NULL};
    uint64_t h = 14695981039346656037ULL;
    int any = 0;
    for (int i = 0; vars[i]; i++) {
        const char* v = getenv(vars[i]);
        if (!v || !v[0]) { continue; }
        h = fnv1a64(h, vars[i], strlen(vars[i]) + 1);
        h = fnv1a64(h, v, strlen(v) + 1);
        any = 1;
    }
    return any ? (h ? h : 1) : 0;
}

/* Shared-filesystem exchange of a blob (the NCCL unique id) from rank 0 to every rank.
 * Rank 0 removes any old "DIR/llmc_nccl_id_<run_id>" and writes a new one atomically (tmp + rename) holding
 * magic, rank-0 wall time (s), the launch tag (comm_bootstrap_launch_tag) and the blob. Other ranks poll for it for
 * up to timeout_s seconds and accept only a file of their own launch: the same launch tag, and written at most stale_s
 * seconds before they started waiting (without a launch tag the age is the only guard; a leftover of an earlier
 * launch with the same run id, e.g. a Slurm requeue, is otherwise ignored however young). Returns once the blob is
 * read; on timeout FATAL with the path. Rank 0 should remove the file with comm_bootstrap_fs_cleanup after every rank
 * has joined (after the first collective).
 * The id is a capability (whoever has it can join the communicator), so it is never where anyone else could read it:
 * DIR must be a directory owned by this user that nobody else can enter, read or write (mode 0700;
 * comm_bootstrap_private_dir, FATAL otherwise), the file is created with mode 0600 (never wider, not even for a
 * moment: atomic_file_open_private), and readers accept only a regular file owned by this user that nobody else can
 * read. Why the directory too: a directory others may enter exposes every file in it whose mode is ever wider
 * (the old 0644-then-chmod window let another user read 75 of 100 ids) and tells them the run ids and timing. */
/* FATAL unless dir is a directory owned by the effective user with no group or other permission at all */
static inline void comm_bootstrap_private_dir(const char* dir) {
    struct stat st;
    if (stat(dir, &st) != 0) { FATAL("--nccl-init fs:%s: cannot use the directory: %s", dir, strerror(errno)); }
    if (!S_ISDIR(st.st_mode)) { FATAL("--nccl-init fs:%s: not a directory", dir); }
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        FATAL("--nccl-init fs:%s: the NCCL id must go in a directory only you can enter (owner uid %u, mode %04o; "
              "expected your own with mode 0700: chmod 700 '%s', or mkdir -m 700 another and name it with fs:DIR / "
              "LLMC_NCCL_ID_DIR)", dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), dir);
    }
}
static inline void comm_bootstrap_fs_path(char* out, size_t cap, const char* dir, const char* run_id) {
    snprintf(out, cap, "%s/llmc_nccl_id_%s", dir, run_id);
}
static inline void comm_bootstrap_fs(const char* dir, const char* run_id, int rank, void* blob, size_t n,
                                     double timeout_s, double stale_s) {
    char path[1024];
    comm_bootstrap_fs_path(path, sizeof(path), dir, run_id);
    uint64_t magic = COMM_BOOT_MAGIC, tag = comm_bootstrap_launch_tag();
    comm_bootstrap_private_dir(dir);
    if (rank == 0) {
        remove(path);
        int64_t now = (int64_t)time(NULL);
        AtomicFile af;
        atomic_file_open_private(&af, path); /* mode 0600 from its creation on */
        atomic_file_write(&af, &magic, sizeof(magic), 1);
        atomic_file_write(&af, &now, sizeof(now), 1);
        atomic_file_write(&af, &tag, sizeof(tag), 1);
        atomic_file_write(&af, blob, 1, n);
        atomic_file_commit(&af);
        return;
    }
    time_t start = time(NULL);
    for (;;) {
        char why[128];
        FILE* f = fopen_regular(path, "rb", why, sizeof(why)); /* a FIFO planted there is skipped, never waited on */
        struct stat st;
        if (f && (fstat(fileno(f), &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0)) {
            fclose(f); /* not written by this user's rank 0 (or readable by others): never trusted */
            f = NULL;
        }
        if (f) {
            uint64_t m = 0, t = 0;
            int64_t written = 0;
            int ok = fread(&m, sizeof(m), 1, f) == 1 && fread(&written, sizeof(written), 1, f) == 1 &&
                     fread(&t, sizeof(t), 1, f) == 1 && fread(blob, 1, n, f) == n && m == COMM_BOOT_MAGIC;
            fclose(f);
            if (ok && t == tag && (double)written >= (double)start - stale_s) { return; }
        }
        if (difftime(time(NULL), start) > timeout_s) {
            FATAL("NCCL id exchange: no id file '%s' of this launch from rank 0 within %.0f s (a file of an earlier "
                  "launch or older than %.0f s is ignored); check that every rank sees the same shared directory and "
                  "run id", path, timeout_s, stale_s);
        }
        usleep(50000);
    }
}
static inline void comm_bootstrap_fs_cleanup(const char* dir, const char* run_id) {
    char path[1024];
    comm_bootstrap_fs_path(path, sizeof(path), dir, run_id);
    remove(path);
}

/* ---------------------------------------------------------------- TCP */

/* writes (writing = 1) or reads exactly n bytes of p before `deadline` (seconds on wall_seconds' monotonic clock,
 * llmc/utils.h): poll for the time left, then a non-blocking send / recv of what is ready, so a peer that trickles
 * one byte at a time cannot stretch the exchange past the deadline (a per-call timeout would restart with every
 * byte). 0 on success, -1 on error, end of stream or the deadline. */
static inline int comm_io_all(int fd, void* p, size_t n, int writing, double deadline) {
    char* b = (char*)p;
    while (n > 0) {
        double left = deadline - wall_seconds();
        if (left <= 0) { return -1; }
        struct pollfd q;
        q.fd = fd; q.events = writing ? POLLOUT : POLLIN; q.revents = 0;
        int pr = poll(&q, 1, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno == EINTR) { continue; }
        if (pr < 0) { return -1; }
        if (pr == 0) { continue; } /* the deadline check above ends it */
        ssize_t k = writing ? send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, b, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) { continue; }
        if (k <= 0) { return -1; }
        b += k; n -= (size_t)k;
    }
    return 0;
}
static inline int comm_write_all(int fd, const void* p, size_t n, double deadline) {
    return comm_io_all(fd, (void*)p, n, 1, deadline);
}
static inline int comm_read_all(int fd, void* p, size_t n, double deadline) { return comm_io_all(fd, p, n, 0, deadline); }

/* connects fd to addr before `deadline` (a non-blocking connect, then poll for the time left); 0 or -1 */
static inline int comm_connect_by(int fd, const struct sockaddr* addr, socklen_t len, double deadline) {
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) { return -1; }
    if (connect(fd, addr, len) == 0) { return 0; }
    if (errno != EINPROGRESS && errno != EINTR) { return -1; }
    for (;;) {
        double left = deadline - wall_seconds();
        if (left <= 0) { return -1; }
        struct pollfd q;
        q.fd = fd; q.events = POLLOUT; q.revents = 0;
        int pr = poll(&q, 1, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno == EINTR) { continue; }
        if (pr < 0) { return -1; }
        if (pr == 0) { continue; }
        int err = 0;
        socklen_t el = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) { return -1; }
        return 0;
    }
}

/* The TCP exchange is authenticated by a per-run secret that every process of the job knows and nobody else
 * does (the launch scripts generate one; llmc/README.md, "The process bootstrap"):
 *   $LLMC_BOOTSTRAP_SECRET       the secret itself (at least 16 characters), or
 *   $LLMC_BOOTSTRAP_SECRET_FILE  a regular file owned by this user and readable by nobody else (mode 0600 or
 *                                0400) holding it (16..1024 bytes; one trailing newline is dropped).
 * Reads it into out (cap >= 1024 bytes) and returns its length. No secret, a short or a long one (more than cap
 * bytes: refused, never cut, so two secrets that share their first cap bytes never both authenticate), or a file
 * that others can read is FATAL, naming the variable or file and what is expected. */
#define COMM_BOOT_SECRET_MIN 16
#define COMM_BOOT_SECRET_MAX 1024
static inline size_t comm_bootstrap_secret(unsigned char* out, size_t cap) {
    const char* v = getenv("LLMC_BOOTSTRAP_SECRET");
    const char* file = getenv("LLMC_BOOTSTRAP_SECRET_FILE");
    size_t len = 0;
    if (v && v[0]) {
        len = strlen(v);
        if (len > cap) { FATAL("LLMC_BOOTSTRAP_SECRET: %zu characters, at most %zu", len, cap); }
        memcpy(out, v, len);
    } else if (file && file[0]) {
        char why[128];
        int fd = open_regular(file, O_RDONLY | O_NOFOLLOW, 0, why, sizeof(why)); /* a FIFO is refused, never waited on */
        struct stat st;
        if (fd < 0) { FATAL("LLMC_BOOTSTRAP_SECRET_FILE '%s': %s", file, why); }
        if (fstat(fd, &st) != 0) { FATAL("LLMC_BOOTSTRAP_SECRET_FILE '%s': %s", file, strerror(errno)); }
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
            close(fd);
            FATAL("LLMC_BOOTSTRAP_SECRET_FILE '%s': must be a regular file owned by you and readable by nobody else "
                  "(mode %04o; expected 0600: chmod 600 '%s')", file, (unsigned)(st.st_mode & 07777), file);
        }
        /* the whole file: up to cap bytes into out, anything beyond into extra; one byte more than the secret and a
         * newline is refused, never cut */
        unsigned char extra[2];
        size_t more = 0;
        for (;;) {
            unsigned char* dst = len < cap ? out + len : extra + more;
            size_t room = len < cap ? cap - len : sizeof(extra) - more;
            if (room == 0) { break; }
            ssize_t k = read(fd, dst, room);
            if (k < 0 && errno == EINTR) { continue; }
            if (k < 0) { close(fd); FATAL("LLMC_BOOTSTRAP_SECRET_FILE '%s': %s", file, strerror(errno)); }
            if (k == 0) { break; }
            if (len < cap) { len += (size_t)k; } else { more += (size_t)k; }
        }
        close(fd);
        if (more == 1 && extra[0] == '\n') { more = 0; }                         /* cap bytes and a newline */
        else if (more == 0 && len > 0 && out[len - 1] == '\n') { len--; }        /* one trailing newline dropped */
        if (more > 0) {
            FATAL("LLMC_BOOTSTRAP_SECRET_FILE '%s': more than %zu bytes; a secret has at most %zu (a longer one is "
                  "refused, not cut)", file, cap, cap);
        }
    } else {
        FATAL("NCCL id exchange over TCP needs a per-run secret: set LLMC_BOOTSTRAP_SECRET (the same on every rank, "
              "e.g. export LLMC_BOOTSTRAP_SECRET=$(openssl rand -hex 32)) or LLMC_BOOTSTRAP_SECRET_FILE (a mode-0600 file)");
    }
    if (len < COMM_BOOT_SECRET_MIN) {
        FATAL("the bootstrap secret (%s) has %zu bytes; at least %d expected (e.g. openssl rand -hex 32)",
              v && v[0] ? "LLMC_BOOTSTRAP_SECRET" : "LLMC_BOOTSTRAP_SECRET_FILE", len, COMM_BOOT_SECRET_MIN);
    }
    return len;
}

/* Parameters of the TCP exchange. host:port is rank 0's address as the other ranks reach it; rank 0 binds to
 * bind_host (NULL or "": to host's address, so it listens on the interface that routes to the job, not on all;
 * $LLMC_BOOTSTRAP_BIND sets it, e.g. 0.0.0.0 behind NAT). timeout_s bounds the whole exchange, io_timeout_s each
 * connection's whole conversation, not each read (a client that has not answered within it is dropped by rank 0;
 * rank 0 not done within it makes a client reconnect). */
typedef struct {
    const char* host;
    int port;
    const char* bind_host;
    const unsigned char* secret;
    size_t secret_len;
    double timeout_s;
    double io_timeout_s;
} CommBootTcp;

#define COMM_BOOT_NONCE 32
#define COMM_BOOT_MAC 32
#define COMM_BOOT_HELLO (8 + COMM_BOOT_NONCE)                    /* rank 0 -> client: magic, nonce_s */
#define COMM_BOOT_ANSWER (8 + 4 + COMM_BOOT_NONCE + COMM_BOOT_MAC) /* client: magic, rank, nonce_c, mac */
#define COMM_BOOT_MAX_BLOB 4096
enum { COMM_BOOT_OK = 0, COMM_BOOT_BAD_MAC = 1, COMM_BOOT_DUP_RANK = 2, COMM_BOOT_BAD_RANK = 3 };

/* Refuses, with one line for the job (FATAL_ALL), a "tcp:..." method in a build without OpenSSL: the TCP exchange
 * is offered only authenticated. No-op for other methods and in builds with OpenSSL. Called by comm_init (before
 * the device starts) and by comm_bootstrap_tcp. */
static inline void comm_bootstrap_require_tcp(const char* method) {
#if !COMM_BOOT_HAVE_OPENSSL
    if (method && strncmp(method, "tcp:", 4) == 0) {
        FATAL_ALL("--nccl-init %s: this build has no OpenSSL (openssl/hmac.h not found, or USE_OPENSSL=0, when "
                  "built), which the authenticated TCP exchange needs; install libssl-dev (or openssl-devel) and "
                  "rebuild, or use --nccl-init fs:DIR (a shared directory) or an MPI build", method);
    }
#else
    (void)method;
#endif
}

#if COMM_BOOT_HAVE_OPENSSL
/* HMAC-SHA256 (RFC 2104, FIPS 180-4; OpenSSL's libcrypto) of label || nonce_s || nonce_c || rank (4 bytes, little
 * endian) || counter (4 bytes, little endian) under the secret: the client's proof (label "llmc-client"), rank 0's
 * proof ("llmc-server") and the key stream that masks the blob ("llmc-blob", counter = block index). */
static inline void comm_boot_mac(const CommBootTcp* o, const char* label, const unsigned char* nonce_s,
                                 const unsigned char* nonce_c, int32_t rank, uint32_t counter,
                                 unsigned char out[COMM_BOOT_MAC]) {
    unsigned char msg[32 + 2 * COMM_BOOT_NONCE + 8];
    size_t l = strlen(label);
    memcpy(msg, label, l);
    memcpy(msg + l, nonce_s, COMM_BOOT_NONCE);
    memcpy(msg + l + COMM_BOOT_NONCE, nonce_c, COMM_BOOT_NONCE);
    unsigned char* t = msg + l + 2 * COMM_BOOT_NONCE;
    for (int i = 0; i < 4; i++) {
        t[i] = (unsigned char)((uint32_t)rank >> (8 * i));
        t[4 + i] = (unsigned char)(counter >> (8 * i));
    }
    unsigned int outlen = 0;
    if (!HMAC(EVP_sha256(), o->secret, (int)o->secret_len, msg, l + 2 * COMM_BOOT_NONCE + 8, out, &outlen)) {
        FATAL("NCCL id exchange: HMAC-SHA256 failed (OpenSSL)");
    }
}
/* XORs blob(n) with the key stream of this connection (masking and unmasking are the same operation) */
static inline void comm_boot_mask(const CommBootTcp* o, const unsigned char* nonce_s, const unsigned char* nonce_c,
                                  int32_t rank, unsigned char* blob, size_t n) {
    unsigned char ks[COMM_BOOT_MAC];
    for (size_t i = 0; i < n; i++) {
        if (i % COMM_BOOT_MAC == 0) { comm_boot_mac(o, "llmc-blob", nonce_s, nonce_c, rank, (uint32_t)(i / COMM_BOOT_MAC), ks); }
        blob[i] ^= ks[i % COMM_BOOT_MAC];
    }
}
static inline void comm_boot_random(unsigned char* p, size_t n) {
    if (RAND_bytes(p, (int)n) != 1) { FATAL("NCCL id exchange: no random bytes from OpenSSL (RAND_bytes)"); }
}
static inline double comm_boot_now(void) { return wall_seconds(); }

/* one connection rank 0 is talking to: its challenge, what it has sent so far and when it is dropped */
typedef struct {
    int fd;
    double deadline;
    size_t got;
    unsigned char nonce_s[COMM_BOOT_NONCE];
    unsigned char answer[COMM_BOOT_ANSWER];
} CommBootConn;
#define COMM_BOOT_MAX_CONN 512

/* rank 0's side for one complete answer: checks the magic, the rank and the client's proof, and sends a status
 * (4 bytes) and, when it is COMM_BOOT_OK, rank 0's proof and the masked blob. Returns the rank served or -1. */
static inline int comm_boot_serve(const CommBootTcp* o, CommBootConn* c, int world, unsigned char* served,
                                  const void* blob, size_t n) {
    uint64_t m;
    int32_t rank = 0;
    memcpy(&m, c->answer, 8);
    for (int i = 0; i < 4; i++) { rank |= (int32_t)((uint32_t)c->answer[8 + i] << (8 * i)); }
    const unsigned char* nonce_c = c->answer + 12;
    const unsigned char* mac = c->answer + 12 + COMM_BOOT_NONCE;
    if (m != COMM_BOOT_MAGIC) { return -1; } /* not our protocol: dropped without an answer */
    unsigned char want[COMM_BOOT_MAC];
    comm_boot_mac(o, "llmc-client", c->nonce_s, nonce_c, rank, 0, want);
    int32_t status = CRYPTO_memcmp(want, mac, COMM_BOOT_MAC) != 0 ? COMM_BOOT_BAD_MAC
                     : rank < 1 || rank >= world                 ? COMM_BOOT_BAD_RANK
                     : served[rank]                              ? COMM_BOOT_DUP_RANK
                                                                 : COMM_BOOT_OK;
    unsigned char reply[4 + COMM_BOOT_MAC + COMM_BOOT_MAX_BLOB];
    size_t len = 4;
    for (int i = 0; i < 4; i++) { reply[i] = (unsigned char)((uint32_t)status >> (8 * i)); }
    if (status == COMM_BOOT_OK) {
        comm_boot_mac(o, "llmc-server", c->nonce_s, nonce_c, rank, 0, reply + 4);
        memcpy(reply + 4 + COMM_BOOT_MAC, blob, n);
        comm_boot_mask(o, c->nonce_s, nonce_c, rank, reply + 4 + COMM_BOOT_MAC, n);
        len += COMM_BOOT_MAC + n;
    }
    /* the reply (at most 4 KiB, normally one send into an empty socket buffer) within io_timeout_s, whatever the
     * client reads at */
    if (comm_write_all(c->fd, reply, len, comm_boot_now() + o->io_timeout_s) != 0 || status != COMM_BOOT_OK) { return -1; }
    return rank;
}

/* Rank 0: a non-blocking socket listening on bind_host (or host):port; returns it and sets *bh to the address.
 * FATAL with one line when the address cannot be resolved or the port bound. */
static inline int comm_boot_listen(const CommBootTcp* o, const char** bh_out) {
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", o->port);
    const char* bh = o->bind_host && o->bind_host[0] ? o->bind_host : o->host;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int gai = getaddrinfo(bh, portstr, &hints, &res);
    if (gai != 0 || !res) { FATAL("NCCL id exchange: cannot resolve '%s' to bind to: %s", bh, gai_strerror(gai)); }
    int srv = socket(AF_INET, SOCK_STREAM, 0);
    if (srv < 0) { freeaddrinfo(res); FATAL("NCCL id exchange: socket(): %s", strerror(errno)); }
    int yes = 1;
    setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(srv, res->ai_addr, res->ai_addrlen) != 0) {
        int err = errno;
        freeaddrinfo(res);
        FATAL("NCCL id exchange: cannot listen on %s:%d: %s (tcp:HOST:PORT must name this host's address and a free "
              "port; LLMC_BOOTSTRAP_BIND=ADDR binds elsewhere)", bh, o->port, strerror(err));
    }
    freeaddrinfo(res);
    if (listen(srv, 256) != 0) { FATAL("NCCL id exchange: listen(): %s", strerror(errno)); }
    fcntl(srv, F_SETFL, fcntl(srv, F_GETFL, 0) | O_NONBLOCK);
    *bh_out = bh;
    return srv;
}

/* Rank 0: accepts every pending connection on the listening socket srv into conns (*nconn of COMM_BOOT_MAX_CONN;
 * when full, the oldest, earliest deadline, is dropped) and sends each the hello: the magic and a fresh challenge */
static inline void comm_boot_accept(const CommBootTcp* o, int srv, CommBootConn* conns, int* nconn_io) {
    int nconn = *nconn_io;
    for (;;) {
        int fd = accept(srv, NULL, NULL);
        if (fd < 0) { break; }
        if (nconn == COMM_BOOT_MAX_CONN) { /* full: the oldest (earliest deadline) goes */
            int old = 0;
            for (int i = 1; i < nconn; i++) { if (conns[i].deadline < conns[old].deadline) { old = i; } }
            close(conns[old].fd);
            conns[old] = conns[--nconn];
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
        CommBootConn* c = &conns[nconn];
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->deadline = comm_boot_now() + o->io_timeout_s;
        comm_boot_random(c->nonce_s, COMM_BOOT_NONCE);
        unsigned char hello[COMM_BOOT_HELLO];
        uint64_t magic = COMM_BOOT_MAGIC;
        memcpy(hello, &magic, 8);
        memcpy(hello + 8, c->nonce_s, COMM_BOOT_NONCE);
        /* 40 bytes into a fresh socket's empty buffer: all of it or the connection is broken */
        if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) { close(fd); continue; }
        nconn++;
    }
    *nconn_io = nconn;
}

/* Rank 0: listens on bind_host:port and serves ranks 1..world-1 once each, many connections at a time (poll), each
 * dropped after io_timeout_s; an idle, malformed or unauthenticated connection costs nothing but its own slot, and
 * with more than COMM_BOOT_MAX_CONN open the oldest is dropped. FATAL when the port cannot be bound or not every
 * rank was served within timeout_s (naming the first missing rank). */
static inline void comm_bootstrap_tcp_serve(const CommBootTcp* o, int world, const void* blob, size_t n) {
    const char* bh = NULL;
    int srv = comm_boot_listen(o, &bh);
    unsigned char* served = (unsigned char*)calloc((size_t)world, 1);
    CommBootConn* conns = (CommBootConn*)calloc(COMM_BOOT_MAX_CONN, sizeof(CommBootConn));
    struct pollfd* pfd = (struct pollfd*)calloc(COMM_BOOT_MAX_CONN + 1, sizeof(struct pollfd));
    if (!served || !conns || !pfd) { FATAL("NCCL id exchange: out of memory"); }
    int nconn = 0, nserved = 0;
    double end = comm_boot_now() + o->timeout_s;
    while (nserved < world - 1) {
        double now = comm_boot_now();
        if (now > end) {
            int missing = 1;
            while (missing < world && served[missing]) { missing++; }
            FATAL("NCCL id exchange: rank 0 at %s:%d served %d of %d ranks within %.0f s (rank %d never "
                  "authenticated: check that it runs, reaches this address and has the same LLMC_BOOTSTRAP_SECRET)",
                  bh, o->port, nserved, world - 1, o->timeout_s, missing);
        }
        /* drop connections past their deadline */
        for (int i = 0; i < nconn;) {
            if (conns[i].deadline < now) { close(conns[i].fd); conns[i] = conns[--nconn]; } else { i++; }
        }
        double wake = end;
        pfd[0].fd = srv; pfd[0].events = POLLIN; pfd[0].revents = 0;
        for (int i = 0; i < nconn; i++) {
            pfd[i + 1].fd = conns[i].fd; pfd[i + 1].events = POLLIN; pfd[i + 1].revents = 0;
            if (conns[i].deadline < wake) { wake = conns[i].deadline; }
        }
        int ms = (int)((wake - now) * 1000.0) + 1;
        int pr = poll(pfd, (nfds_t)(nconn + 1), ms < 1 ? 1 : ms);
        if (pr < 0 && errno != EINTR) { FATAL("NCCL id exchange: poll(): %s", strerror(errno)); }
        if (pr <= 0) { continue; }
        /* answers first (indices refer to this poll's array; removal swaps from the end, so walk backwards) */
        for (int i = nconn - 1; i >= 0; i--) {
            if (!(pfd[i + 1].revents & (POLLIN | POLLERR | POLLHUP))) { continue; }
            CommBootConn* c = &conns[i];
            ssize_t k = read(c->fd, c->answer + c->got, COMM_BOOT_ANSWER - c->got);
            if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) { continue; }
            int done = k <= 0;
            if (k > 0) {
                c->got += (size_t)k;
                if (c->got == COMM_BOOT_ANSWER) {
                    int r = comm_boot_serve(o, c, world, served, blob, n);
                    if (r > 0) { served[r] = 1; nserved++; }
                    done = 1;
                }
            }
            if (done) { close(c->fd); conns[i] = conns[--nconn]; }
        }
        /* new connections: each gets a fresh challenge */
        if (pfd[0].revents & POLLIN) { comm_boot_accept(o, srv, conns, &nconn); }
    }
    for (int i = 0; i < nconn; i++) { close(conns[i].fd); }
    close(srv);
    free(served); free(conns); free(pfd);
}

/* Rank `rank` (> 0): connects to host:port (retrying for up to timeout_s: rank 0 may start later, or drop this
 * connection when it is flooded), answers rank 0's challenge with its rank and HMAC proof, checks rank 0's proof
 * and unmasks the blob(n). Every deadline is a whole-exchange deadline: each connection's whole conversation
 * (connect, challenge, answer, status, proof, blob) must end within io_timeout_s and all of them within timeout_s,
 * however slowly a peer trickles its bytes. FATAL with one line when rank 0 rejects the secret or the rank (another
 * process already claimed it), when rank 0 cannot prove the secret, or on timeout. */
static inline void comm_bootstrap_tcp_join(const CommBootTcp* o, int rank, void* blob, size_t n) {
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", o->port);
    double end = comm_boot_now() + o->timeout_s;
    uint64_t magic = COMM_BOOT_MAGIC;
    for (;;) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(o->host, portstr, &hints, &res) == 0 && res) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            double by = comm_boot_now() + o->io_timeout_s; /* this connection's whole conversation */
            if (by > end) { by = end; }
            if (fd >= 0 && comm_connect_by(fd, res->ai_addr, res->ai_addrlen, by) == 0) {
                unsigned char hello[COMM_BOOT_HELLO], answer[COMM_BOOT_ANSWER], st[4], proof[COMM_BOOT_MAC];
                uint64_t m = 0;
                int ok = comm_read_all(fd, hello, sizeof(hello), by) == 0;
                memcpy(&m, hello, 8);
                if (ok && m == COMM_BOOT_MAGIC) {
                    const unsigned char* nonce_s = hello + 8;
                    unsigned char* nonce_c = answer + 12;
                    memcpy(answer, &magic, 8);
                    for (int i = 0; i < 4; i++) { answer[8 + i] = (unsigned char)((uint32_t)rank >> (8 * i)); }
                    comm_boot_random(nonce_c, COMM_BOOT_NONCE);
                    comm_boot_mac(o, "llmc-client", nonce_s, nonce_c, rank, 0, answer + 12 + COMM_BOOT_NONCE);
                    if (comm_write_all(fd, answer, sizeof(answer), by) == 0 && comm_read_all(fd, st, 4, by) == 0) {
                        int32_t status = (int32_t)((uint32_t)st[0] | ((uint32_t)st[1] << 8) | ((uint32_t)st[2] << 16) |
                                                   ((uint32_t)st[3] << 24));
                        if (status == COMM_BOOT_BAD_MAC) {
                            FATAL("NCCL id exchange: rank 0 at %s:%d rejected rank %d's proof: its bootstrap secret "
                                  "differs (every rank needs the same LLMC_BOOTSTRAP_SECRET)", o->host, o->port, rank);
                        }
                        if (status == COMM_BOOT_DUP_RANK) {
                            FATAL("NCCL id exchange: rank 0 at %s:%d already served rank %d (two processes claim that "
                                  "rank: check LLMC_RANK / the launcher)", o->host, o->port, rank);
                        }
                        if (status == COMM_BOOT_BAD_RANK) {
                            FATAL("NCCL id exchange: rank 0 at %s:%d has no rank %d in its group (check LLMC_WORLD_SIZE)",
                                  o->host, o->port, rank);
                        }
                        if (status == COMM_BOOT_OK && comm_read_all(fd, proof, sizeof(proof), by) == 0 &&
                            comm_read_all(fd, blob, n, by) == 0) {
                            unsigned char want[COMM_BOOT_MAC];
                            comm_boot_mac(o, "llmc-server", nonce_s, nonce_c, rank, 0, want);
                            if (CRYPTO_memcmp(want, proof, COMM_BOOT_MAC) != 0) {
                                FATAL("NCCL id exchange: the process at %s:%d does not know the bootstrap secret (not "
                                      "this job's rank 0, or a different LLMC_BOOTSTRAP_SECRET)", o->host, o->port);
                            }
                            comm_boot_mask(o, nonce_s, nonce_c, rank, (unsigned char*)blob, n);
                            close(fd);
                            freeaddrinfo(res);
                            return;
                        }
                    }
                }
            }
            if (fd >= 0) { close(fd); }
            freeaddrinfo(res);
        }
        double now = comm_boot_now();
        if (now >= end) {
            FATAL("NCCL id exchange: could not get the id from rank 0 at %s:%d within %.0f s (is rank 0 running and "
                  "is the address reachable?)", o->host, o->port, o->timeout_s);
        }
        usleep(now + 0.1 < end ? 100000 : (useconds_t)((end - now) * 1e6) + 1);
    }
}

/* TCP exchange of blob(n <= COMM_BOOT_MAX_BLOB bytes) from rank 0 to the world-1 other ranks with the secret of
 * comm_bootstrap_secret, rank 0 bound per $LLMC_BOOTSTRAP_BIND (default: host) and per-connection timeouts of
 * min(10 s, timeout_s). See comm_bootstrap_tcp_serve / _join for the protocol and its errors. */
static inline void comm_bootstrap_tcp(const char* host, int port, int rank, int world, void* blob, size_t n,
                                      double timeout_s) {
    if (n > COMM_BOOT_MAX_BLOB) { FATAL("NCCL id exchange: blob of %zu bytes, at most %d", n, COMM_BOOT_MAX_BLOB); }
    unsigned char secret[COMM_BOOT_SECRET_MAX];
    CommBootTcp o;
    memset(&o, 0, sizeof(o));
    o.host = host;
    o.port = port;
    o.bind_host = getenv("LLMC_BOOTSTRAP_BIND");
    o.secret_len = comm_bootstrap_secret(secret, sizeof(secret));
    o.secret = secret;
    o.timeout_s = timeout_s;
    o.io_timeout_s = timeout_s < 10.0 ? timeout_s : 10.0;
    if (rank == 0) { comm_bootstrap_tcp_serve(&o, world, blob, n); } else { comm_bootstrap_tcp_join(&o, rank, blob, n); }
    OPENSSL_cleanse(secret, sizeof(secret));
}
#else
/* no OpenSSL: no TCP exchange; refuses with one line */
static inline void comm_bootstrap_tcp(const char* host, int port, int rank, int world, void* blob, size_t n,
                                      double timeout_s) {
    char spec[300];
    snprintf(spec, sizeof(spec), "tcp:%s:%d", host, port);
    (void)rank; (void)world; (void)blob; (void)n; (void)timeout_s;
    comm_bootstrap_require_tcp(spec);
}
#endif /* COMM_BOOT_HAVE_OPENSSL */

/* ---------------------------------------------------------------- the --nccl-init methods */

/* Sends blob(n) from rank 0 to every rank by `method` (world > 1):
 *   "" or "auto"     the filesystem exchange in $LLMC_NCCL_ID_DIR, or "." if unset;
 *   "fs:DIR"         the filesystem exchange in DIR (comm_bootstrap_fs: DIR mode 0700, ids of another launch or older
 *                    than 120 s ignored);
 *   "tcp:HOST:PORT"  the TCP exchange (comm_bootstrap_tcp; needs LLMC_BOOTSTRAP_SECRET or _FILE).
 * The id file is named after run_id (comm_bootstrap_run_id). fsdir(cap) receives the directory used by a
 * filesystem exchange ("" for TCP), which rank 0 passes to comm_bootstrap_fs_cleanup once every rank has joined.
 * An unknown method or a malformed tcp: spec is FATAL with the accepted forms. */
static inline void comm_bootstrap_exchange(const char* method, const char* run_id, int rank, int world, void* blob,
                                           size_t n, double timeout_s, char* fsdir, size_t cap) {
    const char* m = method && method[0] ? method : "auto";
    fsdir[0] = '\0';
    if (strcmp(m, "auto") == 0) {
        const char* d = getenv("LLMC_NCCL_ID_DIR");
        snprintf(fsdir, cap, "%s", d && d[0] ? d : ".");
    } else if (strncmp(m, "fs:", 3) == 0) {
        snprintf(fsdir, cap, "%s", m + 3);
    } else if (strncmp(m, "tcp:", 4) == 0) {
        char host[256];
        const char* colon = strrchr(m + 4, ':');
        long long port = 0;
        if (!colon || colon == m + 4) { FATAL("--nccl-init '%s': expected tcp:HOST:PORT", m); }
        if ((size_t)(colon - (m + 4)) >= sizeof(host)) { FATAL("--nccl-init '%s': the host name is too long", m); }
        if (!parse_int_range(colon + 1, 1, 65535, &port)) {
            FATAL("--nccl-init '%s': port '%s' is not an integer in 1..65535; expected tcp:HOST:PORT", m, colon + 1);
        }
        snprintf(host, sizeof(host), "%.*s", (int)(colon - (m + 4)), m + 4);
        comm_bootstrap_tcp(host, (int)port, rank, world, blob, n, timeout_s);
    } else {
        FATAL("--nccl-init '%s': expected auto, fs:DIR or tcp:HOST:PORT", m);
    }
    if (fsdir[0]) { comm_bootstrap_fs(fsdir, run_id, rank, blob, n, timeout_s, 120.0); }
}

#endif /* LLMC_COMM_BOOTSTRAP_H */
