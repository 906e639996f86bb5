/*
 * llmc/mfu.h -- model FLOPs utilization (MFU): FLOPs per token and a peak-throughput table.
 *
 * gpt_flops_per_token(N, L, C, T) = 6*N + 6*L*C*T  (FLOPs per trained token, forward + backward).
 *   This is llm.c's convention (train_gpt2.cu, gpt2_estimate_mfu), which cites PaLM (Chowdhery et al.
 *   2022, appendix B): 6N covers the matmuls with the N parameters (2N forward + 4N backward, all
 *   parameters including embeddings counted, as llm.c does); PaLM adds 12*L*C*T for attention
 *   (QK^T and AV); llm.c uses 6*L*C*T, i.e. half of it, which matches causal attention skipping the
 *   masked half. We keep llm.c's number so our MFU is comparable with llm.c's. Units: FLOPs (double).
 *   The decoder family needs no other formula: N counts its tensors as they are (grouped-query
 *   attention's smaller k and v projections, SwiGLU's three MLP matrices, an untied head), and the
 *   attention term counts query heads (NH hs = C channels of QK^T and AV), which grouped-query
 *   attention keeps; it shares keys and values, not query work (Ainslie et al. 2023).
 *
 * device_peak_tflops(device_name, precision): dense (no 2:4 sparsity) tensor-core peak in TFLOP/s,
 *   matched by case-insensitive substring of the device name (as reported by cudaGetDeviceProperties).
 *   precision: "bf16", "fp16", "fp32" or "tf32" (fp32 training uses TF32 tensor cores, so fp32 maps
 *   to the TF32 dense figure). Returns -1 if the device or precision is unknown.
 *   Sources (vendor datasheets, dense = half the "with sparsity" figures):
 *     H100 SXM / H200 SXM: NVIDIA H100 datasheet and H200 product page: BF16/FP16 989 (1979 sparse), TF32 494.5 (989 sparse).
 *     H100 PCIe: NVIDIA H100 datasheet: BF16/FP16 756, TF32 378.
 *     B200: NVIDIA HGX B200 datasheet: 8 GPUs FP16/BF16 36 PFLOPS, TF32 18 PFLOPS (sparse) -> 2250 / 1125 dense each.
 *     A100 (SXM and PCIe): NVIDIA A100 datasheet: BF16/FP16 312, TF32 156.
 *     L40S: NVIDIA L40S datasheet: BF16/FP16 362.05, TF32 183.
 *     RTX 4090: NVIDIA Ada Lovelace architecture whitepaper (FP32 accumulate): BF16/FP16 165.2, TF32 82.6.
 *
 * compute_mfu(flops_per_token, tokens_per_s, peak_tflops) = flops_per_token*tokens_per_s / (peak*1e12),
 *   a fraction (0.4 = 40%). Returns -1 if the peak is unknown (<= 0); callers print "n/a".
 *
 * Header-only: static inline functions, no globals.
 */
#ifndef LLMC_MFU_H
#define LLMC_MFU_H

#include <ctype.h>
#include <stddef.h>
#include <string.h>

/* FLOPs per token, llm.c convention: 6N + 6*L*C*T */
static inline double gpt_flops_per_token(size_t num_params, int L, int C, int T) {
    return 6.0 * (double)num_params + 6.0 * (double)L * (double)C * (double)T;
}

typedef struct {
    const char* name_substring;  /* lowercase; first match in table order wins */
    double bf16, fp16, tf32;     /* dense TFLOP/s */
} MfuPeakEntry;

/* case-insensitive substring search; returns 1 if needle occurs in haystack */
static inline int mfu_contains_nocase(const char* haystack, const char* needle) {
    size_t n = strlen(needle);
    for (const char* h = haystack; *h; h++) {
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i])) { i++; }
        if (i == n) { return 1; }
    }
    return n == 0;
}

/* see header comment; -1 if unknown */
static inline double device_peak_tflops(const char* device_name, const char* precision) {
    /* order matters: more specific names first ("h100 pcie" before "h100") */
    static const MfuPeakEntry table[] = {
        {"b200", 2250.0, 2250.0, 1125.0},
        {"h200", 989.0, 989.0, 494.5},
        {"h100 pcie", 756.0, 756.0, 378.0},
        {"h100 nvl", 835.5, 835.5, 417.5},  /* H100 datasheet, NVL column (per GPU) */
        {"h100", 989.0, 989.0, 494.5},      /* SXM5 (and "H100 80GB HBM3") */
        {"a100", 312.0, 312.0, 156.0},
        {"l40s", 362.05, 362.05, 183.0},
        {"rtx 4090", 165.2, 165.2, 82.6},
    };
    if (device_name == NULL || precision == NULL) { return -1.0; }
    int which; /* 0 bf16, 1 fp16, 2 tf32 */
    if (mfu_contains_nocase(precision, "bf16") && strlen(precision) == 4) { which = 0; }
    else if (strlen(precision) == 4 && mfu_contains_nocase(precision, "fp16")) { which = 1; }
    else if (strlen(precision) == 4 && (mfu_contains_nocase(precision, "fp32") || mfu_contains_nocase(precision, "tf32"))) { which = 2; }
    else { return -1.0; }
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (mfu_contains_nocase(device_name, table[i].name_substring)) {
            return which == 0 ? table[i].bf16 : which == 1 ? table[i].fp16 : table[i].tf32;
        }
    }
    return -1.0;
}

/* fraction of peak; -1 if the peak is unknown */
static inline double compute_mfu(double flops_per_token, double tokens_per_s, double peak_tflops) {
    if (!(peak_tflops > 0.0)) { return -1.0; }
    return flops_per_token * tokens_per_s / (peak_tflops * 1e12);
}

#endif /* LLMC_MFU_H */
