// 15_block_manager — serving: the KV cache as a pool of fixed-size blocks, shared by prefix (C16, C17).
//
// In:  a toy pool (8 blocks of 4 positions unless told otherwise) and made-up token ids: the
//      block manager only ever sees ids, so the hundreds say whose tokens they are
//      (100s: a shared "system prompt" S of two blocks, 200s: A's own words, 300s: B's, ...).
// Out: glass::serve::BlockManager at work, step by step:
//        1. A and B are admitted: their block tables, and the chained hashes of their full blocks
//        2. C starts with the same two blocks as A: it shares them (ref count 2)
//        3. D has A's second block of tokens after a different first block: no hit (the hash is chained)
//        4. a prompt that is exactly S, whole blocks only: its last block is computed anyway
//        5. A and C finish: blocks return last-first to the back of the free list, still cached
//        6. E hits a cached block that sits in the free list: it leaves the list
//        7. F needs every free block: they are handed out front first, and a cached one is evicted
//
// No model runs here: "computing" a prompt means registering its full blocks, as the engine does
// after a forward pass (engine.hpp calls the same three functions: find_cached_prefix, grow,
// cache_full_blocks; and release when a request ends).
//
// Usage: 15_block_manager [--block-size B] [--blocks N]
//   --block-size  positions per block, 2..16 (default 4)
//   --blocks      blocks in the pool, 6..16 (default 8; the story needs 6 at its busiest)
#include <cinttypes>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/errors.hpp"
#include "glass/serve/block_manager.hpp"

using glass::serve::BlockManager;

// [0 1 2]
static std::string list(const std::vector<int>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s + "]";
}

// The tokens of one block: "100..103" when they count up by one (they do, here), else each id.
static std::string block_tokens(std::span<const int> t) {
    bool counting = t.size() > 2;
    for (size_t i = 1; i < t.size(); ++i) counting = counting && t[i] == t[i - 1] + 1;
    if (counting) return std::to_string(t.front()) + ".." + std::to_string(t.back());
    std::string s;
    for (size_t i = 0; i < t.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(t[i]);
    }
    return s;
}

// A prompt cut at block boundaries: [100..103 | 104..107 | 200 201]
static std::string prompt_text(const std::vector<int>& tokens, int block_size) {
    std::string s = "[";
    for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(block_size)) {
        const size_t n = std::min(tokens.size() - at, static_cast<size_t>(block_size));
        if (at) s += " | ";
        s += block_tokens(std::span<const int>(tokens).subspan(at, n));
    }
    return s + "] (" + std::to_string(tokens.size()) + " tokens)";
}

// `n` ids counting up from `first`.
static std::vector<int> count_from(int first, int n) {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) v.push_back(first + i);
    return v;
}

static std::vector<int> join(std::vector<int> a, const std::vector<int>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

static std::string hex(std::uint64_t h) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%016" PRIx64, h);
    return buf;
}

// Every block that a sequence holds or the cache remembers; then the free list.
static void print_pool(const BlockManager& bm) {
    for (int id = 0; id < bm.num_blocks(); ++id) {
        const BlockManager::Block& b = bm.block(id);
        if (b.ref_count == 0 && !b.cached) continue;  // free and forgotten: nothing to show
        std::printf("  block %d: ref %d, ", id, b.ref_count);
        if (b.cached)
            std::printf("cached, hash %s, parent %s, tokens %s\n", hex(b.hash).c_str(),
                        b.parent < 0 ? "none" : std::to_string(b.parent).c_str(), block_tokens(b.tokens).c_str());
        else
            std::printf("not cached\n");
    }
    std::printf("free list: %s\n", list(bm.free_list()).c_str());
}

// What the scheduler does for a new request (scheduler.hpp), and then the engine once its
// prompt has been computed: share the cached prefix, take fresh blocks for the rest, register
// the full blocks.
static std::vector<int> admit(BlockManager& bm, const char* name, const std::vector<int>& prompt) {
    const std::vector<int> hits = bm.find_cached_prefix(prompt);
    std::vector<int> table;
    bm.grow(table, hits, static_cast<int>(prompt.size()));
    bm.cache_full_blocks(table, prompt, static_cast<int>(prompt.size()));
    std::printf("%s prompt: %s\n", name, prompt_text(prompt, bm.block_size()).c_str());
    if (hits.empty())
        std::printf("%s cached prefix: none\n", name);
    else
        std::printf("%s cached prefix: blocks %s, %zu tokens not computed again\n", name, list(hits).c_str(),
                    hits.size() * static_cast<size_t>(bm.block_size()));
    std::printf("%s block table: %s\n", name, list(table).c_str());
    return table;
}

