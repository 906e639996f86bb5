# Makefile -- builds the trainer and its tests for the CPU and CUDA backends.
#
#   make                 every trainer this machine can build: train_gpt_cpu always; train_gpt and test_gpt where nvcc
#                        and cuBLAS are found (one-GPU build when NCCL is not; without OpenSSL no --nccl-init tcp:);
#                        one "skip:" line per target or feature left out
#   make train_gpt_cpu   CPU trainer (C11 + OpenMP + OpenBLAS)
#   make test_gpt_cpu    CPU model test against the committed fixture
#   make test            the whole CPU suite (what CI runs); ends with "N passed, M failed"
#   make test-quick      host units, the CPU model test and the CLI tests (under 5 minutes on 2 cores; no nvcc, no emulator)
#   make test-sanitize   ASan + UBSan build (build/asan/) of the CPU trainer and unit tests over the input-handling
#                        tests, and a libFuzzer run of every file reader (dev/fuzz/; 3-7 minutes; CI runs it first)
#   make fuzz            the fuzzing of test-sanitize with a random seed for 5 minutes per file reader (exploration)
#   make train_gpt       CUDA trainer (nvcc, cuBLASLt, NCCL; cuDNN with USE_CUDNN=1); GPU_ARCH="80 90" by default
#   make print-cuda-libs where cuBLAS, cuDNN and NCCL were found (llmc/cuda/libs.mk)
#   make test_gpt        CUDA model test (train_gpt_cudnn, test_gpt_cudnn: the same with cuDNN attention)
#   make test-gpu        CUDA tests on a real GPU (BF16 and FP32)
#   make test-hf         export/import against transformers (optional tier: PyTorch + transformers; PYTHON=...)
#   make test-eval       -h 1's per-example scores against transformers (optional tier: PyTorch + transformers; PYTHON=...)
#   make test-slurm      slurm_mpi.sbatch on a one-node Slurm the test starts (optional tier: root, Debian's Slurm)
#   make fixture         regenerate dev/test fixtures with PyTorch (train_gpt.py)
#   make clean
#
# Variables: CC, NVCC, GPU_ARCH (e.g. GPU_ARCH=90), PRECISION (BF16|FP32|FP16 for CUDA builds), USE_CUDNN=1,
#            USE_NCCL=0 (one-GPU build without NCCL), USE_OPENSSL=0 (no TCP bootstrap; default: where found),
#            CUBLAS_HOME / CUDNN_HOME / NCCL_HOME (llmc/cuda/libs.mk),
#            WERROR=0 (warnings stay warnings; default 1: every warning is an error, as CI builds),
#            TEST_JOBS (make test builds its programs, and runs its tests, this many at a time, default 2; make -jN
#            test builds N at a time).

CC        ?= gcc
CXX       ?= g++
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
MPICC     ?= mpicc
PYTHON    ?= python3

BUILD := build

.DEFAULT_GOAL := all

# WERROR=0 builds with the same warnings but without turning them into errors: for a host compiler newer than the
# one CI uses (gcc 12), whose new warnings (e.g. gcc 13's -Wdangling-reference) would otherwise stop the build.
# CI and the default keep WERROR=1. Changing it does not rebuild what exists: use make -B.
WERROR ?= 1
ifeq ($(WERROR),0)
WERROR_C    :=
WERROR_NVCC :=
else
WERROR_C    := -Werror
WERROR_NVCC := -Werror all-warnings -Xcompiler -Werror
endif
export WERROR

# OpenSSL is optional: its libcrypto gives the TCP bootstrap its HMAC (llmc/comm_bootstrap.h, --nccl-init tcp:).
# Found when $(CC) preprocesses <openssl/hmac.h> (with the include path of the environment, e.g. CPATH). Without it
# every build gets -DLLMC_NO_OPENSSL and no -lcrypto, `make` prints one "skip:" line, and --nccl-init tcp: refuses
# with one line; fs:DIR and MPI work as ever. USE_OPENSSL=0 forces that build, USE_OPENSSL=1 skips the test.
ifndef USE_OPENSSL
USE_OPENSSL := $(shell printf '\043include <openssl/hmac.h>\n' | $(CC) -E -x c - > /dev/null 2>&1 && echo 1 || echo 0)
endif
export USE_OPENSSL
OPENSSL_CFLAGS := $(if $(filter 0,$(USE_OPENSSL)),-DLLMC_NO_OPENSSL)
OPENSSL_LIBS   := $(if $(filter 0,$(USE_OPENSSL)),,-lcrypto)

