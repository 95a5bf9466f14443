/// \file
/// \brief glass/fast/kernels_avx2_matmul.hpp — the AVX2 set's products for several tokens at
/// once: prefill, and decode of a batch (matmul), with one token as the batch-of-one case.
/// ```text
/// in    PackedMatrix w (any type but the k-quants, whose chunks kernels_avx2_kquants.hpp widens),
///       n tokens packed by pack_tokens (token_tiles.hpp)
/// out   Y[t][r] (+)= Σ_k W(r,k) · X[t][k] for the rows of panels [p0, p1)
///
/// Inputs go chunk by chunk (kChunk = 128: 32 rows × 128 × 4 B = 16 KiB, half of Zen 3's 32 KiB
/// L1; the AVX-512 set's chunk is 256). A chunk that is not fp32 is widened once into scratch;
/// then register tiles of 1-3 tokens × 32 rows run over it (below). A lone token takes up to
/// three panels per pass instead (matmul_one_token).
/// ```
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "glass/fast/kernels_avx2.hpp"  // GLASS_AVX2, store_panel, widen_*, q8_group_bytes
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/token_tiles.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace glass::fast::avx2 {

constexpr int kChunk = 128;  // prefill: inputs per panel chunk. 32 rows × 128 × 4 B = 16 KiB,
                             // half of a 32 KiB L1, the other half for the tokens and outputs.
// With more than 3 tokens, several passes go over each chunk; only the first would read it from
// memory (in place for fp32, by unpack_chunk for the others), the rest from L1 while no load of
// the panel is in flight, so reading and multiplying would take turns. Instead the passes share
// out the next chunk's stored bytes (fp32 16 KiB; the bytes that follow in the panel, or the
// next panel's first chunk): pass i of P asks for its i-th P-th, one line every few inputs
// (PanelPrefetch). With more than kPrefetchingPasses passes (over 20 tokens) only the first 8
// share it (fp32: a new line every fourth input), so a long prompt's dozens of passes do not each
// spend a load slot per input on it. A prefetch changes no number.
// Zen 3 VM, 2 threads, 64 matrices of 2048 × 768 streamed, against the first pass alone
// prefetching 4 KiB ahead, paired rounds (medians): fp32 8 tokens 1.25x, 12 1.43x, 16 1.33-1.43x,
// 32 1.21x, 64 1.09x, 512 1.01x, 4-5 tokens 0.97-1.01x; Q8_0/fp16/Q4_0 at 8-16 tokens
// 1.06-1.15x. With a 128 × 768 matrix in L2 (nothing to overlap) it costs 1-3 %.
constexpr int kPrefetchingPasses = 8;

// ---------------------------------------------------------------------------------------------
// Prefill: Y[t][r] (+)= Σ_k W(r,k) · X[t][k] for tokens t < n and the rows of panels [p0, p1).
//
// Register tile: 3 tokens × the panel's 32 rows = 12 accumulators, + 3 broadcasts of x + 1
// weight register = all 16 ymm registers. Per input k: 4 loads of weights, 3 broadcasts, 12
// FMAs, so each loaded weight is used 3 times from a register. (The AVX-512 set's 12 × 32 tile
// would need 48 registers here.) A packed token tile (≤ 12 tokens, [kc][m]) is run three tokens
// at a time over the same chunk, which stays in L1 after the first pass.
//
// Why whole panels: each k's 128 bytes of weights are two cache lines, and a pass that reads all
// of them streams from memory at full rate. The set first cut the panel into two 16-row halves
// (6 tokens × 16 rows: 12 accumulators too); each pass then read every other 64-byte line, and
// the weights streamed at about half the rate. Zen 5, AVX2 set, 2 threads, 2048 × 768 fp32
// matrices streamed from memory: 8 tokens 22 → 29 GB/s, 16 tokens 15 → 19 GB/s (121 → 151
// GFLOP/s); in L2, 12 tokens reach ~95 % of the FMA probe. Each y is the same chain of FMAs over
// k either way, so the numbers are the same bits.

// What a pass asks for ahead of use: at input k, the line holding byte `at + k · step` (at =
// nullptr: nothing). A step under 64 asks for some lines more than once, which costs a load slot
// and no memory traffic.
struct PanelPrefetch {
    const char* at = nullptr;
    int step = 0;
};
GLASS_AVX2 inline void prefetch_input(PanelPrefetch ahead, int k) {
    if (ahead.at) _mm_prefetch(ahead.at + k * ahead.step, _MM_HINT_T0);
}

// M = 1, 2 or 3 tokens × the panel's 32 rows: 4M accumulators (three tokens fill the register
// file: 12 accumulators, 3 broadcasts of x, 1 weight register).
// Named variables rather than an array of accumulators: with an array GCC 12 keeps them in
// registers but also stores every one to the stack at each k. For two tokens that cost two
// thirds of the speed: one Zen 3 core, a 128 × 768 fp32 matrix in L2, 28 GFLOP/s against 87 for
// three tokens. The unused variables of M < 3 are never read, and the compiler drops them.
template <int M>
GLASS_AVX2 inline void matmul_tile_panel(const float* x, int m, const float* chunk, int kc, float* y, long ldy,
                                         int valid, bool accumulate, PanelPrefetch ahead = {}) {
    static_assert(M >= 1 && M <= 3, "12 accumulators at most");
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // token 0: rows 0-7, 8-15, 16-23, 24-31
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // token 1 (M ≥ 2)
    __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                   // token 2 (M = 3)
    for (int k = 0; k < kc; ++k) {
        const float* wk = chunk + k * 32;  // [32] rows of input k
        prefetch_input(ahead, k);
        const __m256 xa = _mm256_broadcast_ss(x + k * m);
        const __m256 xb = M > 1 ? _mm256_broadcast_ss(x + k * m + 1) : xa;
        const __m256 xc = M > 2 ? _mm256_broadcast_ss(x + k * m + 2) : xa;
        __m256 w = _mm256_load_ps(wk);
        a0 = _mm256_fmadd_ps(xa, w, a0);
        if constexpr (M > 1) b0 = _mm256_fmadd_ps(xb, w, b0);
        if constexpr (M > 2) c0 = _mm256_fmadd_ps(xc, w, c0);
        w = _mm256_load_ps(wk + 8);
        a1 = _mm256_fmadd_ps(xa, w, a1);
        if constexpr (M > 1) b1 = _mm256_fmadd_ps(xb, w, b1);
        if constexpr (M > 2) c1 = _mm256_fmadd_ps(xc, w, c1);
        w = _mm256_load_ps(wk + 16);
        a2 = _mm256_fmadd_ps(xa, w, a2);
        if constexpr (M > 1) b2 = _mm256_fmadd_ps(xb, w, b2);
        if constexpr (M > 2) c2 = _mm256_fmadd_ps(xc, w, c2);
        w = _mm256_load_ps(wk + 24);
        a3 = _mm256_fmadd_ps(xa, w, a3);
        if constexpr (M > 1) b3 = _mm256_fmadd_ps(xb, w, b3);
        if constexpr (M > 2) c3 = _mm256_fmadd_ps(xc, w, c3);
    }
    const __m256 token0[4] = {a0, a1, a2, a3}, token1[4] = {b0, b1, b2, b3}, token2[4] = {c0, c1, c2, c3};
    store_panel(y, valid, token0, accumulate);
    if constexpr (M > 1) store_panel(y + ldy, valid, token1, accumulate);
    if constexpr (M > 2) store_panel(y + 2 * ldy, valid, token2, accumulate);
}

// One token over P = 1, 2 or 3 fp32 panels at once: 4P accumulators (12 at most, which with the
// broadcast x fill 13 of the 16 registers; the FMAs read the weights straight from memory).
// Why: one panel alone gives only 4 chains, each waiting an FMA's latency (4 cycles) per input,
// so it computes at half the FMA rate, and after a load that misses it catches up at that rate.
// Two panels give 8 chains and two streams of weights; three give 12 and three streams. Each y is
// still one chain of FMAs over k, so the bits are those of matmul_tile_panel<1>.
// Zen 5 VM, AVX2 set, 2 threads, 64 fp32 matrices of 2048 × 768 streamed, three rounds
// alternated: two panels per pass against one, 50.0-54.7 → 59.8-61.8 GB/s (read probe 64-77 GB/s
// those minutes); work items of 3 panels (stories110M's 768 × 768 matrices), three per pass
// against two + one, 39.1-41.4 → 44.2-44.5 GB/s (a slow minute).
// Named variables rather than an array, as in matmul_tile_panel (GCC 12 spills the array).
template <int P>
GLASS_AVX2 inline void matmul_one_token_panels(const float* x, const float* const chunks[], int kc, float* y,
                                               int valid, bool accumulate) {
    static_assert(P >= 1 && P <= 3, "12 accumulators at most");
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // panel 0: rows 0-7, 8-15, 16-23, 24-31
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // panel 1 (P ≥ 2)
    __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                   // panel 2 (P = 3)
    const float* wa = chunks[0];  // [kc][32] each
    const float* wb = chunks[P > 1 ? 1 : 0];
    const float* wc = chunks[P > 2 ? 2 : 0];
    for (int k = 0; k < kc; ++k, wa += 32, wb += 32, wc += 32) {
        const __m256 xk = _mm256_broadcast_ss(x + k);
        a0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa), a0), a1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 8), a1);
        a2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 16), a2), a3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 24), a3);
        if constexpr (P > 1) {
            b0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb), b0), b1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 8), b1);
            b2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 16), b2), b3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 24), b3);
        }
        if constexpr (P > 2) {
            c0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc), c0), c1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc + 8), c1);
            c2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc + 16), c2), c3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc + 24), c3);
        }
    }
    const __m256 panel0[4] = {a0, a1, a2, a3}, panel1[4] = {b0, b1, b2, b3}, panel2[4] = {c0, c1, c2, c3};
    store_panel(y, valid, panel0, accumulate);
    if constexpr (P > 1) store_panel(y + kPanel, valid - kPanel, panel1, accumulate);
    if constexpr (P > 2) store_panel(y + 2 * kPanel, valid - 2 * kPanel, panel2, accumulate);
}

