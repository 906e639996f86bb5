/*
 * llmc/zero_params.h -- ZeRO-3's parameter store (llmc/README.md, "ZeRO and the gradient store"; Rajbhandari et al.
 * 2019, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", stage 3 "P_os+g+p"; Zhao et al.
 * 2023, "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel"): every rank of the data-parallel group
 * keeps only its shard of the flat padded parameter buffer (S = ceil(P/N) floatX, the same shard its optimizer state
 * covers) and gathers the parameters the model is about to read into a small working buffer, through the model's
 * GPT2ParamSource hook (llmc/gpt2.h).
 *
 * Units. The llm.c layout stacks each per-layer tensor over the layers, so one layer's parameters are 12 pieces of
 * the flat index space (gpt2_param_unit(l); a mixture-of-experts model's block adds its slices of the expert tensors
 * if it is a MoE block, of the dense-MLP tensors if not); the global tensors wte, wpe, lnfw, lnfb are one more unit
 * (-1). The working buffer has the parameter layout of a 2-layer model: per-layer (and stacked) tensor i holds two
 * layer slots back to back (layer l in slot l % 2), the global tensors whole. So the model's working set is at most two
 * layers plus the embedding unit, 2 * (one layer) + (wte, wpe, lnf) values, beside the shard.
 *
 * Gathering a unit: the owned part of each piece is copied from the shard into the working buffer, then one
 * all-gather over the pieces (comm_all_gather_segments) fills the rest from their owners; (N-1)/N of the unit's
 * bytes per rank. Every forward gathers every unit once and every backward once more ("released" = its slot is
 * reused two layers later), so a micro-step moves 2 (N-1)/N of the parameter bytes in all-gathers, plus the
 * gradients' reduce-scatter of ZeRO-2: 3 (N-1)/N per step per rank without accumulation.
 * wte's two uses: the global unit is gathered at the start of each forward (the embedding reads it first, the tied
 * LM head last) and again at the start of each backward (the head's backward reads it first; the encoder's backward
 * reads only tokens), so both uses read the same gathered values; their gradients meet in one buffer, the store's
 * wte gradient, and are reduce-scattered together at the end of backward (ZeRO-2's layer_ready(-1)).
 *
 * Prefetch (GPU): when layer l is needed, the store waits for l's gather (issued one layer earlier) and issues the
 * gather of the next layer (l+1 in a forward, l-1 in a backward) into the other slot. Collectives run on the
 * communication stream after the compute work queued before them (llmc/comm.h), so the slot is overwritten only
 * after the layer that used it finished; the compute stream waits for a slot's gather through comm fence
 * ZERO_PARAMS_FENCE + slot (the global unit: ZERO_PARAMS_FENCE + 2), without blocking the host. On the CPU build
 * collectives are synchronous and the prefetch is simply the next gather done early.
 *
 * Parameter offload (--offload-params cpu; ZeRO-Infinity, Rajbhandari et al. 2021, offloads parameters to CPU memory
 * the same way): the shard lives in pinned host memory (host_malloc_pinned: cudaMallocHost on CUDA) instead of device
 * memory, and a gather copies this rank's part of the unit host -> device into the working buffer (an asynchronous
 * copy on the compute stream) before the same in-place all-gather. Not gathered directly from pinned memory: NCCL's
 * collectives are specified for device buffers (host memory is not a supported send buffer), the all-gather is in
 * place in the working buffer, where the owned part has to be anyway, and the copy moves only this rank's 1/N of
 * the unit, once per gather, the least the PCIe link can carry; the other (N-1)/N come from the peers over NVLink
 * or the network as without offload. The optimizer updates the shard where it lives: the CPU AdamW of
 * --offload-optimizer writes it in place (llmc/offload.h; fp32 builds with --offload-optimizer cpu use the
 * offload's fp32 weights as the shard itself, no copy at all), and the device AdamW writes (and, without master
 * weights, reads) it through the unified address space: on 64-bit CUDA every cudaMallocHost allocation is
 * mapped, its device address the host pointer (CUDA Runtime API, "Unified Addressing"), so no staging buffer.
 * Ordering: the host writes the shard only after the compute stream has passed every copy out of it (the offloaded
 * update waits for the step's gradients first; zero_params_set_from_full synchronises), and copies out of it are
 * queued after the host wrote it. pcie_h2d / pcie_d2h count the bytes moved between the host shard and the device.
 *
 * Errors: allocation failures exit with one line (dev_malloc); collectives check every return code (comm.h).
 */
