/*
 * llmc/dataloader.h -- token-shard data loader with exact, rank-disjoint epochs and exact resume.
 *
 * Shard format (llmc/README.md, "File formats"; written by the data preparation script prepare.py): little-endian
 * int32 header[256] with header[0] = 20240520 (magic), header[1] = version, header[2] = token count; then `count`
 * token ids: version 1 (llm.c's) uint16 ids, version 2 uint32 ids (tokenizers of 65,536 tokens or more). File size
 * must be 1024 + 2*count (version 1) or 1024 + 4*count (version 2). The version is read per shard, so one glob may
 * mix them: every shard's ids become the same int32 values whatever their width (a stream written as version 1
 * and as version 2 trains bit-identically), and the width says nothing about which tokenizer wrote a shard (that is
 * what the vocabulary check below catches, for either version). A version 2 id >= 2^31 is refused when its window
 * is read (it has no int32 value), whether or not a vocabulary limit is set.
 * Every shard is checked at init (magic, version, size, enough tokens, by reading its header) and mapped
 * read-only only when read: at most DATALOADER_MAP_CACHE (8) shards are mapped at a time, the least recently
 * used unmapped first, so any number of shards works (the kernel allows about 65,530 maps per process);
 * any problem -> one stderr line naming the file, what was found, what was expected and
 * "regenerate with prepare.py", the data preparation script (README, "Data"), then exit 1.
 *
 * Windows: with B*T tokens per batch, window w of a shard is the B*T+1 tokens starting at token
 * w*B*T; a shard with count tokens has (count-1)/(B*T) windows (a shard shorter than B*T+1 tokens
 * is refused). inputs = window[0..B*T), targets = window[1..B*T] (shifted by one), as int32.
 *
 * Epochs: the global window sequence of epoch e lists the shards in glob (alphabetical) order,
 * or in a permutation seeded by (seed, e) when shuffle != 0, and within each shard its windows
 * in order, or in a permutation seeded by (seed, e, shard) when shuffle. Rank r of N reads
 * global positions r, r+N, r+2N, ...; when its next position is past the end, its epoch counter
 * increments and it continues at position r of epoch e+1. So within each epoch every window
 * is read exactly once over all ranks. (When the window count is not a multiple of N, some
 * ranks read one window more than others in that epoch and roll over one call later.)
 * Shuffling: Fisher-Yates (Knuth, TAOCP vol. 2, Algorithm P) driven by SplitMix64
 * (Steele, Lea, Flood 2014), unbiased bounded draws by rejection. Deterministic in the seed.
 *
 * API (dl fields B, T, inputs, targets, num_windows_total are public and read-only):
 *   dataloader_init(dl, glob_pattern, B, T, process_rank, num_processes, shuffle, seed)
 *       B, T >= 1, 0 <= rank < num_processes; no shard matching the glob(3) pattern -> error naming it; an empty
 *       pattern -> error naming the trainer's flag -i (an empty -j means no validation and never reaches here).
 *   dataloader_next_batch(dl)         fills inputs[B*T], targets[B*T] (host int32) with the next window.
 *   dataloader_reset(dl)              back to epoch 0, position = rank.
 *   dataloader_windows_per_epoch(dl)  total windows over all shards (= num_windows_total).
 *   dataloader_get_state / dataloader_set_state   (epoch, next global position) for exact resume;
 *       set_state checks position % N == rank and position < windows_per_epoch (else FATAL).
 *   dataloader_load_window(dl, k)     loads window k (0 <= k < num_windows_total) of the
 *       unshuffled epoch-0 order into inputs/targets without moving the position (validation).
 *   dataloader_sequences(dl)          sequences of T+1 tokens over all shards (validation by tokens): shard s
 *       holds (count_s - 1) / T of them, sequence j of a shard starting at its token j*T; they are numbered in
 *       glob order, shard by shard, so the numbering does not depend on B or on the number of processes.
 *   dataloader_load_sequence(dl, j, row)   loads sequence j (0 <= j < dataloader_sequences) into row `row`
 *       (0 <= row < B) of inputs/targets, without moving the position; out of range -> FATAL.
 *   dataloader_set_vocab_limit(dl, V) from then on any token >= V in a loaded window is a FATAL
 *       error naming the shard and token offset (0 = no check, the default). The check costs one compare per
 *       token read (B*T+1 per batch), nothing at init: shards are not scanned whole.
 *   dataloader_fingerprint(dl)        64-bit FNV-1a hash of shard base names, token counts and the
 *       first/last 8 tokens of each shard, as stored (2 bytes each in version 1, 4 in version 2, so a shard
 *       rewritten in the other version is different data to a resume; ranks compare it to detect different data).
 *   dataloader_free(dl)               unmaps and frees everything.
 *
 * Header-only: static inline functions, no globals. POSIX: glob(3), open(2), mmap(2).
 */
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "llmc/utils.h"

