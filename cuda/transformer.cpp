/// \file
/// \brief cuda/transformer.cpp — journey steps 4–8 on the GPU: CudaSession, the CUDA twin of CpuSession.
/// ```text
/// The same forward pass as glass/transformer.hpp, step for step, with every stage a device call
/// from glass_cuda.hpp. Weights go to the GPU once, in the constructor; a forward pass uploads its
/// ids (n ints), runs every layer on the device and brings back only the last position's logits
/// [vocab]. Host code here is bookkeeping: shapes, the cache's length, which kernel to launch.
///
///   x = embedding rows of ids                               [n, dim]
///   for each layer:
///     xn = rmsnorm(x);  q, k, v = xn Wqᵀ, xn Wkᵀ, xn Wvᵀ      [n, dim], [n, kv_dim] ×2
///     rope(q), rope(k);  cache.write(k, v)                  rows start_pos .. start_pos+n-1
///     att = attention(q, cache rows 0 .. start_pos+n-1)     naive for prefill, decode kernel for n=1;
///                                                           CudaOptions::attention = flash: flash_attention
///                                                           for prefill, flash_decode for long caches
///     x += att Woᵀ
///     x += mlp(rmsnorm(x))
///   logits = classifier · rmsnorm(x[last])                  [vocab] -> host
///
/// With CudaOptions::kv = int8 the cache keeps int8 K/V plus a scale per (position, KV head)
/// (cache.write quantizes on the device, kv_write_int8) and both attentions read them directly.
/// With CudaOptions::graph, decode records that whole sequence of launches once as a CUDA graph and
/// replays it for every later token (decode_with_graph, at the end).
/// ```
#include <algorithm>
#include <cmath>

#include "glass/checkpoint.hpp"
#include "glass/rope.hpp"
#include "glass/transformer.hpp"  // check_forward_input: the same input rules as the CPU
#include "cuda_session.hpp"

