/*
 * llmc/logger.h -- the JSONL training log DIR/log.jsonl (llmc/README.md, "Command line and log").
 *
 * One JSON object per line, always starting with "kind" and "step":
 *   {"kind":"train","step":12,"loss":3.1,"lr":1e-4}
 * Only process rank 0 writes; on other ranks every call is a no-op. Each line is formatted in memory and written
 * whole with write(2) as soon as it is logged, so a crash loses at most the line being written, and a write that
 * fails (disk full, file-size limit) is cut back: the log never ends in a torn line (logger_write_line).
 *
 * logger_init(lg, output_dir, process_rank, append):
 *   output_dir NULL or "" -> logging disabled (all calls no-ops). Otherwise (rank 0) the
 *   directory is created if missing (exits if it cannot be created or written) and
 *   DIR/log.jsonl is opened: append != 0 keeps existing lines (resume; call
 *   logger_truncate_after_step first), append == 0 starts a new empty log; a non-empty log already
 *   there (an earlier run without a checkpoint to resume) is never truncated: it is renamed to the
 *   first free DIR/log.N.jsonl (N = 1, 2, ...) and one line on stdout names both paths
 *   (logger_rotate). Open or rename failure -> FATAL naming the path.
 * logger_log(lg, kind, step, extra_json_fields): extra_json_fields is a comma-separated list of
 *   already-formatted JSON members without braces (e.g. "\"loss\":3.1,\"lr\":1e-4") or NULL/"".
 *   The caller is responsible for it being valid JSON (numbers must be finite: use
 *   logger_json_number to format floats, it writes null for NaN/inf). kind is escaped.
 * logger_log_text(lg, kind, step, key, text): one string member, escaped per RFC 8259 section 7:
 *   '"' and '\\' backslash-escaped; \b \f \n \r \t; other bytes < 0x20 and 0x7F as \u00XX;
 *   bytes >= 0x80 passed through when they form valid UTF-8 (RFC 3629: no overlongs, no
 *   surrogates, <= U+10FFFF), otherwise each invalid byte becomes \ufffd.
 * logger_truncate_after_step(path, step): rewrites `path` atomically (path.tmp + rename) keeping
 *   only lines whose top-level "step" is < step, "train" lines of exactly `step`, lines of kind
 *   "config", and lines without a step (val/sample lines of `step` are dropped: the resumed run
 *   logs them again); an unterminated last line (a write cut short by a crash) is dropped. A missing file is
 *   a no-op. Used before appending on resume, so lines logged after the
 *   checkpoint by the crashed run are not duplicated; returns the number of complete lines dropped (the caller
 *   says so). Read/write errors -> FATAL.
 * logger_free(lg): closes the file (FATAL on close error).
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

typedef struct {
    FILE* file;        /* NULL when disabled or not rank 0 */
    char path[1024];   /* DIR/log.jsonl ("" when disabled) */
} Logger;

/* writes `text` (n bytes) as a quoted JSON string to f; see header comment for the rules */
static inline void logger_write_json_string(FILE* f, const char* text, size_t n) {
    const unsigned char* s = (const unsigned char*)text;
    fputc('"', f);
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c == '"') { fputs("\\\"", f); i++; }
        else if (c == '\\') { fputs("\\\\", f); i++; }
        else if (c == '\n') { fputs("\\n", f); i++; }
        else if (c == '\r') { fputs("\\r", f); i++; }
        else if (c == '\t') { fputs("\\t", f); i++; }
        else if (c == '\b') { fputs("\\b", f); i++; }
        else if (c == '\f') { fputs("\\f", f); i++; }
        else if (c < 0x20 || c == 0x7F) { fprintf(f, "\\u%04x", (unsigned)c); i++; }
        else if (c < 0x80) { fputc((int)c, f); i++; }
        else {
            int len = utf8_valid_len(s + i, n - i);
            if (len == 0) { fputs("\\ufffd", f); i++; }
            else { fwrite(s + i, 1, (size_t)len, f); i += (size_t)len; }
        }
    }
    fputc('"', f);
}

/* formats a float as a JSON number into buf ("null" for NaN/inf; json_number, llmc/utils.h); returns buf */
static inline const char* logger_json_number(char* buf, size_t cap, double v) { return json_number(buf, cap, v); }

/* Renames a non-empty `path` (DIR/log.jsonl) to the first free DIR/log.N.jsonl and says so in one line; no-op
 * for a missing or empty file. Rename failure -> FATAL naming both paths. */
