/*
 * llmc/cuda/attention_cudnn.cuh -- causal attention through cuDNN's fused scaled-dot-product attention
 * (cuDNN 9 graph API via the cudnn-frontend C++ headers, >= 1.x: graph::Graph::sdpa / sdpa_backward;
 * NVIDIA cuDNN Frontend docs, "Scaled Dot Product Attention"). Compiled only with -DUSE_CUDNN, in which
 * case this file provides the multi-head ops attention_mha_forward / attention_mha_backward and
 * llmc/cuda/attention.cuh does not; the contract functions of llmc/backend.h (grouped-query, NKV kv heads) are
 * llmc/cuda/attention_gqa.cuh's, the same for both builds. cuDNN's SDPA takes fewer K/V heads natively; this first
 * GQA version does not use that yet (attention_gqa.cuh expands qkv to NH kv heads first).
 *
 * Build: the frontend is header-only; it ships in the PyPI wheel nvidia-cudnn-frontend, which installs its
 * headers into <site-packages>/include. The Makefile adds
 *   CUDNN_FRONTEND_PATH ?= $(shell python3 -c "import cudnn,os;print(os.path.join(os.path.dirname(os.path.dirname(cudnn.__file__)),'include'))")
 *   NVCC_FLAGS += -DUSE_CUDNN -isystem $(CUDNN_FRONTEND_PATH);  link -lcudnn
 * (-isystem keeps the third-party headers out of -Werror).
 *
 * Shapes/dtypes (same contract as attention.cuh):
 *   qkv (B,T,3C) floatX, rows [q|k|v], head h = channels h*hs..; out (B,T,C) floatX;
 *   state (B,NH,T) fp32 = cuDNN "Stats" = natural-log log-sum-exp of the scaled scores per query row;
 *   dqkv (B,T,3C) floatX overwritten. Q, K, V, dQ, dK, dV are strided views into qkv/dqkv
 *   (dims [B,NH,T,hs], strides [3CT, hs, 3C, 1]); O, dO use [CT, hs, C, 1]. Scale 1/sqrt(hs), causal
 *   (top-left diagonal), no dropout.
 * Support: floatX bf16 or fp16 and hs % 8 == 0, hs <= 128 (attention_cudnn_supported). Other cases
 *   (including the fp32 build) are delegated to the flash kernels of attention.cuh, so every shape works.
 * Graphs are built once per (B,T,C,NH) and cached (forward and backward separately); the workspace
 *   grows on demand (cudaMalloc, which synchronises the device, only when it grows).
 * The backward requests cuDNN's deterministic algorithm; if no engine supports that at a shape, it
 *   rebuilds without it and says so once on stderr.
 * Errors (cuDNN status, frontend error_t, CUDA) print file:line and exit.
 */
#ifndef LLMC_CUDA_ATTENTION_CUDNN_CUH
#define LLMC_CUDA_ATTENTION_CUDNN_CUH

#include "common.cuh"
#include "attention.cuh"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <tuple>

namespace llmc_cudnn {
namespace fe = cudnn_frontend;

static inline void cudnn_check_at(cudnnStatus_t st, const char* what, const char* file, int line) {
    if (st != CUDNN_STATUS_SUCCESS) {
        fatal_error_at(file, line, "cuDNN call failed: %s: %s", what, cudnnGetErrorString(st));
    }
}
static inline void fe_check_at(fe::error_t err, const char* what, const char* file, int line) {
    if (!err.is_good()) { fatal_error_at(file, line, "cuDNN frontend failed: %s: %s", what, err.get_message().c_str()); }
}
#define CUDNN_CHECK(call) llmc_cudnn::cudnn_check_at((call), #call, __FILE__, __LINE__)
#define CUDNN_FE_CHECK(call) llmc_cudnn::fe_check_at((call), #call, __FILE__, __LINE__)

/* tensor uids of the variant packs */
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

typedef std::tuple<int, int, int, int> ShapeKey; /* B, T, C, NH */

struct State {
    cudnnHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<ShapeKey, std::shared_ptr<fe::graph::Graph>> fwd, bwd;
    int warned_nondeterministic = 0;
};
/* process-wide cuDNN state (function-local static: header-only, one per translation unit) */
static inline State& state() {
    static State s;
    return s;
}
static inline cudnnHandle_t handle() {
    State& s = state();
    if (!s.handle) { CUDNN_CHECK(cudnnCreate(&s.handle)); }
    CUDNN_CHECK(cudnnSetStream(s.handle, main_stream()));
    return s.handle;
}
static inline void* workspace(int64_t bytes) {
    State& s = state();
    if ((size_t)bytes > s.workspace_bytes) {
        if (s.workspace) { CUDA_CHECK(cudaFree(s.workspace)); }
        CUDA_CHECK(cudaMalloc(&s.workspace, (size_t)bytes));
        s.workspace_bytes = (size_t)bytes;
    }
    return s.workspace;
}
static inline fe::DataType_t io_type(void) {
#if defined(ENABLE_FP16)
    return fe::DataType_t::HALF;
#else
    return fe::DataType_t::BFLOAT16;
#endif
}
static inline std::shared_ptr<fe::graph::Graph> new_graph(void) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(io_type()).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(
        fe::DataType_t::FLOAT);
    return g;
}
/* a [B,NH,T,hs] view with row stride `ld` elements */
static inline std::shared_ptr<fe::graph::Tensor_attributes> bhtd(std::shared_ptr<fe::graph::Graph>& g,
                                                                  const char* name, int64_t uid, int B, int T,
                                                                  int NH, int hs, int64_t ld) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim({B, NH, T, hs})
                         .set_stride({(int64_t)T * ld, hs, ld, 1}));
}
/* validates and builds g; returns "" on success, else the reason no engine supports it */
static inline std::string finalize(std::shared_ptr<fe::graph::Graph>& g) {
    cudnnHandle_t h = handle();
    CUDNN_FE_CHECK(g->validate());
    CUDNN_FE_CHECK(g->build_operation_graph(h));
    CUDNN_FE_CHECK(g->create_execution_plans({fe::HeurMode_t::A}));
    fe::error_t supported = g->check_support(h);
    if (!supported.is_good()) { return supported.get_message() + " "; }
    fe::error_t built = g->build_plans(h);
    if (!built.is_good()) { return built.get_message() + " "; }
    return std::string();
}

