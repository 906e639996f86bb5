/*
 * llmc/train_report.h -- the trainer's counters and print lines (llmc/README.md, "The trainer"): what a step reports
 * (StepResult: loss, norm, learning rate, bubble, compression, offload and NVMe figures), its counters (bytes per
 * group, PCIe, all-to-all rows) reset before and read after the step, the --comm-stats line of every rank, the step
 * line and its log.jsonl record, the header, the memory ledger's check against the allocations, and the warnings
 * about a run's settings. Rank 0 prints and logs unless a function says otherwise; numbers that are not finite are
 * written as null in the log (RFC 8259).
 */
#ifndef LLMC_TRAIN_REPORT_H
#define LLMC_TRAIN_REPORT_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "llmc/train_session.h"
#include "llmc/ledger.h"
#include "llmc/mfu.h"
#include "llmc/progress.h"
#include "llmc/sharding.h"
#include "llmc/zero_experts.h"
#include "llmc/debug_checksums.h"

/* bubble: --pp > 1 on timed steps, over all stages, else -1; skipped: 1 when the update was not applied (a
 * non-finite loss or gradient norm, or an FP16 overflow); grad_sent: --grad-compress, this rank's gradient-reduction
 * bytes sent (the counters) and grad_fp32: what the fp32 ring all-reduce of the same buckets sends (else both 0) */
typedef struct {
    float loss, grad_norm, lr, bubble; int skipped; double grad_sent, grad_fp32;
    /* --offload-optimizer: this rank's PCIe bytes of the step (counted; theory: ledger_offload_step_bytes) and, for
     * nvme, the bytes read and written and the seconds the I/O thread spent on them */
    double off_d2h, off_h2d, off_d2h_theory, off_h2d_theory, nvme_read, nvme_write, nvme_seconds;
    double off_seconds; /* the offloaded update's wall time (transfers, CPU AdamW, NVMe I/O) */
    double off_d2h_streamed; /* of off_d2h, the gradient bytes copied down during backward (llmc/offload.h) */
} StepResult;

/* after step s->step (1-based, just counted): counts consecutive skipped steps; the first of a run of them is
 * reported on rank 0 (one warning line on stdout, with the step lines) with what was not finite */
static void report_bad_step(TrainSession* s, const StepResult* r, int overflow) {
    if (!r->skipped) { s->bad_steps = 0; return; }
    s->bad_steps++;
    if (is_rank0(s) && s->loss_scaling) {
        printf("loss scaling: inf/NaN gradients at step %d, update skipped, scale now %.0f\n", s->step, s->scaler.scale);
    }
    if (is_rank0(s) && s->bad_steps == 1) {
        printf("warning: step %d not applied: loss %s, gradient norm %s%s; the weights are those of step %d "
                "(the run stops after --max-bad-steps %d such steps in a row)\n", s->step,
                isfinite(r->loss) ? "finite" : (isnan(r->loss) ? "NaN" : "infinite"),
                isfinite(r->grad_norm) ? "finite" : (isnan(r->grad_norm) ? "NaN" : "infinite"),
                overflow ? " (a gradient overflowed the loss scale)" : "", s->step - 1, s->cfg.max_bad_steps);
    }
}

/* this process's PCIe bytes per optimizer step (llmc/ledger.h's theory): --offload-params cpu (ZeRO-3's gathers
 * and the update of the host shard), else --offload-optimizer (gradients down, parameters up) */
static void step_pcie_theory(const TrainSession* s, size_t* d2h, size_t* h2d) {
    size_t lo, hi;
    zero_owned_range(&s->zero, &lo, &hi);
    *d2h = *h2d = 0;
    if (s->zero.params.host) {
        for (const ZeroOptimizer* g = &s->zero; g; g = g->experts) { /* --ep: each group's own shard */
            size_t d, u;
            zero_owned_range(g, &lo, &hi);
            ledger_offload_params_step_bytes(hi - lo, sizeof(floatX), s->layout.m, g->offload != NULL,
                                             g->opt.master != NULL, &d, &u);
            *d2h += d; *h2d += u;
        }
        return;
    }
    for (const ZeroOptimizer* g = &s->zero; g; g = g->experts) { /* --ep: each group's own range */
        size_t d, u;
        zero_owned_range(g, &lo, &hi);
        ledger_offload_step_bytes(hi - lo, sizeof(floatX), &d, &u);
        *d2h += d; *h2d += u;
    }
}

/* this step's counters start at zero: the groups' bytes and calls, the tp collectives' time, the all-to-all's rows,
 * and the PCIe counters of --offload-params (read as differences) */
