/*
 * llmc/cpu/classifier.h -- fused classifier: softmax + cross-entropy loss +
 * dlogits in one pass over each row (the fused classifier of llm.c). floatX = float.
 */
#ifndef LLMC_CPU_CLASSIFIER_H
#define LLMC_CPU_CLASSIFIER_H

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
