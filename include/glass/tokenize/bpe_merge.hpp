/// \file
/// \brief glass/tokenize/bpe_merge.hpp — the heart of BPE encoding: merge neighbouring pieces by rank.
/// ```text
/// In:  a sequence of token ids [n] (one per character or byte, to start with) and a lookup that
///      says, for two neighbours, whether they merge, into which id, and with what rank.
/// Out: the same sequence [<= n] after repeatedly merging the best-ranked neighbouring pair.
///
/// The rule is the same for every BPE vocabulary: find the adjacent pair with the lowest rank
/// (the LEFTMOST one wins a tie), replace it by the merged id, repeat until no pair merges.
///  - llama2.c / SentencePiece vocabularies store a score per piece; rank = -score.
///  - byte-level vocabularies store a merge order: tiktoken ranks the merged token (rank = the
///    token's rank), GPT-2 / Hugging Face rank the pair (rank = line number in the merges list).
/// One engine serves them all; only the lookup differs (see PairMerges below for the usual one).
///
/// Two versions of the same rule, tested equal (tests/test_byte_bpe.cpp):
///  - bpe_merge_naive: rescan every pair after each merge. O(n^2) lookups; clear, and fastest
///    for the short pieces ordinary text splits into.
///  - bpe_merge_heap: a min-heap of candidate pairs over a doubly linked list of pieces. Each
///    merge touches only its two new neighbour pairs, so n pieces cost O(n log n). A 100 kB
///    "word" (a long run of letters with no spaces) needs this.
/// The tie rule matters: tiktoken, Hugging Face and llama2.c all take the leftmost pair among
/// equal ranks, and "aaaa" -> [aa][aa] (not [a][aa][a]) only comes out that way.
/// ```
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace glass {

struct Merge {
    int id;       // the id the pair becomes
    double rank;  // lower merges first
};

// lookup(left_id, right_id) -> std::optional<Merge>
template <typename Lookup>
void bpe_merge_naive(std::vector<int>& ids, const Lookup& lookup) {
    while (ids.size() >= 2) {
        double best_rank = std::numeric_limits<double>::infinity();
        int best_id = -1;
        size_t best_at = 0;
        for (size_t i = 0; i + 1 < ids.size(); ++i) {
            std::optional<Merge> m = lookup(ids[i], ids[i + 1]);
            if (m && m->rank < best_rank) {  // strict: the leftmost pair wins a tie
                best_rank = m->rank;
                best_id = m->id;
                best_at = i;
            }
        }
        if (best_id < 0) return;  // nothing left to merge
        ids[best_at] = best_id;
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
}

// The same result as bpe_merge_naive in O(n log n).
// Pieces live at their original positions 0..n-1, chained by prev/next; a merge keeps the left
// position and unlinks the right one. The heap holds candidate pairs (rank, left position);
// a candidate is stale when its two pieces changed since it was pushed, and is then skipped.
// Ordering by (rank, left position) is exactly "lowest rank, leftmost first", because
// positions keep their left-to-right order.
template <typename Lookup>
void bpe_merge_heap(std::vector<int>& ids, const Lookup& lookup) {
    const int n = static_cast<int>(ids.size());
    if (n < 2) return;
    struct Candidate {
        double rank;
        int left, right;            // positions
        int left_id, right_id;      // what the pieces were when pushed (to detect staleness)
        int merged_id;
    };
    const auto later = [](const Candidate& a, const Candidate& b) {  // min-heap on (rank, left)
        if (a.rank != b.rank) return a.rank > b.rank;
        return a.left > b.left;
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
    std::vector<int> prev(n), next(n);  // -1 / n at the ends
    for (int i = 0; i < n; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1;
    }
    std::vector<char> alive(n, 1);
    const auto push = [&](int left, int right) {
        if (left < 0 || right >= n) return;
        std::optional<Merge> m = lookup(ids[left], ids[right]);
        if (m) heap.push(Candidate{m->rank, left, right, ids[left], ids[right], m->id});
    };
    for (int i = 0; i + 1 < n; ++i) push(i, i + 1);

    while (!heap.empty()) {
        const Candidate c = heap.top();
        heap.pop();
        const bool current = alive[c.left] && alive[c.right] && next[c.left] == c.right &&
                             ids[c.left] == c.left_id && ids[c.right] == c.right_id;
        if (!current) continue;
        ids[c.left] = c.merged_id;  // [left][right] -> [merged]
        alive[c.right] = 0;
        next[c.left] = next[c.right];
        if (next[c.right] < n) prev[next[c.right]] = c.left;
        push(prev[c.left], c.left);  // the two new neighbour pairs
        push(c.left, next[c.left]);
    }
    int out = 0;
    for (int i = 0; i < n; ++i)
        if (alive[i]) ids[out++] = ids[i];
    ids.resize(static_cast<size_t>(out));
}

// The engine every tokenizer calls: the plain rescan for short pieces (it wins on a handful of
// items), the heap beyond. Both give identical results.
template <typename Lookup>
void bpe_merge(std::vector<int>& ids, const Lookup& lookup) {
    constexpr size_t kNaiveUpTo = 24;  // pieces of ordinary text are mostly shorter
    if (ids.size() <= kNaiveUpTo) bpe_merge_naive(ids, lookup);
    else bpe_merge_heap(ids, lookup);
}

// The usual lookup: a table from an adjacent pair (left id, right id) to its Merge.
//  - From a merges list (GPT-2 vocab.bpe, tokenizer.json): pair i has rank i.
//  - From ranked tokens (tiktoken): every way of cutting token T into two tokens is a pair
//    that merges into T with T's rank (see byte_level_bpe.hpp).
class PairMerges {
public:
    // The first entry for a pair wins (a later duplicate in a merges list never applies).
    void add(int left, int right, Merge m) { table_.emplace(key(left, right), m); }
    std::optional<Merge> find(int left, int right) const {
        auto it = table_.find(key(left, right));
        if (it == table_.end()) return std::nullopt;
        return it->second;
    }
    size_t size() const { return table_.size(); }
    void reserve(size_t n) { table_.reserve(n); }

private:
    static std::uint64_t key(int left, int right) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
               static_cast<std::uint32_t>(right);
    }
    std::unordered_map<std::uint64_t, Merge> table_;
};

}  // namespace glass