static void step_counters_begin(TrainSession* s) {
    comm_counters_reset(s->dp);
    comm_counters_reset(s->tp);
    comm_counters_reset(s->pp);
    if (s->zero.experts) { comm_counters_reset(s->zero.experts->dp); comm_counters_reset(s->grid.ep); } /* --ep */
    s->tp_comm.seconds = 0.0;
    s->pcie_h2d0 = zero_params_pcie(&s->zero, 0);
    s->pcie_d2h0 = zero_params_pcie(&s->zero, 1);
    if (s->ep_comm.active) { moe_ep_comm_reset(&s->ep_comm); }   /* --ep: this step's all-to-all counters */
}

/* after the update: the step's compression bytes, the pipeline's measured bubble (a pp all-reduce, on timed steps)
 * and, for an applied step, the offload's PCIe and NVMe figures beside the ledger's theory and the trace's optimizer
 * slice */
static void step_counters_end(TrainSession* s, StepResult* r) {
    if (!r->skipped && s->pipe.opt_t0 > 0.0) { s->pipe.opt_t1 = pipeline_clock(NULL); }
    if (s->zero.compress) {
        GradCompressStats cs = grad_compress_take_stats(s->zero.compress);
        r->grad_sent = (double)cs.bytes_sent;
        r->grad_fp32 = cs.fp32_ring_bytes;
        if (s->zero.experts && s->zero.experts->compress) { /* --ep: the expert group's reduction too */
            GradCompressStats ce = grad_compress_take_stats(s->zero.experts->compress);
            r->grad_sent += (double)ce.bytes_sent;
            r->grad_fp32 += ce.fp32_ring_bytes;
        }
    }
    if (s->pipe.clock) { r->bubble = (float)pipeline_bubble(&s->pipe); } /* the step's idle share over all stages */
    if (r->skipped) { return; }
    ZeroOffloadTotals o = zero_offload_totals(&s->zero); /* --ep: both parameter groups' offloads */
    if (s->zero.offload || s->zero.params.host) { /* PCIe bytes: counted beside the ledger's theory */
        size_t d2h, h2d;
        step_pcie_theory(s, &d2h, &h2d);
        r->off_d2h = (double)o.step_d2h + (double)(zero_params_pcie(&s->zero, 1) - s->pcie_d2h0);
        r->off_h2d = (double)o.step_h2d + (double)(zero_params_pcie(&s->zero, 0) - s->pcie_h2d0);
        r->off_d2h_theory = (double)d2h; r->off_h2d_theory = (double)h2d;
    }
    if (s->zero.offload) {
        r->nvme_read = (double)o.step_read; r->nvme_write = (double)o.step_write; r->nvme_seconds = o.io_seconds;
        r->off_seconds = o.step_seconds;
        r->off_d2h_streamed = (double)o.step_d2h_streamed;
    }
}

/* --comm-stats 1: this rank's bytes sent and received and calls of the step in its data-parallel group(s), beside
 * the ring theory of its ZeRO stage; its offload, tp, pp and all-to-all figures (one line per rank) */
static void print_comm_stats(TrainSession* s, const StepResult* r) {
    const Comm* c = s->dp;
    CommCounters n = c->counters;
    if (s->zero.experts) { /* --ep: + the experts' group (expert-dp) and their norm's sum over ep, once per comm */
        const Comm* more[2] = {s->zero.experts->dp, s->grid.ep};
        for (int k = 0; k < 2; k++) {
            if (more[k] == c || (k == 1 && more[1] == more[0])) { continue; }
            n.bytes_sent += more[k]->counters.bytes_sent;
            n.bytes_recv += more[k]->counters.bytes_recv;
            n.calls += more[k]->counters.calls;
        }
    }
    printf("comm: rank %d step %d sent %llu recv %llu bytes in %llu calls (zero %d, world %d, P %zu, S %zu)",
           c->rank, s->step, n.bytes_sent, n.bytes_recv, n.calls, s->cfg.zero_stage,
           c->world, s->zero.P, s->zero.S);
    if (!s->zero.compress) { printf(" ring theory %.0f", zero_step_bytes_theory(&s->zero, s->layout.m, s->layout.pp > 1, s->pipe.wte_sync && s->model.stage.has_embedding)); }
    if (r->off_d2h_theory > 0) { /* this rank's own offload bytes (the step line is rank 0's) */
        printf(" | offload PCIe %.0f+%.0f bytes (theory %.0f+%.0f)", r->off_d2h, r->off_h2d, r->off_d2h_theory,
               r->off_h2d_theory);
    }
    if (s->tp->world > 1) {
        printf(" | tp rank %d sent %llu recv %llu bytes in %llu calls, %.1f ms (tp %d, world %d)", s->tp->rank,
               s->tp->counters.bytes_sent, s->tp->counters.bytes_recv, s->tp->counters.calls,
               s->tp_comm.seconds * 1000.0, s->tp->world, s->world.world);
    }
    if (s->pp->world > 1) {
        printf(" | pp rank %d boundary sent %llu recv %llu bytes; sent %llu recv %llu bytes in %llu calls (pp %d)",
               s->pp->rank, s->pipe.boundary_sent, s->pipe.boundary_recv, s->pp->counters.bytes_sent,
               s->pp->counters.bytes_recv, s->pp->counters.calls, s->pp->world);
    }
    if (s->ep_comm.active) { /* --ep: this rank's all-to-all (the step line prints rank 0's with the theory) */
        const MoEEpComm* b = &s->ep_comm;
        printf(" | ep rank %d all-to-all sent %llu recv %llu bytes in %llu calls, rows sent %llu recv %llu (ep %d)",
               b->ep.rank, b->comm.counters.bytes_sent, b->comm.counters.bytes_recv, b->comm.counters.calls,
               b->ep.rows_sent, b->ep.rows_recv, b->ep.size);
    }
    printf("\n");
    fflush(stdout);
}

