/*
 * dev/test/test_loss_scaler.c -- unit tests of llmc/loss_scaler.h (dynamic FP16 loss scaling):
 * halving and skipping on overflow, growth after growth_interval good steps, bounds, counter reset,
 * and the init error (forked child).
 */
#include <fcntl.h>
#include <sys/wait.h>
#include "llmc/loss_scaler.h"
#include "dev/test/testing.h"

static void child_bad_init(void) { LossScaler ls; loss_scaler_init(&ls, 65536.0f, 0); }

int main(void) {
    LossScaler ls;
    loss_scaler_init(&ls, 65536.0f, 3);
    TEST_CHECK(ls.scale == 65536.0f && ls.good_steps == 0, "init sets the scale and zero good steps");
    TEST_CHECK(loss_scaler_update(&ls, 1) == 1 && ls.scale == 32768.0f, "overflow: skip the step and halve the scale");
    TEST_CHECK(loss_scaler_update(&ls, 0) == 0 && loss_scaler_update(&ls, 0) == 0 && ls.scale == 32768.0f,
               "two good steps (< interval 3): no change");
    TEST_CHECK(loss_scaler_update(&ls, 0) == 0 && ls.scale == 65536.0f && ls.good_steps == 0,
               "third consecutive good step doubles the scale and resets the counter");
    loss_scaler_update(&ls, 0);
    loss_scaler_update(&ls, 0);
    loss_scaler_update(&ls, 1);
    TEST_CHECK(ls.scale == 32768.0f && ls.good_steps == 0, "overflow resets the good-step counter");
    loss_scaler_update(&ls, 0);
    loss_scaler_update(&ls, 0);
    TEST_CHECK(ls.scale == 32768.0f, "growth needs 3 consecutive good steps after an overflow");
    TEST_CHECK(ls.num_skipped == 2, "skipped steps counted (2)");
    LossScaler lo;
    loss_scaler_init(&lo, 2.0f, 1000);
    loss_scaler_update(&lo, 1);
    loss_scaler_update(&lo, 1);
    TEST_CHECK(loss_scaler_update(&lo, 1) == 1 && lo.scale == 1.0f, "scale never drops below 1");
    LossScaler hi;
    loss_scaler_init(&hi, 8388608.0f, 1);
    loss_scaler_update(&hi, 0);
    loss_scaler_update(&hi, 0);
    TEST_CHECK(hi.scale == 16777216.0f, "scale capped at 2^24 (got %g)", (double)hi.scale);
    /* simulated training: gradients overflow whenever scale * 1000 > 65504 (the FP16 max) */
    LossScaler sim;
    loss_scaler_init(&sim, 65536.0f, 10);
    int skipped = 0;
    for (int step = 0; step < 200; step++) {
        int inf = sim.scale * 1000.0f > 65504.0f;
        skipped += loss_scaler_update(&sim, inf);
    }
    TEST_CHECK(sim.scale <= 64.0f && sim.scale >= 32.0f && skipped < 30,
               "simulated overflow threshold: scale settles at 32-64 (got %g) with few skips (%d)", (double)sim.scale, skipped);
    char tmpl[] = "/tmp/lstest_XXXXXX";
    int fd = mkstemp(tmpl);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { dup2(fd, 2); child_bad_init(); exit(0); }
    int status = 0;
    waitpid(pid, &status, 0);
    char err[512];
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, err, sizeof(err) - 1);
    err[n > 0 ? n : 0] = '\0';
    close(fd); unlink(tmpl);
    TEST_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, "growth interval") && strstr(err, ">= 1"),
               "growth interval 0 refused (%s)", err);
    return testing_finish();
}
