#!/usr/bin/env bash
# scripts/gpu_check.sh -- the one prepared GPU check (llmc/README.md, "Tests"). On one GPU (H100/H200, sm_90):
#   0. preflight: the device, nvcc, and where cuBLAS/NCCL were found (make print-cuda-libs);
#   1. builds train_gpt, test_gpt (BF16), test_gpt_fp32 and dev/cuda for sm_90, in parallel; if NCCL cannot be
#      found or linked it builds again with USE_NCCL=0 (one GPU, no collectives) and says so; if the build still
#      fails (not on a timeout) it builds what is missing again with WERROR=0 (a host compiler newer than CI's
#      gcc 12 may warn where CI does not) and says so in its own row, with the first error of the -Werror build;
#   2. make test-gpu's two programs: the model against the PyTorch fixture in BF16 and FP32;
#   3. GPT-2 124M (d12) benchmark: BF16, T=1024, B=$BENCH_B, $BENCH_STEPS steps; median tokens/s after warm-up,
#      MFU = tokens/s * (6N + 6*L*C*T) / peak (llm.c's convention, llmc/mfu.h; H100/H200 dense BF16 989 TFLOP/s),
#      and the largest micro-batch the memory ledger says fits;
#   4. train_gpt.py with torch.compile on the same config (the machine's python3 must have PyTorch), and the ratio;
#   5. dev/cuda checks (every kernel vs a CPU reference, outputs poisoned, then timed);
#   6. 1-process ZeRO-0/1/2/3 runs through the NCCL path (per-layer buckets on the communication stream; ZeRO-2
#      with 2 accumulation micro-steps: layer slots, fences, shard accumulator; ZeRO-3 also gathers each layer's
#      parameters on the communication stream, prefetched one layer ahead), last step lines side by side;
#   7. if time is left: the benchmark again with --cuda-graphs 1;
#   8. if time is left: a mixture-of-experts run (d12, 8 experts top-2, B=8): tokens/s and the routing.
# Beside stage 1, from the start, train_gpt_cudnn (attention through cuDNN's SDPA, a 3-minute single-file compile)
# is built in the background when cuDNN and the cudnn-frontend headers are found (pip's package, or the copy
# `make cudnn-frontend-headers` leaves in build/cudnn-frontend, to take along to a machine without it); after stage 3
# it runs the same benchmark, and a row says which attention is faster on this machine (measured, not assumed).
# Predicted seconds per stage on an H200 with 16 cores (the budget cuts the later ones first): preflight 5,
# build 150-200 (cuDNN build in parallel, ~180), fixture tests 2 x 15, benchmark 60-90, cuDNN benchmark 60-90,
# PyTorch 120-240 (compile), kernel checks 70 (the B=64 skewed-token encoder and MLP-backward-pair checks ~5,
# the FA2 attention backward's checks and timings ~5),
# ZeRO runs 3 x 20, offload rows 2 x 30 (run only when 40 s are left), graphs 60.
# Without a GPU (nvidia-smi finds none, or GPU_CHECK_DRY=1) it is a dry run: the preflight rows, then one
# "no GPU" row per stage, in a few seconds, exit 0 (CI runs it so: dev/test/cli_gpu_check_dry.sh).
# Every stage's timeout is cut to what is left of the budget (GPU_CHECK_BUDGET, default 480 s, so the whole
# script stays under 8 minutes); a stage that would not fit is reported as skipped. Each result row is written
# to summary.txt as soon as it is known, so a killed run still leaves its rows; the closing table is printed
# last (also on SIGTERM). Logs: $OUT (the device tool's folder) or ./gpu_check_logs, at most 5 files:
# summary.txt, all.log (every stage's output, in order), bench_ours.jsonl, bench_cudnn.jsonl, bench_graphs.jsonl
# (bench_moe.jsonl).
# Usage: bash scripts/gpu_check.sh     (env: BENCH_B=64 BENCH_STEPS=40 SKIP_TORCH=0 GPU_CHECK_BUDGET=480)
set -u
cd "$(dirname "$0")/.." || exit 2
LOGS=${OUT:-./gpu_check_logs}
mkdir -p "$LOGS"
WORK=$(mktemp -d)
BENCH_B=${BENCH_B:-64}
BENCH_STEPS=${BENCH_STEPS:-40}
BUDGET=${GPU_CHECK_BUDGET:-480}
JOBS=$(nproc)
DATA=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
t0=$SECONDS
: > "$LOGS/summary.txt"
: > "$LOGS/all.log"

