/*
 * llmc/train_eval.h -- the trainer's multiple-choice evaluation, -h 1 (llmc/README.md, "Evaluation"): the tasks of
 * --eval-tasks (files by dev/data/eval_suite.py, read by llmc/eval.h) scored at every validation (-v) and at the
 * end, through whatever layout the run uses; and the forward-only per-token losses it shares with the validation
 * loss (train_forward_losses).
 *
 * train_forward_losses(s, inputs, targets, rows): inputs, targets: int (B,T) on the host (B = -b, T = -t); rows <= B
 *   rows are real, the rest padding (a mixture of experts does not route them: MoEOptions.pad_tokens). Runs the
 *   model forward only, on one process, tp, pp (pipeline_window_loss_sum: the stages in turn), ZeRO-3 (layers
 *   gathered) or --ep alike, and returns the float (B,T) per-token cross entropy in nats (the model's host_losses
 *   buffer, valid until the next forward), or NULL on a pipeline stage without the head. Every tp rank gets the
 *   whole losses. Collective over tp and pp, and over dp under ZeRO-3 or --ep: every such rank makes the call.
 * train_eval_init(s): with -h 1, resolves --eval-tasks (eval_resolve_tasks) and reads every file (tokens below the
 *   model's vocabulary); any error, or an example with more endings than -b rows, is one line (CONFIG_FATAL).
 * train_eval_if_due(s, last): with -h 1, at every -v steps and at the end (last), evaluates every task; returns the
 *   suite score (mean centered accuracy) or NAN when not due. Prints one line (process 0): "eval 0.2650 (step S) |
 *   NAME acc A (sum logprob A2, n N) | ... | 1.2 s"; logs one row per task {"kind":"eval","step":S,"task":NAME,"n":N,
 *   "acc":A,"acc_sum_logprob":A2,"centered":C} and {"kind":"eval","step":S,"task":"suite","n":sum N,"tasks":k,
 *   "centered":mean C}. In evaluation only (-x 0) it also prints a progress line per tenth of each task, with an ETA.
 *   With --eval-dump FILE, process 0 also writes one JSON line per example of every task, {"step":S,"task":NAME,
 *   "index":I,"label":L,"pred":P,"pred_sum_logprob":P2,"mean_loss":[...K],"sum_loss":[...K]} (P: the ending of the
 *   lowest mean loss, P2: of the highest summed log-probability; losses in nats, %.9g), through an AtomicFile: the
 *   file holds the latest evaluation whole. The scores come from eval_score_rows_detail on the ranks that scored
 *   each example, summed over dp and pp like the counts (each example's words are nonzero on one rank only, so the
 *   sum is exact). For comparing per example with an independent scorer (dev/eval/reference_scorer.py).
 * Splitting: a task's first N examples (--eval-max-examples) are packed into batches of B rows by the file and B
 *   alone (eval_batch_starts); batch b runs on data-parallel rank b % world, so every layout sees the same batches
 *   and the counts (integers) are the same; every dp rank runs as many forwards (ZeRO-3 and --ep forwards are
 *   collective over dp; surplus ones are all padding). The counts are summed over dp and over pp (only the head
 *   stage scores), not over tp (every tp rank holds the same losses).
 * train_eval_free(s).
 */
#ifndef LLMC_TRAIN_EVAL_H
#define LLMC_TRAIN_EVAL_H

#include <math.h>
#include "llmc/eval.h"
#include "llmc/progress.h"
#include "llmc/train_session.h"

static const float* train_forward_losses(TrainSession* s, const int* inputs, const int* targets, int rows) {
    GPT2* m = &s->model;
    int B = s->cfg.B, T = s->cfg.T;
    if (s->pp->world > 1) {
        pipeline_window_loss_sum(&s->pipe, inputs, targets, s->cfg.gelu_fusion, rows);
        GPT2* head = pipeline_head(&s->pipe);
        return head ? head->host_losses : NULL;
    }
    dev_memcpy_h2d(m->inputs, inputs, (size_t)B * T * sizeof(int));
    dev_memcpy_h2d(m->targets, targets, (size_t)B * T * sizeof(int));
    m->moe_opt.pad_tokens = (B - rows) * T;
    gpt2_forward(m, m->inputs, m->targets, B, T, s->cfg.gelu_fusion, 0.0f, 0);
    m->moe_opt.pad_tokens = 0;
    dev_memcpy_d2h(m->host_losses, m->acts.t[A_LOSSES], (size_t)B * T * sizeof(float));
    return m->host_losses;
}

