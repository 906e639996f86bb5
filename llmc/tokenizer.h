/*
 * llmc/tokenizer.h -- GPT-2 tokenizer: decode (token id -> bytes), a streaming UTF-8-safe
 * printer, and byte-level BPE encoding.
 *
 * File format (llm.c; llmc/README.md, "File formats"; written by the data preparation scripts: write_tokenizer.py
 * for GPT-2, prepare.py --tokenizer for a Hugging Face tokenizer.json): little-endian
 * int32 header[256]: [0] = 20240328 (magic), [1] = 2 (version; llm.c's version 1, which has no
 * EOT field, is also accepted with EOT = 50256), [2] = vocab size (1..2^24: ids beyond 65,535 need no other
 * version), [3] = EOT token id; then for each token id in order: uint8 length (1..255) followed by that many raw
 * bytes (any values: a byte-level token may be part of a UTF-8 character).
 * The file must end exactly after the last token.
 *
 * tokenizer_init(t, path): returns 1 if loaded; 0 if the file cannot be opened (missing), after
 *   ONE warning line on stderr ("warning: ...") naming the absolute path tried, that samples are
 *   off, and the script that writes it (dev/data/write_tokenizer.py); -1 if the file exists but is
 *   invalid (magic, version, sizes, truncation, extra bytes), after ONE "error: ..." line naming the
 *   absolute path and what is wrong: a corrupt file is an error the caller must stop on (README,
 *   "Data"). Under a launcher only rank 0 prints (launcher_rank). In both failure cases every other
 *   call behaves as for an empty vocabulary (decode returns NULL, encode returns -1).
 * tokenizer_decode(t, id, len): pointer to the token's bytes (NUL-terminated copy; the token
 *   itself may contain any byte) and *len = byte count; NULL for id >= vocab size or unloaded.
 * TokenPrinter: token byte strings are arbitrary byte sequences, and one UTF-8 character may be
 *   split across tokens (GPT-2 ids 8582, 97, 245 together are the bytes F0 9F A4 97, U+1F917).
 *   token_printer_feed(p, t, id, out, out_cap) appends the token's bytes to the UTF-8 decoder
 *   state and writes to out only complete, valid UTF-8 (RFC 3629: no overlongs, no surrogates,
 *   <= U+10FFFF); an incomplete trailing character is held until a later token completes it;
 *   an invalid byte or a truncated sequence (maximal subpart, Unicode 15 section 3.9, U+FFFD
 *   substitution) is written as U+FFFD (EF BF BD). Out-of-range ids write one U+FFFD.
 *   Returns the number of bytes written (not NUL-terminated). out_cap must be at least
 *   TOKEN_PRINTER_MAX_OUT (enough for any token); smaller -> FATAL (programming error).
 *   token_printer_flush(p, out, out_cap) writes U+FFFD for a held incomplete character and resets.
 * tokenizer_encode(t, text, out_ids, max_ids): GPT-2 byte-level BPE (Radford et al. 2019).
 *   1. Pre-tokenizer: GPT-2's split pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      implemented by hand on bytes: letters = ASCII letters and every byte >= 0x80 (so all
 *      non-ASCII text counts as letters; non-ASCII digits/punctuation/spaces are therefore
 *      grouped differently than in GPT-2, a documented approximation), digits = 0-9,
 *      whitespace = space \t \n \v \f \r.
 *   2. Per chunk, start from single bytes and repeatedly merge the adjacent pair whose
 *      concatenation is a token with the lowest id, the leftmost of equal ones (tiktoken's rule; for
 *      GPT-2 the merge rank of every merged token equals its id), in O(n log n) through a heap of
 *      candidate merges, so a long chunk (30,000 equal letters) takes milliseconds, not seconds.
 *      The EOT token is never produced.
 *   Writes at most max_ids ids to out_ids and returns the total number of ids the text
 *   encodes to (may exceed max_ids, like snprintf: then out_ids holds the first max_ids).
 *   Returns -1 if the tokenizer is not loaded or a byte has no single-byte token (one stderr line).
 * tokenizer_free(t).
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKEN_PRINTER_MAX_OUT 1024 /* >= 3 bytes per input byte for 255 + 3 held bytes */

