#!/usr/bin/env bash
# scripts/multi_node/run_mpi.sh -- GPT-2 124M on several nodes started by mpirun and a hostfile.
#
# What to edit (each is a variable, so one file serves a cluster and a test on one machine):
#   HOSTFILE   nodes and processes per node (see hostfile.example); NP = total processes = sum of slots.
#   PER_NODE   processes (GPUs) per node (default 8; --map-by ppr:PER_NODE:node).
#   NIC        the network interface NCCL and MPI should use between nodes (`ip addr`, e.g. ib0 / enp*),
#              or leave empty to let them choose.
#   DATA_DIR / OUT   must be the same path on every node (shared filesystem): every rank reads its windows
#              from the same shards and rank 0 writes checkpoints that all ranks must see on resume.
#              TRAIN_DATA / VAL_DATA: the shard globs (default DATA_DIR/fineweb_{train,val}_*.bin, dev/data/fineweb.py).
#   BIN        the trainer (default ./train_gpt; ./train_gpt_cpu runs the same recipe on CPUs).
#   MODEL_ARGS the model and schedule (default: the GPT-2 124M recipe below); MPIRUN_ARGS: more mpirun options
#              (e.g. --oversubscribe, --allow-run-as-root).
# Requirements: the same build of BIN at the same path on all nodes; for ./train_gpt built with
# `make train_gpt CUDA_MPI=1` (MPI bootstrap: rank/world/local rank and the NCCL id over MPI).
# -d 524288 must divide by 64*1024*NP: NP=16 gives -d 1048576 or lower B (edit below).
# Tested on one machine: dev/test/cli_launch.sh runs it with a localhost hostfile and ./train_gpt_cpu on 2 processes.
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTFILE=${HOSTFILE:-scripts/multi_node/hostfile.example}
NP=${NP:-16}
PER_NODE=${PER_NODE:-8}
NIC=${NIC:-}
BIN=${BIN:-./train_gpt}
DATA_DIR=${DATA_DIR:-dev/data/fineweb10B}
TRAIN_DATA=${TRAIN_DATA:-$DATA_DIR/fineweb_train_*.bin}
VAL_DATA=${VAL_DATA:-$DATA_DIR/fineweb_val_*.bin}
OUT=${OUT:-log_gpt2_124M_multinode}
B=${B:-32}
MODEL_ARGS=${MODEL_ARGS:-"-e d12 -b $B -t 1024 -d 524288 -z 1 -c 0.1 -l 0.0006 -q 0.0 -u 700 -n 5000 -v 250 -s 5000 -x 18865"}
read -r -a model_args <<< "$MODEL_ARGS"
read -r -a mpirun_args <<< "${MPIRUN_ARGS:-}"
EXTRA=()
if [ -n "$NIC" ]; then
    EXTRA+=(-x NCCL_SOCKET_IFNAME="$NIC" --mca btl_tcp_if_include "$NIC" --mca oob_tcp_if_include "$NIC")
fi
mpirun -np "$NP" --hostfile "$HOSTFILE" --bind-to none --map-by "ppr:$PER_NODE:node" "${EXTRA[@]}" "${mpirun_args[@]}" \
    -x PATH -x LD_LIBRARY_PATH -x NCCL_DEBUG=WARN -x OMP_NUM_THREADS \
    "$BIN" -i "$TRAIN_DATA" -j "$VAL_DATA" -o "$OUT" "${model_args[@]}" -y 1
