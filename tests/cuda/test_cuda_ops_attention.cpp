// tests/cuda/test_cuda_ops_attention.cpp — attention over a contiguous cache: the prefill and decode
// kernels, the KV cache (fp32 and int8), and the decode graph replayed at successive positions.
// (rows of the op table that test_cuda_ops.cpp runs; cuda_ops_harness.hpp has the shared pieces)
#include "cuda_ops_harness.hpp"

namespace cuda_ops_test {

// Both prefill kernels (the three-step attention_naive and the tiled flash_attention) and the
// three decode kernels (block per head, its naive fallback, split-K flash_decode) against the
// CPU's causal_attention. Shapes: GQA ratios 1, 2, 3, 4, 7, 8; head_dim 64, 128, 256 (where the
// flash kernel's key tiles halve); query counts that are and are not multiples of its 32 rows;
// chunks (start > 0); long prefills and caches; split-K chunks shorter and longer than the cache.
void add_attention(std::vector<Case>& cases) {
    struct S { int heads, kv_heads, head_dim, n_q, start; };
    for (S s : {S{1, 1, 64, 1, 0}, S{8, 8, 64, 7, 0}, S{8, 2, 64, 33, 0}, S{8, 1, 128, 5, 100},
                S{32, 4, 128, 17, 3}, S{6, 3, 64, 1, 2047}, S{2, 2, 128, 1, 0}, S{7, 1, 64, 64, 0},
                S{4, 2, 256, 40, 9}, S{4, 1, 64, 2048, 0}, S{8, 2, 128, 2048, 0}})
        for (const bool flash : {false, true}) {
            // The emulator runs one of the 2,048-query prefills of each kernel (10 s for the naive one there).
            if (s.n_q == 2048 && gc::runs_on_emulator() && (s.heads == 8 || flash)) continue;
            cases.push_back({fmt("%s, heads=%d, kv_heads=%d, head_dim=%d, n_q=%d, start=%d)",
                                 flash ? "flash_attention(tiled" : "attention_naive(three steps", s.heads, s.kv_heads,
                                 s.head_dim, s.n_q, s.start),
                             kF32, s.n_q >= 2048, [s, flash](Rng& rng) {
                const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
                const int n_k = s.start + s.n_q;
                const RowMatrix q = random_matrix(rng, s.n_q, s.heads * s.head_dim);
                const RowMatrix k = random_matrix(rng, n_k, s.kv_heads * s.head_dim);
                const RowMatrix v = random_matrix(rng, n_k, s.kv_heads * s.head_dim);
                gc::DeviceBuffer d_q = to_device(q), d_k = to_device(k), d_v = to_device(v);
                gc::DeviceBuffer out = poisoned(std::size_t(s.n_q) * s.heads * s.head_dim);
                const float scale = 1.0f / std::sqrt(float(s.head_dim));
                if (flash) {
                    gc::flash_attention(d_q.f32(), d_k.f32(), d_v.f32(), s.n_q, s.start, d, scale, out.f32());
                } else {
                    gc::DeviceBuffer scores = poisoned(std::size_t(s.heads) * s.n_q * n_k);
                    gc::attention_naive(d_q.f32(), d_k.f32(), d_v.f32(), s.n_q, s.start, d, scale, scores.f32(), out.f32());
                }
                return relative_error(gc::to_host(out.f32(), std::size_t(s.n_q) * s.heads * s.head_dim),
                                      cpu_attention(q, k, v, s.start, d));
            }});
        }

    struct D { int heads, kv_heads, head_dim, n_k; };
    for (D s : {D{1, 1, 64, 1}, D{8, 8, 64, 2}, D{8, 2, 64, 257}, D{6, 2, 64, 33}, D{8, 1, 128, 2048},
                D{32, 4, 128, 4097}, D{32, 32, 128, 1000}, D{4, 4, 256, 300}})
        for (const char* variant : {"block per head", "block per head, n_k on device", "naive", "split-K, chunk=7",
                                    "split-K, chunk=256", "split-K, chunk=1000"})
            cases.push_back({fmt("%s(%s, heads=%d, kv_heads=%d, head_dim=%d, n_k=%d)",
                                 std::strstr(variant, "split-K") ? "flash_decode" : "attention_decode", variant, s.heads,
                                 s.kv_heads, s.head_dim, s.n_k),
                             kF32, s.n_k > 2048, [s, variant](Rng& rng) {
                const bool naive = std::strcmp(variant, "naive") == 0;
                const bool on_device = std::strstr(variant, "on device") != nullptr;
                const char* chunk_at = std::strstr(variant, "chunk=");
                const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
                const RowMatrix q = random_matrix(rng, 1, s.heads * s.head_dim);
                const RowMatrix k = random_matrix(rng, s.n_k, s.kv_heads * s.head_dim);
                const RowMatrix v = random_matrix(rng, s.n_k, s.kv_heads * s.head_dim);
                gc::DeviceBuffer d_q = to_device(q), d_k = to_device(k), d_v = to_device(v);
                gc::DeviceBuffer scores = poisoned(std::size_t(s.heads) * s.n_k);
                gc::DeviceBuffer out = poisoned(std::size_t(s.heads) * s.head_dim);
                const float scale = 1.0f / std::sqrt(float(s.head_dim));
                if (chunk_at) {
                    const int chunk = std::atoi(chunk_at + 6);
                    gc::DeviceBuffer partial =
                        poisoned(std::size_t(s.heads) * gc::flash_decode_splits(s.n_k, chunk) * (s.head_dim + 2));
                    gc::flash_decode(d_q.f32(), d_k.f32(), d_v.f32(), s.n_k, d, scale, chunk, partial.f32(), out.f32());
                } else if (naive) {
                    gc::attention_naive(d_q.f32(), d_k.f32(), d_v.f32(), 1, s.n_k - 1, d, scale, scores.f32(), out.f32());
                } else {
                    const int n_k[1] = {s.n_k};
                    gc::DeviceBuffer d_n_k = gc::to_device(std::span<const int>(n_k));
                    gc::attention_decode(d_q.f32(), d_k.f32(), d_v.f32(),
                                         on_device ? gc::IntArg::at(d_n_k.i32()) : gc::IntArg(s.n_k), d, scale,
                                         scores.f32(), out.f32());
                }
                return relative_error(gc::to_host(out.f32(), std::size_t(s.heads) * s.head_dim),
                                      cpu_attention(q, k, v, s.n_k - 1, d));
            }});

    // K/V in the int8 cache's form (KvType::int8): the kernels read the integers and scales and
    // must give causal_attention over the dequantized K/V (the same fp32 values on both sides:
    // scale · (float)q is one exact-as-IEEE product), so the fp32 rule holds. Decode with n_k on
    // the device (the graph's way) and both prefill chunk paths of the naive kernels; few, small
    // rows (the kernel bodies are the fp32 rows' own, templated on the row reader).
    struct Q { int heads, kv_heads, head_dim, n_q, start; bool decode; };
    for (Q s : {Q{8, 2, 64, 1, 256, true}, Q{6, 3, 128, 1, 40, true}, Q{4, 1, 64, 1, 0, true},
                Q{8, 2, 64, 17, 5, false}, Q{4, 4, 96, 33, 0, false}})
        cases.push_back({fmt("%s, int8 K/V + scales, heads=%d, kv_heads=%d, head_dim=%d, n_q=%d, start=%d)",
                             s.decode ? "attention_decode(block per head, n_k on device" : "attention_naive(three steps",
                             s.heads, s.kv_heads, s.head_dim, s.n_q, s.start),
                         kF32, false, [s](Rng& rng) {
            const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
            const int n_k = s.start + s.n_q;
            const RowMatrix q = random_matrix(rng, s.n_q, s.heads * s.head_dim);
            Int8Kv k = quantize_rows(random_matrix(rng, n_k, s.kv_heads * s.head_dim), s.kv_heads, s.head_dim);
            Int8Kv v = quantize_rows(random_matrix(rng, n_k, s.kv_heads * s.head_dim), s.kv_heads, s.head_dim);
            gc::DeviceBuffer d_q = to_device(q);
            const gc::KvRows d_k = k.up(), d_v = v.up();
            gc::DeviceBuffer scores = poisoned(std::size_t(s.heads) * s.n_q * n_k);
            gc::DeviceBuffer out = poisoned(std::size_t(s.n_q) * s.heads * s.head_dim);
            const float scale = 1.0f / std::sqrt(float(s.head_dim));
            const int n_k_host[1] = {n_k};
            gc::DeviceBuffer d_n_k = gc::to_device(std::span<const int>(n_k_host));
            if (s.decode)
                gc::attention_decode(d_q.f32(), d_k, d_v, gc::IntArg::at(d_n_k.i32()), d, scale, scores.f32(), out.f32());
            else
                gc::attention_naive(d_q.f32(), d_k, d_v, s.n_q, s.start, d, scale, scores.f32(), out.f32());
            return relative_error(gc::to_host(out.f32(), std::size_t(s.n_q) * s.heads * s.head_dim),
                                  cpu_attention(q, k.dequantized, v.dequantized, s.start, d));
        }});
    // The flash kernels over int8 K/V, and flash_decode with n_k read from the device (the decode
    // graph's way): its grid is sized for max_n_k keys, the splits past n_k must add nothing.
    struct F { int heads, kv_heads, head_dim, n_q, start, max_n_k; bool int8; };
    for (F s : {F{8, 2, 64, 33, 5, 0, true}, F{4, 1, 128, 1, 99, 300, true}, F{6, 3, 64, 1, 256, 1000, false},
                F{4, 4, 64, 1, 0, 64, false}})
        cases.push_back({fmt("%s, %s K/V, heads=%d, kv_heads=%d, head_dim=%d, n_q=%d, start=%d%s)",
                             s.n_q > 1 ? "flash_attention(tiled" : "flash_decode(split-K, chunk=7, n_k on device",
                             s.int8 ? "int8 + scales" : "fp32", s.heads, s.kv_heads, s.head_dim, s.n_q, s.start,
                             s.n_q > 1 ? "" : fmt(", grid for %d keys", s.max_n_k).c_str()),
                         kF32, false, [s](Rng& rng) {
            const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
            const int n_k = s.start + s.n_q, chunk = 7;
            const RowMatrix q = random_matrix(rng, s.n_q, s.heads * s.head_dim);
            RowMatrix k = random_matrix(rng, n_k, s.kv_heads * s.head_dim), v = random_matrix(rng, n_k, s.kv_heads * s.head_dim);
            Int8Kv k8, v8;
            gc::DeviceBuffer d_q = to_device(q), d_k32 = to_device(k), d_v32 = to_device(v);
            gc::KvRows d_k = gc::KvRows::fp32(d_k32.f32()), d_v = gc::KvRows::fp32(d_v32.f32());
            if (s.int8) {
                k8 = quantize_rows(k, s.kv_heads, s.head_dim);
                v8 = quantize_rows(v, s.kv_heads, s.head_dim);
                d_k = k8.up();
                d_v = v8.up();
                k = k8.dequantized;
                v = v8.dequantized;
            }
            gc::DeviceBuffer out = poisoned(std::size_t(s.n_q) * s.heads * s.head_dim);
            const float scale = 1.0f / std::sqrt(float(s.head_dim));
            if (s.n_q > 1) {
                gc::flash_attention(d_q.f32(), d_k, d_v, s.n_q, s.start, d, scale, out.f32());
            } else {
                const int n_k_host[1] = {n_k};
                gc::DeviceBuffer d_n_k = gc::to_device(std::span<const int>(n_k_host));
                gc::DeviceBuffer partial =
                    poisoned(std::size_t(s.heads) * gc::flash_decode_splits(s.max_n_k, chunk) * (s.head_dim + 2));
                gc::flash_decode(d_q.f32(), d_k, d_v, gc::IntArg::at(d_n_k.i32()), s.max_n_k, d, scale, chunk,
                                 partial.f32(), out.f32());
            }
            return relative_error(gc::to_host(out.f32(), std::size_t(s.n_q) * s.heads * s.head_dim),
                                  cpu_attention(q, k, v, s.start, d));
        }});
    cases.push_back({"attention_decode(int8 keys with fp32 values -> glass::Error naming both types)", 0.0, false,
                     [](Rng&) {
        gc::DeviceBuffer some(256);  // valid pointers: only the mix of types is wrong
        try {
            gc::attention_decode(some.f32(), gc::KvRows::int8(static_cast<const std::int8_t*>(some.data()), some.f32()),
                                 gc::KvRows::fp32(some.f32()), 1, {1, 1, 8}, 1.0f, some.f32(), some.f32());
        } catch (const glass::Error& e) {
            return std::string(e.what()).find("keys (int8) and values (fp32)") != std::string::npos ? 0.0 : 1.0;
        }
        return 1.0;
    }});
}

namespace {

// The same random K/V rows into both caches, every layer, in passes of `steps` rows (a prefill,
// then decode steps).
void write_both(Rng& rng, const glass::ModelConfig& c, glass::KVCache& cpu, gc::DeviceKVCache& gpu,
                std::initializer_list<int> steps) {
    for (int n_new : steps) {
        const int start = cpu.length();
        for (int l = 0; l < c.n_layers; ++l) {
            const RowMatrix k = random_matrix(rng, n_new, c.kv_dim()), v = random_matrix(rng, n_new, c.kv_dim());
            cpu.write(l, start, k, v);
            gc::DeviceBuffer d_k = to_device(k), d_v = to_device(v);
            gpu.write(l, start, d_k.f32(), d_v.f32(), n_new);
        }
        cpu.advance(n_new);
        gpu.advance(n_new);
    }
}

}  // namespace

void add_kv_cache(std::vector<Case>& cases) {
    cases.push_back({"kv_cache(layers=3, seq_len=40, kv_heads=2, head_dim=6; prefill 7, decode x3)", 0.0, false,
                     [](Rng& rng) {
        glass::ModelConfig c;
        c.dim = 24; c.n_heads = 4; c.n_kv_heads = 2; c.n_layers = 3; c.seq_len = 40; c.hidden_dim = 8; c.vocab_size = 4;
        c.head_dim = c.dim / c.n_heads;
        glass::KVCache cpu(c);
        gc::DeviceKVCache gpu(c);
        double bad = 0;
        write_both(rng, c, cpu, gpu, {7, 1, 1, 1});
        bad += gpu.length() != cpu.length();
        for (int l = 0; l < c.n_layers; ++l) {
            const std::size_t n = std::size_t(cpu.length()) * c.kv_dim();
            bad += relative_error(gc::to_host(gpu.keys(l), n), RowMatrix(cpu.keys(l, cpu.length())));
            bad += relative_error(gc::to_host(gpu.values(l), n), RowMatrix(cpu.values(l, cpu.length())));
        }
        // The write rule is the CPU's: a hole or a write past the window is refused.
        gc::DeviceBuffer row(std::size_t(c.kv_dim()) * sizeof(float) * 64);
        for (int start : {gpu.length() + 1, gpu.length() - 1}) {
            try { gpu.write(0, start, row.f32(), row.f32(), 1); bad += 1; } catch (const glass::Error&) {}
        }
        try { gpu.write(0, gpu.length(), row.f32(), row.f32(), 64); bad += 1; } catch (const glass::Error&) {}
        return bad;
    }});

    // kv_write_int8 against glass::quantize_kv_row: every integer and every scale exactly equal
    // (value: how many differ; NaN scales must be NaN on both sides). Rows written at a start
    // position read from device memory (the decode graph's way) into a poisoned cache; rows
    // outside must keep their NaN scales. head_dim 70 leaves lanes of the warp with 2 or 3
    // values; the planted groups test the edges: all zeros (s = 0, q = 0), an inf and a NaN
    // (s = NaN, q = 0), max 127 so that s = 1 exactly and x = ±k.5 are ties that round half to
    // even (2.5 -> 2, -3.5 -> -4, 0.5 -> 0), and one huge group (1e30).
    struct W { int n_new, kv_heads, head_dim, start, capacity; };
    for (W w : {W{7, 3, 70, 2, 12}, W{1, 4, 64, 9, 10}, W{5, 1, 256, 0, 5}})
        cases.push_back({fmt("kv_write_int8(n_new=%d, kv_heads=%d, head_dim=%d, start=%d on device; ties, 0, inf, NaN;"
                             " q and scales exact)", w.n_new, w.kv_heads, w.head_dim, w.start),
                         0.0, false, [w](Rng& rng) {
            const int kv_dim = w.kv_heads * w.head_dim;
            RowMatrix k = random_matrix(rng, w.n_new, kv_dim, 3.0f), v = random_matrix(rng, w.n_new, kv_dim);
            k.row(0).head(w.head_dim).setZero();
            if (w.kv_heads > 1) {
                k(0, w.head_dim + 3) = INFINITY;
                v(0, w.head_dim + 1) = NAN;
            }
            const int tie = w.n_new - 1, g = w.kv_heads - 1;  // a group whose scale is exactly 1
            for (int i = 0; i < w.head_dim; ++i) v(tie, g * w.head_dim + i) = float(i % 5) - 2.0f;
            v(tie, g * w.head_dim + 0) = 127.0f;
            v(tie, g * w.head_dim + 1) = 2.5f;
            v(tie, g * w.head_dim + 2) = -3.5f;
            v(tie, g * w.head_dim + 3) = 0.5f;
            if (w.n_new > 2) k.row(1) *= 1e30f;
            const std::size_t values = std::size_t(w.capacity) * kv_dim, scales = std::size_t(w.capacity) * w.kv_heads;
            gc::DeviceBuffer d_keys(values), d_values(values), d_key_scales = poisoned(scales),
                d_value_scales = poisoned(scales);
            gc::DeviceBuffer d_k = to_device(k), d_v = to_device(v);
            const int start[1] = {w.start};
            gc::DeviceBuffer d_start = gc::to_device(std::span<const int>(start));
            gc::kv_write_int8(static_cast<std::int8_t*>(d_keys.data()), d_key_scales.f32(),
                              static_cast<std::int8_t*>(d_values.data()), d_value_scales.f32(), d_k.f32(), d_v.f32(),
                              w.n_new, w.kv_heads, w.head_dim, gc::IntArg::at(d_start.i32()));
            double differ = 0;
            for (int which = 0; which < 2; ++which) {
                const Int8Kv want = quantize_rows(which ? v : k, w.kv_heads, w.head_dim);
                std::vector<std::int8_t> q(values);
                gc::download(q.data(), (which ? d_values : d_keys).data(), values);
                const std::vector<float> got_scales = gc::to_host((which ? d_value_scales : d_key_scales).f32(), scales);
                for (std::size_t i = 0; i < want.q.size(); ++i) differ += q[std::size_t(w.start) * kv_dim + i] != want.q[i];
                for (std::size_t r = 0; r < std::size_t(w.capacity) * w.kv_heads; ++r) {
                    const std::size_t written = r - std::size_t(w.start) * w.kv_heads;
                    const bool inside = r >= std::size_t(w.start) * w.kv_heads && written < want.scales.size();
                    const float expect = inside ? want.scales[written] : NAN;  // outside: still the poison
                    differ += std::isnan(expect) ? !std::isnan(got_scales[r])
                                                 : std::memcmp(&expect, &got_scales[r], sizeof(float)) != 0;
                }
                if (which == 1) {  // the planted tie group really has s = 1 and half-even integers
                    const std::size_t at = std::size_t(tie) * kv_dim + std::size_t(g) * w.head_dim;
                    differ += want.scales[std::size_t(tie) * w.kv_heads + g] != 1.0f;
                    differ += want.q[at + 1] != 2 || want.q[at + 2] != -4 || want.q[at + 3] != 0;
                }
            }
            return differ;
        }});

    // DeviceKVCache(c, int8) against KVCache(c, int8): the rows it dequantizes to equal the CPU
    // cache's exactly (the same integers times the same scales), over prefill and decodes; the
    // bytes are kv_bytes_per_token(c, int8) per position.
    cases.push_back({"kv_cache(int8, layers=2, seq_len=20, kv_heads=2, head_dim=40; prefill 6, decode x2; exact)", 0.0,
                     false, [](Rng& rng) {
        glass::ModelConfig c;
        c.dim = 160; c.n_heads = 4; c.n_kv_heads = 2; c.n_layers = 2; c.seq_len = 20; c.hidden_dim = 8; c.vocab_size = 4;
        c.head_dim = c.dim / c.n_heads;
        glass::KVCache cpu(c, glass::KvType::int8);
        gc::DeviceKVCache gpu(c, glass::KvType::int8);
        double bad = gpu.type() != glass::KvType::int8;
        write_both(rng, c, cpu, gpu, {6, 1, 1});
        const int n = cpu.length();
        for (int l = 0; l < c.n_layers; ++l)
            for (int which = 0; which < 2; ++which) {
                const gc::KvRows rows = which ? gpu.value_rows(l) : gpu.key_rows(l);
                std::vector<std::int8_t> q(std::size_t(n) * c.kv_dim());
                gc::download(q.data(), rows.q, q.size());
                const std::vector<float> scales = gc::to_host(rows.scales, std::size_t(n) * c.n_kv_heads);
                RowMatrix got(n, c.kv_dim());
                for (int r = 0; r < n; ++r)
                    glass::dequantize_kv_row(q.data() + std::size_t(r) * c.kv_dim(), scales.data() + std::size_t(r) * c.n_kv_heads,
                                             c.n_kv_heads, c.head_dim, got.row(r).data());
                bad += relative_error(std::span<const float>(got.data(), std::size_t(got.size())),
                                      RowMatrix(which ? cpu.values(l, n) : cpu.keys(l, n)));
            }
        bad += gpu.bytes_used(c) != glass::kv_bytes_per_token(c, glass::KvType::int8) * n;
        bad += gpu.bytes_used(c) != cpu.bytes_used(c);
        try { gpu.keys(0); bad += 1; } catch (const glass::Error&) {}  // no fp32 view of an int8 cache
        return bad;
    }});
}

// The decode graph's mechanics at op level: record rope + kv_write + attention_decode once, with
// the position read from device memory, then replay it at successive positions, rewriting only
// that int; each replay must match the CPU reference at its own position. And a capture that tries
// to wait for the device must fail with a named error and leave the stream usable.
void add_graph(std::vector<Case>& cases) {
    cases.push_back({"graph(rope + kv_write + attention_decode, captured once, 6 replays at positions 3..8)",
                     kF32, false, [](Rng& rng) {
        const gc::AttentionDims d{4, 2, 64};
        const int kv_dim = d.n_kv_heads * d.head_dim, q_dim = d.n_heads * d.head_dim, capacity = 16;
        const float scale = 1.0f / std::sqrt(float(d.head_dim)), theta = 1e4f;
        const RowMatrix k_all = random_matrix(rng, capacity, kv_dim), v_all = random_matrix(rng, capacity, kv_dim);
        gc::DeviceBuffer keys = poisoned(std::size_t(capacity) * kv_dim), values = poisoned(std::size_t(capacity) * kv_dim);
        gc::DeviceBuffer freq = gc::rope_frequencies(d.head_dim, theta);
        gc::DeviceBuffer q = poisoned(q_dim), k = poisoned(kv_dim), v = poisoned(kv_dim);
        gc::DeviceBuffer scores = poisoned(std::size_t(d.n_heads) * capacity), out = poisoned(q_dim);
        gc::DeviceBuffer step(2 * sizeof(int));  // {position, position + 1}
        const auto enqueue_step = [&](gc::IntArg pos, gc::IntArg n_k) {
            gc::rope(q.f32(), 1, d.n_heads, d.head_dim, pos, freq.f32(), glass::RopeLayout::half_split);
            gc::rope(k.f32(), 1, d.n_kv_heads, d.head_dim, pos, freq.f32(), glass::RopeLayout::half_split);
            gc::kv_write(keys.f32(), values.f32(), k.f32(), v.f32(), 1, kv_dim, pos);
            gc::attention_decode(q.f32(), keys.f32(), values.f32(), n_k, d, scale, scores.f32(), out.f32());
        };
        // Rows 0..2 the ordinary way (host positions).
        for (int p = 0; p < 3; ++p) {
            const RowMatrix kp = k_all.row(p), vp = v_all.row(p);
            gc::upload(k.data(), kp.data(), kv_dim * sizeof(float));
            gc::upload(v.data(), vp.data(), kv_dim * sizeof(float));
            gc::rope(k.f32(), 1, d.n_kv_heads, d.head_dim, p, freq.f32(), glass::RopeLayout::half_split);
            gc::kv_write(keys.f32(), values.f32(), k.f32(), v.f32(), 1, kv_dim, p);
        }
        gc::DeviceGraph graph;
        graph.capture([&] { enqueue_step(gc::IntArg::at(step.i32()), gc::IntArg::at(step.i32() + 1)); });
        double worst = graph.nodes() >= 4 ? 0.0 : INFINITY;  // 2 rope + kv_write + attention (+ copies)
        for (int p = 3; p < 9; ++p) {
            const RowMatrix qp = random_matrix(rng, 1, q_dim), kp = k_all.row(p), vp = v_all.row(p);
            const int positions[2] = {p, p + 1};
            gc::upload(step.data(), positions, sizeof positions);
            gc::upload(q.data(), qp.data(), q_dim * sizeof(float));
            gc::upload(k.data(), kp.data(), kv_dim * sizeof(float));
            gc::upload(v.data(), vp.data(), kv_dim * sizeof(float));
            graph.replay();
            // CPU: the same step at position p over rows 0..p.
            RowMatrix cq = qp, ck = k_all.topRows(p + 1);
            glass::apply_rope(cq, d.n_heads, d.head_dim, p, theta, glass::RopeLayout::half_split);
            for (int r = 0; r <= p; ++r) {
                RowMatrix row = ck.row(r);
                glass::apply_rope(row, d.n_kv_heads, d.head_dim, r, theta, glass::RopeLayout::half_split);
                ck.row(r) = row;
            }
            const RowMatrix want = cpu_attention(cq, ck, v_all.topRows(p + 1), p, d);
            worst = std::max(worst, relative_error(gc::to_host(out.f32(), q_dim), want));
        }
        return worst;
    }});
    cases.push_back({"graph(a wait inside a capture is refused; the stream works after it)", 0.0, false,
                     [](Rng& rng) {
        const RowMatrix x = random_matrix(rng, 3, 8);
        gc::DeviceBuffer d_x = to_device(x), d_y = to_device(x);
        gc::DeviceGraph graph;
        double bad = 0;
        try {
            graph.capture([&] {
                gc::residual_add(d_x.f32(), d_y.f32(), 24);
                gc::synchronize("a wait inside a capture");  // not allowed while capturing
            });
            bad += 1;  // the capture should have thrown
        } catch (const glass::Error& e) {
            bad += std::string(e.what()).find("a wait inside a capture") == std::string::npos;
        }
        bad += !graph.empty();
        gc::residual_add(d_x.f32(), d_y.f32(), 24);  // not captured: runs (once) now
        const std::vector<float> got = gc::to_host(d_x.f32(), 24);
        for (int i = 0; i < 24; ++i) bad += got[std::size_t(i)] != 2.0f * x.data()[i];
        return bad;
    }});
}

}  // namespace cuda_ops_test
