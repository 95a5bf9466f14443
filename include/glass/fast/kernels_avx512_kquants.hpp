/// \file
/// \brief glass/fast/kernels_avx512_kquants.hpp — the k-quant panels' products (Q4_K, Q5_K,
/// Q6_K; packed_kquants.hpp) for AVX-512.
/// ```text
/// Every product splits a row's dot product into pieces over which a k-quant weight is S·q − M
/// (S = d·sc, M = dmin·m, or 32·S for Q6_K):
///     Σ_k w_k·x_k = Σ_pieces  S·(Σ q_k·x_k) − M·(Σ x_k)
/// so the inner loop multiplies small unsigned integers q by x, as Q4_0's does, and S and M
/// meet the sums once per piece and row: a whole sub-block of 32 inputs for Q4_K and Q5_K (sc
/// and m are per 32), 16 inputs for Q6_K. Σ x over each piece is the same for every row:
/// computed once per call. Each kernel is a template on the layout (E: the bits above the
/// nibble), so its offsets, shift counts and masks are constants.
///   decode, fp32 x    q widened to fp32 in registers, fused multiply-adds
///   decode, int8 x    vpdpbusd: q (unsigned bytes) times qx (signed), 4 per 32-bit lane
///   prefill           a 256-input chunk (one super-block) widened to fp32 weights, then the
///                     fp32 register tiles of kernels_avx512.hpp
/// The table (kernels_avx512_attention.hpp) takes the *_all entries below: these for k-quant
/// panels, kernels_avx512.hpp's for every other type.
/// ```
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "glass/fast/kernels_avx512.hpp"
#include "glass/fast/packed_kquants.hpp"
#include "glass/fast/packed_weights.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace glass::fast::avx512 {

// The layout of E, the bits of q above the nibble (0: Q4_K, 1: Q5_K, 2: Q6_K), as a constant:
// each kernel is a template on it, so offsets, shift counts and masks are immediates (with a
// run-time layout they cost divisions and spill the accumulators).
template <int E>
inline constexpr KQuantLayout kLayout{E, E < 2};
// Inputs over which S and M hold: a whole sub-block for Q4_K, Q5_K (sc, m per 32), 16 for Q6_K.
template <int E>
inline constexpr int kPiece = E < 2 ? 32 : 16;

// Group g (inputs 4g .. 4g+3) of a panel sub-block: q as unsigned bytes, rows 0..15 in `lo`
// and rows 16..31 in `hi`, each [16 rows][4 inputs] (a row's 4 inputs in one 32-bit lane).
// The nibbles are Q4_0's bytes; the extra bits (Q5_K, Q6_K) are shifted down to bit 0 of each
// byte, masked, and moved up above the nibble. (16-bit shifts: bits that cross into the next
// byte are masked off.)
template <int E>
GLASS_AVX512 inline void k_group(const std::uint8_t* sub, int g, __m512i& lo, __m512i& hi) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_loadu_si512(sub + kq_nibbles(g));
    lo = _mm512_and_si512(v, low4);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    if constexpr (E > 0) {
        constexpr const KQuantLayout& L = kLayout<E>;
        const __m512i mask = _mm512_set1_epi8(static_cast<char>((1 << E) - 1));
        const __m512i e = _mm512_srl_epi16(_mm512_loadu_si512(sub + kq_extra_plane(L, g)), _mm_cvtsi32_si128(kq_extra_shift(L, g)));
        lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(e, mask), 4));
        hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(e, E), mask), 4));
    }
}

// Decode asks for the panel bytes this far ahead (about three sub-blocks) while it multiplies
// the current sub-block: the hardware prefetcher alone leaves decode waiting on memory (a 1B
// Q4_K_M model, 2 threads: 35.5 tokens/s without, 42 with; 1 KB ahead 41, 4 KB 37).
constexpr int kPrefetchAhead = 2048;
template <int E>
GLASS_AVX512 inline void prefetch_ahead(const std::uint8_t* sub) {
    for (int l = 0; l < kLayout<E>.sub_bytes(); l += 64) _mm_prefetch(reinterpret_cast<const char*>(sub) + kPrefetchAhead + l, _MM_HINT_T0);
}

// Byte t of each 32-bit lane (input 4g + t of 16 rows) as fp32.
GLASS_AVX512 inline __m512 byte_as_float(__m512i v, int t) {
    const __m512i byte = _mm512_set1_epi32(0xFF);
    switch (t) {
        case 0: return _mm512_cvtepi32_ps(_mm512_and_si512(v, byte));
        case 1: return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8), byte));
        case 2: return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 16), byte));
        default: return _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 24));
    }
}

