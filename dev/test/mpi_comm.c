/*
 * dev/test/mpi_comm.c -- llmc/comm.h collectives, run under `mpirun --oversubscribe -np N` (N = 1, 2, 3, 5):
 *   build/mpi_comm           the MPI transport (llmc/comm_mpi.h), C11; run by the dev/test/cli_dp_* tests;
 *   build/mpi_comm_nccl_emu  the NCCL transport (llmc/comm_nccl.h) on the CPU execution layer with NCCL emulated
 *                            over MPI (dev/emu/emu.mk: the same file compiled as C++ with -DLLMC_BACKEND_CUDA).
 *                            There the sums are MPI_Allreduce/MPI_Reduce's (as on a GPU they are NCCL's), so
 *                            the bit-for-bit comparison of bucketed and whole-buffer reductions is only made
 *                            where the order cannot differ (N <= 2); everything else is checked the same way.
 *
 * Checks (rank 0 prints "ok - ..." / "not ok - ..."; a check fails if it fails on any rank):
 *   - all-reduce of fp32/fp64/int32 buffers of awkward lengths (0, 1, N-1, 7, 1000, 12347) equals the exact
 *     sum (the values are small integers, so fp32 sums are exact);
 *   - reduce-scatter / all-gather over "owned" sub-ranges with uneven, partly empty chunks;
 *   - bytes sent/received per rank equal the ring model exactly, and are within one shard of the
 *     theory 2(N-1)/N * bytes (all-reduce) and (N-1)/N * bytes (reduce-scatter, all-gather);
 *   - the fp32 all-reduce of non-integer values is bitwise deterministic and identical on every rank;
 *   - segment lists (gradient buckets): pieces of one virtual buffer scattered over separate allocations,
 *     reduce-scattered / all-gathered / all-reduced in one call, give bit for bit the values of one call over
 *     the contiguous buffer (non-integer values, so the summation order matters), and count the sum of the
 *     per-segment ring bytes;
 *   - host fp64 all-reduce (3 values, and 200 values: more than one chunk of the NCCL transport's device
 *     scratch), host broadcast, send/recv around a ring, barrier, sub-groups (comm_split);
 *   - batched point-to-point (comm_p2p_batch): an empty batch is a no-op (any N); for N > 1 a ring in one batch
 *     per dtype (fp32, bf16, fp64, int32: every rank posts the send to r+1 before the receive from r-1, with
 *     messages above MPI's eager limits, so sends that blocked one by one would deadlock) with rank-dependent
 *     values checked exactly, and an exchange between neighbours 2k and 2k+1 of two messages each
 *     way with different tags and contents (posted in the same (peer, tag) order, send and receive of a tag in
 *     opposite orders on the two sides), each landing in its own buffer; the byte counters hold the payload.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/comm.h"
#include "dev/test/mpi_check.h"

static Comm g;
static float value_f(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 13) % 31) - 15); }

static void test_all_reduce_f32(size_t count) {
    int N = g.world;
    float* x = (float*)malloc_check((count + 1) * sizeof(float), "x");
    for (size_t i = 0; i < count; i++) { x[i] = value_f(g.rank, i); }
    comm_counters_reset(&g);
    comm_all_reduce(&g, x, COMM_F32, count);
    int ok = 1;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < N; r++) { want += value_f(r, i); }
        if (x[i] != want) { ok = 0; }
    }
    check_all(ok, "fp32 all-reduce of %zu values is exact on every rank", count);
    size_t shard = comm_shard_size(&g, count), rs_s, rs_r, ag_s, ag_r;
    comm_ring_bytes(&g, 0, count, shard, 4, 0, &rs_s, &rs_r);
    comm_ring_bytes(&g, 0, count, shard, 4, 1, &ag_s, &ag_r);
    int exact = g.counters.bytes_sent == rs_s + ag_s && g.counters.bytes_recv == rs_r + ag_r;
    double theory = 2.0 * (N - 1) / N * (double)count * 4.0;
    double diff = fabs((double)g.counters.bytes_sent - theory);
    int near = diff <= 2.0 * shard * 4.0 + 1e-9;
    check_all(exact && near, "all-reduce of %zu fp32: sent %llu recv %llu bytes, theory 2(N-1)/N*bytes = %.0f "
              "(|diff| %.0f <= 2 chunks)", count, g.counters.bytes_sent, g.counters.bytes_recv, theory, diff);
    free(x);
}

static void test_types(void) {
    int N = g.world;
    size_t n = 1001;
    double* d = (double*)malloc_check(n * sizeof(double), "d");
    int* k = (int*)malloc_check(n * sizeof(int), "k");
    for (size_t i = 0; i < n; i++) { d[i] = 0.5 * (double)(g.rank + 1) + (double)i; k[i] = (int)i * (g.rank + 1); }
    comm_all_reduce(&g, d, COMM_F64, n);
    comm_all_reduce(&g, k, COMM_I32, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        double wd = 0.5 * N * (N + 1) / 2.0 + (double)i * N;
        int wk = (int)i * N * (N + 1) / 2;
        if (d[i] != wd || k[i] != wk) { ok = 0; }
    }
    check_all(ok, "fp64 and int32 all-reduce of %zu values are exact", n);
    free(d); free(k);
}

/* reduce-scatter + all-gather over sub-ranges [begin,end) of a padded buffer with uneven chunks */
static void test_owned(size_t P, size_t begin, size_t end) {
    int N = g.world;
    size_t shard = comm_shard_size(&g, P), Ppad = shard * (size_t)N;
    float* x = (float*)malloc_check(Ppad * sizeof(float), "x");
    for (size_t i = 0; i < Ppad; i++) { x[i] = value_f(g.rank, i); }
    comm_counters_reset(&g);
    comm_reduce_scatter_owned(&g, x, COMM_F32, begin, end, shard);
    size_t rs_sent = g.counters.bytes_sent;
    int ok = 1;
    size_t lo = (size_t)g.rank * shard, hi = lo + shard;
    for (size_t i = (lo > begin ? lo : begin); i < (hi < end ? hi : end); i++) {
        float want = 0;
        for (int r = 0; r < N; r++) { want += value_f(r, i); }
        if (x[i] != want) { ok = 0; }
    }
    for (size_t i = 0; i < Ppad; i++) {
        if ((i < begin || i >= end) && x[i] != value_f(g.rank, i)) { ok = 0; } /* outside: untouched */
    }
    check_all(ok, "reduce-scatter over [%zu,%zu) of %zu (shard %zu): owned elements hold the sum, others untouched",
              begin, end, Ppad, shard);
    size_t own_lo = lo > begin ? lo : begin, own_hi = hi < end ? hi : end;
    size_t own = own_hi > own_lo ? own_hi - own_lo : 0;
    check_all(rs_sent == (end - begin - own) * 4, "reduce-scatter sent %zu bytes = (range - own chunk) * 4 = %zu",
              rs_sent, (end - begin - own) * 4);
    /* all-gather: each owner writes a marker into its chunk; afterwards everyone sees every marker */
    for (size_t i = own_lo; i < own_hi; i++) { x[i] = (float)(1000 + g.rank); }
    comm_all_gather_owned(&g, x, COMM_F32, begin, end, shard);
    ok = 1;
    for (size_t i = begin; i < end; i++) {
        if (x[i] != (float)(1000 + (int)(i / shard))) { ok = 0; }
    }
    check_all(ok, "all-gather over [%zu,%zu): every element holds its owner's value", begin, end);
    free(x);
}

