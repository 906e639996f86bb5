# dev/test/cli_gpu_check_dry.sh -- scripts/gpu_check.sh on a machine without a GPU (or with GPU_CHECK_DRY=1) is a
# dry run: preflight rows, one "no GPU" row per stage, the summary table, exit 0, within seconds; its logs land
# under $OUT; and the cuDNN row says whether the cudnn-frontend headers were found.
source "$(dirname "$0")/lib_cli.sh"
start=$SECONDS
OUT="$TMP/logs" GPU_CHECK_DRY=1 bash scripts/gpu_check.sh > "$TMP/dry.txt" 2>&1
rc=$?
took=$((SECONDS - start))
test $rc -eq 0 -a $took -lt 60
check $? "gpu_check.sh dry run exits 0 in under a minute (exit $rc, $took s)"
n_stages=$(grep -c '^\[gpu_check\] .*| no GPU: not run (predicted' "$TMP/dry.txt")
test "$n_stages" -eq 9
check $? "every stage (9) reports 'no GPU' with its predicted seconds ($n_stages rows)"
grep -q '^\[gpu_check\] device .*| no GPU (GPU_CHECK_DRY=1): dry run' "$TMP/dry.txt" &&
    grep -q '^================ gpu_check summary' "$TMP/dry.txt"
check $? "the device row names the dry run and the summary table follows"
test -f "$TMP/logs/summary.txt" && test "$(grep -c 'no GPU' "$TMP/logs/summary.txt")" -eq 10
check $? "summary.txt under \$OUT holds the rows ($(grep -c '' "$TMP/logs/summary.txt" 2>/dev/null) lines)"
grep -qE '^cuDNN \+ cudnn-frontend +\| (found|not found)' "$TMP/logs/summary.txt"
check $? "the cuDNN row says whether cuDNN and the frontend headers were found: $(grep -m 1 '^cuDNN +' "$TMP/logs/summary.txt" | cut -c1-100)"
