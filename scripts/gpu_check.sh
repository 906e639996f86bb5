#!/usr/bin/env bash
# scripts/gpu_check.sh -- the one prepared GPU check (llmc/README.md, "Tests"; dev/cuda/NOTES.md). On one GPU
# (H100/H200, sm_90) it runs these stages, ordered by what each tells per second of the (short) time a GPU is lent:
#    1 preflight  nvidia-smi, nvcc, make + host compiler, cuBLAS, NCCL, cuDNN (+ its frontend), OpenSSL: one row each
#    2 build      train_gpt, test_gpt, test_gpt_fp32 for sm_90 (make -k); NCCL not found or not linkable: again with
#                 USE_NCCL=0; still failing (not on a timeout): what failed again with WERROR=0 (warnings stay
#                 warnings), in a row of its own with the -Werror build's first error. Beside it, in the background:
#                 dev/cuda's programs and, where cuDNN and the cudnn-frontend headers are found, train_gpt_cudnn
#    3 fixture    make test-gpu's two programs: the model against the PyTorch fixture in BF16 and FP32
#    4 bench      GPT-2 124M (d12) BF16, T=1024, B=$BENCH_B, $BENCH_STEPS steps: median tokens/s after step 5, MFU
#                 (llm.c's 6N + 6LCT convention, llmc/mfu.h), the ledger's largest micro-batch, and the trainer's
#                 phase table when ./train_gpt has --profile-steps (else a row says it has not)
#                 The decoder family's l12 (Llama-style at d12's size) the same way: its tokens/s beside d12's, and
#                 l12 with 4 key/value heads (grouped-query attention);
#                 and d12 with --optimizer muon (its tokens/s beside AdamW's)
#    5 devcuda    every dev/cuda program (checks against CPU references, then timings at training shapes), each
#                 under its own timeout, plus rows for the kernels changed on a prediction (dev/cuda/NOTES.md)
#    6 zero       1-process ZeRO-0/1/2/3 through the NCCL path (d12, B=8, 2 micro-steps, 3 steps); their losses
#                 compared automatically (step 1 must be equal; later steps within 1%)
#    7 graphs     the benchmark again with --cuda-graphs 1
#    8 cudnn      test_gpt_cudnn against the fixtures (cuDNN's attention, GQA included) and dev/cuda's attention checks
#                 built with cuDNN, then the benchmark with train_gpt_cudnn (if their background build finished): which
#                 attention is faster; l12 with KV4
#    9 torch      train_gpt.py with torch.compile on the benchmark's config, with what is left (at most 120 s)
#   10 offload    --offload-optimizer cpu (ZeRO-1) and --offload-params cpu (ZeRO-3): PCIe bytes and GB/s
#   11 moe        d12 with 8 experts top-2 in every block, B=8: tokens/s and the routing
#   12 sanitizer  compute-sanitizer --tool racecheck and --tool synccheck on test_gpt, only if 60 s remain
# Each stage has a time limit (the plan, printed first); every limit is cut to what is left of the budget
# (GPU_CHECK_BUDGET, default 480 s: with the 10 s kept for the closing table the script stays within one 9-minute
# command), and a stage that would not fit is skipped with a row saying so.
# Logs (in $OUT when set, else ./gpu_check_logs; nothing in it is ever deleted by this script, not on a signal either):
#   all.log       every command's output, streamed as it runs (a killed run keeps the partial output of its stage)
#   stages.txt    the closing table: one row per stage, "ran" / "skipped (why)" / "failed (first error line)",
#                 written when the stage ends; a stage that started and never ended keeps the row "started ... no
#                 result", so a run killed from outside still shows where it was
#   summary.txt   the result rows (numbers), each written as soon as it is known
#   build_devcuda.log, build_cudnn.log   the background builds; bench_*.jsonl  the benchmarks' training logs
# The closing table is printed at the end (also on SIGTERM / SIGINT, after stopping the running command).
# Without a GPU (nvidia-smi finds none) or with GPU_CHECK_DRY_RUN=1 (or GPU_CHECK_DRY=1) it prints the plan, runs the
# preflight and reports every other stage as skipped, in seconds, exit 0 (dev/test/cli_gpu_check_dry.sh runs it so).
# Usage: bash scripts/gpu_check.sh
#   env: STAGES="bench zero"    only these stages (the preflight always runs; the others get a "skipped" row)
#        BENCH_B=64 BENCH_STEPS=40 GPU_CHECK_BUDGET=480 GPU_ARCH=90 SKIP_TORCH=1
#        GPU_CHECK_LIMITS="cudnn=200 moe=120"   a stage's limit in seconds instead of the plan's (still cut to the budget)
#        GPU_CHECK_FAKE_STAGE="cmd"   test-only: a stage "fake" after the preflight that runs cmd (limit
#                                     GPU_CHECK_FAKE_LIMIT, default 30 s) even without a GPU (cli_gpu_check_dry.sh)
# What the GPU image may lack and this machine can provide (the cudnn-frontend headers): scripts/gpu_prepare.sh.
set -u
cd "$(dirname "$0")/.." || exit 2
LOGS=${OUT:-./gpu_check_logs}
mkdir -p "$LOGS"
WORK=$(mktemp -d)
BENCH_B=${BENCH_B:-64}
BENCH_STEPS=${BENCH_STEPS:-40}
BUDGET=${GPU_CHECK_BUDGET:-480}
RESERVE=10 # seconds kept for the closing table
ARCH=${GPU_ARCH:-90}
JOBS=$(nproc)
DATA=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
STAGES=${STAGES:-}
DRY_RUN=${GPU_CHECK_DRY_RUN:-${GPU_CHECK_DRY:-0}}
t0=$SECONDS
: > "$LOGS/all.log"
: > "$LOGS/stages.txt"
: > "$LOGS/summary.txt"

