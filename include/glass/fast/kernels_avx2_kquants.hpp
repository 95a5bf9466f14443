/// \file
/// \brief glass/fast/kernels_avx2_kquants.hpp — the k-quant panels' products (Q4_K, Q5_K,
/// Q6_K; packed_kquants.hpp) for AVX2 + FMA.
/// ```text
/// The AVX-512 set's loops (kernels_avx512_kquants.hpp) at 8 lanes. Every product splits a row's
/// dot product into pieces over which a k-quant weight is S·q − M (S = d·sc, M = dmin·m, or
/// 32·S for Q6_K):
///     Σ_k w_k·x_k = Σ_pieces  S·(Σ q_k·x_k) − M·(Σ x_k)
/// so the inner loop multiplies small unsigned integers q by x, as Q4_0's does, and S and M
/// meet the sums once per piece and row. A piece is as long as its S and M hold: a whole
/// sub-block of 32 inputs for Q4_K and Q5_K (sc and m are per 32; half as many conversions as
/// pieces of 16, which at 8 lanes cost about as much as the products), 16 inputs for Q6_K.
/// Σ x over each piece is the same for every row: computed once per call.
///   decode, fp32 x    q widened to fp32 in registers, fused multiply-adds
///   decode, int8 x    AVX-VNNI: vpdpbusd, q (unsigned bytes) times qx (signed), 4 per lane;
///                     plain AVX2: vpmaddubsw (pairs, 16 bits) then vpmaddwd by ones (lanes)
///   prefill           a 128-input chunk (half a super-block) widened to fp32 weights, then the
///                     fp32 register tiles of kernels_avx2_matmul.hpp
/// A panel is four 8-row quarters here: one 32-byte half of a group's 64 nibble bytes holds
/// rows 8h .. 8h+7 (low nibbles) and 8h+16 .. 8h+23 (high), as for Q4_0 (matvec_q4, kernels_avx2.hpp).
/// Each kernel is a template on the layout (E: the bits above the nibble), so its offsets,
/// shift counts and masks are constants; matvec_k, matvec_int8_k and unpack_k_chunk pick the
/// instance. The table (kernels_avx2_attention.hpp) takes the *_all entries below: these for
/// k-quant panels, kernels_avx2.hpp's and kernels_avx2_matmul.hpp's for every other type.
/// ```
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "glass/fast/kernels_avx2_matmul.hpp"  // matmul_with, kChunk (and kernels_avx2.hpp)
#include "glass/fast/packed_kquants.hpp"
#include "glass/fast/packed_weights.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace glass::fast::avx2 {

// The layout of E, the bits of q above the nibble (0: Q4_K, 1: Q5_K, 2: Q6_K), as a constant:
// with a run-time layout the offsets need divisions and the accumulators leave the registers.
template <int E>
inline constexpr KQuantLayout kLayout{E, E < 2};
// Inputs over which S and M hold: a sub-block for Q4_K, Q5_K (sc, m per 32), 16 for Q6_K.
template <int E>
inline constexpr int kPiece = E < 2 ? 32 : 16;

// Group g (inputs 4g .. 4g+3) of a panel sub-block, 32-byte half `half` of it: q as unsigned
// bytes [8 rows][4 inputs], quarter `half` (rows 8·half ..) in `lo` and quarter 2 + half
// (rows 16 + 8·half ..) in `hi`. The extra bits (Q5_K, Q6_K) are shifted down to bit 0 of each
// byte, masked, and moved up above the nibble. (16-bit shifts: bits that cross into the next
// byte are masked off.)
GLASS_AVX2 inline __m256i load32(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
template <int E>
GLASS_AVX2 inline void k_group(const std::uint8_t* sub, int g, int half, __m256i& lo, __m256i& hi) {
    constexpr const KQuantLayout& L = kLayout<E>;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i v = load32(sub + kq_nibbles(g) + 32 * half);
    lo = _mm256_and_si256(v, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    if constexpr (E == 0) return;
    const __m256i mask = _mm256_set1_epi8(static_cast<char>((1 << E) - 1));
    const __m256i e = _mm256_srl_epi16(load32(sub + kq_extra_plane(L, g) + 32 * half), _mm_cvtsi32_si128(kq_extra_shift(L, g)));
    const __m256i e_hi = _mm256_srli_epi16(e, E);
    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(e, mask), 4));
    hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(e_hi, mask), 4));
}