static inline void logger_rotate(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size == 0) { return; }
    size_t n = strlen(path);
    const char* ext = ".jsonl";
    size_t stem = n >= strlen(ext) && strcmp(path + n - strlen(ext), ext) == 0 ? n - strlen(ext) : n;
    char kept[1100];
    for (int i = 1;; i++) {
        snprintf(kept, sizeof(kept), "%.*s.%d%s", (int)stem, path, i, ext);
        if (!file_exists(kept)) { break; }
    }
    if (rename(path, kept) != 0) {
        FATAL("cannot keep the earlier log '%s' as '%s': %s (nothing was overwritten)", path, kept, strerror(errno));
    }
    printf("log: an earlier log without a checkpoint to resume was kept as %s; this run writes a new %s\n", kept, path);
}

/* see header comment */
static inline void logger_init(Logger* lg, const char* output_dir, int process_rank, int append) {
    lg->file = NULL;
    lg->path[0] = '\0';
    if (output_dir == NULL || output_dir[0] == '\0' || process_rank != 0) { return; }
    if (strlen(output_dir) + strlen("/log.jsonl") >= sizeof(lg->path)) {
        FATAL("output directory path too long (%zu bytes, max %zu): '%s'", strlen(output_dir),
              sizeof(lg->path) - 1 - strlen("/log.jsonl"), output_dir);
    }
    ensure_dir_writable(output_dir);
#ifdef SIGXFSZ
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit must fail the write (EFBIG, cut back), not kill the process */
#endif
    snprintf(lg->path, sizeof(lg->path), "%s/log.jsonl", output_dir);
    if (!append) { logger_rotate(lg->path); }
    lg->file = fopen_check(lg->path, append ? "ab" : "wb");
}

/* Appends one complete line (the memory stream m, which the caller has filled; closed here) to the log with write(2):
 * all of it or nothing. A write that fails (disk full, the file-size limit) is cut back to the log's length before the
 * line (ftruncate), so the log ends with its last complete line, and the run stops with one error line. */
static inline void logger_write_line(Logger* lg, FILE* m, char** buf, size_t* n) {
    if (fclose(m) != 0 || *buf == NULL) { FATAL("out of host memory formatting a line of log file '%s'", lg->path); }
    int fd = fileno(lg->file);
    struct stat st;
    off_t before = fstat(fd, &st) == 0 ? st.st_size : (off_t)-1;
    size_t done = 0;
    while (done < *n) {
        ssize_t k = write(fd, *buf + done, *n - done);
        if (k < 0 && errno == EINTR) { continue; }
        if (k <= 0) {
            int err = k < 0 ? errno : EIO;
            int cut = before >= 0 && ftruncate(fd, before) == 0;
            free(*buf);
            FATAL("cannot write log file '%s': %s (%s)", lg->path, strerror(err),
                  cut ? "the incomplete line was removed: the log ends with its last complete line"
                      : "the last line may be incomplete");
        }
        done += (size_t)k;
    }
    free(*buf);
}

/* opens a memory stream (*buf, *n) holding the start of a log line, {"kind":kind,"step":step (no comma after);
 * FATAL with one line when out of host memory */
static inline FILE* logger_line_begin(Logger* lg, const char* kind, int step, char** buf, size_t* n) {
    FILE* m = open_memstream(buf, n);
    if (m == NULL) { FATAL("out of host memory formatting a line of log file '%s'", lg->path); }
    fputs("{\"kind\":", m);
    logger_write_json_string(m, kind ? kind : "", kind ? strlen(kind) : 0);
    fprintf(m, ",\"step\":%d", step);
    return m;
}

/* writes {"kind":kind,"step":step[,extra]} + newline, whole (logger_write_line); see header comment */
static inline void logger_log(Logger* lg, const char* kind, int step, const char* extra_json_fields) {
    if (lg->file == NULL) { return; }
    char* buf = NULL;
    size_t n = 0;
    FILE* m = logger_line_begin(lg, kind, step, &buf, &n);
    if (extra_json_fields && extra_json_fields[0]) { fprintf(m, ",%s", extra_json_fields); }
    fputs("}\n", m);
    logger_write_line(lg, m, &buf, &n);
}

/* like logger_log_text but with an explicit byte length (text may contain NUL bytes) */
static inline void logger_log_text_n(Logger* lg, const char* kind, int step, const char* key,
                                     const char* text, size_t n) {
    if (lg->file == NULL) { return; }
    char* buf = NULL;
    size_t len = 0;
    FILE* m = logger_line_begin(lg, kind, step, &buf, &len);
    fputc(',', m);
    logger_write_json_string(m, key ? key : "text", key ? strlen(key) : 4);
    fputc(':', m);
    logger_write_json_string(m, text ? text : "", text ? n : 0);
    fputs("}\n", m);
    logger_write_line(lg, m, &buf, &len);
}