#ifdef LLMC_CPU_NAIVE
#define CPU_FP32_MATMUL_NAME "fp32 (plain loops: the naive build)"
#else
#define CPU_FP32_MATMUL_NAME "fp32 (OpenBLAS sgemm)"
#endif

/* the header's words for the --cpu-matmul choice: the flag's value, or auto's pick with both probe times (the mean
 * over the processes; llmc/cpu/matmul_auto.h) */
static void cpu_matmul_choice(const TrainSession* s, char* buf, size_t cap) {
    const int* p = s->cpu_matmul_probe;
    if (!s->cpu_matmul_auto || p[0] == 0) { snprintf(buf, cap, "%s", s->cpu_matmul_auto ? "auto" : s->cfg.cpu_matmul); return; }
    char bf16[64] = "n/a (no AVX512_BF16)";
    if (s->cpu_matmul_ms[1] >= 0) { snprintf(bf16, sizeof(bf16), "%.2f ms", s->cpu_matmul_ms[1]); }
    snprintf(buf, cap, "auto picked %s: fp32 %.2f ms, bf16 %s for a (%dx%d)x(%dx%d) GEMM%s", s->cfg.cpu_matmul,
             s->cpu_matmul_ms[0], bf16, p[0], p[1], p[1], p[2], s->cpu_matmul_ms[1] >= 0 ? ", the faster taken" : "");
}

/* mixture of experts: the experts' configuration and the parameters, all and active per token (`active`: those MFU
 * counts) */
static void print_moe_line(const TrainSession* s, size_t active) {
    const GPT2Config* c = &s->model.config;
    const TrainConfig* cfg = &s->cfg;
    printf("mixture of experts: E=%d experts, top-%d, in %d of %d blocks (every %d), expert hidden %d, capacity "
           "factor %g, aux %g, z %g; parameters %zu total, %zu active per token (MFU uses the active FLOPs)\n",
           c->moe.experts, c->moe.top_k, moe_num_layers(&c->moe, c->num_layers), c->num_layers, c->moe.every,
           c->moe.hidden, (double)cfg->moe_capacity_factor, (double)cfg->moe_aux_coef, (double)cfg->moe_z_coef,
           s->model.num_parameters_full, active);
}

/* the layout of this process as the ledger (llmc/ledger.h) describes it */
static LedgerLayout session_ledger_layout(const TrainSession* s) {
    LedgerLayout l;
    memset(&l, 0, sizeof(l));
    l.cfg = s->model.config;
    l.layout = s->layout;
    l.pb = (int)sizeof(floatX);
    l.master = zero_has_master(&s->zero);
    return l;
}

/* one line: the ledger's bytes for this process's stage beside what the session allocated (they must be equal;
 * dev/test/cli_plan.sh checks it for every layout the multi-process tests run) */
