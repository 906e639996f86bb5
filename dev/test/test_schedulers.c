/*
 * dev/test/test_schedulers.c -- unit tests of llmc/schedulers.h: warmup shape, exact floors at the
 * last step, monotonicity, WSD phases, constant, and the unknown-type error (forked child).
 */
#include <fcntl.h>
#include <sys/wait.h>
#include "llmc/schedulers.h"
#include "dev/test/testing.h"

static void check_schedule(const char* type, float lr, int warmup, int N, float frac, float wsd) {
    LRScheduler s;
    lr_scheduler_init(&s, type, lr, warmup, N, frac, wsd);
    float floor_lr = lr * frac;
    float first = lr_scheduler_get(&s, 0);
    TEST_CHECK(first > 0.0f && first == lr / (float)warmup * 1.0f, "%s: step 0 is lr/warmup = %g (got %g)", type, (double)(lr / (float)warmup), (double)first);
    int warm_ok = 1;
    for (int i = 0; i < warmup; i++) {
        float expect = lr * (float)((double)(i + 1) / warmup);
        if (fabsf(lr_scheduler_get(&s, i) - expect) > 1e-7f * lr) { warm_ok = 0; }
    }
    TEST_CHECK(warm_ok && lr_scheduler_get(&s, warmup - 1) == lr, "%s: linear warmup (step+1)/warmup reaching lr at step warmup-1", type);
    float last = lr_scheduler_get(&s, N - 1);
    TEST_CHECK(last == floor_lr, "%s: last step %d equals the floor %g exactly (got %.9g)", type, N - 1, (double)floor_lr, (double)last);
    TEST_CHECK(lr_scheduler_get(&s, N - 2) > floor_lr, "%s: the step before last is above the floor", type);
    int mono = 1;
    for (int i = warmup; i < N - 1; i++) { if (lr_scheduler_get(&s, i + 1) > lr_scheduler_get(&s, i)) { mono = 0; } }
    TEST_CHECK(mono, "%s: non-increasing after warmup", type);
    TEST_CHECK(lr_scheduler_get(&s, N + 5) == floor_lr, "%s: steps past the end stay at the floor", type);
}

static void child_unknown(void) {
    LRScheduler s;
    lr_scheduler_init(&s, "cosin", 1e-3f, 10, 100, 0.0f, 0.2f);
}
static void child_bad_frac(void) {
    LRScheduler s;
    lr_scheduler_init(&s, "cosine", 1e-3f, 10, 100, 1.5f, 0.2f);
}

static int run_child(void (*fn)(void), char* err, size_t cap) {
    char tmpl[] = "/tmp/schedtest_XXXXXX";
    int fd = mkstemp(tmpl);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { dup2(fd, 2); fn(); exit(0); }
    int status = 0;
    waitpid(pid, &status, 0);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, err, cap - 1);
    err[n > 0 ? n : 0] = '\0';
    close(fd); unlink(tmpl);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int main(void) {
    check_schedule("cosine", 6e-4f, 10, 100, 0.1f, 0.0f);
    check_schedule("linear", 6e-4f, 10, 100, 0.0f, 0.0f);
    check_schedule("wsd", 6e-4f, 10, 100, 0.05f, 0.2f);
    check_schedule("cosine", 1e-3f, 1, 7, 0.0f, 0.0f);

    LRScheduler s;
    lr_scheduler_init(&s, "cosine", 1.0f, 0, 101, 0.0f, 0.0f);
    TEST_CHECK(lr_scheduler_get(&s, 0) == 1.0f, "cosine without warmup starts at lr");
    TEST_CHECK(fabsf(lr_scheduler_get(&s, 50) - 0.5f) < 1e-6f, "cosine midpoint (step 50 of 0..100) is (lr+floor)/2 (got %g)", (double)lr_scheduler_get(&s, 50));
    TEST_CHECK(fabsf(lr_scheduler_get(&s, 25) - 0.5f * (1.0f + cosf(0.25f * 3.14159265f))) < 1e-6f, "cosine quarter point matches 0.5(1+cos(pi/4))");
    lr_scheduler_init(&s, "linear", 1.0f, 0, 101, 0.2f, 0.0f);
    TEST_CHECK(fabsf(lr_scheduler_get(&s, 50) - 0.6f) < 1e-6f, "linear midpoint to floor 0.2 is 0.6 (got %g)", (double)lr_scheduler_get(&s, 50));
    lr_scheduler_init(&s, "wsd", 1.0f, 5, 100, 0.0f, 0.2f);
    TEST_CHECK(lr_scheduler_get(&s, 79) == 1.0f && lr_scheduler_get(&s, 80) == 1.0f && lr_scheduler_get(&s, 81) < 1.0f,
               "wsd: stable at lr through step 80, decaying from step 81 (decay over the last 20 steps)");
    TEST_CHECK(fabsf(lr_scheduler_get(&s, 90) - (1.0f - 10.0f / 19.0f)) < 1e-6f, "wsd decay is linear: step 90 = 1 - 10/19");
    lr_scheduler_init(&s, "constant", 2e-4f, 4, 50, 0.1f, 0.0f);
    TEST_CHECK(lr_scheduler_get(&s, 0) == 5e-5f && lr_scheduler_get(&s, 4) == 2e-4f && lr_scheduler_get(&s, 49) == 2e-4f,
               "constant: warmup, then lr to the end (final fraction ignored)");
    lr_scheduler_init(&s, "cosine", 1e-3f, 0, 1, 0.1f, 0.0f);
    TEST_CHECK(lr_scheduler_get(&s, 0) == 1e-3f * 0.1f, "single-step cosine run: step 0 is also the last step -> floor");

    char err[1024];
    int rc = run_child(child_unknown, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "'cosin'") && strstr(err, "cosine, linear, constant, wsd"),
               "unknown schedule type: exit 1 naming it and listing the valid types (%s)", err);
    rc = run_child(child_bad_frac, err, sizeof(err));
    TEST_CHECK(rc == 1 && strstr(err, "[0, 1]") && strstr(err, "1.5"), "final fraction 1.5 refused with the expected range (%s)", err);
    return testing_finish();
}
