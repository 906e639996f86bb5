/*
 * llmc/args.h -- table-driven command-line parsing (getopt_long_only, glibc/POSIX getopt.h).
 *
 * The trainer describes every flag once, in an ArgSpec table; parsing, range checks, --help
 * and the printed/logged configuration are all generated from that table, so the help text
 * cannot drift from the parser (llmc/README.md, "Command line and log").
 *
 * Every spec is reachable as -<short>, -<long>, --<long> (also as --<short>), with the value
 * either as the next argument or after '=':  -b 4, --batch-size 4, --batch-size=4, -ge 1, -nk 2.
 * Names must match exactly (no abbreviations: "-n" is the n flag, "-nk" the nk flag, and
 * "--batch" is an error suggesting --batch-size). -h / --help prints the help. One spec may take the short name "h"
 * (llm.c's -h 1, evaluation): then "-h VALUE" and "-h=VALUE" set it, and a bare -h (no value word after it: the end
 * of argv or another flag next) still prints the help, as --help always does.
 *
 * args_parse(specs, n_specs, argc, argv, program_name, usage_header):
 *   Stores each given value through spec.dest (int*, float*, or char** pointing into argv).
 *   A flag given more than once takes its last value (so a script may override defaults it passes first: the
 *   tests' and benchmarks' "${DEFAULTS[@]}" -x 8), each value checked; that is never silent: one line per such flag
 *   on stdout, "note: flag -x, --max-steps was given 2 times; the last value, 8, is used" (launcher rank 0 only).
 *   Returns 0 normally; 1 if -h/--help was given (help printed to stdout; caller exits 0).
 *   On any user error prints ONE line to stderr ("error: ...") and exits with status 1 (under a launcher only its
 *   rank 0 prints: FATAL_ALL in llmc/utils.h, every process has the same flags):
 *   unknown or misspelled flag (with the closest known flag if one is near), missing value,
 *   empty numeric value, non-numeric value or trailing garbage ("4x"), non-finite float, int overflow,
 *   value outside [min_value, max_value] (the bounds are printed), stray positional arguments.
 *   A malformed table (duplicate names, "help" or a long name "h" used by a spec, NULL dest) is a programming
 *   error and also exits via FATAL.
 * args_print_help(specs, n, program_name, usage_header, out): one line per flag,
 *   "  -b, --batch-size <int>   micro-batch size per process (default: 4; range 1..inf)",
 *   defaults read from the current values at dest (NULL string: "none", empty string: '').
 *   String values may be empty ("-o ''"); what an empty string means is the caller's choice.
 * args_config_json(specs, n): malloc'd string of JSON members "\"batch-size\":4,..." (no braces;
 *   strings escaped per RFC 8259, invalid UTF-8 bytes as \ufffd) for the log's config line; caller frees.
 * args_flag_lines(specs, n): malloc'd "name<TAB>JSON value" lines, the flags a checkpoint records.
 *
 * Header-only: static inline functions, no globals (getopt's own optind/optarg/opterr are libc's).
 */
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

typedef enum { ARG_INT, ARG_FLOAT, ARG_STRING } ArgType;

typedef struct {
    const char* short_name; /* llm.c short form without dash: "b", "ge", "nk" (may be NULL) */
    const char* long_name;  /* "batch-size" (required) */
    ArgType type;
    void* dest;             /* int*, float*, or char** (string) */
    double min_value;       /* inclusive bounds for numbers; -INFINITY/INFINITY for none */
    double max_value;
    const char* help;
} ArgSpec;

#define ARGS_NAME_MAX 64

static inline const char* args_type_name(ArgType t) {
    return t == ARG_INT ? "int" : t == ARG_FLOAT ? "float" : "string";
}

