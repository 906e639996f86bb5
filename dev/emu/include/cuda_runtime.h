/*
 * dev/emu/include/cuda_runtime.h -- stand-in for the CUDA runtime header on the CPU execution layer (tests only).
 *
 * The emulator builds (dev/emu/emu.mk) put dev/emu/include on the include path before the CUDA toolkit's
 * include directory, so the library's `#include <cuda_runtime.h>` (llmc/cuda/common.cuh) lands here while
 * <cuda_bf16.h>, <cuda_fp16.h> and <library_types.h> still come from the toolkit. The library never names the
 * emulator; everything it expects from "the runtime" is defined here:
 *   - the runtime API subset, the built-in variables, the qualifiers and the intrinsics (dev/emu/emu.h);
 *   - LAUNCH(grid, block, smem, stream, kernel)(args...) and DYNAMIC_SHARED(type, name), which common.cuh
 *     defines as <<<...>>> / extern __shared__ only when they are not defined yet (dev/emu/emu.h);
 *   - the CUDA library data types (CUDA_R_32F, CUDA_R_16BF, ...) that the real header brings in;
 *   - the tensor-core and async-copy tile functions of llmc/cuda/mma.cuh (mma_m16n8k16_bf16/_f16,
 *     ldmatrix_x4[_trans], cp_async_16/commit/wait_all), with exactly the signatures and fragment layouts that
 *     mma.cuh documents (dev/emu/emu_mma.h); mma.cuh defines its inline-PTX versions only under nvcc.
 * C++17 only (the execution layer runs each CUDA thread as a fiber; see dev/emu/README.md).
 */
#ifndef LLMC_DEV_EMU_INCLUDE_CUDA_RUNTIME_H
#define LLMC_DEV_EMU_INCLUDE_CUDA_RUNTIME_H

#include <library_types.h>

#include "../emu.h"
#include "../emu_mma.h"

#endif /* LLMC_DEV_EMU_INCLUDE_CUDA_RUNTIME_H */