row() { printf '%-46s | %s\n' "$1" "$2" | tee -a "$LOGS/summary.txt" | sed 's/^/[gpu_check] /'; }
summary() {
    echo
    echo "================ gpu_check summary ($(date -u +%Y-%m-%d), $((SECONDS - t0)) s of $BUDGET) ================"
    cat "$LOGS/summary.txt"
}
trap 'row "interrupted" "after $((SECONDS - t0)) s"; summary; rm -rf "$WORK"; exit 143' TERM INT
# seconds a stage may take: what it wants, cut to the budget left minus 20 s for the closing table
budget_for() { local left=$((BUDGET - (SECONDS - t0) - 20)); echo $(( $1 < left ? $1 : left )); }
# run NAME WANT_S CMD...: runs CMD with stdout+stderr in $WORK/NAME.txt under the cut timeout; appends the log
# to all.log; returns the command's status (124 on timeout, 125 when skipped for lack of budget)
run() {
    local name=$1 want=$2; shift 2
    local lim; lim=$(budget_for "$want")
    if [ "$lim" -lt 10 ]; then
        echo "skipped: budget left $lim s" > "$WORK/$name.txt"
        { echo "===== $name: skipped (budget)"; } >> "$LOGS/all.log"
        return 125
    fi
    local s=$SECONDS
    timeout -k 5 "$lim" "$@" > "$WORK/$name.txt" 2>&1
    local rc=$?
    { echo "===== $name (exit $rc, $((SECONDS - s)) s, limit $lim s): $*"; cat "$WORK/$name.txt"; } >> "$LOGS/all.log"
    return $rc
}
# the line of a stage's log that says most: its first error line, else its last line
gist() { (grep -m 1 -iE 'error|fatal|not ok|assert' "$WORK/$1.txt" || tail -n 1 "$WORK/$1.txt") 2>/dev/null | cut -c1-120; }
status_word() { case $1 in 0) echo "ok";; 124|137) echo "TIMEOUT";; 125) echo "skipped (budget)";; *) echo "FAILED (exit $1)";; esac; }