# ---------------------------------------------------------------- the plan
# key | limit (s) | least time to start (s) | predicted (s) | what it does
PLAN="preflight|15|5|5|nvidia-smi, nvcc, make, cuBLAS / NCCL / cuDNN / OpenSSL presence
build|120|30|40-70|train_gpt, test_gpt, test_gpt_fp32 (sm_$ARCH; USE_NCCL=0 and WERROR=0 retries inside the limit); dev/cuda, train_gpt_cudnn + test_gpt_cudnn beside it
fixture|60|15|2 x 15|test_gpt (BF16) and test_gpt_fp32 against the PyTorch fixture
bench|110|20|55-85|ours d12 BF16 B=$BENCH_B T=1024, $BENCH_STEPS steps: tokens/s, MFU, phase table; the family's l12 (KV 12 and 4) and Muon beside it
devcuda|90|20|40-70|dev/cuda checks and timings at training shapes, each program <= 25 s
zero|60|20|4 x 10|ZeRO-0/1/2/3, 1 process, 2 micro-steps; losses compared
graphs|30|15|15-20|ours with --cuda-graphs 1
cudnn|120|15|50-120|test_gpt_cudnn, dev/cuda attention's checks with cuDNN, d12 and l12 KV4 with cuDNN (waits for the build begun in stage 2)
torch|120|60|60-120|PyTorch torch.compile, same config, with what is left
offload|40|20|2 x 15|--offload-optimizer cpu, --offload-params cpu
moe|60|15|15-40|MoE d12 E=8 top-2 B=8 (580M parameters to initialize)
sanitizer|90|60|60+|compute-sanitizer racecheck + synccheck on test_gpt, only if 60 s remain"
if [ -n "${GPU_CHECK_FAKE_STAGE:-}" ]; then # test-only: a stage after the preflight that needs no GPU
    PLAN=$(printf '%s\n' "$PLAN" | sed "1a fake|${GPU_CHECK_FAKE_LIMIT:-30}|1|n/a|test-only: GPU_CHECK_FAKE_STAGE")
fi
declare -A LIMIT MIN_START
ORDER=()
while IFS='|' read -r key lim min _pred _what; do
    ORDER+=("$key"); LIMIT[$key]=$lim; MIN_START[$key]=$min
done <<< "$PLAN"
for kv in ${GPU_CHECK_LIMITS:-}; do # "stage=seconds" pairs; an unknown stage or a non-number is refused
    k=${kv%%=*} v=${kv#*=}
    if [ -z "${LIMIT[$k]:-}" ] || ! [[ "$v" =~ ^[0-9]+$ ]]; then
        echo "gpu_check: GPU_CHECK_LIMITS: '$kv' is not stage=seconds with a stage of the plan (${ORDER[*]})" >&2; exit 2
    fi
    LIMIT[$k]=$v
    PLAN=$(printf '%s\n' "$PLAN" | awk -F'|' -v OFS='|' -v k="$k" -v v="$v" '$1 == k { $2 = v } 1')
done

print_plan() {
    local n=0 cum=0 key lim min pred what
    echo "[gpu_check] plan: ${#ORDER[@]} stages in this order; each limit is cut to what is left of the budget"
    printf '[gpu_check]   %-2s %-10s %9s %10s  %s\n' "#" stage limit predicted "what"
    while IFS='|' read -r key lim min pred what; do
        n=$((n + 1)); cum=$((cum + lim))
        printf '[gpu_check]   %-2s %-10s %7s s %8s s  %s\n' "$n" "$key" "$lim" "$pred" "$what"
    done <<< "$PLAN"
    local most=$(( cum < BUDGET ? cum : BUDGET ))
    echo "[gpu_check] total: limits $cum s, cut to the budget $BUDGET s: at most $((most + RESERVE)) s with the" \
         "closing table ($(awk -v s=$((most + RESERVE)) 'BEGIN { printf "%.1f", s / 60 }') min; one 9-minute command: 540 s)"
}

# ---------------------------------------------------------------- rows, stages, commands
row() { printf '%-46s | %s\n' "$1" "$2" | tee -a "$LOGS/summary.txt" | sed 's/^/[gpu_check] /'; }
STAGE= STAGE_N=0 STAGE_T0=$SECONDS STAGE_END=$SECONDS STAGE_STATUS= STAGE_DETAIL= RUN_PID= BG_PIDS=
stage_line() { printf '%-2s %-10s | %s\n' "$STAGE_N" "$STAGE" "$1"; }
# the stage's row in stages.txt: a placeholder while it runs, replaced (write a copy, rename) when it ends
stage_row_begin() { stage_line "started at $((SECONDS - t0)) s; no result (the run ended inside this stage)" >> "$LOGS/stages.txt"; }
stage_row_end() {
    local text="$STAGE_STATUS ($((SECONDS - STAGE_T0)) s)${STAGE_DETAIL:+: $STAGE_DETAIL}"
    { head -n -1 "$LOGS/stages.txt"; stage_line "$text"; } > "$LOGS/stages.txt.tmp" && mv "$LOGS/stages.txt.tmp" "$LOGS/stages.txt"
    stage_line "$text" | cut -c1-200 | sed 's/^/[gpu_check] stage /'
}
skipped() { STAGE_STATUS=skipped; STAGE_DETAIL=$1; }
failed() { if [ "$STAGE_STATUS" != failed ]; then STAGE_STATUS=failed; STAGE_DETAIL=$(echo "$1" | cut -c1-160); fi; }
noted() { [ "$STAGE_STATUS" = ran ] && STAGE_DETAIL="${STAGE_DETAIL:+$STAGE_DETAIL; }$1"; }

# seconds a command may run: WANT (0: as long as the stage may), cut to the stage's end
time_for() { local left=$((STAGE_END - SECONDS)); if [ "$1" -gt 0 ] && [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi; }
# run NAME WANT CMD...: CMD's stdout and stderr appended to all.log as they come, under a timeout of WANT seconds cut
# to the stage's end; afterwards $WORK/NAME.txt holds the same text. Returns CMD's status: 124 or 137 on a timeout,
# 125 when not started (under 5 s left). CMD runs in the background so that a signal reaches this script at once.
run() {
    local name=$1 want=$2; shift 2
    local lim; lim=$(time_for "$want")
    if [ "$lim" -lt 5 ]; then
        echo "===== $name: not started ($lim s left in stage $STAGE)" | tee "$WORK/$name.txt" >> "$LOGS/all.log"
        return 125
    fi
    local start=$SECONDS off
    off=$(stat -c %s "$LOGS/all.log")
    echo "===== $name (stage $STAGE, at $((SECONDS - t0)) s, limit $lim s): $*" >> "$LOGS/all.log"
    timeout -k 5 "$lim" "$@" >> "$LOGS/all.log" 2>&1 &
    RUN_PID=$!
    wait "$RUN_PID"
    local rc=$?
    RUN_PID=
    echo "===== $name: exit $rc after $((SECONDS - start)) s" >> "$LOGS/all.log"
    tail -c +"$((off + 1))" "$LOGS/all.log" > "$WORK/$name.txt"
    return $rc
}
# bg NAME LIMIT LOG CMD...: CMD in the background under a timeout, its output streamed to LOG (kept)
declare -A BG
bg() {
    local name=$1 lim=$2 log=$3; shift 3
    timeout -k 5 "$lim" "$@" > "$log" 2>&1 &
    BG[$name]=$!
    BG_PIDS="$BG_PIDS $!"
}
# bg_wait NAME SECONDS: waits up to SECONDS for it; sets BG_RC to its status, "running", or "not started"
bg_wait() {
    local pid=${BG[$1]:-} end=$((SECONDS + $2))
    if [ -z "$pid" ]; then BG_RC="not started"; return; fi
    while kill -0 "$pid" 2> /dev/null && [ $SECONDS -lt $end ]; do sleep 1; done
    if kill -0 "$pid" 2> /dev/null; then BG_RC=running; else wait "$pid"; BG_RC=$?; fi
}
# the line of a command's output that says most: its first error line, else its last line
gist() {
    local t; t=$(grep -v '^=====' "$1" 2> /dev/null)
    (echo "$t" | grep -m 1 -iE 'error|fatal|not ok|^FAIL|assert|no such file' || echo "$t" | tail -n 1) | cut -c1-150
}
status_word() { case $1 in 0) echo "ok";; 124|137) echo "TIMEOUT";; 125) echo "not started (time)";; *) echo "FAILED (exit $1)";; esac; }