/* {"kind":kind,"step":step,key:"<escaped text>"}; see header comment */
static inline void logger_log_text(Logger* lg, const char* kind, int step, const char* key, const char* text) {
    logger_log_text_n(lg, kind, step, key, text, text ? strlen(text) : 0);
}

/* scans one JSON line for top-level members "step" (number) and "kind" (string);
 * sets has_step, step and is_config. Strings are skipped with escape handling, so
 * "step" inside a text value is never mistaken for the key. */
static inline void logger_scan_line(const char* line, size_t n, int* has_step, long long* step, int* is_config) {
    *has_step = 0; *is_config = 0; *step = 0;
    int depth = 0;
    size_t i = 0;
    while (i < n) {
        char c = line[i];
        if (c == '{' || c == '[') { depth++; i++; continue; }
        if (c == '}' || c == ']') { depth--; i++; continue; }
        if (c != '"') { i++; continue; }
        size_t start = ++i; /* string content */
        while (i < n && line[i] != '"') { i += (line[i] == '\\') ? 2 : 1; }
        size_t end = i < n ? i : n;
        i++;
        if (depth != 1) { continue; }
        size_t j = i;
        while (j < n && (line[j] == ' ' || line[j] == '\t')) { j++; }
        if (j >= n || line[j] != ':') { continue; } /* a value, not a key */
        j++;
        while (j < n && (line[j] == ' ' || line[j] == '\t')) { j++; }
        size_t klen = end - start;
        if (klen == 4 && memcmp(line + start, "step", 4) == 0) {
            char* stop = NULL;
            char buf[32];
            size_t m = 0;
            while (j + m < n && m < sizeof(buf) - 1 && (line[j + m] == '-' || (line[j + m] >= '0' && line[j + m] <= '9'))) {
                buf[m] = line[j + m]; m++;
            }
            buf[m] = '\0';
            long long v = strtoll(buf, &stop, 10);
            if (m > 0 && stop != buf) { *has_step = 1; *step = v; }
        } else if (klen == 4 && memcmp(line + start, "kind", 4) == 0) {
            if (j + 8 <= n && memcmp(line + j, "\"config\"", 8) == 0) { *is_config = 1; }
        }
        i = j;
    }
}

/* see header comment */
static inline int logger_truncate_after_step(const char* path, int step) {
    if (!file_exists(path)) { return 0; }
    int dropped = 0;
    FILE* in = fopen_check(path, "rb");
    AtomicFile af;
    atomic_file_open(&af, path);
    size_t cap = 4096, len = 0;
    char* line = (char*)malloc_check(cap, "log line buffer");
    int c;
    int done = 0;
    while (!done) {
        len = 0;
        while ((c = fgetc(in)) != EOF && c != '\n') {
            if (len + 1 >= cap) {
                cap *= 2;
                char* bigger = (char*)realloc(line, cap);
                if (bigger == NULL) { FATAL("out of host memory reading log file '%s' (%zu bytes line)", path, cap); }
                line = bigger;
            }
            line[len++] = (char)c;
        }
        if (c == EOF) {
            done = 1;
            if (ferror(in)) { FATAL("cannot read log file '%s': %s", path, strerror(errno)); }
            break; /* an unterminated last line is a write cut short by a crash: dropped */
        }
        int has_step, is_config;
        long long s;
        logger_scan_line(line, len, &has_step, &s, &is_config);
        line[len] = '\0';
        int is_train = strstr(line, "\"kind\":\"train\"") != NULL;
        /* step S's train line was logged before checkpoint S; its val/sample lines are logged again by the
         * resumed run, which evaluates and samples at step S first */
        if (is_config || !has_step || s < (long long)step || (s == (long long)step && is_train)) {
            atomic_file_write(&af, line, 1, len);
            atomic_file_write(&af, "\n", 1, 1);
        } else {
            dropped++;
        }
    }
    free(line);
    fclose_check(in, path);
    atomic_file_commit(&af);
    return dropped;
}

/* closes the log file (no-op when disabled) */
static inline void logger_free(Logger* lg) {
    if (lg->file) { fclose_check(lg->file, lg->path); lg->file = NULL; }
}

#endif /* LLMC_LOGGER_H */