/* Levenshtein distance between a and b (each truncated to ARGS_NAME_MAX chars) */
static inline int args_edit_distance(const char* a, const char* b) {
    int row[ARGS_NAME_MAX + 1];
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > ARGS_NAME_MAX) { la = ARGS_NAME_MAX; }
    if (lb > ARGS_NAME_MAX) { lb = ARGS_NAME_MAX; }
    for (int j = 0; j <= lb; j++) { row[j] = j; }
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = (a[i - 1] == b[j - 1]) ? 0 : 1;
            int best = diag + cost;
            if (up + 1 < best) { best = up + 1; }
            if (row[j - 1] + 1 < best) { best = row[j - 1] + 1; }
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* index of the spec whose short or long name is closest to `name` (prefixes count as close), or -1 */
static inline int args_closest(const ArgSpec* specs, int n, const char* name) {
    int best = -1, best_d = INT_MAX;
    size_t ln = strlen(name);
    for (int i = 0; i < n; i++) {
        const char* names[2] = { specs[i].short_name, specs[i].long_name };
        for (int k = 0; k < 2; k++) {
            if (names[k] == NULL) { continue; }
            int d = args_edit_distance(name, names[k]);
            if (ln >= 3 && strncmp(names[k], name, ln) == 0) { d = 1; } /* abbreviation */
            int len = (int)strlen(names[k]);
            int limit = len <= 3 ? 1 : (len <= 8 ? 2 : 3);
            if (d <= limit && d < best_d) { best_d = d; best = i; }
        }
    }
    return best;
}

/* finds the spec with exactly this short or long name, or -1 */
static inline int args_find_exact(const ArgSpec* specs, int n, const char* name) {
    for (int i = 0; i < n; i++) {
        if ((specs[i].short_name && strcmp(specs[i].short_name, name) == 0) ||
            strcmp(specs[i].long_name, name) == 0) { return i; }
    }
    return -1;
}

/* "-b, --batch-size" (or "--batch-size") into buf */
static inline const char* args_flag_label(const ArgSpec* s, char* buf, size_t cap) {
    if (s->short_name) { snprintf(buf, cap, "-%s, --%s", s->short_name, s->long_name); }
    else { snprintf(buf, cap, "--%s", s->long_name); }
    return buf;
}

/* writes the current value at dest into buf */
static inline const char* args_value_string(const ArgSpec* s, char* buf, size_t cap) {
    if (s->type == ARG_INT) { snprintf(buf, cap, "%d", *(const int*)s->dest); }
    else if (s->type == ARG_FLOAT) { snprintf(buf, cap, "%g", (double)*(const float*)s->dest); }
    else {
        const char* v = *(char* const*)s->dest;
        if (v == NULL) { snprintf(buf, cap, "none"); }
        else if (v[0] == '\0') { snprintf(buf, cap, "''"); }
        else { snprintf(buf, cap, "%s", v); }
    }
    return buf;
}

/* the spec whose short name is "h" (it takes "-h VALUE"; a bare -h is help), or -1 */
static inline int args_h_spec(const ArgSpec* specs, int n) {
    for (int i = 0; i < n; i++) { if (specs[i].short_name && strcmp(specs[i].short_name, "h") == 0) { return i; } }
    return -1;
}

