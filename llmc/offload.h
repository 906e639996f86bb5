/*
 * llmc/offload.h -- optimizer state offload (--offload-optimizer; llmc/README.md, "Optimizer offload"):
 * ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training") keeps the fp32
 * weights and the AdamW moments of this rank's optimizer range in host memory and runs AdamW on the CPU;
 * ZeRO-Infinity (Rajbhandari et al. 2021, "ZeRO-Infinity: Breaking the GPU Memory Wall for Extreme Scale Deep
 * Learning") keeps them in a file on NVMe and streams them through host memory.
 *
 * What lives where, for the state range [first, first + n) of llmc/zero.h (ZeRO-0: the whole model, else the
 * own shard, padding included):
 *   cpu   w (fp32 weights: the master weights of mixed precision, the fp32 copy of the parameters otherwise),
 *         m and v: n floats each in pinned host memory.
 *   nvme  the same three in DIR/offload_optimizer_rankRRRRR.bin (the experts' group of --ep: a second file,
 *         DIR/offload_optimizer_experts_rankRRRRR.bin), chunk by chunk: chunk c holds [w | m | v] of
 *         elements [c*CH, (c+1)*CH) (CH = ledger_offload's chunk, a multiple of 1024: every section starts 4 KiB
 *         aligned), so one pread/pwrite moves a chunk's whole state. Opened with O_DIRECT where the filesystem
 *         accepts it (the first aligned write tells), plain pread/pwrite otherwise; the header line says which.
 *         The file is scratch: created at start (space reserved with posix_fallocate after a statvfs check against
 *         the ledger's bytes), removed at exit; checkpoints keep the state in their own state files
 *         (llmc/train_state.h reads and writes it through AdamWState's io hook), and a resume reads only those.
 * Gradients (offload_stream_*, called by llmc/zero.h's layer_ready hook on the step's last micro-step): each bucket's
 *   reduced gradients inside the real (unpadded) owned range are copied device -> host into hgrad (floatX, n values,
 *   pinned) on a stream of their own as soon as the bucket is reduced, during backward, without waiting for the
 *   gradient norm; one event per bucket, and each chunk remembers the last bucket that copied into it. Where no hook
 *   streamed them (gradient compression decodes the buckets after backward) the update copies them down itself.
 * Per optimizer step (offload_update, once the norm and clipping factor are known), chunk by chunk over the real
 *   owned range: wait for the chunk's gradients (its last bucket's event, or its own copy issued one chunk ahead)
 *   and, for nvme, its state (read ahead by an I/O thread, requests in FIFO order), then AdamW with the CPU
 *   backend's element function (llmc/cpu/adamw_range.h: the AVX body where compiled for it or, in nvcc's host code,
 *   chosen at run time; OpenMP threads), tensor by tensor for the weight decay, then round w to floatX (bf16:
 *   stochastic rounding keyed by (seed, t, flat index) exactly as the CUDA kernel's) and copy the parameters host
 *   -> device (a second stream, double-buffered), and (nvme) write the chunk's state back. On the CPU build the
 *   "device" is host memory: the copies are memcpy and the update is bit-identical to the backend's adamw_update
 *   (the same function on the same values).
 * Never a half-updated optimizer state that matters: a failed read or write ends the process with one line, and
 * a killed process leaves at most some chunks of the scratch file a step ahead; the next start rebuilds the file
 * from the checkpoint's state files (or from the initial weights), never from the old file.
 * With ZeRO-3 (llmc/zero_params.h) the parameters written are the rank's shard: on the device (uploaded as above),
 * or with --offload-params cpu in pinned host memory, where the update writes them in place (no parameter staging,
 * no upload: the next forward's gathers copy them to the device); in fp32 builds with cpu offload that shard is w
 * itself, so the update writes nothing extra at all.
 * Bytes (llmc/ledger.h, ledger_offload_ex): host memory, host buffers and the file are sized by the ledger's own
 * function (host buffers: hgrad and the staging chunks); per step the PCIe bytes are the real range's gradients down
 * (counted as their copies are queued, streamed or not) and parameters up (floatX each; nothing up when the
 * parameters are in host memory).
 * Precision: fp32 and bf16 builds; fp16 builds (loss scaling) are refused by the trainer, as is -w 0 in mixed
 * precision (the offload always keeps fp32 weights on the host).
 * Test hooks (environment, documented in README.md "Optimizer offload"): LLMC_OFFLOAD_FREE_BYTES replaces the free
 * space statvfs reports for DIR; LLMC_OFFLOAD_KILL_AT_STEP=t kills the process (SIGKILL) in step t's nvme update
 * after its first chunk was written back (a half-updated scratch file).
 * Errors: one line naming the file or directory and the system's reason, exit status 1.
 */