# ---------------------------------------------------------------- CPU backend
CPU_WARN   := -Wall -Wextra $(WERROR_C) -Wno-unknown-pragmas
CPU_CFLAGS := -I. -std=c11 -O3 -march=native -fopenmp -D_GNU_SOURCE $(CPU_WARN) $(OPENSSL_CFLAGS)
CPU_LIBS   := -lopenblas -lm
CPU_DEPS   := $(wildcard llmc/*.h llmc/cpu/*.h)

# Multi-process CPU build: where MPI exists (OpenMPI's mpicc), train_gpt_cpu is built with -DUSE_MPI and the
# flags `mpicc --showme` reports, so it runs under `mpirun -np N` (and still alone, as an MPI singleton).
# USE_MPI=0 forces the single-process build.
USE_MPI ?= $(if $(shell command -v $(MPICC) 2>/dev/null),1,0)
ifeq ($(USE_MPI),1)
MPI_CFLAGS := -DUSE_MPI $(filter -I%,$(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) --showme 2>/dev/null))
MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null)
endif

train_gpt_cpu: train_gpt.cu $(CPU_DEPS)
	$(CC) $(CPU_CFLAGS) $(MPI_CFLAGS) -x c train_gpt.cu -x none $(CPU_LIBS) $(MPI_LIBS) -o $@

# collective tests of llmc/comm.h (and its transports llmc/comm_*.h) run under mpirun by the dev/test/cli_dp_* tests
$(BUILD)/mpi_comm: dev/test/mpi_comm.c dev/test/mpi_check.h $(wildcard llmc/comm*.h) llmc/utils.h
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $(MPI_CFLAGS) $< $(MPI_LIBS) -lm -o $@

# the text of token shards through the trainer's readers (dataloader.h + tokenizer.h), for dev/test/cli_tokens32.sh
$(BUILD)/shard_decode: dev/test/shard_decode.c llmc/dataloader.h llmc/tokenizer.h llmc/utils.h
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $< -lm -o $@

# process-grid tests run under mpirun by dev/test/cli_grid.sh
# the pipeline bubble through the real executor with sleeping stages, run under mpirun by dev/test/cli_pp_bubble.sh
$(BUILD)/mpi_pipe_bubble: dev/test/mpi_pipe_bubble.c dev/test/mpi_check.h $(wildcard llmc/comm*.h) llmc/pipeline.h llmc/utils.h
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $(MPI_CFLAGS) $< $(MPI_LIBS) -lm -o $@

$(BUILD)/mpi_grid: dev/test/mpi_grid.c dev/test/grid_expect.h dev/test/mpi_check.h $(CPU_DEPS)
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $(MPI_CFLAGS) $< $(MPI_LIBS) -lm -o $@
$(BUILD)/test_process_grid: dev/test/grid_expect.h
# the step statistics (llmc/step_stats.h) over real grids and ZeRO groups, run under mpirun -np 8 by dev/test/cli_step_stats.sh
$(BUILD)/mpi_step_stats: dev/test/mpi_step_stats.c dev/test/mpi_check.h $(CPU_DEPS)
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $(MPI_CFLAGS) $< $(CPU_LIBS) $(MPI_LIBS) -o $@

# test_gpt.cu as an MPI program: under mpirun it checks the fixture model split by tensor parallelism (dev/test/cli_tp.sh)
$(BUILD)/mpi_test_gpt_tp: test_gpt.cu train_gpt.cu $(CPU_DEPS)
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $(MPI_CFLAGS) -Wno-unused-function -x c test_gpt.cu -x none $(CPU_LIBS) $(MPI_LIBS) -o $@

# the speed baseline: matmul and attention as plain OpenMP loops in the style of llm.c's train_gpt2.c
train_gpt_cpu_naive: train_gpt.cu $(CPU_DEPS)
	$(CC) $(CPU_CFLAGS) -DLLMC_CPU_NAIVE -x c train_gpt.cu -x none $(CPU_LIBS) -o $@

# per-op CPU benchmark, optimized vs plain loops: ./build/cpu_ops_bench ./build/cpu_ops_bench_naive
cpu-bench: $(BUILD)/cpu_ops_bench $(BUILD)/cpu_ops_bench_naive
	./$(BUILD)/cpu_ops_bench ./$(BUILD)/cpu_ops_bench_naive

$(BUILD)/cpu_ops_bench: dev/bench/cpu_ops_bench.c $(CPU_DEPS)
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $< $(CPU_LIBS) -o $@

$(BUILD)/cpu_ops_bench_naive: dev/bench/cpu_ops_bench.c $(CPU_DEPS)
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) -DLLMC_CPU_NAIVE $< $(CPU_LIBS) -o $@

# activation checkpointing's cost by k (forward + backward CPU time, bytes): dev/bench/recompute.sh runs it
$(BUILD)/recompute_bench: dev/bench/recompute_bench.c $(CPU_DEPS)
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $< $(CPU_LIBS) -o $@

test_gpt_cpu: test_gpt.cu train_gpt.cu $(CPU_DEPS)
	$(CC) $(CPU_CFLAGS) -Wno-unused-function -x c test_gpt.cu -x none $(CPU_LIBS) -o $@

# ---------------------------------------------------------------- CUDA backend
GPU_ARCH   ?= 80 90
PRECISION  ?= BF16
NVCC_GENCODE := $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
# -diag-suppress 177: nvcc warns about unreferenced static inline functions, which every header-only
# module has by design (gcc and clang do not warn for static inline); all other warnings are errors.
# --use_fast_math (plain tanhf/expf/logf and x/y become the approximate intrinsics __tanhf, __expf, __logf, __fdividef:
# CUDA C++ Programming Guide, "Intrinsic Functions") for BF16 and FP16 builds only, whose 8- and 11-bit storage
# rounding dwarfs those errors; FP32 builds use precise math (__tanhf's ~2^-11 relative error alone would exceed
# test_gpt_fp32's 1e-5 tolerances). Explicit intrinsic calls in the kernels are approximate in every build.
FAST_MATH  = $(if $(filter FP32,$(PRECISION)),,--use_fast_math)
# --threads: nvcc compiles the GPU_ARCH targets in parallel (0 = one thread per core; ignored for one architecture)
NVCC_THREADS ?= 0
# -Xcompiler -fopenmp (+ -lgomp): the host code's OpenMP loops (--offload-optimizer's AdamW on the CPU, llmc/offload.h)
NVCC_FLAGS := -I. -diag-suppress 177 -O3 -std=c++17 $(FAST_MATH) -lineinfo $(NVCC_GENCODE) --threads $(NVCC_THREADS) -DENABLE_$(PRECISION) \
              $(WERROR_NVCC) -Xcompiler -Wall,-Wextra,-Wno-unknown-pragmas,-fopenmp $(OPENSSL_CFLAGS)
# GELU_BWD_EPILOGUE=0: the MLP backward applies GELU's derivative in the fc bias-gradient pass instead of cuBLASLt's
# DGELU epilogue on the fcproj input-gradient GEMM (llmc/gpt2.h, LLMC_GELU_BWD_EPILOGUE); default 1 (test_gpt_fp32: always
# 0, see its rule). make -B to rebuild.
GELU_BWD_EPILOGUE ?= 1
NVCC_FLAGS += -DLLMC_GELU_BWD_EPILOGUE=$(GELU_BWD_EPILOGUE)
# ATTN_BWD_FA2=1: the attention backward as one FlashAttention-2-style kernel (5 matmuls, deterministic ordered dQ sum,
# 4·B·T·C bytes more fp32 scratch; llmc/cuda/attention.cuh); default 0: the three-pass backward. make -B to rebuild.
ATTN_BWD_FA2 ?= 0
NVCC_FLAGS += -DATTN_BWD_FA2=$(ATTN_BWD_FA2)
# cuBLAS, NCCL and (USE_CUDNN=1) cuDNN: found by llmc/cuda/libs.mk; searched only when a CUDA target is built
include llmc/cuda/libs.mk
NVCC_LIBS   = $(CUDA_LIB_LIBS) -lgomp $(OPENSSL_LIBS)
CUDA_DEPS  := $(wildcard llmc/*.h llmc/cuda/*.cuh llmc/cuda/*.h)

# the nvcc flags of train_gpt (with the libraries' include flags), for tools that compile it another way
# (dev/test/check_sass.sh)
print-nvcc-flags:
	@echo $(NVCC_FLAGS) $(CUDA_LIB_CFLAGS)
.PHONY: print-nvcc-flags

# CUDA_MPI=1: bootstrap the NCCL communicator through MPI (mpirun / srun + PMIx); default: rank and world from
# the environment and the NCCL id through a shared directory or TCP (llmc/comm_bootstrap.h, --nccl-init)
ifeq ($(CUDA_MPI),1)
NVCC_FLAGS += -DUSE_MPI $(filter -I%,$(shell $(MPICC) --showme:compile 2>/dev/null))
NVCC_LIBS  += $(shell $(MPICC) --showme:link 2>/dev/null)
endif

# cuDNN's attention (USE_CUDNN=1) is llmc/cuda/attention_cudnn.cpp, plain C++17 built once by the host C++ compiler
# and linked into every USE_CUDNN binary: the cudnn-frontend headers cost nvcc ~2 minutes a translation unit, g++
# under one (llmc/README.md, "Layers")
CUDNN_OBJ  := $(BUILD)/attention_cudnn.o
CUDNN_LINK  = $(if $(filter 1,$(USE_CUDNN)),$(CUDNN_OBJ))
$(CUDNN_OBJ): USE_CUDNN = 1
$(CUDNN_OBJ): override USE_NCCL = 0
$(CUDNN_OBJ): llmc/cuda/attention_cudnn.cpp llmc/cuda/attention_cudnn.h llmc/utils.h
	@mkdir -p $(BUILD)
	$(CXX) -std=c++17 -O2 -I. -Wall -Wextra $(WERROR_C) -isystem $(CUDA_HOME)/include $(CUDA_LIB_CFLAGS) -c $< -o $@

# train_gpt_cudnn / test_gpt_cudnn: the trainer and the model test with cuDNN's attention as binaries of their own,
# so that scripts/gpu_check.sh builds, checks and times both attention paths side by side (make train_gpt
# USE_CUDNN=1 builds the same program as ./train_gpt_cudnn)
train_gpt_cudnn test_gpt_cudnn: USE_CUDNN = 1
train_gpt_cudnn test_gpt_cudnn: $(CUDNN_OBJ)
train_gpt train_gpt_cudnn: train_gpt.cu $(CUDA_DEPS) $(CUDNN_LINK)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_LIB_CFLAGS) train_gpt.cu $(CUDNN_LINK) $(NVCC_LIBS) -o $@

# copies the header-only cudnn-frontend (pip's nvidia-cudnn-frontend) into .gpu_carry/cudnn-frontend/include
# (git-ignored; scripts/gpu_prepare.sh), where llmc/cuda/libs.mk looks when Python cannot import it: a folder to take
# along to a machine without the package. Nothing to do when that copy is the only one found.
cudnn-frontend-headers:
	@test -n "$(CUDNN_FRONTEND_PATH)" || { echo "error: cudnn-frontend headers not found: pip install nvidia-cudnn-frontend"; exit 1; }
	@if [ "$(abspath $(CUDNN_FRONTEND_PATH))" != "$(CUDNN_FRONTEND_CARRY)" ]; then \
	    rm -rf "$(CUDNN_FRONTEND_CARRY).tmp" && mkdir -p "$(dir $(CUDNN_FRONTEND_CARRY))" && \
	    cp -r "$(CUDNN_FRONTEND_PATH)/." "$(CUDNN_FRONTEND_CARRY).tmp" && rm -rf "$(CUDNN_FRONTEND_CARRY)" && \
	    mv "$(CUDNN_FRONTEND_CARRY).tmp" "$(CUDNN_FRONTEND_CARRY)"; fi
	@echo "cudnn-frontend headers in $(CUDNN_FRONTEND_CARRY) (from $(CUDNN_FRONTEND_PATH))"

test_gpt test_gpt_cudnn: test_gpt.cu train_gpt.cu $(CUDA_DEPS) $(CUDNN_LINK)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_LIB_CFLAGS) -Xcompiler -Wno-unused-function test_gpt.cu $(CUDNN_LINK) $(NVCC_LIBS) -o $@

# ---------------------------------------------------------------- default goal
# `make` builds what this machine can: the CPU trainer always, the CUDA trainer and model test when nvcc runs and
# cuBLAS is found (without NCCL as a one-GPU build, USE_NCCL=0; USE_CUDNN=1 without cuDNN or its frontend builds
# without it). Each target or feature left out gets one "skip:" line saying why, and make still exits 0.
# The library search (llmc/cuda/libs.mk) is lazy: it runs only when this recipe is expanded.
NVCC_FOUND := $(shell command -v $(NVCC) 2>/dev/null)
ALL_NCCL  = $(if $(filter 1,$(USE_NCCL)),$(if $(NCCL_HOME),1,0),0)
ALL_CUDNN = $(if $(filter 1,$(USE_CUDNN)),$(if $(and $(CUDNN_HOME),$(CUDNN_FRONTEND_PATH)),1,0),0)

SKIP_NVCC   = skip: train_gpt, test_gpt (no nvcc: '$(NVCC)' is not an executable; put the CUDA toolkit's bin on PATH or set NVCC=)
SKIP_CUBLAS = skip: train_gpt, test_gpt (cuBLAS not found: no cublasLt.h in $(CUDA_HOME), /usr, /usr/local or pip's nvidia packages; set CUBLAS_HOME=)
SKIP_NCCL   = skip: NCCL in train_gpt (nccl.h not found; set NCCL_HOME=): one-GPU build (USE_NCCL=0), no multi-process runs
SKIP_OPENSSL = skip: --nccl-init tcp: (OpenSSL's openssl/hmac.h not found by $(CC), or USE_OPENSSL=0; install libssl-dev or openssl-devel): built without the TCP bootstrap, which refuses with one line; fs:DIR and MPI work
SKIP_CUDNN  = skip: cuDNN attention in train_gpt (USE_CUDNN=1 needs cudnn.h and pip's nvidia-cudnn-frontend): built with our flash-attention kernel

all: train_gpt_cpu
	@$(if $(filter 0,$(USE_OPENSSL)),echo "$(SKIP_OPENSSL)",:)
ifeq ($(NVCC_FOUND),)
	@echo "$(SKIP_NVCC)"
else
	@$(if $(CUBLAS_HOME),:,echo "$(SKIP_CUBLAS)")
	@$(if $(and $(CUBLAS_HOME),$(filter 1,$(USE_NCCL)),$(filter 0,$(ALL_NCCL))),echo "$(SKIP_NCCL)",:)
	@$(if $(and $(CUBLAS_HOME),$(filter 1,$(USE_CUDNN)),$(filter 0,$(ALL_CUDNN))),echo "$(SKIP_CUDNN)",:)
	$(if $(CUBLAS_HOME),@$(MAKE) --no-print-directory train_gpt test_gpt USE_NCCL=$(ALL_NCCL) USE_CUDNN=$(ALL_CUDNN),@:)
endif

# one line: whether OpenSSL was found (scripts/gpu_check.sh's preflight)
print-openssl:
	@$(if $(filter 1,$(USE_OPENSSL)),echo "OpenSSL: found (--nccl-init tcp: available; links -lcrypto)",echo "$(SKIP_OPENSSL)")
.PHONY: print-openssl

# ---------------------------------------------------------------- unit tests
# Every dev/test/test_*.c is a CPU unit-test program built by this pattern rule.
TEST_SRCS := $(wildcard dev/test/test_*.c)
TEST_BINS := $(patsubst dev/test/%.c,$(BUILD)/%,$(TEST_SRCS))

$(BUILD)/test_%: dev/test/test_%.c $(CPU_DEPS) dev/test/testing.h
	@mkdir -p $(BUILD)
	$(CC) $(CPU_CFLAGS) $< $(CPU_LIBS) -o $@

# the TCP bootstrap's HMAC (llmc/comm_bootstrap.h) needs OpenSSL's libcrypto (where found)
$(BUILD)/test_comm_bootstrap: CPU_LIBS += $(OPENSSL_LIBS)

-include dev/emu/emu.mk

# ---------------------------------------------------------------- sanitizers and fuzzing (make test-sanitize)
# The CPU trainer and every unit test built with AddressSanitizer + UndefinedBehaviorSanitizer into build/asan/
# (same flags as the normal build plus -g; every report is fatal: -fno-sanitize-recover=all), and one libFuzzer
# harness per file reader (dev/fuzz/, clang: -fsanitize=fuzzer,address,undefined). dev/test/run_sanitize.sh runs
# them (see there for the tests chosen and the time per fuzzer).
ASAN_DIR   := $(BUILD)/asan
SAN_FLAGS  := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g
SAN_CFLAGS := $(CPU_CFLAGS) $(SAN_FLAGS)
SAN_TEST_BINS := $(patsubst dev/test/%.c,$(ASAN_DIR)/%,$(TEST_SRCS))
FUZZ_CC    ?= clang
FUZZ_SRCS  := $(wildcard dev/fuzz/fuzz_*.c)
FUZZ_BINS  := $(patsubst dev/fuzz/%.c,$(ASAN_DIR)/%,$(FUZZ_SRCS))
FUZZ_FLAGS := -I. -std=c11 -O1 -g -D_GNU_SOURCE -fopenmp -Wall -Wextra $(WERROR_C) -Wno-unknown-pragmas \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer $(OPENSSL_CFLAGS)

# single-process (no MPI): OpenMPI's plugins keep allocations until exit and are unloaded before LeakSanitizer can
# name them, so an MPI build cannot be leak-checked
$(ASAN_DIR)/train_gpt_cpu: train_gpt.cu $(CPU_DEPS)
	@mkdir -p $(ASAN_DIR)
	$(CC) $(SAN_CFLAGS) -x c train_gpt.cu -x none $(CPU_LIBS) -o $@

$(ASAN_DIR)/test_%: dev/test/test_%.c $(CPU_DEPS) dev/test/testing.h
	@mkdir -p $(ASAN_DIR)
	$(CC) $(SAN_CFLAGS) $< $(CPU_LIBS) $(OPENSSL_LIBS) -o $@

$(ASAN_DIR)/fuzz_%: dev/fuzz/fuzz_%.c dev/fuzz/fuzz_common.h dev/test/fixture.h $(CPU_DEPS)
	@mkdir -p $(ASAN_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< $(CPU_LIBS) -o $@

test-sanitize: $(ASAN_DIR)/train_gpt_cpu $(SAN_TEST_BINS) $(FUZZ_BINS)
	bash dev/test/run_sanitize.sh

# exploration, not a gate: the same tier with a random libFuzzer seed and 5 minutes per reader (FUZZ_SECONDS=N to
# change); a crash it finds is fixed and its input added to dev/fuzz/regressions/NAME/
fuzz: $(ASAN_DIR)/train_gpt_cpu $(SAN_TEST_BINS) $(FUZZ_BINS)
	FUZZ_SEED=0 FUZZ_RUNS=-1 FUZZ_SECONDS=$${FUZZ_SECONDS:-300} bash dev/test/run_sanitize.sh

unit-tests: $(TEST_BINS)

MPI_TEST_BINS := $(if $(filter 1,$(USE_MPI)),$(BUILD)/mpi_comm $(BUILD)/mpi_comm_nccl_emu $(BUILD)/mpi_grid $(BUILD)/mpi_test_gpt_tp $(BUILD)/mpi_pipe_bubble \
                  $(BUILD)/mpi_step_stats train_gpt_emu_mpi \
                  train_gpt_emu_mpi_bf16)

# make test builds its programs TEST_JOBS at a time (the emulator builds are 1-2 minutes each), then runs the tests,
# TEST_JOBS at a time too (dev/test/run_tests.sh: the longest first, the wall-clock checks alone)
TEST_JOBS ?= 2
test-programs: train_gpt_cpu test_gpt_cpu test_gpt_emu test_gpt_emu_bf16 unit-tests $(MPI_TEST_BINS) $(BUILD)/shard_decode
test:
	$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(TEST_JOBS)) test-programs
	TEST_JOBS=$(TEST_JOBS) bash dev/test/run_tests.sh

# the quick tier (under 5 minutes on 2 cores; no nvcc and no emulated model): host-module units, the CPU model test and
# the command-line tests that take seconds each: bad input, resume, the flag table, the layout table (trainer against
# planner), per-layer checksums of tp 2 x pp 2 + sp against one process, data parallelism against one process, MoE,
# the process grid and the step statistics under mpirun -np 8, options, progress, the TensorBoard converter, token ids
# beyond 65,535 (a tokenizer.json through prepare.py, 32-bit shards, a V70000 model). The longer
# layout tests (every ZeRO stage, tp, pp, ep, offload, compression, recompute, preemption, crash safety) run in make test.
QUICK_CLI := flags_doc|bad_input|resume|layout|checksums|dp_equiv|moe|grid|step_stats|options|progress|tensorboard|tokens32
QUICK_MPI_BINS := $(if $(filter 1,$(USE_MPI)),$(BUILD)/mpi_grid $(BUILD)/mpi_step_stats)
# README.md's composition matrix (Planning a layout), regenerated from layout_check
layout-matrix: $(BUILD)/test_layout_matrix
	$(BUILD)/test_layout_matrix --write

test-quick: train_gpt_cpu test_gpt_cpu $(TEST_BINS) $(QUICK_MPI_BINS) $(BUILD)/shard_decode
	TESTS_QUICK=1 TESTS_FILTER='^(test_|cli_($(QUICK_CLI))\.sh$$)' TESTS_SKIP='emu' TEST_JOBS=$(TEST_JOBS) bash dev/test/run_tests.sh

# FP32 build of the model test (TF32 off, precise math: no --use_fast_math) next to the default BF16 one. Built with
# GELU_BWD_EPILOGUE=0 whatever the make variable says: GELU's derivative in our fc dbias pass, not in cuBLASLt's DGELU
# epilogue, whose precision NVIDIA does not document, so that the 1e-5 gradient tolerances of test_gpt.cu measure our
# code (as its FP32 forward avoids cuBLASLt's GELU epilogue, FIXTURE_GELU_FUSION); dev/cuda/matmul checks the epilogue.
test_gpt_fp32: test_gpt.cu train_gpt.cu $(CUDA_DEPS) $(CUDNN_LINK)
	$(NVCC) $(filter-out -DENABLE_$(PRECISION) --use_fast_math -DLLMC_GELU_BWD_EPILOGUE=%,$(NVCC_FLAGS)) $(CUDA_LIB_CFLAGS) -DENABLE_FP32 \
	    -DLLMC_GELU_BWD_EPILOGUE=0 -Xcompiler -Wno-unused-function test_gpt.cu $(CUDNN_LINK) $(NVCC_LIBS) -o $@

# the optional transformers tier of scripts/export_hf.py / import_hf.py (needs torch + transformers for $(PYTHON))
test-hf: train_gpt_cpu
	@out=$$(PYTHON=$(PYTHON) bash dev/test/hf_check.sh); echo "$$out"; ! echo "$$out" | grep -q '^not ok'

# the optional reference tier of -h 1: --eval-dump against dev/eval/reference_scorer.py (torch + transformers for
# $(PYTHON); the eval files are prepared with PREP_PYTHON, default python3)
test-eval: train_gpt_cpu
	@out=$$(PYTHON=$(PYTHON) bash dev/eval/check_reference.sh); echo "$$out"; ! echo "$$out" | grep -q '^not ok'

# the Slurm tier: a one-node Slurm cluster started by the test runs scripts/multi_node/slurm_mpi.sbatch with the CPU
# trainer (root; Debian's slurmctld, slurmd, slurm-client)
test-slurm: train_gpt_cpu
	@out=$$(bash dev/test/slurm_check.sh); echo "$$out"; ! echo "$$out" | grep -q '^not ok'

test-gpu: test_gpt test_gpt_fp32
	./test_gpt
	./test_gpt_fp32

fixture:
	$(PYTHON) train_gpt.py --write-fixture
	$(PYTHON) train_gpt.py --write-moe-fixture
	$(PYTHON) train_gpt.py --write-family-moe-fixture
	$(PYTHON) train_gpt.py --write-family-fixture

clean:
	rm -rf $(BUILD) train_gpt train_gpt_cudnn test_gpt_cudnn train_gpt_cpu train_gpt_cpu_naive test_gpt test_gpt_fp32 test_gpt_cpu test_gpt_emu test_gpt_emu_bf16 train_gpt_emu_mpi train_gpt_emu_mpi_bf16

.PHONY: all layout-matrix test test-programs test-quick test-gpu test-hf test-eval test-slurm fixture clean unit-tests cpu-bench cudnn-frontend-headers test-sanitize \
        fuzz
