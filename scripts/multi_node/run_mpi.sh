#!/usr/bin/env bash
# scripts/multi_node/run_mpi.sh -- GPT-2 124M on several nodes started by mpirun and a hostfile.
#
# What to edit:
#   HOSTFILE   nodes and GPUs per node (see hostfile.example); NP = total processes = sum of slots.
#   NIC        the network interface NCCL and MPI should use between nodes (`ip addr`, e.g. ib0 / enp*),
#              or leave empty to let them choose.
#   DATA_DIR / OUT   must be the same path on every node (shared filesystem): every rank reads its windows
#              from the same shards and rank 0 writes checkpoints that all ranks must see on resume.
# Requirements: the same build of ./train_gpt at the same path on all nodes, built with
# `make train_gpt CUDA_MPI=1` (MPI bootstrap: rank/world/local rank and the NCCL id over MPI).
# -d 524288 must divide by 64*1024*NP: NP=16 gives -d 1048576 or lower B (edit below).
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTFILE=${HOSTFILE:-scripts/multi_node/hostfile.example}
NP=${NP:-16}
NIC=${NIC:-}
DATA_DIR=${DATA_DIR:-dev/data/fineweb10B}
OUT=${OUT:-log_gpt2_124M_multinode}
B=${B:-32}
EXTRA=()
if [ -n "$NIC" ]; then
    EXTRA+=(-x NCCL_SOCKET_IFNAME="$NIC" --mca btl_tcp_if_include "$NIC" --mca oob_tcp_if_include "$NIC")
fi
mpirun -np "$NP" --hostfile "$HOSTFILE" --bind-to none --map-by ppr:8:node "${EXTRA[@]}" \
    -x PATH -x LD_LIBRARY_PATH -x NCCL_DEBUG=WARN \
    ./train_gpt \
    -i "$DATA_DIR/fineweb_train_*.bin" -j "$DATA_DIR/fineweb_val_*.bin" -o "$OUT" \
    -e d12 -b "$B" -t 1024 -d 524288 -z 1 -c 0.1 -l 0.0006 -q 0.0 -u 700 \
    -n 5000 -v 250 -s 5000 -x 18865 -y 1