#ifndef LLMC_OFFLOAD_H
#define LLMC_OFFLOAD_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/gpt2.h"
#include "llmc/ledger.h"
#include "llmc/checkpoint.h"
#include "llmc/cpu/adamw_range.h"

#ifndef O_DIRECT
#define O_DIRECT 0
#endif

/* --offload-optimizer: kind OFFLOAD_NONE / _CPU / _NVME and, for nvme, the directory */
typedef struct {
    int kind;
    char dir[900];
    int rank;           /* the world rank (names the nvme file); set by the caller */
    int group;          /* 0; 1 for the experts' parameter group of --ep (llmc/zero_experts.h): its own nvme file */
    int params;         /* --offload-params cpu: ZeRO-3's parameter shard in pinned host memory (llmc/zero_params.h);
                         * set by the caller (offload_params_parse) */
} OffloadSpec;

/* Parses --offload-optimizer: "none", "cpu" or "nvme:DIR" (DIR non-empty, at most 899 characters). Returns 0, or 1
 * with one sentence in err (cap bytes). */
static inline int offload_parse(const char* s, OffloadSpec* o, char* err, size_t cap) {
    memset(o, 0, sizeof(*o));
    if (strcmp(s, "none") == 0) { return 0; }
    if (strcmp(s, "cpu") == 0) { o->kind = OFFLOAD_CPU; return 0; }
    if (strncmp(s, "nvme:", 5) == 0 && s[5] != '\0' && strlen(s + 5) < sizeof(o->dir)) {
        o->kind = OFFLOAD_NVME;
        snprintf(o->dir, sizeof(o->dir), "%s", s + 5);
        return 0;
    }
    snprintf(err, cap, "flag --offload-optimizer is '%s'; expected none, cpu or nvme:DIR (a directory for the "
             "optimizer state files, at most 899 characters)", s);
    return 1;
}

/* Parses --offload-params: "none" (0) or "cpu" (1: ZeRO-3's parameter shard in host memory) into *params. Returns
 * 0, or 1 with one sentence in err (cap bytes). */
static inline int offload_params_parse(const char* s, int* params, char* err, size_t cap) {
    if (strcmp(s, "none") == 0 || strcmp(s, "cpu") == 0) { *params = s[0] == 'c'; return 0; }
    snprintf(err, cap, "flag --offload-params is '%s'; expected none or cpu (ZeRO-3's parameter shard in host memory)", s);
    return 1;
}

/* the scratch file of world rank `rank` under dir (group 1: the experts' group of --ep, a second file) */
static inline void offload_file_path(char* out, size_t cap, const char* dir, int rank, int group) {
    snprintf(out, cap, "%s/offload_optimizer_%srank%05d.bin", dir, group ? "experts_" : "", rank);
}

/* Checks that nvme directory `dir` exists, is writable (a probe file is created and removed) and has at least `bytes` free (statvfs f_bavail x f_frsize,
 * or LLMC_OFFLOAD_FREE_BYTES when set: a test hook). Returns 0, or 1 with one sentence in err. */
static inline int offload_check_dir(const char* dir, size_t bytes, char* err, size_t cap) {
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, cap, "--offload-optimizer nvme:%s: the directory does not exist (%s); create it first", dir,
                 strerror(errno ? errno : ENOTDIR));
        return 1;
    }
    char probe[1024];
    snprintf(probe, sizeof(probe), "%s/.offload_probe_XXXXXX", dir);
    int fd = access(dir, W_OK | X_OK) == 0 ? mkstemp(probe) : -1; /* root passes access(): a file must be created */
    if (fd < 0) {
        snprintf(err, cap, "--offload-optimizer nvme:%s: the directory is not writable (%s)", dir, strerror(errno));
        return 1;
    }
    close(fd);
    unlink(probe);
    unsigned long long avail;
    const char* env = getenv("LLMC_OFFLOAD_FREE_BYTES");
    if (env && env[0]) {
        avail = strtoull(env, NULL, 10);
    } else {
        struct statvfs vf;
        if (statvfs(dir, &vf) != 0) {
            snprintf(err, cap, "--offload-optimizer nvme:%s: cannot read the free space (%s)", dir, strerror(errno));
            return 1;
        }
        avail = (unsigned long long)vf.f_bavail * (unsigned long long)vf.f_frsize;
    }
    if (avail < (unsigned long long)bytes) {
        snprintf(err, cap, "--offload-optimizer nvme:%s: %llu bytes free, but this process's optimizer state file "
                 "needs %zu bytes (memory ledger); free space or choose another directory", dir, avail, bytes);
        return 1;
    }
    return 0;
}