#define DATALOADER_MAGIC 20240520
#define DATALOADER_VERSION_U16 1 /* llm.c's: uint16 token ids */
#define DATALOADER_VERSION_U32 2 /* uint32 token ids */
#define DATALOADER_HEADER_BYTES 1024
#define DATALOADER_MAP_CACHE 8 /* shards mapped at a time (least recently used unmapped first) */

typedef struct {
    uint64_t epoch;     /* epochs completed by this rank */
    uint64_t position;  /* next global window position this rank reads in that epoch */
} DataLoaderState;

typedef struct {
    /* public, read-only */
    int B, T;
    int* inputs;               /* [B*T] int32 host */
    int* targets;              /* [B*T] int32 host */
    size_t num_windows_total;  /* windows per epoch over all shards */
    /* configuration */
    int process_rank, num_processes, shuffle;
    uint64_t seed;
    int vocab_limit;           /* 0 = no token range check */
    /* shards */
    int num_shards;
    char** shard_paths;        /* [num_shards] malloc'd copies */
    size_t* shard_num_tokens;  /* [num_shards] */
    size_t* shard_windows;     /* [num_shards] */
    unsigned char* shard_token_bytes; /* [num_shards] 2 (version 1) or 4 (version 2) */
    /* position */
    uint64_t epoch, position;
    /* caches for the current epoch's order */
    uint64_t order_epoch;      /* epoch the caches below were built for (UINT64_MAX = none) */
    int* shard_order;          /* [num_shards] */
    size_t* order_cumulative;  /* [num_shards+1] windows before the i-th shard of the order */
    int perm_shard;            /* shard whose window permutation is cached (-1 = none) */
    uint64_t perm_epoch;
    size_t* window_perm;       /* [max windows in a shard] when shuffle */
    uint64_t fingerprint;      /* dataloader_fingerprint, computed at init */
    /* the mapped shards (dataloader_shard_tokens): slot c holds shard cache_shard[c] (-1 = empty) */
    int cache_shard[DATALOADER_MAP_CACHE];
    void* cache_map[DATALOADER_MAP_CACHE];
    size_t cache_bytes[DATALOADER_MAP_CACHE];
    const unsigned char* cache_tokens[DATALOADER_MAP_CACHE]; /* map + 1024 bytes: uint16 or uint32 ids */
    uint64_t cache_used[DATALOADER_MAP_CACHE];          /* last use (cache_clock), 0 = never */
    uint64_t cache_clock;
} DataLoader;

/* SplitMix64 step (Steele, Lea, Flood 2014) */
static inline uint64_t dataloader_splitmix64(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* unbiased uniform integer in [0, n), n >= 1 */
static inline uint64_t dataloader_below(uint64_t* s, uint64_t n) {
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
    uint64_t r;
    do { r = dataloader_splitmix64(s); } while (r >= limit);
    return r % n;
}

/* RNG state for (seed, epoch, stream); stream 0 = shard order, 1+s = windows of shard s */
static inline uint64_t dataloader_stream_seed(uint64_t seed, uint64_t epoch, uint64_t stream) {
    uint64_t s = seed ^ 0x5DEECE66DULL;
    uint64_t a = dataloader_splitmix64(&s);
    s = a ^ (epoch * 0xD1B54A32D192ED03ULL);
    uint64_t b = dataloader_splitmix64(&s);
    s = b ^ (stream * 0xAEF17502108EF2D9ULL);
    return dataloader_splitmix64(&s);
}

/* Fisher-Yates shuffle of perm[0..n) (already filled) */
static inline void dataloader_shuffle_sizes(size_t* perm, size_t n, uint64_t rng) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)dataloader_below(&rng, (uint64_t)i);
        size_t t = perm[i - 1]; perm[i - 1] = perm[j]; perm[j] = t;
    }
}

