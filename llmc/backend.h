/*
 * llmc/backend.h -- selects the compute backend at compile time and documents
 * the interface both backends implement (llmc/README.md, "The backend contract").
 *
 *   gcc -x c -std=c11 ...        -> llmc/cpu/backend.h   (floatX = float)
 *   nvcc ...                     -> llmc/cuda/backend.cuh (floatX = __nv_bfloat16
 *                                   by default; -DENABLE_FP32 / -DENABLE_FP16)
 *   c++ -DLLMC_BACKEND_CUDA ...  -> llmc/cuda/backend.cuh compiled by a host C++17
 *                                   compiler, against whatever <cuda_runtime.h> and
 *                                   <cublasLt.h> the include path provides (the
 *                                   tests' CPU execution layer; llmc/README.md, "Tests")
 *
 * Every backend defines the type `floatX`, the macro PRECISION_NAME ("fp32",
 * "bf16", "fp16") and FLOATX_IS_FLOAT (1 when floatX is float), and implements
 * every function below with exactly these signatures. All pointers are device
 * pointers unless named `host_*`. Host code never does arithmetic on floatX.
 * Errors inside a backend (allocation failure, library error) print one line
 * with file:line and exit(EXIT_FAILURE).
 *
 * Shapes use B = batch, T = sequence length, C = channels, NH = heads,
 * hs = C/NH, V = real vocabulary, Vp = padded vocabulary (multiple of 128),
 * N = B*T rows, OC = output channels of a matmul.
 * "accumulates" means the function adds (+=) into that output; otherwise it
 * overwrites.
 *
 * ---- lifetime / memory ----
 * void  backend_process_start(char** argv);         first in main, before any thread or MPI: CPU: OpenBLAS's kernel
 *                                                    check (may re-execute the program, llmc/cpu/blas_core.h); CUDA: nothing
 * void  backend_init(int local_rank, int verbose);   select device, create handles, print device line
 * void  backend_shutdown(void);
 * const char* backend_device_name(void);             e.g. "CPU (2 threads)" or "NVIDIA H200"
 * void* dev_malloc(size_t bytes, const char* what);   exits naming `what` and bytes on failure; memory is zeroed
 * void  dev_free(void* p);
 * void  dev_memcpy_h2d(void* dst, const void* host_src, size_t bytes);
 * void  dev_memcpy_d2h(void* host_dst, const void* src, size_t bytes);
 * void  dev_memcpy_d2d(void* dst, const void* src, size_t bytes);
 * void  dev_memset(void* dst, int value, size_t bytes);
 * void  dev_synchronize(void);                       waits for all queued work (no-op on CPU)
 * void  dev_memory_info(size_t* free_bytes, size_t* total_bytes);  device memory (CPU: available host RAM)
 * void  dev_upload_floats(floatX* dst, const float* host_src, size_t n);    converts fp32 -> floatX (round to nearest)
 * void  dev_download_floats(float* host_dst, const floatX* src, size_t n);  converts floatX -> fp32
 * void  dev_copy_floats_to_floatX(floatX* dst, const float* src, size_t n); device fp32 -> floatX
 *
 * ---- pinned host memory, events, asynchronous uploads (no host synchronisation inside a step) ----
 * DevEvent                                           opaque event handle (CUDA: cudaEvent_t without timing;
 *                                                    CPU: int, every event is always complete)
 * void* host_malloc_pinned(size_t bytes, const char* what);  page-locked host memory (CUDA: cudaMallocHost;
 *                                                    CPU: malloc), zeroed; exits naming `what` on failure
 * void  host_free_pinned(void* p);                   NULL is ignored
 * DevEvent dev_event_create(void);  void dev_event_destroy(DevEvent e);
 * void  dev_memcpy_h2d_async(void* dst, const void* host_src, size_t bytes, DevEvent done);
 *        host_src must come from host_malloc_pinned. The copy runs on a separate copy stream: it starts
 *        after all work queued on the main stream before this call (so dst may still be read by that
 *        work), overlaps work queued after it, and records `done` when it has finished. The host must not
 *        change host_src before dev_event_synchronize(done); main-stream work that reads dst must be
 *        queued after dev_wait_event(done). CPU: memcpy at once.
 * void  dev_wait_event(DevEvent e);                  the main stream waits for e (the host does not);
 *                                                    an event never recorded is complete
 * void  dev_event_synchronize(DevEvent e);           the host waits for e (CPU: no-op)
 * void  dev_event_record(DevEvent e);                records e on the main stream (complete when the work queued
 *                                                    before it is)
 * DevTimer                                           opaque timer (CUDA: cudaEvent_t with timing; CPU: a host double)
 * DevTimer dev_timer_create(void);  void dev_timer_destroy(DevTimer t);
 * void  dev_timer_record(DevTimer t);                records t on the main stream (CPU: takes the wall clock now,
 *                                                    when the work queued before it is done)
 * void  dev_timer_synchronize(DevTimer t);           the host waits for t (CPU: no-op)
 * double dev_timer_elapsed_ms(DevTimer a, DevTimer b); ms from a to b, both recorded and complete (--profile-steps,
 *                                                    llmc/profile.h; CUDA: cudaEventElapsedTime, ~0.5 us resolution)
 *
 * ---- streams (a second queue beside the main stream, e.g. the collectives of llmc/comm_nccl.h) ----
 * DevStream                                          opaque stream handle (CUDA: cudaStream_t; CPU: int, all work
 *                                                    is synchronous, every stream is the same)
 * DevStream dev_main_stream(void);                   the stream every op, copy and library call above is queued on
 * DevStream dev_stream_create(void);                 a new stream that does not synchronise with the main stream by
 *                                                    itself (CUDA: cudaStreamNonBlocking); order them with events
 * void  dev_stream_destroy(DevStream s);             the caller first makes sure the work queued on s is done
 * void  dev_event_record_on(DevEvent e, DevStream s); records e on s (complete when the work queued on s before it is)
 * void  dev_stream_wait_event(DevStream s, DevEvent e); work queued on s from now on waits for e (the host does not)
 * int   dev_event_query(DevEvent e);                 1 if e is complete (or was never recorded), 0 if not yet; never
 *                                                    blocks (CPU: 1)
 * void  dev_stream_synchronize(DevStream s);         the host waits for the work queued on s (watched, see below)
 * void  dev_memcpy_h2d_on(void* dst, const void* host_src, size_t bytes, DevStream s);
 *        queued on s; host_src must stay unchanged until s has passed the copy (pinned memory copies asynchronously,
 *        pageable memory as CUDA decides). CPU: memcpy at once.
 * void  dev_memcpy_d2h_on(void* host_dst, const void* src, size_t bytes, DevStream s);
 *        queued on s; host_dst holds the data once s has passed the copy (e.g. after dev_stream_synchronize(s)).
 * DevWaitWatchdog                                    void (*)(void* ctx, double waited_s)
 * void  dev_set_wait_watchdog(DevWaitWatchdog fn, void* ctx);
 *        from now on every host wait of the backend (dev_synchronize, dev_memcpy_d2h, dev_download_floats,
 *        dev_event_synchronize, dev_stream_synchronize) polls every 100 us and calls fn(ctx, seconds waited), which
 *        may end the job (llmc/comm_nccl.h's watchdog: a wait stuck behind a collective whose peer died ends within
 *        --comm-timeout). fn = NULL: plain blocking waits again. CPU: recorded; no wait ever blocks, so fn is never
 *        called.
 * DevWaitWatchdog dev_get_wait_watchdog(void** ctx);  the installed fn (NULL if none); its ctx in *ctx if ctx != NULL
 *
 * ---- graphs (--cuda-graphs: one micro-step's forward+backward captured once and replayed) ----
 * int   dev_graphs_supported(void);                  1 on CUDA, 0 on the CPU (which refuses the flag)
 * DevGraph                                           opaque (CUDA: cudaGraphExec_t; CPU: int)
 * void  dev_graph_begin_capture(void);               main-stream work queued from now on is recorded, not run
 *                                                    (CUDA: cudaStreamCaptureModeThreadLocal); CPU: exits
 * DevGraph dev_graph_end_capture(void);              ends the capture and instantiates the graph; exits with the
 *                                                    CUDA error if the capture failed (e.g. a synchronising call)
 * void  dev_graph_launch(DevGraph g);                queues one replay on the main stream
 * void  dev_graph_destroy(DevGraph g);
 * Captured work reads and writes the same addresses, with the same kernel arguments, at every replay.
 *
 * ---- forward/backward ops (one module per op family) ----
 * encoder (token + position embedding; wpe / dwpe NULL: no position term, the decoder family's rotary positions):
 *   encoder_forward(floatX* out(B,T,C), const int* inp(B,T), const floatX* wte(Vp,C), const floatX* wpe(maxT,C), B, T, C)
 *   encoder_backward(floatX* dwte(Vp,C) accumulates, floatX* dwpe(maxT,C) accumulates,
 *                    const floatX* dout(B,T,C), const int* inp(B,T), const int* host_inp(B,T), B, T, C)
 *                    (host_inp: the same tokens on the host, for deterministic bucketing; deterministic)
 *   encoder_forward_vocab_shard(out(B,T,C), inp(B,T), const floatX* wte_shard(Vs,C), wpe(maxT,C), int v0, int Vs, B, T, C)
 *   encoder_backward_vocab_shard(dwte_shard(Vs,C) accumulates, dwpe(maxT,C) accumulates, dout, inp, host_inp,
 *                    int v0, int Vs, B, T, C)
 *                    tensor parallelism: this rank holds wte rows [v0, v0+Vs); rows whose token lies outside get 0
 *                    (forward: neither wte nor wpe, so the ranks' outputs sum to the full embedding exactly;
 *                    backward: no dwte, but dwpe from every row). v0 = 0, Vs >= Vp is the unsharded op.
 *   encoder_backward_stage(int stage, const int* host_inp(B,T), B, T)
 *                    graph mode: buckets host_inp into staging buffer `stage` (0/1) so that an encoder_backward
 *                    (or encoder_backward_vocab_shard: every token is staged, the shard's are used) captured next,
 *                    and every replay of it, copies from there with fixed sizes; before a replay the
 *                    caller stages the new tokens into the same buffer once the previous replay reading it is done.
 *                    Never during a capture. CPU: no-op.
 * layernorm (Ba et al. 2016, eps 1e-5, biased variance):
 *   layernorm_forward(floatX* out(N,C), float* mean(N), float* rstd(N), const floatX* inp(N,C), const floatX* w(C), const floatX* b(C), N, C)
 *   fused_residual_layernorm_forward(floatX* residual(N,C) = inp1 + inp2, floatX* out(N,C), float* mean(N), float* rstd(N),
 *                    const floatX* inp1(N,C), const floatX* inp2(N,C), const floatX* w(C), const floatX* b(C), N, C)
 *   layernorm_backward(floatX* dinp(N,C) accumulates, floatX* dw(C) accumulates, floatX* db(C) accumulates, float* scratch,
 *                    const floatX* dout(N,C), const floatX* inp(N,C), const floatX* w(C), const float* mean(N), const float* rstd(N), N, C)
 *                    scratch: layernorm_scratch_floats(N, C) floats
 * rmsnorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"; eps RMSNORM_EPS = 1e-5, no mean, no bias):
 *   rmsnorm_forward(floatX* out(N,C), float* rstd(N), const floatX* inp(N,C), const floatX* w(C), N, C)
 *                    out = inp * rstd * w, rstd = 1/sqrt(mean_c(inp^2) + eps); statistics in fp32, rstd saved fp32
 *   fused_residual_rmsnorm_forward(floatX* residual(N,C) = inp1 + inp2, floatX* out(N,C), float* rstd(N),
 *                    const floatX* inp1(N,C), const floatX* inp2(N,C), const floatX* w(C), N, C)
 *                    the residual is rounded to floatX first and normalised as stored (= residual_forward + rmsnorm_forward)
 *   rmsnorm_backward(floatX* dinp(N,C) accumulates, floatX* dw(C) accumulates, float* scratch,
 *                    const floatX* dout(N,C), const floatX* inp(N,C), const floatX* w(C), const float* rstd(N), N, C)
 *                    xhat = inp * rstd, dxhat = dout * w: dinp += rstd * (dxhat - xhat * mean_c(dxhat * xhat)),
 *                    dw += sum_n dout * xhat; fp32 accumulation, deterministic.
 *                    scratch: rmsnorm_scratch_floats(N, C) floats
 * matmul (out = inp @ weight^T + bias; weight stored (OC, C) as in nn.Linear):
 *   matmul_forward(floatX* out(N,OC), const floatX* inp(N,C), const floatX* weight(OC,C), const floatX* bias(OC) or NULL,
 *                  N, C, OC, floatX* pre_gelu(N,OC) or NULL)
 *                  If pre_gelu != NULL: pre_gelu = inp@W^T+b and out = gelu(pre_gelu) (GELU epilogue).
 *   matmul_backward(floatX* dinp(N,C) (overwritten), floatX* dweight(OC,C) accumulates, floatX* dbias(OC) accumulates or NULL,
 *                  floatX* dout(N,OC), const floatX* inp(N,C), const floatX* weight(OC,C), float* scratch,
 *                  N, C, OC, const floatX* pre_gelu(N,OC) or NULL)
 *                  If pre_gelu != NULL, dout is first multiplied in place by gelu'(pre_gelu) (dout is then clobbered).
 *                  dweight NULL: the weight gradient is left to matmul_backward_weight (the split backward of the
 *                  zero-bubble schedules: B now, W later), everything else as above.
 *                  scratch: matmul_scratch_floats(N, C, OC) floats.
 *   matmul_backward_weight(floatX* dweight(OC,C) accumulates, const floatX* dout(N,OC), const floatX* inp(N,C), N, C, OC)
 *                  dweight += dout^T @ inp: the weight GEMM of matmul_backward, the same call, so B (dweight NULL)
 *                  followed by this gives the unsplit backward's bits (Qi et al. 2023, "Zero Bubble Pipeline
 *                  Parallelism": W, the deferrable half of a layer's backward).
 *   matmul_backward_dgelu(dinp(N,C) (overwritten), dweight, dbias, dout, inp, weight, scratch, N, C, OC,
 *                  const floatX* inp_pre_gelu(N,C))
 *                  matmul_backward with pre_gelu = NULL, except dinp = (dout @ weight) * gelu'(inp_pre_gelu), for
 *                  inp = gelu(inp_pre_gelu) (the MLP's fcproj backward; CUDA: cuBLASLt's DGELU epilogue).
 * gelu (tanh approximation, Hendrycks & Gimpel 2016):
 *   gelu_forward(floatX* out(n), const floatX* inp(n), size_t n)
 *   gelu_backward_inplace(floatX* d_in_out(n), const floatX* inp(n), size_t n)   d = d * gelu'(inp)
 * SwiGLU (Shazeer 2020; Llama's MLP) and ReLU^2 (So et al. 2021), the decoder family's MLP activations (fp32 math,
 *   one rounding to floatX per output):
 *   swiglu_forward(floatX* out(N,F), const floatX* inp(N,2F), int N, int F)   out = silu(gate) * up, each row of inp
 *                  [gate (F) | up (F)]; silu(g) = g sigmoid(g)
 *   swiglu_backward(floatX* dinp(N,2F) (overwritten), const floatX* dout(N,F), const floatX* inp(N,2F), int N, int F)
 *                  dgate = dout up silu'(gate), dup = dout silu(gate); dinp aliases neither dout nor inp
 *   relu2_forward(floatX* out(n), const floatX* inp(n), size_t n)               out = max(inp, 0)^2 (may alias)
 *   relu2_backward_inplace(floatX* d_in_out(n), const floatX* inp(n), size_t n)  d = d * 2 max(inp, 0)
 * rotary position embedding (RoPE, Su et al. 2021; "rotate_half" pairing (i, i + hs/2) as Hugging Face Llama /
 * GPT-NeoX; CPU llmc/cpu/rope.h, CUDA llmc/cuda/rope.cuh; the model's pos=rope):
 *   rope_table(float* host_table(maxT, hs/2, 2) fp32 host, int maxT, int hs, float theta, const RopeScaling* scaling
 *              or NULL)      host function (llmc/rope_table.h, the same on both backends): (cos, sin) of t*inv_freq[i],
 *              inv_freq[i] = theta^(-2i/hs), optionally Llama-3 scaled (RopeScaling {factor, low_freq_factor,
 *              high_freq_factor, original_max_pos}; factor 0 or NULL = none); computed in double, rounded once to
 *              fp32. The caller copies it to a device buffer of maxT*hs floats (dev_memcpy_h2d).
 *   rope_forward(floatX* qkv(B,T,(NH+2*KV)*hs) in place, const float* table(maxT,hs/2,2) device, int B, int T,
 *              int NH, int KV, int hs, int pos0)
 *              rows [q heads NH*hs | k heads KV*hs | v heads KV*hs] (the model's qkv, DIM_QKV; KV < NH: GQA);
 *              rotates the NH q and KV k heads of every token by its angle, v untouched; token t has position
 *              pos0 + t (sequence-parallel shards, KV-cache decode); pos0 + T <= maxT is the caller's.
 *              x[i] = x[i] c - x[i+hs/2] s, x[i+hs/2] = x[i+hs/2] c + x[i] s, fp32 arithmetic, one rounding.
 *   rope_backward(floatX* dqkv(B,T,(NH+2*KV)*hs) in place, same arguments)   the transpose (rotation by -angle)
 *              of the q and k gradients, v gradients untouched.
 *              Both exit with one line for hs odd or < 2, or a negative size or pos0.
 * QK-norm (Dehghani et al. 2023; per head, in RMS form, as Qwen3; CPU llmc/cpu/qknorm.h, CUDA llmc/cuda/qknorm.cuh):
 *   qknorm_forward(floatX* qkv(N,(NH+2*NKV)*hs) in place, floatX* pre(N,NH+NKV,hs), float* rstd(N,NH+NKV),
 *              const floatX* qw(hs), const floatX* kw(hs), int N, int NH, int NKV, int hs)
 *              every q and k head x (hs values) -> x rstd w (qw for q heads, kw for k heads), rstd = 1/sqrt(mean(x^2)
 *              + RMSNORM_EPS) saved fp32, the input heads saved in pre; v untouched
 *   qknorm_backward(floatX* dqkv in place, floatX* dqw(hs) accumulates, floatX* dkw(hs) accumulates, float* scratch,
 *              const floatX* pre, const floatX* qw, const floatX* kw, const float* rstd, N, NH, NKV, hs)
 *              d q and d k overwritten with RMSNorm's input gradient, v's untouched; deterministic weight sums.
 *              scratch: qknorm_scratch_floats(N, NH, NKV, hs) floats
 * residual:
 *   residual_forward(floatX* out(n), const floatX* inp1(n), const floatX* inp2(n), size_t n)
 * attention (causal self-attention, scale 1/sqrt(hs), Vaswani et al. 2017; grouped-query, Ainslie et al. 2023):
 *   hs = C/NH; NKV key/value heads, NKV dividing NH (else exits with one line), group g = NH/NKV: query head h uses
 *   key/value head h/g (consecutive query heads share a kv head, Llama/HF repeat_kv). NKV = NH is multi-head attention
 *   (qkv (B,T,3C)), bit-identical to the multi-head path; NKV = 1 is multi-query attention.
 *   size_t attention_state_floats(B, T, NH)  fp32 values saved per layer for backward (CPU: (B,NH,T,T) probabilities;
 *                                            GPU flash kernel: (B,NH,T) log-sum-exp)
 *   size_t attention_scratch_floats(B, T, C, NH, NKV)  fp32 scratch for forward/backward (shared, not saved; on the
 *                                            GPU the flash backward's, the same at every NKV)
 *   attention_forward(floatX* out(B,T,C), float* state, float* scratch, const floatX* qkv(B,T,(NH+2*NKV)*hs), B, T, C,
 *                     NH, NKV)
 *                     qkv rows are [q (NH*hs) | k (NKV*hs) | v (NKV*hs)], head i of each section uses its channels
 *                     i*hs..(i+1)*hs.
 *   attention_backward(floatX* dqkv(B,T,(NH+2*NKV)*hs) (overwritten), float* scratch, const floatX* dout(B,T,C),
 *                      const floatX* qkv(B,T,(NH+2*NKV)*hs), const floatX* out(B,T,C), const float* state, B, T, C, NH,
 *                      NKV)
 *                      dK, dV of a kv head are the sum over its g query heads
 *   attention_decode(floatX* out(C), const floatX* q(C), const floatX* k(t,NKV*hs), const floatX* v(t,NKV*hs),
 *                    float* scores(NH*t) scratch (CPU; unused on the GPU), int t, C, NH, NKV)
 *                    one new query row against t cached keys/values (KV-cache sampling, llmc/kv_cache.h: the cache holds
 *                    NKV heads per position), no mask; query head h uses kv head h/g
 * fused classifier (softmax + cross-entropy + dlogits in one pass):
 *   fused_classifier(floatX* logits(N,Vp) in: logits, out: dlogits if write_dlogits, float* losses(N) out,
 *                    float dloss, const int* targets(N), N, V, Vp, int write_dlogits)
 *                    losses[i] = -log softmax(logits[i,:V])[targets[i]]; dlogits = dloss*(p - onehot);
 *                    columns V..Vp-1 are excluded from the softmax and get dlogits 0. targets < 0 are ignored (loss 0, dlogits 0).
 * vocabulary-parallel cross-entropy (tensor parallelism; logits(N,Vs) of vocabulary columns [v0, v0+Vs), the first
 * `valid` real; the caller all-reduces over the tp ranks between the steps; see llmc/cpu/classifier.h):
 *   vocab_parallel_row_max(float* row_max(N) out, const floatX* logits(N,Vs), N, Vs, valid)   -FLT_MAX if valid = 0
 *   vocab_parallel_row_sums(float* sums(2,N) out, const floatX* logits(N,Vs), const float* maxes(tp,N), int tp,
 *                    const int* targets(N), int v0, N, Vs, valid)
 *                    M_i = max over r of maxes[r][i]; sums[i] = sum_j<valid exp(logits[i,j] - M_i),
 *                    sums[N+i] = logits[i, target-v0] if the target lies in this shard's real columns, else 0
 *   vocab_parallel_finish(floatX* logits(N,Vs) in: logits, out: dlogits if write_dlogits, float* losses(N) out,
 *                    const float* maxes(tp,N), int tp, const float* sums(2,N) (all-reduced), const int* targets(N),
 *                    int v0, N, Vs, valid, float dloss, int write_dlogits)
 *                    losses[i] = log(S_i) - (target logit_i - M_i); dlogits = dloss*(exp(l - M_i)/S_i - onehot), 0 in
 *                    padding. targets < 0 are ignored (loss 0, dlogits 0).
 *   loss_mean_accumulate(float* mean(1) out, double* sum(1) accumulates, const float* losses(N), int N)
 *                    mean = (float)(fp64 sum of losses / N); sum += (double)mean. Deterministic fixed-order fp64 sum
 *                    (CPU: sequential; CUDA: one block, fixed tree). Queued: the trainer reads the loss once per
 *                    optimizer step instead of after every micro-step.
 * optimizer (AdamW, Loshchilov & Hutter 2019; bias-corrected as torch.optim.AdamW):
 *   adamw_update(floatX* params(n), float* master(n) or NULL, const floatX* grads(n), float* m(n), float* v(n), size_t n,
 *                size_t global_offset, float lr, float beta1, float beta2, float eps, float weight_decay,
 *                float grad_scale, int t, unsigned int seed)
 *                g = grads*grad_scale; m,v updated; p -= lr*(mhat/(sqrt(vhat)+eps) + wd*p).
 *                If master != NULL the update runs on master (fp32) and params = round(master) (stochastic rounding
 *                for bf16 with a random stream keyed by (seed, t, global_offset + i)). t starts at 1.
 *   global_norm_squared(float* out(1) , const floatX* grads(n), size_t n, int accumulate)
 *                out = (accumulate ? out : 0) + sum(grads^2) in fp32, deterministic.
 *   scale_floats(floatX* x(n), float s, size_t n)   x *= s (used for loss-scale unscale / averaging)
 *   has_inf_or_nan(const floatX* x(n), size_t n) -> int (host value; synchronises)
 * Muon (llmc/muon.h; Jordan et al. 2024, Liu et al. 2025; per element the two backends agree bit for bit in fp32):
 *   muon_gemm(floatX* c(M,N), const floatX* a, const floatX* b, int M, int N, int K, int transA, int transB)
 *                row-major c = op(a)(M,K) @ op(b)(K,N), fp32 accumulation, deterministic (CPU: sgemm; CUDA: cuBLASLt)
 *   muon_momentum(floatX* u(n), float* buf(n), const floatX* g(n), size_t n, float beta, float grad_scale)
 *                gs = g*grad_scale; buf = beta*buf + gs; u = gs + beta*buf (Nesterov; u may alias g)
 *   muon_normalize(floatX* x(n), const floatX* g(n), const float* normsq(1), size_t n)   x = g/(sqrt(normsq)+1e-7)
 *   muon_axpby(floatX* out(n), const floatX* x(n), const floatX* y(n), float alpha, float beta, size_t n)
 *                out = alpha*x + beta*y (out may alias x or y)
 *   muon_apply(floatX* params(n), float* master(n) or NULL, const floatX* o(n), size_t n, size_t global_offset,
 *                float lr, float scale, float wd, int t, unsigned int seed)
 *                p -= lr*(scale*o + wd*p); master and rounding as adamw_update
 * gradient compression (llmc/grad_compress.h; the two backends agree bit for bit on the same fp32 inputs):
 *   compress_pack(float* dst(n), const floatX* g(n), const float* residual(n) or NULL, float decay, size_t n)
 *                dst = g + decay * residual (the product rounded to fp32 first; decay 1: g + residual exactly)
 *   compress_quantize_int8(int8_t* q(n), float* scales(ceil(n/COMPRESS_INT8_BLOCK)), const float* x(n), size_t n,
 *                int stochastic, uint32_t seed, uint32_t step, uint64_t key)
 *                per block of COMPRESS_INT8_BLOCK values s = max|x|/127 and q = x/s rounded to nearest-even, or with
 *                stochastic = 1 floor(x/s + u), u from the counter stream (seed, step, key + i); clamped to +-127;
 *                NaN -> 0; an all-zero block has s = 0.
 *   compress_dequantize_int8(float* out(n), const int8_t* q(n), const float* scales, size_t n, float alpha, int accumulate)
 *                out = (accumulate ? out : 0) + alpha * (q * s)
 *   size_t compress_topk_scratch_bytes(size_t n)
 *   compress_topk_select(uint32_t* idx(k), float* val(k), const float* x(n), size_t n, size_t k, void* scratch)
 *                the k elements of largest |x| exactly (ties: lower index first; NaN above every number), in increasing
 *                index order, val = x[idx]; 1 <= k <= n < 2^32; no host synchronisation
 *   compress_zero_at(float* x(n), const uint32_t* idx(k), size_t k)                    x[idx] = 0
 *   compress_scatter_add(float* out(n), const uint32_t* idx(k), const float* val(k), size_t k)   out[idx] += val
 *                (distinct indices)
 * mixture of experts (llmc/moe.h; CPU: llmc/cpu/moe.h, CUDA: llmc/cuda/moe.cuh, deterministic, agreeing op for op).
 * E experts, k chosen per token,
 * R grouped rows (<= N*k); row(N,k) int: choice j of token n -> its row in the grouped buffers, -1 = dropped;
 * plan(3,E) int: routed counts, kept counts, group offsets; every probability, gate and statistic fp32:
 *   moe_router_forward(float* probs(N,E), float* lse(N), int* choice(N,k), float* gate(N,k), const floatX* x(N,C),
 *                    const floatX* w(E,C), N, C, E, k)      fp32 logits, softmax, top-k (ties: lower index),
 *                    gates renormalised over the k chosen (k = 1: the probability itself)
 *   moe_dispatch_plan(int* row(N,k), int* plan(3,E), const int* choice(N,k), N, E, k, int cap)
 *                    capacity cap per expert; served by rank (all first choices first), then token order
 *   moe_route_stats(float* stats(2E+3), probs, lse, plan, N, E, k, float aux_coef, float z_coef)
 *                    f(E), P(E), aux loss, z-loss, dropped fraction
 *   moe_permute(floatX* xe(R,C), const floatX* x(N,C), row, N, C, k)          xe[row] = x[n]
 *   moe_combine(floatX* y(N,C), const floatX* out(R,C), row, const float* gate(N,k), N, C, k)
 *                    y[n] = sum_j gate * out[row] (0 if every choice dropped)
 *   moe_combine_backward(floatX* dout(R,C), float* dgate(N,k), const floatX* dy(N,C), out, row, gate, N, C, k)
 *   moe_permute_backward(floatX* dx(N,C) (overwritten), const floatX* dxe(R,C), row, N, C, k)
 *   moe_router_backward(floatX* dx(N,C) accumulates, floatX* dw(E,C) accumulates, float* dlogits(N,E) scratch,
 *                    dgate, probs, lse, choice, gate, stats, x, w, N, C, E, k, float dloss, aux_coef, z_coef)
 *                    through the gates, the load-balancing loss and the z-loss (each weighted dloss*N)
 *   The expert GEMMs are the matmul_forward / matmul_backward above, one call per expert on its group of rows.
 */
#ifndef LLMC_BACKEND_H
#define LLMC_BACKEND_H

/* the most experts a mixture-of-experts layer may have (the kernels keep per-expert counts and per-token arrays on
 * the stack; llmc/moe.h and both backends' moe kernels use it) */
#define MOE_MAX_EXPERTS 256

#if defined(__CUDACC__) || defined(LLMC_BACKEND_CUDA)
#include "cuda/backend.cuh"
#else
#include "cpu/backend.h"
#endif

#endif /* LLMC_BACKEND_H */