# 0. preflight. nvcc: on PATH, else the first of the usual places (a CUDA install, or pip's CUDA 13 wheels)
if ! command -v nvcc > /dev/null 2>&1; then
    for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc /opt/cuda/bin/nvcc \
             $(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.cu13') if u.find_spec('nvidia') else None; print(' '.join(p + '/bin/nvcc' for p in (s.submodule_search_locations if s else [])))" 2>/dev/null); do
        if [ -x "$c" ]; then export PATH="$(dirname "$c"):$PATH"; break; fi
    done
fi
run device 20 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
GPU_RC=$?
DRY=${GPU_CHECK_DRY:-0}
if [ $GPU_RC -ne 0 ] || ! grep -q '[A-Za-z]' "$WORK/device.txt"; then DRY=1; fi
if [ "$DRY" = 1 ]; then
    if command -v nvidia-smi > /dev/null 2>&1; then why="nvidia-smi: $(head -n 1 "$WORK/device.txt" | cut -c1-60)"; else why="no nvidia-smi"; fi
    [ "${GPU_CHECK_DRY:-0}" = 1 ] && why="GPU_CHECK_DRY=1"
    row "device" "no GPU ($why): dry run"
else
    row "device" "$(head -n 1 "$WORK/device.txt")"
fi
run nvcc 20 nvcc --version
row "nvcc" "$(grep -o 'release [0-9.]*' "$WORK/nvcc.txt" | head -n 1)"
run libs 30 make -s print-cuda-libs
LIBS_ROW=$(grep -E '^(cuBLAS|NCCL) home' "$WORK/libs.txt" | tr -s ' ' | tr '\n' ';')
row "libraries" "${LIBS_ROW:-$(gist libs)}"
if make -s print-cuda-libs USE_CUDNN=1 > "$WORK/libs_cudnn.txt" 2>&1; then
    CUDNN_OK=1
    row "cuDNN + cudnn-frontend" "found: $(grep -o -- '-isystem [^ ]*cudnn[^ ]*\|-isystem [^ ]*include' "$WORK/libs_cudnn.txt" | tail -n 1 | cut -c10-90)"
else
    CUDNN_OK=0
    row "cuDNN + cudnn-frontend" "not found: $(gist libs_cudnn) (make cudnn-frontend-headers where pip has it, take build/cudnn-frontend along)"
fi

# a machine without a GPU: every stage says so (the builds themselves are CI's dev/test/check_cuda_build.sh)
if [ "$DRY" = 1 ]; then
    for stage in "build (sm_90) + train_gpt_cudnn:predicted 150-200 s" "test_gpt (fixture):predicted 15 s" \
                 "test_gpt_fp32 (fixture):predicted 15 s" "ours d12 BF16 tokens/s:predicted 60-90 s" \
                 "cuDNN attention d12 BF16 tokens/s:predicted 60-90 s" "PyTorch torch.compile d12 BF16 tokens/s:predicted 120-240 s" \
                 "dev/cuda kernel checks:predicted 70 s" "ZeRO-0/1/2, 1 process:predicted 3 x 20 s" \
                 "ours d12 --cuda-graphs 1 tokens/s:predicted 60 s"; do
        row "${stage%%:*}" "no GPU: not run (${stage#*:})"
    done
    summary
    rm -rf "$WORK"
    exit 0
fi

# 1. build (the trainer's three targets and dev/cuda at the same time)
USE_NCCL=1
WERROR=1
build_all() { # $1: extra make flags (-B for the rebuild without NCCL)
    make -j "$JOBS" ${1:-} train_gpt test_gpt test_gpt_fp32 GPU_ARCH=90 USE_NCCL=$USE_NCCL WERROR=$WERROR &
    local p1=$!
    make -j "$JOBS" -C dev/cuda GPU_ARCH=90 WERROR=$WERROR &
    local p2=$!
    wait $p1; local r1=$?
    wait $p2; local r2=$?
    return $(( r1 != 0 ? r1 : r2 ))
}
export -f build_all
export JOBS USE_NCCL WERROR
# the cuDNN trainer compiles beside the others (one architecture, its own binary)
CUDNN_PID=
if [ "$CUDNN_OK" = 1 ]; then
    rm -f train_gpt_cudnn
    run build_cudnn 240 make train_gpt_cudnn GPU_ARCH=90 WERROR=0 &
    CUDNN_PID=$!
fi
run build 200 bash -c build_all
rc=$?
# only NCCL's own failures (not found, not linkable) lead to the one-GPU build without it; make echoes -lnccl
# on every build, so the pattern names the errors themselves
NCCL_FAIL='NCCL \(nccl\.h\) not found|libnccl\.so not found|cannot find -l:?libnccl|cannot find -lnccl|undefined reference to .?nccl|nccl\.h: No such file'
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && grep -qE "$NCCL_FAIL" "$WORK/build.txt"; then
    row "build (sm_90)" "$(status_word $rc): $(grep -m 1 -oE "$NCCL_FAIL" "$WORK/build.txt"); trying USE_NCCL=0"
    export USE_NCCL=0
    run build_nonccl 150 bash -c 'build_all -B'
    rc=$?
    row "build (sm_90, USE_NCCL=0: one GPU, no NCCL)" "$(status_word $rc) (see all.log)"
else
    row "build (sm_90)" "$(status_word $rc) ($((SECONDS - t0)) s since start; see all.log)"
fi
# a failure that is not a timeout: once more without -Werror. Only the failed targets are rebuilt (make keeps what
# was built; warnings do not change the code), so if this one builds, the -Werror build failed on warnings alone
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ $rc -ne 125 ]; then
    WERR_GIST=$(grep -h -m 1 -E 'error|warning' "$WORK"/build*.txt | head -n 1 | cut -c1-100)
    export WERROR=0
    run build_nowerror 200 bash -c build_all
    rc=$?
    row "build (sm_90, WERROR=0: warnings not errors)" \
        "$(status_word $rc)$([ $rc -eq 0 ] && echo ': the -Werror build failed on warnings only, fix them'); first: ${WERR_GIST:-n/a}"