// A super-block's d (and dmin) for rows 0..15 and 16..31.
struct KSuper {
    __m512 d_lo, d_hi, dmin_lo, dmin_hi;
};
template <int E>
GLASS_AVX512 inline KSuper k_super(const std::uint8_t* super) {
    const auto* h = reinterpret_cast<const std::uint16_t*>(super);
    KSuper k{widen_fp16(h), widen_fp16(h + 16), _mm512_setzero_ps(), _mm512_setzero_ps()};
    if constexpr (E < 2) k.dmin_lo = widen_fp16(h + 32), k.dmin_hi = widen_fp16(h + 48);
    return k;
}

// S and M (w = S·q − M) of piece h of sub-block `sub` (Q4_K, Q5_K: the whole sub-block; Q6_K:
// inputs [16h, 16h + 16)), rows 0..15 and 16..31: exact fp32 products, as packed_kquants.hpp's
// kq_scale_min.
struct KScales {
    __m512 s_lo, s_hi, m_lo, m_hi;
};
GLASS_AVX512 inline __m512 bytes_as_float(const std::uint8_t* p, bool is_signed) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}
template <int E>
GLASS_AVX512 inline KScales k_scales(const KSuper& k, const std::uint8_t* sub, int h) {
    if constexpr (E == 2) {  // Q6_K: int8 scales, one per 16 inputs; M = 32·S
        const __m512 s_lo = _mm512_mul_ps(k.d_lo, bytes_as_float(sub + 32 * h, true));
        const __m512 s_hi = _mm512_mul_ps(k.d_hi, bytes_as_float(sub + 32 * h + 16, true));
        const __m512 c32 = _mm512_set1_ps(32.0f);
        return {s_lo, s_hi, _mm512_mul_ps(c32, s_lo), _mm512_mul_ps(c32, s_hi)};
    }
    return {_mm512_mul_ps(k.d_lo, bytes_as_float(sub, false)), _mm512_mul_ps(k.d_hi, bytes_as_float(sub + 16, false)),
            _mm512_mul_ps(k.dmin_lo, bytes_as_float(sub + 32, false)), _mm512_mul_ps(k.dmin_hi, bytes_as_float(sub + 48, false))};
}

// ---------------------------------------------------------------------------------------------
// Decode, fp32 x: y[r] (+)= Σ_k W(r,k)·x[k] for the rows of panels [p0, p1).
//
// Σ q·x over piece h of sub-block `sub` (x0: x of its first input), rows 0..15 and 16..31: one
// accumulator per input of a group, per 16 rows (8 chains against the FMA latency).
template <int E>
GLASS_AVX512 inline void k_piece_dot(const std::uint8_t* sub, const float* x0, int h, __m512& qx_lo, __m512& qx_hi) {
    constexpr int groups = kPiece<E> / 4;
    __m512 a[4] = {}, b[4] = {};
    for (int g = groups * h; g < groups * (h + 1); ++g) {
        __m512i lo, hi;
        k_group<E>(sub, g, lo, hi);
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
            const __m512 xt = _mm512_set1_ps(x0[4 * g + t]);
            a[t] = _mm512_fmadd_ps(xt, byte_as_float(lo, t), a[t]);
            b[t] = _mm512_fmadd_ps(xt, byte_as_float(hi, t), b[t]);
        }
    }
    qx_lo = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    qx_hi = _mm512_add_ps(_mm512_add_ps(b[0], b[1]), _mm512_add_ps(b[2], b[3]));
}