#ifndef LLMC_ZERO_PARAMS_H
#define LLMC_ZERO_PARAMS_H

#include <string.h>

#include "llmc/utils.h"
#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/gpt2.h"

#define ZERO_PARAMS_FENCE 3 /* comm fences 3, 4 (the layer slots) and 5 (the global unit); ZeRO-2 uses 0-2 */

typedef struct {
    GPT2* model;
    Comm* dp;
    CommDtype dtype;
    size_t P, S, own_start;       /* parameters, shard size, first flat index of this rank's shard */
    floatX* shard;                /* (S) device (host with --offload-params cpu): parameters [own_start, own_start + S)
                                   * (the tail past P zero) */
    int host;                     /* 1 = the shard is in pinned host memory (--offload-params cpu) */
    int shard_borrowed;           /* 1 = the shard is the optimizer offload's fp32 weights (not freed here) */
    unsigned long long pcie_h2d, pcie_d2h; /* bytes moved host shard -> device and back so far (host == 1) */
    floatX* work;                 /* device: the working buffer (a 2-layer model's parameter layout) */
    size_t work_elems;
    GPT2GradTarget pieces;        /* the working buffer described as a target, for gpt2_grad_bucket's pieces */
    int pending[2];               /* the layer whose gather into slot k is in flight (-1: none) */
} ZeroParamStore;

/* unit `l` (a layer, or -1: wte, wpe, lnfw, lnfb) as comm segments of the flat parameter index space pointing into
 * the working buffer; returns the count */
static inline int zero_params_segments(ZeroParamStore* ps, int l, CommSegment seg[NUM_PARAMETER_TENSORS]) {
    GPT2GradPiece pieces[NUM_PARAMETER_TENSORS];
    int n = gpt2_param_unit(ps->model, &ps->pieces, l, pieces);
    for (int k = 0; k < n; k++) {
        seg[k].ptr = pieces[k].grad;
        seg[k].begin = pieces[k].begin;
        seg[k].end = pieces[k].end;
    }
    return n;
}

/* queues the gather of unit l into its place in the working buffer: the owned parts from the shard (compute
 * stream), then one all-gather over the unit's pieces (communication stream) */
static inline void zero_params_gather(ZeroParamStore* ps, int l) {
    CommSegment seg[NUM_PARAMETER_TENSORS];
    int n = zero_params_segments(ps, l, seg);
    size_t a = ps->own_start, b = ps->own_start + ps->S;
    for (int k = 0; k < n; k++) {
        size_t lo = seg[k].begin > a ? seg[k].begin : a, hi = seg[k].end < b ? seg[k].end : b;
        if (hi > lo && ps->host) { /* asynchronous from pinned memory, on the compute stream */
            dev_memcpy_h2d((floatX*)seg[k].ptr + (lo - seg[k].begin), ps->shard + (lo - a), (hi - lo) * sizeof(floatX));
            ps->pcie_h2d += (hi - lo) * sizeof(floatX);
        } else if (hi > lo) {
            dev_memcpy_d2d((floatX*)seg[k].ptr + (lo - seg[k].begin), ps->shard + (lo - a), (hi - lo) * sizeof(floatX));
        }
    }
    comm_all_gather_segments(ps->dp, seg, n, ps->dtype, ps->S);
}

/* GPT2ParamSource hook (see the header): the global unit is gathered and waited for at the start of each pass (and
 * the pass's first layer prefetched); layer l is waited for (or gathered now if no prefetch was issued) and the
 * next layer of the pass is prefetched into the other slot. The pass walks layers [first, first + count) (a
 * pipeline chunk: its part of the stage; else all), so the prefetch stays inside them; a pass whose model reads no
 * global tensor (`globals` 0: a pipeline chunk between the ends) gathers no global unit. */