static void test_equal_count(void) {
    int N = g.world;
    size_t count = 4096, total = count * (size_t)N;
    float* x = (float*)malloc_check(total * sizeof(float), "x");
    for (size_t i = 0; i < total; i++) { x[i] = value_f(g.rank, i); }
    comm_counters_reset(&g);
    comm_reduce_scatter(&g, x, COMM_F32, count);
    double theory = (double)(N - 1) / N * (double)total * 4.0;
    check_all((double)g.counters.bytes_sent == theory && (double)g.counters.bytes_recv == theory,
              "equal-count reduce-scatter of %zu fp32: sent %llu = (N-1)/N*bytes = %.0f exactly", total,
              g.counters.bytes_sent, theory);
    comm_counters_reset(&g);
    comm_all_gather(&g, x, COMM_F32, count);
    check_all((double)g.counters.bytes_sent == theory && (double)g.counters.bytes_recv == theory,
              "equal-count all-gather of %zu fp32: sent %llu = (N-1)/N*bytes = %.0f exactly", total,
              g.counters.bytes_sent, theory);
    int ok = 1;
    for (size_t i = 0; i < total; i++) {
        float want = 0;
        for (int r = 0; r < N; r++) { want += value_f(r, i); }
        if (x[i] != want) { ok = 0; }
    }
    check_all(ok, "reduce-scatter then all-gather == all-reduce");
    free(x);
}

