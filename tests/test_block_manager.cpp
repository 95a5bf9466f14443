// The block manager (serve/block_manager.hpp) in the style of vLLM's prefix-caching tests: exact
// block ids handed out, chained hashes recomputed here with xxHash itself, shared ref counts,
// the free list's exact order, eviction order, and collisions that must not be served.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "glass/serve/block_manager.hpp"

namespace test_block_manager {  // this file's own names (tests are built in unity batches)

using glass::serve::BlockManager;

namespace {

std::vector<int> range(int first, int n) {
    std::vector<int> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), first);
    return v;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// A request's admission as the scheduler does it: share the cached prefix, take fresh blocks
// for the rest, then (after "computing") register the full blocks.
std::vector<int> admit(BlockManager& bm, const std::vector<int>& tokens) {
    std::vector<int> table;
    const std::vector<int> hits = bm.find_cached_prefix(tokens);
    bm.grow(table, hits, static_cast<int>(tokens.size()));
    bm.cache_full_blocks(table, tokens, static_cast<int>(tokens.size()));
    return table;
}

}  // namespace

TEST_CASE("fresh blocks come from the front of the free list, in id order") {
    BlockManager bm(8, 4);
    CHECK(bm.free_list() == range(0, 8));
    std::vector<int> table;
    bm.grow(table, {}, 9);  // 9 positions need 3 blocks of 4
    CHECK(table == std::vector<int>{0, 1, 2});
    CHECK(bm.num_free() == 5);
    bm.grow(table, {}, 12);  // still 3 blocks
    CHECK(table.size() == 3);
    bm.grow(table, {}, 13);
    CHECK(table == std::vector<int>{0, 1, 2, 3});
    for (int id : table) CHECK(bm.block(id).ref_count == 1);
}

TEST_CASE("full blocks get chained hashes: H(parent hash, tokens), recomputed with xxHash") {
    BlockManager bm(8, 4);
    const std::vector<int> tokens = range(100, 10);  // 2 full blocks and 2 tokens
    const std::vector<int> table = admit(bm, tokens);
    REQUIRE(table == std::vector<int>{0, 1, 2});
    const std::uint64_t h0 = XXH3_64bits_withSeed(tokens.data(), 4 * sizeof(int), glass::serve::kRootBlockHash);
    const std::uint64_t h1 = XXH3_64bits_withSeed(tokens.data() + 4, 4 * sizeof(int), h0);
    CHECK(bm.block(0).cached);
    CHECK(bm.block(0).hash == h0);
    CHECK(bm.block(1).hash == h1);
    CHECK(bm.block(1).parent == 0);
    CHECK(bm.block(1).tokens == std::vector<int>{104, 105, 106, 107});
    CHECK_FALSE(bm.block(2).cached);  // partial: not shareable
}

TEST_CASE("a second request with the same prefix shares its full blocks (ref count 2)") {
    BlockManager bm(8, 4);
    const std::vector<int> a = concat(range(100, 8), {7, 7});
    const std::vector<int> table_a = admit(bm, a);
    REQUIRE(table_a == std::vector<int>{0, 1, 2});

    const std::vector<int> b = concat(range(100, 8), {9, 9, 9, 9, 9});
    CHECK(bm.find_cached_prefix(b) == std::vector<int>{0, 1});
    const std::vector<int> table_b = admit(bm, b);
    CHECK(table_b == std::vector<int>{0, 1, 3, 4});
    CHECK(bm.block(0).ref_count == 2);
    CHECK(bm.block(1).ref_count == 2);
    CHECK(bm.block(2).ref_count == 1);
    CHECK(bm.block(3).ref_count == 1);
}

TEST_CASE("the last prompt token is always computed: a whole-block prompt hits one block less") {
    BlockManager bm(8, 4);
    const std::vector<int> tokens = range(100, 8);
    admit(bm, tokens);
    CHECK(bm.find_cached_prefix(tokens) == std::vector<int>{0});          // not block 1: it holds the last token
    CHECK(bm.find_cached_prefix(concat(tokens, {5})) == std::vector<int>{0, 1});
    CHECK(bm.find_cached_prefix(range(100, 4)).empty());                 // 4 tokens: its only block holds the last
}

TEST_CASE("equal tokens after a different prefix are a different block (the hash is chained)") {
    BlockManager bm(8, 4);
    admit(bm, concat(range(0, 4), range(50, 5)));
    // Same second block (50..53), different first block: no hit at all.
    CHECK(bm.find_cached_prefix(concat(range(10, 4), range(50, 5))).empty());
    // Same first block, different second: one hit.
    CHECK(bm.find_cached_prefix(concat(range(0, 4), range(60, 5))) == std::vector<int>{0});
}