/* see header comment */
static inline void args_print_help(const ArgSpec* specs, int n, const char* program_name,
                                   const char* usage_header, FILE* out) {
    char label[2 * ARGS_NAME_MAX + 32], value[256], range[96], lo[40], hi[40];
    fprintf(out, "usage: %s [options]\n", program_name ? program_name : "program");
    if (usage_header && usage_header[0]) { fprintf(out, "%s\n", usage_header); }
    fprintf(out, "options (each also accepted as -<long name>; values as '-x V' or '--name=V'):\n");
    int width = 0;
    for (int i = 0; i < n; i++) {
        args_flag_label(&specs[i], label, sizeof(label));
        int w = (int)strlen(label) + 3 + (int)strlen(args_type_name(specs[i].type));
        if (w > width) { width = w; }
    }
    for (int i = 0; i < n; i++) {
        const ArgSpec* s = &specs[i];
        char full[sizeof(label) + 16];
        snprintf(full, sizeof(full), "%s <%s>", args_flag_label(s, label, sizeof(label)), args_type_name(s->type));
        range[0] = '\0';
        if (s->type != ARG_STRING && (isfinite(s->min_value) || isfinite(s->max_value))) {
            if (isfinite(s->min_value)) { snprintf(lo, sizeof(lo), "%g", s->min_value); } else { snprintf(lo, sizeof(lo), "-inf"); }
            if (isfinite(s->max_value)) { snprintf(hi, sizeof(hi), "%g", s->max_value); } else { snprintf(hi, sizeof(hi), "inf"); }
            snprintf(range, sizeof(range), "; range %s..%s", lo, hi);
        }
        fprintf(out, "  %-*s  %s (default: %s%s)\n", width, full, s->help ? s->help : "",
                args_value_string(s, value, sizeof(value)), range);
    }
    fprintf(out, "  %-*s  %s\n", width, args_h_spec(specs, n) >= 0 ? "--help, -h" : "-h, --help",
            args_h_spec(specs, n) >= 0 ? "print this help and exit (-h with no value after it; -h VALUE sets the flag listed as -h)"
                                       : "print this help and exit");
}

/* appends bytes to a growing malloc'd buffer */
static inline void args_buf_append(char** buf, size_t* len, size_t* cap, const char* s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap : 256);
        while (*len + n + 1 > nc) { nc *= 2; }
        char* b = (char*)realloc(*buf, nc);
        if (b == NULL) { FATAL("out of host memory building the configuration JSON (%zu bytes)", nc); }
        *buf = b; *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
}

/* appends s as a JSON string literal (quotes, backslash and control characters escaped; a byte that does not
 * start valid UTF-8 becomes \ufffd, so the result is valid JSON and UTF-8 for any bytes) */
static inline void args_buf_append_json_string(char** buf, size_t* len, size_t* cap, const char* s) {
    args_buf_append(buf, len, cap, "\"", 1);
    size_t n = strlen(s);
    for (const unsigned char* p = (const unsigned char*)s; *p; ) {
        char esc[8];
        int k = 1;
        if (*p == '"' || *p == '\\') { esc[0] = '\\'; esc[1] = (char)*p; args_buf_append(buf, len, cap, esc, 2); }
        else if (*p < 0x20 || *p == 0x7F) { snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)*p); args_buf_append(buf, len, cap, esc, 6); }
        else if ((k = utf8_valid_len(p, n - (size_t)(p - (const unsigned char*)s))) == 0) {
            k = 1;
            args_buf_append(buf, len, cap, "\\ufffd", 6);
        }
        else { args_buf_append(buf, len, cap, (const char*)p, (size_t)k); }
        p += k;
    }
    args_buf_append(buf, len, cap, "\"", 1);
}

/* appends the current value of spec s as JSON: an int, a float (%.9g, null if not finite), a string or null */
static inline void args_buf_append_value_json(char** buf, size_t* len, size_t* cap, const ArgSpec* s) {
    char value[64];
    if (s->type == ARG_INT) {
        snprintf(value, sizeof(value), "%d", *(const int*)s->dest);
        args_buf_append(buf, len, cap, value, strlen(value));
    } else if (s->type == ARG_FLOAT) {
        json_number(value, sizeof(value), (double)*(const float*)s->dest); /* llmc/utils.h: null if not finite */
        args_buf_append(buf, len, cap, value, strlen(value));
    } else {
        const char* v = *(char* const*)s->dest;
        if (v) { args_buf_append_json_string(buf, len, cap, v); }
        else { args_buf_append(buf, len, cap, "null", 4); }
    }
}