// A lone token (decode's batch of one) over fp32 panels [p0, p1): three panels per pass while
// three are left, then two or one; chunk by chunk, as the tiles below.
GLASS_AVX2 inline void matmul_one_token(const PackedMatrix& w, const float* x, float* y, int p0, int p1,
                                        bool accumulate) {
    for (int P; p0 < p1; p0 += P) {
        P = std::min(3, p1 - p0);
        for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
            const int kc = std::min(kChunk, w.cols - k0);
            const float* chunks[3];
            for (int q = 0; q < P; ++q) chunks[q] = reinterpret_cast<const float*>(w.panel(p0 + q)) + std::int64_t{k0} * 32;
            const bool add = accumulate || k0 > 0;  // after the first chunk, add to what is in y
            float* yp = y + p0 * kPanel;
            const int valid = w.rows - p0 * kPanel;  // rows from p0's first that exist
            switch (P) {
                case 3: matmul_one_token_panels<3>(x + k0, chunks, kc, yp, valid, add); break;
                case 2: matmul_one_token_panels<2>(x + k0, chunks, kc, yp, valid, add); break;
                default: matmul_one_token_panels<1>(x + k0, chunks, kc, yp, valid, add); break;
            }
        }
    }
}

// Q4_0 inputs [k0, k0+kc) of a panel as fp32 d · q, [kc][32], without giving the nibbles a sign
// (as matvec_q4, kernels_avx2.hpp): a byte masked in place is v · 2^(8t), v = q + 8, and
//     d · q  =  fma(v · 2^(8t),  d · 2^(−8t),  −8d),
// the very float the signed form (q widened with its sign, times d: Q8_0's, below) gives: d, an
// fp16, has 11 significant bits and q at most 4, so d · q needs 15 of fp32's 24 and neither form
// rounds. Per 8 rows and 4 inputs: 4 AND/shift + 4 converts + 4 FMAs, where the signed form takes
// a table lookup, 7 shifts, 4 converts and 4 multiplies. A chunk that ends inside a group gets
// that group's padding inputs too (q = 0, stored as 8: 0 · d).
GLASS_AVX2 inline void unpack_q4_chunk(const unsigned char* panel, int k0, int kc, float* chunk) {
    const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
    for (int b0 = 0; b0 < kc; b0 += kQuantBlock) {  // k0 is a multiple of 32 (kChunk is)
        const unsigned char* block = panel + (k0 + b0) / kQuantBlock * kQ4BlockBytes;
        const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
        const int groups = (std::min(kQuantBlock, kc - b0) + 3) / 4;
        for (int q = 0; q < 4; ++q) {  // rows 8q .. 8q+7: low nibbles of half q % 2, or high
            const __m256 d = widen_fp16(scales + 8 * q), minus_8d = _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
            const __m256 d1 = _mm256_mul_ps(d, _mm256_set1_ps(0x1p-8f)), d2 = _mm256_mul_ps(d, _mm256_set1_ps(0x1p-16f));
            for (int g = 0; g < groups; ++g) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kPanel * 2 + g * 64 + (q % 2) * 32));
                const __m256i u = _mm256_and_si256(q < 2 ? v : _mm256_srli_epi16(v, 4), low_nibbles);
                __m256 wv[4];
                widen_nibbles(u, wv);
                float* out = chunk + (b0 + 4 * g) * 32 + 8 * q;
                _mm256_store_ps(out, _mm256_fmadd_ps(wv[0], d, minus_8d));
                _mm256_store_ps(out + 32, _mm256_fmadd_ps(wv[1], d1, minus_8d));
                _mm256_store_ps(out + 64, _mm256_fmadd_ps(wv[2], d2, minus_8d));
                _mm256_store_ps(out + 96, _mm256_fmadd_ps(wv[3], d, minus_8d));
            }
        }
    }
}