TEST_CASE("freeing: last block first to the back of the free list; cached blocks stay findable until evicted (LRU)") {
    BlockManager bm(6, 2);
    std::vector<int> a = admit(bm, {1, 2, 3, 4, 5});  // blocks 0, 1 full (cached), 2 partial
    std::vector<int> b = admit(bm, {7, 8, 9});        // block 3 full (cached), 4 partial
    REQUIRE(a == std::vector<int>{0, 1, 2});
    REQUIRE(b == std::vector<int>{3, 4});
    CHECK(bm.free_list() == std::vector<int>{5});

    bm.release(a);
    CHECK(a.empty());
    CHECK(bm.free_list() == std::vector<int>{5, 2, 1, 0});
    bm.release(b);
    CHECK(bm.free_list() == std::vector<int>{5, 2, 1, 0, 4, 3});
    for (int id = 0; id < 6; ++id) CHECK(bm.block(id).ref_count == 0);

    // A hit on a free cached block takes it out of the free list.
    std::vector<int> c = admit(bm, {1, 2, 3, 4, 6});
    CHECK(c == std::vector<int>{0, 1, 5});  // hits 0 and 1, then the oldest free block, 5
    CHECK(bm.free_list() == std::vector<int>{2, 4, 3});

    // Fresh blocks evict the least recently freed first: 2 (uncached), then 4, then 3 (cached:
    // its hash is dropped and {7, 8, 9} no longer hits).
    CHECK(bm.find_cached_prefix(std::vector<int>{7, 8, 9}) == std::vector<int>{3});
    std::vector<int> d;
    bm.grow(d, {}, 6);
    CHECK(d == std::vector<int>{2, 4, 3});
    CHECK(bm.find_cached_prefix(std::vector<int>{7, 8, 9}).empty());
    CHECK_FALSE(bm.block(3).cached);
    CHECK(bm.num_free() == 0);
}

TEST_CASE("shrink: room reserved for drafted tokens goes back, last block first; the prefix stays cached") {
    BlockManager bm(8, 4);
    const std::vector<int> tokens = range(100, 9);  // 9 tokens: blocks 0, 1 full, block 2 holds 1
    std::vector<int> table = admit(bm, tokens);
    CHECK(table == std::vector<int>{0, 1, 2});
    bm.grow(table, {}, 9 + 1 + 6);  // the last token and 6 drafted positions: 16 positions, 4 blocks
    CHECK(table == std::vector<int>{0, 1, 2, 3});
    bm.grow(table, {}, 9 + 1 + 7);  // one more drafted position: a 5th block
    CHECK(table == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(bm.free_list() == std::vector<int>{5, 6, 7});
    bm.shrink(table, 11);  // 1 draft kept: 11 tokens use 3 blocks
    CHECK(table == std::vector<int>{0, 1, 2});
    CHECK(bm.free_list() == std::vector<int>{5, 6, 7, 4, 3});  // freed last block first, to the back
    CHECK(bm.block(3).ref_count == 0);
    CHECK(bm.block(0).cached);  // the full blocks of the prefix are untouched
    CHECK(bm.find_cached_prefix(concat(range(100, 8), {1})) == std::vector<int>{0, 1});
    bm.shrink(table, 12);  // nothing past what 12 tokens use: a no-op
    CHECK(table == std::vector<int>{0, 1, 2});
}

TEST_CASE("a hit that sits in the free list is not a free block for the same request") {
    BlockManager bm(3, 2);
    std::vector<int> a = admit(bm, {1, 2, 3, 4, 5});  // 0, 1 cached; 2 partial
    bm.release(a);
    const std::vector<int> tokens = {1, 2, 3, 4, 5, 6, 7};  // needs 4 blocks; 2 of them hits
    const std::vector<int> hits = bm.find_cached_prefix(tokens);
    REQUIRE(hits == std::vector<int>{0, 1});
    std::vector<int> table;
    CHECK_FALSE(bm.can_grow(table, hits, 7));  // 3 free blocks, but 2 of them are the hits
    CHECK(bm.can_grow(table, hits, 6));
    CHECK_THROWS_WITH_AS(bm.grow(table, hits, 7), doctest::Contains("no room for 7 positions"), glass::Error);
}

TEST_CASE("hash collisions are confirmed against the stored tokens and parent, never served") {
    // Every block hashes to the same value: the map holds one entry, and only an exact match
    // of tokens and parent may use it.
    BlockManager bm(8, 2, true, [](std::uint64_t, std::span<const int>) { return std::uint64_t{7}; });
    admit(bm, {1, 2, 3});               // block 0 = {1, 2} registered under hash 7
    CHECK(bm.find_cached_prefix(std::vector<int>{1, 2, 9}) == std::vector<int>{0});
    CHECK(bm.find_cached_prefix(std::vector<int>{5, 6, 9}).empty());  // same hash, other tokens: a miss
    // A second block with the same hash is not registered (the entry is taken), so the chain
    // stops after block 0 rather than serving block 0's K/V for {3, 4}.
    admit(bm, {1, 2, 3, 4, 5});
    CHECK(bm.find_cached_prefix(std::vector<int>{1, 2, 3, 4, 5}) == std::vector<int>{0});
}

TEST_CASE("prefix caching off: nothing is registered or found") {
    BlockManager bm(4, 2, false);
    admit(bm, {1, 2, 3});
    CHECK_FALSE(bm.block(0).cached);
    CHECK(bm.find_cached_prefix(std::vector<int>{1, 2, 3}).empty());
}

TEST_CASE("bad sizes and double frees are errors that name the value") {
    CHECK_THROWS_WITH_AS(BlockManager(0, 16), doctest::Contains("at least one block, got 0"), glass::Error);
    CHECK_THROWS_WITH_AS(BlockManager(4, 0), doctest::Contains("block size must be >= 1, got 0"), glass::Error);
    BlockManager bm(4, 2);
    std::vector<int> table;
    bm.grow(table, {}, 3);
    std::vector<int> copy = table;
    bm.release(table);
    CHECK_THROWS_WITH_AS(bm.release(copy), doctest::Contains("released more often than taken"), glass::Error);
}

}  // namespace test_block_manager