static void train_eval_init(TrainSession* s) {
    EvalSuite* ev = &s->eval;
    if (!s->cfg.eval) { return; }
    char err[1400];
    if (s->cfg.eval_dump[0] != '\0') { /* --eval-dump: refuse an unwritable place now, not after the first evaluation */
        double bad = 0;
        int eno = 0;
        if (is_rank0(s)) {
            char tmp[1040]; /* the AtomicFile's temp name, made and removed as atomic_file_open will */
            int fits = strlen(s->cfg.eval_dump) < sizeof(((AtomicFile*)0)->path);
            snprintf(tmp, sizeof(tmp), "%.1030s.tmp", s->cfg.eval_dump);
            if (fits) { (void)unlink(tmp); }
            int fd = fits ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666) : -1;
            eno = errno;
            if (fd >= 0) { close(fd); unlink(tmp); } else { bad = 1; }
        }
        comm_all_reduce_host_f64(&s->world, &bad, 1);
        if (bad) { CONFIG_FATAL(s, "--eval-dump '%s': cannot create '%s.tmp': %s", s->cfg.eval_dump, s->cfg.eval_dump,
                                strlen(s->cfg.eval_dump) < 1024 ? strerror(eno) : "path too long"); }
    }
    ev->n = eval_resolve_tasks(s->cfg.eval_tasks, s->cfg.eval_dir, ev->task, EVAL_MAX_TASKS, err, sizeof(err));
    if (ev->n < 0) { ev->n = 0; CONFIG_FATAL(s, "%s", err); }
    for (int i = 0; i < ev->n; i++) {
        EvalSet* es = &ev->set[i];
        if (eval_load_err(es, ev->task[i].path, s->model.config.vocab_size, err, sizeof(err)) != 0) {
            CONFIG_FATAL(s, "eval file '%s': %s", ev->task[i].path, err);
        }
        int n = s->cfg.eval_max_examples > 0 && s->cfg.eval_max_examples < es->num_examples ? s->cfg.eval_max_examples
                                                                                           : es->num_examples;
        for (int e = 0; e < n; e++) {
            if (es->num_endings[e] > s->cfg.B) {
                CONFIG_FATAL(s, "eval task '%s' (%s): example %d has %d endings, one row each, but -b is %d; pass -b %d "
                             "or more", ev->task[i].name, ev->task[i].path, e, es->num_endings[e], s->cfg.B,
                             es->num_endings[e]);
            }
        }
    }
}

static void train_eval_free(TrainSession* s) {
    for (int i = 0; i < s->eval.n; i++) { eval_free(&s->eval.set[i]); }
    s->eval.n = 0;
}

/* evaluation only (-x 0): process 0's progress line after round i (0-based) of `rounds`, at every tenth */
static void train_eval_progress(TrainSession* s, const char* name, int i, int rounds, const Progress* pg) {
    if (s->max_steps != 0 || !is_rank0(s) || (i + 1) * 10 / rounds == i * 10 / rounds) { return; }
    double now = wall_seconds(), el = progress_elapsed(pg, now);
    char e1[32], e2[32];
    progress_format_duration(el, e1, sizeof(e1));
    progress_format_duration(el / (i + 1) * (rounds - i - 1), e2, sizeof(e2));
    printf("eval %s: batch %d/%d (%d%%) | %s elapsed | eta %s\n", name, i + 1, rounds, 100 * (i + 1) / rounds, e1, e2);
    fflush(stdout);
}

/* one task on this rank's batches; returns the counts summed over every rank (see the header comment) */
static EvalCounts train_eval_task(TrainSession* s, const EvalSet* es, const char* name, double* detail) {
    int B = s->cfg.B, T = s->cfg.T, rank = s->dp->rank, world = s->dp->world;
    int n = s->cfg.eval_max_examples > 0 && s->cfg.eval_max_examples < es->num_examples ? s->cfg.eval_max_examples
                                                                                       : es->num_examples;
    int* starts = (int*)malloc_check(((size_t)n + 1) * sizeof(int), "eval batches");
    int nb = eval_batch_starts(es, n, B, starts), rounds = (nb + world - 1) / world;
    int* in = (int*)malloc_check((size_t)B * T * 2 * sizeof(int) + 2 * (size_t)B * sizeof(int), "eval batch");
    int *tg = in + (size_t)B * T, *rex = tg + (size_t)B * T, *ren = rex + B;
    uint8_t* mask = (uint8_t*)malloc_check((size_t)B * T, "eval mask");
    EvalCounts c = {0, 0, 0, 0};
    Progress pg;
    progress_start(&pg, wall_seconds());
    for (int i = 0; i < rounds; i++) { /* this rank's i-th batch: b = rank + i * world (past nb: all padding) */
        int b = rank + i * world, first = b < nb ? starts[b] : 0, end = b < nb ? starts[b + 1] : 0;
        int done = eval_fill_batch(es, first, end, B, T, 0, in, tg, mask, rex, ren);
        if (done != end - first) { FATAL("eval: batch %d laid out %d of its %d examples", b, done, end - first); }
        int rows = 0;
        while (rows < B && rex[rows] >= 0) { rows++; }
        const float* losses = train_forward_losses(s, in, tg, rows);
        if (losses) { eval_score_rows_detail(es, losses, mask, B, T, rex, ren, &c, detail, 0); }
        train_eval_progress(s, name, i, rounds, &pg);
    }
    double red[4] = {c.n, c.correct_mean, c.correct_sum, c.chance_sum};
    comm_all_reduce_host_f64(s->dp, red, 4);
    if (s->pp->world > 1) { comm_all_reduce_host_f64(s->pp, red, 4); } /* the head stage's counts (0 elsewhere) */
    if (detail) { /* --eval-dump: each example's words are nonzero on the one rank that scored it */
        comm_all_reduce_host_f64(s->dp, detail, n * EVAL_DETAIL_WORDS);
        if (s->pp->world > 1) { comm_all_reduce_host_f64(s->pp, detail, n * EVAL_DETAIL_WORDS); }
    }
    free(starts); free(in); free(mask);
    EvalCounts r = {red[0], red[1], red[2], red[3]};
    return r;
}

