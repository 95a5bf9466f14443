// tests/cuda/test_cuda_ops_families.cpp — the ops the model families add (config.hpp's deltas):
// GELU-tanh gating, q/k/v biases, embedding scale, soft-cap, per-head norms in place, scaled RoPE
// frequencies, and attention with a sliding window, a score soft-cap and a scale of its own.
// (rows of the op table that test_cuda_ops.cpp runs; cuda_ops_harness.hpp has the shared pieces)
#include "cuda_ops_harness.hpp"

namespace cuda_ops_test {

namespace {

std::vector<float> host(const gc::DeviceBuffer& b, std::size_t n) { return gc::to_host(b.f32(), n); }

}  // namespace

void add_families(std::vector<Case>& cases) {
    // Elementwise: the CPU's own formula on the same inputs (bias and scale are one fp32 op: exact).
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{70001}}) {
        cases.push_back({fmt("geglu(n=%lld) vs gelu_tanh(gate)·up", static_cast<long long>(n)), kF32, false, [n](Rng& rng) {
            const std::vector<float> gate = random_floats(rng, std::size_t(n), 3.0f), up = random_floats(rng, std::size_t(n));
            gc::DeviceBuffer d_gate = gc::to_device(std::span<const float>(gate)), d_up = gc::to_device(std::span<const float>(up));
            gc::geglu(d_gate.f32(), d_up.f32(), n);
            std::vector<float> want(gate.size());
            for (std::size_t i = 0; i < want.size(); ++i) want[i] = glass::mlp_gate(gate[i], glass::MlpActivation::gelu_tanh) * up[i];
            return relative_error(host(d_gate, want.size()), std::span<const float>(want));
        }});
        cases.push_back({fmt("soft_cap(n=%lld, cap=30) vs cap·tanh(x/cap)", static_cast<long long>(n)), kF32, false, [n](Rng& rng) {
            const std::vector<float> x = random_floats(rng, std::size_t(n), 40.0f);
            gc::DeviceBuffer d_x = gc::to_device(std::span<const float>(x));
            gc::soft_cap(d_x.f32(), n, 30.0f);
            Eigen::Map<const Eigen::ArrayXf> in(x.data(), n);
            const Eigen::ArrayXf want = 30.0f * (in / 30.0f).tanh();  // classify's expression
            return relative_error(host(d_x, x.size()), std::span<const float>(want.data(), x.size()));
        }});
        cases.push_back({fmt("scale_values(n=%lld, ×8)", static_cast<long long>(n)), 0.0, false, [n](Rng& rng) {
            const std::vector<float> x = random_floats(rng, std::size_t(n));
            gc::DeviceBuffer d_x = gc::to_device(std::span<const float>(x));
            gc::scale_values(d_x.f32(), n, 8.0f);
            std::vector<float> want(x);
            for (float& v : want) v *= 8.0f;
            return relative_error(host(d_x, x.size()), std::span<const float>(want));
        }});
    }
    struct B { int rows, width; };
    for (const B s : {B{1, 1}, B{7, 96}, B{33, 1024}})
        cases.push_back({fmt("add_bias_rows(rows=%d, width=%d)", s.rows, s.width), 0.0, false, [s](Rng& rng) {
            const RowMatrix x = random_matrix(rng, s.rows, s.width);
            const std::vector<float> bias = random_floats(rng, std::size_t(s.width));
            gc::DeviceBuffer d_x = to_device(x), d_b = gc::to_device(std::span<const float>(bias));
            gc::add_bias_rows(d_x.f32(), d_b.f32(), s.rows, s.width);
            const RowMatrix want = x.rowwise() + glass::ConstVectorMap(bias.data(), s.width).transpose();
            return relative_error(host(d_x, std::size_t(x.size())), want);
        }});
    // Per-head norms (Qwen3, Gemma 3): rmsnorm over n · heads rows of head_dim, in place.
    cases.push_back({"rmsnorm(block, in place, per head: n=5, heads=4, head_dim=32) vs rmsnorm_heads", kF32, false, [](Rng& rng) {
        RowMatrix x = random_matrix(rng, 5, 4 * 32, 3.0f);
        const std::vector<float> gain = random_floats(rng, 32);
        gc::DeviceBuffer d_x = to_device(x), d_gain = gc::to_device(std::span<const float>(gain));
        gc::rmsnorm(d_x.f32(), d_gain.f32(), 5 * 4, 32, 1e-6f, d_x.f32());
        glass::rmsnorm_heads(x, 4, 32, glass::ConstVectorMap(gain.data(), 32), 1e-6f);
        return relative_error(host(d_x, std::size_t(x.size())), x);
    }});
    // RoPE with scaled frequencies (Llama 3.1's rule, Gemma 3's linear one) against apply_rope.
    for (const bool llama3 : {true, false})
        cases.push_back({fmt("rope(half_split, n=9, heads=4, head_dim=64, start=3000, %s scaling)", llama3 ? "llama3" : "linear x8"),
                         kF32, false, [llama3](Rng& rng) {
            glass::RopeScaling scaling = glass::llama3_rope_scaling();
            if (!llama3) {
                scaling = {};
                scaling.type = glass::RopeScalingType::linear;
                scaling.factor = 8.0f;
            }
            const float theta = llama3 ? 5e5f : 1e6f;
            RowMatrix x = random_matrix(rng, 9, 4 * 64);
            gc::DeviceBuffer d_x = to_device(x), freq = gc::rope_frequencies(64, theta, scaling);
            gc::rope(d_x.f32(), 9, 4, 64, 3000, freq.f32(), glass::RopeLayout::half_split);
            glass::apply_rope(x, 4, 64, 3000, theta, glass::RopeLayout::half_split, scaling);
            return relative_error(host(d_x, std::size_t(x.size())), x);
        }});

    // Attention under the family rules against causal_attention with the same AttentionShape:
    // a sliding window (shorter than the keys, so it masks), a score soft-cap, a scale other than
    // 1/√head_dim; each contiguous kernel, prefill from 0 and in a chunk, and decode.
    struct A { int heads, kv_heads, head_dim, n_q, start, window; float softcap; };
    for (const A s : {A{4, 2, 32, 40, 0, 6, 50.0f}, A{8, 2, 64, 17, 30, 5, 0.0f}, A{4, 1, 64, 33, 70, 40, 5.0f},
                      A{4, 2, 32, 1, 99, 6, 50.0f}, A{6, 3, 64, 1, 300, 37, 5.0f}})
        for (const char* kernel : {"attention_naive", "flash_attention", "attention_decode", "flash_decode"}) {
            const bool decode_only = std::strstr(kernel, "decode") != nullptr;
            if (decode_only != (s.n_q == 1)) continue;
            cases.push_back({fmt("%s(window=%d, softcap=%g, scale=1/sqrt(24), heads=%d, kv_heads=%d, head_dim=%d, n_q=%d, start=%d)",
                                 kernel, s.window, double(s.softcap), s.heads, s.kv_heads, s.head_dim, s.n_q, s.start),
                             kF32, false, [s, kernel](Rng& rng) {
                const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim, s.window, s.softcap};
                const int n_k = s.start + s.n_q;
                const float scale = 1.0f / std::sqrt(24.0f);
                const RowMatrix q = random_matrix(rng, s.n_q, s.heads * s.head_dim, 2.0f);
                const RowMatrix k = random_matrix(rng, n_k, s.kv_heads * s.head_dim, 2.0f);
                const RowMatrix v = random_matrix(rng, n_k, s.kv_heads * s.head_dim);
                gc::DeviceBuffer d_q = to_device(q), d_k = to_device(k), d_v = to_device(v);
                const std::size_t n_out = std::size_t(s.n_q) * s.heads * s.head_dim;
                gc::DeviceBuffer out = poisoned(n_out), scores = poisoned(std::size_t(s.heads) * s.n_q * n_k);
                const std::string which = kernel;
                if (which == "attention_naive")
                    gc::attention_naive(d_q.f32(), d_k.f32(), d_v.f32(), s.n_q, s.start, d, scale, scores.f32(), out.f32());
                else if (which == "flash_attention")
                    gc::flash_attention(d_q.f32(), d_k.f32(), d_v.f32(), s.n_q, s.start, d, scale, out.f32());
                else if (which == "attention_decode")
                    gc::attention_decode(d_q.f32(), d_k.f32(), d_v.f32(), n_k, d, scale, scores.f32(), out.f32());
                else {
                    const int chunk = 7;  // most splits lie before the window: they must add nothing
                    gc::DeviceBuffer partial = poisoned(std::size_t(s.heads) * gc::flash_decode_splits(n_k, chunk) * (s.head_dim + 2));
                    gc::flash_decode(d_q.f32(), d_k.f32(), d_v.f32(), n_k, d, scale, chunk, partial.f32(), out.f32());
                }
                return relative_error(host(out, n_out), cpu_attention(q, k, v, s.start, d, scale));
            }});
        }
}

}  // namespace cuda_ops_test