#define OFFLOAD_QUEUE 8

typedef struct { int write; size_t chunk; int buf; } OffloadIoReq;

/* the offloaded optimizer state of one rank (see the header) */
typedef struct {
    int kind;
    size_t first, n;            /* the state range: flat parameters [first, first + n) */
    int has_master;             /* mixed precision: w is what the state files call the master weights */
    int params_host;            /* the parameters the update writes are in host memory (ZeRO-3, --offload-params
                                 * cpu): written in place, no staging, no upload */
    LedgerOffload lay;          /* chunk size and bytes (llmc/ledger.h) */
    float *w, *m, *v;           /* cpu: n floats each, pinned host memory */
    void* hgrad;                /* the reduced gradients of the state range, floatX, n values, pinned: streamed down
                                 * bucket by bucket during backward (offload_stream_piece), or by the update */
    void* pstage[2];            /* parameter chunks, floatX, pinned */
    float* gfp32;               /* fp32 gradient chunk (floatX != fp32) */
    float* io[2];               /* nvme: [w | m | v] of a chunk, 4096-byte aligned */
    int fd, direct;
    char path[1024];
    DevStream s_d2h, s_h2d;
    DevEvent ev_ready, ev_d2h[2], ev_h2d[2];
    /* gradient streaming during backward (offload_stream_*): one event per bucket issued this step (on s_d2h, after
     * the bucket's copies), and per chunk the index of the last bucket that copied into it */
    DevEvent* ev_bucket;
    int nbuckets, issued;
    int* chunk_bucket;
    size_t streamed;                /* elements streamed this step */
    DevEvent ev_src;                /* main-stream mark a bucket's copies wait for */
    /* the I/O thread (nvme) */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    OffloadIoReq queue[OFFLOAD_QUEUE];
    unsigned long q_head, q_tail;   /* requests taken / submitted */
    int stop, io_errno, io_failed_write;
    size_t io_failed_chunk;
    double io_seconds;              /* time the thread spent in pread/pwrite, this step */
    /* this step's traffic */
    size_t step_d2h, step_h2d, step_read, step_write;
    size_t step_d2h_streamed;       /* of step_d2h, the bytes copied during backward (before the update began) */
    double step_seconds;
    int kill_at_step;               /* test hook: LLMC_OFFLOAD_KILL_AT_STEP */
    size_t host_bytes, buffer_bytes, file_bytes; /* allocated (the ledger check) */
} Offload;

/* one whole pread (write = 0) or pwrite of bytes at off; 0 or errno */
static inline int offload_pio(int fd, void* buf, size_t bytes, off_t off, int write) {
    size_t done = 0;
    while (done < bytes) {
        ssize_t r = write ? pwrite(fd, (char*)buf + done, bytes - done, off + (off_t)done)
                          : pread(fd, (char*)buf + done, bytes - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) { continue; }
        if (r < 0) { return errno; }
        if (r == 0) { return EIO; }
        done += (size_t)r;
    }
    return 0;
}

/* chunk c of the file <-> buffer (chunk x 12 bytes); with O_DIRECT refused (EINVAL) once, falls back to plain I/O */
static inline int offload_chunk_io(Offload* o, size_t c, float* buf, int write) {
    size_t bytes = o->lay.chunk * 12;
    int e = offload_pio(o->fd, buf, bytes, (off_t)(c * bytes), write);
    if (e == EINVAL && o->direct) {
        o->direct = 0;
        int fl = fcntl(o->fd, F_GETFL);
        if (fl == -1 || fcntl(o->fd, F_SETFL, fl & ~O_DIRECT) == -1) { return errno; }
        e = offload_pio(o->fd, buf, bytes, (off_t)(c * bytes), write);
    }
    return e;
}

static inline void* offload_io_main(void* arg) {
    Offload* o = (Offload*)arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->q_head == o->q_tail && !o->stop) { pthread_cond_wait(&o->cv, &o->mu); }
        if (o->q_head == o->q_tail) { break; }
        OffloadIoReq r = o->queue[o->q_head % OFFLOAD_QUEUE];
        int failed = o->io_errno;
        pthread_mutex_unlock(&o->mu);
        double t0 = wall_seconds();
        int e = failed ? 0 : offload_chunk_io(o, r.chunk, o->io[r.buf], r.write);
        double dt = wall_seconds() - t0;
        pthread_mutex_lock(&o->mu);
        if (e && !o->io_errno) { o->io_errno = e; o->io_failed_write = r.write; o->io_failed_chunk = r.chunk; }
        o->io_seconds += dt;
        o->q_head++;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* queues chunk c's read into / write from io[buf]; returns its ticket */