typedef struct {
    int init_ok;
    uint32_t vocab_size;
    int eot_token;
    char* blob;             /* all tokens, each followed by a NUL */
    size_t* offsets;        /* [vocab_size] start of token i in blob */
    unsigned char* lengths; /* [vocab_size] */
    int32_t* table;         /* open-addressing hash map bytes -> id, -1 = empty */
    size_t table_mask;      /* capacity - 1 (capacity a power of two) */
} Tokenizer;

typedef struct {
    unsigned char pending[4]; /* bytes of an incomplete UTF-8 character */
    int n_pending;
    int n_needed;             /* total length of the pending character (2..4), 0 if none */
} TokenPrinter;

static inline uint64_t tokenizer_hash(const char* s, size_t n) {
    return fnv1a64(14695981039346656037ULL, s, n);
}

/* id of the token whose bytes are exactly s[0..n), or -1 */
static inline int tokenizer_lookup(const Tokenizer* t, const char* s, size_t n) {
    if (!t->init_ok || n == 0 || n > 255) { return -1; }
    size_t h = (size_t)tokenizer_hash(s, n) & t->table_mask;
    for (;;) {
        int32_t id = t->table[h];
        if (id < 0) { return -1; }
        if (t->lengths[id] == n && memcmp(t->blob + t->offsets[id], s, n) == 0) { return id; }
        h = (h + 1) & t->table_mask;
    }
}

static inline void tokenizer_free(Tokenizer* t) {
    free(t->blob); free(t->offsets); free(t->lengths); free(t->table);
    memset(t, 0, sizeof(*t));
}

/* the one line for a tokenizer that did not load and the return value: a missing file (corrupt == 0) is a warning
 * and returns 0, an invalid one an error and returns -1; the path is printed absolute; launcher rank 0 prints */
static inline int tokenizer_fail(Tokenizer* t, FILE* f, const char* path, const char* why, int corrupt) {
    if (f) { fclose(f); }
    tokenizer_free(t);
    char abs[2048];
    absolute_path(path, abs, sizeof(abs));
    if (launcher_rank() == 0) {
        fprintf(stderr, "%s: tokenizer '%s' %s; %s (write it with python3 dev/data/write_tokenizer.py, or pass "
                "--tokenizer FILE)\n", corrupt ? "error" : "warning", abs, why,
                corrupt ? "a damaged tokenizer is not used" : "text decoding and sample printing are off");
        fflush(stderr);
    }
    return corrupt ? -1 : 0;
}

/* the token -> id hash map of t's V tokens: capacity a power of two >= 2V, linear probing; the lowest id wins on
 * duplicates; EOT is excluded (text never encodes to it). Sets init_ok (tokenizer_lookup needs it). */
static inline void tokenizer_build_map(Tokenizer* t) {
    uint32_t V = t->vocab_size;
    int eot = t->eot_token;
    size_t capacity = 1;
    while (capacity < 2 * (size_t)V) { capacity <<= 1; }
    t->table = (int32_t*)malloc_check(capacity * sizeof(int32_t), "tokenizer hash map");
    for (size_t i = 0; i < capacity; i++) { t->table[i] = -1; }
    t->table_mask = capacity - 1;
    t->init_ok = 1;
    for (uint32_t i = 0; i < V; i++) {
        if ((int)i == eot) { continue; }
        const char* s = t->blob + t->offsets[i];
        if (tokenizer_lookup(t, s, t->lengths[i]) >= 0) { continue; }
        size_t h = (size_t)tokenizer_hash(s, t->lengths[i]) & t->table_mask;
        while (t->table[h] >= 0) { h = (h + 1) & t->table_mask; }
        t->table[h] = (int32_t)i;
    }
}

