/*
 * dev/fuzz/fuzz_common.h -- what every libFuzzer harness of dev/fuzz/ shares (llmc/README.md, "Sanitizers and
 * fuzzing"). Include it FIRST, before any llmc header:
 *   - the fuzz input is written to a temp file (the readers take paths): fuzz_input_path(data, size);
 *   - the readers end a bad input with FATAL, i.e. exit(1); here `exit` is a macro for fuzz_exit, which jumps back
 *     into the harness (FUZZ_TRY), so one process can run millions of inputs;
 *   - every malloc/calloc/realloc/posix_memalign/strdup/free, fopen/fdopen/fclose, open/close and mmap/munmap made by the llmc code
 *     below this header is tracked, and what an input left behind when it failed is released (a FATAL in the real
 *     program ends the process, which releases it);
 *   - stderr is captured per input and checked: an input that fails must print exactly one line, starting with
 *     "error: " (the project's contract for bad input); anything else aborts, which libFuzzer reports as a crash
 *     with the input saved.
 * Crashes, hangs (-timeout) and out-of-bounds reads are caught by libFuzzer and AddressSanitizer themselves.
 * Host-only C11 + POSIX; one harness per process; not thread-safe (the readers run single-threaded here).
 */
#ifndef LLMC_FUZZ_COMMON_H
#define LLMC_FUZZ_COMMON_H

/* every system header the llmc code includes, before the macros below rename its calls */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <immintrin.h>
#include <cblas.h>
#include <omp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* ---------------------------------------------------------------- resource tracking */

#define FUZZ_SLOTS (1u << 20) /* open addressing: live heap blocks of one input (the tokenizer makes ~100k) */
static void** fuzz_heap;      /* live pointers (NULL = empty, FUZZ_GONE = removed) */
static uint32_t* fuzz_used;   /* slots ever filled during this input, to clear them quickly */
static size_t fuzz_nused;
#define FUZZ_GONE ((void*)1)
static FILE* fuzz_files[256];
static int fuzz_fds[256];
static struct { void* p; size_t n; } fuzz_maps[64];
static int fuzz_nfiles, fuzz_nfds, fuzz_nmaps;

