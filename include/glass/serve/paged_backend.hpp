/// \file
/// \brief glass/serve/paged_backend.hpp — what one engine step asks the model for, on any backend.
/// ```text
/// A batch is a list of entries, one per scheduled request:
///
///   entry.tokens       the new tokens of that request            [n]
///   entry.start        the position of tokens[0] (= positions that already have K/V)
///   entry.block_table  the pool blocks of positions 0 .. start+n-1
///   entry.wants_logits whether the last token's logits are needed (its prompt is complete,
///                      or it is decoding); a chunk in the middle of a prompt needs none
///   entry.every_row    whether EVERY token's logits are needed: speculative decoding's check of
///                      [t, d_1..d_k] (speculative.hpp) needs one row per drafted position
///
/// Position p of an entry lives in pool row  block_table[p / block_size] · block_size + p % block_size
/// of every layer's K and V; each backend keeps that pool in its own memory (the CPU reference's
/// is PagedKVPool in paged_transformer.hpp). PagedBackend is what every backend (reference, fast
/// CPU, CUDA) offers the engine; PagedSession turns any of them into an ordinary Session.
/// ```
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/kv_cache.hpp"
#include "glass/session.hpp"

namespace glass::serve {

struct BatchEntry {
    std::span<const int> tokens;       ///< [n] new tokens
    int start = 0;                     ///< position of tokens[0]
    std::span<const int> block_table;  ///< blocks of positions 0 .. start + n - 1
    bool wants_logits = true;          ///< the last token's logits are needed
    bool every_row = false;            ///< every token's logits are needed (a speculative check)
};

/// The rows of a stacked batch whose logits `e` wants, given that its first token is stacked at
/// row `first`: all n of them (every_row), its last (wants_logits), or none; appended to `rows`.
/// Every backend returns logits for exactly these rows, in this order.
inline void append_logit_rows(const BatchEntry& e, int first, std::vector<int>& rows) {
    const int n = static_cast<int>(e.tokens.size());
    if (e.every_row)
        for (int t = 0; t < n; ++t) rows.push_back(first + t);
    else if (e.wants_logits)
        rows.push_back(first + n - 1);
}

/// Checks one batch before any backend computes it: ids in the vocabulary, positions inside the
/// context, a block table long enough and block ids inside the pool.
inline void check_batch(const ModelConfig& c, std::span<const BatchEntry> batch, int num_blocks, int block_size) {
    if (batch.empty()) fail("paged forward: empty batch");
    for (const BatchEntry& e : batch) {
        const std::int64_t end = std::int64_t{e.start} + static_cast<std::int64_t>(e.tokens.size());
        if (e.tokens.empty()) fail("paged forward: an entry with no tokens");
        if (e.start < 0 || end > c.seq_len)
            fail("paged forward: positions ", e.start, "..", end - 1, " are outside the context window of ", c.seq_len);
        if (static_cast<std::int64_t>(e.block_table.size()) * block_size < end)
            fail("paged forward: ", e.block_table.size(), " blocks of ", block_size, " cannot hold ", end, " positions");
        for (int id : e.tokens)
            if (id < 0 || id >= c.vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")");
        for (int b : e.block_table)
            if (b < 0 || b >= num_blocks) fail("paged forward: block ", b, " is outside the pool of ", num_blocks);
    }
}

/// The pool row of position `pos` of a sequence with this block table.
inline std::int64_t pool_row(std::span<const int> block_table, int block_size, int pos) {
    return std::int64_t{block_table[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size;
}

/// What the engine needs from a backend: a pool of blocks, and one forward pass per step.
class PagedBackend {
public:
    virtual ~PagedBackend() = default;
    virtual const ModelConfig& config() const = 0;
    /// (Re)allocates the K/V pool; its previous contents are gone.
    virtual void allocate_pool(int num_blocks, int block_size) = 0;
    virtual std::int64_t pool_bytes() const = 0;
    /// How the pool stores keys and values: fp32, or int8 with one scale per KV head and position
    /// (kv_cache.hpp); kv_bytes_per_token(config(), kv_type()) is what a position costs.
    virtual KvType kv_type() const { return KvType::fp32; }
    /// Runs every entry's tokens through the model, writing their K/V into the pool. Returns
    /// the logits [vocab] of the rows append_logit_rows names (the last token of each entry that
    /// wants them; every token of an every_row entry), in entry order: [n_rows, vocab], valid
    /// until the next call.
    virtual std::span<const float> forward(std::span<const BatchEntry> batch) = 0;
    /// Weight bytes one forward pass reads (for bandwidth arithmetic).
    virtual std::int64_t weight_bytes() const = 0;
    /// Why this backend can run no more passes (a model split over ranks whose group is gone:
    /// dist/parallel_paged_backend.hpp), or empty while it can. Safe to call from any thread; a
    /// server answers 503 with it.
    virtual std::string unavailable() const { return {}; }
    /// Called every few seconds by a server's engine thread while no request is in flight: a
    /// backend whose other ranks wait for its next step tells them it is still there (their waits
    /// give up after the transport's patience, a hang guard). Nothing to do for one process.
    virtual void keep_alive() {}

    // --- disaggregated prefill/decode: a sequence's K/V leaves one pool for another ---
    /// Positions first .. end-1 of the sequence whose blocks `table` lists, in the KV shipment's
    /// layout (kv_shipment.hpp: layer × K/V × position; int8 as scales and codes).
    virtual std::vector<std::byte> export_kv(std::span<const int> table, int first, int end) const {
        (void)table, (void)first, (void)end;
        fail("this backend cannot export its KV cache (disaggregated serving runs on the reference, fast and "
             "CUDA backends of one process), asked for positions ", first, " .. ", end - 1);
    }
    /// Stores `bytes` (export_kv's layout, same type and shape) into the rows `table` names for
    /// positions first .. end-1, as if this backend had computed them.
    virtual void import_kv(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) {
        (void)table, (void)bytes;
        fail("this backend cannot import a KV cache (disaggregated serving runs on the reference, fast and "
             "CUDA backends of one process), given positions ", first, " .. ", end - 1);
    }
};

/// One sequence over a PagedBackend, as a Session: its block table is the whole pool, in order.
class PagedSession : public Session {
public:
    explicit PagedSession(PagedBackend& backend, int block_size = 16) : backend_(backend) {
        const int blocks = (backend.config().seq_len + block_size - 1) / block_size;
        backend_.allocate_pool(blocks, block_size);
        table_.resize(static_cast<size_t>(blocks));
        std::iota(table_.begin(), table_.end(), 0);
    }
    const ModelConfig& config() const override { return backend_.config(); }
    int position() const override { return length_; }
    void reset() override { length_ = 0; }
    KvType kv_type() const override { return backend_.kv_type(); }
    std::int64_t kv_bytes_used() const override { return kv_bytes_per_token(config(), kv_type()) * length_; }
    std::int64_t weight_bytes() const override { return backend_.weight_bytes(); }
    const char* backend_name() const override { return "a paged-backend session"; }
    std::span<const float> prefill(std::span<const int> ids) override { return run(ids); }
    std::span<const float> decode(int id) override {
        const int one[1] = {id};
        return run(one);
    }
    std::span<const float> verify(std::span<const int> ids) override { return run(ids, /*every_row=*/true); }
    /// Forgets positions from `position` on: only the length goes back; the pool rows past it are
    /// overwritten by the next pass (nothing reads a position before it is written again).
    void rewind(int position) override {
        check_rewind(position, length_);
        length_ = position;
    }

private:
    std::span<const float> run(std::span<const int> ids, bool every_row = false) {
        const BatchEntry entry{.tokens = ids, .start = length_, .block_table = table_, .every_row = every_row};
        const std::span<const float> logits = backend_.forward({&entry, 1});
        length_ += static_cast<int>(ids.size());
        return logits;
    }

    PagedBackend& backend_;
    std::vector<int> table_;
    int length_ = 0;
};

}  // namespace glass::serve