static inline void zero_params_layer_needed(void* ctx, int l, int backward, int first, int count, int globals) {
    ZeroParamStore* ps = (ZeroParamStore*)ctx;
    profile_begin(PROFILE_COMM_DP); /* --profile-steps (llmc/profile.h) */
    int next = l < 0 ? (backward ? first + count - 1 : first) : (backward ? l - 1 : l + 1);
    if (l < 0) {
        if (globals) {
            zero_params_gather(ps, -1);
            comm_fence_record(ps->dp, ZERO_PARAMS_FENCE + 2);
            comm_fence_wait(ps->dp, ZERO_PARAMS_FENCE + 2);
        }
    } else {
        int k = l & 1;
        if (ps->pending[k] != l) { /* no prefetch of l in flight (a pass that starts elsewhere): gather it now */
            zero_params_gather(ps, l);
            comm_fence_record(ps->dp, ZERO_PARAMS_FENCE + k);
        }
        comm_fence_wait(ps->dp, ZERO_PARAMS_FENCE + k);
        ps->pending[k] = -1;
    }
    if (next >= first && next < first + count) {
        int k = next & 1;
        zero_params_gather(ps, next);
        comm_fence_record(ps->dp, ZERO_PARAMS_FENCE + k);
        ps->pending[k] = next;
    }
    profile_end();
}

/* one layer slot's elements of tensor i in the working buffer: a layer's slice of a per-layer tensor, one block's
 * slice of a tensor stacked over a mixture-of-experts model's dense or MoE blocks; 0 for the global tensors */
static inline size_t zero_params_slot_elems(const GPT2* model, int i) {
    if (GPT2_PARAMS[i].slices == SLICES_ONE || model->param_sizes[i] == 0) { return 0; }
    return model->param_sizes[i] / gpt2_stage_slices(&model->config, &model->stage, i);
}

/* Shards the parameters of `model` (its flat buffer padded to N * S, llmc/zero.h): copies this rank's shard
 * [own_start, own_start + S) out, replaces the model's buffer by the working buffer and points the model's
 * GPT2ParamSource at the store. The full buffer is freed; from here on the model's params hold gathered layers only.
 * host = 1 (--offload-params cpu): the shard is pinned host memory, or `borrowed` (S floatX of pinned host memory
 * that already holds these values, owned by the caller: the optimizer offload's fp32 weights in fp32 builds) when
 * non-NULL. Exits with one line on allocation failure. */
static inline void zero_params_init(ZeroParamStore* ps, GPT2* model, Comm* dp, CommDtype dtype, size_t S,
                                    size_t own_start, int host, floatX* borrowed) {
    memset(ps, 0, sizeof(*ps));
    ps->model = model;
    ps->dp = dp;
    ps->dtype = dtype;
    ps->P = model->num_parameters;
    ps->S = S;
    ps->own_start = own_start;
    ps->pending[0] = ps->pending[1] = -1;
    ps->host = host;
    ps->shard_borrowed = host && borrowed != NULL;
    if (ps->shard_borrowed) {
        ps->shard = borrowed;
    } else if (host) {
        ps->shard = (floatX*)host_malloc_pinned(S * sizeof(floatX), "parameters (ZeRO-3 shard, offloaded to host memory)");
        dev_memcpy_d2h(ps->shard, model->params_memory + own_start, S * sizeof(floatX));
    } else {
        ps->shard = (floatX*)dev_malloc(S * sizeof(floatX), "parameters (ZeRO-3 shard)");
        dev_memcpy_d2d(ps->shard, model->params_memory + own_start, S * sizeof(floatX));
    }
    size_t sizes[NUM_PARAMETER_TENSORS];
    ps->work_elems = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        sizes[i] = 2 * zero_params_slot_elems(model, i);
        if (GPT2_PARAMS[i].slices == SLICES_ONE) { sizes[i] = model->param_sizes[i]; }
        ps->work_elems += sizes[i];
    }
    ps->work = (floatX*)dev_malloc(ps->work_elems * sizeof(floatX), "parameters (ZeRO-3 working set: 2 layers + wte/wpe/lnf)");
    dev_memset(ps->work, 0, ps->work_elems * sizeof(floatX));
    dev_free(model->params_memory);
    model->params_memory = ps->work;
    model->params_capacity = ps->work_elems;
    parameter_tensors_point(&model->params, ps->work, sizes);
    memset(&ps->pieces, 0, sizeof(ps->pieces));
    ps->pieces.base = model->params;
    ps->pieces.layer_slots = 2;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { ps->pieces.layer_stride[i] = zero_params_slot_elems(model, i); }
    model->param_source.layer_slots = 2;
    model->param_source.layer_needed = zero_params_layer_needed;
    model->param_source.ctx = ps;
}