static void test_determinism(void) {
    size_t n = 5003;
    float* a = (float*)malloc_check(n * sizeof(float), "a");
    float* b = (float*)malloc_check(n * sizeof(float), "b");
    for (size_t i = 0; i < n; i++) { a[i] = b[i] = sinf((float)(i + 1) * 0.37f * (float)(g.rank + 1)) * 1e-3f; }
    comm_all_reduce(&g, a, COMM_F32, n);
    comm_all_reduce(&g, b, COMM_F32, n);
    int same = memcmp(a, b, n * sizeof(float)) == 0;
    /* identical on every rank: compare with rank 0's copy */
    float* r0 = (float*)malloc_check(n * sizeof(float), "r0");
    memcpy(r0, a, n * sizeof(float));
    comm_broadcast_host(&g, r0, n * sizeof(float), 0);
    int everywhere = memcmp(a, r0, n * sizeof(float)) == 0;
    check_all(same && everywhere, "fp32 all-reduce of non-integer values: bitwise repeatable and identical on all ranks");
    free(a); free(b); free(r0);
}

/* a virtual buffer of P values cut at `cuts` into segments that live in separate allocations */
static void test_segments(size_t P) {
    int N = g.world;
    size_t shard = comm_shard_size(&g, P), Ppad = shard * (size_t)N;
    size_t cuts[] = {0, 1, 17, P / 3, P / 3 + 5, P / 2, P - 2, P};
    int nseg = (int)(sizeof(cuts) / sizeof(cuts[0])) - 1;
    float* whole = (float*)malloc_check(Ppad * sizeof(float), "whole");
    CommSegment seg[8];
    for (size_t i = 0; i < Ppad; i++) { whole[i] = sinf((float)(i + 3) * 0.61f * (float)(g.rank + 2)) * 1e-2f; }
    for (int k = 0; k < nseg; k++) {
        size_t n = cuts[k + 1] - cuts[k];
        seg[k].ptr = malloc_check((n + 1) * sizeof(float), "segment");
        seg[k].begin = cuts[k];
        seg[k].end = cuts[k + 1];
        memcpy(seg[k].ptr, whole + cuts[k], n * sizeof(float));
    }
    for (int op = 0; op < 3; op++) {
        comm_counters_reset(&g);
        if (op == 0) { comm_reduce_scatter_owned(&g, whole, COMM_F32, 0, P, shard); }
        if (op == 1) { comm_all_gather_owned(&g, whole, COMM_F32, 0, P, shard); }
        if (op == 2) { comm_reduce_scatter_owned(&g, whole, COMM_F32, 0, P, shard); comm_all_gather_owned(&g, whole, COMM_F32, 0, P, shard); }
        CommCounters one = g.counters;
        comm_counters_reset(&g);
        if (op == 0) { comm_reduce_scatter_segments(&g, seg, nseg, COMM_F32, shard); }
        if (op == 1) { comm_all_gather_segments(&g, seg, nseg, COMM_F32, shard); }
        if (op == 2) { comm_all_reduce_segments(&g, seg, nseg, COMM_F32, shard); }
        size_t lo = (size_t)g.rank * shard, hi = lo + shard;
        int same = 1;
        for (int k = 0; k < nseg; k++) {
            for (size_t i = seg[k].begin; i < seg[k].end; i++) {
                int defined = op != 0 || (i >= lo && i < hi); /* reduce-scatter: only owned values are defined */
                if (defined && ((float*)seg[k].ptr)[i - seg[k].begin] != whole[i]) { same = 0; }
            }
        }
        size_t es, er, s1, r1;
        comm_segments_bytes(&g, seg, nseg, shard, 4, op == 1, &es, &er);
        if (op == 2) { comm_segments_bytes(&g, seg, nseg, shard, 4, 1, &s1, &r1); es += s1; er += r1; }
        static const char* names[] = {"reduce-scatter", "all-gather", "all-reduce"};
#ifdef COMM_HAVE_NCCL
        same = same || g.world > 2; /* NCCL: the library's summation order (a + b either way for two ranks) */
#endif
        check_all(same, "%s over %d scattered segments of %zu values equals one call over the buffer bit for bit",
                  names[op], nseg, P);
        check_all(g.counters.bytes_sent == es && g.counters.bytes_recv == er &&
                  g.counters.bytes_sent == one.bytes_sent && g.counters.bytes_recv == one.bytes_recv,
                  "%s over segments: sent %llu recv %llu bytes = the per-segment ring sum = the one-call bytes", names[op],
                  g.counters.bytes_sent, g.counters.bytes_recv);
        for (int k = 0; k < nseg; k++) { memcpy(seg[k].ptr, whole + seg[k].begin, (seg[k].end - seg[k].begin) * sizeof(float)); }
    }
    for (int k = 0; k < nseg; k++) { free(seg[k].ptr); }
    free(whole);
}