static void print_ledger_check(const TrainSession* s) {
    LedgerLayout l = session_ledger_layout(s);
    LedgerRank r = ledger_rank(&l, s->pp->rank);
    size_t st[4];
    zero_state_bytes(&s->zero, st); /* --ep: both groups */
    size_t got[5] = {st[0], st[1], st[2], st[3], s->model.acts_bytes_held};
    size_t want[5] = {r.params, r.grads, r.master, r.moments, r.acts};
    int same = memcmp(got, want, sizeof(got)) == 0;
    printf("memory ledger (llmc/ledger.h, bytes, pipeline stage %d): parameters %zu | gradients %zu | master %zu | "
           "AdamW m+v %zu | activations %zu; allocated: %zu | %zu | %zu | %zu | %zu -> %s\n", s->pp->rank, want[0],
           want[1], want[2], want[3], want[4], got[0], got[1], got[2], got[3], got[4], same ? "equal" : "DIFFERENT");
    if (s->zero.offload || s->zero.params.host) { /* --offload-optimizer / --offload-params: host memory, host
                                                   * buffers, the NVMe file and the host parameter shard */
        const Offload* o = s->zero.offload;
        ZeroOffloadTotals t = zero_offload_totals(&s->zero); /* --ep: both parameter groups' */
        size_t og[4] = {t.host_bytes, t.buffer_bytes, t.file_bytes, zero_params_host_bytes(&s->zero.params) +
                        (s->zero.experts ? zero_params_host_bytes(&s->zero.experts->params) : 0)};
        size_t ow[4] = {r.host, r.host_buffers, r.nvme, r.host_params};
        size_t d2h, h2d;
        step_pcie_theory(s, &d2h, &h2d);
        printf("offload ledger (llmc/ledger.h, bytes, pipeline stage %d): host state %zu | host buffers %zu | nvme %zu | "
               "host parameters %zu; allocated: %zu | %zu | %zu | %zu -> %s; PCIe per step (theory): %zu down (%s) + "
               "%zu up (parameters%s)\n", s->pp->rank, ow[0], ow[1], ow[2], ow[3], og[0], og[1], og[2], og[3],
               memcmp(og, ow, sizeof(og)) == 0 ? "equal" : "DIFFERENT", d2h,
               o ? "gradients" : "updated parameters", h2d, !s->zero.params.host ? "" : o || s->zero.opt.master ?
               ": the gathers' own parts" : ": the gathers' own parts + the update's reads");
    }
    if (s->cfg.recompute == 3) { /* what checkpointing saves: the same layout without any recompute */
        LedgerLayout none = l;
        none.layout.recompute = 0;
        size_t full = ledger_rank(&none, s->pp->rank).acts;
        int L = gpt2_stage_layers(&s->model.stage) / (s->pp->world > 1 ? s->cfg.pp_virtual : 1);
        int kk = gpt2_recompute_window(3, s->cfg.recompute_every, L);
        printf("activation checkpointing (-r 3, pipeline stage %d): segments of k=%d of the %d layers per model "
               "chunk: kept %d segment input(s) + %d layer(s) of activations; activations %zu bytes, %zu without "
               "recompute (%.1f%%)\n", s->pp->rank, kk, L, gpt2_recompute_segments(3, kk, L), kk, r.acts, full,
               100.0 * (double)r.acts / (double)full);
    }
    fflush(stdout);
}

/* the header's optimizer line with --optimizer muon (llmc/muon.h); nothing with AdamW */
static void print_muon_line(const TrainSession* s) {
    const Muon* mu = s->zero.muon;
    if (!mu) { return; }
    printf("optimizer: Muon (momentum %g, %d Newton-Schulz steps) on %d block matrices (%zu values, momentum in "
           "AdamW's m); AdamW on the other %zu values; workspace %.1f MiB\n", (double)mu->beta, mu->ns_steps,
           mu->matrices, mu->muon_params, s->model.num_parameters - mu->muon_params,
           mu->work_elems * sizeof(floatX) / (1024.0 * 1024.0));
}

/* the header's positions words: learned, or rotary with theta (and the -e word rope_scaling=F/LOW/HIGH/ORIGT) */
static void describe_positions(const GPT2Arch* a, char* out, size_t cap) {
    if (a->pos == POS_ROPE && rope_scaling_on(&a->rope_scaling)) {
        snprintf(out, cap, "rotary positions (theta %g, Llama-3 scaling rope_scaling=%g/%g/%g/%d)", (double)a->rope_theta,
                 (double)a->rope_scaling.factor, (double)a->rope_scaling.low_freq_factor,
                 (double)a->rope_scaling.high_freq_factor, a->rope_scaling.original_max_pos);
    } else {
        snprintf(out, cap, a->pos == POS_ROPE ? "rotary positions (theta %g)" : "learned positions", (double)a->rope_theta);
    }
}

/* one warning line (rank 0) when the warmup is as long as the run or longer: the schedule's decay never starts and
 * (warmup > steps) the peak rate -l is never reached; the line names the highest rate the run does reach. Not for
 * evaluation only (-x 0 -h 1), which has no schedule to warn about. */
static void warn_if_warmup_covers_run(TrainSession* s) {
    const TrainConfig* cfg = &s->cfg;
    if (!is_rank0(s) || s->max_steps == 0 || cfg->warmup_steps < s->max_steps || cfg->learning_rate <= 0.0f) { return; }
    float top = 0.0f;
    for (int k = 0; k < s->max_steps; k++) {
        float lr = lr_scheduler_get(&s->scheduler, k);
        if (lr > top) { top = lr; }
    }
    fprintf(stderr, "warning: flag -u (--warmup-steps) is %d but the run has %d steps: the learning rate only warms up "
            "(%s schedule never decays) and reaches %.3g, %.0f%% of the peak -l %.3g; use -u below %d\n",
            cfg->warmup_steps, s->max_steps, cfg->lr_schedule, (double)top, 100.0 * top / cfg->learning_rate,
            (double)cfg->learning_rate, s->max_steps);
}