/* see header comment; returns a malloc'd, NUL-terminated string */
static inline char* args_config_json(const ArgSpec* specs, int n) {
    char* buf = NULL;
    size_t len = 0, cap = 0;
    args_buf_append(&buf, &len, &cap, "", 0);
    for (int i = 0; i < n; i++) {
        const ArgSpec* s = &specs[i];
        if (i > 0) { args_buf_append(&buf, &len, &cap, ",", 1); }
        args_buf_append_json_string(&buf, &len, &cap, s->long_name);
        args_buf_append(&buf, &len, &cap, ":", 1);
        args_buf_append_value_json(&buf, &len, &cap, s);
    }
    return buf;
}

/* malloc'd lines "long-name<TAB>JSON value\n", one per spec (the values as in args_config_json, so no value holds
 * a newline or a tab); the record of a run's flags that a checkpoint keeps (llmc/checkpoint.h) */
static inline char* args_flag_lines(const ArgSpec* specs, int n) {
    char* buf = NULL;
    size_t len = 0, cap = 0;
    args_buf_append(&buf, &len, &cap, "", 0);
    for (int i = 0; i < n; i++) {
        args_buf_append(&buf, &len, &cap, specs[i].long_name, strlen(specs[i].long_name));
        args_buf_append(&buf, &len, &cap, "\t", 1);
        args_buf_append_value_json(&buf, &len, &cap, &specs[i]);
        args_buf_append(&buf, &len, &cap, "\n", 1);
    }
    return buf;
}

/* parses `text` as the value of spec s and stores it; exits with one line on any error */
static inline void args_store_value(const ArgSpec* s, const char* flag, const char* text, const char* program) {
    char lo[40], hi[40];
    if (isfinite(s->min_value)) { snprintf(lo, sizeof(lo), "%g", s->min_value); } else { snprintf(lo, sizeof(lo), "-inf"); }
    if (isfinite(s->max_value)) { snprintf(hi, sizeof(hi), "%g", s->max_value); } else { snprintf(hi, sizeof(hi), "inf"); }
    if (s->type == ARG_STRING) {
        *(const char**)s->dest = text; /* may be empty: the caller decides what '' means */
        return;
    }
    if (text[0] == '\0') {
        FATAL_ALL("%s: flag %s needs a <%s> value, got an empty string", program, flag, args_type_name(s->type));
    }
    char* end = NULL;
    errno = 0;
    if (s->type == ARG_INT) {
        long long v = strtoll(text, &end, 10);
        if (end == text || *end != '\0') {
            FATAL_ALL("%s: flag %s expects an integer, got '%s'", program, flag, text);
        }
        if (errno == ERANGE || v < INT_MIN || v > INT_MAX) {
            FATAL_ALL("%s: value '%s' for flag %s does not fit in a 32-bit int (allowed range %s..%s)", program, text, flag, lo, hi);
        }
        if (!((double)v >= s->min_value && (double)v <= s->max_value)) {
            FATAL_ALL("%s: value %lld for flag %s is out of range: expected %s <= value <= %s", program, v, flag, lo, hi);
        }
        *(int*)s->dest = (int)v;
    } else {
        double v = strtod(text, &end);
        if (end == text || *end != '\0') {
            FATAL_ALL("%s: flag %s expects a number, got '%s'", program, flag, text);
        }
        if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0) || fabs(v) > 3.4028234663852886e38) {
            FATAL_ALL("%s: value '%s' for flag %s is not a finite float", program, text, flag);
        }
        if (!(v >= s->min_value && v <= s->max_value)) {
            FATAL_ALL("%s: value %s for flag %s is out of range: expected %s <= value <= %s", program, text, flag, lo, hi);
        }
        *(float*)s->dest = (float)v;
    }
}

