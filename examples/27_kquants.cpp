// 27_kquants — the blocks most downloaded GGUF files are made of (Q4_K_M, Q5_K_M): super-blocks of
// 256 weights that keep one fp16 scale and give each sub-block of 32 a 6-bit scale and min of its
// own, a scale of scales. 24_quantization showed one scale per 32 weights; this is what the files
// people download do instead, and what it buys.
//
// In:  256 weights drawn from N(0, 0.02) (seed 27) for one Q4_K super-block; Llama 3 8B's tensor
//      shapes (32 layers, dim 4096, 8 KV heads of 128, MLP 14336, vocabulary 128256, output not
//      tied); a random llama3-shaped model (dim 256, MLP 768, 4 layers, 4 heads on 2 KV heads,
//      vocabulary 512, seed 32) and a 12-token prompt, ids (41 · i + 11) mod 512 (chosen so that
//      fp32's greedy path has top-1 margins ≥ 0.1: a changed id then means a real shift).
// Out: 1. the super-block written as Q4_K: d, dmin, the 12 packed scale bytes, each sub-block's
//         (scale, min) unpacked, one weight decoded by hand next to ggml_to_float's value, and
//         the largest error over the block;
//      2. Llama 3 8B's size in each file type, tensor by tensor (ggml_file_tensor_type: the
//         Q4_K_M / Q5_K_M mixes as llama-quantize chooses them), and its bits per weight;
//      3. every matrix of the random model written in each type and read back: the worst NMSE of
//         the logits against fp32 over 8 greedy steps (along fp32's path), and how many of the 8
//         greedy ids agree;
//      4. the fast path, which keeps the blocks: the bytes of a k-quant panel per weight, one
//         row's 16 inputs multiplied both ways (weights widened first, and S·Σq·x − M·Σx on the
//         integers), and a whole matrix of the random model on q4_k/q5_k/q6_k panels, with fp32
//         and with int8 x, against the same file type's weights in double.
// Everything printed is computed; tests/test_ggml_quants.cpp recomputes it.
//
// Usage: 27_kquants
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "glass/fast/kernels.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/ggml_quants_write.hpp"
#include "glass/quantize.hpp"
#include "glass/sampling.hpp"
#include "glass/transformer.hpp"

namespace {

using glass::GgmlType;

std::uint32_t id(GgmlType t) { return static_cast<std::uint32_t>(t); }

double largest_error(const std::vector<float>& x, const std::vector<float>& w) {
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(w[i]) - x[i]));
    return worst;
}

// 1. One super-block, by hand.
void show_super_block() {
    std::mt19937 rng(27);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> x(256);
    for (float& v : x) v = normal(rng);
    std::vector<char> bytes(144);
    glass::ggml_from_float(id(GgmlType::q4_k), x.data(), 256, bytes.data());
    const auto* b = reinterpret_cast<const std::uint8_t*>(bytes.data());
    const float d = glass::ggml_blocks::half_at(b), dmin = glass::ggml_blocks::half_at(b + 2);
    std::printf("1. One Q4_K super-block: 256 weights from N(0, 0.02) in 144 bytes\n\n");
    std::printf("  d = %.6g, dmin = %.6g (fp16)\n  12 scale bytes:", d, dmin);
    for (int i = 0; i < 12; ++i) std::printf(" %02x", b[4 + i]);
    std::printf("\n  (scale, min) of sub-blocks 0-7:");
    for (int s = 0; s < 8; ++s) {
        int sc, m;
        glass::ggml_blocks::k_scale_min(b + 4, s, sc, m);
        std::printf(" (%d, %d)", sc, m);
    }
    // Weight k = weight l of sub-block s = k / 32, whose chunk of 32 qs bytes (s / 2) holds
    // sub-block 2c in the low nibbles and 2c + 1 in the high ones.
    const int k = 100, s = k / 32, l = k % 32;
    int sc, m;
    glass::ggml_blocks::k_scale_min(b + 4, s, sc, m);
    const std::uint8_t byte = b[16 + 32 * (s / 2) + l];
    const int q = s % 2 == 0 ? byte & 0x0F : byte >> 4;
    const float by_hand = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
    const std::vector<float> w = glass::ggml_round_trip(id(GgmlType::q4_k), x.data(), 256);
    std::printf("\n  weight %d (sub-block %d, qs byte %d, %s nibble: q = %d): d*%d*%d - dmin*%d = %.6g\n", k, s,
                32 * (s / 2) + l, s % 2 == 0 ? "low" : "high", q, sc, q, m, by_hand);
    std::printf("  ggml_to_float: %.6g; the weight was %.6g\n", w[k], x[k]);
    const std::vector<float> w4 = glass::ggml_round_trip(id(GgmlType::q4_0), x.data(), 256);
    std::printf("  largest error over the block: %.3g as Q4_K (4.5 bits), %.3g as Q4_0 (4.5 bits)\n\n",
                largest_error(x, w), largest_error(x, w4));
}

// 2. Llama 3 8B, tensor by tensor, in each file type.
struct Tensor {
    std::string name;
    int layer;
    std::int64_t rows, cols;
};

