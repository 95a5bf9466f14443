/// \file
/// \brief glass/serve/block_manager.hpp — the KV cache as a pool of fixed-size blocks, shared by prefix.
/// ```text
/// One KV cache per request, sized for the whole context, wastes most of its memory: a request
/// that ends after 40 tokens still holds 512 positions (C17). Instead, the cache is one pool of
/// blocks of block_size positions each (16 by default), handed out as a sequence grows:
///
///   block table of a sequence   [5, 2, 9]   positions 0..15 live in block 5, 16..31 in block 2,
///                                           32..47 in block 9; position p is slot p % block_size
///                                           of block table[p / block_size]
///
/// Prefix caching. A FULL block is named by a chained hash of its tokens and its parent's hash:
///   hash_0 = H(seed, tokens[0..bs)),  hash_i = H(hash_{i-1}, tokens[i·bs .. (i+1)·bs))
/// so one hash stands for the whole prefix up to the block's end: equal tokens after different
/// prefixes get different hashes. A new request looks its full prompt blocks up in order and
/// shares every hit (the block's ref count goes up) instead of computing it again. A hash match
/// is confirmed against the tokens stored with the block and its parent block, so even a hash
/// collision cannot serve the wrong keys and values. At most (n_prompt − 1) tokens are taken
/// from the cache: the last prompt token is always computed, because its logits pick the first
/// new token.
///
/// Freeing. A block whose ref count drops to 0 goes to the back of the free list but keeps its
/// hash: until it is handed out again it can still be hit (then it leaves the free list). New
/// blocks come from the front, so cached blocks are evicted least recently used first. A
/// sequence frees its blocks last-to-first, so a prefix's tail is evicted before its head.
///
/// In:  block requests from the scheduler (scheduler.hpp), tokens of full blocks.
/// Out: block ids; the pool's storage itself belongs to the backend (paged_transformer.hpp).
/// ```
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "glass/errors.hpp"

namespace glass::serve {

/// The hash of the first block's parent: a fixed constant, so every chain starts the same way.
inline constexpr std::uint64_t kRootBlockHash = 0x676c617373ull;  // "glass"

/// H(parent hash, a block's tokens): xxHash's XXH3 over the tokens' int32 bytes, seeded with the
/// parent's hash (xxHash: fast, well tested, in Debian as libxxhash-dev; any good 64-bit hash
/// would do, since every hit is confirmed against the stored tokens).
inline std::uint64_t chained_block_hash(std::uint64_t parent, std::span<const int> tokens) {
    return XXH3_64bits_withSeed(tokens.data(), tokens.size() * sizeof(int), parent);
}

using BlockHashFn = std::function<std::uint64_t(std::uint64_t parent, std::span<const int> tokens)>;

class BlockManager {
public:
    struct Block {
        int ref_count = 0;          ///< sequences whose block table holds this block
        bool cached = false;        ///< full, hashed and findable by later requests
        std::uint64_t hash = 0;     ///< chained hash (when cached)
        int parent = -1;            ///< the block before it in the sequence that filled it
        std::vector<int> tokens;    ///< its block_size tokens (when cached), to confirm a hit
    };

    BlockManager(int num_blocks, int block_size, bool prefix_caching = true,
                 BlockHashFn hash = chained_block_hash)
        : block_size_(block_size), prefix_caching_(prefix_caching), hash_(std::move(hash)),
          blocks_(static_cast<size_t>(num_blocks > 0 ? num_blocks : 0)) {
        if (block_size < 1) fail("block size must be >= 1, got ", block_size);
        if (num_blocks < 1) fail("the KV pool needs at least one block, got ", num_blocks);
        for (int b = 0; b < num_blocks; ++b) free_position_.push_back(free_.insert(free_.end(), b));
    }

    int block_size() const { return block_size_; }
    int num_blocks() const { return static_cast<int>(blocks_.size()); }
    int num_free() const { return static_cast<int>(free_.size()); }  ///< includes cached free blocks
    bool prefix_caching() const { return prefix_caching_; }
    const Block& block(int id) const { return blocks_.at(static_cast<size_t>(id)); }
    /// Free block ids, front (evicted next) to back.
    std::vector<int> free_list() const { return {free_.begin(), free_.end()}; }
    /// Blocks needed to hold `n_tokens` positions.
    int blocks_for(int n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }

    /// The cached blocks that hold a prefix of `tokens`, in order: full blocks only, and never
    /// the block holding the last token (it must be computed). Changes nothing.
    std::vector<int> find_cached_prefix(std::span<const int> tokens) const {
        std::vector<int> hits;
        if (!prefix_caching_) return hits;
        const int usable = (static_cast<int>(tokens.size()) - 1) / block_size_;  // full blocks before the last token
        std::uint64_t parent_hash = kRootBlockHash;
        for (int i = 0; i < usable; ++i) {
            const std::span<const int> chunk = tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
            const std::uint64_t h = hash_(parent_hash, chunk);
            const auto it = cached_.find(h);
            if (it == cached_.end()) break;
            const Block& b = blocks_[static_cast<size_t>(it->second)];
            const int expected_parent = hits.empty() ? -1 : hits.back();
            if (b.parent != expected_parent || !std::equal(chunk.begin(), chunk.end(), b.tokens.begin()))
                break;  // a hash collision: not our prefix
            hits.push_back(it->second);
            parent_hash = h;
        }
        return hits;
    }

    /// Can a sequence that holds `table` grow to `n_tokens` positions, after sharing `hits`
    /// (blocks from find_cached_prefix that it does not hold yet)? Hits that sit in the free
    /// list stop being free when shared, so they do not count as free blocks.
    bool can_grow(std::span<const int> table, std::span<const int> hits, int n_tokens) const {
        const int needed = blocks_for(n_tokens) - static_cast<int>(table.size() + hits.size());
        int hits_now_free = 0;
        for (int id : hits) hits_now_free += blocks_[static_cast<size_t>(id)].ref_count == 0;
        return needed <= num_free() - hits_now_free;
    }

    /// Appends the hits (shared: ref count + 1), then fresh blocks until `table` holds
    /// `n_tokens` positions. Check can_grow first; throws if the pool runs out.
    void grow(std::vector<int>& table, std::span<const int> hits, int n_tokens) {
        if (!can_grow(table, hits, n_tokens))
            fail("KV pool: no room for ", n_tokens, " positions (", num_free(), " free blocks)");
        for (int id : hits) {
            Block& b = blocks_[static_cast<size_t>(id)];
            if (b.ref_count++ == 0) take_from_free_list(id);
            table.push_back(id);
        }
        while (static_cast<int>(table.size()) < blocks_for(n_tokens)) table.push_back(take_fresh_block());
    }

    /// Registers the full blocks of a sequence whose first `n_computed` positions now hold K/V
    /// (`tokens` are its tokens), so later requests can find them. Blocks already cached are skipped.
    void cache_full_blocks(std::span<const int> table, std::span<const int> tokens, int n_computed) {
        if (!prefix_caching_) return;
        std::uint64_t parent_hash = kRootBlockHash;
        for (int i = 0; i < n_computed / block_size_; ++i) {
            const int id = table[static_cast<size_t>(i)];
            Block& b = blocks_[static_cast<size_t>(id)];
            const std::span<const int> chunk = tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
            const std::uint64_t h = hash_(parent_hash, chunk);
            parent_hash = h;
            if (b.cached || cached_.count(h)) continue;  // already findable (this block or an equal one)
            b.cached = true;
            b.hash = h;
            b.parent = i == 0 ? -1 : table[static_cast<size_t>(i - 1)];
            b.tokens.assign(chunk.begin(), chunk.end());
            cached_[h] = id;
        }
    }

    /// Gives back the blocks past the first blocks_for(n_tokens), last first: a sequence that
    /// reserved room for drafted tokens and had some rejected keeps only what its tokens use.
    void shrink(std::vector<int>& table, int n_tokens) {
        std::vector<int> tail;
        while (static_cast<int>(table.size()) > blocks_for(n_tokens)) {
            tail.insert(tail.begin(), table.back());
            table.pop_back();
        }
        release(tail);
    }

    /// Gives a sequence's blocks back, last block first; the table is emptied.
    void release(std::vector<int>& table) {
        for (auto it = table.rbegin(); it != table.rend(); ++it) {
            Block& b = blocks_[static_cast<size_t>(*it)];
            if (b.ref_count <= 0) fail("KV pool: block ", *it, " released more often than taken");
            if (--b.ref_count == 0) free_position_[static_cast<size_t>(*it)] = free_.insert(free_.end(), *it);
        }
        table.clear();
    }

private:
    void take_from_free_list(int id) {
        free_.erase(free_position_[static_cast<size_t>(id)]);
        free_position_[static_cast<size_t>(id)] = free_.end();
    }

    // The least recently freed block; if it was cached, that cache entry is evicted now.
    int take_fresh_block() {
        const int id = free_.front();
        take_from_free_list(id);
        Block& b = blocks_[static_cast<size_t>(id)];
        if (b.cached) cached_.erase(b.hash);
        b = Block{};
        b.ref_count = 1;
        return id;
    }

    int block_size_;
    bool prefix_caching_;
    BlockHashFn hash_;
    std::vector<Block> blocks_;
    std::list<int> free_;                               // free block ids, LRU order (front = oldest)
    std::vector<std::list<int>::iterator> free_position_;  // [block] its place in free_, for O(1) removal
    std::unordered_map<std::uint64_t, int> cached_;     // hash -> block id
};

}  // namespace glass::serve
