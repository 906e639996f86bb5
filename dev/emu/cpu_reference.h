/*
 * dev/emu/cpu_reference.h -- the CPU backend (llmc/cpu/, floatX = float) exported as ref_* functions
 * with C linkage, so a C++ test compiled against the CUDA backend on the emulator (which defines the
 * same function names) can link against it. Implemented in dev/emu/cpu_reference.c (its own C
 * translation unit). All pointers are host memory, fp32; scratch/state buffers are allocated inside.
 * attention: the CPU backend's saved state (probabilities) differs from the GPU's (log-sum-exp), so
 * ref_attention_forward_backward runs both directions with its own state.
 */
#ifndef LLMC_DEV_EMU_CPU_REFERENCE_H
#define LLMC_DEV_EMU_CPU_REFERENCE_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
void ref_encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C);
void ref_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C);
void ref_encoder_forward_vocab_shard(float* out, const int* inp, const float* wte_shard, const float* wpe, int v0,
                                     int Vs, int B, int T, int C);
void ref_encoder_backward_vocab_shard(float* dwte_shard, float* dwpe, const float* dout, const int* inp, int v0,
                                      int Vs, int B, int T, int C);
void ref_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                           int N, int C);
void ref_fused_residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* inp1,
                                          const float* inp2, const float* w, const float* b, int N, int C);
void ref_layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                            const float* mean, const float* rstd, int N, int C);
/* RMSNorm (Zhang & Sennrich 2019), llmc/cpu/layernorm.h */
/* QK-norm (llmc/cpu/qknorm.h): qkv (N, (NH+2NKV) hs) in place, pre (N, NH+NKV, hs), rstd (N, NH+NKV); the backward
 * overwrites d q and d k of dqkv and accumulates dqw, dkw (hs) */
void ref_qknorm_forward(float* qkv, float* pre, float* rstd, const float* qw, const float* kw, int N, int NH, int NKV,
                        int hs);
void ref_qknorm_backward(float* dqkv, float* dqw, float* dkw, const float* pre, const float* qw, const float* kw,
                         const float* rstd, int N, int NH, int NKV, int hs);
void ref_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C);
void ref_fused_residual_rmsnorm_forward(float* residual, float* out, float* rstd, const float* inp1, const float* inp2,
                                        const float* w, int N, int C);
void ref_rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                          const float* rstd, int N, int C);
void ref_matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                        float* pre_gelu);
void ref_matmul_backward(float* dinp, float* dweight, float* dbias, float* dout, const float* inp,
                         const float* weight, int N, int C, int OC, const float* pre_gelu);
void ref_matmul_backward_dgelu(float* dinp, float* dweight, float* dbias, float* dout, const float* inp,
                               const float* weight, int N, int C, int OC, const float* inp_pre_gelu);
void ref_gelu_forward(float* out, const float* inp, size_t n);
void ref_gelu_backward_inplace(float* d, const float* inp, size_t n);
void ref_swiglu_forward(float* out, const float* inp, int N, int F);
void ref_swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F);
void ref_relu2_forward(float* out, const float* inp, size_t n);
void ref_relu2_backward_inplace(float* d, const float* inp, size_t n);
void ref_residual_forward(float* out, const float* a, const float* b, size_t n);
/* rotary position embedding (llmc/cpu/rope.h): qkv(B,T,(NH+2KV)*hs) in place, table(maxT,hs/2,2) */
void ref_rope_forward(float* qkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0);
void ref_rope_backward(float* dqkv, const float* table, int B, int T, int NH, int KV, int hs, int pos0);
/* attention (llmc/cpu/attention.h, attention_decode.h), grouped-query: qkv/dqkv (B,T,(NH+2*NKV)*hs), k, v (t,NKV*hs);
 * NKV = NH is multi-head attention. test_kernels_ops.cpp checks the CUDA GQA path against these at NKV = NH on
 * explicitly expanded inputs (kv heads repeated, dK/dV summed over each group by the test). */
void ref_attention_forward_backward(float* out, float* dqkv, const float* qkv, const float* dout, int B, int T, int C,
                                    int NH, int NKV);
void ref_attention_decode(float* out, const float* q, const float* k, const float* v, int t, int C, int NH, int NKV);
void ref_fused_classifier(float* logits, float* losses, float dloss, const int* targets, int N, int V, int Vp,
                          int write_dlogits);
void ref_vocab_parallel_row_max(float* row_max, const float* logits, int N, int Vs, int valid);
void ref_vocab_parallel_row_sums(float* sums, const float* logits, const float* maxes, int tp, const int* targets, int v0,
                                 int N, int Vs, int valid);
void ref_vocab_parallel_finish(float* logits, float* losses, const float* maxes, int tp, const float* sums,
                               const int* targets, int v0, int N, int Vs, int valid, float dloss, int write_dlogits);
void ref_adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, float grad_scale, int t);
void ref_global_norm_squared(float* out, const float* g, size_t n, int accumulate);
/* Muon (llmc/cpu/muon.h, llmc/muon.h): the momentum, the update, and steps Newton-Schulz iterations of G (rows x cols)
 * into out (rows x cols) */
void ref_muon_momentum(float* u, float* buf, const float* g, size_t n, float beta, float grad_scale);
void ref_muon_apply(float* params, const float* o, size_t n, float lr, float scale, float wd);
void ref_muon_newton_schulz(float* out, const float* G, int rows, int cols, int steps);
void ref_scale_floats(float* x, float s, size_t n);
int ref_has_inf_or_nan(const float* x, size_t n);
void ref_loss_mean_accumulate(float* mean, double* sum, const float* losses, int N);
void ref_compress_pack(float* dst, const float* g, const float* residual, float decay, size_t n);
void ref_compress_quantize_int8(signed char* q, float* scales, const float* x, size_t n, int stochastic,
                                unsigned int seed, unsigned int step, unsigned long long key);
void ref_compress_dequantize_int8(float* out, const signed char* q, const float* scales, size_t n, float alpha,
                                  int accumulate);
void ref_compress_topk_select(unsigned int* idx, float* val, const float* x, size_t n, size_t k);
void ref_compress_scatter_add(float* out, const unsigned int* idx, const float* val, size_t k);
/* mixture of experts (llmc/cpu/moe.h) */
void ref_moe_router_forward(float* probs, float* lse, int* choice, float* gate, const float* x, const float* w, int N,
                            int C, int E, int k);
void ref_moe_dispatch_plan(int* row, int* plan, const int* choice, int N, int E, int k, int cap);
void ref_moe_route_stats(float* stats, const float* probs, const float* lse, const int* plan, int N, int E, int k,
                         float aux_coef, float z_coef);
void ref_moe_permute(float* xe, const float* x, const int* row, int N, int C, int k);
void ref_moe_combine(float* y, const float* out, const int* row, const float* gate, int N, int C, int k);
void ref_moe_combine_backward(float* dout, float* dgate, const float* dy, const float* out, const int* row,
                              const float* gate, int N, int C, int k);
void ref_moe_permute_backward(float* dx, const float* dxe, const int* row, int N, int C, int k);
void ref_moe_router_backward(float* dx, float* dw, float* dlogits, const float* dgate, const float* probs,
                             const float* lse, const int* choice, const float* gate, const float* stats,
                             const float* x, const float* w, int N, int C, int E, int k, float dloss, float aux_coef,
                             float z_coef);
#ifdef __cplusplus
}
#endif
#endif
