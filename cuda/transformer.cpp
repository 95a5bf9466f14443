/// \file
/// \brief cuda/transformer.cpp — journey steps 4–8 on the GPU: CudaSession, the CUDA twin of CpuSession.
/// ```text
/// The same forward pass as glass/transformer.hpp, step for step, with every stage a device call
/// from glass_cuda.hpp. Weights go to the GPU once, in the constructor; a forward pass uploads its
/// ids (n ints), runs every layer on the device and brings back only the last position's logits
/// [vocab]. Host code here is bookkeeping: shapes, the cache's length, which kernel to launch.
///
///   x = embedding rows of ids                               [n, dim]
///   for each layer (DeviceForward, forward.hpp: the loop CudaPagedBackend runs too):
///     xn = rmsnorm(x);  q, k, v = xn Wqᵀ, xn Wkᵀ, xn Wvᵀ      [n, q_dim], [n, kv_dim] ×2
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
      cache_(model.config, options.kv), forward_(config_, weights_) {
    const ModelConfig& c = config_;
    logits_dev_ = DeviceBuffer(static_cast<std::size_t>(c.vocab_size) * sizeof(float));
    ids_ = DeviceBuffer(static_cast<std::size_t>(c.seq_len) * sizeof(int));
    step_ = DeviceBuffer(3 * sizeof(int));
    logits_.resize(static_cast<std::size_t>(c.vocab_size));
    if (options_.attention == SessionAttention::flash) {  // partials for any cache length: decode never allocates
        const std::size_t floats = static_cast<std::size_t>(c.n_heads) *
                                   static_cast<std::size_t>(flash_decode_splits(c.seq_len, options_.flash_decode_chunk)) *
                                   static_cast<std::size_t>(c.head_dim + 2);
        flash_partial_ = DeviceBuffer(floats * sizeof(float));
        poison(flash_partial_.f32(), floats);
    }
}

bool CudaSession::uses_flash_decode(int n_keys) const {
    return options_.attention == SessionAttention::flash && n_keys >= options_.flash_decode_min_keys;
}

CudaSession::~CudaSession() = default;

// Grows the activations to n_tokens rows and the attention scores to score_floats (DeviceForward).
void CudaSession::ensure_scratch(int n_tokens, std::int64_t score_floats) {
    // At least one row per head over the whole window: decode's need grows by n_heads floats
    // every step, and reallocating each time would cost a cudaFree (a device-wide wait) per token.
    if (score_floats > 0) score_floats = std::max(score_floats, std::int64_t{config_.n_heads} * config_.seq_len);
    forward_.reserve(n_tokens, score_floats);
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
    const float scale = c.attention_score_scale();  // 1/√head_dim, or the config's (Gemma)
    DeviceForward& f = forward_;

    // The layer loop is DeviceForward's; what is this session's own is where K and V go (its
    // cache, rows start_pos ..) and which attention reads them.
    const auto attend = [&](int l) {
        const AttentionDims dims = attention_dims(c, l);  // this layer's window and soft-cap
        cache_.write(l, start_pos, f.k(), f.v(), n);
        if (decode_kernel && flash_decode_now)  // under the graph n_keys is on the device: grid for the window
            flash_decode(f.q(), cache_.key_rows(l), cache_.value_rows(l), n_keys,
                         n_keys.on_device() ? c.seq_len : n_keys.value, dims, scale, options_.flash_decode_chunk,
                         flash_partial_.f32(), f.att());
        else if (decode_kernel)
            attention_decode(f.q(), cache_.key_rows(l), cache_.value_rows(l), n_keys, dims, scale, f.scores(), f.att());
        else if (options_.attention == SessionAttention::flash)
            flash_attention(f.q(), cache_.key_rows(l), cache_.value_rows(l), n, start_pos.value, dims, scale, f.att());
        else
            attention_naive(f.q(), cache_.key_rows(l), cache_.value_rows(l), n, start_pos.value, dims, scale,
                            f.scores(), f.att());
    };
    f.enqueue_layers(mm, d_ids, RowPlacement::sequence(n, start_pos), attend);

    if (every_row) {  // verify: final norm of every row, then the classifier over all of them
        f.enqueue_logits(mm, f.x(), n, every_row);  // [n, vocab]
        return;
    }
    // Only the last position's logits: final norm of its row, then the classifier.
    f.enqueue_logits(mm, f.x() + static_cast<std::size_t>(n - 1) * static_cast<std::size_t>(c.dim), 1,
                     logits_dev_.f32());  // [vocab]
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
    if (decode_graph_.empty() || graph_generation_ != forward_.generation() || flash != graph_flash_) {
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
        graph_generation_ = forward_.generation();
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