static inline unsigned long offload_io_submit(Offload* o, int write, size_t c, int buf) {
    pthread_mutex_lock(&o->mu);
    while (o->q_tail - o->q_head >= OFFLOAD_QUEUE) { pthread_cond_wait(&o->cv, &o->mu); }
    OffloadIoReq r = {write, c, buf};
    o->queue[o->q_tail % OFFLOAD_QUEUE] = r;
    unsigned long ticket = ++o->q_tail;
    if (write) { o->step_write += o->lay.chunk * 12; } else { o->step_read += o->lay.chunk * 12; }
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return ticket;
}

/* waits until request `ticket` (and every one before it) is done; a failed one ends the process with one line */
static inline void offload_io_wait(Offload* o, unsigned long ticket) {
    pthread_mutex_lock(&o->mu);
    while (o->q_head < ticket) { pthread_cond_wait(&o->cv, &o->mu); }
    int e = o->io_errno, w = o->io_failed_write;
    size_t c = o->io_failed_chunk;
    pthread_mutex_unlock(&o->mu);
    if (e) {
        FATAL("--offload-optimizer: cannot %s chunk %zu of '%s': %s (the checkpoints hold the optimizer state; resume "
              "from the last one)", w ? "write" : "read", c, o->path, strerror(e));
    }
}

/* chunk c synchronously (checkpoints, start-up; the I/O thread is idle then) */
static inline void offload_chunk_sync(Offload* o, size_t c, float* buf, int write) {
    int e = offload_chunk_io(o, c, buf, write);
    if (e) {
        FATAL("--offload-optimizer: cannot %s chunk %zu of '%s': %s", write ? "write" : "read", c, o->path, strerror(e));
    }
}

/* cnt parameters (floatX) as fp32 into dst: from the device, or (host = 1) from host memory; nothing when they
 * are dst itself (fp32 builds whose ZeRO-3 shard is the offload's fp32 weights) */
static inline void offload_params_to_fp32(float* dst, const floatX* src, size_t cnt, int host) {
    if (!host) { dev_download_floats(dst, src, cnt); return; }
#if FLOATX_IS_FLOAT
    if ((const void*)dst != (const void*)src) { memcpy(dst, src, cnt * 4); }
#else
    const uint16_t* b = (const uint16_t*)src;
    for (size_t q = 0; q < cnt; q++) { dst[q] = bf16_bits_to_float(b[q]); }
#endif
}

/* Copies the parameters of the state range (params_first: the parameter of element `first` onward, n floatX, on
 * the device or, with host = 1, in host memory) into w as fp32; with reset_moments, m and v become 0 (start-up),
 * else they are kept (a resume re-reads the weights it loaded: exact, floatX -> fp32). nvme: chunk by chunk,
 * read-modify-write. */
static inline void offload_load_weights(Offload* o, const floatX* params_first, int host, int reset_moments) {
    size_t CH = o->lay.chunk;
    for (size_t c = 0; c < o->lay.nchunks; c++) {
        size_t k0 = c * CH, cnt = o->n - k0 < CH ? o->n - k0 : CH;
        if (o->kind == OFFLOAD_CPU) {
            offload_params_to_fp32(o->w + k0, params_first + k0, cnt, host);
            if (reset_moments) { memset(o->m + k0, 0, cnt * 4); memset(o->v + k0, 0, cnt * 4); }
            continue;
        }
        float* buf = o->io[0];
        if (reset_moments) { memset(buf, 0, CH * 12); } else { offload_chunk_sync(o, c, buf, 0); }
        offload_params_to_fp32(buf, params_first + k0, cnt, host);
        offload_chunk_sync(o, c, buf, 1);
    }
}

/* AdamWState io hook (llmc/gpt2.h): section 0 m, 1 v, 2 w (master), n floats of host memory, to_state = 1 writes
 * host into the state, 0 reads the state into host */
static inline void offload_state_io(void* ctx, int section, float* host, int to_state) {
    Offload* o = (Offload*)ctx;
    if (o->kind == OFFLOAD_CPU) {
        float* arr = section == 0 ? o->m : section == 1 ? o->v : o->w;
        if (to_state) { memcpy(arr, host, o->n * 4); } else { memcpy(host, arr, o->n * 4); }
        return;
    }
    size_t CH = o->lay.chunk;
    int sec = section == 2 ? 0 : section + 1; /* the file's order: w, m, v */
    for (size_t c = 0; c < o->lay.nchunks; c++) {
        size_t k0 = c * CH, cnt = o->n - k0 < CH ? o->n - k0 : CH;
        offload_chunk_sync(o, c, o->io[0], 0);
        float* part = o->io[0] + (size_t)sec * CH;
        if (to_state) {
            memcpy(part, host + k0, cnt * 4);
            offload_chunk_sync(o, c, o->io[0], 1);
        } else {
            memcpy(host + k0, part, cnt * 4);
        }
    }
}

