// 14_cuda_twin — every stage again, as CUDA kernels, checked against the CPU reference.
//
// In:  the prompt "Once upon a time" (or argv[1]) -> ids [n] with tok512 (BOS first); the shipped
//      model (dim 64, 8 heads, 4 KV heads, head_dim 8, hidden 172, vocab 512).
// Out: layer 0 computed twice — by the kernels of cuda/ (glass_cuda.hpp) and by the headers of
//      include/glass — with the relative error ‖cuda − cpu‖₂ / ‖cpu‖₂ of each stage's output;
//      then greedy generation (run.c's -n 32) by CudaSession beside CpuSession, token for token;
//      then the same decode replayed as one CUDA graph per step, against launching kernel by kernel.
//
// This program is linked to the CPU emulator build of cuda/ (emulator/): the same .cu files,
// compiled by g++, each GPU thread a fiber. So it runs anywhere, and what it proves is that the
// kernels compute the same numbers as the reference — not how fast a GPU would do it.
//
// Usage: 14_cuda_twin [prompt]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "glass/attention.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/embedding.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/generate.hpp"
#include "glass/mlp.hpp"
#include "glass/rmsnorm.hpp"
#include "glass/rope.hpp"
#include "glass/sampling.hpp"
#include "glass/tensor.hpp"
#include "glass/transformer.hpp"
#include "cuda_session.hpp"

namespace gc = glass::cuda;
using glass::RowMatrix;

