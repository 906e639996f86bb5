/*
 * llmc/cuda/attention_cudnn.cpp -- the definitions behind llmc/cuda/attention_cudnn.h (shapes, dtypes, errors and
 * the reason this is a .cpp are there): causal grouped-query attention as cuDNN SDPA graphs (cudnn-frontend >= 1.x;
 * Dao 2023, FlashAttention-2, is cuDNN's algorithm). Plain C++17, no CUDA syntax: `make` compiles it with the host
 * C++ compiler into build/attention_cudnn.o (-isystem for the cuDNN and frontend headers keeps them out of -Werror).
 */
#include "attention_cudnn.h"

#include "../utils.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

namespace {
namespace fe = cudnn_frontend;

void cuda_check_at(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) { fatal_error_at(file, line, "CUDA call failed: %s: %s", what, cudaGetErrorString(err)); }
}
void cudnn_check_at(cudnnStatus_t st, const char* what, const char* file, int line) {
    if (st != CUDNN_STATUS_SUCCESS) {
        fatal_error_at(file, line, "cuDNN call failed: %s: %s", what, cudnnGetErrorString(st));
    }
}
void fe_check_at(fe::error_t err, const char* what, const char* file, int line) {
    if (!err.is_good()) { fatal_error_at(file, line, "cuDNN frontend failed: %s: %s", what, err.get_message().c_str()); }
}
#define ACUDA_CHECK(call) cuda_check_at((call), #call, __FILE__, __LINE__)
#define ACUDNN_CHECK(call) cudnn_check_at((call), #call, __FILE__, __LINE__)
#define AFE_CHECK(call) fe_check_at((call), #call, __FILE__, __LINE__)

/* tensor uids of the variant packs */
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

typedef std::tuple<int, int, int, int, int, int> ShapeKey; /* B, T, NH, NKV, hs, dtype */
typedef std::shared_ptr<fe::graph::Graph> GraphPtr;

struct State {
    cudnnHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<ShapeKey, GraphPtr> fwd, bwd; /* a null graph: cuDNN has no engine for that shape (flash runs it) */
    int warned_nondeterministic = 0;
};
State& state() {
    static State s;
    return s;
}
cudnnHandle_t handle(cudaStream_t stream) {
    State& s = state();
    if (!s.handle) { ACUDNN_CHECK(cudnnCreate(&s.handle)); }
    ACUDNN_CHECK(cudnnSetStream(s.handle, stream));
    return s.handle;
}
void* workspace(int64_t bytes) {
    State& s = state();
    if ((size_t)bytes > s.workspace_bytes) {
        if (s.workspace) { ACUDA_CHECK(cudaFree(s.workspace)); }
        ACUDA_CHECK(cudaMalloc(&s.workspace, (size_t)bytes));
        s.workspace_bytes = (size_t)bytes;
    }
    return s.workspace;
}
GraphPtr new_graph(int dtype) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(dtype == ATTN_CUDNN_FP16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}
/* a [B,heads,T,hs] view with row stride ld elements */
std::shared_ptr<fe::graph::Tensor_attributes> bhtd(GraphPtr& g, const char* name, int64_t uid, int B, int T,
                                                   int heads, int hs, int64_t ld) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, heads, T, hs}).set_stride(
        {(int64_t)T * ld, hs, ld, 1}));
}
std::shared_ptr<fe::graph::Tensor_attributes> stats_tensor(GraphPtr& g, int B, int T, int NH) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name("stats")
                         .set_uid(UID_STATS)
                         .set_dim({B, NH, T, 1})
                         .set_stride({(int64_t)NH * T, T, 1, 1})
                         .set_data_type(fe::DataType_t::FLOAT));
}
/* validates and builds g; returns "" on success, else why cuDNN takes no plan for it (the caller falls back). A graph
 * that the frontend's validation rejects for any reason but GRAPH_NOT_SUPPORTED is malformed, a bug here: FATAL. */
