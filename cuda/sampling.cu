/// \file
/// \brief cuda/sampling.cu — journey step 7 on the GPU: logits → the next token (see glass/sampling.hpp).
/// ```text
/// In:  logits [vocab] on the device; SamplingParams; the host's Llama2cRng.
/// Out: one token id (copied back: 4 bytes).
///
///   greedy (temperature 0)  argmax_kernel: one block, lowest id on a tie.
///   otherwise               probabilities_kernel: one block; p = softmax(logits / T) with the
///                           CPU's operations (divide, subtract max, exp, sum, divide). The sum is
///                           the CPU's too: one thread adds in id order. (A tree sum is more
///                           accurate, but the CPU's sequential fp32 sum over 32,000 terms is off by
///                           a few parts per million, which shifts every cdf boundary: emulating
///                           both orders on the CPU, up to 3% of draws landed on a different token
///                           at vocab 32,000, up to 60% at 128,256.) exp is taken in double and
///                           rounded once: the correctly rounded expf, which glibc's expf also
///                           returns for all but a tiny fraction of inputs; CUDA's expf is up to
///                           2 ulp off. So the probabilities are, nearly always, the host's bits.
///                           The coin: rng.next_f32() on the host, exactly one draw, as the CPU.
///     no truncation         draw_in_id_order_kernel: walk the cdf in id order.
///     top-k/min-p/top-p     cub's stable radix sort, largest first (equal probabilities keep id
///                           order, like std::stable_sort), then truncate_and_draw_kernel.
/// The walks are single-thread kernels that repeat the CPU's loops line for line (the same fp32
/// additions in the same order over the same sorted list), so the CPU and the GPU differ only where
/// an exp rounds differently (rare), and then by one bit. The one-thread loops cost O(vocab) serial
/// steps (tens of microseconds at 32,000), the price of matching the host draw for draw. The
/// generate loop samples on the host from the logits a Session returns; this sampler is the device
/// twin, checked by the harness, for a loop that never leaves the GPU.
/// ```
#include <climits>

#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

namespace glass::cuda {

constexpr int kSampleThreads = 1024;

// Non-finite logits: the smallest such index lands in *bad (atomicMin), for the host's message.
__global__ void argmax_kernel(const float* logits, int n, int* bad, int* result) {
    __shared__ float best_values[32];
    __shared__ int best_ids[32];
    float best = -INFINITY;
    int best_id = INT_MAX;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = logits[i];
        if (!isfinite(v)) atomicMin(bad, i);
        if (v > best || (v == best && i < best_id)) {
            best = v;
            best_id = i;
        }
    }
    // Warp, then block: keep the larger value; on equal values the smaller id.
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_down_sync(0xffffffffu, best, offset);
        const int other_id = __shfl_down_sync(0xffffffffu, best_id, offset);
        if (other > best || (other == best && other_id < best_id)) {
            best = other;
            best_id = other_id;
        }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        best_values[warp] = best;
        best_ids[warp] = best_id;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
            if (best_values[w] > best || (best_values[w] == best && best_ids[w] < best_id)) {
                best = best_values[w];
                best_id = best_ids[w];
            }
        // All logits -inf (or NaN, reported through *bad): fall back to id 0 like the CPU's loop.
        *result = best_id == INT_MAX ? 0 : best_id;
    }
}

__global__ void probabilities_kernel(const float* logits, int n, float temperature, float* probs, int* bad) {
    __shared__ float partials[32];
    __shared__ float total;
    float max_value = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = logits[i];
        if (!isfinite(v)) atomicMin(bad, i);
        probs[i] = v / temperature;
        max_value = fmaxf(max_value, probs[i]);
    }
    max_value = block_max(max_value, partials);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        probs[i] = static_cast<float>(exp(static_cast<double>(probs[i] - max_value)));
    __syncthreads();  // every exponential written before thread 0 adds them up
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int i = 0; i < n; ++i) sum += probs[i];  // in id order, as glass::probabilities
        total = sum;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) probs[i] /= total;
}

__global__ void iota_kernel(int* ids, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ids[i] = i;
}

// glass::draw_in_id_order, one thread.
__global__ void draw_in_id_order_kernel(const float* probs, int n, float coin, int* result) {
    float cdf = 0.0f;
    for (int i = 0; i < n; ++i) {
        cdf += probs[i];
        if (coin < cdf) {
            *result = i;
            return;
        }
    }
    *result = n - 1;
}

__device__ void renormalize(float* p, int size) {
    float sum = 0.0f;
    for (int i = 0; i < size; ++i) sum += p[i];
    for (int i = 0; i < size; ++i) p[i] /= sum;
}