std::vector<Tensor> llama3_8b_tensors() {
    const std::int64_t dim = 4096, kv = 8 * 128, ffn = 14336, vocab = 128256;
    std::vector<Tensor> t = {{"token_embd.weight", -1, vocab, dim}, {"output.weight", -1, vocab, dim}};
    for (int l = 0; l < 32; ++l)
        for (const Tensor& m : {Tensor{"attn_q.weight", l, dim, dim}, Tensor{"attn_k.weight", l, kv, dim},
                                Tensor{"attn_v.weight", l, kv, dim}, Tensor{"attn_output.weight", l, dim, dim},
                                Tensor{"ffn_gate.weight", l, ffn, dim}, Tensor{"ffn_up.weight", l, ffn, dim},
                                Tensor{"ffn_down.weight", l, dim, ffn}})
            t.push_back({"blk." + std::to_string(l) + "." + m.name, l, m.rows, m.cols});
    return t;
}

void show_model_sizes() {
    const std::vector<Tensor> tensors = llama3_8b_tensors();
    const std::int64_t norms = (2 * 32 + 1) * 4096;  // F32 in every file
    std::int64_t weights = norms;
    for (const Tensor& t : tensors) weights += t.rows * t.cols;
    std::printf("2. Llama 3 8B (%.3f billion weights) in each file type, tensor by tensor\n\n", weights / 1e9);
    std::printf("  file type  bits/weight      GB  matrices by type\n");
    for (const std::string file : {"F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_1", "Q4_0"}) {
        std::int64_t bytes = 4 * norms;
        std::map<std::string, int> count;
        for (const Tensor& t : tensors) {
            const GgmlType type = glass::ggml_file_tensor_type(file, t.name, t.layer, 32, false, t.cols);
            bytes += glass::ggml_bytes(id(type), t.rows * t.cols);
            ++count[glass::ggml_type_name(type)];
        }
        std::string mix;
        for (const auto& [type, n] : count) mix += (mix.empty() ? "" : ", ") + type + " x" + std::to_string(n);
        std::printf("  %-9s  %11.3f  %6.2f  %s\n", file.c_str(), 8.0 * static_cast<double>(bytes) / static_cast<double>(weights),
                    static_cast<double>(bytes) / 1e9, mix.c_str());
    }
    std::printf("\n");
}

glass::ModelConfig small_llama3() {
    glass::ModelConfig c = glass::fast::small_family_config("llama3");
    c.dim = 256, c.hidden_dim = 768, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64;
    c.vocab_size = 512;
    return c;
}

void show_logit_error() {
    const glass::Model m = glass::fast::random_family_model(small_llama3(), 32);
    std::vector<int> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back((41 * i + 11) % 512);
    // fp32's greedy path: 8 steps after the prompt, and the logits at each.
    glass::CpuSession exact(m);
    std::vector<std::vector<float>> want;
    std::vector<int> path;
    std::span<const float> logits = exact.prefill(prompt);
    for (int step = 0; step < 8; ++step) {
        want.emplace_back(logits.begin(), logits.end());
        path.push_back(glass::sample_argmax(logits));
        logits = exact.decode(path.back());
    }
    std::printf("3. A random llama3-shaped model (dim 256, 4 layers), every matrix through each file type:\n");
    std::printf("   logits against fp32 over 8 greedy steps\n\n  file type  worst NMSE  greedy ids equal\n");
    for (const std::string file : {"Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_1", "Q4_0"}) {
        const glass::Model q = glass::model_in_file_type(m, file);
        glass::CpuSession s(q);
        logits = s.prefill(prompt);
        double worst = 0;
        int equal = 0;
        for (int step = 0; step < 8; ++step) {
            double diff = 0, norm = 0;
            for (size_t i = 0; i < logits.size(); ++i) {
                const double e = static_cast<double>(logits[i]) - want[static_cast<size_t>(step)][i];
                diff += e * e;
                norm += static_cast<double>(want[static_cast<size_t>(step)][i]) * want[static_cast<size_t>(step)][i];
            }
            worst = std::max(worst, diff / norm);
            equal += glass::sample_argmax(logits) == path[static_cast<size_t>(step)];
            logits = s.decode(path[static_cast<size_t>(step)]);  // along fp32's path
        }
        std::printf("  %-9s  %10.2e  %d of 8\n", file.c_str(), worst, equal);
    }
}