closing_table() {
    echo
    echo "================ gpu_check closing table ($(date -u +%Y-%m-%d), $((SECONDS - t0)) s of $BUDGET) ================"
    cat "$LOGS/stages.txt"
    echo "---------------- results (summary.txt; every command's output: all.log) ----------------"
    cat "$LOGS/summary.txt"
}
on_signal() {
    trap - TERM INT
    [ -n "$RUN_PID" ] && kill -TERM "$RUN_PID" 2> /dev/null
    for p in $BG_PIDS; do kill -TERM "$p" 2> /dev/null; done
    echo "===== signal: stopped in stage $STAGE after $((SECONDS - t0)) s" >> "$LOGS/all.log"
    if [ -n "$STAGE" ]; then
        STAGE_STATUS=failed
        STAGE_DETAIL="interrupted by a signal after $((SECONDS - STAGE_T0)) s (its output so far: all.log)"
        stage_row_end
    fi
    closing_table
    rm -rf "$WORK"
    exit 143
}
trap on_signal TERM INT

selected() { [ -z "$STAGES" ] || [ "$1" = preflight ] || [[ " ${STAGES//,/ } " == *" $1 "* ]]; }
NO_GPU= # why the GPU stages cannot run (empty: they can)
run_stage() {
    STAGE=$1; STAGE_N=$((STAGE_N + 1)); STAGE_T0=$SECONDS; STAGE_STATUS=ran; STAGE_DETAIL=
    local left=$((t0 + BUDGET - RESERVE - SECONDS)) lim=${LIMIT[$1]}
    [ "$lim" -gt "$left" ] && lim=$left
    STAGE_END=$((SECONDS + lim))
    stage_row_begin
    if ! selected "$1"; then skipped "not in STAGES=$STAGES"
    elif [ -n "$NO_GPU" ] && [ "$1" != preflight ] && [ "$1" != fake ]; then skipped "$NO_GPU"
    elif [ "$left" -lt "${MIN_START[$1]}" ]; then skipped "budget: $left s left, the stage needs ${MIN_START[$1]} s"
    else "stage_$1"; fi
    stage_row_end
}