static inline uint32_t fuzz_slot(const void* p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return (uint32_t)x & (FUZZ_SLOTS - 1);
}
static inline void fuzz_tables(void) {
    if (fuzz_heap) { return; }
    fuzz_heap = (void**)calloc(FUZZ_SLOTS, sizeof(void*));
    fuzz_used = (uint32_t*)calloc(FUZZ_SLOTS / 2, sizeof(uint32_t));
    if (!fuzz_heap || !fuzz_used) { abort(); }
}
static inline void fuzz_track(void* p) {
    if (!p) { return; }
    fuzz_tables();
    uint32_t i = fuzz_slot(p);
    while (fuzz_heap[i] && fuzz_heap[i] != FUZZ_GONE) { i = (i + 1) & (FUZZ_SLOTS - 1); }
    if (!fuzz_heap[i]) {
        if (fuzz_nused == FUZZ_SLOTS / 2) { fprintf(stderr, "fuzz: too many live allocations\n"); abort(); }
        fuzz_used[fuzz_nused++] = i;
    }
    fuzz_heap[i] = p;
}
static inline void fuzz_untrack(void* p) {
    if (!p || !fuzz_heap) { return; }
    uint32_t i = fuzz_slot(p);
    while (fuzz_heap[i]) {
        if (fuzz_heap[i] == p) { fuzz_heap[i] = FUZZ_GONE; return; }
        i = (i + 1) & (FUZZ_SLOTS - 1);
    }
}
static inline void* fuzz_malloc(size_t n) { void* p = malloc(n); fuzz_track(p); return p; }
static inline void* fuzz_calloc(size_t a, size_t b) { void* p = calloc(a, b); fuzz_track(p); return p; }
static inline void* fuzz_realloc(void* q, size_t n) {
    void* p = realloc(q, n);
    if (p || n == 0) { fuzz_untrack(q); }
    fuzz_track(p);
    return p;
}
static inline int fuzz_posix_memalign(void** out, size_t align, size_t n) {
    int rc = posix_memalign(out, align, n);
    if (rc == 0) { fuzz_track(*out); }
    return rc;
}
static inline char* fuzz_strdup(const char* s) { char* p = strdup(s); fuzz_track(p); return p; }
static inline void fuzz_free(void* p) { fuzz_untrack(p); free(p); }
static inline FILE* fuzz_fopen(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (f && fuzz_nfiles < 256) { fuzz_files[fuzz_nfiles++] = f; }
    return f;
}
static inline int fuzz_fclose(FILE* f) {
    for (int i = 0; i < fuzz_nfiles; i++) { if (fuzz_files[i] == f) { fuzz_files[i] = fuzz_files[--fuzz_nfiles]; break; } }
    return fclose(f);
}
static inline int fuzz_open(const char* path, int flags, ...) {
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, unsigned);
        va_end(ap);
    }
    int fd = open(path, flags, mode);
    if (fd >= 0 && fuzz_nfds < 256) { fuzz_fds[fuzz_nfds++] = fd; }
    return fd;
}
static inline void fuzz_untrack_fd(int fd) {
    for (int i = 0; i < fuzz_nfds; i++) { if (fuzz_fds[i] == fd) { fuzz_fds[i] = fuzz_fds[--fuzz_nfds]; break; } }
}
static inline int fuzz_close(int fd) {
    fuzz_untrack_fd(fd);
    return close(fd);
}
/* a descriptor turned into a FILE (fopen_regular, llmc/utils.h) is tracked as the FILE from then on */
static inline FILE* fuzz_fdopen(int fd, const char* mode) {
    FILE* f = fdopen(fd, mode);
    if (f) {
        fuzz_untrack_fd(fd);
        if (fuzz_nfiles < 256) { fuzz_files[fuzz_nfiles++] = f; }
    }
    return f;
}
static inline void* fuzz_mmap(void* a, size_t n, int prot, int flags, int fd, off_t off) {
    void* p = mmap(a, n, prot, flags, fd, off);
    if (p != MAP_FAILED && fuzz_nmaps < 64) { fuzz_maps[fuzz_nmaps].p = p; fuzz_maps[fuzz_nmaps++].n = n; }
    return p;
}
static inline int fuzz_munmap(void* p, size_t n) {
    for (int i = 0; i < fuzz_nmaps; i++) { if (fuzz_maps[i].p == p) { fuzz_maps[i] = fuzz_maps[--fuzz_nmaps]; break; } }
    return munmap(p, n);
}
/* releases what the input left behind and resets the tracking */
static inline void fuzz_release_all(void) {
    for (size_t k = 0; k < fuzz_nused; k++) {
        uint32_t i = fuzz_used[k];
        if (fuzz_heap[i] && fuzz_heap[i] != FUZZ_GONE) { free(fuzz_heap[i]); }
        fuzz_heap[i] = NULL;
    }
    fuzz_nused = 0;
    while (fuzz_nfiles > 0) { fclose(fuzz_files[--fuzz_nfiles]); }
    while (fuzz_nfds > 0) { close(fuzz_fds[--fuzz_nfds]); }
    while (fuzz_nmaps > 0) { fuzz_nmaps--; munmap(fuzz_maps[fuzz_nmaps].p, fuzz_maps[fuzz_nmaps].n); }
}

/* ---------------------------------------------------------------- exit -> longjmp, stderr capture */

static jmp_buf fuzz_jmp;
static int fuzz_active;
static int fuzz_exit_code;
static inline void fuzz_exit(int code) {
    if (!fuzz_active) { exit(code); }
    fuzz_exit_code = code;
    longjmp(fuzz_jmp, 1);
}

static char fuzz_path[64];
static int fuzz_err_fd = -1, fuzz_saved_stderr = -1;

/* writes the input to this process's temp file and returns its path */
static inline const char* fuzz_input_path(const uint8_t* data, size_t size) {
    if (!fuzz_path[0]) {
        snprintf(fuzz_path, sizeof(fuzz_path), "/tmp/llmc_fuzz_%d.bin", (int)getpid());
        char err[64];
        snprintf(err, sizeof(err), "/tmp/llmc_fuzz_%d.err", (int)getpid());
        fuzz_err_fd = open(err, O_RDWR | O_CREAT | O_TRUNC, 0600);
        unlink(err);
        fuzz_saved_stderr = dup(2);
        fuzz_tables();
        if (fuzz_err_fd < 0 || fuzz_saved_stderr < 0) { abort(); }
    }
    FILE* f = fopen(fuzz_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) { abort(); }
    return fuzz_path;
}