namespace glass::cuda {

DeviceBuffer rope_frequencies(int head_dim, float theta) {
    std::vector<float> f(static_cast<std::size_t>(head_dim / 2));
    for (int i = 0; i < head_dim / 2; ++i) f[static_cast<std::size_t>(i)] = rope_frequency(i, head_dim, theta);
    return to_device(std::span<const float>(f));
}

static DeviceBuffer upload_vector(const float* host, int n) {
    return to_device(std::span<const float>(host, static_cast<std::size_t>(n)));
}

static OwnedMatrix upload_weights(const ConstMatrixMap& m, WeightType type) {
    return upload_matrix(m.data(), static_cast<int>(m.rows()), static_cast<int>(m.cols()), type);
}

// Runs before any member touches the GPU (config_ is the first member), so a machine without one
// gets "no CUDA device: <why>" rather than the failure of some first allocation.
const ModelConfig& require_device(const ModelConfig& c) {
    std::string why;
    if (!device_present(&why)) fail("no CUDA device: ", why);
    return c;
}

DeviceWeights::DeviceWeights(const Model& model, WeightType type) {
    const ModelConfig& c = model.config;
    for (const LayerWeights& w : model.layers) {
        Layer l;
        l.rms_att = upload_vector(w.rms_att.data(), c.dim);
        l.rms_ffn = upload_vector(w.rms_ffn.data(), c.dim);
        l.wq = upload_weights(w.wq, type);
        l.wk = upload_weights(w.wk, type);
        l.wv = upload_weights(w.wv, type);
        l.wo = upload_weights(w.wo, type);
        l.w1 = upload_weights(w.w1, type);
        l.w2 = upload_weights(w.w2, type);
        l.w3 = upload_weights(w.w3, type);
        layers.push_back(std::move(l));
    }
    // A q8/q4 model keeps its embedding table fp32 (a lookup reads one row per token, so its width
    // costs no time) and quantizes the classifier on its own, as glass::quantized_model() does.
    embedding = upload_weights(model.embedding_table(), is_quantized(type) ? WeightType::f32 : type);
    if (c.shared_classifier && !is_quantized(type)) {
        classifier = embedding.view;  // one table, read by both ends of the model
    } else {
        classifier_own = upload_weights(model.output_classifier(), type);
        classifier = classifier_own.view;
    }
    rms_final = upload_vector(model.rms_final, c.dim);
    frequencies = rope_frequencies(c.head_dim(), c.rope_theta);
    // Bytes read per forward pass: every layer's matrices and the classifier as stored (scales
    // included), the fp32 norm gains; of the embedding table one row, which glass::Model's
    // weight_bytes leaves out too.
    bytes_per_forward = 4 * (std::int64_t{c.n_layers} * 2 * c.dim + c.dim) + matrix_bytes(classifier);
    for (const Layer& l : layers)
        for (const OwnedMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) bytes_per_forward += matrix_bytes(m->view);
    synchronize("weight upload");
}

// The option combinations CudaSession refuses, checked before anything is uploaded.
static const CudaOptions& checked(const CudaOptions& options) {
    if (options.matmul == MatmulKernel::cublas && options.weights != WeightType::f32)
        fail("the cublas matmul takes fp32 weights only, asked for ", to_string(options.weights));
    if (options.graph && options.naive_decode_attention)
        fail("the decode graph needs the attention_decode kernel (the naive attention's grid depends "
             "on the position); use one option or the other");
    if (options.attention == SessionAttention::flash && options.naive_decode_attention)
        fail("naive_decode_attention and attention = flash both choose the decode attention; use one or the other");
    if (options.flash_decode_min_keys < 1)
        fail("flash_decode_min_keys must be at least 1, got ", options.flash_decode_min_keys);
    if (options.flash_decode_chunk < 1 || options.flash_decode_chunk > 4096)
        fail("flash_decode_chunk must be in [1, 4096], got ", options.flash_decode_chunk);
    return options;
}

const char* to_string(SessionAttention a) { return a == SessionAttention::flash ? "flash" : "standard"; }

CudaSession::CudaSession(const Model& model, CudaOptions options)
    : config_(require_device(model.config)), options_(checked(options)), weights_(model, options.weights),
      cache_(model.config, options.kv) {
    const ModelConfig& c = config_;
    logits_dev_ = DeviceBuffer(static_cast<std::size_t>(c.vocab_size) * sizeof(float));
    ids_ = DeviceBuffer(static_cast<std::size_t>(c.seq_len) * sizeof(int));
    step_ = DeviceBuffer(3 * sizeof(int));
    logits_.resize(static_cast<std::size_t>(c.vocab_size));
    if (options_.attention == SessionAttention::flash) {  // partials for any cache length: decode never allocates
        const std::size_t floats = static_cast<std::size_t>(c.n_heads) *
                                   static_cast<std::size_t>(flash_decode_splits(c.seq_len, options_.flash_decode_chunk)) *
                                   static_cast<std::size_t>(c.head_dim() + 2);
        flash_partial_ = DeviceBuffer(floats * sizeof(float));
        poison(flash_partial_.f32(), floats);
    }
}

bool CudaSession::uses_flash_decode(int n_keys) const {
    return options_.attention == SessionAttention::flash && n_keys >= options_.flash_decode_min_keys;
}

CudaSession::~CudaSession() = default;

// Grows the activation scratch to n_tokens rows and the attention scores to score_floats. New
// buffers are NaN-filled, so an element a kernel forgets to write poisons the logits visibly.
void CudaSession::ensure_scratch(int n_tokens, std::int64_t score_floats) {
    const ModelConfig& c = config_;
    if (n_tokens > scratch_rows_) {
        const auto make = [n_tokens](int width) {
            const std::size_t n = static_cast<std::size_t>(n_tokens) * static_cast<std::size_t>(width);
            DeviceBuffer b(n * sizeof(float));
            poison(b.f32(), n);
            return b;
        };
        x_ = make(c.dim);
        xn_ = make(c.dim);
        q_ = make(c.dim);
        k_ = make(c.kv_dim());
        v_ = make(c.kv_dim());
        att_ = make(c.dim);
        tmp_ = make(c.dim);
        gate_ = make(c.hidden_dim);
        up_ = make(c.hidden_dim);
        scratch_rows_ = n_tokens;
        ++scratch_generation_;
    }
    if (score_floats > score_capacity_) {
        // At least one row per head over the whole window: decode's need grows by n_heads floats
        // every step, and reallocating each time would cost a cudaFree (a device-wide wait) per token.
        score_floats = std::max(score_floats, std::int64_t{c.n_heads} * c.seq_len);
        scores_ = DeviceBuffer(static_cast<std::size_t>(score_floats) * sizeof(float));
        poison(scores_.f32(), static_cast<std::size_t>(score_floats));
        score_capacity_ = score_floats;
        ++scratch_generation_;
    }
}

// One forward pass over ids. Normally only the last position's logits come back ([vocab]);
// with every_row (speculative decoding's check) every position's do ([n, vocab]).
std::span<const float> CudaSession::forward(std::span<const int> ids, bool every_row) {
    const ModelConfig& c = config_;
    check_forward_input(c, cache_.length(), ids);  // ids are checked here, on the host
    const int n = static_cast<int>(ids.size());
    const int start_pos = cache_.length();
    const int n_k = start_pos + n;  // keys attended to by the last position
    const bool decode_kernel = n == 1 && !every_row && !options_.naive_decode_attention;
    const bool flash = options_.attention == SessionAttention::flash;  // flash_attention needs no scores
    ensure_scratch(n, decode_kernel ? std::int64_t{c.n_heads} * n_k : flash ? 0 : std::int64_t{c.n_heads} * n * n_k);
    float* rows_dev = nullptr;
    std::span<float> out = logits_;
    if (every_row) {
        const std::int64_t floats = std::int64_t{n} * c.vocab_size;
        if (floats > rows_logits_capacity_) {
            rows_logits_dev_ = DeviceBuffer(static_cast<std::size_t>(floats) * sizeof(float));
            rows_logits_capacity_ = floats;
        }
        poison(rows_logits_dev_.f32(), static_cast<std::size_t>(floats));  // every row must be written
        rows_logits_.resize(static_cast<std::size_t>(floats));
        rows_dev = rows_logits_dev_.f32();
        out = rows_logits_;
    }
    upload(ids_.data(), ids.data(), ids.size_bytes());
    enqueue_forward(ids_.i32(), n, start_pos, n_k, decode_kernel, rows_dev, decode_kernel && uses_flash_decode(n_k));
    cache_.advance(n);
    const void* from = every_row ? rows_logits_dev_.data() : logits_dev_.data();
    download(out.data(), from, out.size_bytes());  // waits for the GPU
    return out;
}

// Speculative decoding's check: every row's logits.
std::span<const float> CudaSession::verify(std::span<const int> ids) { return forward(ids, /*every_row=*/true); }

// Every launch of one forward pass, in order; nothing here waits for the GPU, so the same calls can
// run directly or be recorded into the decode graph. start_pos and n_keys (= start_pos + n) are
// IntArgs: plain numbers, or (in the graph) ints the kernels read from step_.
void CudaSession::enqueue_forward(const int* d_ids, int n, IntArg start_pos, IntArg n_keys, bool decode_kernel,
                                  float* every_row, bool flash_decode_now) {
    const ModelConfig& c = config_;
    const MatmulKernel mm = options_.matmul;
    const AttentionDims dims{c.n_heads, c.n_kv_heads, c.head_dim()};
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));

    embedding(weights_.embedding.view, d_ids, n, x_.f32());  // [n, dim]
    for (int l = 0; l < c.n_layers; ++l) {
        const DeviceWeights::Layer& w = weights_.layers[static_cast<std::size_t>(l)];
        // Attention half.
        rmsnorm(x_.f32(), w.rms_att.f32(), n, c.dim, c.norm_eps, xn_.f32());
        matmul(mm, xn_.f32(), n, w.wq.view, q_.f32());  // [n, dim]
        matmul(mm, xn_.f32(), n, w.wk.view, k_.f32());  // [n, kv_dim]
        matmul(mm, xn_.f32(), n, w.wv.view, v_.f32());  // [n, kv_dim]
        rope(q_.f32(), n, c.n_heads, c.head_dim(), start_pos, weights_.frequencies.f32(), c.rope_layout);
        rope(k_.f32(), n, c.n_kv_heads, c.head_dim(), start_pos, weights_.frequencies.f32(), c.rope_layout);
        cache_.write(l, start_pos, k_.f32(), v_.f32(), n);
        if (decode_kernel && flash_decode_now)  // under the graph n_keys is on the device: grid for the window
            flash_decode(q_.f32(), cache_.key_rows(l), cache_.value_rows(l), n_keys,
                         n_keys.on_device() ? c.seq_len : n_keys.value, dims, scale, options_.flash_decode_chunk,
                         flash_partial_.f32(), att_.f32());
        else if (decode_kernel)
            attention_decode(q_.f32(), cache_.key_rows(l), cache_.value_rows(l), n_keys, dims, scale,
                             scores_.f32(), att_.f32());
        else if (options_.attention == SessionAttention::flash)
            flash_attention(q_.f32(), cache_.key_rows(l), cache_.value_rows(l), n, start_pos.value, dims, scale,
                            att_.f32());
        else
            attention_naive(q_.f32(), cache_.key_rows(l), cache_.value_rows(l), n, start_pos.value, dims, scale,
                            scores_.f32(), att_.f32());
        matmul(mm, att_.f32(), n, w.wo.view, tmp_.f32());
        residual_add(x_.f32(), tmp_.f32(), std::int64_t{n} * c.dim);
        // MLP half.
        rmsnorm(x_.f32(), w.rms_ffn.f32(), n, c.dim, c.norm_eps, xn_.f32());
        mlp(mm, xn_.f32(), n, w.w1.view, w.w2.view, w.w3.view, gate_.f32(), up_.f32(), tmp_.f32());
        residual_add(x_.f32(), tmp_.f32(), std::int64_t{n} * c.dim);
    }

    if (every_row) {  // verify: final norm of every row, then the classifier over all of them
        rmsnorm(x_.f32(), weights_.rms_final.f32(), n, c.dim, c.norm_eps, xn_.f32());
        matmul(mm, xn_.f32(), n, weights_.classifier, every_row);  // [n, vocab]
        return;
    }
    // Only the last position's logits: final norm of its row, then the classifier.
    const float* last = x_.f32() + static_cast<std::size_t>(n - 1) * static_cast<std::size_t>(c.dim);
    rmsnorm(last, weights_.rms_final.f32(), 1, c.dim, c.norm_eps, xn_.f32());
    matmul(mm, xn_.f32(), 1, weights_.classifier, logits_dev_.f32());  // [vocab]
}