/* see header comment */
static inline int tokenizer_init(Tokenizer* t, const char* path) {
    char why[256];
    memset(t, 0, sizeof(*t));
    char open_why[128];
    FILE* f = fopen_regular(path, "rb", open_why, sizeof(open_why)); /* a FIFO or device is refused, never waited on */
    if (f == NULL) {
        snprintf(why, sizeof(why), "cannot be opened (%s)", open_why);
        return tokenizer_fail(t, NULL, path, why, 0);
    }
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256) {
        return tokenizer_fail(t, f, path, "is shorter than its 1024-byte header", 1);
    }
    if (header[0] != TOKENIZER_MAGIC) {
        snprintf(why, sizeof(why), "has magic %d, expected %d (not a tokenizer file)", header[0], TOKENIZER_MAGIC);
        return tokenizer_fail(t, f, path, why, 1);
    }
    if (header[1] != 1 && header[1] != 2) {
        snprintf(why, sizeof(why), "has version %d, expected 2 (or 1)", header[1]);
        return tokenizer_fail(t, f, path, why, 1);
    }
    if (header[2] <= 0 || header[2] > (1 << 24)) {
        snprintf(why, sizeof(why), "has vocab size %d, expected 1..16777216", header[2]);
        return tokenizer_fail(t, f, path, why, 1);
    }
    uint32_t V = (uint32_t)header[2];
    int eot = header[1] == 1 ? 50256 : header[3];
    if (eot < 0 || (uint32_t)eot >= V) {
        snprintf(why, sizeof(why), "has EOT id %d outside the vocabulary of %u tokens", eot, V);
        return tokenizer_fail(t, f, path, why, 1);
    }
    t->vocab_size = V;
    t->eot_token = eot;
    t->offsets = (size_t*)malloc_check((size_t)V * sizeof(size_t), "tokenizer offsets");
    t->lengths = (unsigned char*)malloc_check((size_t)V, "tokenizer lengths");
    size_t cap = (size_t)V * 8 + 64, used = 0;
    t->blob = (char*)malloc_check(cap, "tokenizer bytes");
    for (uint32_t i = 0; i < V; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1) {
            snprintf(why, sizeof(why), "is truncated: ends at token %u of %u", i, V);
            return tokenizer_fail(t, f, path, why, 1);
        }
        if (len == 0) {
            snprintf(why, sizeof(why), "has an empty token (length 0) at id %u", i);
            return tokenizer_fail(t, f, path, why, 1);
        }
        if (used + len + 1 > cap) {
            while (used + len + 1 > cap) { cap *= 2; }
            char* b = (char*)realloc(t->blob, cap);
            if (b == NULL) { FATAL("out of host memory loading tokenizer '%s' (%zu bytes)", path, cap); }
            t->blob = b;
        }
        if (fread(t->blob + used, 1, len, f) != len) {
            snprintf(why, sizeof(why), "is truncated inside token %u of %u", i, V);
            return tokenizer_fail(t, f, path, why, 1);
        }
        t->offsets[i] = used;
        t->lengths[i] = len;
        used += len;
        t->blob[used++] = '\0';
    }
    if (fgetc(f) != EOF) {
        snprintf(why, sizeof(why), "has extra bytes after the last of its %u tokens", V);
        return tokenizer_fail(t, f, path, why, 1);
    }
    fclose(f);
    tokenizer_build_map(t);
    return 1;
}

/* see header comment */
static inline const char* tokenizer_decode(const Tokenizer* t, uint32_t id, size_t* len) {
    if (!t->init_ok || id >= t->vocab_size) { if (len) { *len = 0; } return NULL; }
    if (len) { *len = t->lengths[id]; }
    return t->blob + t->offsets[id];
}

/* ---------------------------------------------------------------- streaming printer */

static inline void token_printer_init(TokenPrinter* p) { memset(p, 0, sizeof(*p)); }

static inline size_t token_printer_put(char* out, size_t n, const unsigned char* s, size_t k) {
    memcpy(out + n, s, k);
    return n + k;
}

/* writes U+FFFD */
static inline size_t token_printer_replacement(char* out, size_t n) {
    static const unsigned char fffd[3] = {0xEF, 0xBF, 0xBD};
    return token_printer_put(out, n, fffd, 3);
}

/* feeds one byte through the UTF-8 decoder; returns the new output length */
static inline size_t token_printer_byte(TokenPrinter* p, unsigned char c, char* out, size_t n) {
    if (p->n_needed > 0) {
        /* valid range for this continuation byte (RFC 3629 table, second byte restrictions) */
        unsigned char lo = 0x80, hi = 0xBF;
        if (p->n_pending == 1) {
            unsigned char lead = p->pending[0];
            if (lead == 0xE0) { lo = 0xA0; }
            else if (lead == 0xED) { hi = 0x9F; }
            else if (lead == 0xF0) { lo = 0x90; }
            else if (lead == 0xF4) { hi = 0x8F; }
        }
        if (c >= lo && c <= hi) {
            p->pending[p->n_pending++] = c;
            if (p->n_pending == p->n_needed) {
                n = token_printer_put(out, n, p->pending, (size_t)p->n_pending);
                p->n_pending = 0; p->n_needed = 0;
            }
            return n;
        }
        /* truncated sequence: one U+FFFD for the maximal subpart, then reprocess c */
        n = token_printer_replacement(out, n);
        p->n_pending = 0; p->n_needed = 0;
    }
    if (c < 0x80) { out[n++] = (char)c; return n; }
    int need = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (need == 0) { return token_printer_replacement(out, n); }
    p->pending[0] = c; p->n_pending = 1; p->n_needed = need;
    return n;
}

