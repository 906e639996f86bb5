/*
 * llmc/cuda/cast.cuh -- dtype conversion kernels on device buffers.
 *
 *   dev_copy_floats_to_floatX(dst floatX(n), src float(n), n)   round to nearest (backend.h contract)
 *   dev_copy_floatX_to_floats(dst float(n), src floatX(n), n)   exact widening
 * Elementwise grid-stride kernels, queued on main_stream(), no host sync.
 * Error behaviour: launch errors exit via CUDA_CHECK_LAUNCH.
 */
#ifndef LLMC_CUDA_CAST_CUH
#define LLMC_CUDA_CAST_CUH

#include "common.cuh"

template <class Tout, class Tin>
static __global__ void convert_elements_kernel(Tout* dst, const Tin* src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = from_float<Tout>(to_float(src[i]));
    }
}

static inline void dev_copy_floats_to_floatX(floatX* dst, const float* src, size_t n) {
    if (n == 0) { return; }
    const int block = 256;
    LAUNCH(grid_for(n, block), block, 0, main_stream(), convert_elements_kernel<floatX, float>)(dst, src, n);
    CUDA_CHECK_LAUNCH();
}

static inline void dev_copy_floatX_to_floats(float* dst, const floatX* src, size_t n) {
    if (n == 0) { return; }
    const int block = 256;
    LAUNCH(grid_for(n, block), block, 0, main_stream(), convert_elements_kernel<float, floatX>)(dst, src, n);
    CUDA_CHECK_LAUNCH();
}

#endif /* LLMC_CUDA_CAST_CUH */
