/*
 * dev/test/test_preempt.c -- llmc/preempt.h's handlers (llmc/README.md, "Preemption"), each case in a child process:
 *   - preempt_install_early (called as soon as the flags are parsed): a SIGTERM or SIGUSR1 during start-up is
 *     recorded, the process lives on; the training loop's later preempt_install does not re-arm the handler, so a
 *     second signal still has its default effect (the process dies by it);
 *   - nothing is installed (the signal keeps its default effect) without an output directory, with
 *     --signal-checkpoint none, and for a value preempt_parse refuses (the session reports that one).
 * How it fails: a missing early install lets the first signal kill the child before it reports; a re-arming install
 * lets the child survive the second signal.
 */
#include <sys/wait.h>
#include "dev/test/testing.h"
#include "llmc/preempt.h"

/* runs a child that installs early with (spec, dir), raises sig, writes to the pipe whether it was recorded, then
 * does the training loop's install and raises sig again. *reported: what the child wrote ('1' recorded, '0' not,
 * -1 nothing: it died at the first signal); returns the signal that ended it (0 if it exited) */
static int run_child(const char* spec, const char* dir, int sig, int* reported) {
    int fds[2];
    if (pipe(fds) != 0) { return -1; }
    pid_t p = fork();
    if (p == 0) {
        close(fds[0]);
        preempt_install_early(spec, dir);
        raise(sig);
        char c = preempt_pending() && preempt_signal() == sig ? '1' : '0';
        if (write(fds[1], &c, 1) != 1) { _exit(4); }
        int sigs[2] = {SIGTERM, SIGUSR1};
        preempt_install(sigs, 2); /* the training loop's install */
        raise(sig);
        _exit(0);
    }
    close(fds[1]);
    char c = 0;
    *reported = read(fds[0], &c, 1) == 1 ? c : -1;
    close(fds[0]);
    int st = 0;
    waitpid(p, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

int main(void) {
    int rep = 0, died;
    died = run_child("term,usr1", "/tmp/out", SIGTERM, &rep);
    TEST_CHECK(rep == '1' && died == SIGTERM,
               "a SIGTERM during start-up (after the early install) is recorded; the second one ends the process "
               "(recorded: %c, ended by signal %d)", rep > 0 ? rep : '-', died);
    died = run_child("usr1", "/tmp/out", SIGUSR1, &rep);
    TEST_CHECK(rep == '1' && died == SIGUSR1, "--signal-checkpoint usr1: a SIGUSR1 during start-up is recorded, the "
               "second ends the process (recorded: %c, signal %d)", rep > 0 ? rep : '-', died);
    died = run_child("usr1", "/tmp/out", SIGTERM, &rep);
    TEST_CHECK(rep == -1 && died == SIGTERM, "--signal-checkpoint usr1: SIGTERM keeps its default effect (signal %d)", died);
    died = run_child("term,usr1", "", SIGTERM, &rep);
    TEST_CHECK(rep == -1 && died == SIGTERM, "without -o nothing is installed: SIGTERM ends the process (signal %d)", died);
    died = run_child("none", "/tmp/out", SIGTERM, &rep);
    TEST_CHECK(rep == -1 && died == SIGTERM, "--signal-checkpoint none: SIGTERM ends the process (signal %d)", died);
    died = run_child("bogus", "/tmp/out", SIGTERM, &rep);
    TEST_CHECK(rep == -1 && died == SIGTERM, "a refused --signal-checkpoint value installs nothing early (signal %d)", died);
    return testing_finish();
}
