/*
 * dev/fuzz/fuzz_shard.c -- libFuzzer harness of the token-shard reader (llmc/dataloader.h): dataloader_init on the
 * input as one shard (B=2, T=4, vocabulary limit 64 as dataloader_set_vocab_limit sets it), then every window of an
 * epoch through dataloader_next_batch, shuffled and not. Every input loads or is refused with one "error:" line.
 * Seeds: dev/fuzz/make_seeds.py (a version 1 shard of uint16 ids and a version 2 shard of uint32 ids).
 */
#include "dev/fuzz/fuzz_common.h"
#include "llmc/dataloader.h"

static void run(const char* path, int shuffle) {
    DataLoader dl;
    dataloader_init(&dl, path, 2, 4, 0, 1, shuffle, 7);
    dataloader_set_vocab_limit(&dl, 64);
    size_t w = dataloader_windows_per_epoch(&dl);
    for (size_t i = 0; i < w + 1 && i < 256; i++) { dataloader_next_batch(&dl); }
    dataloader_free(&dl);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_input_path(data, size);
    FUZZ_RUN(run(path, 0));
    FUZZ_RUN(run(path, 1));
    return 0;
}