// ‖a − b‖₂ / ‖b‖₂ (a NaN anywhere in a, e.g. a number no kernel wrote, makes it NaN: not "ok").
static double relative_error(std::span<const float> a, std::span<const float> b) {
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
        diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        norm += double(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
}

// One stage's line: its output on the device against the CPU's [rows, cols] matrix.
static void report(const char* stage, const float* d_out, const RowMatrix& cpu) {
    const std::vector<float> gpu = gc::to_host(d_out, static_cast<std::size_t>(cpu.size()));
    const double e = relative_error(gpu, std::span<const float>(cpu.data(), gpu.size()));
    std::printf("  %-34s [%ld, %ld]  %8.1e  %s\n", stage, static_cast<long>(cpu.rows()),
                static_cast<long>(cpu.cols()), e, e <= 1e-5 ? "ok" : "DIFFERENT");
}

// A device buffer of `n` floats filled with NaN, so that a number a kernel forgets shows.
static gc::DeviceBuffer poisoned(std::size_t n) {
    gc::DeviceBuffer b(n * sizeof(float));
    gc::poison(b.f32(), n);
    return b;
}

static gc::OwnedMatrix upload(const glass::ConstMatrixMap& m) {
    return gc::upload_matrix(m.data(), int(m.rows()), int(m.cols()), gc::WeightType::f32);
}

int main(int argc, char** argv) {
    const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const glass::ModelConfig& c = model.config;
    const glass::LayerWeights& w = model.layers[0];
    const std::string prompt = argc > 1 ? argv[1] : "Once upon a time";
    const std::vector<int> ids = tok.encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    const int n = static_cast<int>(ids.size());
    const std::size_t rows = std::size_t(n);

    std::string why;
    if (!gc::device_present(&why)) {
        std::printf("no CUDA device: %s\n", why.c_str());
        return 1;
    }
    std::printf("device: %s\n", gc::device_name().c_str());
    std::printf("prompt: %s (%d tokens)\n", prompt.c_str(), n);
    std::printf("layer 0, stage by stage (relative error of the CUDA output; 1e-5 allowed):\n");

    // 2. Embedding: a gather, exact.
    const gc::OwnedMatrix table = upload(model.embedding_table());
    const gc::DeviceBuffer d_ids = gc::to_device(std::span<const int>(ids));
    gc::DeviceBuffer x = poisoned(rows * c.dim);
    gc::embedding(table.view, d_ids.i32(), n, x.f32());
    RowMatrix cpu_x = glass::embed_tokens(model.embedding_table(), ids);
    report("embedding", x.f32(), cpu_x);

    // 4a. RMSNorm, one block per row.
    const gc::DeviceBuffer gain = gc::to_device(std::span<const float>(w.rms_att.data(), std::size_t(c.dim)));
    gc::DeviceBuffer xn = poisoned(rows * c.dim);
    gc::rmsnorm(x.f32(), gain.f32(), n, c.dim, c.norm_eps, xn.f32());
    const RowMatrix cpu_xn = glass::rmsnorm(cpu_x, w.rms_att, c.norm_eps);
    report("rmsnorm", xn.f32(), cpu_xn);

    // 4b. q = xn Wqᵀ by each of the four matmul kernels; k and v by the default.
    const gc::OwnedMatrix wq = upload(w.wq), wk = upload(w.wk), wv = upload(w.wv), wo = upload(w.wo);
    RowMatrix cpu_q = cpu_xn * w.wq.transpose();
    gc::DeviceBuffer q = poisoned(rows * c.dim);
    for (gc::MatmulKernel kernel : {gc::MatmulKernel::naive, gc::MatmulKernel::tiled,
                                    gc::MatmulKernel::warp_per_row, gc::MatmulKernel::cublas}) {
        gc::poison(q.f32(), rows * c.dim);
        gc::matmul(kernel, xn.f32(), n, wq.view, q.f32());
        char label[64];
        std::snprintf(label, sizeof label, "q = xn Wq^T (%s)", gc::to_string(kernel));
        report(label, q.f32(), cpu_q);
    }
    gc::DeviceBuffer k = poisoned(rows * c.kv_dim()), v = poisoned(rows * c.kv_dim());
    gc::matmul(gc::MatmulKernel::automatic, xn.f32(), n, wk.view, k.f32());
    gc::matmul(gc::MatmulKernel::automatic, xn.f32(), n, wv.view, v.f32());
    RowMatrix cpu_k = cpu_xn * w.wk.transpose();
    const RowMatrix cpu_v = cpu_xn * w.wv.transpose();
    report("k = xn Wk^T", k.f32(), cpu_k);

    // 3. RoPE on q and k, positions 0 .. n-1.
    const gc::DeviceBuffer freq = gc::rope_frequencies(c.head_dim, c.rope_theta);
    gc::rope(q.f32(), n, c.n_heads, c.head_dim, 0, freq.f32(), c.rope_layout);
    gc::rope(k.f32(), n, c.n_kv_heads, c.head_dim, 0, freq.f32(), c.rope_layout);
    glass::apply_rope(cpu_q, c.n_heads, c.head_dim, 0, c.rope_theta, c.rope_layout);
    glass::apply_rope(cpu_k, c.n_kv_heads, c.head_dim, 0, c.rope_theta, c.rope_layout);
    report("rope(q)", q.f32(), cpu_q);
    report("rope(k)", k.f32(), cpu_k);

    // 4c. Causal attention, naive: scores [heads, n, n], softmax, weighted sum of V.
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    gc::DeviceBuffer scores = poisoned(std::size_t(c.n_heads) * rows * rows), att = poisoned(rows * c.dim);
    gc::attention_naive(q.f32(), k.f32(), v.f32(), n, 0, {c.n_heads, c.n_kv_heads, c.head_dim}, scale,
                        scores.f32(), att.f32());
    const RowMatrix cpu_att = glass::causal_attention(cpu_q, cpu_k, cpu_v, 0, {c.n_heads, c.n_kv_heads, c.head_dim}, scale);
    report("attention (naive)", att.f32(), cpu_att);

    // Residual: x += att Woᵀ.
    gc::DeviceBuffer tmp = poisoned(rows * c.dim);
    gc::matmul(gc::MatmulKernel::automatic, att.f32(), n, wo.view, tmp.f32());
    gc::residual_add(x.f32(), tmp.f32(), std::int64_t(rows) * c.dim);
    cpu_x += cpu_att * w.wo.transpose();
    report("x += attention Wo^T", x.f32(), cpu_x);

    // 5. The MLP half: x += swiglu_mlp(rmsnorm(x)).
    const gc::DeviceBuffer gain2 = gc::to_device(std::span<const float>(w.rms_ffn.data(), std::size_t(c.dim)));
    gc::rmsnorm(x.f32(), gain2.f32(), n, c.dim, c.norm_eps, xn.f32());
    const gc::OwnedMatrix w1 = upload(w.w1), w2 = upload(w.w2), w3 = upload(w.w3);
    gc::DeviceBuffer gate = poisoned(rows * c.hidden_dim), up = poisoned(rows * c.hidden_dim);
    gc::mlp(gc::MatmulKernel::automatic, xn.f32(), n, w1.view, w2.view, w3.view, gate.f32(), up.f32(), tmp.f32());
    gc::residual_add(x.f32(), tmp.f32(), std::int64_t(rows) * c.dim);
    cpu_x += glass::swiglu_mlp(glass::rmsnorm(cpu_x, w.rms_ffn, c.norm_eps), w.w1, w.w2, w.w3);
    report("x += mlp(rmsnorm(x))", x.f32(), cpu_x);

    // 6-8. The whole model: CudaSession (weights uploaded once, every layer on the device, decode
    // attention over the device KV cache) beside CpuSession, greedy, as many new tokens as run.c
    // makes with -n 32 (28 after the default prompt's 5).
    gc::CudaSession gpu(model);
    glass::CpuSession cpu(model);
    const int new_tokens = glass::new_tokens_for_steps(32, n);
    std::vector<int> gpu_ids, cpu_ids;
    double worst = 0;
    std::span<const float> g = gpu.prefill(ids), h = cpu.prefill(ids);
    for (int step = 0; step < new_tokens; ++step) {
        worst = std::max(worst, relative_error(g, h));
        gpu_ids.push_back(glass::sample_argmax(g));
        cpu_ids.push_back(glass::sample_argmax(h));
        g = gpu.decode(gpu_ids.back());
        h = cpu.decode(cpu_ids.back());
    }
    std::printf("greedy, %d new tokens (run.c -n 32):\n", new_tokens);
    std::printf("  CudaSession: %s\n", tok.decode_all(gpu_ids).c_str());
    std::printf("  CpuSession:  %s\n", tok.decode_all(cpu_ids).c_str());
    std::printf("  same tokens: %s\n", gpu_ids == cpu_ids ? "yes" : "NO");
    std::printf("  worst logits error, all steps: %.1e  %s\n", worst, worst <= 1e-5 ? "ok" : "DIFFERENT");

    // 9. Decode by CUDA graph replay (CudaOptions::graph): the first decode runs as usual and then
    // records every launch of one step into a graph, with the token id and position read from
    // device memory; each later decode rewrites those ints and replays the graph with one call.
    // Same kernels, same order, same numbers: only the cost of launching them changes (a GPU's
    // concern, which the emulator cannot show).
    gc::CudaOptions graph_options;
    graph_options.graph = true;
    gc::CudaSession graphed(model, graph_options);
    gpu.reset();
    double graph_difference = 0;
    std::span<const float> launched = gpu.prefill(ids), replayed = graphed.prefill(ids);
    for (int step = 0; step < new_tokens; ++step) {
        for (std::size_t i = 0; i < launched.size(); ++i)
            graph_difference = std::max(graph_difference, double(std::fabs(launched[i] - replayed[i])));
        const int next = glass::sample_argmax(launched);
        launched = gpu.decode(next);
        replayed = graphed.decode(next);
    }
    std::printf("decode by CUDA graph replay (--cuda-graph), same %d tokens:\n", new_tokens);
    std::printf("  launches recorded in one decode step: %zu\n", graphed.decode_graph_nodes());
    std::printf("  largest logit difference from launching one by one: %.1e\n", graph_difference);
    return 0;
}