std::span<const float> CudaSession::prefill(std::span<const int> ids) { return forward(ids); }

std::span<const float> CudaSession::decode(int id) {
    if (options_.graph) return decode_with_graph(id);
    const int one[1] = {id};
    return forward(one);
}

// Decode as one graph replay. Launching a step's ~16 kernels per layer one by one costs CPU time
// and leaves gaps on the GPU between them; for a small model those gaps, not the weight reads, set
// the speed. So the whole step is recorded once (enqueue_forward, with the id, the position and the
// key count read from step_ on the device), and every decode after that only rewrites step_ and
// replays. The host still checks everything forward() checks, before each replay.
std::span<const float> CudaSession::decode_with_graph(int id) {
    const ModelConfig& c = config_;
    const int pos = cache_.length();
    const int one[1] = {id};
    check_forward_input(c, pos, one);  // the id, and room in the window: all the cache's rule needs
    ensure_scratch(1, std::int64_t{c.n_heads} * c.seq_len);  // scores for any position: no regrowth
    // Which decode attention this step uses (attention = flash: flash_decode from
    // flash_decode_min_keys keys on); the graph is recorded for one of the two.
    const bool flash = uses_flash_decode(pos + 1);
    if (decode_graph_.empty() || graph_generation_ != scratch_generation_ || flash != graph_flash_) {
        // First decode, or the scratch buffers moved (the graph holds their addresses), or the
        // cache just grew into flash_decode's range (or a new sequence fell back below it): this
        // step runs the ordinary way, which also warms up what the graph uses (cuBLAS, kernel
        // loading); then the next steps are recorded. Recording runs nothing, so step_ may hold
        // anything. n_k only grows until reset, so the choice holds for every replay.
        const std::span<const float> logits = forward(one);
        const int* step = step_.i32();  // {id, position, position + 1}
        decode_graph_.capture([&] {
            enqueue_forward(step, 1, IntArg::at(step + 1), IntArg::at(step + 2), /*decode_kernel=*/true, nullptr, flash);
        });
        graph_generation_ = scratch_generation_;
        graph_flash_ = flash;
        return logits;
    }
    const int step[3] = {id, pos, pos + 1};
    upload(step_.data(), step, sizeof step);  // same stream: lands before the replay reads it
    decode_graph_.replay();
    cache_.advance(1);
    download(logits_.data(), logits_dev_.data(), logits_.size() * sizeof(float));  // waits for the GPU
    return logits_;
}

}  // namespace glass::cuda