/* Sets up the offload of kind spec->kind for the state range [first, first + n) of world rank `rank`, weights from
 * the device parameters `params_first` (the parameter of element `first` onward, n floatX), m = v = 0. params_host
 * = 1: the parameters the updates write will be in host memory (ZeRO-3's offloaded shard, llmc/zero_params.h), so
 * no parameter staging is allocated. nvme: the caller has checked the directory (offload_check_dir); this creates
 * the file (O_DIRECT where possible), reserves its bytes and writes the initial state; a failure is one error line. */
static inline void offload_init(Offload* o, const OffloadSpec* spec, size_t first, size_t n, int has_master, int rank,
                                const floatX* params_first, int params_host) {
    /* rank: the world rank (the nvme file's name) */
    memset(o, 0, sizeof(*o));
    o->kind = spec->kind;
    o->first = first;
    o->n = n;
    o->has_master = has_master;
    o->params_host = params_host;
    o->fd = -1;
    size_t pb = sizeof(floatX);
    o->lay = ledger_offload_ex(o->kind, n, pb, params_host);
    size_t CH = o->lay.chunk;
    o->hgrad = host_malloc_pinned(n * pb, "offload gradients (host copy of the state range)");
    for (int k = 0; k < 2; k++) {
        o->pstage[k] = params_host ? NULL : host_malloc_pinned(CH * pb, "offload parameter staging");
        o->ev_d2h[k] = dev_event_create();
        o->ev_h2d[k] = dev_event_create();
    }
    o->buffer_bytes = n * pb + (params_host ? 0 : 2) * CH * pb;
    o->chunk_bucket = (int*)calloc_check(o->lay.nchunks ? o->lay.nchunks : 1, sizeof(int), "offload chunk buckets");
    o->ev_src = dev_event_create();
    if (pb != 4) {
        o->gfp32 = (float*)host_malloc_pinned(CH * 4, "offload fp32 gradients");
        o->buffer_bytes += CH * 4;
    }
    o->ev_ready = dev_event_create();
    o->s_d2h = dev_stream_create();
    o->s_h2d = dev_stream_create();
    const char* kill = getenv("LLMC_OFFLOAD_KILL_AT_STEP");
    o->kill_at_step = kill && kill[0] ? atoi(kill) : 0;
    if (o->kind == OFFLOAD_CPU) {
        o->w = (float*)host_malloc_pinned(n * 4, "offloaded fp32 weights");
        o->m = (float*)host_malloc_pinned(n * 4, "offloaded AdamW m");
        o->v = (float*)host_malloc_pinned(n * 4, "offloaded AdamW v");
        o->host_bytes = 12 * n;
    } else {
        for (int k = 0; k < 2; k++) {
            void* p = NULL;
            if (posix_memalign(&p, 4096, CH * 12) != 0) { FATAL("cannot allocate %zu bytes for the offload I/O buffers", CH * 12); }
            o->io[k] = (float*)p;
        }
        o->buffer_bytes += 2 * CH * 12;
        offload_file_path(o->path, sizeof(o->path), spec->dir, rank, spec->group);
        char why[128]; /* open_regular: a FIFO or device in its place is refused, never waited on */
        o->fd = open_regular(o->path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600, why, sizeof(why));
        o->direct = o->fd >= 0 && O_DIRECT != 0;
        if (o->fd < 0 && errno == EINVAL) { o->fd = open_regular(o->path, O_RDWR | O_CREAT | O_TRUNC, 0600, why, sizeof(why)); }
        if (o->fd < 0) { FATAL("--offload-optimizer: cannot create '%s': %s", o->path, why); }
        int e = posix_fallocate(o->fd, 0, (off_t)o->lay.nvme);
        if (e != 0 && e != EOPNOTSUPP && e != EINVAL) {
            close(o->fd);
            unlink(o->path);
            FATAL("--offload-optimizer: cannot reserve %zu bytes for '%s': %s", o->lay.nvme, o->path, strerror(e));
        }
        pthread_mutex_init(&o->mu, NULL);
        pthread_cond_init(&o->cv, NULL);
    }
    offload_load_weights(o, params_first, 0, 1);
    if (o->kind == OFFLOAD_NVME) {
        struct stat st;
        o->file_bytes = fstat(o->fd, &st) == 0 ? (size_t)st.st_size : 0;
        if (pthread_create(&o->thread, NULL, offload_io_main, o) != 0) { FATAL("cannot start the offload I/O thread"); }
        o->thread_started = 1;
    }
}