/* see header comment */
static inline size_t token_printer_feed(TokenPrinter* p, const Tokenizer* t, uint32_t id, char* out, size_t out_cap) {
    if (out_cap < TOKEN_PRINTER_MAX_OUT) {
        FATAL("token_printer_feed: output buffer of %zu bytes, needs at least TOKEN_PRINTER_MAX_OUT = %d", out_cap, TOKEN_PRINTER_MAX_OUT);
    }
    size_t len = 0;
    const char* s = tokenizer_decode(t, id, &len);
    size_t n = 0;
    if (s == NULL) {
        if (p->n_needed > 0) { n = token_printer_replacement(out, n); p->n_pending = 0; p->n_needed = 0; }
        return token_printer_replacement(out, n);
    }
    for (size_t i = 0; i < len; i++) { n = token_printer_byte(p, (unsigned char)s[i], out, n); }
    return n;
}

/* see header comment */
static inline size_t token_printer_flush(TokenPrinter* p, char* out, size_t out_cap) {
    if (p->n_needed == 0) { return 0; }
    if (out_cap < 3) { FATAL("token_printer_flush: output buffer of %zu bytes, needs at least 3", out_cap); }
    p->n_pending = 0; p->n_needed = 0;
    return token_printer_replacement(out, 0);
}

/* ---------------------------------------------------------------- encoder */

static inline int tokenizer_is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static inline int tokenizer_is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static inline int tokenizer_is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static inline int tokenizer_is_other(unsigned char c) { return !tokenizer_is_letter(c) && !tokenizer_is_digit(c) && !tokenizer_is_space(c); }

/* length of the pre-tokenizer chunk starting at s[i] (i < n); see header comment, step 1 */
static inline size_t tokenizer_pretokenize_next(const char* text, size_t n, size_t i) {
    const unsigned char* s = (const unsigned char*)text;
    size_t rem = n - i;
    if (s[i] == '\'' && rem >= 2) {
        unsigned char a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') { return 2; }
        if (rem >= 3) {
            unsigned char b = s[i + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) { return 3; }
        }
    }
    size_t j = i;
    int lead_space = (s[i] == ' ' && rem >= 2);
    unsigned char c = lead_space ? s[i + 1] : s[i];
    if (tokenizer_is_letter(c) || tokenizer_is_digit(c) || tokenizer_is_other(c)) {
        int (*cls)(unsigned char) = tokenizer_is_letter(c) ? tokenizer_is_letter
                                  : tokenizer_is_digit(c) ? tokenizer_is_digit : tokenizer_is_other;
        if (lead_space) { j++; }
        while (j < n && cls(s[j])) { j++; }
        return j - i;
    }
    /* whitespace run */
    while (j < n && tokenizer_is_space(s[j])) { j++; }
    if (j < n && j - i >= 2) { return j - i - 1; } /* \s+(?!\S): leave the last space for the next word */
    return j - i;
}

/* the BPE scratch of one text: per part (a part is named by its first byte's offset) its length (0 once merged into
 * the part before it) and its neighbours, and a min-heap of candidate merges keyed by (token id, offset) */
typedef struct { int id; size_t pos; } BpeMerge;
typedef struct {
    size_t *len, *next, *prev;
    BpeMerge* heap;
    size_t heap_n;
} BpeScratch;

static inline int bpe_merge_less(BpeMerge a, BpeMerge b) { return a.id < b.id || (a.id == b.id && a.pos < b.pos); }

static inline void bpe_push(BpeScratch* w, int id, size_t pos) {
    size_t k = w->heap_n++;
    BpeMerge e = {id, pos};
    while (k > 0 && bpe_merge_less(e, w->heap[(k - 1) / 2])) { w->heap[k] = w->heap[(k - 1) / 2]; k = (k - 1) / 2; }
    w->heap[k] = e;
}