static inline void dataloader_shuffle_ints(int* perm, int n, uint64_t rng) {
    for (int i = n; i > 1; i--) {
        int j = (int)dataloader_below(&rng, (uint64_t)i);
        int t = perm[i - 1]; perm[i - 1] = perm[j]; perm[j] = t;
    }
}

static inline char* dataloader_strdup(const char* s) {
    size_t n = strlen(s) + 1;
    char* d = (char*)malloc_check(n, "shard path");
    memcpy(d, s, n);
    return d;
}

/* reads n bytes at offset off of the open shard fd into buf; exits naming the shard on a short read */
static inline void dataloader_pread(int fd, void* buf, size_t n, off_t off, const char* path) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char*)buf + got, n - got, off + (off_t)got);
        if (r <= 0) {
            close(fd);
            FATAL("cannot read token shard '%s': %s", path, r < 0 ? strerror(errno) : "unexpected end of file");
        }
        got += (size_t)r;
    }
}

/* validates shard i (path already set) by reading its header (it is not mapped here: shards are mapped on demand,
 * dataloader_shard_tokens) and hashes its name, count and first/last 8 tokens into dl->fingerprint; exits with a
 * clear message on any problem */
static inline void dataloader_open_shard(DataLoader* dl, int i) {
    const char* path = dl->shard_paths[i];
    const char* regen = "regenerate with the data preparation script prepare.py; README, \"Data\"";
    char why[128];
    int fd = open_regular(path, O_RDONLY, 0, why, sizeof(why)); /* a FIFO or device is refused, never waited on */
    if (fd < 0) { FATAL("cannot open token shard '%s': %s", path, why); }
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); FATAL("cannot stat token shard '%s': %s", path, strerror(errno)); }
    size_t bytes = (size_t)st.st_size;
    if (bytes < DATALOADER_HEADER_BYTES) {
        close(fd);
        FATAL("token shard '%s' is %zu bytes, smaller than the %d-byte header; %s", path, bytes, DATALOADER_HEADER_BYTES, regen);
    }
    int32_t header[3];
    dataloader_pread(fd, header, sizeof(header), 0, path);
    if (header[0] != DATALOADER_MAGIC) {
        close(fd);
        FATAL("token shard '%s' has magic %d, expected %d (not a token shard); %s", path, header[0], DATALOADER_MAGIC, regen);
    }
    if (header[1] != DATALOADER_VERSION_U16 && header[1] != DATALOADER_VERSION_U32) {
        close(fd);
        FATAL("token shard '%s' has version %d, expected %d (uint16 tokens) or %d (uint32 tokens); %s", path, header[1],
              DATALOADER_VERSION_U16, DATALOADER_VERSION_U32, regen);
    }
    size_t tb = header[1] == DATALOADER_VERSION_U16 ? 2 : 4; /* bytes per token */
    if (header[2] < 0) {
        close(fd);
        FATAL("token shard '%s' has a negative token count %d in its header; %s", path, header[2], regen);
    }
    size_t count = (size_t)header[2];
    size_t expected = DATALOADER_HEADER_BYTES + tb * count;
    if (bytes != expected) {
        close(fd);
        FATAL("token shard '%s' (version %d) is %zu bytes, expected %zu = 1024 + %zu * %zu tokens (header count); "
              "the file is truncated or corrupt; %s", path, header[1], bytes, expected, tb, count, regen);
    }
    size_t need = (size_t)dl->B * (size_t)dl->T + 1;
    if (count < need) {
        close(fd);
        FATAL("token shard '%s' has %zu tokens, but one batch window needs B*T+1 = %zu (B=%d, T=%d); "
              "use a smaller batch size/sequence length or a larger shard", path, count, need, dl->B, dl->T);
    }
    unsigned char ends[64]; /* the first and last (up to) 8 tokens as stored */
    size_t k = count < 8 ? count : 8;
    dataloader_pread(fd, ends, k * tb, DATALOADER_HEADER_BYTES, path);
    dataloader_pread(fd, ends + 32, k * tb, (off_t)(DATALOADER_HEADER_BYTES + tb * (count - k)), path);
    close(fd);
    const char* base = strrchr(path, '/'); /* the fingerprint: see dataloader_fingerprint */
    base = base ? base + 1 : path;
    uint64_t count64 = (uint64_t)count;
    dl->fingerprint = fnv1a64(dl->fingerprint, base, strlen(base) + 1);
    dl->fingerprint = fnv1a64(dl->fingerprint, &count64, sizeof(count64));
    dl->fingerprint = fnv1a64(dl->fingerprint, ends, k * tb);
    dl->fingerprint = fnv1a64(dl->fingerprint, ends + 32, k * tb);
    dl->shard_num_tokens[i] = count;
    dl->shard_token_bytes[i] = (unsigned char)tb;
    dl->shard_windows[i] = (count - 1) / ((size_t)dl->B * (size_t)dl->T);
}

