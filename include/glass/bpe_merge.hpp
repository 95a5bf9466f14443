// glass/bpe_merge.hpp — the heart of BPE encoding: merge neighbouring pieces by rank.
//
// In:  a sequence of token ids (one per character or byte, to start with) and a lookup that says,
//      for two neighbours, whether they merge, into which id, and with what rank.
// Out: the same sequence after repeatedly merging the best-ranked neighbouring pair.
//
// The rule is the same for every BPE vocabulary: find the adjacent pair with the lowest rank
// (leftmost wins a tie), replace it by the merged id, repeat until no pair merges.
//  - llama2.c / SentencePiece vocabularies store a score per piece; rank = -score.
//  - byte-level vocabularies (GPT-2, tiktoken) store the merge order; rank = that order.
// This plain version rescans all pairs after each merge (O(n^2)); fine for prompts.
#pragma once

#include <limits>
#include <optional>
#include <vector>

namespace glass {

struct Merge {
    int id;      // the id the pair becomes
    double rank; // lower merges first
};

// lookup(left_id, right_id) -> std::optional<Merge>
template <typename Lookup>
void bpe_merge(std::vector<int>& ids, const Lookup& lookup) {
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

}  // namespace glass