template <int E>
GLASS_AVX512 inline void matvec_k_layout(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    constexpr int piece = kPiece<E>, pieces = kSubBlock / piece;  // per sub-block
    const float* x_sums = piece_sums<float>(x, w.cols, piece);  // Σ x over each piece
    for (int p = p0; p < p1; ++p) {
        __m512 acc_lo = _mm512_setzero_ps(), acc_hi = _mm512_setzero_ps();
        for (int s = 0; s < w.super_blocks(); ++s) {
            const std::uint8_t* super = w.super_block(p, s);
            const KSuper k = k_super<E>(super);
            for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
                const std::uint8_t* sub = super + kLayout<E>.sub_offset(j);
                prefetch_ahead<E>(sub);
                const int k0 = s * kSuperBlock + j * kSubBlock;
                for (int h = 0; h < pieces; ++h) {
                    __m512 qx_lo, qx_hi;
                    k_piece_dot<E>(sub, x + k0, h, qx_lo, qx_hi);
                    const KScales sm = k_scales<E>(k, sub, h);
                    const __m512 xs = _mm512_set1_ps(x_sums[k0 / piece + h]);
                    acc_lo = _mm512_fnmadd_ps(sm.m_lo, xs, _mm512_fmadd_ps(sm.s_lo, qx_lo, acc_lo));
                    acc_hi = _mm512_fnmadd_ps(sm.m_hi, xs, _mm512_fmadd_ps(sm.s_hi, qx_hi, acc_hi));
                }
            }
        }
        store_rows(y + p * kPanel, row_masks(w.rows - p * kPanel), acc_lo, acc_hi, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Decode, int8 x (Int8Vector: blocks of 32 = one sub-block each): per piece the exact integer
// sums Σ q·qx (vpdpbusd: unsigned q times signed qx, 4 per lane) and Σ qx, then
//   Q4_K, Q5_K   (S·dx)·Σ q·qx − M·(dx·Σ qx)          (Σ qx over the block: x.sums)
//   Q6_K         (S·dx)·(Σ q·qx − 32·Σ qx)            M = 32·S folds into the integers
//
// Σ q·qx over piece h, rows 0..15 and 16..31: two chains each (even and odd groups).
template <int E>
GLASS_AVX512_VNNI inline void k_piece_dot_int8(const std::uint8_t* sub, const std::int8_t* xb, int h, __m512i& lo, __m512i& hi) {
    constexpr int groups = kPiece<E> / 4;
    __m512i lo0 = _mm512_setzero_si512(), lo1 = lo0, hi0 = lo0, hi1 = lo0;
    for (int g = groups * h; g < groups * (h + 1); g += 2) {
        std::int32_t x0, x1;  // qx of inputs 4g .. 4g+3 and 4g+4 .. 4g+7
        std::memcpy(&x0, xb + 4 * g, 4);
        std::memcpy(&x1, xb + 4 * g + 4, 4);
        __m512i l0, h0, l1, h1;
        if constexpr (E == 0) {  // Q4_K: the bytes whole (lo + 16·hi) and the high nibbles in place
            // (16·hi), one and instead of k_group's shift and two, as matvec_int8 takes Q4_0
            l0 = _mm512_loadu_si512(sub + kq_nibbles(g));
            l1 = _mm512_loadu_si512(sub + kq_nibbles(g + 1));
            h0 = _mm512_and_si512(l0, _mm512_set1_epi8(static_cast<char>(0xF0)));
            h1 = _mm512_and_si512(l1, _mm512_set1_epi8(static_cast<char>(0xF0)));
        } else {
            k_group<E>(sub, g, l0, h0);
            k_group<E>(sub, g + 1, l1, h1);
        }
        const __m512i b0 = _mm512_set1_epi32(x0), b1 = _mm512_set1_epi32(x1);
        lo0 = _mm512_dpbusd_epi32(lo0, l0, b0);
        hi0 = _mm512_dpbusd_epi32(hi0, h0, b0);
        lo1 = _mm512_dpbusd_epi32(lo1, l1, b1);
        hi1 = _mm512_dpbusd_epi32(hi1, h1, b1);
    }
    lo = _mm512_add_epi32(lo0, lo1);
    hi = _mm512_add_epi32(hi0, hi1);
    if constexpr (E == 0) separate_nibble_sums(lo, hi);
}

template <int E>
GLASS_AVX512_VNNI inline void matvec_int8_k_layout(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                                   bool accumulate) {
    constexpr int piece = kPiece<E>, pieces = kSubBlock / piece;
    // Σ qx over each piece: x's own block sums where a piece is a block of 32 (Q4_K, Q5_K); summed
    // here, per call, for Q6_K's pieces of 16 (a scalar pass over x cost Q4_K ~12 % of its time).
    const std::int32_t* x_sums = piece == kQuantBlock ? x.sums : piece_sums<std::int32_t>(x.q, w.cols, piece);
    for (int p = p0; p < p1; ++p) {
        __m512 acc_lo = _mm512_setzero_ps(), acc_hi = _mm512_setzero_ps();
        for (int s = 0; s < w.super_blocks(); ++s) {
            const std::uint8_t* super = w.super_block(p, s);
            const KSuper k = k_super<E>(super);
            for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
                const std::uint8_t* sub = super + kLayout<E>.sub_offset(j);
                prefetch_ahead<E>(sub);  // (a prefetch past the matrix's end is harmless: it never faults)
                const int b = s * (kSuperBlock / kSubBlock) + j;  // x's block
                const __m512 dx = _mm512_set1_ps(x.scales[b]);
                for (int h = 0; h < pieces; ++h) {
                    __m512i lo, hi;
                    k_piece_dot_int8<E>(sub, x.q + b * kQuantBlock, h, lo, hi);
                    const std::int32_t sx = x_sums[b * pieces + h];
                    const KScales sm = k_scales<E>(k, sub, h);
                    if constexpr (E == 2) {  // Σ q·qx − 32·Σ qx, exact in int32
                        const __m512i offset = _mm512_set1_epi32(32 * sx);
                        lo = _mm512_sub_epi32(lo, offset);
                        hi = _mm512_sub_epi32(hi, offset);
                    }
                    acc_lo = _mm512_fmadd_ps(_mm512_mul_ps(sm.s_lo, dx), _mm512_cvtepi32_ps(lo), acc_lo);
                    acc_hi = _mm512_fmadd_ps(_mm512_mul_ps(sm.s_hi, dx), _mm512_cvtepi32_ps(hi), acc_hi);
                    if constexpr (E < 2) {
                        const __m512 xs = _mm512_set1_ps(x.scales[b] * static_cast<float>(sx));
                        acc_lo = _mm512_fnmadd_ps(sm.m_lo, xs, acc_lo);
                        acc_hi = _mm512_fnmadd_ps(sm.m_hi, xs, acc_hi);
                    }
                }
            }
        }
        store_rows(y + p * kPanel, row_masks(w.rows - p * kPanel), acc_lo, acc_hi, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Prefill: inputs [k0, k0 + 256) of panel p (one super-block: kChunk is 256 and a k-quant row
// is whole super-blocks) as fp32 weights, chunk[k][32 rows], w = S·q − M.
template <int E>
GLASS_AVX512 inline void unpack_k_chunk_layout(const PackedMatrix& w, int p, int k0, float* chunk) {
    constexpr int groups = kPiece<E> / 4;  // per piece
    const std::uint8_t* super = w.super_block(p, k0 / kSuperBlock);
    const KSuper k = k_super<E>(super);
    for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
        const std::uint8_t* sub = super + kLayout<E>.sub_offset(j);
        for (int h = 0; h < kSubBlock / kPiece<E>; ++h) {
            const KScales sm = k_scales<E>(k, sub, h);
            for (int g = groups * h; g < groups * (h + 1); ++g) {
                __m512i lo, hi;
                k_group<E>(sub, g, lo, hi);
                float* out = chunk + (j * kSubBlock + 4 * g) * 32;
#pragma GCC unroll 4
                for (int t = 0; t < 4; ++t) {
                    _mm512_store_ps(out + 32 * t, _mm512_sub_ps(_mm512_mul_ps(sm.s_lo, byte_as_float(lo, t)), sm.m_lo));
                    _mm512_store_ps(out + 32 * t + 16, _mm512_sub_ps(_mm512_mul_ps(sm.s_hi, byte_as_float(hi, t)), sm.m_hi));
                }
            }
        }
    }
}

// The entries for any k-quant panel: the layout's instance of each kernel.
GLASS_AVX512 inline void matvec_k(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    if (w.type == WeightType::q4_k) return matvec_k_layout<0>(w, x, y, p0, p1, accumulate);
    if (w.type == WeightType::q5_k) return matvec_k_layout<1>(w, x, y, p0, p1, accumulate);
    matvec_k_layout<2>(w, x, y, p0, p1, accumulate);
}
GLASS_AVX512_VNNI inline void matvec_int8_k(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                            bool accumulate) {
    if (w.type == WeightType::q4_k) return matvec_int8_k_layout<0>(w, x, y, p0, p1, accumulate);
    if (w.type == WeightType::q5_k) return matvec_int8_k_layout<1>(w, x, y, p0, p1, accumulate);
    matvec_int8_k_layout<2>(w, x, y, p0, p1, accumulate);
}
GLASS_AVX512 inline void unpack_k_chunk(const PackedMatrix& w, int p, int k0, int /*kc = 256*/, float* chunk) {
    static_assert(kChunk == kSuperBlock, "one prefill chunk is one k-quant super-block");
    if (w.type == WeightType::q4_k) return unpack_k_chunk_layout<0>(w, p, k0, chunk);
    if (w.type == WeightType::q5_k) return unpack_k_chunk_layout<1>(w, p, k0, chunk);
    unpack_k_chunk_layout<2>(w, p, k0, chunk);
}

// ---- The table's entries: k-quant panels here, every other type in kernels_avx512.hpp -------
GLASS_AVX512 inline void matvec_all(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    if (is_k_quant(w.type)) return matvec_k(w, x, y, p0, p1, accumulate);
    matvec(w, x, y, p0, p1, accumulate);
}
GLASS_AVX512_VNNI inline void matvec_int8_all(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                              bool accumulate) {
    if (is_k_quant(w.type)) return matvec_int8_k(w, x, y, p0, p1, accumulate);
    matvec_int8(w, x, y, p0, p1, accumulate);
}
GLASS_AVX512 inline void matmul_all(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                                    bool accumulate, float* scratch) {
    if (is_k_quant(w.type)) return matmul_with(unpack_k_chunk, w, xp, n, y, ldy, p0, p1, accumulate, scratch);
    matmul(w, xp, n, y, ldy, p0, p1, accumulate, scratch);
}

}  // namespace glass::fast::avx512

#pragma GCC diagnostic pop

#endif  // __x86_64__