/* more host doubles than one chunk of the NCCL transport's device scratch: exact sums and the bytes of the
 * transport's ring model */
static void test_host_f64_chunks(void) {
    int N = g.world;
    enum { NH = 200 }; /* above the 64-value device scratch of the NCCL transport: several chunks */
    double many[NH];
    for (int i = 0; i < NH; i++) { many[i] = (double)i + 0.5 * g.rank; }
    comm_counters_reset(&g);
    comm_all_reduce_host_f64(&g, many, NH);
    int ok = 1;
    for (int i = 0; i < NH; i++) { ok &= many[i] == (double)i * N + 0.25 * N * (N - 1); }
    size_t want = 0, s, r;
#ifdef COMM_HAVE_NCCL /* one all-reduce per chunk of the scratch, each counted as 2 x its reduce-scatter */
    /* the scratch holds max(64, world + 2) values: the step statistics (world + 2) are one all-reduce */
    const size_t chunk = (size_t)(N + 2 > 64 ? N + 2 : 64);
    ok &= !g.nccl.comm || g.nccl.dscratch_n == (int)chunk;
    for (size_t off = 0; off < NH; off += chunk) {
        size_t m = NH - off < chunk ? NH - off : chunk;
        comm_ring_bytes(&g, 0, m, comm_shard_size(&g, m), 8, 0, &s, &r);
        want += 2 * s;
    }
#else /* one ring all-reduce: reduce-scatter + all-gather */
    for (int gather = 0; gather < 2; gather++) {
        comm_ring_bytes(&g, 0, NH, comm_shard_size(&g, NH), 8, gather, &s, &r);
        want += s;
    }
#endif
    check_all(ok && g.counters.bytes_sent == want, "host fp64 all-reduce of %d values: exact sums, sent %llu bytes "
              "(ring model %zu; theory 2(N-1)/N*bytes = %.0f)", NH, g.counters.bytes_sent, want,
              2.0 * (N - 1) / N * NH * 8.0);
}

