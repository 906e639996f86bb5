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
 * the path or HOST:PORT and what to check, and exits with status 1 (FATAL, llmc/utils.h). A peer that sends
 * something else than the protocol's magic number is ignored (TCP) or its file rejected (filesystem).
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

#include "utils.h"

/* FNV-1a over n bytes, chained through h (config hashes, run ids); the same hash as fnv1a64 (llmc/utils.h) */
static inline uint64_t comm_hash64(uint64_t h, const void* data, size_t n) { return fnv1a64(h, data, n); }

#define COMM_BOOT_MAGIC 0x6c6c6d63626f6f74ULL /* "llmcboot": first 8 bytes of every id file and TCP message */

/* ---------------------------------------------------------------- the environment */

/* reads an int from the first set environment variable of names (NULL-terminated); -1 if none */
static inline int comm_env_int(const char* const* names) {
    for (int i = 0; names[i]; i++) {
        const char* v = getenv(names[i]);
        if (v && v[0]) { return atoi(v); }
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

/* Shared-filesystem exchange of a blob (the NCCL unique id) from rank 0 to every rank.
 * Rank 0 removes any old "DIR/llmc_nccl_id_<run_id>" and writes a new one atomically (tmp + rename) holding
 * magic, rank-0 wall time (s) and the blob. Other ranks poll for it for up to timeout_s seconds and reject a
 * file written more than stale_s seconds before they started waiting (a leftover of an earlier run with the
 * same run id). Returns once the blob is read; on timeout FATAL with the path. Rank 0 should remove the file with
 * comm_bootstrap_fs_cleanup after every rank has joined (after the first collective). */
static inline void comm_bootstrap_fs_path(char* out, size_t cap, const char* dir, const char* run_id) {
    snprintf(out, cap, "%s/llmc_nccl_id_%s", dir, run_id);
}
static inline void comm_bootstrap_fs(const char* dir, const char* run_id, int rank, void* blob, size_t n,
                                     double timeout_s, double stale_s) {
    char path[1024];
    comm_bootstrap_fs_path(path, sizeof(path), dir, run_id);
    uint64_t magic = COMM_BOOT_MAGIC;
    if (rank == 0) {
        remove(path);
        int64_t now = (int64_t)time(NULL);
        AtomicFile af;
        atomic_file_open(&af, path);
        atomic_file_write(&af, &magic, sizeof(magic), 1);
        atomic_file_write(&af, &now, sizeof(now), 1);
        atomic_file_write(&af, blob, 1, n);
        atomic_file_commit(&af);
        return;
    }
    time_t start = time(NULL);
    for (;;) {
        FILE* f = fopen(path, "rb");
        if (f) {
            uint64_t m = 0; int64_t written = 0;
            int ok = fread(&m, sizeof(m), 1, f) == 1 && fread(&written, sizeof(written), 1, f) == 1 &&
                     fread(blob, 1, n, f) == n && m == COMM_BOOT_MAGIC;
            fclose(f);
            if (ok && (double)written >= (double)start - stale_s) { return; }
        }
        if (difftime(time(NULL), start) > timeout_s) {
            FATAL("NCCL id exchange: no fresh id file '%s' from rank 0 within %.0f s (an older file is ignored as "
                  "stale); check that every rank sees the same shared directory and run id", path, timeout_s);
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

/* writes (writing = 1) or reads exactly n bytes of p (retrying on EINTR); 0 on success, -1 on error or end of
 * stream */
static inline int comm_io_all(int fd, void* p, size_t n, int writing) {
    char* b = (char*)p;
    while (n > 0) {
        ssize_t k = writing ? write(fd, b, n) : read(fd, b, n);
        if (k < 0 && errno == EINTR) { continue; }
        if (k <= 0) { return -1; }
        b += k; n -= (size_t)k;
    }
    return 0;
}
static inline int comm_write_all(int fd, const void* p, size_t n) { return comm_io_all(fd, (void*)p, n, 1); }
static inline int comm_read_all(int fd, void* p, size_t n) { return comm_io_all(fd, p, n, 0); }

/* TCP exchange of a blob from rank 0 to the world-1 other ranks. Rank 0 listens on `port` (all interfaces)
 * and answers world-1 connections with magic + blob; the others connect to host:port, retrying for up to
 * timeout_s seconds (rank 0 may start later). A connection whose first 8 bytes are not the magic is
 * rejected. FATAL with host:port on timeout or socket errors. */
static inline void comm_bootstrap_tcp(const char* host, int port, int rank, int world, void* blob, size_t n,
                                      double timeout_s) {
    uint64_t magic = COMM_BOOT_MAGIC;
    if (rank == 0) {
        int srv = socket(AF_INET, SOCK_STREAM, 0);
        if (srv < 0) { FATAL("NCCL id exchange: socket(): %s", strerror(errno)); }
        int yes = 1;
        setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        if (bind(srv, (struct sockaddr*)&a, sizeof(a)) != 0) {
            FATAL("NCCL id exchange: cannot listen on TCP port %d: %s (choose another with tcp:HOST:PORT)", port,
                  strerror(errno));
        }
        if (listen(srv, 128) != 0) { FATAL("NCCL id exchange: listen(): %s", strerror(errno)); }
        for (int served = 0; served < world - 1;) {
            int fd = accept(srv, NULL, NULL);
            if (fd < 0) {
                if (errno == EINTR) { continue; }
                FATAL("NCCL id exchange: accept(): %s", strerror(errno));
            }
            uint64_t hello = 0;
            if (comm_read_all(fd, &hello, sizeof(hello)) == 0 && hello == COMM_BOOT_MAGIC &&
                comm_write_all(fd, &magic, sizeof(magic)) == 0 && comm_write_all(fd, blob, n) == 0) {
                served++;
            }
            close(fd);
        }
        close(srv);
        return;
    }
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    time_t start = time(NULL);
    for (;;) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, portstr, &hints, &res) == 0 && res) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
                uint64_t m = 0;
                int ok = comm_write_all(fd, &magic, sizeof(magic)) == 0 && comm_read_all(fd, &m, sizeof(m)) == 0 &&
                         m == COMM_BOOT_MAGIC && comm_read_all(fd, blob, n) == 0;
                close(fd);
                freeaddrinfo(res);
                if (ok) { return; }
            } else {
                if (fd >= 0) { close(fd); }
                freeaddrinfo(res);
            }
        }
        if (difftime(time(NULL), start) > timeout_s) {
            FATAL("NCCL id exchange: could not get the id from rank 0 at %s:%d within %.0f s", host, port, timeout_s);
        }
        usleep(100000);
    }
}

/* ---------------------------------------------------------------- the --nccl-init methods */

/* Sends blob(n) from rank 0 to every rank by `method` (world > 1):
 *   "" or "auto"     the filesystem exchange in $LLMC_NCCL_ID_DIR, or "." if unset;
 *   "fs:DIR"         the filesystem exchange in DIR (comm_bootstrap_fs, stale after 120 s);
 *   "tcp:HOST:PORT"  the TCP exchange (comm_bootstrap_tcp).
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
        if (!colon || colon == m + 4) { FATAL("--nccl-init '%s': expected tcp:HOST:PORT", m); }
        snprintf(host, sizeof(host), "%.*s", (int)(colon - (m + 4)), m + 4);
        comm_bootstrap_tcp(host, atoi(colon + 1), rank, world, blob, n, timeout_s);
    } else {
        FATAL("--nccl-init '%s': expected auto, fs:DIR or tcp:HOST:PORT", m);
    }
    if (fsdir[0]) { comm_bootstrap_fs(fsdir, run_id, rank, blob, n, timeout_s, 120.0); }
}

#endif /* LLMC_COMM_BOOTSTRAP_H */