/* --eval-dump: one JSON line per example of a task (see the header comment) */
static void train_eval_dump_task(AtomicFile* af, int step, const char* name, const EvalSet* es, int n,
                                 const double* detail) {
    char buf[64 + 2 * EVAL_MAX_ENDINGS * 20 + 256], num[32];
    for (int e = 0; e < n; e++) {
        const double* d = detail + (size_t)e * EVAL_DETAIL_WORDS;
        const int K = es->num_endings[e];
        if (d[0] < 1) { FATAL("eval dump: task '%s' example %d was scored on no rank", name, e); }
        size_t len = (size_t)snprintf(buf, sizeof(buf), "{\"step\":%d,\"task\":\"%s\",\"index\":%d,\"label\":%d,"
                                      "\"pred\":%d,\"pred_sum_logprob\":%d,\"mean_loss\":[", step, name, e,
                                      es->label[e], (int)d[0] - 1, (int)d[1] - 1);
        atomic_file_write(af, buf, 1, len);
        for (int part = 0; part < 2; part++) {
            for (int k = 0; k < K; k++) {
                len = (size_t)snprintf(buf, sizeof(buf), "%s%s", k ? "," : "",
                                       json_number(num, sizeof(num), d[2 + part * EVAL_MAX_ENDINGS + k]));
                atomic_file_write(af, buf, 1, len);
            }
            const char* tail = part == 0 ? "],\"sum_loss\":[" : "]}\n";
            atomic_file_write(af, tail, 1, strlen(tail));
        }
    }
}

static float train_eval_if_due(TrainSession* s, int last) {
    const EvalSuite* ev = &s->eval;
    if (ev->n == 0 || !(last || (s->cfg.val_every > 0 && s->step % s->cfg.val_every == 0))) { return NAN; }
    double t0 = wall_seconds(), centered = 0, total = 0;
    char line[4096], fields[512], a[32], a2[32], cc[32];
    size_t len = 0;
    line[0] = '\0';
    const int dump = s->cfg.eval_dump[0] != '\0';
    AtomicFile af;
    if (dump && is_rank0(s)) { atomic_file_open(&af, s->cfg.eval_dump); }
    for (int i = 0; i < ev->n; i++) {
        const EvalSet* es = &ev->set[i];
        int n = s->cfg.eval_max_examples > 0 && s->cfg.eval_max_examples < es->num_examples ? s->cfg.eval_max_examples
                                                                                           : es->num_examples;
        double* detail = dump ? (double*)calloc_check((size_t)n * EVAL_DETAIL_WORDS, sizeof(double), "eval dump") : NULL;
        EvalCounts c = train_eval_task(s, es, ev->task[i].name, detail);
        if (detail && is_rank0(s)) { train_eval_dump_task(&af, s->step, ev->task[i].name, es, n, detail); }
        free(detail);
        double acc = c.correct_mean / c.n, acc2 = c.correct_sum / c.n, ce = eval_centered(acc, c.chance_sum / c.n);
        centered += ce / ev->n;
        total += c.n;
        snprintf(fields, sizeof(fields), "\"task\":\"%s\",\"n\":%.0f,\"acc\":%s,\"acc_sum_logprob\":%s,\"centered\":%s",
                 ev->task[i].name, c.n, logger_json_number(a, sizeof(a), acc), logger_json_number(a2, sizeof(a2), acc2),
                 logger_json_number(cc, sizeof(cc), ce));
        logger_log(&s->logger, "eval", s->step, fields);
        if (len < sizeof(line)) {
            len += (size_t)snprintf(line + len, sizeof(line) - len, " | %s acc %.4f (sum logprob %.4f, n %.0f)",
                                    ev->task[i].name, acc, acc2, c.n);
        }
    }
    snprintf(fields, sizeof(fields), "\"task\":\"suite\",\"n\":%.0f,\"tasks\":%d,\"centered\":%s", total, ev->n,
             logger_json_number(cc, sizeof(cc), centered));
    logger_log(&s->logger, "eval", s->step, fields);
    if (dump && is_rank0(s)) { atomic_file_commit(&af); }
    if (is_rank0(s)) {
        printf("eval %.4f (step %d)%s | %.2f s\n", centered, s->step, line, wall_seconds() - t0);
        fflush(stdout);
    }
    return (float)centered;
}

#endif /* LLMC_TRAIN_EVAL_H */