static void test_p2p_and_groups(void) {
    int N = g.world;
    double h[3] = {1.0, (double)g.rank, 0.25};
    comm_all_reduce_host_f64(&g, h, 3);
    check_all(h[0] == N && h[1] == N * (N - 1) / 2.0 && h[2] == 0.25 * N, "host fp64 all-reduce");
    uint64_t v = g.rank == 0 ? 0x1234567890abcdefULL : 0;
    comm_broadcast_host(&g, &v, sizeof(v), 0);
    check_all(v == 0x1234567890abcdefULL, "host broadcast from rank 0");
    if (N > 1) {
        int out[4] = {g.rank, g.rank * 2, 7, 9}, in[4] = {0, 0, 0, 0};
        int right = (g.rank + 1) % N, left = (g.rank + N - 1) % N;
        if (g.rank % 2 == 0) {
            comm_send(&g, out, COMM_I32, 4, right);
            comm_recv(&g, in, COMM_I32, 4, left);
        } else {
            comm_recv(&g, in, COMM_I32, 4, left);
            comm_send(&g, out, COMM_I32, 4, right);
        }
        check_all(in[0] == left && in[1] == 2 * left && in[3] == 9, "send/recv around the ring");
    }
    comm_barrier(&g);
    Comm sub;
    comm_split(&g, g.rank % 2, g.rank, &sub);
    int expect_size = N / 2 + ((N % 2) && (g.rank % 2 == 0) ? 1 : 0);
    double s = (double)g.rank;
    comm_all_reduce_host_f64(&sub, &s, 1);
    double want = 0;
    for (int r = g.rank % 2; r < N; r += 2) { want += r; }
    check_all(sub.world == expect_size && sub.rank == g.rank / 2 && s == want,
              "comm_split into even/odd ranks: sizes, ranks and a sub-group all-reduce");
    comm_finalize(&sub);
}

/* element i of a message from rank `rank` (salt tells apart the messages of one rank), written as type t; bf16
 * as raw bit patterns (a copy needs no arithmetic) */
static void p2p_fill(void* buf, CommDtype t, size_t n, int rank, int salt) {
    for (size_t i = 0; i < n; i++) {
        int v = (int)((i * 7 + (size_t)rank * 131 + (size_t)salt * 1009) % 4093) - 2000;
        switch (t) {
        case COMM_F32: ((float*)buf)[i] = (float)v + 0.25f; break;
        case COMM_F64: ((double*)buf)[i] = (double)v + 0.125; break;
        case COMM_I32: ((int*)buf)[i] = v * 1000 + rank; break;
        default: ((uint16_t*)buf)[i] = (uint16_t)(0x3f00 + v + 2000); break; /* COMM_BF16 */
        }
    }
}

static void test_p2p_batch_empty(void) {
    CommCounters before = g.counters;
    comm_p2p_batch(&g, NULL, 0);
    check_all(g.counters.calls == before.calls && g.counters.bytes_sent == before.bytes_sent &&
              g.counters.bytes_recv == before.bytes_recv, "comm_p2p_batch with no transfers is a no-op (not counted)");
}

/* every rank sends n elements of t to r+1 and receives from r-1 in one batch, send posted first everywhere; n is
 * large enough (>= 128 KiB) that MPI cannot buffer the sends, so only posting both together avoids a deadlock */
static void test_p2p_batch_ring(CommDtype t, const char* name) {
    int N = g.world, right = (g.rank + 1) % N, left = (g.rank + N - 1) % N;
    size_t n = ((size_t)1 << 16) + 7, bytes = n * comm_dtype_size(t);
    void* out = malloc_check(bytes, "ring send");
    void* in = malloc_check(bytes, "ring receive");
    void* want = malloc_check(bytes, "ring expected");
    p2p_fill(out, t, n, g.rank, 0);
    memset(in, 0, bytes);
    p2p_fill(want, t, n, left, 0);
    CommP2P ops[2] = {{1, right, out, t, n, 0}, {0, left, in, t, n, 0}};
    comm_counters_reset(&g);
    comm_p2p_batch(&g, ops, 2);
    comm_join(&g);
    check_all(memcmp(in, want, bytes) == 0 && g.counters.calls == 1 && g.counters.bytes_sent == bytes &&
              g.counters.bytes_recv == bytes, "comm_p2p_batch ring of %zu %s (send to r+1, receive from r-1 in one "
              "batch): exact values from r-1, one call counting %zu bytes each way", n, name, bytes);
    free(out); free(in); free(want);
}

