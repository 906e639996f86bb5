# dev/test/slurm_check.sh -- the Slurm tier (not part of `make test`; `make test-slurm`): starts a one-node Slurm
# cluster of its own (slurmctld + slurmd from Debian's slurmctld/slurmd packages, a generated slurm.conf in a
# temporary directory, free ports, auth/none, so no munge daemon), submits scripts/multi_node/slurm_mpi.sbatch with
# `sbatch --wait`, which starts the CPU trainer as 2 tasks through `srun --mpi=pmix` (PMI2 where PMIx is not
# offered) for 3 steps of d2, and checks that its losses, norms and final model file equal a plain `mpirun -np 2`
# run. The daemons are stopped at the end (by their process ids). Needs root (the daemons run as SlurmUser=root)
# and the packages: apt-get install slurmctld slurmd slurm-client. Without them it prints one "# SKIP" line.
# slurm_fs.sbatch is not run: its NCCL-id exchange through a shared directory exists only in the CUDA build.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/dp_lib.sh"
for p in slurmctld slurmd sbatch srun sinfo; do
    if ! command -v $p > /dev/null 2>&1; then
        echo "ok - Slurm tier # SKIP $p not installed (apt-get install slurmctld slurmd slurm-client)"; exit 0
    fi
done
if [ "$(id -u)" -ne 0 ]; then echo "ok - Slurm tier # SKIP needs root to start slurmctld and slurmd"; exit 0; fi
dp_require_mpi
S="$TMP/slurm"
mkdir -p "$S/state" "$S/spool"
read -r P1 P2 < <(python3 -c "
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(('127.0.0.1', 0))
print(*[x.getsockname()[1] for x in s])")
H=$(hostname -s)
cat > "$S/slurm.conf" <<CONF
ClusterName=llmctest
SlurmctldHost=$H(127.0.0.1)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$P1
SlurmdPort=$P2
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
NodeName=$H NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$S/slurm.conf"
slurmctld -D -c -f "$SLURM_CONF" > "$S/slurmctld.out" 2>&1 &
CTLD=$!
slurmd -D -f "$SLURM_CONF" > "$S/slurmd.out" 2>&1 &
SD=$!
trap 'kill $CTLD $SD 2> /dev/null; wait $CTLD $SD 2> /dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 1 40); do
    sinfo -h -o %t 2> /dev/null | grep -q idle && break
    sleep 0.5
done
sinfo -h -o %t 2> /dev/null | grep -q idle
check $? "one-node Slurm up (slurmctld port $P1, slurmd port $P2): $(sinfo -h -o '%P %D %t' 2> /dev/null)"
MPI=pmix
srun --mpi=list 2>&1 | grep -qw pmix || MPI=pmi2
export OMP_NUM_THREADS=1
ARGS="-e d2 -b 4 -t 32 -g 0 -u 2 -l 1e-3 -x 3 -v 3 -m 2 --cpu-matmul fp32"
TR=dev/data/tinyshakespeare/tiny_shakespeare_train.bin VA=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
BIN=./train_gpt_cpu OUT="$TMP/sbatch" TRAIN_DATA=$TR VAL_DATA=$VA MODEL_ARGS="$ARGS" SRUN_MPI=$MPI \
    timeout 300 sbatch --wait --partition=debug --nodes=1 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 \
    --time=10 --output="$TMP/job-%j.out" scripts/multi_node/slurm_mpi.sbatch > "$TMP/sbatch.txt" 2>&1
rc=$?
J="$(ls "$TMP"/job-*.out 2> /dev/null | head -n 1)"
test $rc -eq 0 && grep -q '^| processes / ZeRO *| 2 ' "$J" && test "$(grep -c '^step' "$J")" -eq 3
check $? "sbatch slurm_mpi.sbatch (srun --mpi=$MPI, 2 tasks): exit $rc, $(grep -c '^step' "$J" 2> /dev/null) steps; $(grep '^step' "$J" 2> /dev/null | tail -n 1 | cut -c1-40)"
# shellcheck disable=SC2086
MPIRUN 2 $TRAIN -i $TR -j $VA -o "$TMP/plain" $ARGS > "$TMP/plain.log" 2>&1
dp_same_training "$TMP/sbatch" "$TMP/plain" 3
check $? "the Slurm job's training equals plain mpirun -np 2 (losses, norms, lr, final model file)"
