# dev/test/cli_layout.sh -- the trainer and the planner agree on every layout of a grid (llmc/layout.h's
# compatibility table, llmc/README.md "The layout and the compatibility table"). For each cell the real trainer runs
# under mpirun with as many processes as the layout has (--dry-run 1: it sets up the grid, the model, the ZeRO store
# and the data, prints its header and exits) and the planner evaluates the same flags for as many GPUs (--plan 1
# --gpus N). Agreement:
#   - the trainer builds the layout exactly when the planner evaluates it without a theory mark;
#   - a layout the trainer refuses is either theory only for the planner (evaluated, marked "[theory: ...]") or
#     invalid for both, with the same sentence (the planner's "--plan: the layout cannot be built: <sentence>");
#   - and each cell's verdict is the one stated in the grid below, so a table that drifted both ways is caught too.
# Cells: dense, grouped-query (KV2: tp splits the two key/value heads, so tp 4 is refused) and mixture-of-experts
# models (L4 C64 NH4, E4 K2) on 1-8 processes over tp, sp, pp (1f1b, gpipe,
# interleaved, m too small), dp with ZeRO 0-3, ep, compression, parameter offload and recompute. One -d per cell.
source "$(dirname "$0")/dp_lib.sh"
DENSE=(-e L4:C64:NH4:T64 -b 2 -t 64 -j '' -g 0 --dry-run 1)
MOE=(-e L4:C64:NH4:T64:E4:K2 -b 2 -t 64 -j '' -g 0 --dry-run 1)
GQA=(-e L4:C64:NH4:KV2:T64 -b 2 -t 64 -j '' -g 0 --dry-run 1)
# np | expected (buildable, theory, invalid) | model | flags
CELLS=(
"1|buildable|DENSE|"
"2|buildable|DENSE|-z 1"
"3|buildable|DENSE|-z 3"
"2|buildable|DENSE|--tp 2"
"2|buildable|DENSE|--tp 2 --sequence-parallel 1"
"4|buildable|DENSE|--tp 4"
"3|invalid|DENSE|--tp 2"
"2|invalid|DENSE|--pp 2"
"2|buildable|DENSE|--pp 2 -d 256"
"2|buildable|DENSE|--pp 2 --pp-schedule gpipe"
"2|buildable|DENSE|--pp 2 -d 256 --pp-schedule interleaved --pp-virtual 2"
"2|invalid|DENSE|--pp 2 -d 384 --pp-schedule interleaved --pp-virtual 2"
"2|buildable|DENSE|--pp 2 -d 256 -z 2"
"2|buildable|DENSE|--pp 2 -d 256 -z 3"
"2|buildable|DENSE|--pp 2 -d 256 --pp-schedule interleaved --pp-virtual 2 -z 3"
"4|buildable|DENSE|--tp 2 -z 3 -d 256"
"4|buildable|DENSE|--tp 2 --pp 2 -d 256 -z 1"
"8|buildable|DENSE|--tp 2 --pp 2 -d 512 -z 1"
"2|invalid|DENSE|--ep 2"
"2|invalid|DENSE|--sequence-parallel 1"
"2|buildable|DENSE|-z 1 --grad-compress int8"
"4|buildable|DENSE|--tp 2 --grad-compress int8"
"2|invalid|DENSE|--tp 2 --grad-compress int8"
"1|invalid|DENSE|-z 2 --offload-params cpu"
"2|buildable|DENSE|-z 3 --offload-params cpu"
"1|invalid|DENSE|-r 2 --recompute-every 2"
"2|buildable|GQA|--tp 2"
"4|invalid|GQA|--tp 4"
"2|buildable|MOE|--ep 2 -z 1"
"4|buildable|MOE|--ep 4"
"2|buildable|MOE|--ep 2 -z 3"
"2|buildable|MOE|--ep 2 -z 3 --offload-params cpu"
"4|buildable|MOE|--pp 2 -d 512"
"4|buildable|MOE|--ep 2 -z 1 --grad-compress int8"
"2|buildable|MOE|--tp 2"
"4|buildable|MOE|--tp 2 --ep 2"
"3|invalid|MOE|--ep 3"
)
agree=0
for cell in "${CELLS[@]}"; do
    IFS='|' read -r np want model flags <<< "$cell"
    case "$model" in MOE) args=("${MOE[@]}") ;; GQA) args=("${GQA[@]}") ;; *) args=("${DENSE[@]}") ;; esac
    # shellcheck disable=SC2206
    extra=($flags)
    MPIRUN "$np" $TRAIN "${args[@]}" "${extra[@]}" > "$TMP/t.out" 2> "$TMP/t.err"
    trc=$?
    $TRAIN "${args[@]}" "${extra[@]}" --plan 1 --gpus "$np" > "$TMP/p.out" 2> "$TMP/p.err"
    prc=$?
    terr=$(grep '^error:' "$TMP/t.err" | head -1 | sed -E 's/^error: //; s/ \(a layout the trainer does not build[^)]*\)//; s/  \[[^]]*\]$//')
    perr=$(grep '^error:' "$TMP/p.err" | head -1 | sed -E 's/^error: --plan: the layout cannot be built: //; s/  \[[^]]*\]$//')
    if [ $trc -eq 0 ] && grep -q '^memory ledger' "$TMP/t.out"; then tv=buildable; else tv=refused; fi
    if [ $prc -eq 0 ] && grep -q '^plan: layout' "$TMP/p.out"; then
        if grep -q '^plan: layout.*\[theory' "$TMP/p.out"; then pv=theory; else pv=buildable; fi
    else
        pv=invalid
    fi
    ok=1
    case "$pv" in
        buildable) [ "$tv" = buildable ] || ok=0 ;;
        theory) [ "$tv" = refused ] && [ -n "$terr" ] || ok=0 ;;
        invalid) [ "$tv" = refused ] && [ -n "$perr" ] && [ "$terr" = "$perr" ] || ok=0 ;;
    esac
    [ "$pv" = "$want" ] || ok=0
    if [ $ok = 1 ]; then agree=$((agree + 1)); fi
    check $((1 - ok)) "np $np, $model $flags: trainer ${tv}${terr:+ ($terr)}, planner $pv (expected $want)${perr:+; planner: $perr}"
done
check $((agree == ${#CELLS[@]} ? 0 : 1)) "the trainer and the planner agree on all ${#CELLS[@]} layouts of the grid ($agree agree)"