/* start of the guarded part: stderr goes to the capture file */
static inline void fuzz_begin(void) {
    fflush(stderr);
    if (ftruncate(fuzz_err_fd, 0) != 0 || lseek(fuzz_err_fd, 0, SEEK_SET) != 0) { abort(); }
    dup2(fuzz_err_fd, 2);
    fuzz_active = 1;
    fuzz_exit_code = 0;
}

/* end of the guarded part (failed = it ended in exit): restores stderr, checks the contract, releases leftovers */
static inline void fuzz_end(int failed) {
    fuzz_active = 0;
    fflush(stderr);
    dup2(fuzz_saved_stderr, 2);
    char buf[4096];
    ssize_t k = pread(fuzz_err_fd, buf, sizeof(buf) - 1, 0);
    buf[k > 0 ? k : 0] = '\0';
    if (failed) {
        int lines = 0;
        for (ssize_t i = 0; i < k; i++) { lines += buf[i] == '\n'; }
        if (fuzz_exit_code == 0 || lines != 1 || strncmp(buf, "error: ", 7) != 0) {
            fprintf(stderr, "fuzz: a rejected input must end with exit status != 0 and exactly one 'error: ' line; "
                    "got status %d and:\n%s\n", fuzz_exit_code, buf);
            abort();
        }
    }
    fuzz_release_all();
}

/* runs STMT (the reader calls) on one input; a FATAL inside jumps to the check of its one error line */
#define FUZZ_RUN(STMT)                                  \
    do {                                                \
        fuzz_begin();                                   \
        if (setjmp(fuzz_jmp) == 0) {                    \
            STMT;                                       \
            fuzz_end(0);                                \
        } else {                                        \
            fuzz_end(1);                                \
        }                                               \
    } while (0)

/* FUZZ_TARGET(run): the harness's LLVMFuzzerTestOneInput: writes the input to the temp file and calls
 * run(const char* path) inside FUZZ_RUN. FUZZ_SEED_WRITER(write): its LLVMFuzzerInitialize: with
 * LLMC_FUZZ_WRITE_SEED=FILE set, write(FILE) writes one valid input and the process exits 0 (for the readers whose
 * seeds dev/fuzz/make_seeds.py does not write); otherwise fuzzing starts. */
#define FUZZ_TARGET(RUN)                                                \
    int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {      \
        const char* fuzz_target_path = fuzz_input_path(data, size);     \
        FUZZ_RUN(RUN(fuzz_target_path));                                \
        return 0;                                                       \
    }
#define FUZZ_SEED_WRITER(WRITE)                                         \
    int LLVMFuzzerInitialize(int* argc, char*** argv) {                 \
        (void)argc; (void)argv;                                         \
        const char* fuzz_seed_path = getenv("LLMC_FUZZ_WRITE_SEED");    \
        if (fuzz_seed_path) { WRITE(fuzz_seed_path); exit(0); }         \
        return 0;                                                       \
    }

/* the llmc code below this header calls the tracked versions */
#define exit(code) fuzz_exit(code)
#define malloc(n) fuzz_malloc(n)
#define calloc(a, b) fuzz_calloc(a, b)
#define realloc(p, n) fuzz_realloc(p, n)
#define strdup(s) fuzz_strdup(s)
#define posix_memalign(o, a, n) fuzz_posix_memalign(o, a, n)
#define free(p) fuzz_free(p)
#define fopen(p, m) fuzz_fopen(p, m)
#define fdopen(fd, m) fuzz_fdopen(fd, m)
#define fclose(f) fuzz_fclose(f)
#define open(...) fuzz_open(__VA_ARGS__)
#define close(fd) fuzz_close(fd)
#define mmap(a, n, p, fl, fd, o) fuzz_mmap(a, n, p, fl, fd, o)
#define munmap(p, n) fuzz_munmap(p, n)

#endif /* LLMC_FUZZ_COMMON_H */