/* device bytes of parameters this rank holds: the shard (unless offloaded) and the working buffer */
static inline size_t zero_params_bytes(const ZeroParamStore* ps) {
    return ((ps->host ? 0 : ps->S) + ps->work_elems) * sizeof(floatX);
}

/* host bytes this store allocated for the offloaded shard (0 on the device, or borrowed) */
static inline size_t zero_params_host_bytes(const ZeroParamStore* ps) {
    return ps->host && !ps->shard_borrowed ? ps->S * sizeof(floatX) : 0;
}

/* This instance's parameters (P elements, its flat order: the whole model, or a tensor-parallel rank's part) in
 * fp32 into host_full and/or as floatX into dev_full (device); either may be NULL (host_full is NULL on ranks that do
 * not write): every rank of the group calls it, unit by unit through the working buffer, so nothing but dev_full
 * (when asked for) holds more than the working set. Synchronises; leaves no gather in flight. */
static inline void zero_params_download_full(ZeroParamStore* ps, float* host_full, floatX* dev_full) {
    for (int l = -1; l < ps->model->n_layers; l++) {
        zero_params_gather(ps, l);
        comm_join(ps->dp);
        CommSegment seg[NUM_PARAMETER_TENSORS];
        int n = zero_params_segments(ps, l, seg);
        for (int k = 0; k < n; k++) {
            size_t len = seg[k].end - seg[k].begin;
            if (host_full) { dev_download_floats(host_full + seg[k].begin, (const floatX*)seg[k].ptr, len); }
            if (dev_full && len) { dev_memcpy_d2d(dev_full + seg[k].begin, seg[k].ptr, len * sizeof(floatX)); }
        }
    }
    ps->pending[0] = ps->pending[1] = -1;
}

/* replaces the elements of this rank's shard that lie in the flat range [begin, end) by src (device, floatX; src[0] is
 * element begin); the rest of the shard is left as it is */
static inline void zero_params_set_range(ZeroParamStore* ps, const floatX* src, size_t begin, size_t end) {
    size_t a = ps->own_start, lo = begin > a ? begin : a, hi = a + ps->S;
    hi = hi < end ? hi : end;
    if (hi <= lo) { return; }
    if (ps->host) { /* no copy out of the shard may still be in flight when the host writes it */
        dev_synchronize();
        dev_memcpy_d2h(ps->shard + (lo - a), src + (lo - begin), (hi - lo) * sizeof(floatX));
    } else {
        dev_memcpy_d2d(ps->shard + (lo - a), src + (lo - begin), (hi - lo) * sizeof(floatX));
    }
}

/* replaces this rank's shard by elements [own_start, own_start + S) of the full parameters `full` (device, P
 * floatX, the flat order); the shard's tail past P stays zero */
static inline void zero_params_set_from_full(ZeroParamStore* ps, const floatX* full) {
    if (ps->host) { dev_synchronize(); memset(ps->shard, 0, ps->S * sizeof(floatX)); }
    else { dev_memset(ps->shard, 0, ps->S * sizeof(floatX)); }
    zero_params_set_range(ps, full, 0, ps->P);
}

/* frees the shard (the working buffer is the model's params_memory: gpt2_free frees it; a borrowed shard is its
 * owner's) */
static inline void zero_params_free(ZeroParamStore* ps) {
    if (ps->shard && ps->host && !ps->shard_borrowed) { dev_synchronize(); host_free_pinned(ps->shard); }
    else if (ps->shard && !ps->host) { dev_free(ps->shard); }
    if (ps->model && ps->model->param_source.ctx == ps) { memset(&ps->model->param_source, 0, sizeof(GPT2ParamSource)); }
    ps->shard = NULL;
}

#endif /* LLMC_ZERO_PARAMS_H */
