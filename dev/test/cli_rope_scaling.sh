# dev/test/cli_rope_scaling.sh -- Llama-3 rope frequency scaling through the trainer (-e word
# rope_scaling=F/LOW/HIGH/ORIGT; llmc/README.md "The model's architecture as data"), about 5 s of CPU: a tiny rotary
# model (L2 C64 NH2, head size 32, theta 10000, T 64) trained 2 steps on random tokens with rope_scaling=4/1/4/32
# (pair 0, wavelength 6.3 < 32/4, kept; pairs 1-2 blended; 3..15 divided by 4) writes a version 11 file with
# header[21..24] = 4 1 4 32, read back (-e FILE) with the same architecture line; a 4-step run's checkpoint at step
# 2 resumed repeats steps 3-4 and the final model file bit for bit, and the unscaled model cannot resume it; the same model without the word writes version 9 with
# header[21..24] zero; the scaled first loss differs from the unscaled one (the table is used), while factor 1
# (every band: f / 1 or (1 - s) f + s f = f, up to one double rounding of the frequency, far below the table's fp32
# rounding) gives the unscaled losses; damaged scaling fields of a version 11 file and learned positions are refused
# with one line. The descriptor grammar's errors are build/test_planner's; transformers' numbers, dev/test/cli_hf.sh
# and dev/test/hf_check.sh.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/dp_lib.sh"
dp_random_shard "$TMP/tok.bin" 512
SH="L2:C64:NH2:T64:V512:norm=rms:pos=rope:mlp=swiglu:bias=0"
run() { # run NAME WORDS STEPS [more flags]: trains into $TMP/NAME (checkpoint every 2 steps), log in $TMP/NAME.txt
    local name=$1 words=$2 steps=$3; shift 3
    $TRAIN -e "$SH$words" -i "$TMP/tok.bin" -j '' -b 2 -t 64 -x "$steps" -g 0 -u 0 -v 0 -n 2 -o "$TMP/$name" "$@" \
        > "$TMP/$name.txt" 2>&1
}
header() { python3 -c "
import sys, numpy as np; h = np.fromfile(sys.argv[1], dtype='<i4', count=256)
print(h[1], *h[21:24].view('<f4'), h[24], int(h[25:].any()))" "$1"; }
steps() { grep -E '^step' "$1" | sed -E 's/[|] [0-9.]+ ms.*//'; }

run plain "" 2 && run scaled ":rope_scaling=4/1/4/32" 2 && run one ":rope_scaling=1/1/4/32" 2
check $? "the model trains 2 steps without scaling, with rope_scaling=4/1/4/32 and with rope_scaling=1/1/4/32"
h=$(header "$TMP/scaled/model_00000002.bin")
test "$h" = "11 4.0 1.0 4.0 32 0"
check $? "rope_scaling=4/1/4/32: model file version 11, header[21..24] = factor 4, low 1, high 4 (fp32 bits), original 32, nothing after: $h"
h=$(header "$TMP/plain/model_00000002.bin")
test "$h" = "9 0.0 0.0 0.0 0 0"
check $? "without the word: version 9, header[21..24] zero (the family's file as before): $h"
grep -q "rotary positions (theta 10000, Llama-3 scaling rope_scaling=4/1/4/32)" "$TMP/scaled.txt" &&
    ! grep -q "rope_scaling" "$TMP/plain.txt"
check $? "the architecture line names rope_scaling=4/1/4/32 for the scaled model only: $(grep -o 'rotary positions ([^)]*)' "$TMP/scaled.txt")"
l_plain=$(steps "$TMP/plain.txt" | head -n 1 | grep -o 'loss [0-9.]*') l_scaled=$(steps "$TMP/scaled.txt" | head -n 1 | grep -o 'loss [0-9.]*')
test -n "$l_plain" && test "$l_plain" != "$l_scaled"
check $? "the scaled model's first loss differs from the unscaled one's (same weights; the rotary table is scaled): $l_scaled vs $l_plain"
test "$(steps "$TMP/one.txt")" = "$(steps "$TMP/plain.txt")"
check $? "factor 1 (a neutral scaling in every band) gives the unscaled run's step lines"
# the file read back: the same architecture, and the trainer continues from it
$TRAIN -e "$TMP/scaled/model_00000002.bin" -i "$TMP/tok.bin" -j '' -b 2 -t 64 -x 1 -g 0 -v 0 > "$TMP/load.txt" 2>&1 &&
    test "$(grep '^| architecture' "$TMP/load.txt")" = "$(grep '^| architecture' "$TMP/scaled.txt")"
check $? "-e model_00000002.bin (version 11) loads with the scaled architecture line"
# resume: a 4-step run's step-2 checkpoint resumed (-y 1) repeats steps 3-4; the unscaled model cannot resume it
run full ":rope_scaling=4/1/4/32" 4 && mkdir -p "$TMP/part" && cp "$TMP/full/"*00000002* "$TMP/part/" &&
    run part ":rope_scaling=4/1/4/32" 4 -y 1 && test "$(steps "$TMP/part.txt")" = "$(steps "$TMP/full.txt" | tail -n 2)" &&
    cmp "$TMP/full/model_00000004.bin" "$TMP/part/model_00000004.bin"
check $? "the scaled run resumed from its step-2 checkpoint repeats steps 3-4 and the model file of an uninterrupted run"
rm -rf "$TMP/part" && mkdir -p "$TMP/part" && cp "$TMP/full/"*00000002* "$TMP/part/" && run part "" 4 -y 1
grep -q "^error: cannot resume.*rope scaling factor 4) differs.*rope scaling factor 0)" "$TMP/part.txt"
check $? "resuming the scaled checkpoint as the unscaled model is refused: $(grep -m1 '^error' "$TMP/part.txt" | cut -c1-120)"
# damaged scaling fields of a version 11 file: one line naming the file and the field
damage() { # damage NAME INDEX VALUE(python expression of an int32)
    python3 -c "
import sys, numpy as np; b = bytearray(open(sys.argv[1], 'rb').read()); h = np.frombuffer(b, dtype='<i4', count=256).copy()
h[int(sys.argv[3])] = eval(sys.argv[4]); b[:1024] = h.tobytes(); open(sys.argv[2], 'wb').write(b)" \
        "$TMP/full/model_00000004.bin" "$TMP/$1.bin" "$2" "$3"
}
f32() { echo "int(np.array([$1], dtype='<f4').view('<i4')[0])"; }
damage bad_factor 21 "$(f32 0)"; damage bad_high 23 "$(f32 0.5)"; damage bad_orig 24 0; damage bad_low 22 "$(f32 -1)"
damage bad_pos 13 0
for c in "bad_factor:factor" "bad_high:high_freq_factor" "bad_orig:original_max_pos" "bad_low:low_freq_factor" \
         "bad_pos:learned positions"; do
    expect_error "${c#*:}" "a version 11 file with ${c#*:} damaged is refused naming the file and the field" -- \
        $TRAIN -e "$TMP/${c%%:*}.bin" -i "$TMP/tok.bin" -j '' -b 2 -t 64 -x 1 -v 0
    grep -q "${c%%:*}.bin" "$TMP/err.txt" || echo "not ok - the error of ${c%%:*}.bin names the file"
done
expect_error "learned positions" "rope_scaling with pos=learned is refused" -- \
    $TRAIN -e "L2:C64:NH2:T64:V512:rope_scaling=4/1/4/32" -i "$TMP/tok.bin" -j '' -b 2 -t 64 -x 1
expect_error "high_freq_factor" "rope_scaling=4/4/1/32 is refused naming high_freq_factor" -- \
    $TRAIN -e "$SH:rope_scaling=4/4/1/32" -i "$TMP/tok.bin" -j '' -b 2 -t 64 -x 1