/* checks the table itself (programming errors) */
static inline void args_check_table(const ArgSpec* specs, int n) {
    for (int i = 0; i < n; i++) {
        const ArgSpec* s = &specs[i];
        if (s->long_name == NULL || s->long_name[0] == '\0' || s->dest == NULL) {
            FATAL_ALL("argument table entry %d: long_name and dest are required", i);
        }
        const char* names[2] = { s->short_name, s->long_name };
        for (int k = 0; k < 2; k++) {
            if (names[k] == NULL) { continue; }
            if (strlen(names[k]) > ARGS_NAME_MAX || strchr(names[k], '=')) {
                FATAL_ALL("argument table entry %d: bad flag name '%s' (max %d chars, no '=')", i, names[k], ARGS_NAME_MAX);
            }
            if ((k == 1 && strcmp(names[k], "h") == 0) || strcmp(names[k], "help") == 0) { /* short "h": -h VALUE */
                FATAL_ALL("argument table entry %d: flag name '%s' is reserved for help", i, names[k]);
            }
            for (int j = 0; j < i; j++) {
                if ((specs[j].short_name && strcmp(specs[j].short_name, names[k]) == 0) ||
                    strcmp(specs[j].long_name, names[k]) == 0) {
                    FATAL_ALL("argument table: flag name '%s' is used by entries %d and %d", names[k], j, i);
                }
            }
        }
    }
}

/* the getopt_long_only table of specs: each flag under its long and (if any) short name with code 1000 + its index,
 * then help/h (code 999) and a zeroed terminator; the caller frees it */
static inline struct option* args_getopt_table(const ArgSpec* specs, int n_specs) {
    struct option* opts = (struct option*)calloc_check((size_t)(2 * n_specs + 3), sizeof(struct option), "getopt table");
    int k = 0;
    for (int i = 0; i < n_specs; i++) {
        opts[k].name = specs[i].long_name; opts[k].has_arg = required_argument; opts[k].flag = NULL; opts[k].val = 1000 + i; k++;
        if (specs[i].short_name && strcmp(specs[i].short_name, "h") != 0) { /* "h": the help entry below */
            opts[k].name = specs[i].short_name; opts[k].has_arg = required_argument; opts[k].flag = NULL; opts[k].val = 1000 + i; k++;
        }
    }
    opts[k].name = "help"; opts[k].has_arg = no_argument; opts[k].flag = NULL; opts[k].val = 999; k++;
    /* a spec named "h": -h=VALUE arrives as optarg, -h VALUE is read by args_parse */
    opts[k].name = "h"; opts[k].has_arg = args_h_spec(specs, n_specs) >= 0 ? optional_argument : no_argument;
    opts[k].flag = NULL; opts[k].val = 999; k++;
    return opts; /* opts[k] stays zeroed: terminator */
}

/* The one error line for a token getopt could not take (never returns): a flag without its value, --help with a
 * value, an unknown flag (with the closest known one, if any). token is argv's word, name the flag name in it,
 * exact the spec it names exactly or -1, last whether it is argv's last word. */
static inline void args_refuse_token(const ArgSpec* specs, int n_specs, const char* program, const char* token,
                                     const char* name, int exact, int last) {
    if (exact >= 0 && strchr(token, '=') == NULL && last) {
        FATAL_ALL("%s: flag '%s' needs a <%s> value (e.g. %s VALUE)", program, token, args_type_name(specs[exact].type), token);
    }
    if (strcmp(name, "h") == 0 || strcmp(name, "help") == 0) { FATAL_ALL("%s: flag '%s' takes no value", program, token); }
    int guess = args_closest(specs, n_specs, name);
    if (guess >= 0) {
        char label[2 * ARGS_NAME_MAX + 16];
        FATAL_ALL("%s: unknown flag '%s'; did you mean %s? (see --help)", program, token,
                  args_flag_label(&specs[guess], label, sizeof(label)));
    }
    FATAL_ALL("%s: unknown flag '%s' (see --help for the list of flags)", program, token);
}