/* the tokens of shard s (after its header: uint16 or uint32 ids, dl->shard_token_bytes[s] bytes each), mapped on
 * demand: at most DATALOADER_MAP_CACHE shards stay mapped, the least recently used one is unmapped to make room, so
 * any number of shards works within the kernel's per-process map limit (vm.max_map_count). Exits naming the shard (and that limit, for ENOMEM) if it cannot be mapped. */
static inline const unsigned char* dataloader_shard_tokens(DataLoader* dl, int s) {
    int slot = -1;
    for (int c = 0; c < DATALOADER_MAP_CACHE; c++) {
        if (dl->cache_shard[c] == s) { dl->cache_used[c] = ++dl->cache_clock; return dl->cache_tokens[c]; }
        if (slot < 0 || dl->cache_used[c] < dl->cache_used[slot]) { slot = c; } /* an empty slot has used 0 */
    }
    if (dl->cache_shard[slot] >= 0) { munmap(dl->cache_map[slot], dl->cache_bytes[slot]); dl->cache_shard[slot] = -1; }
    const char* path = dl->shard_paths[s];
    size_t bytes = DATALOADER_HEADER_BYTES + (size_t)dl->shard_token_bytes[s] * dl->shard_num_tokens[s];
    char why[128];
    int fd = open_regular(path, O_RDONLY, 0, why, sizeof(why));
    if (fd < 0) { FATAL("cannot open token shard '%s': %s", path, why); }
    void* map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) {
        FATAL("cannot mmap token shard '%s' (%zu bytes): %s%s", path, bytes, strerror(err),
              err == ENOMEM ? " (the process's address space or its map count, sysctl vm.max_map_count, is exhausted)" : "");
    }
    dl->cache_shard[slot] = s;
    dl->cache_map[slot] = map;
    dl->cache_bytes[slot] = bytes;
    dl->cache_tokens[slot] = (const unsigned char*)map + DATALOADER_HEADER_BYTES;
    dl->cache_used[slot] = ++dl->cache_clock;
    return dl->cache_tokens[slot];
}

/* builds the shard order and cumulative window counts of epoch `epoch` (cached) */
static inline void dataloader_build_order(DataLoader* dl, uint64_t epoch) {
    if (dl->order_epoch == epoch) { return; }
    for (int i = 0; i < dl->num_shards; i++) { dl->shard_order[i] = i; }
    if (dl->shuffle) { dataloader_shuffle_ints(dl->shard_order, dl->num_shards, dataloader_stream_seed(dl->seed, epoch, 0)); }
    dl->order_cumulative[0] = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        dl->order_cumulative[i + 1] = dl->order_cumulative[i] + dl->shard_windows[dl->shard_order[i]];
    }
    dl->order_epoch = epoch;
}