// Decode asks for the panel bytes this far ahead (about three sub-blocks) while it multiplies
// the current sub-block, as the AVX-512 set does (kernels_avx512_kquants.hpp says what it buys).
constexpr int kPrefetchAhead = 2048;
template <int E>
GLASS_AVX2 inline void prefetch_ahead(const std::uint8_t* sub) {
    prefetch_lines(sub + kPrefetchAhead, kLayout<E>.sub_bytes());
}

// A super-block's d (and dmin), one register per quarter of rows.
struct KSuper {
    __m256 d[4], dmin[4];
};
template <int E>
GLASS_AVX2 inline KSuper k_super(const std::uint8_t* super) {
    const auto* h = reinterpret_cast<const std::uint16_t*>(super);
    KSuper k;
    for (int q = 0; q < 4; ++q) {
        k.d[q] = widen_fp16(h + 8 * q);
        k.dmin[q] = kLayout<E>.has_min ? widen_fp16(h + 32 + 8 * q) : _mm256_setzero_ps();
    }
    return k;
}

// S and M (w = S·q − M) of rows 8q .. 8q+7 over piece h of sub-block `sub` (Q4_K, Q5_K: the
// whole sub-block; Q6_K: inputs [16h, 16h + 16)): exact fp32 products, as packed_kquants.hpp's
// kq_scale_min.
struct KScale {
    __m256 s, m;
};
GLASS_AVX2 inline __m128i bytes8(const std::uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
GLASS_AVX2 inline __m256 unsigned_bytes_as_float(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }
template <int E>
GLASS_AVX2 inline KScale k_scale(const KSuper& k, const std::uint8_t* sub, int h, int q) {
    if constexpr (E == 2) {  // Q6_K: int8 scales, one per 16 inputs; M = 32·S
        const __m256 s = _mm256_mul_ps(k.d[q], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8(sub + 32 * h + 8 * q))));
        return {s, _mm256_mul_ps(_mm256_set1_ps(32.0f), s)};
    }
    const auto as_float = unsigned_bytes_as_float;
    return {_mm256_mul_ps(k.d[q], as_float(bytes8(sub + 8 * q))), _mm256_mul_ps(k.dmin[q], as_float(bytes8(sub + 32 + 8 * q)))};
}

// ---------------------------------------------------------------------------------------------
// Decode, fp32 x: y[r] (+)= Σ_k W(r,k)·x[k] for the rows of panels [p0, p1).
//
// sum + Σ_t q_t·x_t over one group for the 8 rows whose bytes are v (q < 64: widen_bytes' signed
// widening is exact). Two chains (t = 1, 0 and 3, 2) that meet in the add, as matvec_q8.
GLASS_AVX2 inline __m256 k_group_dot(__m256i v, const __m256 x4[4], __m256 sum) {
    __m256 q[4];
    widen_bytes(v, q);
    const __m256 a = _mm256_fmadd_ps(x4[0], q[0], _mm256_mul_ps(x4[1], q[1]));
    return _mm256_add_ps(sum, _mm256_fmadd_ps(x4[2], q[2], _mm256_fmadd_ps(x4[3], q[3], a)));
}

// Σ q·x over piece h of sub-block `sub` (x0: x of the sub-block's first input), per quarter of
// rows: 4 chains, each taking a group of 4 inputs a step.
template <int E>
GLASS_AVX2 inline void k_piece_dot(const std::uint8_t* sub, const float* x0, int h, __m256 qx[4]) {
    constexpr int groups = kPiece<E> / 4;
    for (int q = 0; q < 4; ++q) qx[q] = _mm256_setzero_ps();
    for (int g = groups * h; g < groups * (h + 1); ++g) {
        const float* xg = x0 + 4 * g;
        const __m256 x4[4] = {_mm256_set1_ps(xg[0]), _mm256_set1_ps(xg[1]), _mm256_set1_ps(xg[2]), _mm256_set1_ps(xg[3])};
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            __m256i lo, hi;
            k_group<E>(sub, g, half, lo, hi);
            qx[half] = k_group_dot(lo, x4, qx[half]);
            qx[2 + half] = k_group_dot(hi, x4, qx[2 + half]);
        }
    }
}