/* neighbours 2k and 2k+1 exchange two messages each way (tags 0 and 1) in one batch, posted in (peer, tag) order;
 * within a tag the lower rank sends first and the upper one receives first; a rank without a partner posts none */
static void test_p2p_batch_exchange(void) {
    int partner = g.rank ^ 1, paired = partner < g.world;
    const size_t n = 517, bytes = n * sizeof(float);
    float* out[2];
    float* in[2];
    float* want[2];
    CommP2P ops[4];
    int nops = 0;
    for (int tag = 0; tag < 2; tag++) {
        out[tag] = (float*)malloc_check(bytes, "exchange send");
        in[tag] = (float*)malloc_check(bytes, "exchange receive");
        want[tag] = (float*)malloc_check(bytes, "exchange expected");
        p2p_fill(out[tag], COMM_F32, n, g.rank, tag + 1);
        p2p_fill(want[tag], COMM_F32, n, partner, tag + 1);
        memset(in[tag], 0, bytes);
        if (!paired) { continue; }
        CommP2P snd = {1, partner, out[tag], COMM_F32, n, tag}, rcv = {0, partner, in[tag], COMM_F32, n, tag};
        ops[nops++] = g.rank < partner ? snd : rcv;
        ops[nops++] = g.rank < partner ? rcv : snd;
    }
    comm_counters_reset(&g);
    comm_p2p_batch(&g, ops, nops);
    comm_join(&g);
    int ok = !paired || (memcmp(in[0], want[0], bytes) == 0 && memcmp(in[1], want[1], bytes) == 0);
    size_t moved = paired ? 2 * bytes : 0;
    ok &= g.counters.calls == (paired ? 1u : 0u) && g.counters.bytes_sent == moved && g.counters.bytes_recv == moved;
    check_all(ok, "comm_p2p_batch exchange between ranks 2k and 2k+1: two messages each way (tags 0, 1) in one "
              "batch, each in its own buffer; %zu bytes counted each way", moved);
    for (int tag = 0; tag < 2; tag++) { free(out[tag]); free(in[tag]); free(want[tag]); }
}

int main(int argc, char** argv) {
    comm_init(&g, &argc, &argv, "", 60.0);
#ifdef COMM_HAVE_NCCL
    backend_init(g.local_rank, 0);
#endif
    comm_init_device(&g, ""); /* NCCL: the communicator (no-op on the MPI transport) */
    int N = g.world;
    mpi_checks.comm = &g;
    snprintf(mpi_checks.prefix, sizeof(mpi_checks.prefix), "[N=%d] ", N);
    size_t counts[] = {0, 1, (size_t)(N > 1 ? N - 1 : 1), 7, 1000, 12347};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) { test_all_reduce_f32(counts[i]); }
    test_types();
    test_owned(12347, 0, 12347 + (12347 % (size_t)N ? (size_t)N - 12347 % (size_t)N : 0));
    test_owned(12347, 100, 2000);
    test_owned(12347, 5000, 5001);
    test_owned(12347, 3, 12340);
    test_equal_count();
    test_determinism();
    test_segments(12347);
    test_segments(400);
    test_host_f64_chunks();
    test_p2p_and_groups();
    test_p2p_batch_empty();
    if (N > 1) {
        test_p2p_batch_ring(COMM_F32, "fp32");
        test_p2p_batch_ring(COMM_BF16, "bf16");
        test_p2p_batch_ring(COMM_F64, "fp64");
        test_p2p_batch_ring(COMM_I32, "int32");
        test_p2p_batch_exchange();
    }
    int rc = mpi_check_summary();
    comm_finalize(&g);
#ifdef COMM_HAVE_NCCL
    backend_shutdown();
#endif
    return rc;
}