std::string finalize(GraphPtr& g, cudaStream_t stream, const char* what) {
    cudnnHandle_t h = handle(stream);
    fe::error_t e = g->validate();
    if (!e.is_good() && e.get_code() != fe::error_code_t::GRAPH_NOT_SUPPORTED) {
        FATAL("cuDNN frontend rejects our SDPA %s graph: %s", what, e.get_message().c_str());
    }
    if (e.is_good()) { e = g->build_operation_graph(h); }
    if (e.is_good()) { e = g->create_execution_plans({fe::HeurMode_t::A}); }
    if (e.is_good()) { e = g->check_support(h); }
    if (e.is_good()) { e = g->build_plans(h); }
    return e.is_good() ? std::string() : e.get_message();
}
/* Q (NH heads), K and V (NKV heads): views into qkv, row stride (NH+2*NKV)*hs */
struct QKV {
    std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
};
QKV qkv_views(GraphPtr& g, int B, int T, int NH, int NKV, int hs) {
    const int64_t ld = (int64_t)(NH + 2 * NKV) * hs;
    return QKV{bhtd(g, "Q", UID_Q, B, T, NH, hs, ld), bhtd(g, "K", UID_K, B, T, NKV, hs, ld),
               bhtd(g, "V", UID_V, B, T, NKV, hs, ld)};
}
std::string shape_text(int B, int T, int NH, int NKV, int hs) {
    char buf[128];
    snprintf(buf, sizeof(buf), "B=%d T=%d NH=%d NKV=%d hs=%d", B, T, NH, NKV, hs);
    return buf;
}

/* the forward graph with one of the frontend's SDPA implementations; null with *why set when cuDNN takes no plan */
GraphPtr try_forward(int B, int T, int NH, int NKV, int hs, int dtype, fe::AttentionImplementation_t impl,
                     cudaStream_t stream, std::string* why) {
    const int64_t C = (int64_t)NH * hs;
    try {
        auto g = new_graph(dtype);
        const QKV in = qkv_views(g, B, T, NH, NKV, hs);
        auto opts = fe::graph::SDPA_attributes()
                        .set_name("attention_forward")
                        .set_generate_stats(true)
                        .set_causal_mask(true)
                        .set_attn_scale(1.0f / std::sqrt((float)hs))
                        .set_implementation(impl);
        auto outs = g->sdpa(in.q, in.k, in.v, opts);
        outs[0]->set_output(true).set_uid(UID_O).set_dim({B, NH, T, hs}).set_stride({(int64_t)T * C, hs, C, 1});
        outs[1]->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim(
            {B, NH, T, 1}).set_stride({(int64_t)NH * T, T, 1, 1});
        *why = finalize(g, stream, "forward");
        return why->empty() ? g : nullptr;
    } catch (const std::exception& ex) { /* sdpa() throws when no implementation takes the attributes */
        *why = ex.what();
        return nullptr;
    }
}
/* the backward graph, deterministic or not; null with *why set when cuDNN takes no plan */
GraphPtr try_backward(int B, int T, int NH, int NKV, int hs, int dtype, int deterministic, cudaStream_t stream,
                      std::string* why) {
    const int64_t ld = (int64_t)(NH + 2 * NKV) * hs, C = (int64_t)NH * hs;
    try {
        auto g = new_graph(dtype);
        const QKV in = qkv_views(g, B, T, NH, NKV, hs);
        auto O = bhtd(g, "O", UID_O, B, T, NH, hs, C);
        auto dO = bhtd(g, "dO", UID_DO, B, T, NH, hs, C);
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("attention_backward")
                        .set_causal_mask(true)
                        .set_attn_scale(1.0f / std::sqrt((float)hs))
                        .set_deterministic_algorithm(deterministic != 0);
        auto grads = g->sdpa_backward(in.q, in.k, in.v, O, dO, stats_tensor(g, B, T, NH), opts);
        const int64_t uids[3] = {UID_DQ, UID_DK, UID_DV};
        const int heads[3] = {NH, NKV, NKV};
        for (int i = 0; i < 3; i++) {
            grads[i]->set_output(true).set_uid(uids[i]).set_dim({B, heads[i], T, hs}).set_stride(
                {(int64_t)T * ld, hs, ld, 1});
        }
        *why = finalize(g, stream, "backward");
        return why->empty() ? g : nullptr;
    } catch (const std::exception& ex) {
        *why = ex.what();
        return nullptr;
    }
}

