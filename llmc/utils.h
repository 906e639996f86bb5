/*
 * llmc/utils.h -- checked wrappers for the C library calls the trainer makes,
 * and atomic file writes (llmc/README.md, "Layers": errors and atomic files).
 *
 * Error behaviour: every wrapper that fails prints ONE line to stderr of the form
 *   "error: <what failed> (<path or detail>): <strerror>  [file:line]"
 * and calls exit(EXIT_FAILURE). Nothing here returns an error code, except open_regular / fopen_regular (-1 / NULL
 * with the reason in a buffer, for callers that say more or carry on).
 *
 * Opening files: open_regular / fopen_regular never block in open() and refuse anything but a regular file (a FIFO
 * named as a model or shard would otherwise wait forever); fopen_check is fopen_regular that exits on failure.
 *
 * Atomic writes: atomic_file_open(path) creates "<path>.tmp" afresh (O_EXCL; atomic_file_open_private: mode 0600 from
 * its first moment, for secrets); atomic_file_commit()
 * flushes, fsyncs, closes and renames it over <path>, then fsyncs the directory so the
 * rename itself survives a crash (best effort: a directory that cannot be opened or
 * synced, e.g. on some network filesystems, is not an error); any write error (disk full,
 * file-size limit) removes the temp file, leaves <path> untouched and exits.
 * Writers never leave a half-written file under the real name.
 *
 * Text for people and logs: utf8_valid_len (RFC 3629 validation, used by every JSON string writer), json_number
 * (every JSON number: null when not finite),
 * fwrite_terminal_safe (control characters escaped before they reach a terminal) and absolute_path (paths in
 * messages made absolute).
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* length (1..4) of the valid UTF-8 sequence starting at s[0] (n >= 1 bytes available), or 0 if s[0] does not start
 * one (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF); used by every JSON and terminal writer */
static inline int utf8_valid_len(const unsigned char* s, size_t n) {
    unsigned char c = s[0];
    int len;
    unsigned int cp;
    if (c < 0x80) { return 1; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else { return 0; }
    if ((size_t)len > n) { return 0; }
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { return 0; }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) { return 0; }
    if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) { return 0; }
    return len;
}

/* a double as a JSON number into buf (RFC 8259 has no spelling for NaN or infinity: those are written as null; %.9g
 * otherwise, enough digits to give a float back exactly); returns buf. Every number the log holds goes through it
 * (logger_json_number, llmc/logger.h), nested ones included. */
static inline const char* json_number(char* buf, size_t cap, double v) {
    if (!isfinite(v)) { snprintf(buf, cap, "null"); }
    else { snprintf(buf, cap, "%.9g", v); }
    return buf;
}

/* Writes n bytes of text to a terminal stream f so that no byte can act on the terminal: newline and tab pass,
 * every other C0 control (ESC, BEL, CR, BS, ...) and DEL are written as the four characters \xHH, the C1
 * controls U+0080..U+009F (UTF-8 C2 80..C2 9F) as \u00HH, a byte that does not start valid UTF-8 as \xHH; all
 * other valid UTF-8 passes unchanged. The exact text belongs in the log (JSON-escaped there), not on screen. */
static inline void fwrite_terminal_safe(FILE* f, const char* text, size_t n) {
    const unsigned char* s = (const unsigned char*)text;
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        int len = utf8_valid_len(s + i, n - i);
        if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7F)) { fputc(c, f); i++; }
        else if (len == 0 || c < 0x20 || c == 0x7F) { fprintf(f, "\\x%02x", (unsigned)c); i++; }
        else if (len == 2 && c == 0xC2 && s[i + 1] < 0xA0) { fprintf(f, "\\u%04x", (unsigned)s[i + 1]); i += 2; }
        else { fwrite(s + i, 1, (size_t)len, f); i += (size_t)len; }
    }
}

/* `path` made absolute for messages (the current directory prepended to a relative path; not resolved further)
 * into out (cap bytes, truncated to fit); returns out */
static inline const char* absolute_path(const char* path, char* out, size_t cap) {
    char cwd[1024];
    if (path[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL) { snprintf(out, cap, "%s", path); }
    else { snprintf(out, cap, "%s/%s", cwd, path[0] == '.' && path[1] == '/' ? path + 2 : path); }
    return out;
}

/* prints "error: <formatted message>  [file:line]" and exits with status 1 */
#define FATAL(...) fatal_error_at(__FILE__, __LINE__, __VA_ARGS__)

static inline void fatal_error_at(const char* file, int line, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "  [%s:%d]\n", file, line);
    va_end(ap);
    exit(EXIT_FAILURE);
}