/* token i of a shard's token area `tok` of `tb` bytes per id (2: uint16, 4: uint32), little-endian as stored; the
 * area is 1024 bytes into a page-aligned map, so both widths are aligned */
static inline uint32_t dataloader_token_at(const unsigned char* tok, size_t tb, size_t i) {
    return tb == 2 ? (uint32_t)((const uint16_t*)(const void*)tok)[i] : ((const uint32_t*)(const void*)tok)[i];
}

/* copies tokens [first, first + n] (n + 1 of them) of shard s into inputs[0..n) and targets[0..n) (targets shifted
 * by one) as int32, after checking each against the vocabulary limit (when set) and int32's range; `first` is the
 * shard's token offset (named in an error) */
static inline void dataloader_copy_tokens(DataLoader* dl, int s, size_t first, size_t n, int* inputs, int* targets) {
    size_t tb = dl->shard_token_bytes[s];
    const unsigned char* tok = dataloader_shard_tokens(dl, s) + first * tb;
    uint32_t limit = dl->vocab_limit > 0 ? (uint32_t)dl->vocab_limit : (uint32_t)INT32_MAX + 1u;
    for (size_t i = 0; i <= n; i++) {
        uint32_t id = dataloader_token_at(tok, tb, i);
        if (id >= limit) {
            if (dl->vocab_limit > 0) {
                FATAL("token shard '%s' has token id %u at token offset %zu, but the vocabulary size is %d; "
                      "regenerate with the data preparation script prepare.py for this tokenizer", dl->shard_paths[s],
                      (unsigned)id, first + i, dl->vocab_limit);
            }
            FATAL("token shard '%s' has token id %u at token offset %zu, above the largest id 2147483647 a shard may "
                  "hold; regenerate with the data preparation script prepare.py", dl->shard_paths[s], (unsigned)id, first + i);
        }
        if (i < n) { inputs[i] = (int)id; }
        if (i > 0) { targets[i - 1] = (int)id; }
    }
}

/* copies window `w` of shard `s` into inputs/targets */
static inline void dataloader_copy_window(DataLoader* dl, int s, size_t w) {
    size_t n = (size_t)dl->B * (size_t)dl->T;
    dataloader_copy_tokens(dl, s, w * n, n, dl->inputs, dl->targets);
}

/* loads global position `pos` of epoch `epoch` */
static inline void dataloader_load_position(DataLoader* dl, uint64_t epoch, uint64_t pos) {
    dataloader_build_order(dl, epoch);
    /* binary search: largest i with cumulative[i] <= pos */
    int lo = 0, hi = dl->num_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->order_cumulative[mid] <= pos) { lo = mid; } else { hi = mid - 1; }
    }
    /* skip shards with zero windows (cannot happen: each shard has >= 1) */
    int s = dl->shard_order[lo];
    size_t local = (size_t)(pos - dl->order_cumulative[lo]);
    size_t w = local;
    if (dl->shuffle) {
        if (dl->perm_shard != s || dl->perm_epoch != epoch) {
            for (size_t i = 0; i < dl->shard_windows[s]; i++) { dl->window_perm[i] = i; }
            dataloader_shuffle_sizes(dl->window_perm, dl->shard_windows[s], dataloader_stream_seed(dl->seed, epoch, 1 + (uint64_t)s));
            dl->perm_shard = s;
            dl->perm_epoch = epoch;
        }
        w = dl->window_perm[local];
    }
    dataloader_copy_window(dl, s, w);
}

/* see header comment */
static inline void dataloader_reset(DataLoader* dl) {
    dl->epoch = 0;
    dl->position = (uint64_t)dl->process_rank;
}