static void print_header(TrainSession* s, const ArgSpec* specs, int n_specs) {
    const GPT2Config* c = &s->model.config;
    if (!is_rank0(s)) { return; } /* only rank 0 prints and logs */
    printf("+-----------------------+------------------------------------------------\n");
    printf("| device                | %s\n", backend_device_name());
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
    printf("| precision             | %s\n", PRECISION_NAME);
#else
    char how[256];
    cpu_matmul_choice(s, how, sizeof(how));
    printf("| precision             | %s; matmuls %s (--cpu-matmul %s)\n", PRECISION_NAME,
           strcmp(s->cfg.cpu_matmul, "bf16") == 0 ? "bf16 operands, fp32 sums (AVX512_BF16)" : CPU_FP32_MATMUL_NAME,
           how);
#endif
    printf("| model                 | %s: L=%d C=%d NH=%d maxT=%d V=%d (padded %d)\n", s->cfg.model, c->num_layers,
           c->channels, c->num_heads, c->max_seq_len, c->vocab_size, c->padded_vocab_size);
    const GPT2Arch* a = &c->arch; /* the decoder family's knobs (llmc/gpt2.h, GPT2Arch) */
    char pos[256];
    describe_positions(a, pos, sizeof(pos));
    printf("| architecture          | %s, %s, %s MLP of width %d, %d key/value heads, %s, head %s%s\n",
           a->norm == NORM_RMSNORM ? "RMSNorm" : "LayerNorm", pos,
           a->mlp == MLP_SWIGLU ? "SwiGLU" : a->mlp == MLP_RELU2 ? "ReLU^2" : "GELU", a->ffn_hidden, a->n_kv_head,
           a->bias ? "biases" : "no biases", a->tied_head ? "tied to wte" : "untied", a->qk_norm ? ", QK-norm" : "");
    printf("| parameters            | %zu\n", s->model.num_parameters_full);
    printf("| train data            | %s (%zu windows of B*T+1 tokens per epoch)\n", s->cfg.train_data,
           dataloader_windows_per_epoch(&s->train_loader));
    printf("| val data              | %s\n", s->has_val ? s->cfg.val_data : "(none)");
    printf("| batch                 | B=%d T=%d x %d accumulation x %d processes = %d tokens/step\n", s->cfg.B,
           s->cfg.T, s->layout.m, s->dp->world, s->cfg.B * s->cfg.T * s->layout.m * s->dp->world);
    printf("| steps                 | %d (%s schedule, lr %.2e, warmup %d)\n", s->max_steps, s->cfg.lr_schedule,
           s->cfg.learning_rate, s->cfg.warmup_steps);
    printf("| processes / ZeRO      | %d / stage %d (collectives: %s)\n", s->world.world, s->cfg.zero_stage,
           s->world.backend);
    if (s->tp->world > 1 && s->pp->world == 1) {
        printf("| layout                | tensor parallel %d%s x data parallel %d; %zu of the model's %zu parameters "
               "on each process\n", s->tp->world, s->cfg.sequence_parallel ? " (sequence parallel)" : "", s->dp->world,
               s->model.num_parameters, s->model.num_parameters_full);
    }
    if (s->pp->world > 1) {
        printf("| layout                | tensor parallel %d%s x data parallel %d x pipeline %d (%s, %d chunk%s per "
               "stage, %d micro-batches)\n", s->tp->world, s->cfg.sequence_parallel ? " (sequence parallel)" : "",
               s->dp->world, s->pp->world, s->cfg.pp_schedule, s->layout.v, s->layout.v > 1 ? "s" : "",
               s->layout.m);
    }
    printf("+-----------------------+------------------------------------------------\n");
    warn_if_warmup_covers_run(s);
    if (s->pp->world > 1) { pipeline_print_stages(&s->pipe, s->tp->world); }
    zero_print_ledger(&s->zero, &s->model);
    if (s->zero.experts) { /* --ep: the two groups (llmc/zero_experts.h) */
        const ZeroOptimizer* d = &s->zero;
        const ZeroOptimizer* e = s->zero.experts;
        int E = s->model.config.moe.experts, p = s->grid.ep->world;
        printf("expert parallelism: experts %d..%d of %d held here (ep rank %d of %d); dense group %zu parameters over "
               "%d processes (optimizer range %zu), expert group %zu parameters over %d processes (optimizer range "
               "%zu)\n", s->grid.ep->rank * E / p, (s->grid.ep->rank + 1) * E / p - 1, E, s->grid.ep->rank, p, d->P,
               d->dp->world, d->own_end - d->own_start, e->P, e->dp->world, e->own_end - e->own_start);
    }
    if (s->tp->world > 1 || s->cfg.dry_run) { shard_print_tp_ledger(&s->model); }
    int nd, no;
    size_t vd, vo;
    gpt2_weight_decay_groups(&s->model, &nd, &vd, &no, &vo);
    printf("weight decay %.3g on %d tensors (%zu values); none on %d tensors (%zu values)\n", s->cfg.weight_decay, nd,
           vd, no, vo);
    print_muon_line(s);
    char* json = args_config_json(specs, n_specs);
    size_t len = strlen(json), cap = len + 1;
    char more[256];
    snprintf(more, sizeof(more), ",\"num_parameters\":%zu,\"processes\":%d,\"grad_accum_steps\":%d,\"precision\":\"%s\","
             "\"max_steps_resolved\":%d,\"device\":", s->model.num_parameters_full, s->world.world,
             s->layout.m, PRECISION_NAME, s->max_steps);
    args_buf_append(&json, &len, &cap, more, strlen(more));
    args_buf_append_json_string(&json, &len, &cap, backend_device_name()); /* escaped like every string */
    logger_log(&s->logger, "config", s->step, json);
    free(json);
}

