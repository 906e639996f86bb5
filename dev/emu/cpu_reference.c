/* dev/emu/cpu_reference.c -- see dev/emu/cpu_reference.h. One C11 translation unit with the CPU backend. */
#include "llmc/backend.h" /* the CPU backend (this file is built without LLMC_BACKEND_CUDA) */
#include "dev/emu/cpu_reference.h"
#include "llmc/muon.h"

void ref_encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    encoder_forward(out, inp, wte, wpe, B, T, C);
}
void ref_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    encoder_backward(dwte, dwpe, dout, inp, inp, B, T, C);
}
void ref_encoder_forward_vocab_shard(float* out, const int* inp, const float* wte_shard, const float* wpe, int v0,
                                     int Vs, int B, int T, int C) {
    encoder_forward_vocab_shard(out, inp, wte_shard, wpe, v0, Vs, B, T, C);
}
void ref_encoder_backward_vocab_shard(float* dwte_shard, float* dwpe, const float* dout, const int* inp, int v0,
                                      int Vs, int B, int T, int C) {
    encoder_backward_vocab_shard(dwte_shard, dwpe, dout, inp, inp, v0, Vs, B, T, C);
}
void ref_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                           int N, int C) {
    layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
void ref_fused_residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* inp1,
                                          const float* inp2, const float* w, const float* b, int N, int C) {
    fused_residual_layernorm_forward(residual, out, mean, rstd, inp1, inp2, w, b, N, C);
}
void ref_layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                            const float* mean, const float* rstd, int N, int C) {
    float* scratch = (float*)calloc(layernorm_scratch_floats(N, C) + 1, sizeof(float));
    layernorm_backward(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C);
    free(scratch);
}
void ref_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C) {
    rmsnorm_forward(out, rstd, inp, w, N, C);
}
void ref_fused_residual_rmsnorm_forward(float* residual, float* out, float* rstd, const float* inp1, const float* inp2,
                                        const float* w, int N, int C) {
    fused_residual_rmsnorm_forward(residual, out, rstd, inp1, inp2, w, N, C);
}
void ref_rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                          const float* rstd, int N, int C) {
    float* scratch = (float*)calloc(rmsnorm_scratch_floats(N, C) + 1, sizeof(float));
    rmsnorm_backward(dinp, dw, scratch, dout, inp, w, rstd, N, C);
    free(scratch);
}
void ref_qknorm_forward(float* qkv, float* pre, float* rstd, const float* qw, const float* kw, int N, int NH, int NKV,
                        int hs) {
    qknorm_forward(qkv, pre, rstd, qw, kw, N, NH, NKV, hs);
}
void ref_qknorm_backward(float* dqkv, float* dqw, float* dkw, const float* pre, const float* qw, const float* kw,
                         const float* rstd, int N, int NH, int NKV, int hs) {
    float* scratch = (float*)calloc(qknorm_scratch_floats(N, NH, NKV, hs) + 1, sizeof(float));
    qknorm_backward(dqkv, dqw, dkw, scratch, pre, qw, kw, rstd, N, NH, NKV, hs);
    free(scratch);
}
void ref_matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                        float* pre_gelu) {
    matmul_forward(out, inp, weight, bias, N, C, OC, pre_gelu);
}
void ref_matmul_backward(float* dinp, float* dweight, float* dbias, float* dout, const float* inp,
                         const float* weight, int N, int C, int OC, const float* pre_gelu) {
    float* scratch = (float*)calloc(matmul_scratch_floats(N, C, OC) + 1, sizeof(float));
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, scratch, N, C, OC, pre_gelu);
    free(scratch);
}
void ref_matmul_backward_dgelu(float* dinp, float* dweight, float* dbias, float* dout, const float* inp,
                               const float* weight, int N, int C, int OC, const float* inp_pre_gelu) {
    float* scratch = (float*)calloc(matmul_scratch_floats(N, C, OC) + 1, sizeof(float));
    matmul_backward_dgelu(dinp, dweight, dbias, dout, inp, weight, scratch, N, C, OC, inp_pre_gelu);
    free(scratch);
}
void ref_gelu_forward(float* out, const float* inp, size_t n) { gelu_forward(out, inp, n); }
void ref_gelu_backward_inplace(float* d, const float* inp, size_t n) { gelu_backward_inplace(d, inp, n); }
void ref_swiglu_forward(float* out, const float* inp, int N, int F) { swiglu_forward(out, inp, N, F); }
void ref_swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F) {
    swiglu_backward(dinp, dout, inp, N, F);
}
void ref_relu2_forward(float* out, const float* inp, size_t n) { relu2_forward(out, inp, n); }
void ref_relu2_backward_inplace(float* d, const float* inp, size_t n) { relu2_backward_inplace(d, inp, n); }
void ref_residual_forward(float* out, const float* a, const float* b, size_t n) { residual_forward(out, a, b, n); }
void ref_rope_forward(float* qkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0) {
    rope_forward(qkv, table, B, T, NH, KV, hs, pos0);
}
void ref_rope_backward(float* dqkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0) {
    rope_backward(dqkv, table, B, T, NH, KV, hs, pos0);
}
void ref_attention_forward_backward(float* out, float* dqkv, const float* qkv, const float* dout, int B, int T, int C,
                                    int NH, int NKV) {
    float* state = (float*)calloc(attention_state_floats(B, T, NH) + 1, sizeof(float));
    float* scratch = (float*)calloc(attention_scratch_floats(B, T, C, NH, NKV) + 1, sizeof(float));
    attention_forward(out, state, scratch, qkv, B, T, C, NH, NKV);
    if (dqkv) { attention_backward(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, NKV); }
    free(state);
    free(scratch);
}
void ref_attention_decode(float* out, const float* q, const float* k, const float* v, int t, int C, int NH, int NKV) {
    float* scores = (float*)calloc((size_t)NH * t, sizeof(float));
    attention_decode(out, q, k, v, scores, t, C, NH, NKV);
    free(scores);
}
void ref_fused_classifier(float* logits, float* losses, float dloss, const int* targets, int N, int V, int Vp,
                          int write_dlogits) {
    fused_classifier(logits, losses, dloss, targets, N, V, Vp, write_dlogits);
}
void ref_vocab_parallel_row_max(float* row_max, const float* logits, int N, int Vs, int valid) {
    vocab_parallel_row_max(row_max, logits, N, Vs, valid);
}
void ref_vocab_parallel_row_sums(float* sums, const float* logits, const float* maxes, int tp, const int* targets, int v0,
                                 int N, int Vs, int valid) {
    vocab_parallel_row_sums(sums, logits, maxes, tp, targets, v0, N, Vs, valid);
}
void ref_vocab_parallel_finish(float* logits, float* losses, const float* maxes, int tp, const float* sums,
                               const int* targets, int v0, int N, int Vs, int valid, float dloss, int write_dlogits) {
    vocab_parallel_finish(logits, losses, maxes, tp, sums, targets, v0, N, Vs, valid, dloss, write_dlogits);
}
void ref_loss_mean_accumulate(float* mean, double* sum, const float* losses, int N) {
    loss_mean_accumulate(mean, sum, losses, N);
}
void ref_adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, float grad_scale, int t) {
    adamw_update(params, NULL, grads, m, v, n, 0, lr, beta1, beta2, eps, weight_decay, grad_scale, t, 0);
}
void ref_global_norm_squared(float* out, const float* g, size_t n, int accumulate) {
    global_norm_squared(out, g, n, accumulate);
}
void ref_scale_floats(float* x, float s, size_t n) { scale_floats(x, s, n); }
void ref_muon_momentum(float* u, float* buf, const float* g, size_t n, float beta, float grad_scale) {
    muon_momentum(u, buf, g, n, beta, grad_scale);
}
void ref_muon_apply(float* params, const float* o, size_t n, float lr, float scale, float wd) {
    muon_apply(params, NULL, o, n, 0, lr, scale, wd, 1, 0);
}
void ref_muon_newton_schulz(float* out, const float* G, int rows, int cols, int steps) {
    Muon mu;
    memset(&mu, 0, sizeof(mu));
    size_t n = (size_t)rows * cols, s = (size_t)(rows < cols ? rows : cols);
    mu.work = (float*)calloc(2 * n + 2 * s * s, sizeof(float));
    mu.normsq = (float*)calloc(1, sizeof(float));
    memcpy(out, muon_newton_schulz(&mu, G, rows, cols, steps), n * sizeof(float));
    free(mu.work);
    free(mu.normsq);
}
int ref_has_inf_or_nan(const float* x, size_t n) { return has_inf_or_nan(x, n); }
void ref_compress_pack(float* dst, const float* g, const float* residual, float decay, size_t n) { compress_pack(dst, g, residual, decay, n); }
void ref_compress_quantize_int8(signed char* q, float* scales, const float* x, size_t n, int stochastic,
                                unsigned int seed, unsigned int step, unsigned long long key) {
    compress_quantize_int8((int8_t*)q, scales, x, n, stochastic, seed, step, key);
}
void ref_compress_dequantize_int8(float* out, const signed char* q, const float* scales, size_t n, float alpha,
                                  int accumulate) {
    compress_dequantize_int8(out, (const int8_t*)q, scales, n, alpha, accumulate);
}
void ref_compress_topk_select(unsigned int* idx, float* val, const float* x, size_t n, size_t k) {
    compress_topk_select(idx, val, x, n, k, NULL);
}
void ref_compress_scatter_add(float* out, const unsigned int* idx, const float* val, size_t k) {
    compress_scatter_add(out, idx, val, k);
}
void ref_moe_router_forward(float* probs, float* lse, int* choice, float* gate, const float* x, const float* w, int N,
                            int C, int E, int k) {
    moe_router_forward(probs, lse, choice, gate, x, w, N, C, E, k);
}
void ref_moe_dispatch_plan(int* row, int* plan, const int* choice, int N, int E, int k, int cap) {
    moe_dispatch_plan(row, plan, choice, N, E, k, cap);
}
void ref_moe_route_stats(float* stats, const float* probs, const float* lse, const int* plan, int N, int E, int k,
                         float aux_coef, float z_coef) {
    moe_route_stats(stats, probs, lse, plan, N, E, k, aux_coef, z_coef);
}
void ref_moe_permute(float* xe, const float* x, const int* row, int N, int C, int k) { moe_permute(xe, x, row, N, C, k); }
void ref_moe_combine(float* y, const float* out, const int* row, const float* gate, int N, int C, int k) {
    moe_combine(y, out, row, gate, N, C, k);
}
void ref_moe_combine_backward(float* dout, float* dgate, const float* dy, const float* out, const int* row,
                              const float* gate, int N, int C, int k) {
    moe_combine_backward(dout, dgate, dy, out, row, gate, N, C, k);
}
void ref_moe_permute_backward(float* dx, const float* dxe, const int* row, int N, int C, int k) {
    moe_permute_backward(dx, dxe, row, N, C, k);
}
void ref_moe_router_backward(float* dx, float* dw, float* dlogits, const float* dgate, const float* probs,
                             const float* lse, const int* choice, const float* gate, const float* stats,
                             const float* x, const float* w, int N, int C, int E, int k, float dloss, float aux_coef,
                             float z_coef) {
    moe_router_backward(dx, dw, dlogits, dgate, probs, lse, choice, gate, stats, x, w, N, C, E, k, dloss, aux_coef,
                        z_coef);
}
