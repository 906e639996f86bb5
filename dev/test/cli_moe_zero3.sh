# dev/test/cli_moe_zero3.sh -- mixture of experts with ZeRO-3 (llmc/README.md, "Mixture of experts" and "ZeRO and
# the gradient store"; with --ep llmc/zero_experts.h): each block's slices of the expert tensors (a MoE block) or of
# the dense-MLP tensors (another block) are gathered with its layer (llmc/gpt2.h gpt2_param_unit) into two slots of the working buffer; the global
# unit holds only wte, wpe, lnf. Model d8 (L8 C128, Vp 50304, maxT 256) with 4 experts top-2 (hidden 4C = 512) in
# every second block, B=2 T=16, 10 steps, fp32 CPU build under mpirun.
#   - dp 3: -z 3 is bit-identical to -z 2 (the same reduce-scatter; only where the parameters live differs), with -r 3
#     too (the recompute reads the gathered slots); a unit that gathered another block's experts, or a slot read for
#     the wrong layer, changes the losses;
#   - the working set is 2 x (a layer's 66,560 per-layer values + a MoE block's 527,360 expert values + a dense
#     block's 131,712 MLP values) + wte/wpe/lnf 6,471,936 (the formula in this script), not the 2.1M of every expert;
#     the memory ledger equals the allocation;
#   - tp 2 x pp 2 x dp 2 interleaved at -z 3 against one process within T(10) = 14 x 16 x 2^-24 (dev/test/dp_lib.sh:
#     tp and pp sum the fp32 partial results in another order);
#   - with expert parallelism (ep 2, expert-dp 2): -z 3 bit-identical to -z 2 (both groups sharded, each gathered
#     per layer over its own group) and the ledger equal; pp 2 x dp 4 interleaved with ep 2 at -z 3 against one
#     process; resume bit for bit (model file and every state file), and re-sharded onto one process;
#   - ep 2 at -z 3 with --offload-params cpu: bit-identical to the device shards; the offload ledger (both groups'
#     host shards) equals the allocation and every step's PCIe bytes equal the theory summed over the groups.
source "$(dirname "$0")/dp_lib.sh"
dp_require_mpi
MOE=(-e d8 -b 2 -t 16 -j '' -g 0 -u 2 -l 1e-3 -v 0 -x 10 --moe-experts 4 --moe-top-k 2 --moe-every 2
     --moe-z-coef 0.001 --moe-capacity-factor 1.25)
same() { # A B WHAT: bit-identical training
    local out
    out=$(dp_same_training "$TMP/$1" "$TMP/$2" 10)
    check $? "$3: $out"
}

dp_run z2 3 "${MOE[@]}" -d 192 -z 2
dp_run z3 3 "${MOE[@]}" -d 192 -z 3
same z2 z3 "dp 3: -z 3 vs -z 2"
dp_run z3r3 3 "${MOE[@]}" -d 192 -z 3 -r 3
same z2 z3r3 "dp 3: -z 3 with -r 3 (segments recomputed from the gathered slots) vs -z 2"
python3 - "$TMP/z3.log" <<'PY'
import re, sys
C, H, E, V, T = 128, 512, 4, 50304, 256
layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C           # ln1, qkv, attproj, ln2 (the MLP is stacked)
moe = E * C + E * H * C + E * H + E * C * H + E * C                  # router, efcw, efcb, efcprojw, efcprojb
dense = 4 * C * C + 4 * C + C * 4 * C + C                             # fcw, fcb, fcprojw, fcprojb
glob = V * C + T * C + 2 * C                                          # wte, wpe, lnf
m = re.search(r"working set \(2 layer slots of (\d+) \+ (\d+) per slot of a block's expert or dense-MLP slices \+ "
              r"wte/wpe/lnf (\d+), gathered per layer\) = (\d+) values", open(sys.argv[1]).read())