/* the cached forward graph: the frontend's own choice of implementation, else its composite one; null (said once)
 * when cuDNN takes neither */
GraphPtr forward_graph(int B, int T, int NH, int NKV, int hs, int dtype, cudaStream_t stream) {
    State& s = state();
    const ShapeKey key(B, T, NH, NKV, hs, dtype);
    if (s.fwd.count(key)) { return s.fwd[key]; }
    std::string why;
    GraphPtr g = try_forward(B, T, NH, NKV, hs, dtype, fe::AttentionImplementation_t::AUTO, stream, &why);
    if (!g) { g = try_forward(B, T, NH, NKV, hs, dtype, fe::AttentionImplementation_t::COMPOSITE, stream, &why); }
    if (!g) {
        fprintf(stderr, "note: cuDNN has no SDPA forward for %s (%s); our flash attention runs it\n",
                shape_text(B, T, NH, NKV, hs).c_str(), why.c_str());
    }
    s.fwd[key] = g;
    return g;
}
/* the cached backward graph: deterministic where cuDNN has one (else the other, said once); null (said once) when
 * cuDNN takes neither */
GraphPtr backward_graph(int B, int T, int NH, int NKV, int hs, int dtype, cudaStream_t stream) {
    State& s = state();
    const ShapeKey key(B, T, NH, NKV, hs, dtype);
    if (s.bwd.count(key)) { return s.bwd[key]; }
    std::string why;
    GraphPtr g = try_backward(B, T, NH, NKV, hs, dtype, 1, stream, &why);
    if (!g) {
        const std::string why_det = why;
        g = try_backward(B, T, NH, NKV, hs, dtype, 0, stream, &why);
        if (g && !s.warned_nondeterministic) {
            fprintf(stderr, "warning: cuDNN has no deterministic SDPA backward for %s (%s); using the "
                            "non-deterministic one\n",
                    shape_text(B, T, NH, NKV, hs).c_str(), why_det.c_str());
            s.warned_nondeterministic = 1;
        }
    }
    if (!g) {
        fprintf(stderr, "note: cuDNN has no SDPA backward for %s (%s); our flash attention runs it\n",
                shape_text(B, T, NH, NKV, hs).c_str(), why.c_str());
    }
    s.bwd[key] = g;
    return g;
}

int execute(GraphPtr& g, std::unordered_map<int64_t, void*>& pack, cudaStream_t stream) {
    int64_t ws_bytes = 0;
    AFE_CHECK(g->get_workspace_size(ws_bytes));
    void* ws = workspace(ws_bytes);
    AFE_CHECK(g->execute(handle(stream), pack, ws));
    return 1;
}
}  // namespace

int attention_cudnn_forward(void* out, float* stats, const void* qkv, int B, int T, int NH, int NKV, int hs, int dtype,
                            cudaStream_t stream) {
    GraphPtr g = forward_graph(B, T, NH, NKV, hs, dtype, stream);
    if (!g) { return 0; }
    const size_t es = 2; /* bytes per bf16 / fp16 element */
    char* q = (char*)qkv;  /* cuDNN's variant pack takes void*; the inputs are only read */
    std::unordered_map<int64_t, void*> pack = {{UID_Q, q},
                                               {UID_K, q + (size_t)NH * hs * es},
                                               {UID_V, q + (size_t)(NH + NKV) * hs * es},
                                               {UID_O, out},
                                               {UID_STATS, stats}};
    return execute(g, pack, stream);
}

int attention_cudnn_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* stats, int B,
                             int T, int NH, int NKV, int hs, int dtype, cudaStream_t stream) {
    GraphPtr g = backward_graph(B, T, NH, NKV, hs, dtype, stream);
    if (!g) { return 0; }
    const size_t es = 2, koff = (size_t)NH * hs * es, voff = (size_t)(NH + NKV) * hs * es;
    char* q = (char*)qkv;
    char* dq = (char*)dqkv;
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, q},           {UID_K, q + koff},          {UID_V, q + voff},
        {UID_O, (void*)out},  {UID_DO, (void*)dout},      {UID_STATS, (void*)stats},
        {UID_DQ, dq},         {UID_DK, dq + koff},        {UID_DV, dq + voff}};
    return execute(g, pack, stream);
}