// Widens inputs [k0, k0+kc) of panel p into fp32 `chunk` [kc][32] (32-byte aligned): done once
// per chunk for fp16, bf16, Q8_0 and Q4_0 (unpack_q4_chunk, above), then reused by every token
// of the prompt. Q8_0's signed bytes: d · q, q widened with its sign.
GLASS_AVX2 inline void unpack_chunk(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    const unsigned char* panel = w.panel(p);
    if (w.type == WeightType::q4_0) return unpack_q4_chunk(panel, k0, kc, chunk);
    if (w.type == WeightType::q8_0) {  // k0: a multiple of 32 (kChunk is)
        const std::int64_t block_bytes = w.block_bytes();
        // Whole groups of 4 inputs: a chunk that ends inside one gets its padding inputs too
        // (q = 0), which kChunk, a multiple of 4, leaves room for.
        for (int k = 0; k < kc; k += 4) {
            const unsigned char* block = panel + (k0 + k) / kQuantBlock * block_bytes;
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
            for (int q = 0; q < 4; ++q) {
                const __m256 d = widen_fp16(scales + 8 * q);
                __m256 wq[4];
                widen_bytes(q8_group_bytes(block, (k0 + k) % kQuantBlock / 4, q), wq);
                for (int t = 0; t < 4; ++t) _mm256_store_ps(chunk + (k + t) * 32 + 8 * q, _mm256_mul_ps(wq[t], d));
            }
        }
        return;
    }
    const auto* ph = reinterpret_cast<const std::uint16_t*>(panel) + std::int64_t{k0} * 32;
    const bool is_fp16 = w.type == WeightType::fp16;
    for (int i = 0; i < kc * 32; i += 8)
        _mm256_store_ps(chunk + i, is_fp16 ? widen_fp16(ph + i) : widen_bf16(ph + i));
}

