#!/usr/bin/env bash
# scripts/run_gpt2_124M.sh -- GPT-2 124M (d12) on one node with N GPUs, the llm.c recipe:
# 10B tokens of FineWeb-style shards, 524,288 tokens per step (~0.5M, GPT-3 small), 18,865 steps (one pass over
# ~9.9B tokens), lr 6e-4 with 700 warmup steps decaying to 0 (-q 0), weight decay 0.1, ZeRO-1.
#
# What to edit:
#   NGPU         GPUs on this node (default: all visible). -d 524288 must be a multiple of B*T*NGPU
#                (64*1024*NGPU): NGPU in {1,2,4,8} gives 8/4/2/1 accumulation steps.
#   DATA_DIR     where the token shards are: DATA_DIR/fineweb_train_*.bin and fineweb_val_*.bin in llm.c's shard
#                format, as dev/data/fineweb.py writes them (FineWeb sample-10BT, ~10B tokens, 20 GB of shards):
#                pip install -r requirements/fineweb.txt && python3 dev/data/fineweb.py   (-> dev/data/fineweb10B;
#                --edu for FineWeb-Edu, --local-parquet FILES for Parquet files you already have).
#   OUT          output directory (log.jsonl, checkpoints every 5000 steps here); -y 1 resumes from it.
#   B            micro-batch per GPU; lower it (and accumulation rises automatically) if memory is short.
# Launch: mpirun (OpenMPI) starts one process per GPU; build with `make train_gpt CUDA_MPI=1` for the MPI
# bootstrap, or keep the default build, which takes rank/world from mpirun's environment
# (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK) and exchanges the NCCL id through $LLMC_NCCL_ID_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
NGPU=${NGPU:-$(nvidia-smi -L 2> /dev/null | wc -l)}
DATA_DIR=${DATA_DIR:-dev/data/fineweb10B}
OUT=${OUT:-log_gpt2_124M}
B=${B:-64}
export LLMC_NCCL_ID_DIR=${LLMC_NCCL_ID_DIR:-$OUT/nccl_id} # only you may enter it (mode 0700, llmc/comm_bootstrap.h)
export LLMC_RUN_ID=${LLMC_RUN_ID:-gpt2_124M_$$}
# the per-run secret for --nccl-init tcp:HOST:PORT (llmc/comm_bootstrap.h), should you switch to it
export LLMC_BOOTSTRAP_SECRET=${LLMC_BOOTSTRAP_SECRET:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}
mkdir -p "$OUT" "$LLMC_NCCL_ID_DIR"
chmod go-w "$OUT"
chmod 700 "$LLMC_NCCL_ID_DIR"
make train_gpt
mpirun -np "$NGPU" --bind-to none -x LLMC_NCCL_ID_DIR -x LLMC_RUN_ID -x LLMC_BOOTSTRAP_SECRET ./train_gpt \
    -i "$DATA_DIR/fineweb_train_*.bin" \
    -j "$DATA_DIR/fineweb_val_*.bin" \
    -o "$OUT" \
    -e d12 \
    -b "$B" -t 1024 \
    -d 524288 \
    -r 0 \
    -z 1 \
    -c 0.1 \
    -l 0.0006 \
    -q 0.0 \
    -u 700 \
    -n 5000 \
    -v 250 -s 5000 \
    -x 18865 \
    -y 1