/* Parses `s` as a decimal integer in [lo, hi]: ASCII digits only (a leading '-' only when lo < 0), nothing before or
 * after them, no overflow. Returns 1 with the value in *out, or 0 (empty, not a number, trailing text, out of
 * range). For every number the trainer reads outside its flag table (environment variables, ports in a spec) so
 * that "abc" is not 0 and 99999 is not a port (flags: llmc/args.h). */
static inline int parse_int_range(const char* s, long long lo, long long hi, long long* out) {
    const char* p = s;
    int neg = 0;
    if (*p == '-' && lo < 0) { neg = 1; p++; }
    if (*p < '0' || *p > '9') { return 0; }
    long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (9223372036854775807LL - (*p - '0')) / 10) { return 0; } /* would overflow */
        v = v * 10 + (*p - '0');
    }
    if (*p != '\0') { return 0; }
    if (neg) { v = -v; }
    if (v < lo || v > hi) { return 0; }
    *out = v;
    return 1;
}

/* The job's rank as the launcher sets it in the environment (Open MPI, PMI, Slurm), before MPI starts: the first
 * rank variable set, counted only when its size variable (OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS) says the job
 * has more than one process and the rank is inside it (PMIx sets no size variable: PMIX_RANK alone). 0 when none is
 * set (one process), or the values do not agree (a stale SLURM_PROCID left in a shell): then this process prints
 * its errors rather than leaving them to another */
static inline int launcher_rank(void) {
    const char* names[4][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"},
                               {"PMIX_RANK", NULL}, {"SLURM_PROCID", "SLURM_NTASKS"}};
    for (int i = 0; i < 4; i++) {
        const char* v = getenv(names[i][0]);
        if (!v || !v[0]) { continue; }
        long long r = 0, n = 0;
        if (!parse_int_range(v, 0, 1 << 30, &r)) { return 0; }
        if (!names[i][1]) { return (int)r; }
        const char* w = getenv(names[i][1]);
        return w && parse_int_range(w, 2, 1 << 30, &n) && r < n ? (int)r : 0;
    }
    return 0;
}

/* FATAL for an error every process of a job finds alike (its flags, the output directory, a checkpoint's header):
 * launcher rank 0 prints the one line and exits; the others wait a grace period (FATAL_ALL_GRACE_S), by which the
 * launcher has ended the job because rank 0 failed (a signal ends the wait: exit without a line), so a job prints one
 * line, not one per process. A process still alive after it (no rank 0 ended the job: the launcher variables were
 * not this job's) prints the line too, so an error is late but never silent. */
#ifndef FATAL_ALL_GRACE_S
#define FATAL_ALL_GRACE_S 30 /* seconds; a test defines it shorter */
#endif
#define FATAL_ALL(...) fatal_all_at(__FILE__, __LINE__, __VA_ARGS__)
static inline void fatal_all_at(const char* file, int line, const char* fmt, ...) {
    if (launcher_rank() > 0) {
        fflush(stdout);
        /* a signal during the wait (the launcher's SIGTERM, which the preemption handler catches) ends it early: the
         * job is being ended, and rank 0 has printed the line */
        if (sleep(FATAL_ALL_GRACE_S) > 0) { exit(EXIT_FAILURE); }
    }
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fatal_error_at(file, line, "%s", msg);
}

/* ---------------------------------------------------------------- memory */

/* malloc that exits with the buffer name and byte count on failure */
static inline void* malloc_check_at(size_t bytes, const char* what, const char* file, int line) {
    void* p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fatal_error_at(file, line, "out of host memory allocating %s (%zu bytes)", what, bytes);
    }
    return p;
}
#define malloc_check(bytes, what) malloc_check_at((bytes), (what), __FILE__, __LINE__)

static inline void* calloc_check_at(size_t n, size_t size, const char* what, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        fatal_error_at(file, line, "out of host memory allocating %s (%zu bytes)", what, n * size);
    }
    return p;
}
#define calloc_check(n, size, what) calloc_check_at((n), (size), (what), __FILE__, __LINE__)

/* ---------------------------------------------------------------- files */