static int run(int argc, char** argv) {
    int block_size = 4, num_blocks = 8;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) glass::fail("usage: 15_block_manager [--block-size B] [--blocks N]; '", a, "' needs a value");
        if (a == "--block-size") block_size = example::int_arg(argv[++i], "block size", 2, 16);
        else if (a == "--blocks") num_blocks = example::int_arg(argv[++i], "blocks", 6, 16);
        else glass::fail("unknown argument '", a, "' (try --block-size B or --blocks N)");
    }
    const int bs = block_size;
    BlockManager bm(num_blocks, bs);
    std::printf("pool: %d blocks of %d positions, prefix caching on\n", num_blocks, bs);
    std::printf("free list: %s\n", list(bm.free_list()).c_str());
    const std::vector<int> system = count_from(100, 2 * bs);  // S: two full blocks

    std::printf("\n== 1. A and B arrive; each full block is hashed once computed ==\n");
    std::vector<int> a = admit(bm, "A", join(system, count_from(200, bs / 2)));
    std::vector<int> b = admit(bm, "B", count_from(300, bs + bs / 2));
    const std::uint64_t h0 = glass::serve::chained_block_hash(glass::serve::kRootBlockHash,
                                                              std::span<const int>(system).first(bs));
    const std::uint64_t h1 = glass::serve::chained_block_hash(h0, std::span<const int>(system).subspan(bs, bs));
    std::printf("hash of A's block 0, H(root, %s): %s\n", block_tokens(std::span<const int>(system).first(bs)).c_str(),
                hex(h0).c_str());
    std::printf("hash of A's block 1, H(hash of block 0, %s): %s\n",
                block_tokens(std::span<const int>(system).subspan(bs, bs)).c_str(), hex(h1).c_str());
    print_pool(bm);

    std::printf("\n== 2. C starts with S too: it shares A's blocks ==\n");
    std::vector<int> c = admit(bm, "C", join(system, count_from(400, bs - 1)));
    print_pool(bm);

    std::printf("\n== 3. D has S's second block after a different first block ==\n");
    const std::vector<int> d = join(join(count_from(500, bs), std::vector<int>(system.begin() + bs, system.end())), {600});
    const std::uint64_t d0 = glass::serve::chained_block_hash(glass::serve::kRootBlockHash,
                                                              std::span<const int>(d).first(bs));
    const std::uint64_t d1 = glass::serve::chained_block_hash(d0, std::span<const int>(d).subspan(bs, bs));
    std::printf("D prompt: %s\n", prompt_text(d, bs).c_str());
    std::printf("hash of D's block 1, H(hash of %s, %s): %s\n", block_tokens(std::span<const int>(d).first(bs)).c_str(),
                block_tokens(std::span<const int>(d).subspan(bs, bs)).c_str(), hex(d1).c_str());
    std::printf("same tokens as A's block 1, same hash: %s\n", d1 == h1 ? "yes" : "no");
    const std::vector<int> d_hits = bm.find_cached_prefix(d);
    std::printf("D cached prefix: %s\n", d_hits.empty() ? "none" : list(d_hits).c_str());

    std::printf("\n== 4. the last prompt token is always computed ==\n");
    std::printf("lookup S alone %s: %s\n", prompt_text(system, bs).c_str(), list(bm.find_cached_prefix(system)).c_str());
    const std::vector<int> system_plus_one = join(system, {600});
    std::printf("lookup S + 1 token %s: %s\n", prompt_text(system_plus_one, bs).c_str(),
                list(bm.find_cached_prefix(system_plus_one)).c_str());

    std::printf("\n== 5. A and C finish: blocks go back last first, and stay cached ==\n");
    std::printf("A releases %s\n", list(a).c_str());
    bm.release(a);
    print_pool(bm);
    std::printf("C releases %s\n", list(c).c_str());
    bm.release(c);
    print_pool(bm);

    std::printf("\n== 6. E starts with S's first block: a hit in the free list ==\n");
    std::vector<int> e = admit(bm, "E", join(count_from(100, bs), count_from(600, bs / 2)));
    print_pool(bm);

    std::printf("\n== 7. F needs every free block: the oldest free block goes first ==\n");
    const std::vector<int> free_before = bm.free_list();
    std::vector<std::pair<int, std::uint64_t>> cached_before;  // free blocks that could still be hit
    for (int id : free_before)
        if (bm.block(id).cached) cached_before.push_back({id, bm.block(id).hash});
    std::vector<int> f = admit(bm, "F", count_from(700, bm.num_free() * bs));
    std::vector<int> evicted;  // their old hash is gone (F's own full blocks get new ones)
    for (const auto& [id, hash] : cached_before)
        if (!bm.block(id).cached || bm.block(id).hash != hash) evicted.push_back(id);
    std::printf("cached blocks evicted: %s\n", list(evicted).c_str());
    print_pool(bm);
    std::printf("lookup S + 1 token again: %s\n", list(bm.find_cached_prefix(system_plus_one)).c_str());

    bm.release(b);
    bm.release(e);
    bm.release(f);
    std::printf("\nafter B, E and F finish: %d of %d blocks free\n", bm.num_free(), bm.num_blocks());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