template <int E>
GLASS_AVX2 inline void matvec_k_layout(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    constexpr int piece = kPiece<E>, pieces = kSubBlock / piece;  // per sub-block
    const float* x_sums = piece_sums<float>(x, w.cols, piece);  // Σ x over each piece
    for (int p = p0; p < p1; ++p) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int s = 0; s < w.super_blocks(); ++s) {
            const std::uint8_t* super = w.super_block(p, s);
            const KSuper k = k_super<E>(super);
            for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
                const std::uint8_t* sub = super + kLayout<E>.sub_offset(j);
                prefetch_ahead<E>(sub);  // (past the matrix's end: harmless, a prefetch never faults)
                const int k0 = s * kSuperBlock + j * kSubBlock;
                for (int h = 0; h < pieces; ++h) {
                    __m256 qx[4];
                    k_piece_dot<E>(sub, x + k0, h, qx);
                    const __m256 xs = _mm256_set1_ps(x_sums[k0 / piece + h]);
#pragma GCC unroll 4
                    for (int q = 0; q < 4; ++q) {
                        const KScale sm = k_scale<E>(k, sub, h, q);
                        acc[q] = _mm256_fnmadd_ps(sm.m, xs, _mm256_fmadd_ps(sm.s, qx[q], acc[q]));
                    }
                }
            }
        }
        store_panel(y + p * kPanel, w.rows - p * kPanel, acc, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Decode, int8 x (Int8Vector: blocks of 32 = one sub-block each): per piece (Q4_K, Q5_K: the
// sub-block; Q6_K: 16 inputs) the exact integer sums Σ q·qx and Σ qx, then
//   Q4_K, Q5_K   (S·dx)·Σ q·qx − M·(dx·Σ qx)
//   Q6_K         (S·dx)·(Σ q·qx − 32·Σ qx): M = 32·S folds into the integers.
//
// a0 (+ a1) += each lane's Σ q·qx over two groups (q0 against x0, q1 against x1):
//   AVX-VNNI   one vpdpbusd per group, into two accumulators (two chains against its latency);
//   AVX2       vpmaddubsw per group: pairs q·qx + q'·qx' ≤ 2·63·128 in 16 bits, the two groups'
//              pairs added still in 16 bits (≤ 4·63·128 = 32256 < 2^15: no saturation, even
//              for Q6_K's q < 64), then one vpmaddwd by ones into the 32-bit lanes. a1 unused.
template <bool kVnni>
GLASS_AVX2 inline void k_pair_dot(__m256i& a0, __m256i& a1, __m256i q0, __m256i x0, __m256i q1, __m256i x1) {
    if constexpr (kVnni) {
        a0 = dpbusd_vex(a0, q0, x0);
        a1 = dpbusd_vex(a1, q1, x1);
    } else {
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(q0, x0), _mm256_maddubs_epi16(q1, x1));
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
    }
}

// Group g, half `half`, as vpdpbusd takes a Q4_K group: the bytes whole (lo + 16·hi) and the high
// nibbles in place (16·hi), one and instead of k_group's shift and two (int8_group_bytes does the
// same for Q4_0, kernels_avx2.hpp); k_piece_dot_int8 takes the two sums apart exactly.
GLASS_AVX2 inline void k_group_whole(const std::uint8_t* sub, int g, int half, __m256i& whole, __m256i& hi16) {
    whole = load32(sub + kq_nibbles(g) + 32 * half);
    hi16 = _mm256_and_si256(whole, _mm256_set1_epi8(static_cast<char>(0xF0)));
}

// Σ q·qx over piece h of sub-block `sub` (x's block xb), per quarter of rows.
template <bool kVnni, int E>
GLASS_AVX2 inline void k_piece_dot_int8(const std::uint8_t* sub, const std::int8_t* xb, int h, __m256i isum[4]) {
    constexpr int groups = kPiece<E> / 4;
    constexpr bool kWhole = kVnni && E == 0;  // Q4_K under vpdpbusd: k_group_whole
    const __m256i zero = _mm256_setzero_si256();
    __m256i a[4] = {zero, zero, zero, zero}, b[4] = {zero, zero, zero, zero};  // b: VNNI's second chains
    for (int g = groups * h; g < groups * (h + 1); g += 2) {
        // qx of inputs 4g .. 4g+3 and 4g+4 .. 4g+7 in every lane
        const __m256i b0 = broadcast_group(xb + 4 * g), b1 = broadcast_group(xb + 4 * g + 4);
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            __m256i l0, h0, l1, h1;
            if constexpr (kWhole) {
                k_group_whole(sub, g, half, l0, h0);
                k_group_whole(sub, g + 1, half, l1, h1);
            } else {
                k_group<E>(sub, g, half, l0, h0);
                k_group<E>(sub, g + 1, half, l1, h1);
            }
            k_pair_dot<kVnni>(a[half], b[half], l0, b0, l1, b1);
            k_pair_dot<kVnni>(a[2 + half], b[2 + half], h0, b0, h1, b1);
        }
    }
#pragma GCC unroll 4  // (rolled, GCC 12 kept isum on the stack and matvec_int8_k_layout read it back)
    for (int q = 0; q < 4; ++q) isum[q] = _mm256_add_epi32(a[q], b[q]);
    if constexpr (kWhole) {  // whole bytes in 0-1, 16·high nibbles in 2-3 (k_group_whole)
        separate_nibble_sums(isum[0], isum[2]);
        separate_nibble_sums(isum[1], isum[3]);
    }
}