/* repeated flags are said, not silent: one note line per flag given more than once (times[i] times), on rank 0 */
static inline void args_note_repeats(const ArgSpec* specs, int n_specs, const int* times) {
    for (int i = 0; i < n_specs && launcher_rank() == 0; i++) {
        if (times[i] > 1) {
            char label[2 * ARGS_NAME_MAX + 16], value[256];
            printf("note: flag %s was given %d times; the last value, %s, is used\n",
                   args_flag_label(&specs[i], label, sizeof(label)), times[i], args_value_string(&specs[i], value, sizeof(value)));
        }
    }
}

/* see header comment */
static inline int args_parse(const ArgSpec* specs, int n_specs, int argc, char** argv,
                             const char* program_name, const char* usage_header) {
    const char* program = program_name ? program_name : (argc > 0 ? argv[0] : "program");
    args_check_table(specs, n_specs);
    struct option* opts = args_getopt_table(specs, n_specs);
    opterr = 0;
#ifdef __GLIBC__
    optind = 0; /* full re-initialisation of glibc's getopt state (parse may run more than once) */
#else
    optind = 1;
#endif
    /* "-": non-options are returned in order as code 1 (no permutation), ":" missing value -> ':' */
    const char* shortopts = "-:";
    int want_help = 0, h_spec = args_h_spec(specs, n_specs);
    int* times = (int*)calloc_check((size_t)n_specs, sizeof(int), "flag counts"); /* how often each flag was given */
    for (;;) {
        int token_index = optind < 1 ? 1 : optind;
        int longindex = -1;
        int c = getopt_long_only(argc, argv, shortopts, opts, &longindex);
        if (c == -1) { break; }
        const char* token = (token_index < argc) ? argv[token_index] : "";
        /* the flag name as typed: strip 1-2 dashes, stop at '=' */
        char name[ARGS_NAME_MAX + 2];
        const char* p = token;
        if (p[0] == '-') { p++; }
        if (p[0] == '-') { p++; }
        size_t nl = strcspn(p, "=");
        if (nl > ARGS_NAME_MAX) { nl = ARGS_NAME_MAX + 1; }
        memcpy(name, p, nl);
        name[nl] = '\0';
        if (c == 1) {
            free(opts);
            free(times);
            FATAL_ALL("%s: unexpected positional argument '%s' (all inputs are flags; see --help)", program, optarg);
        }
        if (c == 999 && strcmp(name, "h") == 0 && h_spec >= 0) { /* -h VALUE or -h=VALUE: the spec; a bare -h: help */
            const char* v = optarg;
            if (!v && optind < argc && argv[optind][0] != '-') { v = argv[optind++]; }
            if (v) { args_store_value(&specs[h_spec], "-h", v, program); times[h_spec]++; continue; }
        }
        if (c == 999 && (strcmp(name, "h") == 0 || strcmp(name, "help") == 0)) { want_help = 1; continue; }
        int exact = args_find_exact(specs, n_specs, name);
        if (c >= 1000 && exact == c - 1000) {
            char label[2 * ARGS_NAME_MAX + 16]; /* the flag as typed (-b, --batch-size), without "=value" */
            snprintf(label, sizeof(label), "%.*s", (int)(strlen(token) - strlen(p) + nl), token);
            args_store_value(&specs[exact], label, optarg ? optarg : "", program);
            times[exact]++;
            continue;
        }
        free(opts); /* error paths: missing value, unknown, abbreviated or ambiguous flag */
        free(times);
        args_refuse_token(specs, n_specs, program, token, name, exact, token_index + 1 >= argc);
    }
    int rest = optind;
    free(opts);
    if (rest < argc) {
        free(times);
        FATAL_ALL("%s: unexpected positional argument '%s' (all inputs are flags; see --help)", program, argv[rest]);
    }
    if (!want_help) { args_note_repeats(specs, n_specs, times); }
    fflush(stdout);
    free(times);
    if (want_help) {
        args_print_help(specs, n_specs, program, usage_header, stdout);
        return 1;
    }
    return 0;
}

#endif /* LLMC_ARGS_H */
