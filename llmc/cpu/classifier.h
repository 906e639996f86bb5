/*
 * llmc/cpu/classifier.h -- fused classifier: softmax + cross-entropy loss +
 * dlogits in one pass over each row (the fused classifier of llm.c). floatX = float.
 */
#ifndef LLMC_CPU_CLASSIFIER_H
#define LLMC_CPU_CLASSIFIER_H

#include <float.h>
#include <math.h>

/* For each row i of logits(N,Vp) (only columns 0..V-1 are real):
 *   losses[i] = -log softmax(logits[i,:V])[targets[i]]      (fp32, natural log)
 *   if write_dlogits: logits[i,:] is overwritten by dlogits = dloss * (softmax - onehot(target)),
 *                     with 0 in the padded columns V..Vp-1.
 * targets[i] < 0: ignored row (losses[i] = 0, dlogits row all 0). targets[i] >= V exits.
 * Exact softmax (row max subtracted; exp via cpu_expf, a few ulp); exp sum accumulated
 * in double by a fixed simd reduction. Per-row work,
 * statically scheduled: deterministic. When write_dlogits == 0, logits are unchanged. */
static inline void fused_classifier(floatX* logits, float* losses, float dloss, const int* targets,
                                    int N, int V, int Vp, int write_dlogits) {
    for (int i = 0; i < N; i++) {
        if (targets[i] >= V) { FATAL("fused_classifier: target %d at row %d is >= vocab size %d", targets[i], i, V); }
    }
    #pragma omp parallel for schedule(static) if((long)N * V >= LLMC_CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float* row = logits + (size_t)i * Vp;
        const int tgt = targets[i];
        if (tgt < 0) {
            losses[i] = 0.0f;
            if (write_dlogits) { memset(row, 0, (size_t)Vp * sizeof(float)); }
            continue;
        }
        float mx = row[0];
        #pragma omp simd reduction(max:mx)
        for (int j = 1; j < V; j++) { mx = row[j] > mx ? row[j] : mx; }
        const float xt = row[tgt];
        double sum = 0.0;
        if (write_dlogits) {
            #pragma omp simd reduction(+:sum)
            for (int j = 0; j < V; j++) { float e = cpu_expf(row[j] - mx); row[j] = e; sum += e; }
            const float scale = (float)(dloss / sum);
            for (int j = 0; j < V; j++) { row[j] *= scale; }
            row[tgt] -= dloss;
            for (int j = V; j < Vp; j++) { row[j] = 0.0f; }
        } else {
            #pragma omp simd reduction(+:sum)
            for (int j = 0; j < V; j++) { sum += cpu_expf(row[j] - mx); }
        }
        losses[i] = (float)(log(sum) - (double)(xt - mx));
    }
}

/* ---- vocabulary-parallel cross-entropy (tensor parallelism; Shoeybi et al. 2019, section 3) ----
 * This rank holds logits(N,Vs) of the vocabulary columns [v0, v0 + Vs), of which the first `valid` are real
 * (v0 + valid <= V; the rest are padding, excluded like V..Vp-1 of fused_classifier). No rank ever holds N x Vp
 * logits. The caller runs, with all-reduces (sums) over the tp ranks in between:
 *   1. vocab_parallel_row_max      this shard's row maxima -> row_max(N)
 *      (the caller writes them into row tp_rank of maxes(tp,N), zero elsewhere, and all-reduces maxes)
 *   2. vocab_parallel_row_sums     M_i = max_r maxes[r][i]; sums(2,N): [0,N) sum over this shard's real columns of
 *      exp(logit - M_i), [N,2N) the target's logit if the target is in this shard, else 0 (all-reduce sums)
 *   3. vocab_parallel_finish       losses[i] = log(S_i) - (target logit - M_i) (the same on every rank);
 *      with write_dlogits, logits become dloss * (exp(logit - M_i) / S_i - onehot(target)), 0 in padding.
 * Rows with target < 0 are ignored (loss 0, dlogits 0). fp32 buffers; the CPU accumulates exp sums in double.
 * Deterministic (fixed orders; M_i is the max over r in order). */
static inline void vocab_parallel_row_max(float* row_max, const floatX* logits, int N, int Vs, int valid) {
    #pragma omp parallel for schedule(static) if((long)N * valid >= LLMC_CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float* row = logits + (size_t)i * Vs;
        float mx = -FLT_MAX; /* an all-padding shard never holds the maximum */
        for (int j = 0; j < valid; j++) { mx = row[j] > mx ? row[j] : mx; }
        row_max[i] = mx;
    }
}

/* M_i from maxes(tp,N) (the all-reduced maxima of every shard) */
static inline float vocab_parallel_global_max(const float* maxes, int tp, int N, int i) {
    float m = maxes[i];
    for (int r = 1; r < tp; r++) { m = maxes[(size_t)r * N + i] > m ? maxes[(size_t)r * N + i] : m; }
    return m;
}

static inline void vocab_parallel_row_sums(float* sums, const floatX* logits, const float* maxes, int tp,
                                           const int* targets, int v0, int N, int Vs, int valid) {
    #pragma omp parallel for schedule(static) if((long)N * valid >= LLMC_CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float* row = logits + (size_t)i * Vs;
        const int t = targets[i] - v0;
        sums[i] = 0.0f;
        sums[N + i] = 0.0f;
        if (targets[i] < 0) { continue; }
        const float mx = vocab_parallel_global_max(maxes, tp, N, i);
        double acc = 0.0;
        for (int j = 0; j < valid; j++) { acc += cpu_expf(row[j] - mx); }
        sums[i] = (float)acc;
        if (t >= 0 && t < valid) { sums[N + i] = row[t]; }
    }
}

static inline void vocab_parallel_finish(floatX* logits, float* losses, const float* maxes, int tp, const float* sums,
                                         const int* targets, int v0, int N, int Vs, int valid, float dloss,
                                         int write_dlogits) {
    #pragma omp parallel for schedule(static) if((long)N * Vs >= LLMC_CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        float* row = logits + (size_t)i * Vs;
        if (targets[i] < 0) {
            losses[i] = 0.0f;
            if (write_dlogits) { memset(row, 0, (size_t)Vs * sizeof(float)); }
            continue;
        }
        const float mx = vocab_parallel_global_max(maxes, tp, N, i);
        const float S = sums[i];
        losses[i] = (float)(log((double)S) - (double)(sums[N + i] - mx));
        if (!write_dlogits) { continue; }
        const float scale = dloss / S;
        for (int j = 0; j < valid; j++) { row[j] = cpu_expf(row[j] - mx) * scale; }
        const int t = targets[i] - v0;
        if (t >= 0 && t < valid) { row[t] -= dloss; }
        for (int j = valid; j < Vs; j++) { row[j] = 0.0f; }
    }
}

/* Mean of the N per-token losses(N) (fp32), accumulated for the optimizer step:
 *   *mean = (float)(sum_i losses[i] / N)   with the sum in fp64, sequentially i = 0..N-1
 *   *sum += (double)*mean
 * (mean(1) fp32, sum(1) fp64; both "device" memory). One thread, fixed order: deterministic, and
 * equal bit for bit to the host-side sum the trainer used to do. N >= 1. */
static inline void loss_mean_accumulate(float* mean, double* sum, const float* losses, int N) {
    double acc = 0.0;
    for (int i = 0; i < N; i++) { acc += losses[i]; }
    *mean = (float)(acc / N);
    *sum += (double)*mean;
}

#endif /* LLMC_CPU_CLASSIFIER_H */
