/*
 * dev/emu/nccl/nccl.h -- stand-in for <nccl.h> on the CPU execution layer (tests only): NCCL's API subset that
 * llmc/comm_nccl.h uses, implemented over MPI in dev/emu/emu_nccl.h. Only the emulated-NCCL builds
 * (train_gpt_emu_mpi, train_gpt_emu_mpi_bf16 in dev/emu/emu.mk) put dev/emu/nccl on their include path; they are
 * built with -DUSE_MPI and run under mpirun. Collectives complete before they return (the streams of the
 * execution layer run in issue order), so this shows the logic of the NCCL code path, not its stream ordering.
 */
#ifndef LLMC_DEV_EMU_NCCL_NCCL_H
#define LLMC_DEV_EMU_NCCL_NCCL_H

#include "../emu_nccl.h"

#endif /* LLMC_DEV_EMU_NCCL_NCCL_H */
