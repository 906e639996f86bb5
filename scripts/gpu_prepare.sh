#!/usr/bin/env bash
# scripts/gpu_prepare.sh -- run on the machine that prepares a GPU session (not on the GPU machine): puts into
# .gpu_carry/ (git-ignored, at the repository's top) what the GPU machine's image may lack and scripts/gpu_check.sh
# can use, and prints the folder and its size. Today that is the header-only cudnn-frontend (pip's
# nvidia-cudnn-frontend, ~3 MB; `make cudnn-frontend-headers`), without which USE_CUDNN=1 cannot build and the cuDNN
# attention benchmark is skipped; llmc/cuda/libs.mk finds .gpu_carry/cudnn-frontend/include when Python cannot import
# the package. What cannot be carried (too large, or system libraries): cuDNN itself, NCCL, PyTorch; OpenSSL is
# optional (without it the build has no --nccl-init tcp:, which one GPU does not need).
# Take the folder along as an ignored path (it is not in git), e.g. `.gpu_carry` in the list of paths a remote run
# carries; keep it small (it travels with the working tree).
# Usage: bash scripts/gpu_prepare.sh        exit 1 when nothing could be prepared
set -u
cd "$(dirname "$0")/.." || exit 2
make -s cudnn-frontend-headers || exit 1
echo "prepared: $PWD/.gpu_carry ($(du -sh .gpu_carry | cut -f1); $(find .gpu_carry -type f | wc -l) files): take it along with the working tree"
