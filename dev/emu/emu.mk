# dev/emu/emu.mk -- builds the CUDA-on-CPU execution layer tests (included by the top-level Makefile).
#
#   build/emu_test_runtime            self-tests of dev/emu/emu.h + emu_mma.h with toy kernels
#   build/emu_test_kernels_fp32       every llmc/cuda kernel module vs a CPU reference, floatX = float
#   build/emu_test_kernels_bf16       the same with floatX = bf16 (default GPU precision)
#   test_gpt_emu                      the whole model step (test_gpt.cu) on the emulator, FP32
#   test_gpt_emu_bf16                 the same in BF16
#   train_gpt_emu_mpi                 the trainer (GPU build, FP32) on the emulator with NCCL emulated over MPI
#                                     (dev/emu/nccl/nccl.h): the NCCL data-parallel path under mpirun
#   train_gpt_emu_mpi_bf16            the same in BF16
#   build/mpi_comm_nccl_emu           dev/test/mpi_comm.c (llmc/comm.h's collective tests) on the NCCL transport
#
# All are built with g++ -std=c++17 -O2 -DLLMC_BACKEND_CUDA (llmc/backend.h then compiles the CUDA backend); the
# BF16 ones with -DEMU_FAST_MATH, as nvcc builds BF16 with --use_fast_math (plain tanhf/expf/logf in kernels get
# the intrinsics' error; dev/emu/emu.h, "math intrinsics");
# no GPU, no CUDA libraries, only the toolkit's headers for cuda_bf16.h / cuda_fp16.h / library_types.h. The
# library never names the emulator: the include path does. -Idev/emu/include comes before the toolkit's include
# directory, so <cuda_runtime.h> and <cublasLt.h> are the stand-ins in dev/emu/include (the execution layer and a
# host cuBLASLt). Builds without collectives over NCCL pass -DLLMC_NO_NCCL; the emulated-NCCL builds get
# <nccl.h> from -Idev/emu/nccl (NCCL's API over MPI), also before the toolkit's directory (which may hold the
# real nccl.h).

EMU_CXX      ?= $(CXX)
EMU_CUDA_INC ?= $(firstword $(wildcard $(CUDA_HOME)/include/cuda_bf16.h) /usr/local/cuda/include/cuda_bf16.h)
EMU_COMMON   := -std=c++17 -O2 -g -DLLMC_BACKEND_CUDA -Wall -Wextra -Wno-unused-function -Wno-class-memaccess \
                -Wno-unknown-pragmas $(OPENSSL_CFLAGS)