/* bf16 (raw bits) of fp32 x with the CUDA kernel's stochastic rounding (llmc/cuda/common.cuh) */
#if !FLOATX_IS_FLOAT
static inline uint16_t offload_round_bf16(float x, uint32_t random) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    if ((bits & 0x7f800000u) == 0x7f800000u) { return float_to_bf16_bits(x); }
    bits += random & 0xffffu;
    return (uint16_t)(bits >> 16);
}
#endif

/* AdamW on one chunk in host memory: w, m, v (cnt floats: the state of flat elements [a, a + cnt)), g the fp32
 * gradients; tensor by tensor (weight decay only where parameter_is_decayed), blocks of 4096 elements in parallel */
static inline void offload_adamw_chunk(const GPT2* model, size_t a, size_t cnt, float* w, const float* g, float* m,
                                       float* v, const AdamWStep* s, float bc1, float bc2) {
    size_t t0 = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t t1 = t0 + model->param_sizes[i];
        size_t lo = a > t0 ? a : t0, hi = a + cnt < t1 ? a + cnt : t1;
        if (lo < hi) {
            float wd = parameter_is_decayed(i) ? s->weight_decay : 0.0f;
            long blocks = (long)((hi - lo + 4095) / 4096);
            #pragma omp parallel for schedule(static)
            for (long b = 0; b < blocks; b++) {
                size_t i0 = lo - a + (size_t)b * 4096, i1 = i0 + 4096 < hi - a ? i0 + 4096 : hi - a;
                adamw_range(w, g, m, v, i0, i1, s->learning_rate, s->beta1, s->beta2, s->eps, wd, s->grad_scale, bc1, bc2);
            }
        }
        t0 = t1;
    }
}

/* ---------------------------------------------------------------- gradient streaming during backward
 * llmc/zero.h calls these from the layer_ready hook of the step's last micro-step: as soon as a gradient bucket is
 * reduced (and, ZeRO-2/3, folded into the shard accumulator), the part of it inside the real state range is copied
 * device -> host into hgrad on the gradient stream s_d2h, ordered after the bucket's collective and the main-stream
 * work before the hook, so the host holds most gradients when backward ends. The copy does not wait for the gradient
 * norm (clipping scales the update, not the gradients). The update (offload_update) then waits per chunk only for the
 * last bucket that copied into it. */

/* nbuckets: the buckets one backward issues (layers + the globals' bucket); one event each */
static inline void offload_stream_init(Offload* o, int nbuckets) {
    o->nbuckets = nbuckets > 0 ? nbuckets : 1;
    o->ev_bucket = (DevEvent*)calloc_check((size_t)o->nbuckets, sizeof(DevEvent), "offload bucket events");
    for (int q = 0; q < o->nbuckets; q++) { o->ev_bucket[q] = dev_event_create(); }
}

/* start of an optimizer step: its PCIe counters and the streamed coverage start at zero */
static inline void offload_begin_step(Offload* o) {
    o->step_d2h = o->step_h2d = o->step_d2h_streamed = o->step_read = o->step_write = 0;
    o->streamed = 0;
    o->issued = 0;
}

/* a bucket's copies follow: the gradient stream waits for the work queued on the main stream so far (the bucket's
 * backward and, ZeRO-2/3, its accumulation); returns the stream (the caller orders it after the collective too) */
static inline DevStream offload_stream_begin_bucket(Offload* o) {
    dev_event_record(o->ev_src);
    dev_stream_wait_event(o->s_d2h, o->ev_src);
    return o->s_d2h;
}

/* the bucket in flight: its event index (a surplus bucket shares the last event, recorded again: later on the FIFO
 * stream, so still complete only after every earlier copy) */
static inline int offload_stream_slot(const Offload* o) { return o->issued < o->nbuckets ? o->issued : o->nbuckets - 1; }

/* queues the copy of the reduced gradients of flat elements [a, a + cnt) (inside the real state range) from src
 * (device floatX) into hgrad on the gradient stream, and counts the bytes */
static inline void offload_stream_piece(Offload* o, size_t a, size_t cnt, const floatX* src) {
    if (cnt == 0) { return; }
    size_t pb = sizeof(floatX), k0 = a - o->first, CH = o->lay.chunk;
    dev_memcpy_d2h_on((char*)o->hgrad + k0 * pb, src, cnt * pb, o->s_d2h);
    o->step_d2h += cnt * pb;
    o->step_d2h_streamed += cnt * pb;
    o->streamed += cnt;
    for (size_t c = k0 / CH; c <= (k0 + cnt - 1) / CH; c++) { o->chunk_bucket[c] = offload_stream_slot(o); }
}