/* mixture of experts: the routing of this step's last micro-batch on this process (llmc/moe.h) and, with --ep, the
 * all-to-all bytes balanced routing without drops would send (moe_ep_balanced_bytes); json NULL for a dense model */
typedef struct {
    float aux, drop, max_load;
    char* json;          /* malloc'd per-block statistics (the log's "moe" value), or NULL */
    double a2a_balanced;
} StepMoE;

static StepMoE step_moe_summary(TrainSession* s) {
    StepMoE sum;
    memset(&sum, 0, sizeof(sum));
    const MoEConfig* moe = &s->model.config.moe;
    int Lm = moe_num_layers(moe, s->model.config.num_layers);
    if (Lm > 0) {
        float* stats = (float*)malloc_check((size_t)Lm * moe_stats_floats(moe) * sizeof(float), "MoE statistics");
        int blocks[1024];
        for (int l = 0, b = 0; l < s->model.config.num_layers && b < 1024; l++) { if (moe_is_layer(moe, l)) { blocks[b++] = l; } }
        if (s->pp->world > 1) { pipeline_moe_stats(&s->pipe, stats); } else { gpt2_moe_stats(&s->model, stats); }
        moe_stats_summary(moe, stats, Lm < 1024 ? Lm : 1024, blocks, &sum.aux, &sum.drop, &sum.max_load, &sum.json);
        free(stats);
    }
    if (s->ep_comm.active) {
        sum.a2a_balanced = moe_ep_balanced_bytes(Lm, s->layout.m, (size_t)s->cfg.B * s->cfg.T, moe->top_k,
                                                 s->ep_comm.ep.size, s->model.config.channels, sizeof(floatX));
    }
    return sum;
}

/* the step line (rank 0, every --log-every steps and the last): loss, norm, lr, time, tokens/s, MFU, then what the
 * run has (experts' routing and all-to-all bytes, bubble, compression, offload, NVMe, a skipped step), the run's
 * elapsed wall time and the time left (llmc/progress.h), and on CUDA builds the device memory in use / total */
static void print_step_line(TrainSession* s, const StepResult* r, double ms, double tok_s, double mfu,
                            const Progress* pg, const StepMoE* moe) {
    double now = wall_seconds();
    char elapsed[32], eta[32];
    progress_format_duration(progress_elapsed(pg, now), elapsed, sizeof(elapsed));
    progress_format_duration(progress_eta(pg, now, s->max_steps - s->step), eta, sizeof(eta));
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s", s->step, s->max_steps,
           r->loss, r->grad_norm, r->lr, ms, tok_s);
    if (mfu >= 0) { printf(" | MFU %.1f%%", 100.0 * mfu); }
    if (moe->json) { printf(" | moe aux %.4f drop %.1f%% max load %.2f", moe->aux, 100.0 * moe->drop, moe->max_load); }
    if (s->ep_comm.active) { /* --ep: this rank's all-to-all bytes of the step, counted, beside the theory */
        const MoEEpComm* b = &s->ep_comm;
        printf(" | a2a sent %llu B = rows %llu x C %d x %d B + counts %llu B (balanced routing, no drops: %.0f B)",
               (unsigned long long)b->comm.counters.bytes_sent, b->ep.rows_sent, s->model.config.channels,
               (int)sizeof(floatX), b->count_bytes_sent, moe->a2a_balanced);
    }
    if (r->bubble >= 0) { printf(" | bubble %.1f%%", 100.0 * r->bubble); }
    if (r->grad_fp32 > 0) {
        printf(" | grad comm %.2f MB = %.3fx fp32 %.2f MB", r->grad_sent / 1e6, r->grad_sent / r->grad_fp32,
               r->grad_fp32 / 1e6);
    }
    if (r->off_d2h_theory > 0) {
        printf(" | offload PCIe %.2f+%.2f MB (theory %.2f+%.2f)", r->off_d2h / 1e6, r->off_h2d / 1e6,
               r->off_d2h_theory / 1e6, r->off_h2d_theory / 1e6);
        if (s->zero.offload) { /* the CPU AdamW's wall time; the gradients that came down during backward */
            printf(" update %.1f ms, %.0f%% of the gradients down in backward", r->off_seconds * 1e3,
                   r->off_d2h > 0 ? 100.0 * r->off_d2h_streamed / r->off_d2h : 0.0);
        }
    }
    if (r->nvme_read + r->nvme_write > 0) {
        printf(" | nvme %.1f MB %.2f GB/s", (r->nvme_read + r->nvme_write) / 1e6,
               r->nvme_seconds > 0 ? (r->nvme_read + r->nvme_write) / r->nvme_seconds / 1e9 : 0.0);
    }
    if (r->skipped) { printf(" | skipped (not finite)"); }
    printf(" | %s elapsed | eta %s", elapsed, eta);
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
    size_t free_b, total_b;
    dev_memory_info(&free_b, &total_b);
    printf(" | mem %.1f/%.1f GiB", (double)(total_b - free_b) / (1 << 30), (double)total_b / (1 << 30));