EMU_CXXFLAGS      := $(EMU_COMMON) -DLLMC_NO_NCCL -I. -Idev/emu/include -I$(dir $(EMU_CUDA_INC))
EMU_NCCL_CXXFLAGS := $(EMU_COMMON) -I. -Idev/emu/include -Idev/emu/nccl -I$(dir $(EMU_CUDA_INC))
EMU_LIBS     := -lm -lpthread
EMU_DEPS     := $(wildcard dev/emu/*.h dev/emu/include/*.h dev/emu/nccl/*.h) dev/test/testing.h \
                $(wildcard llmc/*.h llmc/cuda/*.cuh)
# the CPU reference is the CPU backend, compiled as C in its own translation unit
EMU_REF_CFLAGS := -std=c11 -O2 -g -fopenmp -D_GNU_SOURCE -I. -Wall -Wextra -Wno-unknown-pragmas
EMU_REF_LIBS   := -fopenmp -lopenblas -lm

EMU_TEST_BINS := $(BUILD)/emu_test_runtime
ifneq ($(wildcard dev/emu/test_kernels_ops.cpp),)
EMU_TEST_BINS += $(BUILD)/emu_test_kernels_fp32 $(BUILD)/emu_test_kernels_bf16
endif

$(BUILD)/emu_test_runtime: dev/emu/test_emu_runtime.cpp $(EMU_DEPS)
	@mkdir -p $(BUILD)
	$(EMU_CXX) $(EMU_CXXFLAGS) $< $(EMU_LIBS) -o $@

$(BUILD)/emu_cpu_reference.o: dev/emu/cpu_reference.c dev/emu/cpu_reference.h $(wildcard llmc/*.h llmc/cpu/*.h)
	@mkdir -p $(BUILD)
	$(CC) $(EMU_REF_CFLAGS) -c $< -o $@

$(BUILD)/emu_test_kernels_fp32: dev/emu/test_kernels_ops.cpp $(BUILD)/emu_cpu_reference.o $(EMU_DEPS) dev/emu/cpu_reference.h
	@mkdir -p $(BUILD)
	$(EMU_CXX) $(EMU_CXXFLAGS) -DENABLE_FP32 $< $(BUILD)/emu_cpu_reference.o $(EMU_REF_LIBS) $(EMU_LIBS) -o $@

$(BUILD)/emu_test_kernels_bf16: dev/emu/test_kernels_ops.cpp $(BUILD)/emu_cpu_reference.o $(EMU_DEPS) dev/emu/cpu_reference.h
	@mkdir -p $(BUILD)
	$(EMU_CXX) $(EMU_CXXFLAGS) -DENABLE_BF16 -DEMU_FAST_MATH $< $(BUILD)/emu_cpu_reference.o $(EMU_REF_LIBS) $(EMU_LIBS) -o $@

# the whole model step on the emulator (test_gpt.cu is the lead's; tolerated while it does not exist)
test_gpt_emu: $(wildcard test_gpt.cu train_gpt.cu) $(EMU_DEPS)
	@test -f test_gpt.cu || { echo "test_gpt_emu: test_gpt.cu does not exist yet" >&2; exit 1; }
	$(EMU_CXX) $(EMU_CXXFLAGS) -DENABLE_FP32 -D_GNU_SOURCE -x c++ test_gpt.cu -x none $(EMU_LIBS) -o $@

# the same in BF16: exercises the tensor-core attention path and stochastic rounding against the fixture
# with test_gpt.cu's BF16 tolerances
test_gpt_emu_bf16: $(wildcard test_gpt.cu train_gpt.cu) $(EMU_DEPS)
	$(EMU_CXX) $(EMU_CXXFLAGS) -DENABLE_BF16 -DEMU_FAST_MATH -D_GNU_SOURCE -x c++ test_gpt.cu -x none $(EMU_LIBS) -o $@

# the GPU build's data-parallel code path (llmc/comm_nccl.h, bucket hooks, ZeRO-2 fences) under mpirun,
# run by dev/test/cli_dp_nccl_emu.sh; only where MPI exists
train_gpt_emu_mpi: train_gpt.cu $(EMU_DEPS)
	$(EMU_CXX) $(EMU_NCCL_CXXFLAGS) -DENABLE_FP32 -D_GNU_SOURCE $(MPI_CFLAGS) -x c++ train_gpt.cu -x none \
	    $(EMU_LIBS) $(MPI_LIBS) -o $@

# the same in BF16 (bf16 gradients through the emulated NCCL, master weights, stochastic rounding per shard)
train_gpt_emu_mpi_bf16: train_gpt.cu $(EMU_DEPS)
	$(EMU_CXX) $(EMU_NCCL_CXXFLAGS) -DENABLE_BF16 -DEMU_FAST_MATH -D_GNU_SOURCE $(MPI_CFLAGS) -x c++ train_gpt.cu -x none \
	    $(EMU_LIBS) $(MPI_LIBS) -o $@

# llmc/comm.h's collective tests (dev/test/mpi_comm.c) on the NCCL transport: the same file as build/mpi_comm,
# compiled as C++ with the CUDA backend on the emulator and NCCL emulated over MPI; run under mpirun
$(BUILD)/mpi_comm_nccl_emu: dev/test/mpi_comm.c dev/test/mpi_check.h $(EMU_DEPS)
	@mkdir -p $(BUILD)
	$(EMU_CXX) $(EMU_NCCL_CXXFLAGS) -DENABLE_FP32 -D_GNU_SOURCE $(MPI_CFLAGS) -x c++ $< -x none $(EMU_LIBS) $(MPI_LIBS) -o $@

unit-tests: $(EMU_TEST_BINS)

.PHONY: emu-tests
emu-tests: $(EMU_TEST_BINS)
	@for t in $(EMU_TEST_BINS); do echo "== $$t"; ./$$t || exit 1; done