/* the bucket's copies are queued: its event */
static inline void offload_stream_end_bucket(Offload* o) {
    dev_event_record_on(o->ev_bucket[offload_stream_slot(o)], o->s_d2h);
    o->issued++;
}

/* chunk k0..k0+cnt of the downloaded gradients as fp32: the host buffer itself (fp32 builds) or its BF16 values
 * widened into o->gfp32 */
static inline const float* offload_chunk_grad(Offload* o, size_t k0, size_t cnt) {
#if FLOATX_IS_FLOAT
    (void)cnt;
    return (const float*)((const char*)o->hgrad + k0 * sizeof(floatX));
#else
    const uint16_t* gb = (const uint16_t*)((const char*)o->hgrad + k0 * sizeof(floatX));
    #pragma omp parallel for schedule(static)
    for (long q = 0; q < (long)cnt; q++) { o->gfp32[q] = bf16_bits_to_float(gb[q]); }
    return o->gfp32;
#endif
}

/* the updated fp32 parameters w of elements a..a+cnt as floatX into dst: a copy (fp32 builds; none when dst is w)
 * or BF16 with stochastic rounding seeded by (seed, step, element index), as the device's AdamW kernel rounds */
static inline void offload_chunk_params(floatX* dst, const float* w, size_t a, size_t cnt, const AdamWStep* s) {
#if FLOATX_IS_FLOAT
    (void)a; (void)s;
    if ((const void*)dst != (const void*)w) { memcpy(dst, w, cnt * 4); } /* the same memory: the shard is w */
#else
    uint16_t* pb16 = (uint16_t*)dst;
    #pragma omp parallel for schedule(static)
    for (long q = 0; q < (long)cnt; q++) {
        pb16[q] = offload_round_bf16(w[q], random_u32_counter(s->seed, (uint32_t)s->t, (uint64_t)(a + (size_t)q)));
    }
#endif
}

/* One optimizer step of the offloaded state: AdamW over the real owned range [lo, hi) (first == lo, hi <= first + n)
 * with grad = the reduced gradients of element lo onward (device floatX, hi - lo values), writing the updated
 * parameters into params_first (the parameter of element `first` onward: device memory, uploaded from the staging
 * chunks, or with params_host host memory, written in place). Gradients: when the backward streamed all hi - lo of
 * them (offload_stream_piece), chunk i waits for the event of the last bucket that copied into it; otherwise (a step
 * without the streaming hook: gradient compression) chunk i + 1 is copied down while the CPU updates chunk i. Then per
 * chunk AdamW on the host, parameters up on a second stream (double-buffered) and, nvme, the state read ahead and
 * written back. Returns with every copy and write done (the host waited for them), so work queued on the main stream
 * afterwards sees the parameters. */