// How many of the `left` tokens of a tile the next pass over a chunk takes: three while that
// leaves none or at least two, so 4 = 2 + 2 and 7 = 3 + 2 + 2 rather than 3 + 1 and 3 + 3 + 1.
// A lone token gives only 4 FMA chains, each waiting an FMA's latency per input: half the FMA
// rate. (Only a tile of one token, m = 1, has a pass of 1.)
inline int tokens_in_pass(int left) { return left == 4 || left < 3 ? std::min(left, 2) : 3; }
// Bytes of one chunk (kChunk inputs) of a panel as stored, which follow each other in the panel;
// 0 for the k-quants, whose super-blocks of 256 inputs are not cut at chunk boundaries.
inline int stored_chunk_bytes(const PackedMatrix& w) {
    if (is_k_quant(w.type)) return 0;
    if (is_quantized(w.type)) return kChunk / kQuantBlock * w.block_bytes();
    return static_cast<int>(w.panel_bytes() / w.cols * kChunk);  // fp32, fp16, bf16: the same bytes per input
}
// Passes over each chunk for n tokens (all their tiles).
inline int passes_over_chunk(int n) {
    int passes = 0;
    for (int i = 0; i < token_tiles(n); ++i) {
        const TokenTile tile = token_tile(n, i);
        for (int t = tile.t0; t < tile.t1; t += tokens_in_pass(tile.t1 - t)) ++passes;
    }
    return passes;
}

