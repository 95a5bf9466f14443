/// \file
/// \brief glass/session.hpp — the interface the generate loop drives, whatever computes the model.
/// ```text
/// A Session is one sequence being generated: a model plus its KV cache, on some backend.
/// The CPU reference (transformer.hpp, CpuSession) implements it; a GPU backend implements the
/// same calls, so sampling, stopping, streaming and metrics (generate.hpp) are written once.
/// ```
#pragma once

#include <cstdint>
#include <span>

#include "glass/config.hpp"
#include "glass/errors.hpp"

namespace glass {

class Session {
public:
    virtual ~Session() = default;
    virtual const ModelConfig& config() const = 0;
    // Positions already in the KV cache: the position the next token will occupy.
    virtual int position() const = 0;
    // Forget the sequence (the cache is kept allocated).
    virtual void reset() = 0;
    // All of `ids` in one pass (matrix–matrix); returns the last position's logits [vocab].
    virtual std::span<const float> prefill(std::span<const int> ids) = 0;
    // One new position (matrix–vector, attention over the cache); returns its logits [vocab].
    virtual std::span<const float> decode(int id) = 0;
    // Speculative decoding (speculative.hpp) needs two more calls; a backend that lacks them says so.
    // Every position's logits for `ids` in one pass [n, vocab], row i predicting the token after
    // ids[i]; their K/V enter the cache as prefill's do.
    virtual std::span<const float> verify(std::span<const int> ids) {
        (void)ids;
        fail(backend_name(), " cannot verify drafted tokens (speculative decoding): use the CPU reference");
    }
    // Drops positions `position ..` from the cache (the rejected drafts): position() becomes `position`.
    virtual void rewind(int position) {
        (void)position;
        fail(backend_name(), " cannot rewind its KV cache (speculative decoding): use the CPU reference");
    }
    // What this backend is, for messages.
    virtual const char* backend_name() const { return "this backend"; }
    // How its KV cache stores keys and values (config.hpp's KvType).
    virtual KvType kv_type() const { return KvType::fp32; }
    // Bytes of K/V currently cached, and weight bytes read per decoded token.
    virtual std::int64_t kv_bytes_used() const = 0;
    virtual std::int64_t weight_bytes() const = 0;
};

}  // namespace glass
