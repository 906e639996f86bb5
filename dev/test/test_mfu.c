/*
 * dev/test/test_mfu.c -- unit tests of llmc/mfu.h: the FLOPs formula on GPT-2 124M, the peak table
 * lookups (device-name matching, precision mapping, unknowns) and compute_mfu.
 */
#include "llmc/mfu.h"
#include "dev/test/testing.h"
#include <math.h>

int main(void) {
    /* GPT-2 124M: N = 124,475,904 (padded vocab 50304, llm.c), L=12, C=768, T=1024 */
    double f = gpt_flops_per_token(124475904, 12, 768, 1024);
    double expect = 6.0 * 124475904.0 + 6.0 * 12 * 768 * 1024;
    TEST_CHECK(f == expect, "6N + 6LCT for GPT-2 124M = %.6e (got %.6e)", expect, f);
    TEST_CHECK(fabs(f - 8.0347e8) / 8.0347e8 < 1e-4, "GPT-2 124M needs about 0.80 GFLOP per token (%.4e)", f);
    TEST_CHECK(gpt_flops_per_token(0, 1, 1, 1) == 6.0, "attention term alone: 6*L*C*T");
    TEST_CHECK(device_peak_tflops("NVIDIA H200", "bf16") == 989.0, "H200 bf16 = 989");
    TEST_CHECK(device_peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0, "H100 SXM (\"H100 80GB HBM3\") bf16 = 989");
    TEST_CHECK(device_peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0, "H100 PCIe bf16 = 756 (not the SXM figure)");
    TEST_CHECK(device_peak_tflops("NVIDIA A100-SXM4-80GB", "bf16") == 312.0, "A100 bf16 = 312");
    TEST_CHECK(device_peak_tflops("NVIDIA A100-SXM4-40GB", "fp16") == 312.0, "A100 fp16 = 312");
    TEST_CHECK(device_peak_tflops("NVIDIA A100-PCIE-40GB", "fp32") == 156.0, "A100 fp32 maps to TF32 dense = 156");
    TEST_CHECK(device_peak_tflops("NVIDIA A100-PCIE-40GB", "tf32") == 156.0, "A100 tf32 = 156");
    TEST_CHECK(device_peak_tflops("NVIDIA L40S", "bf16") == 362.05, "L40S bf16 = 362.05");
    TEST_CHECK(device_peak_tflops("NVIDIA GeForce RTX 4090", "BF16") == 165.2, "RTX 4090 bf16 = 165.2 (case-insensitive precision)");
    TEST_CHECK(device_peak_tflops("nvidia h200", "bf16") == 989.0, "device names match case-insensitively");
    TEST_CHECK(device_peak_tflops("Tesla V100-SXM2-16GB", "bf16") == -1.0, "unknown device -> -1");
    TEST_CHECK(device_peak_tflops("NVIDIA H200", "fp8") == -1.0, "unknown precision -> -1");
    TEST_CHECK(device_peak_tflops("NVIDIA H200", "bf16x") == -1.0, "precision must match exactly");
    TEST_CHECK(device_peak_tflops(NULL, "bf16") == -1.0, "NULL device -> -1");
    double mfu = compute_mfu(f, 500000.0, 989.0);
    TEST_CHECK(fabs(mfu - f * 5e5 / 989e12) < 1e-12 && mfu > 0.40 && mfu < 0.41, "MFU at 500k tok/s on H200 bf16 = %.4f", mfu);
    TEST_CHECK(compute_mfu(f, 500000.0, -1.0) == -1.0, "unknown peak -> MFU -1 (print n/a)");
    TEST_CHECK(compute_mfu(1e12, 1.0, 1.0) == 1.0, "compute_mfu units: 1e12 FLOP/s on a 1 TFLOP/s peak = 1.0");
    return testing_finish();
}
