/*
 * dev/test/test_progress.c -- unit tests of llmc/progress.h: the duration format at every unit boundary, the
 * elapsed time and the ETA (first step excluded from the mean, --log-every independent, -1 before any step).
 */
#include "llmc/progress.h"
#include "dev/test/testing.h"
#include <string.h>

static int fmt_is(double s, const char* want) {
    char buf[32];
    progress_format_duration(s, buf, sizeof(buf));
    if (strcmp(buf, want) != 0) { printf("# %.3f s -> '%s', expected '%s'\n", s, buf, want); return 0; }
    return 1;
}

int main(void) {
    TEST_CHECK(fmt_is(0.0, "0.0s") && fmt_is(0.46, "0.4s") && fmt_is(0.99, "0.9s"), "under 1 s: tenths, rounded down");
    TEST_CHECK(fmt_is(1.0, "1s") && fmt_is(59.9, "59s"), "seconds below a minute: 1s, 59s");
    TEST_CHECK(fmt_is(60.0, "1m00s") && fmt_is(192.0, "3m12s") && fmt_is(3599.0, "59m59s"), "minutes: 1m00s, 3m12s, 59m59s");
    TEST_CHECK(fmt_is(3600.0, "1h00m") && fmt_is(3720.0, "1h02m") && fmt_is(86399.0, "23h59m"), "hours: 1h00m, 1h02m, 23h59m");
    TEST_CHECK(fmt_is(86400.0, "1d00h") && fmt_is(2 * 86400.0 + 3 * 3600.0 + 59, "2d03h"), "days: 1d00h, 2d03h");
    TEST_CHECK(fmt_is(-1.0, "?") && fmt_is(NAN, "?") && fmt_is(INFINITY, "?"), "negative, NaN and inf print '?'");

    Progress p;
    progress_start(&p, 100.0);
    TEST_CHECK(progress_eta(&p, 100.0, 10) == -1.0, "no ETA before the first step");
    progress_step_done(&p, 105.0);   /* first step: 5 s with warm-up */
    TEST_CHECK(progress_eta(&p, 105.0, 10) == 50.0, "after one step: its time x steps left (5 s x 10 = %.1f)",
               progress_eta(&p, 105.0, 10));
    progress_step_done(&p, 106.0);
    progress_step_done(&p, 107.0);
    progress_step_done(&p, 108.0);   /* three more steps of 1 s */
    TEST_CHECK(progress_eta(&p, 108.0, 10) == 10.0, "after four steps: the mean of steps 2..4 (1 s) x 10 = %.1f, the "
               "warm-up step left out", progress_eta(&p, 108.0, 10));
    TEST_CHECK(progress_elapsed(&p, 108.0) == 8.0, "elapsed counts from the loop's start (8 s)");
    TEST_CHECK(progress_eta(&p, 108.0, 0) == 0.0, "no steps left: ETA 0");
    /* the same steps observed only every 2nd step (--log-every 2) give the same estimate: the ETA does not
     * depend on which steps are printed, only on progress_step_done being called every step */
    Progress q;
    progress_start(&q, 100.0);
    double t[4] = {105.0, 106.0, 107.0, 108.0};
    double at2 = -2.0;
    for (int i = 0; i < 4; i++) {
        progress_step_done(&q, t[i]);
        if ((i + 1) % 2 == 0) { at2 = progress_eta(&q, t[i], 10); }
    }
    TEST_CHECK(at2 == 10.0, "printed every 2nd step, the ETA at step 4 is the same 10 s (%.1f)", at2);
    return testing_finish();
}
