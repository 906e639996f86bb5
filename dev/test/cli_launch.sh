# dev/test/cli_launch.sh -- scripts/multi_node/run_mpi.sh runs for real: a localhost hostfile with 2 slots, the CPU
# trainer on 2 processes for 3 steps of d2 through the recipe's variables; its losses, norms and final model file
# equal a plain `mpirun -np 2` run of the same flags bit for bit (same ranks, same arithmetic).
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
export OMP_NUM_THREADS=1
echo "localhost slots=2" > "$TMP/hostfile"
ARGS="-e d2 -b 4 -t 32 -g 0 -u 2 -l 1e-3 -x 3 -v 3 -m 2 --cpu-matmul fp32"
HOSTFILE="$TMP/hostfile" NP=2 PER_NODE=2 BIN=./train_gpt_cpu OUT="$TMP/recipe" \
    TRAIN_DATA=dev/data/tinyshakespeare/tiny_shakespeare_train.bin VAL_DATA=dev/data/tinyshakespeare/tiny_shakespeare_val.bin \
    MODEL_ARGS="$ARGS" MPIRUN_ARGS="--oversubscribe" bash scripts/multi_node/run_mpi.sh > "$TMP/recipe.log" 2>&1
rc=$?
test $rc -eq 0 && grep -q '^| processes / ZeRO *| 2 ' "$TMP/recipe.log" && test "$(grep -c '^step' "$TMP/recipe.log")" -eq 3
check $? "run_mpi.sh with a localhost hostfile: 2 processes, 3 steps (exit $rc; $(grep '^step' "$TMP/recipe.log" | tail -n 1 | cut -c1-50))"
# shellcheck disable=SC2086
MPIRUN 2 $TRAIN -i dev/data/tinyshakespeare/tiny_shakespeare_train.bin -j dev/data/tinyshakespeare/tiny_shakespeare_val.bin \
    -o "$TMP/plain" $ARGS > "$TMP/plain.log" 2>&1
dp_same_training "$TMP/recipe" "$TMP/plain" 3
check $? "the recipe's run equals plain mpirun -np 2 (losses, norms, lr, final model file)"
