# llmc/cuda/libs.mk -- where the CUDA backend's libraries are, for the top-level Makefile and the kernel programs' one.
#
# cuBLAS/cuBLASLt, cuDNN and NCCL are looked for, in this order, in the CUDA install ($(CUDA_HOME)), in /usr and
# /usr/local, and in pip's wheels (nvidia-cublas / nvidia-cudnn-cu13 / nvidia-nccl-cu13 install
# <site-packages>/nvidia/{cu13,cublas,cudnn,nccl}/{include,lib}, with only versioned files such as
# libnccl.so.2 and no unversioned libnccl.so; those are linked by full path, with an rpath to their folder).
# A home is the first folder D with D/include/<header>; its libraries are in D/lib64, D/lib or D/lib/<multiarch>.
# Override with CUBLAS_HOME=, CUDNN_HOME=, NCCL_HOME= (each a folder with include/ and lib/ or lib64/).
#
# USE_NCCL=0 builds the CUDA trainer without NCCL (-DLLMC_NO_NCCL: one GPU, one process; llmc/comm.h then has
# no collectives, as in the CPU build without MPI). cuDNN is linked only with USE_CUDNN=1.
#
# Everything here is lazy (=, not :=): nothing is searched, and Python is not started, unless a CUDA target is
# built. A library that is needed and not found stops that build with one line naming what was looked for.
# `make print-cuda-libs` shows what was found.

USE_NCCL ?= 1

# $(call cuda_py_pkg_dirs,nccl cudnn) -> the folders of the namespace packages nvidia.nccl, nvidia.cudnn, if installed
cuda_py_pkg_dirs = $(shell $(PYTHON) -c "import sys, importlib.util as u; ns = u.find_spec('nvidia'); [print(list(s.submodule_search_locations)[0]) for s in ([u.find_spec('nvidia.' + m) for m in sys.argv[1:]] if ns else []) if s and s.submodule_search_locations]" $(1) 2>/dev/null)
# $(call cuda_lib_home,header,python package names) -> first folder D holding D/include/header
cuda_lib_home = $(firstword $(foreach d,$(CUDA_HOME) /usr /usr/local $(call cuda_py_pkg_dirs,$(2)),$(if $(wildcard $(d)/include/$(1)),$(d))))
# $(call cuda_lib_dir,home,name) -> the folder of lib<name>.so* under home
cuda_lib_dir = $(patsubst %/,%,$(dir $(firstword $(foreach s,lib64 lib lib/x86_64-linux-gnu lib/aarch64-linux-gnu,$(wildcard $(1)/$(s)/lib$(2).so*)))))
# $(call cuda_link,home,name,home variable) -> -L dir -lname, or -l:lib<name>.so.N when there is no unversioned lib<name>.so; + rpath
cuda_link = $(call cuda_link_in,$(call cuda_lib_dir,$(1),$(2)),$(2),$(1),$(3))
cuda_link_in = $(if $(1),-L$(1) $(if $(wildcard $(1)/lib$(2).so),-l$(2),-l:$(notdir $(firstword $(wildcard $(1)/lib$(2).so.*)))) -Xlinker -rpath=$(1),$(error lib$(2).so not found under $(3) (looked in lib64, lib, lib/<multiarch>); set $(4)=<folder with lib/lib$(2).so*>))
# -isystem for a home that the compiler does not search anyway
cuda_inc = $(if $(filter $(CUDA_HOME) /usr /usr/local,$(1)),,-isystem $(1)/include)
# $(call cuda_need,home,what,package,hint) -> home, or stop with one line
cuda_need = $(if $(1),$(1),$(error $(2) not found (looked in $(CUDA_HOME), /usr, /usr/local and Python's nvidia.* packages): install $(3), or set $(4)))

# attention through cuDNN's SDPA graph (USE_CUDNN=1, llmc/cuda/attention_cudnn.cpp) also needs the header-only
# cudnn-frontend, from the PyPI package nvidia-cudnn-frontend (its headers in <site-packages>/include); where Python
# cannot import it, the copy that scripts/gpu_prepare.sh (`make cudnn-frontend-headers`) leaves in the repository's
# .gpu_carry/cudnn-frontend/include (git-ignored, a folder to take along to a GPU machine whose image lacks it)
LLMC_REPO_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))../..)
CUDNN_FRONTEND_CARRY := $(LLMC_REPO_ROOT)/.gpu_carry/cudnn-frontend/include
CUDNN_FRONTEND_PATH ?= $(or $(shell $(PYTHON) -c "import cudnn,os;print(os.path.join(os.path.dirname(os.path.dirname(cudnn.__file__)),'include'))" 2>/dev/null),$(wildcard $(CUDNN_FRONTEND_CARRY)))

CUBLAS_HOME ?= $(call cuda_lib_home,cublasLt.h,cu13 cublas)
CUDNN_HOME  ?= $(call cuda_lib_home,cudnn.h,cudnn)
NCCL_HOME   ?= $(call cuda_lib_home,nccl.h,nccl)

CUDA_LIB_CFLAGS = $(call cuda_inc,$(call cuda_need,$(CUBLAS_HOME),cuBLAS (cublasLt.h),the CUDA toolkit,CUBLAS_HOME=)) \
    $(if $(filter 1,$(USE_CUDNN)),-DUSE_CUDNN $(call cuda_inc,$(call cuda_need,$(CUDNN_HOME),cuDNN (cudnn.h),libcudnn9-dev-cuda-13 or pip nvidia-cudnn-cu13,CUDNN_HOME=)) \
        -isystem $(or $(CUDNN_FRONTEND_PATH),$(error USE_CUDNN=1 needs the cudnn-frontend headers: pip install nvidia-cudnn-frontend, or set CUDNN_FRONTEND_PATH))) \
    $(if $(filter 1,$(USE_NCCL)),$(call cuda_inc,$(call cuda_need,$(NCCL_HOME),NCCL (nccl.h),libnccl-dev or pip nvidia-nccl-cu13,NCCL_HOME= (or USE_NCCL=0 for a one-GPU build))),-DLLMC_NO_NCCL)
CUDA_LIB_LIBS = $(call cuda_link,$(CUBLAS_HOME),cublas,CUBLAS_HOME) $(call cuda_link,$(CUBLAS_HOME),cublasLt,CUBLAS_HOME) \
    $(if $(filter 1,$(USE_CUDNN)),$(call cuda_link,$(CUDNN_HOME),cudnn,CUDNN_HOME) $(call cuda_link,$(CUBLAS_HOME),nvrtc,CUBLAS_HOME)) \
    $(if $(filter 1,$(USE_NCCL)),$(call cuda_link,$(NCCL_HOME),nccl,NCCL_HOME))

print-cuda-libs:
	@echo "nvcc:        $(NVCC)"
	@echo "cuBLAS home: $(CUBLAS_HOME)"
	@echo "cuDNN home:  $(CUDNN_HOME) (linked with USE_CUDNN=1; now USE_CUDNN=$(or $(USE_CUDNN),0))"
	@echo "NCCL home:   $(NCCL_HOME) (USE_NCCL=$(USE_NCCL))"
	@echo "compile:     $(strip $(CUDA_LIB_CFLAGS))"
	@echo "link:        $(strip $(CUDA_LIB_LIBS))"

.PHONY: print-cuda-libs