template <bool kVnni, int E>
GLASS_AVX2 inline void matvec_int8_k_layout(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                            bool accumulate) {
    constexpr int piece = kPiece<E>, pieces = kSubBlock / piece;  // per sub-block
    // Σ qx over each piece: x's own block sums where a piece is a block of 32 (Q4_K, Q5_K); summed
    // here, per call, for Q6_K's pieces of 16 (a scalar pass over x cost Q4_K ~12 % of its time).
    const std::int32_t* x_sums = piece == kQuantBlock ? x.sums : piece_sums<std::int32_t>(x.q, w.cols, piece);
    for (int p = p0; p < p1; ++p) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int s = 0; s < w.super_blocks(); ++s) {
            const std::uint8_t* super = w.super_block(p, s);
            const KSuper k = k_super<E>(super);
            for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
                const std::uint8_t* sub = super + kLayout<E>.sub_offset(j);
                prefetch_ahead<E>(sub);  // (past the matrix's end: harmless, a prefetch never faults)
                const int b = s * (kSuperBlock / kSubBlock) + j;  // x's block
                for (int h = 0; h < pieces; ++h) {
                    __m256i isum[4];
                    k_piece_dot_int8<kVnni, E>(sub, x.q + b * kQuantBlock, h, isum);
                    const std::int32_t sx = x_sums[b * pieces + h];
                    const __m256 dx = _mm256_set1_ps(x.scales[b]), xs = _mm256_set1_ps(x.scales[b] * static_cast<float>(sx));
                    const __m256i offset = _mm256_set1_epi32(32 * sx);  // Q6_K's M = 32·S, in the integers
#pragma GCC unroll 4
                    for (int q = 0; q < 4; ++q) {
                        const KScale sm = k_scale<E>(k, sub, h, q);
                        const __m256i qqx = E == 2 ? _mm256_sub_epi32(isum[q], offset) : isum[q];
                        acc[q] = _mm256_fmadd_ps(_mm256_mul_ps(sm.s, dx), _mm256_cvtepi32_ps(qqx), acc[q]);
                        if constexpr (E < 2) acc[q] = _mm256_fnmadd_ps(sm.m, xs, acc[q]);
                    }
                }
            }
        }
        store_panel(y + p * kPanel, w.rows - p * kPanel, acc, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Prefill: inputs [k0, k0 + kc) of panel p as fp32 weights, chunk[k][32 rows] (32-byte aligned),
// w = S·q − M. k0 and kc are multiples of 32 (kChunk = 128: half a super-block, the half
// (k0 mod 256) / 128), so the chunk is whole sub-blocks of one or more super-blocks.
template <int E>
GLASS_AVX2 inline void unpack_k_chunk_layout(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    constexpr int groups = kPiece<E> / 4;  // per piece
    for (int kk = 0; kk < kc; kk += kSubBlock) {
        const std::uint8_t* super = w.super_block(p, (k0 + kk) / kSuperBlock);
        const std::uint8_t* sub = super + kLayout<E>.sub_offset((k0 + kk) % kSuperBlock / kSubBlock);
        const KSuper k = k_super<E>(super);  // again per sub-block: 8 conversions per 1024 weights
        for (int h = 0; h < kSubBlock / kPiece<E>; ++h) {
            KScale sm[4];
            for (int q = 0; q < 4; ++q) sm[q] = k_scale<E>(k, sub, h, q);
            for (int g = groups * h; g < groups * (h + 1); ++g) {
                float* out = chunk + (kk + 4 * g) * 32;  // inputs 4g .. 4g+3 of the sub-block
#pragma GCC unroll 2
                for (int half = 0; half < 2; ++half) {
                    __m256i lo, hi;
                    k_group<E>(sub, g, half, lo, hi);
                    __m256 wl[4], wh[4];
                    widen_bytes(lo, wl);
                    widen_bytes(hi, wh);
                    const KScale &a = sm[half], &b = sm[2 + half];
#pragma GCC unroll 4
                    for (int t = 0; t < 4; ++t) {
                        _mm256_store_ps(out + 32 * t + 8 * half, _mm256_sub_ps(_mm256_mul_ps(a.s, wl[t]), a.m));
                        _mm256_store_ps(out + 32 * t + 16 + 8 * half, _mm256_sub_ps(_mm256_mul_ps(b.s, wh[t]), b.m));
                    }
                }
            }
        }
    }
}

// The entries for any k-quant panel: the layout's instance of each kernel.
GLASS_AVX2 inline void matvec_k(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    if (w.type == WeightType::q4_k) return matvec_k_layout<0>(w, x, y, p0, p1, accumulate);
    if (w.type == WeightType::q5_k) return matvec_k_layout<1>(w, x, y, p0, p1, accumulate);
    matvec_k_layout<2>(w, x, y, p0, p1, accumulate);
}
template <bool kVnni>
GLASS_AVX2 inline void matvec_int8_k(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1, bool accumulate) {
    if (w.type == WeightType::q4_k) return matvec_int8_k_layout<kVnni, 0>(w, x, y, p0, p1, accumulate);
    if (w.type == WeightType::q5_k) return matvec_int8_k_layout<kVnni, 1>(w, x, y, p0, p1, accumulate);
    matvec_int8_k_layout<kVnni, 2>(w, x, y, p0, p1, accumulate);
}
GLASS_AVX2 inline void unpack_k_chunk(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    static_assert(kSuperBlock % kChunk == 0 && kChunk % kSubBlock == 0, "a prefill chunk is whole sub-blocks");
    if (w.type == WeightType::q4_k) return unpack_k_chunk_layout<0>(w, p, k0, kc, chunk);
    if (w.type == WeightType::q5_k) return unpack_k_chunk_layout<1>(w, p, k0, kc, chunk);
    unpack_k_chunk_layout<2>(w, p, k0, kc, chunk);
}

// ---- The table's entries: k-quant panels here, every other type in kernels_avx2(_matmul).hpp
GLASS_AVX2 inline void matvec_all(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    if (is_k_quant(w.type)) return matvec_k(w, x, y, p0, p1, accumulate);
    matvec(w, x, y, p0, p1, accumulate);
}
// Plain AVX2 (vpmaddubsw) and AVX-VNNI (vpdpbusd), as matvec_int8 and matvec_int8_vnni.
GLASS_AVX2 inline void matvec_int8_all(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                       bool accumulate) {
    if (is_k_quant(w.type)) return matvec_int8_k<false>(w, x, y, p0, p1, accumulate);
    matvec_int8(w, x, y, p0, p1, accumulate);
}
GLASS_AVX2 inline void matvec_int8_vnni_all(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                            bool accumulate) {
    if (is_k_quant(w.type)) return matvec_int8_k<true>(w, x, y, p0, p1, accumulate);
    matvec_int8_vnni(w, x, y, p0, p1, accumulate);
}
GLASS_AVX2 inline void matmul_all(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                                  bool accumulate, float* scratch) {
    if (is_k_quant(w.type)) return matmul_with(unpack_k_chunk, w, xp, n, y, ldy, p0, p1, accumulate, scratch);
    matmul(w, xp, n, y, ldy, p0, p1, accumulate, scratch);
}

}  // namespace glass::fast::avx2

#pragma GCC diagnostic pop

#endif  // __x86_64__