fi
[ $rc -ne 0 ] && tail -n 30 "$WORK"/build*.txt

# 2. model tests against the fixture
for t in test_gpt test_gpt_fp32; do
    if [ -x "./$t" ]; then
        run "$t" 120 "./$t"
        rc=$?
        if [ $rc -eq 0 ]; then
            row "$t (fixture)" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$WORK/$t.txt" | tail -n 1) (ok)"
        else
            row "$t (fixture)" "$(status_word $rc): $(grep -E '[0-9]+ passed, [0-9]+ failed' "$WORK/$t.txt" | tail -n 1) $(gist "$t")"
        fi
        grep '^not ok' "$WORK/$t.txt" | head -n 5
    else
        row "$t (fixture)" "not built"
    fi
done

# 3. GPT-2 124M benchmark: median tokens/s and MFU of the steps after the first 5
median_tok_s() { python3 -c "
import json,sys,statistics
v=[json.loads(l) for l in open(sys.argv[1]) if '\"kind\":\"train\"' in l]
v=[x for x in v if x['step']>5]
print('%.0f %.4f' % (statistics.median(x['tokens_per_s'] for x in v), statistics.median(x.get('mfu',-1) for x in v)) if v else 'n/a n/a')" "$1" 2>/dev/null || echo "n/a n/a"; }
bench() { # bench NAME EXTRA_FLAGS...: d12 BF16 T=1024 B=$BENCH_B; leaves $LOGS/NAME.jsonl
    local name=$1; shift
    rm -rf "$WORK/$name"
    run "$name" "${BENCH_WANT:-150}" "${TRAIN_BIN:-./train_gpt}" -e d12 -b "$BENCH_B" -t 1024 -x "$BENCH_STEPS" -i "$DATA" -j '' -g 0 -v 0 \
        -l 6e-4 -u 10 -o "$WORK/$name" -nk 1 "$@"
    local rc=$?
    cp "$WORK/$name/log.jsonl" "$LOGS/$name.jsonl" 2>/dev/null
    return $rc
}
OURS=n/a
if [ -x ./train_gpt ]; then
    bench bench_ours
    rc=$?
    read -r OURS OURS_MFU <<< "$(median_tok_s "$LOGS/bench_ours.jsonl")"
    row "ours d12 BF16 B=$BENCH_B T=1024 tokens/s" "$OURS (MFU $OURS_MFU; $(status_word $rc))$([ $rc -ne 0 ] && echo ": $(gist bench_ours)")"
    row "ledger: largest micro-batch that fits" "$(grep -o 'largest micro-batch that fits is about B=[0-9]*' "$WORK/bench_ours.txt" | head -n 1 | sed 's/.*B=/B=/')"
fi

# 3b. the same benchmark with cuDNN's attention, and which attention is faster here
if [ -n "$CUDNN_PID" ]; then
    wait "$CUDNN_PID"
    rc=$?
    row "build train_gpt_cudnn (sm_90, WERROR=0)" "$(status_word $rc)$([ $rc -ne 0 ] && echo ": $(gist build_cudnn)")"
    if [ -x ./train_gpt_cudnn ] && [ -x ./train_gpt ]; then
        TRAIN_BIN=./train_gpt_cudnn bench bench_cudnn
        rc=$?
        read -r CUD CUD_MFU <<< "$(median_tok_s "$LOGS/bench_cudnn.jsonl")"
        row "cuDNN attention d12 BF16 B=$BENCH_B tokens/s" "$CUD (MFU $CUD_MFU; $(status_word $rc))$([ $rc -ne 0 ] && echo ": $(gist bench_cudnn)")"
        if [[ "$OURS" =~ ^[0-9]+$ ]] && [[ "$CUD" =~ ^[0-9]+$ ]]; then
            row "faster attention on this machine" "$([ "$CUD" -gt "$OURS" ] && echo "cuDNN" || echo "ours (flash kernel)") (ours $OURS vs cuDNN $CUD tokens/s)"
        fi
    fi
fi

# 4. PyTorch reference with torch.compile, same config
TORCH=n/a
if [ "${SKIP_TORCH:-0}" != 1 ] && python3 -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
    run bench_torch 240 env PYTHONUNBUFFERED=1 python3 train_gpt.py --model d12 --batch-size "$BENCH_B" --sequence-length 1024 \
        --num-iterations "$BENCH_STEPS" --dtype bfloat16 --compile 1 --input-bin "$DATA" --input-val-bin '' --device cuda
    rc=$?
    TORCH=$(grep -o 'RESULT tokens_per_s=[0-9.]*' "$WORK/bench_torch.txt" | tail -n 1 | cut -d= -f2)
    if [ -z "$TORCH" ]; then # killed before the end: the median of the step lines it printed (after step 5)
        TORCH=$(python3 -c "
import re,sys,statistics
v=[float(m.group(2)) for m in (re.search(r'step +(\d+)/.* ([0-9]+) tok/s', l) for l in open(sys.argv[1])) if m and int(m.group(1))>5]
print('%.0f' % statistics.median(v) if v else '')" "$WORK/bench_torch.txt" 2>/dev/null)
        [ -n "$TORCH" ] && TORCH_NOTE=" (from the step lines; $(status_word $rc))"
    fi
    row "PyTorch torch.compile d12 BF16 tokens/s" "${TORCH:-n/a}${TORCH_NOTE:- ($(status_word $rc))}"
    TORCH=${TORCH:-n/a}
else
    row "PyTorch torch.compile d12 BF16 tokens/s" "not run (SKIP_TORCH=1 or no CUDA-enabled torch in python3)"
fi
if [[ "$OURS" =~ ^[0-9]+$ ]] && [[ "$TORCH" =~ ^[0-9.]+$ ]]; then
    row "speed ratio ours / PyTorch (goal >= 1.3x)" "$(python3 -c "print('%.2fx' % ($OURS / $TORCH))")"
fi

# 5. kernel checks (make builds whatever the build stage did not)
run dev_cuda 150 make -C dev/cuda check GPU_ARCH=90
rc=$?
row "dev/cuda kernel checks" "$(status_word $rc) ($(ls dev/cuda/bin 2>/dev/null | wc -l) programs, $(grep -c '^FAILED' "$WORK/dev_cuda.txt") failed)$([ $rc -ne 0 ] && echo ": $(gist dev_cuda)")"
grep -E '^FAILED|dev/cuda check' "$WORK/dev_cuda.txt" | head -n 10
# kernels changed on a prediction (dev/cuda/NOTES.md, "GPU-readiness changes"): the measured line next to it
LN_BWD=$(grep -m 1 '^time layernorm_backward ' "$WORK/dev_cuda.txt" | sed -E 's/^time layernorm_backward +//' | tr -s ' ')
row "layernorm_backward N=8192 C=768 (registers)" "${LN_BWD:-n/a} (predicted: >= ~70% of HBM bandwidth)"
# the ms of a dev/cuda "time NAME ..." line
ms_of() { grep -m 1 -F "time $1" "$WORK/dev_cuda.txt" | grep -oE '[0-9]+\.[0-9]+ ms' | head -n 1; }
ENC_ONE=$(ms_of "encoder_backward B=64 newline 12%, one block/token")
ENC_CHUNK=$(ms_of "encoder_backward B=64 newline 12%, chunks of")
row "encoder_backward B=64 T=1024, newline 12% (dwte)" \
    "one block/token ${ENC_ONE:-n/a} -> chunks ${ENC_CHUNK:-n/a} (predicted: ~1-2 ms -> ~0.1 ms)"
ROWDOT=$(grep -m 1 '^time attention_backward_rowdot ' "$WORK/dev_cuda.txt" | sed -E 's/^time attention_backward_rowdot +//' | tr -s ' ')
row "attention row-dot D=rowsum(dO*O) (128-bit)" "${ROWDOT:-n/a} (predicted: >= ~80% of HBM bandwidth)"
# attention backward: the three-pass kernels (the trainer's default) vs the one-kernel FA2 backward
# (ATTN_BWD_FA2=1; dev/cuda/NOTES.md, "FlashAttention-2 backward"), B=16 T=1024 hs=64 (a quarter of the d12 B=64 step)
for shp in "B=16 T=1024 C=768" "B=16 T=1024 C=1536"; do
    BW7=$(ms_of "attention_backward flash $shp"); BWF=$(ms_of "attention_backward fa2 $shp")
    FASTER=n/a
    if [ -n "$BW7" ] && [ -n "$BWF" ]; then
        FASTER=$(awk -v a="${BW7% ms}" -v b="${BWF% ms}" 'BEGIN { print (b < a) ? "fa2 (build ATTN_BWD_FA2=1)" : "three-pass (keep the default)" }')
    fi
    row "attention bwd $shp: 3-pass vs FA2" "${BW7:-n/a} -> ${BWF:-n/a}; faster: $FASTER (predicted: ~0.7x)"
done
MLP_OLD=$(ms_of "MLP backward, gelu' in the fc dbias pass")
MLP_NEW=$(ms_of "MLP backward, DGELU epilogue")
DGELU_OK=$(grep -m 1 -oE '^(ok  |FAIL) matmul_backward_dgelu' "$WORK/dev_cuda.txt" | cut -c1-4 | tr -d ' ')
row "MLP backward N=8192: dbias-pass gelu' vs DGELU" \
    "${MLP_OLD:-n/a} -> ${MLP_NEW:-n/a}, DGELU output check ${DGELU_OK:-n/a} (predicted: ~0.05 ms less; FAIL: build GELU_BWD_EPILOGUE=0)"

# 6. one-process ZeRO-0/1/2/3 through the NCCL path (a world of one still runs every collective on NCCL)
if [ -x ./train_gpt ]; then
    for z in 0 1 2 3; do
        run "zero$z" 60 ./train_gpt -e d12 -b 8 -t 1024 -d 16384 -x 3 -z $z -i "$DATA" -j '' -g 0 -o "$WORK/zero$z"
        rc=$?
        row "ZeRO-$z, 1 process, 2 micro-steps$([ $USE_NCCL = 0 ] && echo ' (no NCCL)')" \
            "$(status_word $rc); $(grep -c '^step' "$WORK/zero$z.txt") steps; last: $(grep '^step' "$WORK/zero$z.txt" | tail -n 1 | cut -c1-60)$([ $rc -ne 0 ] && echo "; $(gist zero$z)")"
    done
fi

# 6b. optimizer offload (llmc/offload.h): ZeRO-1 on one GPU with the state in pinned host memory; the step line gives
# the PCIe bytes (counted vs theory), the share of the gradients that came down during backward (streamed per bucket)
# and the offloaded update's wall time (waiting for the last buckets, the CPU AdamW, the parameters up), from which a
# lower bound of the host -> device GB/s (the parameters up within the update's wall time, CPU AdamW included)
if [ -x ./train_gpt ] && [ "$(budget_for 60)" -ge 40 ]; then
    run offload_cpu 60 ./train_gpt -e d12 -b 8 -t 1024 -x 4 -z 1 --offload-optimizer cpu -i "$DATA" -j '' -g 0
    rc=$?
    OFF=$(grep '^step' "$WORK/offload_cpu.txt" | tail -n 1 | grep -oE 'offload PCIe [0-9.]+\+[0-9.]+ MB \(theory [^)]*\) update [0-9.]+ ms, [0-9]+% of the gradients down in backward')
    GBS=$(echo "$OFF" | sed -E 's/offload PCIe ([0-9.]+)\+([0-9.]+) MB.*update ([0-9.]+) ms.*/\1 \2 \3/' | \
          awk 'NF == 3 && $3 > 0 { printf "host->device >= %.1f GB/s (parameters up / update wall time, CPU AdamW included)", $2 / $3 }')
    row "d12 --offload-optimizer cpu, last step" "$(status_word $rc); ${OFF:-no step line}; ${GBS:-n/a}$([ $rc -ne 0 ] && echo ": $(gist offload_cpu)")"
fi
# 6c. parameter offload (llmc/zero_params.h): ZeRO-3 on one GPU with the parameter shard in pinned host memory
# (copied host -> device per layer, then all-gathered) and the CPU AdamW writing it in place; the step line's PCIe
# bytes (counted vs theory), the share of the gradients streamed down in backward, the step time and a lower bound of
# the host -> device GB/s (the gathers' bytes up over the whole step's wall time); skipped when the budget is short
if [ -x ./train_gpt ] && [ "$(budget_for 60)" -ge 40 ]; then
    run offload_params 60 ./train_gpt -e d12 -b 8 -t 1024 -x 4 -z 3 --offload-params cpu --offload-optimizer cpu \
        -i "$DATA" -j '' -g 0
    rc=$?
    LAST=$(grep '^step' "$WORK/offload_params.txt" | tail -n 1)
    OFF=$(echo "$LAST" | grep -oE 'offload PCIe [0-9.]+\+[0-9.]+ MB \(theory [^)]*\) update [0-9.]+ ms, [0-9]+% of the gradients down in backward')
    MS=$(echo "$LAST" | grep -oE '\| [0-9.]+ ms \| [0-9]+ tok/s' | head -n 1 | tr -d '|')
    GBS=$(echo "$OFF $MS" | sed -E 's/offload PCIe [0-9.]+\+([0-9.]+) MB.* ([0-9.]+) ms +[0-9]+ tok\/s.*/\1 \2/' | \
          awk 'NF == 2 && $2 > 0 { printf "; host->device >= %.1f GB/s (gathers up / step wall time)", $1 / $2 }')
    row "d12 -z 3 --offload-params cpu + optimizer cpu" "$(status_word $rc); ${MS:-no step line};${OFF:+ $OFF}${GBS}$([ $rc -ne 0 ] && echo ": $(gist offload_params)")"
fi

# 7. extras while time is left: CUDA-graph replay of the micro-step
if [ -x ./train_gpt ] && [ "$(budget_for 90)" -ge 60 ]; then
    BENCH_WANT=90 bench bench_graphs --cuda-graphs 1
    rc=$?
    read -r GR GR_MFU <<< "$(median_tok_s "$LOGS/bench_graphs.jsonl")"
    row "ours d12 --cuda-graphs 1 tokens/s" "$GR (MFU $GR_MFU; $(status_word $rc))$([ $rc -ne 0 ] && echo ": $(gist bench_graphs)")"
fi

# 8. extras while time is left: mixture of experts (llmc/cuda/moe.cuh: simple kernels, one-thread scans, the
#    expert counts read back per MoE block), d12 with 8 experts top-2 in every block, B=8 T=1024, 12 steps
if [ -x ./train_gpt ] && [ "$(budget_for 90)" -ge 60 ]; then
    rm -rf "$WORK/bench_moe"
    run bench_moe 90 ./train_gpt -e d12 -b 8 -t 1024 -x 12 -i "$DATA" -j '' -g 0 -v 0 -l 6e-4 -u 10 \
        --moe-experts 8 --moe-top-k 2 -o "$WORK/bench_moe" -nk 1
    rc=$?
    cp "$WORK/bench_moe/log.jsonl" "$LOGS/bench_moe.jsonl" 2>/dev/null
    read -r MOE MOE_MFU <<< "$(median_tok_s "$LOGS/bench_moe.jsonl")"
    row "MoE d12 E=8 top-2 B=8 T=1024 tokens/s" "$MOE (MFU of active FLOPs $MOE_MFU; $(status_word $rc); last: $(grep '^step' "$WORK/bench_moe.txt" | tail -n 1 | grep -o 'moe aux.*load [0-9.]*'))$([ $rc -ne 0 ] && echo ": $(gist bench_moe)")"
fi

summary
rm -rf "$WORK"