#endif
    printf("\n");
    fflush(stdout);
}

/* the step's log.jsonl record (kind "train"; llmc/logger.h) with the same figures as the step line */
static void log_step_record(TrainSession* s, const StepResult* r, double ms, double tok_s, double mfu,
                            const StepMoE* moe) {
    /* JSON numbers: NaN and infinities are written as null (RFC 8259 has no other spelling for them) */
    size_t fields_cap = 1024 + (moe->json ? strlen(moe->json) + 64 : 0);
    char* fields = (char*)malloc_check(fields_cap, "log line");
    char loss[32], norm[32], lr[32], ms_s[32], tok[32], mfu_s[32], bubble[32];
    snprintf(fields, fields_cap, "\"loss\":%s,\"grad_norm\":%s,\"lr\":%s,\"ms\":%s,\"tokens_per_s\":%s",
             logger_json_number(loss, sizeof(loss), r->loss), logger_json_number(norm, sizeof(norm), r->grad_norm),
             logger_json_number(lr, sizeof(lr), r->lr), logger_json_number(ms_s, sizeof(ms_s), ms),
             logger_json_number(tok, sizeof(tok), tok_s));
    size_t len = strlen(fields);
    if (mfu >= 0) {
        snprintf(fields + len, fields_cap - len, ",\"mfu\":%s", logger_json_number(mfu_s, sizeof(mfu_s), mfu));
        len = strlen(fields);
    }
    if (r->bubble >= 0) {
        snprintf(fields + len, fields_cap - len, ",\"bubble\":%s", logger_json_number(bubble, sizeof(bubble), r->bubble));
        len = strlen(fields);
    }
    if (r->grad_fp32 > 0) {
        snprintf(fields + len, fields_cap - len, ",\"grad_bytes_sent\":%.0f,\"grad_bytes_fp32\":%.0f,\"grad_ratio\":%.5f",
                 r->grad_sent, r->grad_fp32, r->grad_sent / r->grad_fp32);
        len = strlen(fields);
    }
    if (s->ep_comm.active) { /* --ep: this rank's all-to-all of the step (as printed on the step line) */
        const MoEEpComm* b = &s->ep_comm;
        snprintf(fields + len, fields_cap - len, ",\"a2a_bytes_sent\":%llu,\"a2a_rows_sent\":%llu,"
                 "\"a2a_count_bytes_sent\":%llu,\"a2a_balanced_bytes\":%.0f", (unsigned long long)b->comm.counters.bytes_sent,
                 b->ep.rows_sent, b->count_bytes_sent, moe->a2a_balanced);
        len = strlen(fields);
    }
    if (r->off_d2h_theory > 0) {
        snprintf(fields + len, fields_cap - len, ",\"offload_d2h_bytes\":%.0f,\"offload_h2d_bytes\":%.0f,"
                 "\"offload_d2h_theory\":%.0f,\"offload_h2d_theory\":%.0f,\"offload_ms\":%.3f,"
                 "\"offload_d2h_streamed_bytes\":%.0f", r->off_d2h, r->off_h2d, r->off_d2h_theory, r->off_h2d_theory,
                 r->off_seconds * 1e3, r->off_d2h_streamed);
        len = strlen(fields);
    }
    if (r->nvme_read + r->nvme_write > 0) {
        char gbs[32];
        snprintf(fields + len, fields_cap - len, ",\"nvme_read_bytes\":%.0f,\"nvme_write_bytes\":%.0f,\"nvme_gbs\":%s",
                 r->nvme_read, r->nvme_write, logger_json_number(gbs, sizeof(gbs), r->nvme_seconds > 0 ?
                 (r->nvme_read + r->nvme_write) / r->nvme_seconds / 1e9 : 0.0));
        len = strlen(fields);
    }
    if (moe->json) {
        char a[32], d[32], mx[32];
        snprintf(fields + len, fields_cap - len, ",\"moe_aux\":%s,\"moe_drop\":%s,\"moe_max_load\":%s,\"moe\":%s",
                 logger_json_number(a, sizeof(a), moe->aux), logger_json_number(d, sizeof(d), moe->drop),
                 logger_json_number(mx, sizeof(mx), moe->max_load), moe->json);
        len = strlen(fields);
    }
    if (r->skipped) { snprintf(fields + len, fields_cap - len, ",\"skipped\":true"); }
    logger_log(&s->logger, "train", s->step, fields);
    free(fields);
}

