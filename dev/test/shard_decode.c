/*
 * dev/test/shard_decode.c -- test helper of dev/test/cli_tokens32.sh: the text of token shards through the trainer's
 * own readers.
 *   build/shard_decode TOKENIZER.bin 'SHARDS_GLOB'
 * reads the shards with llmc/dataloader.h (either version, in glob order; the vocabulary limit is the decode table's
 * size, so an id outside the table stops it like the trainer) and writes to stdout the bytes of every token of every
 * shard, decoded through llmc/tokenizer.h's decode table (tokenizer_decode: raw bytes, no UTF-8 repair), and to
 * stderr one line "tokens N, max id M". Bad input: one "error:" line from the reader, exit 1; usage errors exit 2.
 */
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "error: usage: %s TOKENIZER.bin 'SHARDS_GLOB'\n", argv[0]);
        return 2;
    }
    Tokenizer tok;
    if (tokenizer_init(&tok, argv[1]) != 1) { return 1; }
    DataLoader dl; /* T = 1: sequence j of a shard is its tokens j and j+1, so every token is read once in order */
    dataloader_init(&dl, argv[2], 1, 1, 0, 1, 0, 0);
    dataloader_set_vocab_limit(&dl, (int)tok.vocab_size);
    size_t count = 0, j = 0;
    int max_id = -1;
    for (int s = 0; s < dl.num_shards; s++) {
        size_t n = dl.shard_num_tokens[s] - 1; /* sequences of this shard */
        for (size_t k = 0; k < n; k++, j++) {
            dataloader_load_sequence(&dl, j, 0);
            int ids[2] = {dl.inputs[0], dl.targets[0]};
            for (int q = k == 0 ? 0 : 1; q < 2; q++) { /* a shard's first token, then each sequence's second */
                size_t len = 0;
                const char* b = tokenizer_decode(&tok, (uint32_t)ids[q], &len);
                if (b == NULL) { FATAL("token id %d of shard '%s' has no bytes in '%s'", ids[q], dl.shard_paths[s], argv[1]); }
                fwrite(b, 1, len, stdout);
                if (ids[q] > max_id) { max_id = ids[q]; }
                count++;
            }
        }
    }
    fprintf(stderr, "tokens %zu, max id %d\n", count, max_id);
    dataloader_free(&dl);
    tokenizer_free(&tok);
    return 0;
}
