/*
 * llmc/cuda/attention_cudnn.h -- causal grouped-query self-attention through cuDNN's fused scaled-dot-product
 * attention (cuDNN 9 graph API through the cudnn-frontend C++ headers >= 1.x: graph::Graph::sdpa / sdpa_backward,
 * the FlashAttention-2 algorithm of Dao 2023; NVIDIA cuDNN Frontend docs, "Scaled Dot Product Attention"), used by
 * the attention contract (llmc/cuda/attention_gqa.cuh) in builds with USE_CUDNN=1.
 *
 * The one part of the CUDA backend that is not header-only: the definitions are llmc/cuda/attention_cudnn.cpp, a
 * plain C++17 file that the host compiler (g++) builds once into build/attention_cudnn.o, linked into every binary
 * built with USE_CUDNN=1. This header needs only the CUDA runtime's types. Why (llmc/README.md, "Layers"): the
 * cudnn-frontend headers cost nvcc ~2 minutes per translation unit and g++ less than one, and one object serves
 * train_gpt_cudnn, test_gpt_cudnn and dev/cuda's attention program.
 *
 * Shapes and dtypes (the contract of llmc/backend.h), hs = head size, group g = NH/NKV:
 *   qkv  (B,T,(NH+2*NKV)*hs) bf16 or fp16 (dtype), rows [q (NH*hs) | k (NKV*hs) | v (NKV*hs)]; query head h uses
 *        key/value head h/g (cuDNN's GQA order: query heads j*g .. j*g+g-1 share kv head j).
 *   out  (B,T,NH*hs) same dtype; stats (B,NH,T) fp32 natural-log log-sum-exp of the scaled scores per query row
 *        (cuDNN's "Stats": the same quantity and layout as the flash kernels' state, so a forward of one and a
 *        backward of the other agree).
 *   dqkv qkv's shape, overwritten; dK, dV of kv head j summed over its g query heads (by cuDNN).
 *   Scale 1/sqrt(hs), causal (top-left diagonal), no dropout. Q, K, V, dQ, dK, dV are strided views into qkv/dqkv
 *   (dims [B,heads,T,hs], strides [T*ld, hs, ld, 1], ld = (NH+2*NKV)*hs); O, dO use ld = NH*hs.
 * Returns 1 when cuDNN ran the op; 0 when cuDNN takes no plan for this shape on this GPU (a "note:" line on stderr,
 *   once per shape and direction; e.g. the frontend declines the backward at T = 1): the caller then runs our flash
 *   kernels, which take every shape. The forward tries the frontend's own choice of implementation, then its
 *   composite one. The caller checks the shape and pointers (NH % NKV == 0, hs % 8 == 0, hs <= 128, 16-byte aligned
 *   buffers: attention_gqa.cuh).
 * Graphs are built once per (B, T, NH, NKV, hs, dtype) and direction and cached (a shape cuDNN declines too); the
 *   workspace grows on demand (cudaMalloc, which synchronises the device, only when it grows; the deterministic
 *   backward's can be large, e.g. a dP buffer of B*NH*T*T*2 bytes on Hopper, and is not in the trainer's ledger).
 *   Work is queued on `stream`; no host sync.
 * The backward asks for cuDNN's deterministic algorithm; where no engine has one at a shape it builds the
 *   non-deterministic one and says so once on stderr ("warning: cuDNN has no deterministic SDPA backward").
 * Errors print one line with file:line and exit (FATAL, llmc/utils.h): cuDNN status, CUDA, the frontend at execution,
 *   and a graph the frontend's validation finds malformed (anything but GRAPH_NOT_SUPPORTED: a bug here, not a shape
 *   to fall back from).
 */
#ifndef LLMC_CUDA_ATTENTION_CUDNN_H
#define LLMC_CUDA_ATTENTION_CUDNN_H

#include <cuda_runtime_api.h>

enum { ATTN_CUDNN_BF16 = 0, ATTN_CUDNN_FP16 = 1 }; /* the dtype argument: qkv, out, dout, dqkv */

int attention_cudnn_forward(void* out, float* stats, const void* qkv, int B, int T, int NH, int NKV, int hs, int dtype,
                            cudaStream_t stream);
int attention_cudnn_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* stats, int B,
                             int T, int NH, int NKV, int hs, int dtype, cudaStream_t stream);

#endif /* LLMC_CUDA_ATTENTION_CUDNN_H */