/* after a step: its line (rank 0, every --log-every steps and the last) and its log record */
static void log_step(TrainSession* s, const StepResult* r, double ms, double tok_s, double mfu, const Progress* pg) {
    StepMoE moe = step_moe_summary(s); /* every rank reads its routing statistics (a synchronisation) */
    if (is_rank0(s) && (s->step % s->cfg.log_every == 0 || s->step == s->max_steps)) {
        print_step_line(s, r, ms, tok_s, mfu, pg, &moe);
    }
    log_step_record(s, r, ms, tok_s, mfu, &moe);
    free(moe.json);
}

/* --profile-steps: the phase table of rank 0 (llmc/profile.h) and its log.jsonl record (kind "profile", at the
 * last profiled step) */
static void report_profile(TrainSession* s) {
#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
    const char* clock = "rank 0, CUDA events on the main stream";
#else
    const char* clock = "rank 0, wall clock";
#endif
    if (is_rank0(s)) { profile_print(&s->prof, clock); }
    char* fields = profile_json(&s->prof);
    logger_log(&s->logger, "profile", s->step, fields);
    free(fields);
}

/* --debug-checksums: keeps the host copy of batch slot `slot` (inputs then targets, llmc/batch_pipeline.h) for the
 * step's checksum forward, on the steps that print checksums */
static void debug_keep_tokens(TrainSession* s, int slot) {
    if (s->step >= s->cfg.debug_checksums) { return; }
    size_t n = 2 * (size_t)s->layout.B * s->layout.T;
    if (!s->debug_tokens) { s->debug_tokens = (int*)malloc_check(n * sizeof(int), "checksum tokens"); }
    memcpy(s->debug_tokens, batch_pipeline_host_inputs(&s->batches, slot), n * sizeof(int));
}

/* --debug-checksums N, optimizer steps 1..N, after the reduction and before the update (llmc/debug_checksums.h): the
 * parameter gradients' checksums, then a forward of the step's first micro-batch (saved in s->debug_tokens) through
 * the layout's forward path (the pipeline's with --pp > 1; ZeRO-3's gathers, --ep's all-to-all: every process runs
 * it) and its activations' checksums; printed by tp rank 0 and dp rank 0 of every pipeline stage. The routing
 * statistics of the step line are then those of this forward. */
static void debug_checksums_step(TrainSession* s) {
    ChecksumList grads = {NULL, 0, 0}, acts = {NULL, 0, 0};
    checksum_gradients(&grads, &s->zero);
    if (s->zero.experts) { /* the experts' group: each ep rank's experts, summed over the ep group */
        int first = grads.n;
        checksum_gradients(&grads, s->zero.experts);
        checksum_reduce(&grads, first, s->grid.ep);
    }
    checksum_reduce(&grads, 0, s->tp);
    int B = s->layout.B, T = s->layout.T;
    size_t BT = (size_t)B * T;
    if (s->pp->world > 1) {
        dev_memcpy_h2d(s->pipe.tokens, s->debug_tokens, 2 * BT * sizeof(int));
        pipeline_forward_only(&s->pipe, s->pipe.tokens, s->pipe.tokens + BT, B, T, s->cfg.gelu_fusion, 0);
        for (int k = 0; k < s->pipe.v; k++) { /* the chunks the forward-only pass ran (dualpipe: not the copies) */
            if (!pipe_visits(&s->pipe.sched, 0, k)) { continue; }
            gpt2_use_slot(s->pipe.chunk[k], 0);
            checksum_activations(&acts, s->pipe.chunk[k], B, T);
        }
    } else {
        dev_memcpy_h2d(s->model.inputs, s->debug_tokens, BT * sizeof(int));
        dev_memcpy_h2d(s->model.targets, s->debug_tokens + BT, BT * sizeof(int));
        gpt2_forward(&s->model, s->model.inputs, s->model.targets, B, T, s->cfg.gelu_fusion, 0.0f, 0);
        checksum_activations(&acts, &s->model, B, T);
    }
    checksum_reduce(&acts, 0, s->tp);
    if (s->tp->rank == 0 && s->dp->rank == 0) {
        if (s->model.recompute == 3) { printf("checksum step %d: -r 3 keeps only segment inputs; no per-layer activations\n", s->step + 1); }
        checksum_print(&acts, s->step + 1, "act");
        checksum_print(&grads, s->step + 1, "grad");
    }
    free(grads.e);
    free(acts.e);
}

#endif /* LLMC_TRAIN_REPORT_H */