/* what a non-regular file is, for messages ("a FIFO", "a directory", ...) */
static inline const char* file_kind_name(mode_t m) {
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* Opens `path` like open(path, flags, mode) for a file the trainer reads or writes in place (a model, shard,
 * tokenizer, state or secret file, the log), but never blocks in open(): O_NONBLOCK is added (opening a FIFO waits
 * for the other end forever; a device may wait too), the descriptor is fstat'ed and anything but a regular file is
 * refused, then O_NONBLOCK is cleared (it has no effect on regular files anyway). O_CLOEXEC is added. Returns the
 * descriptor, or -1 with errno set and the reason in why[cap] (strerror, or e.g. "not a regular file but a FIFO").
 * Every reader of the trainer opens its files through this function or fopen_regular (llmc/README.md, "Layers":
 * errors). */
static inline int open_regular(const char* path, int flags, unsigned mode, char* why, size_t cap) {
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, (mode_t)mode);
    struct stat st;
    if (fd < 0) {
        int err = errno;
        /* a FIFO opened for writing without a reader fails with ENXIO: name what it is */
        if (err == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
            snprintf(why, cap, "not a regular file but %s", file_kind_name(st.st_mode));
        } else {
            snprintf(why, cap, "%s", strerror(err));
        }
        errno = err;
        return -1;
    }
    int fl = -1, err = 0;
    if (fstat(fd, &st) != 0) { err = errno; snprintf(why, cap, "%s", strerror(err)); }
    else if (!S_ISREG(st.st_mode)) { err = EINVAL; snprintf(why, cap, "not a regular file but %s", file_kind_name(st.st_mode)); }
    else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        err = errno;
        snprintf(why, cap, "%s", strerror(err));
    }
    if (err != 0) {
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* fopen(path, mode) through open_regular (mode "r", "w" or "a", optionally with "b" and "+"; files created 0666 less
 * the umask, as fopen does): NULL with errno set and the reason in why[cap] when it cannot be opened or is not a
 * regular file */
static inline FILE* fopen_regular(const char* path, const char* mode, char* why, size_t cap) {
    int plus = strchr(mode, '+') != NULL;
    int flags = mode[0] == 'r' ? (plus ? O_RDWR : O_RDONLY)
                : mode[0] == 'w' ? (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC
                : mode[0] == 'a' ? (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND : -1;
    if (flags == -1) { snprintf(why, cap, "bad fopen mode '%s'", mode); errno = EINVAL; return NULL; }
    int fd = open_regular(path, flags, 0666, why, cap);
    if (fd < 0) { return NULL; }
    FILE* f = fdopen(fd, mode);
    if (f == NULL) {
        int err = errno;
        snprintf(why, cap, "%s", strerror(err));
        close(fd);
        errno = err;
    }
    return f;
}

/* fopen_regular that exits naming the file, the mode and the reason */
static inline FILE* fopen_check_at(const char* path, const char* mode, const char* file, int line) {
    char why[128];
    FILE* f = fopen_regular(path, mode, why, sizeof(why));
    if (f == NULL) {
        fatal_error_at(file, line, "cannot open file '%s' (mode %s): %s", path, mode, why);
    }
    return f;
}
#define fopen_check(path, mode) fopen_check_at((path), (mode), __FILE__, __LINE__)

/* reads exactly `count` items or exits naming the file and what was expected */
static inline void fread_check_at(void* ptr, size_t size, size_t count, FILE* f, const char* path,
                                  const char* file, int line) {
    size_t got = fread(ptr, size, count, f);
    if (got != count) {
        fatal_error_at(file, line, "file '%s' is truncated: expected %zu more items of %zu bytes, read %zu%s",
                       path, count, size, got, ferror(f) ? " (read error)" : "");
    }
}
#define fread_check(ptr, size, count, f, path) fread_check_at((ptr), (size), (count), (f), (path), __FILE__, __LINE__)

static inline void fclose_check_at(FILE* f, const char* path, const char* file, int line) {
    if (fclose(f) != 0) {
        fatal_error_at(file, line, "cannot close file '%s': %s", path, strerror(errno));
    }
}
#define fclose_check(f, path) fclose_check_at((f), (path), __FILE__, __LINE__)

/* seconds on the monotonic clock (CLOCK_MONOTONIC; for intervals: step times, collective times) */
static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* size of a file in bytes, or -1 if it cannot be stat'ed */
static inline long long file_size_bytes(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) { return -1; }
    return (long long)st.st_size;
}

static inline int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static inline int dir_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* creates `path` (one level) if missing; exits if it cannot be created or is not a writable directory */
static inline void ensure_dir_writable_at(const char* path, const char* file, int line) {
    if (!dir_exists(path)) {
        if (mkdir(path, 0755) != 0) {
            fatal_error_at(file, line, "cannot create output directory '%s': %s", path, strerror(errno));
        }
    }
    if (access(path, W_OK | X_OK) != 0) {
        fatal_error_at(file, line, "output directory '%s' is not writable: %s", path, strerror(errno));
    }
}
#define ensure_dir_writable(path) ensure_dir_writable_at((path), __FILE__, __LINE__)

/* ---------------------------------------------------------------- atomic writes */

/* fsyncs the directory that holds `path` (so a rename or unlink in it survives a crash or power loss before what
 * the program does next); best effort: a directory that cannot be opened or synced is left as it is */
static inline void fsync_parent_dir(const char* path) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash == dir) {
        dir[1] = '\0';
    } else if (slash) {
        *slash = '\0';
    } else {
        snprintf(dir, sizeof(dir), ".");
    }
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
}