static inline std::shared_ptr<fe::graph::Graph> forward_graph(int B, int T, int C, int NH) {
    State& s = state();
    const ShapeKey key(B, T, C, NH);
    auto it = s.fwd.find(key);
    if (it != s.fwd.end()) { return it->second; }
    const int hs = C / NH;
    auto g = new_graph();
    auto Q = bhtd(g, "Q", UID_Q, B, T, NH, hs, 3 * (int64_t)C);
    auto K = bhtd(g, "K", UID_K, B, T, NH, hs, 3 * (int64_t)C);
    auto V = bhtd(g, "V", UID_V, B, T, NH, hs, 3 * (int64_t)C);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("attention_forward")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(1.0f / sqrtf((float)hs));
    auto outs = g->sdpa(Q, K, V, opts);
    auto O = outs[0];
    auto stats = outs[1];
    O->set_output(true).set_uid(UID_O).set_dim({B, NH, T, hs}).set_stride({(int64_t)T * C, hs, C, 1});
    stats->set_output(true)
        .set_uid(UID_STATS)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, NH, T, 1})
        .set_stride({(int64_t)NH * T, T, 1, 1});
    const std::string why = finalize(g);
    if (!why.empty()) { FATAL("cuDNN SDPA forward unsupported at B=%d T=%d C=%d NH=%d: %s", B, T, C, NH, why.c_str()); }
    s.fwd[key] = g;
    return g;
}

static inline std::shared_ptr<fe::graph::Graph> backward_graph(int B, int T, int C, int NH) {
    State& s = state();
    const ShapeKey key(B, T, C, NH);
    auto it = s.bwd.find(key);
    if (it != s.bwd.end()) { return it->second; }
    const int hs = C / NH;
    std::string why;
    std::shared_ptr<fe::graph::Graph> g;
    for (int deterministic = 1; deterministic >= 0; deterministic--) {
        g = new_graph();
        auto Q = bhtd(g, "Q", UID_Q, B, T, NH, hs, 3 * (int64_t)C);
        auto K = bhtd(g, "K", UID_K, B, T, NH, hs, 3 * (int64_t)C);
        auto V = bhtd(g, "V", UID_V, B, T, NH, hs, 3 * (int64_t)C);
        auto O = bhtd(g, "O", UID_O, B, T, NH, hs, (int64_t)C);
        auto dO = bhtd(g, "dO", UID_DO, B, T, NH, hs, (int64_t)C);
        auto stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(UID_STATS)
                                   .set_dim({B, NH, T, 1})
                                   .set_stride({(int64_t)NH * T, T, 1, 1})
                                   .set_data_type(fe::DataType_t::FLOAT));
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("attention_backward")
                        .set_causal_mask(true)
                        .set_attn_scale(1.0f / sqrtf((float)hs))
                        .set_deterministic_algorithm(deterministic != 0);
        auto grads = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
        const int64_t uids[3] = {UID_DQ, UID_DK, UID_DV};
        for (int i = 0; i < 3; i++) {
            grads[i]->set_output(true).set_uid(uids[i]).set_dim({B, NH, T, hs}).set_stride(
                {(int64_t)T * 3 * C, hs, 3 * (int64_t)C, 1});
        }
        why = finalize(g);
        if (why.empty()) { break; }
        if (deterministic && !s.warned_nondeterministic) {
            fprintf(stderr, "warning: cuDNN has no deterministic SDPA backward for B=%d T=%d C=%d NH=%d (%s); "
                            "using the non-deterministic one\n",
                    B, T, C, NH, why.c_str());
            s.warned_nondeterministic = 1;
        }
    }
    if (!why.empty()) { FATAL("cuDNN SDPA backward unsupported at B=%d T=%d C=%d NH=%d: %s", B, T, C, NH, why.c_str()); }
    s.bwd[key] = g;
    return g;
}
}  // namespace llmc_cudnn