// xp: the n tokens packed by pack_tokens (token_tiles.hpp) with cols = w.cols.
// `scratch` holds kChunk × 32 floats, 32-byte aligned (one per thread). `unpack(w, p, k0, kc,
// chunk)` widens a chunk of a panel that is not fp32 (unpack_chunk; the k-quants' in
// kernels_avx2_kquants.hpp).
template <class Unpack>
GLASS_AVX2 inline void matmul_with(Unpack unpack, const PackedMatrix& w, const float* xp, int n, float* y, long ldy,
                                   int p0, int p1, bool accumulate, float* scratch) {
    if (n == 1 && w.type == WeightType::fp32) return matmul_one_token(w, xp, y, p0, p1, accumulate);
    const int passes = passes_over_chunk(n);
    const int chunk_bytes = stored_chunk_bytes(w);  // 0: the passes prefetch nothing
    const int sharing = std::min(passes, kPrefetchingPasses);
    for (int p = p0; p < p1; ++p) {
        const int valid = w.rows - p * kPanel;  // rows of this panel that exist
        for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
            const int kc = std::min(kChunk, w.cols - k0);
            const float* chunk = scratch;
            if (w.type == WeightType::fp32)  // already fp32 (and 64-byte aligned): use it in place
                chunk = reinterpret_cast<const float*>(w.panel(p)) + std::int64_t{k0} * 32;
            else
                unpack(w, p, k0, kc, scratch);
            const bool add = accumulate || k0 > 0;  // after the first chunk, add to what is in y
            // With more than one pass over the chunk (n > 3), the passes share out the prefetch
            // of the next chunk's stored bytes (see PanelPrefetch).
            const char* next = reinterpret_cast<const char*>(w.panel(p)) + std::int64_t{k0 / kChunk + 1} * chunk_bytes;
            const int share = passes > 1 ? (chunk_bytes / sharing + kc - 1) / kc : 0;  // bytes per input
            int pass_index = 0;
            for (int i = 0; i < token_tiles(n); ++i) {
                const TokenTile tile = token_tile(n, i);
                const int m = tile.t1 - tile.t0;
                const float* xt = xp + std::int64_t{tile.t0} * w.cols + std::int64_t{k0} * m;  // [kc][m]
                float* yt = y + tile.t0 * ldy + p * kPanel;
                for (int t = 0, pass; t < m; t += pass, ++pass_index) {
                    pass = tokens_in_pass(m - t);
                    const PanelPrefetch ahead =
                        share && pass_index < sharing ? PanelPrefetch{next + pass_index * kc * share, share} : PanelPrefetch{};
                    if (pass == 3) matmul_tile_panel<3>(xt + t, m, chunk, kc, yt + t * ldy, ldy, valid, add, ahead);
                    else if (pass == 2) matmul_tile_panel<2>(xt + t, m, chunk, kc, yt + t * ldy, ldy, valid, add, ahead);
                    else matmul_tile_panel<1>(xt + t, m, chunk, kc, yt + t * ldy, ldy, valid, add, ahead);
                }
            }
        }
    }
}
GLASS_AVX2 inline void matmul(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                              bool accumulate, float* scratch) {
    matmul_with(unpack_chunk, w, xp, n, y, ldy, p0, p1, accumulate, scratch);
}

}  // namespace glass::fast::avx2

#pragma GCC diagnostic pop

#endif  // __x86_64__