static inline void offload_update(Offload* o, const GPT2* model, size_t lo, size_t hi, const floatX* grad,
                                  floatX* params_first, const AdamWStep* s) {
    double t_start = wall_seconds();
    o->io_seconds = 0.0;
    if (hi <= lo) { o->step_seconds = 0.0; return; }
    if (s->t < 1) { FATAL("offload_update: step t=%d must start at 1", s->t); }
    size_t CH = o->lay.chunk, pb = sizeof(floatX);
    size_t nch = (hi - o->first + CH - 1) / CH;
    float bc1, bc2;
    adamw_bias_corrections(s->beta1, s->beta2, s->t, &bc1, &bc2);
    int nvme = o->kind == OFFLOAD_NVME;
    int streamed = o->streamed == hi - lo; /* every gradient came down during backward */
    if (!streamed && o->streamed) { /* part of them only (never expected): counted, then all downloaded again */
        o->streamed = 0;
    }
    unsigned long rd[2] = {0, 0}, last = 0;
    /* the copies wait for everything queued on the main stream so far (the reduced gradients); the host writes a
     * host shard (params_host) only after the device passed every copy out of it */
    dev_event_record(o->ev_ready);
    dev_stream_wait_event(o->s_d2h, o->ev_ready);
    dev_stream_wait_event(o->s_h2d, o->ev_ready);
    if (o->params_host) { dev_event_synchronize(o->ev_ready); }
    for (size_t i = 0; i <= nch; i++) {
        if (i < nch) { /* chunk i: gradients down unless streamed, state read */
            size_t a = o->first + i * CH, cnt = hi - a < CH ? hi - a : CH;
            if (!streamed) {
                dev_memcpy_d2h_on((char*)o->hgrad + i * CH * pb, grad + (a - lo), cnt * pb, o->s_d2h);
                dev_event_record_on(o->ev_d2h[i & 1], o->s_d2h);
                o->step_d2h += cnt * pb;
            }
            if (nvme) { rd[i & 1] = offload_io_submit(o, 0, i, (int)(i & 1)); }
        }
        if (i == 0) { continue; } /* one chunk ahead: compute chunk j = i - 1 while chunk i travels */
        size_t j = i - 1, a = o->first + j * CH, cnt = hi - a < CH ? hi - a : CH, k0 = j * CH;
        int b = (int)(j & 1);
        dev_event_synchronize(streamed ? o->ev_bucket[o->chunk_bucket[j]] : o->ev_d2h[b]);
        float *w, *m, *v;
        if (nvme) {
            offload_io_wait(o, rd[b]);
            w = o->io[b]; m = o->io[b] + CH; v = o->io[b] + 2 * CH;
        } else {
            w = o->w + k0; m = o->m + k0; v = o->v + k0;
        }
        offload_adamw_chunk(model, a, cnt, w, offload_chunk_grad(o, k0, cnt), m, v, s, bc1, bc2);
        /* the parameters in floatX: into the staging chunk for the upload, or (params_host) in place */
        floatX* dst = o->params_host ? params_first + (a - o->first) : (floatX*)o->pstage[b];
        if (!o->params_host) { dev_event_synchronize(o->ev_h2d[b]); } /* the upload of chunk j - 2 from it is done */
        offload_chunk_params(dst, w, a, cnt, s);
        if (!o->params_host) {
            dev_memcpy_h2d_on(params_first + (a - o->first), o->pstage[b], cnt * pb, o->s_h2d);
            dev_event_record_on(o->ev_h2d[b], o->s_h2d);
            o->step_h2d += cnt * pb;
        }
        if (nvme) {
            last = offload_io_submit(o, 1, j, b);
            if (o->kill_at_step == s->t && j == 0) { /* test hook: die with a half-updated scratch file */
                offload_io_wait(o, last);
                raise(SIGKILL);
            }
        }
    }
    dev_stream_synchronize(o->s_h2d);
    if (nvme) { offload_io_wait(o, last); }
    o->step_seconds = wall_seconds() - t_start;
}

/* one line: where the state lives, its bytes, the chunking and (nvme) the I/O mode */
static inline void offload_print(const Offload* o) {
    double MiB = 1024.0 * 1024.0;
    if (o->kind == OFFLOAD_CPU) {
        printf("optimizer offload: cpu: fp32 weights + AdamW m, v of %zu parameters in pinned host memory (%.1f MiB), "
               "AdamW on the CPU; %zu chunks of %zu, host buffers %.1f MiB\n", o->n, o->host_bytes / MiB,
               o->lay.nchunks, o->lay.chunk, o->buffer_bytes / MiB);
    } else {
        printf("optimizer offload: nvme: fp32 weights + AdamW m, v of %zu parameters in '%s' (%.1f MiB, %s), AdamW on "
               "the CPU; %zu chunks of %zu, host buffers %.1f MiB\n", o->n, o->path, o->file_bytes / MiB,
               o->direct ? "O_DIRECT" : "buffered pread/pwrite: the filesystem refused O_DIRECT", o->lay.nchunks,
               o->lay.chunk, o->buffer_bytes / MiB);
    }
}

/* stops the I/O thread, closes and removes the scratch file, frees every buffer */
static inline void offload_free(Offload* o) {
    if (o->thread_started) {
        pthread_mutex_lock(&o->mu);
        o->stop = 1;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    if (o->kind == OFFLOAD_NVME) {
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
    }
    if (o->fd >= 0) { close(o->fd); unlink(o->path); }
    for (int k = 0; k < 2; k++) {
        host_free_pinned(o->pstage[k]);
        free(o->io[k]);
        dev_event_destroy(o->ev_d2h[k]);
        dev_event_destroy(o->ev_h2d[k]);
    }
    host_free_pinned(o->gfp32);
    host_free_pinned(o->hgrad);
    for (int q = 0; q < o->nbuckets; q++) { dev_event_destroy(o->ev_bucket[q]); }
    free(o->ev_bucket);
    free(o->chunk_bucket);
    dev_event_destroy(o->ev_src);
    host_free_pinned(o->w);
    host_free_pinned(o->m);
    host_free_pinned(o->v);
    dev_event_destroy(o->ev_ready);
    dev_stream_destroy(o->s_d2h);
    dev_stream_destroy(o->s_h2d);
    memset(o, 0, sizeof(*o));
    o->fd = -1;
}

#endif /* LLMC_OFFLOAD_H */