/* 1 when cuDNN SDPA handles this head size in this build */
static inline int attention_cudnn_supported(int hs) {
#if FLOATX_IS_FLOAT
    (void)hs;
    return 0;
#else
    return hs % 8 == 0 && hs <= 128;
#endif
}

/* out (B,T,C), stats (B,NH,T) natural-log LSE, qkv (B,T,3C). Requires attention_cudnn_supported(C/NH). */
static inline void attention_forward_cudnn(floatX* out, float* stats, const floatX* qkv, int B, int T, int C, int NH) {
    const int hs = attention_check_dims(B, T, C, NH);
    if (!attention_cudnn_supported(hs)) { FATAL("attention_forward_cudnn: head size %d not supported", hs); }
    auto g = llmc_cudnn::forward_graph(B, T, C, NH);
    int64_t ws_bytes = 0;
    CUDNN_FE_CHECK(g->get_workspace_size(ws_bytes));
    void* ws = llmc_cudnn::workspace(ws_bytes);
    floatX* q = (floatX*)qkv; /* cuDNN's variant pack takes void*; inputs are only read */
    std::unordered_map<int64_t, void*> pack = {
        {llmc_cudnn::UID_Q, q}, {llmc_cudnn::UID_K, q + C}, {llmc_cudnn::UID_V, q + 2 * C},
        {llmc_cudnn::UID_O, out}, {llmc_cudnn::UID_STATS, stats}};
    CUDNN_FE_CHECK(g->execute(llmc_cudnn::handle(), pack, ws));
}

/* dqkv (B,T,3C) overwritten; dout, out (B,T,C); qkv (B,T,3C); stats from attention_forward_cudnn. */
static inline void attention_backward_cudnn(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                            const float* stats, int B, int T, int C, int NH) {
    const int hs = attention_check_dims(B, T, C, NH);
    if (!attention_cudnn_supported(hs)) { FATAL("attention_backward_cudnn: head size %d not supported", hs); }
    auto g = llmc_cudnn::backward_graph(B, T, C, NH);
    int64_t ws_bytes = 0;
    CUDNN_FE_CHECK(g->get_workspace_size(ws_bytes));
    void* ws = llmc_cudnn::workspace(ws_bytes);
    floatX* q = (floatX*)qkv;
    std::unordered_map<int64_t, void*> pack = {
        {llmc_cudnn::UID_Q, q},           {llmc_cudnn::UID_K, q + C},         {llmc_cudnn::UID_V, q + 2 * C},
        {llmc_cudnn::UID_O, (void*)out},  {llmc_cudnn::UID_DO, (void*)dout},  {llmc_cudnn::UID_STATS, (void*)stats},
        {llmc_cudnn::UID_DQ, dqkv},       {llmc_cudnn::UID_DK, dqkv + C},     {llmc_cudnn::UID_DV, dqkv + 2 * C}};
    CUDNN_FE_CHECK(g->execute(llmc_cudnn::handle(), pack, ws));
}

/* ======================================================================== multi-head ops (USE_CUDNN) */
#ifdef USE_CUDNN
/* attention_mha_forward / attention_mha_backward: the multi-head (NKV = NH) ops behind the contract's attention_forward
 * and attention_backward (llmc/cuda/attention_gqa.cuh, which also handles NKV < NH by expanding qkv in scratch).
 * Shapes as attention.cuh's versions: out (B,T,C), state (B,NH,T) stats, qkv/dqkv (B,T,3C), dout (B,T,C); scratch
 * attention_mha_scratch_floats(B, T, C, NH) floats, used only by the flash fallback. attention_state_floats and
 * attention_mha_scratch_floats are shared with the flash path (attention.cuh). */
static inline void attention_mha_forward(floatX* out, float* state, float* scratch, const floatX* qkv, int B, int T,
                                         int C, int NH) {
    (void)scratch;
    if (attention_cudnn_supported(attention_check_dims(B, T, C, NH))) {
        attention_forward_cudnn(out, state, qkv, B, T, C, NH);
    } else {
        attention_forward_flash(out, state, qkv, B, T, C, NH, NH);
    }
}
static inline void attention_mha_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                          const floatX* out, const float* state, int B, int T, int C, int NH) {
    if (attention_cudnn_supported(attention_check_dims(B, T, C, NH))) {
        attention_backward_cudnn(dqkv, dout, qkv, out, state, B, T, C, NH);
    } else {
        attention_backward_flash(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, NH);
    }
}
#endif /* USE_CUDNN */

#endif /* LLMC_CUDA_ATTENTION_CUDNN_CUH */