/* see header comment */
static inline void dataloader_init(DataLoader* dl, const char* glob_pattern, int B, int T, int process_rank,
                                   int num_processes, int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof(*dl));
    if (glob_pattern == NULL || glob_pattern[0] == '\0') { /* the trainer passes -j '' as "no validation", never here */
        FATAL("flag -i (--train-data) is empty; expected a glob(3) pattern of token shards, e.g. -i 'data/train_*.bin'");
    }
    if (B < 1 || T < 1) { FATAL("dataloader: batch size B=%d and sequence length T=%d must both be >= 1", B, T); }
    if (num_processes < 1 || process_rank < 0 || process_rank >= num_processes) {
        FATAL("dataloader: process rank %d is not in [0, %d)", process_rank, num_processes);
    }
    dl->B = B; dl->T = T;
    dl->process_rank = process_rank; dl->num_processes = num_processes;
    dl->shuffle = shuffle ? 1 : 0;
    dl->seed = seed;
    glob_t g;
    int rc = glob(glob_pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        if (rc == 0) { globfree(&g); }
        FATAL("no token shard matches the pattern '%s'; check the path, or generate shards with the data preparation script prepare.py (README, \"Data\")", glob_pattern);
    }
    if (rc != 0) { FATAL("glob failed for token-shard pattern '%s' (glob error %d)", glob_pattern, rc); }
    if (g.gl_pathc > 1000000) { globfree(&g); FATAL("pattern '%s' matches %zu files; at most 1000000 shards are supported", glob_pattern, (size_t)g.gl_pathc); }
    int n = (int)g.gl_pathc;
    dl->num_shards = n;
    dl->shard_paths = (char**)calloc_check((size_t)n, sizeof(char*), "shard paths");
    dl->shard_num_tokens = (size_t*)calloc_check((size_t)n, sizeof(size_t), "shard token counts");
    dl->shard_windows = (size_t*)calloc_check((size_t)n, sizeof(size_t), "shard windows");
    dl->shard_token_bytes = (unsigned char*)calloc_check((size_t)n, 1, "shard token widths");
    dl->shard_order = (int*)calloc_check((size_t)n, sizeof(int), "shard order");
    dl->order_cumulative = (size_t*)calloc_check((size_t)n + 1, sizeof(size_t), "shard window offsets");
    for (int i = 0; i < n; i++) { dl->shard_paths[i] = dataloader_strdup(g.gl_pathv[i]); }
    globfree(&g);
    size_t max_windows = 0;
    dl->num_windows_total = 0;
    dl->fingerprint = 14695981039346656037ULL;
    for (int c = 0; c < DATALOADER_MAP_CACHE; c++) { dl->cache_shard[c] = -1; }
    for (int i = 0; i < n; i++) {
        dataloader_open_shard(dl, i);
        dl->num_windows_total += dl->shard_windows[i];
        if (dl->shard_windows[i] > max_windows) { max_windows = dl->shard_windows[i]; }
    }
    dl->window_perm = dl->shuffle ? (size_t*)malloc_check(max_windows * sizeof(size_t), "window permutation") : NULL;
    dl->inputs = (int*)malloc_check((size_t)B * (size_t)T * sizeof(int), "dataloader inputs");
    dl->targets = (int*)malloc_check((size_t)B * (size_t)T * sizeof(int), "dataloader targets");
    dl->order_epoch = UINT64_MAX;
    dl->perm_shard = -1;
    dl->perm_epoch = UINT64_MAX;
    dl->vocab_limit = 0;
    dataloader_reset(dl);
}

/* see header comment */
static inline size_t dataloader_windows_per_epoch(const DataLoader* dl) { return dl->num_windows_total; }

/* see header comment */
static inline void dataloader_set_vocab_limit(DataLoader* dl, int vocab_size) { dl->vocab_limit = vocab_size > 0 ? vocab_size : 0; }

