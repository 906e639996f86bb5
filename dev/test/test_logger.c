/*
 * dev/test/test_logger.c -- unit tests of llmc/logger.h: line format, JSON string escaping
 * (checked byte-exactly and, where python3 is available, by a real JSON parser), rank-0-only
 * writing, disabled logging, append vs overwrite, and logger_truncate_after_step; a write that fails at the
 * file-size limit (a full disk) leaves no torn line: the log ends with its last complete line.
 */
#include <sys/resource.h>
#include <sys/wait.h>
#include "llmc/logger.h"
#include "dev/test/testing.h"

static char g_dir[256];

/* reads the whole file into a malloc'd NUL-terminated buffer */
static char* slurp(const char* path, size_t* n_out) { /* "" for a missing file */
    char* s = testing_read_file(path, n_out);
    if (!s) { s = (char*)malloc(1); s[0] = 0; }
    return s;
}

/* a child logs 100-byte lines under a 1,000-byte file-size limit until a write fails (FATAL); returns its status */
static int log_until_full(const char* dir) {
    pid_t p = fork();
    if (p == 0) {
        if (!freopen("/dev/null", "w", stderr)) { _exit(99); }
        Logger lg;
        logger_init(&lg, dir, 0, 0);
        struct rlimit rl = {1000, 1000};
        setrlimit(RLIMIT_FSIZE, &rl);
        char extra[128];
        snprintf(extra, sizeof(extra), "\"text\":\"%063d\"", 7);
        for (int i = 0; i < 50; i++) { logger_log(&lg, "train", i, extra); }
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    return st;
}

int main(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/test_logger_XXXXXX");
    if (mkdtemp(g_dir) == NULL) { perror("mkdtemp"); return 1; }
    char out_dir[300], path[400];
    snprintf(out_dir, sizeof(out_dir), "%s/run", g_dir); /* created by logger_init */
    snprintf(path, sizeof(path), "%s/log.jsonl", out_dir);

    Logger lg;
    logger_init(&lg, out_dir, 0, 0);
    TEST_CHECK(lg.file != NULL && dir_exists(out_dir), "rank 0 creates the output directory and opens log.jsonl");
    logger_log(&lg, "config", 0, "\"batch-size\":4");
    logger_log(&lg, "train", 1, "\"loss\":3.5,\"lr\":0.0001");
    logger_log(&lg, "val", 1, NULL);
    logger_log_text(&lg, "sample", 2, "text", "a\"b\\c\nd\te\x01\x7f caf\xC3\xA9 \xF0\x9F\xA4\x97 bad\xFF end\xE2\x82");
    logger_log_text_n(&lg, "sample", 3, "text", "nul\0byte", 8);
    size_t n;
    char* s = slurp(path, &n);
    const char* expect =
        "{\"kind\":\"config\",\"step\":0,\"batch-size\":4}\n"
        "{\"kind\":\"train\",\"step\":1,\"loss\":3.5,\"lr\":0.0001}\n"
        "{\"kind\":\"val\",\"step\":1}\n"
        "{\"kind\":\"sample\",\"step\":2,\"text\":\"a\\\"b\\\\c\\nd\\te\\u0001\\u007f caf\xC3\xA9 \xF0\x9F\xA4\x97 bad\\ufffd end\\ufffd\\ufffd\"}\n"
        "{\"kind\":\"sample\",\"step\":3,\"text\":\"nul\\u0000byte\"}\n";
    TEST_CHECK(strcmp(s, expect) == 0, "lines are flushed immediately and escaped byte-exactly:\n%s", s);
    free(s);
    char num[32];
    TEST_CHECK(strcmp(logger_json_number(num, sizeof(num), NAN), "null") == 0 && strcmp(logger_json_number(num, sizeof(num), 0.25), "0.25") == 0,
               "logger_json_number writes null for NaN and plain numbers otherwise");
    /* a real JSON parser accepts every line, if python3 is available */
    /* a full disk (here the file-size limit) during a log write: no torn last line */
    {
        char full_dir[300], full_path[400];
        snprintf(full_dir, sizeof(full_dir), "%s/full", g_dir);
        snprintf(full_path, sizeof(full_path), "%s/log.jsonl", full_dir);
        int st = log_until_full(full_dir);
        size_t n = 0;
        char* text = slurp(full_path, &n);
        int lines = 0, whole = 1;
        for (char* l = text; *l; ) {
            char* nl = strchr(l, '\n');
            if (!nl) { whole = 0; break; }
            whole &= strncmp(l, "{\"kind\":\"train\"", 15) == 0 && nl[-1] == '}';
            lines++;
            l = nl + 1;
        }
        TEST_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && n > 0 && n <= 1000 && text[n - 1] == '\n' && whole && lines >= 5,
                   "a log write failing at the file-size limit: exit 1, the log ends with its last complete line (%d lines, "
                   "%zu bytes, status %d)", lines, n, st);
        free(text);
        remove(full_path);
        rmdir(full_dir);
    }
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "command -v python3 >/dev/null 2>&1 || exit 77; python3 -c \"import json,sys; "
             "[json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]\" '%s'", path);
    int rc = system(cmd);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) { printf("# python3 not found: JSON parse check skipped\n"); }
    else { TEST_CHECK(rc == 0, "python json.loads parses every line (strict UTF-8)"); }

    /* append mode keeps existing lines */
    logger_log(&lg, "train", 4, "\"loss\":3.0");
    logger_log(&lg, "train", 10, "\"loss\":2.0");
    logger_log_text(&lg, "sample", 11, "text", "fake \"step\":1 inside text");
    logger_log(&lg, "config", 12, "\"resumed\":1");
    logger_free(&lg);
    TEST_CHECK(lg.file == NULL, "logger_free closes the file");
    /* truncate after step 4: keeps steps <= 4 and config lines */
    logger_truncate_after_step(path, 4);
    s = slurp(path, &n);
    int has4 = strstr(s, "\"step\":4,") != NULL, has10 = strstr(s, "\"step\":10,") != NULL, has11 = strstr(s, "\"step\":11,") != NULL;
    int has_cfg12 = strstr(s, "\"resumed\":1") != NULL, has_sample2 = strstr(s, "\"step\":2,") != NULL;
    TEST_CHECK(has4 && has_sample2 && !has10, "truncate_after_step(4) keeps steps <= 4 and drops step 10");
    TEST_CHECK(!has11, "a \"step\" inside a text value is not mistaken for the key (step 11 line dropped)");
    TEST_CHECK(has_cfg12, "config lines are kept regardless of their step");
    char tmp_path[420];
    snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", path);
    TEST_CHECK(!file_exists(tmp_path), "no temporary file is left behind");
    free(s);
    /* crash-cut last line is dropped */
    FILE* f = fopen_check(path, "ab");
    fputs("{\"kind\":\"train\",\"step\":2,\"partia", f);
    fclose_check(f, path);
    logger_truncate_after_step(path, 100);
    s = slurp(path, &n);
    int all_closed = n > 0 && s[n - 1] == '\n';
    for (size_t i = 1; i < n; i++) { if (s[i] == '\n' && s[i - 1] != '}') { all_closed = 0; } }
    TEST_CHECK(all_closed && strstr(s, "partia") == NULL, "an unterminated last line is dropped (every line ends with '}')");
    free(s);
    logger_truncate_after_step("/nonexistent_dir_xyz/log.jsonl", 5);
    TEST_CHECK(1, "truncating a missing log is a no-op (did not exit)");
    /* resume: append */
    logger_init(&lg, out_dir, 0, 1);
    logger_log(&lg, "train", 5, "\"loss\":2.9");
    logger_free(&lg);
    s = slurp(path, &n);
    TEST_CHECK(strstr(s, "\"step\":4,") && strstr(s, "\"step\":5,\"loss\":2.9}\n"), "append mode keeps old lines and adds new ones");
    free(s);
    /* overwrite */
    logger_init(&lg, out_dir, 0, 0);
    logger_log(&lg, "train", 1, NULL);
    logger_free(&lg);
    s = slurp(path, &n);
    TEST_CHECK(strcmp(s, "{\"kind\":\"train\",\"step\":1}\n") == 0, "append=0 starts a new log");
    free(s);
    char kept[400];
    snprintf(kept, sizeof(kept), "%s/log.1.jsonl", out_dir);
    s = slurp(kept, &n);
    TEST_CHECK(s && strstr(s, "\"step\":5,\"loss\":2.9}\n"), "append=0 keeps the earlier log as log.1.jsonl");
    free(s);
    logger_init(&lg, out_dir, 0, 0); /* a second new run: log.jsonl (one line) -> log.2.jsonl */
    logger_free(&lg);
    snprintf(kept, sizeof(kept), "%s/log.2.jsonl", out_dir);
    s = slurp(kept, &n);
    TEST_CHECK(s && strcmp(s, "{\"kind\":\"train\",\"step\":1}\n") == 0, "the next new run keeps it as log.2.jsonl");
    free(s);
    logger_init(&lg, out_dir, 0, 0); /* an empty log is not kept */
    logger_free(&lg);
    snprintf(kept, sizeof(kept), "%s/log.3.jsonl", out_dir);
    TEST_CHECK(!file_exists(kept), "an empty earlier log is replaced, not kept");
    /* other ranks and disabled logging write nothing */
    char dir2[300];
    snprintf(dir2, sizeof(dir2), "%s/rank1", g_dir);
    logger_init(&lg, dir2, 1, 0);
    logger_log(&lg, "train", 1, NULL);
    logger_log_text(&lg, "sample", 1, "text", "x");
    logger_free(&lg);
    TEST_CHECK(!dir_exists(dir2), "rank 1 creates and writes nothing");
    logger_init(&lg, NULL, 0, 0);
    logger_log(&lg, "train", 1, NULL);
    logger_free(&lg);
    logger_init(&lg, "", 0, 0);
    TEST_CHECK(lg.file == NULL, "NULL or empty output dir disables logging");
    logger_free(&lg);
    /* scanner unit checks */
    int has_step, is_cfg;
    long long st;
    const char* l1 = "{\"kind\":\"config\",\"step\":-1}";
    logger_scan_line(l1, strlen(l1), &has_step, &st, &is_cfg);
    TEST_CHECK(has_step && st == -1 && is_cfg, "scanner reads a negative step and the config kind");
    const char* l2 = "{\"kind\":\"x\",\"nested\":{\"step\":99},\"text\":\"\\\\\",\"step\":7}";
    logger_scan_line(l2, strlen(l2), &has_step, &st, &is_cfg);
    TEST_CHECK(has_step && st == 7 && !is_cfg, "scanner ignores nested objects and handles an escaped backslash before the closing quote (step %lld)", st);

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) { fprintf(stderr, "warning: could not remove %s\n", g_dir); }
    return testing_finish();
}