typedef struct {
    FILE* f;
    char path[1024];      /* final name */
    char tmp_path[1040];  /* path + ".tmp" */
} AtomicFile;

/* opens path.tmp for writing, created afresh with permissions `mode` less the umask (0666: a data file; 0600: a file
 * only this user may read, from its first moment): a leftover path.tmp is removed first and the new one is created
 * with O_EXCL | O_NOFOLLOW, so whatever stood there (a FIFO, a symlink, a file of other permissions) is never
 * opened; exits if it cannot be created */
static inline void atomic_file_open_mode_at(AtomicFile* af, const char* path, unsigned mode, const char* file, int line) {
    if (strlen(path) >= sizeof(af->path)) {
        fatal_error_at(file, line, "path too long (%zu bytes, max %zu): '%s'", strlen(path), sizeof(af->path) - 1, path);
    }
#ifdef SIGXFSZ
    /* exceeding a file-size limit must fail the write (EFBIG), not kill the process */
    signal(SIGXFSZ, SIG_IGN);
#endif
    strcpy(af->path, path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp", path);
    (void)unlink(af->tmp_path); /* a leftover of an interrupted write (or anything else): never opened */
    int fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
    af->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (af->f == NULL) {
        int err = errno;
        if (fd >= 0) { close(fd); unlink(af->tmp_path); }
        fatal_error_at(file, line, "cannot create file '%s': %s", af->tmp_path, strerror(err));
    }
}
#define atomic_file_open(af, path) atomic_file_open_mode_at((af), (path), 0666, __FILE__, __LINE__)
/* a file that holds a secret (the NCCL id, llmc/comm_bootstrap.h): mode 0600 from its first moment, never widened */
#define atomic_file_open_private(af, path) atomic_file_open_mode_at((af), (path), 0600, __FILE__, __LINE__)

/* removes the temp file and exits with a message naming the file and the errno text */
static inline void atomic_file_fail_at(AtomicFile* af, const char* what, int err, const char* file, int line) {
    if (af->f) { fclose(af->f); af->f = NULL; }
    remove(af->tmp_path);
    fatal_error_at(file, line, "%s '%s' failed: %s (temp file removed, '%s' left unchanged)",
                   what, af->tmp_path, strerror(err), af->path);
}

/* writes count items; on any error removes the temp file and exits */
static inline void atomic_file_write_at(AtomicFile* af, const void* ptr, size_t size, size_t count,
                                        const char* file, int line) {
    if (count == 0) { return; }
    errno = 0;
    size_t wrote = fwrite(ptr, size, count, af->f);
    if (wrote != count) {
        atomic_file_fail_at(af, "writing", errno ? errno : EIO, file, line);
    }
}
#define atomic_file_write(af, ptr, size, count) atomic_file_write_at((af), (ptr), (size), (count), __FILE__, __LINE__)

/* flush + fsync + close + rename over the real name; on any error removes the temp file and exits */
static inline void atomic_file_commit_at(AtomicFile* af, const char* file, int line) {
    errno = 0;
    if (fflush(af->f) != 0) { atomic_file_fail_at(af, "flushing", errno ? errno : EIO, file, line); }
    if (fsync(fileno(af->f)) != 0) { atomic_file_fail_at(af, "syncing", errno ? errno : EIO, file, line); }
    if (fclose(af->f) != 0) { af->f = NULL; atomic_file_fail_at(af, "closing", errno ? errno : EIO, file, line); }
    af->f = NULL;
    if (rename(af->tmp_path, af->path) != 0) {
        int err = errno;
        remove(af->tmp_path);
        fatal_error_at(file, line, "cannot rename '%s' to '%s': %s", af->tmp_path, af->path, strerror(err));
    }
    fsync_parent_dir(af->path); /* the rename itself is durable before anything that depends on it */
}
#define atomic_file_commit(af) atomic_file_commit_at((af), __FILE__, __LINE__)

/* ---------------------------------------------------------------- misc */

/* FNV-1a 64-bit hash of a byte buffer, chained through `h` (start with 14695981039346656037) */
static inline uint64_t fnv1a64(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}

#endif /* LLMC_UTILS_H */