static inline BpeMerge bpe_pop(BpeScratch* w) {
    BpeMerge top = w->heap[0], last = w->heap[--w->heap_n];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= w->heap_n) { break; }
        if (c + 1 < w->heap_n && bpe_merge_less(w->heap[c + 1], w->heap[c])) { c++; }
        if (!bpe_merge_less(w->heap[c], last)) { break; }
        w->heap[k] = w->heap[c];
        k = c;
    }
    if (w->heap_n > 0) { w->heap[k] = last; }
    return top;
}

/* queues the merge of part i with the part after it, when their concatenation is a token */
static inline void bpe_offer(const Tokenizer* t, const char* s, size_t n, BpeScratch* w, size_t i) {
    size_t j = w->next[i];
    if (j >= n) { return; }
    int id = tokenizer_lookup(t, s + i, w->len[i] + w->len[j]);
    if (id >= 0) { bpe_push(w, id, i); }
}

/* BPE of one chunk s[0..n) (tiktoken's rule: merge the adjacent pair whose concatenation is the token of lowest id,
 * the leftmost of equal ones, until no pair is a token) in O(n log n): the parts form a linked list and the
 * candidate merges a heap; an entry whose part has changed since it was queued is skipped (its concatenation is no
 * longer that token). A chunk of 30,000 equal letters took seconds with a rescan per merge. Appends the ids (count
 * may exceed max_ids); returns -1 on a byte without a token (one stderr line). w's arrays hold at least n parts and
 * 3n heap entries. */
static inline int tokenizer_bpe_chunk(const Tokenizer* t, const char* s, size_t n, int* out_ids, int max_ids,
                                      long long* count, BpeScratch* w) {
    w->heap_n = 0;
    for (size_t i = 0; i < n; i++) { w->len[i] = 1; w->next[i] = i + 1; w->prev[i] = i == 0 ? SIZE_MAX : i - 1; }
    for (size_t i = 0; i + 1 < n; i++) { bpe_offer(t, s, n, w, i); }
    while (w->heap_n > 0) {
        BpeMerge e = bpe_pop(w);
        size_t i = e.pos, j = w->next[i];
        if (w->len[i] == 0 || j >= n || tokenizer_lookup(t, s + i, w->len[i] + w->len[j]) != e.id) { continue; }
        w->len[i] += w->len[j];
        w->len[j] = 0;
        w->next[i] = w->next[j];
        if (w->next[i] < n) { w->prev[w->next[i]] = i; }
        if (w->prev[i] != SIZE_MAX) { bpe_offer(t, s, n, w, w->prev[i]); }
        bpe_offer(t, s, n, w, i);
    }
    for (size_t i = 0; i < n; i = w->next[i]) {
        int id = tokenizer_lookup(t, s + i, w->len[i]);
        if (id < 0) {
            fprintf(stderr, "error: tokenizer has no token for byte 0x%02X; cannot encode this text\n", (unsigned)(unsigned char)s[i]);
            return -1;
        }
        if (*count < max_ids) { out_ids[*count] = id; }
        (*count)++;
    }
    return 0;
}

/* see header comment */
static inline int tokenizer_encode(const Tokenizer* t, const char* text, int* out_ids, int max_ids) {
    if (!t->init_ok) { return -1; }
    size_t n = strlen(text);
    BpeScratch w;
    w.len = (size_t*)malloc_check((n + 1) * sizeof(size_t), "BPE part lengths");
    w.next = (size_t*)malloc_check((n + 1) * sizeof(size_t), "BPE part links");
    w.prev = (size_t*)malloc_check((n + 1) * sizeof(size_t), "BPE part links");
    w.heap = (BpeMerge*)malloc_check((3 * n + 1) * sizeof(BpeMerge), "BPE merge heap");
    long long count = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        size_t len = tokenizer_pretokenize_next(text, n, i);
        rc = tokenizer_bpe_chunk(t, text + i, len, out_ids, max_ids, &count, &w);
        i += len;
    }
    free(w.len); free(w.next); free(w.prev); free(w.heap);
    if (rc != 0) { return -1; }
    return count > 0x7FFFFFFF ? 0x7FFFFFFF : (int)count;
}

#endif /* LLMC_TOKENIZER_H */