got = tuple(map(int, m.groups())) if m else None
shard = (glob + 8 * layer + 4 * moe + 4 * dense + 2) // 3 + 1     # ceil(P / 3)
want = (layer, moe + dense, glob)
print("# working set (layer, stacked per slot, globals, total):", got, "formula", want, "every expert", 4 * moe)
sys.exit(0 if got and got[:3] == want and got[3] - 2 * (layer + moe + dense) - glob in (shard - 1, shard) else 1)
PY
check $? "-z 3: the working set holds two slots of a layer with one block's expert or dense-MLP slices, not every expert"
grep -q "^memory ledger .* -> equal$" "$TMP/z3.log"
check $? "-z 3: the memory ledger equals the allocation"
dp_run one 1 "${MOE[@]}" -d 128
dp_run allz3 8 "${MOE[@]}" -d 128 --tp 2 --pp 2 --pp-schedule interleaved --pp-virtual 2 -z 3
dp_against one allz3
test "$(grep -c '^memory ledger (llmc/ledger.h, bytes, pipeline stage [01]).* -> equal$' "$TMP/allz3.log")" -eq 2
check $? "tp 2 x pp 2 x dp 2 at -z 3: the memory ledger equals the allocation on both stages"

# expert parallelism at -z 3 (4 processes: ep 2, expert-dp 2): both groups sharded and gathered per layer, each over
# its group; bit-identical to ep 2 at -z 2; pp 2 x dp 4 interleaved with ep 2 at -z 3 against one process; resume
# bit for bit, and re-sharded onto one process
dp_run epz2 4 "${MOE[@]}" -d 256 --ep 2 -z 2
dp_run epz3 4 "${MOE[@]}" -d 256 --ep 2 -z 3
same epz2 epz3 "ep 2 x expert-dp 2: -z 3 (both groups' parameters sharded) vs -z 2"
grep -q "^memory ledger .* -> equal$" "$TMP/epz3.log"
check $? "ep 2 at -z 3: the memory ledger equals the allocation"
dp_run one256 1 "${MOE[@]}" -d 256
dp_run ppepz3 8 "${MOE[@]}" -d 256 --pp 2 --pp-schedule interleaved --pp-virtual 2 --ep 2 -z 3
dp_against one256 ppepz3
MPIRUN 4 $TRAIN "${MOE[@]}" -d 256 --ep 2 -z 3 -o "$TMP/eck" --exit-after-steps 5 > "$TMP/eck1.log" 2>&1 &&
    cp -r "$TMP/eck" "$TMP/eck_one" && MPIRUN 4 $TRAIN "${MOE[@]}" -d 256 --ep 2 -z 3 -o "$TMP/eck" -y 1 > "$TMP/eck2.log" 2>&1
check $? "ep 2 at -z 3: checkpoint at step 5, resumed"
out=$(dp_same_checkpoint "$TMP/epz3" "$TMP/eck" 10 4)
check $? "ep 2 at -z 3 resume on the same layout: $out"
$TRAIN "${MOE[@]}" -d 256 -o "$TMP/eck_one" -y 1 > "$TMP/eck_one.log" 2>&1 &&
    grep -q "ZeRO stage 3; re-sharding the optimizer state for 1 processes with ZeRO stage 0 (expert-parallel size 2 -> 1)" "$TMP/eck_one.log"
check $? "the ep 2 -z 3 checkpoint resumes on one process (re-sharded)"
dp_against one256 eck_one
dp_run epz3off 4 "${MOE[@]}" -d 256 --ep 2 -z 3 --offload-params cpu
same epz3 epz3off "ep 2 at -z 3 with --offload-params cpu (both groups' shards in host memory) vs on the device"
grep -q "^offload ledger .* -> equal;" "$TMP/epz3off.log" &&
    test "$(grep -c 'offload PCIe \([0-9.]*\)+\([0-9.]*\) MB (theory \1+\2)' "$TMP/epz3off.log")" -eq 10
check $? "ep 2 at -z 3 with --offload-params cpu: the offload ledger equals the allocation, every step's PCIe bytes the theory (both groups)"