// 4. The fast path multiplies the blocks themselves (packed_kquants.hpp).
void show_fast_path() {
    using glass::fast::WeightType;
    std::printf("\n4. The fast path keeps the blocks: k-quant panels of 32 rows\n\n");
    std::printf("  panel type  bits/weight (the file's)\n");
    for (const WeightType t : {WeightType::q4_k, WeightType::q5_k, WeightType::q6_k})
        std::printf("  %-10s  %.4f (%.4f)\n", glass::fast::to_string(t),
                    8.0 * static_cast<double>(glass::fast::packed_bytes(32, 256, t)) / (32 * 256),
                    glass::ggml_bits_per_weight(id(glass::fast::ggml_type_of(t))));
    // Row 0, inputs 16..31 (the second half of sub-block 0) of a Q4_K matrix, both ways.
    std::mt19937 rng(27);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> w(32 * 256), x(256);
    for (float& v : w) v = normal(rng);
    for (float& v : x) v = normal(rng) * 50.0f;
    std::vector<unsigned char> panel(static_cast<size_t>(glass::fast::packed_bytes(32, 256, WeightType::q4_k)));
    const glass::fast::PackedMatrix m = glass::fast::pack_matrix(w.data(), 32, 256, WeightType::q4_k, panel.data());
    const glass::fast::KQuantLayout& L = glass::fast::kQ4KLayout;
    const glass::fast::KScaleMin sm = glass::fast::kq_scale_min(L, m.super_block(0, 0), 0, 1, 0);
    double widened = 0, q_x = 0, sum_x = 0;
    for (int k = 16; k < 32; ++k) {
        widened += static_cast<double>(m.at(0, k)) * x[static_cast<size_t>(k)];
        q_x += glass::fast::kq_integer(L, m.super_block(0, 0) + L.sub_offset(0), k, 0) * static_cast<double>(x[static_cast<size_t>(k)]);
        sum_x += x[static_cast<size_t>(k)];
    }
    std::printf("\n  row 0, inputs 16-31: S = d*sc = %.6g, M = dmin*m = %.6g\n", sm.scale, sm.min);
    std::printf("  sum of w*x, weights widened first: %.6g\n", widened);
    std::printf("  S*sum(q*x) - M*sum(x): %.6g*%.6g - %.6g*%.6g = %.6g\n", sm.scale, q_x, sm.min, sum_x,
                sm.scale * q_x - sm.min * sum_x);
    // A whole matrix (768 x 256, the random model's first gate projection) times x: the best
    // kernel set on the panels, against the same file type's weights widened (ggml_round_trip)
    // and multiplied in double. fp32 x: the same weights, only the order of sums differs; int8 x
    // (--activations int8) rounds x too.
    const glass::Model model = glass::fast::random_family_model(small_llama3(), 32);
    const glass::ConstMatrixMap& gate = model.layers[0].w1;
    const int rows = static_cast<int>(gate.rows()), cols = static_cast<int>(gate.cols());
    std::vector<float> xs(static_cast<size_t>(cols));
    for (float& v : xs) v = normal(rng) * 50.0f;
    std::vector<std::int8_t> x8(static_cast<size_t>(cols));
    std::vector<float> x8_scales(static_cast<size_t>(cols / 32));
    std::vector<std::int32_t> x8_sums(static_cast<size_t>(cols / 32));
    glass::quantize_activations(xs.data(), cols, x8.data(), x8_scales.data());
    for (int k = 0; k < cols; ++k) x8_sums[static_cast<size_t>(k / 32)] += x8[static_cast<size_t>(k)];
    const glass::fast::Kernels kernels = glass::fast::best_kernels();
    std::printf("\n  %d x %d matrix times x, %s kernels: largest |difference| / largest |y| against the\n", rows, cols, kernels.name);
    std::printf("  file type's weights in double\n  panels  fp32 x     int8 x\n");
    for (const auto& [t, file] : {std::pair{WeightType::q4_k, GgmlType::q4_k}, {WeightType::q5_k, GgmlType::q5_k}, {WeightType::q6_k, GgmlType::q6_k}}) {
        std::vector<unsigned char> bytes(static_cast<size_t>(glass::fast::packed_bytes(rows, cols, t)) + 64);
        auto* aligned = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(bytes.data()) + 63) / 64 * 64);
        const glass::fast::PackedMatrix p = glass::fast::pack_matrix(gate.data(), rows, cols, t, aligned);
        const std::vector<float> wide = glass::ggml_round_trip(id(file), gate.data(), std::int64_t{rows} * cols);
        std::vector<float> y(static_cast<size_t>(rows)), y8(static_cast<size_t>(rows));
        kernels.matvec(p, xs.data(), y.data(), 0, p.panels(), false);
        kernels.matvec_int8(p, {x8.data(), x8_scales.data(), x8_sums.data()}, y8.data(), 0, p.panels(), false);
        double diff = 0, diff8 = 0, scale = 0;
        for (int r = 0; r < rows; ++r) {
            double want = 0;
            for (int k = 0; k < cols; ++k) want += static_cast<double>(wide[static_cast<size_t>(r) * cols + k]) * xs[static_cast<size_t>(k)];
            diff = std::max(diff, std::fabs(y[static_cast<size_t>(r)] - want));
            diff8 = std::max(diff8, std::fabs(y8[static_cast<size_t>(r)] - want));
            scale = std::max(scale, std::fabs(want));
        }
        std::printf("  %-6s  %.2e  %.2e\n", glass::fast::to_string(t), diff / scale, diff8 / scale);
    }
}

}  // namespace

int main() {
    show_super_block();
    show_model_sizes();
    show_logit_error();
    show_fast_path();
    return 0;
}