// glass::keep_top_k, keep_min_p, keep_top_p (either nucleus rule) and draw over the sorted list, one thread.
__global__ void truncate_and_draw_kernel(float* p, const int* ids, int n, int top_k, float min_p,
                                         float top_p, NucleusRule nucleus, float coin, int* result) {
    int size = n;
    if (top_k > 0 && top_k < size) {  // keep_top_k
        size = top_k;
        renormalize(p, size);
    }
    if (min_p > 0.0f && size > 0) {  // keep_min_p
        const float threshold = min_p * p[0];
        int kept = 0;
        while (kept < size && p[kept] >= threshold) ++kept;
        if (kept < size) {
            size = kept;
            renormalize(p, size);
        }
    }
    if (top_p < 1.0f && nucleus == NucleusRule::reaches_p) {  // keep_top_p_reaching
        float cumulative = 0.0f;
        for (int i = 0; i < size; ++i) {
            cumulative += p[i];
            if (cumulative >= top_p) {
                size = i + 1;
                break;
            }
        }
    } else if (top_p < 1.0f && size >= 2) {  // keep_top_p_llama2c, with llama2.c's cutoff
        const float cutoff = (1.0f - top_p) / static_cast<float>(size - 1);
        int above = 0;
        while (above < size && p[above] >= cutoff) ++above;
        int keep = above;
        float cumulative = 0.0f;
        for (int i = 0; i < above; ++i) {
            cumulative += p[i];
            if (cumulative > top_p) {
                keep = i + 1;
                break;
            }
        }
        size = keep > 1 ? keep : 1;
    }
    float mass = 0.0f;  // draw
    for (int i = 0; i < size; ++i) mass += p[i];
    const float r = coin * mass;
    float cdf = 0.0f;
    for (int i = 0; i < size; ++i) {
        cdf += p[i];
        if (r < cdf) {
            *result = ids[i];
            return;
        }
    }
    // Rounding: r landed past the last cdf value. (size is 0 only when the probabilities are NaN,
    // i.e. a non-finite logit, which the host then refuses; never read before the list.)
    *result = ids[size > 0 ? size - 1 : 0];
}

DeviceSampler::DeviceSampler(int vocab_size) : vocab_(vocab_size) {
    if (vocab_size < 1) fail("sampler: vocabulary of ", vocab_size, " tokens");
    const std::size_t n = static_cast<std::size_t>(vocab_size);
    probs_ = DeviceBuffer(n * sizeof(float));
    sorted_probs_ = DeviceBuffer(n * sizeof(float));
    ids_ = DeviceBuffer(n * sizeof(int));
    sorted_ids_ = DeviceBuffer(n * sizeof(int));
    result_ = DeviceBuffer(2 * sizeof(int));  // [first non-finite index, token]
    iota_kernel<<<grid_for(vocab_size, 256), 256>>>(ids_.i32(), vocab_size);
    CHECK_LAUNCH("iota_kernel");
    std::size_t scratch_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, scratch_bytes, probs_.f32(),
                                                         sorted_probs_.f32(), ids_.i32(),
                                                         sorted_ids_.i32(), vocab_size));
    sort_scratch_ = DeviceBuffer(scratch_bytes > 0 ? scratch_bytes : 1);
}

// Copies [bad, token] back and refuses non-finite logits with the CPU's message.
static int finish(const DeviceBuffer& result, const float* d_logits) {
    int host[2] = {0, 0};
    download(host, result.data(), sizeof host);
    if (host[0] != INT_MAX) {
        float value = 0.0f;
        download(&value, d_logits + host[0], sizeof value);
        fail("logit of token ", host[0], " is ", value, ": the model produced a non-finite value");
    }
    return host[1];
}

static void reset_result(const DeviceBuffer& result) {
    const int init[2] = {INT_MAX, -1};
    upload(result.data(), init, sizeof init);
}

int DeviceSampler::argmax(const float* d_logits) {
    reset_result(result_);
    argmax_kernel<<<1, kSampleThreads>>>(d_logits, vocab_, result_.i32(), result_.i32() + 1);
    CHECK_LAUNCH("argmax_kernel");
    return finish(result_, d_logits);
}

int DeviceSampler::sample(const float* d_logits, const SamplingParams& params, Llama2cRng& rng) {
    validate(params);
    if (params.temperature == 0.0f) return argmax(d_logits);
    reset_result(result_);
    probabilities_kernel<<<1, kSampleThreads>>>(d_logits, vocab_, params.temperature, probs_.f32(),
                                                result_.i32());
    CHECK_LAUNCH("probabilities_kernel");
    const float coin = rng.next_f32();  // the host's generator: same seed, same coins as the CPU
    if (params.top_k == 0 && params.min_p == 0.0f && params.top_p >= 1.0f) {
        draw_in_id_order_kernel<<<1, 1>>>(probs_.f32(), vocab_, coin, result_.i32() + 1);
        CHECK_LAUNCH("draw_in_id_order_kernel");
        return finish(result_, d_logits);
    }
    std::size_t scratch_bytes = sort_scratch_.bytes();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(sort_scratch_.data(), scratch_bytes,
                                                         probs_.f32(), sorted_probs_.f32(),
                                                         ids_.i32(), sorted_ids_.i32(), vocab_));
    truncate_and_draw_kernel<<<1, 1>>>(sorted_probs_.f32(), sorted_ids_.i32(), vocab_, params.top_k,
                                       params.min_p, params.top_p, params.nucleus, coin, result_.i32() + 1);
    CHECK_LAUNCH("truncate_and_draw_kernel");
    return finish(result_, d_logits);
}

}  // namespace glass::cuda