# ---------------------------------------------------------------- 1 preflight
CUDNN_OK=0
stage_preflight() {
    # nvcc: on PATH, else the first of the usual places (a CUDA install, or pip's CUDA 13 wheels)
    if ! command -v nvcc > /dev/null 2>&1; then
        for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc /opt/cuda/bin/nvcc \
                 $(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.cu13') if u.find_spec('nvidia') else None; print(' '.join(p + '/bin/nvcc' for p in (s.submodule_search_locations if s else [])))" 2>/dev/null); do
            if [ -x "$c" ]; then export PATH="$(dirname "$c"):$PATH"; break; fi
        done
    fi
    run device 10 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    local rc=$?
    if [ "$DRY_RUN" = 1 ]; then
        NO_GPU="dry run (GPU_CHECK_DRY_RUN=1)"
    elif [ $rc -ne 0 ] || ! grep -v '^=====' "$WORK/device.txt" | grep -q '[A-Za-z]'; then
        NO_GPU="no GPU ($(command -v nvidia-smi > /dev/null 2>&1 && echo "nvidia-smi: $(grep -v '^=====' "$WORK/device.txt" | head -n 1 | cut -c1-60)" || echo "no nvidia-smi"))"
    fi
    if [ -n "$NO_GPU" ]; then row "device" "$NO_GPU"; else row "device" "$(grep -v '^=====' "$WORK/device.txt" | head -n 1)"; fi
    run nvcc 10 nvcc --version
    row "nvcc" "$(grep -o 'release [0-9.]*' "$WORK/nvcc.txt" | head -n 1 || true)$(command -v nvcc > /dev/null || echo 'not found')"
    row "make, host compiler, cores" "$(make --version 2> /dev/null | head -n 1 || echo 'no make'); $(${CC:-gcc} --version 2> /dev/null | head -n 1); $JOBS cores"
    run libs 30 make -s print-cuda-libs print-openssl
    local home
    home=$(sed -n 's/^cuBLAS home: *\([^ ]*\).*/\1/p' "$WORK/libs.txt")
    row "cuBLAS" "$([ -n "$home" ] && echo "found in $home" || echo "not found: $(gist "$WORK/libs.txt")")"
    home=$(sed -n 's/^NCCL home: *\([^ ]*\).*/\1/p' "$WORK/libs.txt")
    row "NCCL" "$([ -n "$home" ] && echo "found in $home" || echo "not found (the build falls back to USE_NCCL=0: one GPU, no collectives)")"
    row "OpenSSL" "$(grep -m 1 -E '^OpenSSL:|^skip: --nccl-init' "$WORK/libs.txt" | sed 's/^OpenSSL: //' | cut -c1-120)"
    if make -s print-cuda-libs USE_CUDNN=1 > "$WORK/libs_cudnn.txt" 2>&1; then
        CUDNN_OK=1
        row "cuDNN + cudnn-frontend" "found: $(sed -n 's/^cuDNN home: *\([^ ]*\).*/\1/p' "$WORK/libs_cudnn.txt"); frontend $(grep -o -- '-isystem [^ ]*' "$WORK/libs_cudnn.txt" | tail -n 1 | cut -c10-100)"
    else
        row "cuDNN + cudnn-frontend" "not found: $(gist "$WORK/libs_cudnn.txt") (scripts/gpu_prepare.sh carries the frontend in .gpu_carry)"
    fi
    grep -q '^NCCL home: */' "$WORK/libs.txt" || noted "no NCCL"
    [ "$CUDNN_OK" = 0 ] && noted "no cuDNN attention"
    [ -n "$NO_GPU" ] && noted "$NO_GPU"
}

# ---------------------------------------------------------------- test-only stage
stage_fake() {
    run fake 0 bash -c "$GPU_CHECK_FAKE_STAGE"
    local rc=$?
    [ $rc -ne 0 ] && failed "$(status_word $rc): $(gist "$WORK/fake.txt")"
}

# ---------------------------------------------------------------- 2 build
USE_NCCL=1
stage_build() {
    # beside the trainer's build: dev/cuda's programs (the devcuda stage waits for them) and the cuDNN trainer
    bg devcuda_build 300 "$LOGS/build_devcuda.log" make -k -j "$JOBS" -C dev/cuda GPU_ARCH="$ARCH" WERROR=1
    if [ "$CUDNN_OK" = 1 ]; then
        rm -f train_gpt_cudnn test_gpt_cudnn
        bg cudnn_build 400 "$LOGS/build_cudnn.log" make -k -j "$JOBS" train_gpt_cudnn test_gpt_cudnn GPU_ARCH="$ARCH" WERROR=0
    fi
    local targets="train_gpt test_gpt test_gpt_fp32" rc
    run build 0 make -k -j "$JOBS" $targets GPU_ARCH="$ARCH" USE_NCCL=1 WERROR=1
    rc=$?
    # only NCCL's own failures (not found, not linkable) lead to the one-GPU build without it; make echoes -lnccl
    # on every build, so the pattern names the errors themselves
    local nccl_fail='NCCL \(nccl\.h\) not found|libnccl\.so not found|cannot find -l:?libnccl|cannot find -lnccl|undefined reference to .?nccl|nccl\.h: No such file'
    if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -qE "$nccl_fail" "$WORK/build.txt"; then
        row "build (sm_$ARCH)" "$(status_word $rc): $(grep -m 1 -oE "$nccl_fail" "$WORK/build.txt"); trying USE_NCCL=0"
        USE_NCCL=0
        run build_nonccl 0 make -k -B -j "$JOBS" $targets GPU_ARCH="$ARCH" USE_NCCL=0 WERROR=1
        rc=$?
        row "build (sm_$ARCH, USE_NCCL=0: one GPU, no NCCL)" "$(status_word $rc)"
        noted "USE_NCCL=0"
    else
        row "build (sm_$ARCH)" "$(status_word $rc) after $((SECONDS - STAGE_T0)) s"
    fi
    # a failure that is not a timeout: once more without -Werror. make rebuilds only what failed (warnings do not
    # change the code), so if this one builds, the -Werror build failed on warnings alone
    if [ $rc -ne 0 ] && [ $rc -lt 124 ]; then
        local werr; werr=$(grep -h -m 1 -E 'error|warning' "$WORK"/build*.txt | grep -v '^=====' | head -n 1 | cut -c1-100)
        run build_nowerror 0 make -k -j "$JOBS" $targets GPU_ARCH="$ARCH" USE_NCCL=$USE_NCCL WERROR=0
        rc=$?
        row "build (sm_$ARCH, WERROR=0: warnings not errors)" \
            "$(status_word $rc)$([ $rc -eq 0 ] && echo ': the -Werror build failed on warnings only, fix them'); first: ${werr:-n/a}"
        noted "WERROR=0 needed: ${werr:-n/a}"
    fi
    if [ $rc -ne 0 ]; then
        failed "$(status_word $rc): $(gist "$WORK/$(ls -t "$WORK" | grep -m 1 '^build.*\.txt$')")"
        local missing=""
        for t in $targets; do [ -x "./$t" ] || missing="$missing $t"; done
        row "build: not built" "${missing:- (none: every target exists)}"
    fi
}

# ---------------------------------------------------------------- 3 fixture tests
stage_fixture() {
    local t rc res
    for t in test_gpt test_gpt_fp32; do
        if [ ! -x "./$t" ]; then row "$t (fixture)" "not built"; failed "$t not built"; continue; fi
        run "$t" 30 "./$t"
        rc=$?
        res=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$WORK/$t.txt" | tail -n 1)
        row "$t (fixture)" "$(status_word $rc): ${res:-no summary line}$([ $rc -ne 0 ] && echo "; $(gist "$WORK/$t.txt")")"
        [ $rc -ne 0 ] && failed "$t: $(gist "$WORK/$t.txt")"
    done
}

# ---------------------------------------------------------------- 4 benchmark (and the shared bench helper)
# median tokens/s and MFU of the train records after step 5 of a log.jsonl
median_tok_s() { python3 -c "
import json,sys,statistics
v=[json.loads(l) for l in open(sys.argv[1]) if '\"kind\":\"train\"' in l]
v=[x for x in v if x['step']>5]
print('%.0f %.4f' % (statistics.median(x['tokens_per_s'] for x in v), statistics.median(x.get('mfu',-1) for x in v)) if v else 'n/a n/a')" "$1" 2>/dev/null || echo "n/a n/a"; }
# bench NAME WANT BIN EXTRA_FLAGS...: d12 BF16 T=1024 B=$BENCH_B; its log.jsonl to $LOGS/NAME.jsonl; sets TOK MFU
bench() {
    local name=$1 want=$2 bin=$3; shift 3
    rm -rf "${WORK:?}/$name"
    run "$name" "$want" "$bin" -e d12 -b "$BENCH_B" -t 1024 -x "$BENCH_STEPS" -i "$DATA" -j '' -g 0 -v 0 \
        -l 6e-4 -u 10 -o "$WORK/$name" -nk 1 "$@"
    local rc=$?
    cp "$WORK/$name/log.jsonl" "$LOGS/$name.jsonl" 2> /dev/null
    read -r TOK MFU <<< "$(median_tok_s "$LOGS/$name.jsonl")"
    [ $rc -ne 0 ] && failed "$name: $(status_word $rc): $(gist "$WORK/$name.txt")"
    return $rc
}
OURS=n/a L12=n/a L12_GQA_TOK=n/a
L12_GQA="L12:C768:NH12:KV4:norm=rms:pos=rope:theta=500000:mlp=swiglu:bias=0" # l12 with 4 key/value heads
stage_bench() {
    [ -x ./train_gpt ] || { failed "./train_gpt not built"; return; }
    local prof=() rc
    if ./train_gpt --help 2>&1 | grep -q -- '--profile-steps'; then prof=(--profile-steps 5); fi
    bench bench_ours 0 ./train_gpt "${prof[@]}"
    rc=$?
    OURS=$TOK
    row "ours d12 BF16 B=$BENCH_B T=1024 tokens/s" "$OURS (MFU $MFU; $(status_word $rc))"
    row "ledger: largest micro-batch that fits" "$(grep -o 'largest micro-batch that fits is about B=[0-9]*' "$WORK/bench_ours.txt" | head -n 1 | sed 's/.*B=/B=/')"
    if [ ${#prof[@]} -eq 0 ]; then
        row "phase table (--profile-steps)" "not printed: ./train_gpt has no --profile-steps yet (issue 29, item 4)"
        noted "phase table skipped: ./train_gpt has no --profile-steps"
    else # the trainer's table: from its first line containing "phase table" (any case) to the next blank line
        awk 'tolower($0) ~ /phase table/ { on = 1 } on && NF == 0 { exit } on { print }' "$WORK/bench_ours.txt" | head -n 40 > "$WORK/phases.txt"
        if [ -s "$WORK/phases.txt" ]; then
            while IFS= read -r l; do row "phase" "$l"; done < "$WORK/phases.txt"
            row "phase table: compare with" "dev/cuda/NOTES.md, 'Floors for GPT-2 124M, B=64, T=1024'"
        else
            row "phase table (--profile-steps 5)" "no table found in the output"; failed "--profile-steps printed no phase table"
        fi
    fi
    # the decoder family's 124M-class member (RMSNorm, rotary, SwiGLU, no biases; llmc/gpt2.h l12) beside GPT-2's,
    # and the same with 4 key/value heads (grouped-query attention, the flash kernels' native GQA)
    bench bench_l12 0 ./train_gpt -e l12
    rc=$?
    L12=$TOK
    row "family l12 (Llama-style 124M) BF16 tokens/s" "$TOK (MFU $MFU; $(status_word $rc); GPT-2 d12: $OURS)"
    bench bench_l12_gqa 0 ./train_gpt -e "$L12_GQA"
    rc=$?
    L12_GQA_TOK=$TOK
    row "family l12 with KV4 (GQA) BF16 tokens/s" "$TOK (MFU $MFU; $(status_word $rc); l12 (KV12): $L12)"
    # Muon (llmc/muon.h) on d12: its Newton-Schulz GEMMs beside AdamW's step (the planner predicts 2.8% of a B=64 step)
    bench bench_muon 0 ./train_gpt --optimizer muon
    rc=$?
    row "d12 --optimizer muon BF16 tokens/s" "$TOK (MFU $MFU; $(status_word $rc); AdamW: $OURS; predicted: 2.8% fewer at B=64)"
}

# ---------------------------------------------------------------- 5 dev/cuda
stage_devcuda() {
    local rc
    bg_wait devcuda_build $(( $(time_for 0) - 30 ))
    if [ "$BG_RC" = running ]; then # too slow: its programs built so far run, the others are missing
        kill -TERM "${BG[devcuda_build]}" 2> /dev/null
        row "dev/cuda build (background)" "still running at $((SECONDS - t0)) s: stopped; $(ls dev/cuda/bin 2> /dev/null | wc -l) programs built"
        noted "dev/cuda build stopped"
    elif [ "$BG_RC" = "not started" ]; then # STAGES without build: what is missing or out of date
        run devcuda_build 60 make -k -j "$JOBS" -C dev/cuda GPU_ARCH="$ARCH" WERROR=0
    elif [ "$BG_RC" != 0 ]; then # failed (a warning under -Werror?): what failed again with WERROR=0
        row "dev/cuda build (background, WERROR=1)" "$(status_word "$BG_RC"): $(gist "$LOGS/build_devcuda.log")"
        run devcuda_build 60 make -k -j "$JOBS" -C dev/cuda GPU_ARCH="$ARCH" WERROR=0
        noted "dev/cuda rebuilt with WERROR=0"
    fi
    # the programs, most informative first (attention and the GEMMs carry the largest predicted levers)
    local progs="" p
    for p in attention matmul layernorm classifier encoder gelu adamw global_norm; do [ -x "dev/cuda/bin/$p" ] && progs="$progs $p"; done
    for p in dev/cuda/bin/*; do [ -x "$p" ] && [[ " $progs " != *" $(basename "$p") "* ]] && progs="$progs $(basename "$p")"; done
    : > "$WORK/dev_cuda.txt"
    local nfail=0 nrun=0
    for p in $progs; do
        run "cuda_$p" 25 "dev/cuda/bin/$p"
        rc=$?
        cat "$WORK/cuda_$p.txt" >> "$WORK/dev_cuda.txt"
        nrun=$((nrun + 1))
        local fl sm; fl=$(grep -m 1 -E '^FAIL|FAIL$| FAIL ' "$WORK/cuda_$p.txt" | cut -c1-110)
        sm=$(grep -E 'checks, [0-9]+ failed|checks: [0-9]+ passed' "$WORK/cuda_$p.txt" | tail -n 1)
        [ -z "$sm$fl" ] && [ $rc -ne 0 ] && sm="last: $(gist "$WORK/cuda_$p.txt")"
        row "dev/cuda $p" "$(status_word $rc): ${sm}${fl:+; first: $fl}"
        if [ $rc -ne 0 ]; then nfail=$((nfail + 1)); failed "$p: ${fl:-$(gist "$WORK/cuda_$p.txt")}"; fi
    done
    [ -z "$progs" ] && failed "no dev/cuda program built: $(gist "$LOGS/build_devcuda.log")"
    noted "$nrun programs, $nfail failed"
    devcuda_rows
}
# the ms of the first dev/cuda line "time NAME ..."
ms_of() { grep -m 1 -F "time $1" "$WORK/dev_cuda.txt" | grep -oE '[0-9]+\.[0-9]+ ms' | head -n 1; }
# the numbers of the first "time NAME..." line: "X ms  Y GB/s  Z% of ...  (floor F ms)"
time_line() { grep -m 1 -F "time $1" "$WORK/dev_cuda.txt" | grep -oE '[0-9]+\.[0-9]+ ms.*' | tr -s ' ' | cut -c1-110; }
# rows from the programs' output: the training-shape timings (B=64 T=1024; dev/cuda/NOTES.md has the floors) and the
# kernels changed on a prediction, next to the prediction
devcuda_rows() {
    local v t
    declare -A pred=(["layernorm_backward B=64"]="predicted >= ~70% of HBM" ["attention_backward_rowdot B=64"]="predicted >= ~80% of HBM")
    for v in "layernorm_forward B=64" "fused_residual_layernorm_forward B=64" "layernorm_backward B=64" "gelu_forward B=64" \
             "gelu_backward_inplace B=64" "residual_forward B=64" "encoder_forward B=64" "encoder_backward B=64 T=1024" \
             "fused_classifier (dlogits) B=64" "adamw_update (master weights)" "global_norm_squared" \
             "attention_backward_rowdot B=64" "matmul_forward lm head B=64" "matmul_backward lm head B=64" \
             "swiglu_forward N=65536 F=2048" "swiglu_backward N=65536 F=2048" "relu2_forward B=64" \
             "relu2_backward_inplace B=64"; do
        t=$(time_line "$v")
        row "$v" "${t:-n/a}${pred[$v]:+ (${pred[$v]})}"
    done
    t=$(grep -m 1 -E '^(ok  |FAIL) lm head' "$WORK/dev_cuda.txt" | cut -c1-4 | tr -d ' ')
    row "LM head B=64 checks (8 sampled rows, fwd + dinp)" "${t:-n/a} $(grep -E '^(ok  |FAIL) lm head' "$WORK/dev_cuda.txt" | grep -c '^FAIL') failed"
    for v in "qkv (768->2304)" "attn proj (768->768)" "fc+gelu (768->3072)" "fc proj (3072->768)"; do
        local f b; f=$(ms_of "matmul_forward $v B=64"); b=$(ms_of "matmul_backward $v B=64")
        row "matmul $v B=64 fwd / bwd" "${f:-n/a} / ${b:-n/a}"
    done
    local one chunk
    one=$(ms_of "encoder_backward B=64 newline 12%, one block/token"); chunk=$(ms_of "encoder_backward B=64 newline 12%, chunks of")
    row "encoder_backward B=64 T=1024, newline 12% (dwte)" "one block/token ${one:-n/a} -> chunks ${chunk:-n/a} (predicted: ~1-2 ms -> ~0.1 ms)"
    # attention backward: the three-pass kernels (the trainer's default) vs the one-kernel FA2 backward (ATTN_BWD_FA2=1)
    local shp a b faster
    for shp in "B=64 T=1024 C=768" "B=16 T=1024 C=1536"; do
        a=$(ms_of "attention_backward flash $shp"); b=$(ms_of "attention_backward fa2 $shp"); faster=n/a
        if [ -n "$a" ] && [ -n "$b" ]; then
            faster=$(awk -v a="${a% ms}" -v b="${b% ms}" 'BEGIN { print (b < a) ? "fa2 (build ATTN_BWD_FA2=1)" : "three-pass (keep the default)" }')
        fi
        row "attention bwd $shp: 3-pass vs FA2" "${a:-n/a} -> ${b:-n/a}; faster: $faster (predicted: ~0.7x)"
    done
    local old new ok
    old=$(ms_of "MLP backward, gelu' in the fc dbias pass"); new=$(ms_of "MLP backward, DGELU epilogue")
    ok=$(grep -m 1 -oE '^(ok  |FAIL) matmul_backward_dgelu' "$WORK/dev_cuda.txt" | cut -c1-4 | tr -d ' ')
    row "MLP backward N=8192: dbias-pass gelu' vs DGELU" \
        "${old:-n/a} -> ${new:-n/a}, DGELU output check ${ok:-n/a} (predicted: ~0.05 ms less; FAIL: build GELU_BWD_EPILOGUE=0)"
}

# ---------------------------------------------------------------- 6 ZeRO
stage_zero() {
    [ -x ./train_gpt ] || { failed "./train_gpt not built"; return; }
    local z rc
    for z in 0 1 2 3; do
        run "zero$z" 20 ./train_gpt -e d12 -b 8 -t 1024 -d 16384 -x 3 -z $z -i "$DATA" -j '' -g 0
        rc=$?
        row "ZeRO-$z, 1 process, 2 micro-steps$([ $USE_NCCL = 0 ] && echo ' (no NCCL)')" \
            "$(status_word $rc); $(grep -c '^step' "$WORK/zero$z.txt") steps; last: $(grep '^step' "$WORK/zero$z.txt" | tail -n 1 | cut -c1-60)"
        [ $rc -ne 0 ] && failed "ZeRO-$z: $(gist "$WORK/zero$z.txt")"
    done
    # losses side by side: the same model, data and arithmetic per micro-step; step 1's loss comes before any update
    # and must be equal; later steps may differ by the order ZeRO-2/3 add the micro-steps' gradients (bf16)
    local cmp
    cmp=$(python3 - "$WORK" << 'EOF'
import re, sys
runs = {}
for z in range(4):
    try:
        runs[z] = [float(m.group(1)) for m in (re.match(r'step +\d+/\d+ \| loss ([0-9.eE+-]+)', l) for l in open(f"{sys.argv[1]}/zero{z}.txt")) if m]
    except OSError:
        runs[z] = []
base = runs[0]
if not base:
    print("n/a: ZeRO-0 printed no step line"); sys.exit(0)
worst, bad = 0.0, []
for z in (1, 2, 3):
    if not runs[z]:
        continue
    for s, (a, b) in enumerate(zip(base, runs[z])):
        r = abs(a - b) / abs(a)
        worst = max(worst, r)
        if (s == 0 and a != b) or r > 1e-2:
            bad.append(f"ZeRO-{z} step {s + 1}: {b} vs {a}")
steps = " | ".join(f"step {s + 1}: " + " ".join(f"{runs[z][s]:.6f}" if s < len(runs[z]) else "-" for z in range(4)) for s in range(len(base)))
print(("DIFFER: " + "; ".join(bad[:3]) if bad else f"agree (max rel diff {worst:.1e})") + f" [z0 z1 z2 z3] {steps}")
EOF
)
    row "ZeRO losses compared (step 1 equal, later < 1%)" "$cmp"
    [[ "$cmp" == DIFFER* ]] && failed "ZeRO losses differ: ${cmp#DIFFER: }"
}

# ---------------------------------------------------------------- 7 CUDA graphs
stage_graphs() {
    [ -x ./train_gpt ] || { failed "./train_gpt not built"; return; }
    bench bench_graphs 0 ./train_gpt --cuda-graphs 1
    local rc=$?
    row "ours d12 --cuda-graphs 1 tokens/s" "$TOK (MFU $MFU; $(status_word $rc); without graphs: $OURS)"
}

# ---------------------------------------------------------------- 8 cuDNN attention
stage_cudnn() {
    if [ "$CUDNN_OK" != 1 ]; then skipped "no cuDNN or cudnn-frontend headers (preflight row; scripts/gpu_prepare.sh)"; return; fi
    # their build (train_gpt_cudnn, test_gpt_cudnn; make -k) started with stage 2; wait as long as the stage leaves 40 s
    local wait=$(( $(time_for 0) - 40 ))
    bg_wait cudnn_build $(( wait > 0 ? wait : 0 ))
    case $BG_RC in
        running) skipped "train_gpt_cudnn still building at $((SECONDS - t0)) s (build_cudnn.log)"; return;;
        "not started") skipped "train_gpt_cudnn was not built (STAGES without build?)"; [ -x ./train_gpt_cudnn ] || return;;
        0) ;;
        *) row "build train_gpt_cudnn + test_gpt_cudnn (sm_$ARCH, WERROR=0)" "$(status_word "$BG_RC"): $(gist "$LOGS/build_cudnn.log")"
           failed "cuDNN build: $(gist "$LOGS/build_cudnn.log")"
           [ -x ./train_gpt_cudnn ] || [ -x ./test_gpt_cudnn ] || return;; # what did build still runs
    esac
    STAGE_STATUS=ran STAGE_DETAIL=
    # In every row: "declined" counts the "note: cuDNN has no SDPA" lines (one per shape and direction that ran on
    # the flash kernels instead), "non-det." the "no deterministic SDPA backward" warnings.
    cudnn_said() { echo "declined $(grep -c 'note: cuDNN has no SDPA' "$1"), non-det. $(grep -c 'no deterministic SDPA backward' "$1")"; }
    # correctness first: the model test with cuDNN's attention against the PyTorch fixtures (the family fixture has
    # 2 key/value heads for 4 query heads: cuDNN's GQA graph, forward and backward; sampling builds a graph per length)
    local rc res
    if [ -x ./test_gpt_cudnn ]; then
        run test_gpt_cudnn 60 ./test_gpt_cudnn
        rc=$?
        res=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$WORK/test_gpt_cudnn.txt" | tail -n 1)
        row "test_gpt_cudnn (fixture, cuDNN attention)" "$(status_word $rc): ${res:-no summary line}; $(cudnn_said "$WORK/test_gpt_cudnn.txt")$([ $rc -ne 0 ] && echo "; $(gist "$WORK/test_gpt_cudnn.txt")")"
        [ $rc -ne 0 ] && failed "test_gpt_cudnn: $(gist "$WORK/test_gpt_cudnn.txt")"
    fi
    # dev/cuda's attention checks with cuDNN built in: cuDNN alone at the multi-head shapes and at the GQA shapes
    # (hs 32-64, NKV 1-4), and the contract; built here, after the devcuda stage ran the plain build
    run cudnn_devcuda_build 40 make -s -C dev/cuda USE_CUDNN=1 GPU_ARCH="$ARCH" WERROR=0 -W attention.cu bin/attention
    if [ $? -eq 0 ]; then
        run cudnn_devcuda 25 dev/cuda/bin/attention check
        rc=$?
        res=$(grep -E 'checks: [0-9]+ passed' "$WORK/cudnn_devcuda.txt" | tail -n 1)
        row "dev/cuda attention with cuDNN (checks)" "$(status_word $rc): ${res:-no summary line}; $(cudnn_said "$WORK/cudnn_devcuda.txt")"
        [ $rc -ne 0 ] && failed "dev/cuda attention with cuDNN: $(gist "$WORK/cudnn_devcuda.txt")"
    else
        row "dev/cuda attention with cuDNN (build)" "FAILED: $(gist "$WORK/cudnn_devcuda_build.txt")"
    fi
    [ -x ./train_gpt_cudnn ] || return
    bench bench_cudnn 0 ./train_gpt_cudnn
    rc=$?
    row "cuDNN attention d12 BF16 B=$BENCH_B tokens/s" "$TOK (MFU $MFU; $(status_word $rc); $(cudnn_said "$WORK/bench_cudnn.txt"))"
    if [[ "$OURS" =~ ^[0-9]+$ ]] && [[ "$TOK" =~ ^[0-9]+$ ]]; then
        row "faster attention on this machine" "$([ "$TOK" -gt "$OURS" ] && echo "cuDNN" || echo "ours (flash kernel)") (ours $OURS vs cuDNN $TOK tokens/s)"
    fi
    bench bench_cudnn_gqa 0 ./train_gpt_cudnn -e "$L12_GQA"
    rc=$?
    row "cuDNN attention l12 KV4 (GQA) BF16 tokens/s" "$TOK (MFU $MFU; $(status_word $rc); ours: $L12_GQA_TOK; $(cudnn_said "$WORK/bench_cudnn_gqa.txt"))"
}

# ---------------------------------------------------------------- 9 PyTorch
stage_torch() {
    if [ "${SKIP_TORCH:-0}" = 1 ]; then skipped "SKIP_TORCH=1"; return; fi
    run torch_probe 30 python3 -c "import torch; assert torch.cuda.is_available(); print('torch', torch.__version__)"
    if [ $? -ne 0 ]; then skipped "no CUDA-enabled torch in python3: $(gist "$WORK/torch_probe.txt")"; return; fi
    run bench_torch 0 env PYTHONUNBUFFERED=1 python3 train_gpt.py --model d12 --batch-size "$BENCH_B" --sequence-length 1024 \
        --num-iterations "$BENCH_STEPS" --dtype bfloat16 --compile 1 --input-bin "$DATA" --input-val-bin '' --device cuda
    local rc=$? torch note=""
    torch=$(grep -o 'RESULT tokens_per_s=[0-9.]*' "$WORK/bench_torch.txt" | tail -n 1 | cut -d= -f2)
    if [ -z "$torch" ]; then # stopped before the end: the median of the step lines it printed (after step 5)
        torch=$(python3 -c "
import re,sys,statistics
v=[float(m.group(2)) for m in (re.search(r'step +(\d+)/.* ([0-9]+) tok/s', l) for l in open(sys.argv[1])) if m and int(m.group(1))>5]
print('%.0f' % statistics.median(v) if v else '')" "$WORK/bench_torch.txt" 2>/dev/null)
        [ -n "$torch" ] && note=" (from the step lines)"
    fi
    row "PyTorch torch.compile d12 BF16 tokens/s" "${torch:-n/a}$note ($(status_word $rc))"
    [ -z "$torch" ] && failed "$(status_word $rc): $(gist "$WORK/bench_torch.txt")"
    if [[ "$OURS" =~ ^[0-9]+$ ]] && [[ "$torch" =~ ^[0-9.]+$ ]]; then
        row "speed ratio ours / PyTorch (goal >= 1.3x)" "$(awk -v a="$OURS" -v b="$torch" 'BEGIN { printf "%.2fx", a / b }')"
    fi
}

# ---------------------------------------------------------------- 10 offload
stage_offload() {
    [ -x ./train_gpt ] || { failed "./train_gpt not built"; return; }
    # optimizer offload (llmc/offload.h): ZeRO-1 on one GPU with the state in pinned host memory; the step line gives
    # the PCIe bytes (counted vs theory), the share of the gradients that came down during backward and the offloaded
    # update's wall time, from which a lower bound of the host -> device GB/s (CPU AdamW included)
    run offload_cpu 20 ./train_gpt -e d12 -b 8 -t 1024 -x 4 -z 1 --offload-optimizer cpu -i "$DATA" -j '' -g 0
    local rc=$? off gbs last ms
    off=$(grep '^step' "$WORK/offload_cpu.txt" | tail -n 1 | grep -oE 'offload PCIe [0-9.]+\+[0-9.]+ MB \(theory [^)]*\) update [0-9.]+ ms, [0-9]+% of the gradients down in backward')
    gbs=$(echo "$off" | sed -E 's/offload PCIe ([0-9.]+)\+([0-9.]+) MB.*update ([0-9.]+) ms.*/\1 \2 \3/' | \
          awk 'NF == 3 && $3 > 0 { printf "host->device >= %.1f GB/s (parameters up / update wall time)", $2 / $3 }')
    row "d12 --offload-optimizer cpu, last step" "$(status_word $rc); ${off:-no step line}; ${gbs:-n/a}"
    [ $rc -ne 0 ] && failed "offload-optimizer: $(gist "$WORK/offload_cpu.txt")"
    # parameter offload (llmc/zero_params.h): ZeRO-3 with the parameter shard in pinned host memory
    run offload_params 20 ./train_gpt -e d12 -b 8 -t 1024 -x 4 -z 3 --offload-params cpu --offload-optimizer cpu \
        -i "$DATA" -j '' -g 0
    rc=$?
    last=$(grep '^step' "$WORK/offload_params.txt" | tail -n 1)
    off=$(echo "$last" | grep -oE 'offload PCIe [0-9.]+\+[0-9.]+ MB \(theory [^)]*\) update [0-9.]+ ms, [0-9]+% of the gradients down in backward')
    ms=$(echo "$last" | grep -oE '\| [0-9.]+ ms \| [0-9]+ tok/s' | head -n 1 | tr -d '|')
    gbs=$(echo "$off $ms" | sed -E 's/offload PCIe [0-9.]+\+([0-9.]+) MB.* ([0-9.]+) ms +[0-9]+ tok\/s.*/\1 \2/' | \
          awk 'NF == 2 && $2 > 0 { printf "; host->device >= %.1f GB/s (gathers up / step wall time)", $1 / $2 }')
    row "d12 -z 3 --offload-params cpu + optimizer cpu" "$(status_word $rc); ${ms:-no step line};${off:+ $off}${gbs}"
    [ $rc -ne 0 ] && failed "offload-params: $(gist "$WORK/offload_params.txt")"
}

# ---------------------------------------------------------------- 11 mixture of experts
stage_moe() {
    [ -x ./train_gpt ] || { failed "./train_gpt not built"; return; }
    rm -rf "${WORK:?}/bench_moe"
    run bench_moe 0 ./train_gpt -e d12 -b 8 -t 1024 -x 12 -i "$DATA" -j '' -g 0 -v 0 -l 6e-4 -u 10 \
        --moe-experts 8 --moe-top-k 2 -o "$WORK/bench_moe" -nk 1
    local rc=$?
    cp "$WORK/bench_moe/log.jsonl" "$LOGS/bench_moe.jsonl" 2> /dev/null
    read -r TOK MFU <<< "$(median_tok_s "$LOGS/bench_moe.jsonl")"
    row "MoE d12 E=8 top-2 B=8 T=1024 tokens/s" "$TOK (MFU of active FLOPs $MFU; $(status_word $rc); last: $(grep '^step' "$WORK/bench_moe.txt" | tail -n 1 | grep -o 'moe aux.*load [0-9.]*'))"
    [ $rc -ne 0 ] && failed "$(gist "$WORK/bench_moe.txt")"
}

# ---------------------------------------------------------------- 12 compute-sanitizer
stage_sanitizer() {
    local cs; cs=$(command -v compute-sanitizer || echo "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/compute-sanitizer")
    [ -x "$cs" ] || { skipped "no compute-sanitizer (looked on PATH and beside nvcc)"; return; }
    [ -x ./test_gpt ] || { failed "./test_gpt not built"; return; }
    local tool half rc
    half=$(( $(time_for 0) / 2 ))
    for tool in racecheck synccheck; do
        # the fixture model's tests only (a model path as argument leaves out the MoE fixture): the tools run the
        # kernels many times slower
        run "sanitizer_$tool" "$half" "$cs" --tool "$tool" --error-exitcode 99 ./test_gpt \
            dev/test/fixtures/gpt2_fixture_model.bin dev/test/fixtures/gpt2_fixture_state.bin
        rc=$?
        row "compute-sanitizer --tool $tool ./test_gpt" "$(status_word $rc): $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$WORK/sanitizer_$tool.txt" | tail -n 2 | tr '\n' ' ' | cut -c1-110)"
        [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && failed "$tool: $(grep -m 1 -E '^=+ +(Error|ERROR|Race|Warning)' "$WORK/sanitizer_$tool.txt" | cut -c1-120)"
        [ $rc -eq 124 ] || [ $rc -eq 137 ] && noted "$tool stopped at its limit (a partial run)"
    done
}

# ---------------------------------------------------------------- the run
print_plan
for key in "${ORDER[@]}"; do run_stage "$key"; done
STAGE=
closing_table
rm -rf "$WORK"
exit 0