/* see header comment */
static inline void dataloader_next_batch(DataLoader* dl) {
    if (dl->position >= (uint64_t)dl->num_windows_total) {
        dl->epoch++;
        dl->position = (uint64_t)dl->process_rank;
        /* a rank with rank >= windows per epoch would never read anything: refuse instead of spinning */
        if (dl->position >= (uint64_t)dl->num_windows_total) {
            FATAL("dataloader: %zu windows per epoch is fewer than the %d processes; rank %d gets no data "
                  "(use more data or a smaller B*T)", dl->num_windows_total, dl->num_processes, dl->process_rank);
        }
    }
    dataloader_load_position(dl, dl->epoch, dl->position);
    dl->position += (uint64_t)dl->num_processes;
}

/* see header comment */
static inline void dataloader_get_state(const DataLoader* dl, DataLoaderState* st) {
    st->epoch = dl->epoch;
    st->position = dl->position;
}

/* see header comment; FATAL if the state does not belong to this rank/world/data */
static inline void dataloader_set_state(DataLoader* dl, const DataLoaderState* st) {
    if (st->position % (uint64_t)dl->num_processes != (uint64_t)dl->process_rank) {
        FATAL("dataloader state: position %llu does not belong to rank %d of %d (position %% processes must equal the rank); "
              "was the checkpoint written with a different number of processes?",
              (unsigned long long)st->position, dl->process_rank, dl->num_processes);
    }
    if (st->position >= (uint64_t)dl->num_windows_total + (uint64_t)dl->num_processes) {
        FATAL("dataloader state: position %llu is past the %zu windows per epoch; was the checkpoint written with "
              "different data or a different B*T?", (unsigned long long)st->position, dl->num_windows_total);
    }
    dl->epoch = st->epoch;
    dl->position = st->position;
}

/* see header comment */
static inline void dataloader_load_window(DataLoader* dl, size_t global_window_index) {
    if (global_window_index >= dl->num_windows_total) {
        FATAL("dataloader: window %zu requested, but there are only %zu windows", global_window_index, dl->num_windows_total);
    }
    size_t k = global_window_index;
    for (int s = 0; s < dl->num_shards; s++) {
        if (k < dl->shard_windows[s]) { dataloader_copy_window(dl, s, k); return; }
        k -= dl->shard_windows[s];
    }
}

/* see header comment */
static inline size_t dataloader_sequences(const DataLoader* dl) {
    size_t n = 0;
    for (int s = 0; s < dl->num_shards; s++) { n += (dl->shard_num_tokens[s] - 1) / (size_t)dl->T; }
    return n;
}

/* see header comment */
static inline void dataloader_load_sequence(DataLoader* dl, size_t j, int row) {
    size_t T = (size_t)dl->T, k = j;
    if (row < 0 || row >= dl->B) { FATAL("dataloader: row %d of a batch of %d requested", row, dl->B); }
    for (int s = 0; s < dl->num_shards; s++) {
        size_t n = (dl->shard_num_tokens[s] - 1) / T;
        if (k >= n) { k -= n; continue; }
        dataloader_copy_tokens(dl, s, k * T, T, dl->inputs + (size_t)row * T, dl->targets + (size_t)row * T);
        return;
    }
    FATAL("dataloader: sequence %zu requested, but there are only %zu sequences of T+1 = %zu tokens", j,
          dataloader_sequences(dl), T + 1);
}

/* see header comment */
static inline uint64_t dataloader_fingerprint(const DataLoader* dl) { return dl->fingerprint; }

/* see header comment */
static inline void dataloader_free(DataLoader* dl) {
    for (int c = 0; c < DATALOADER_MAP_CACHE; c++) {
        if (dl->cache_shard[c] >= 0 && dl->cache_map[c]) { munmap(dl->cache_map[c], dl->cache_bytes[c]); }
    }
    for (int i = 0; i < dl->num_shards; i++) { if (dl->shard_paths) { free(dl->shard_paths[i]); } }
    free(dl->shard_paths);
    free(dl->shard_num_tokens); free(dl->shard_windows); free(dl->shard_token_bytes);
    free(dl->shard_order); free(dl->order_cumulative); free(dl->window_perm);
    free(dl->inputs); free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}

#endif /* LLMC_DATALOADER_H */
