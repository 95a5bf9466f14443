/// \file
/// \brief glass/tokenize/bpe_train.hpp — journey step 1, from the other side: where a BPE vocabulary comes from.
/// ```text
/// In:  a text (any bytes) and a target vocabulary size V >= 256.
/// Out: a TrainedBpe: V - 256 merges [n_merges] and the bytes of every token [V].
///      Ids 0..255 are the single bytes; merge k joins two earlier tokens (left, right) into the
///      new token 256 + k, whose bytes are left's bytes followed by right's.
///
/// Training, the way minbpe (and GPT-2's tokenizer before it) does it:
///   1. Split the text into chunks with GPT-2's pattern (pretokenize.hpp, kSplitR50k): words
///      with their leading space, numbers, punctuation runs, white space. Merges never cross a
///      chunk boundary, so no token glues the end of one word to the start of the next.
///      Each distinct chunk is kept once, with its count: " the" seen 400 times is one chunk of
///      weight 400.
///   2. Every chunk starts as its bytes: [n_bytes] ids, each 0..255.
///   3. Count every adjacent pair of ids inside every chunk, each weighted by the chunk's count.
///   4. The most frequent pair becomes the next token. Tie-break, on equal counts: the pair that
///      is smallest as (left id, right id) wins — e.g. (97, 98) before (256, 97). (minbpe takes
///      the first pair it happened to see; a rule on the ids alone does not depend on the order
///      of the text or of a hash table, and is easy to follow by hand.)
///   5. Replace the pair in every chunk, left to right, without overlaps ("aaa" -> [aa][a]).
///   6. Repeat from 3 until the vocabulary has V tokens. Training is greedy, so the merges for a
///      smaller V are the first merges for a larger one.
///
/// Encoding with the learned merges: the same split, every chunk starts as bytes, then
/// bpe_merge.hpp merges the pair learned EARLIEST first (rank = merge index = id - 256), the
/// leftmost on ties — which replays exactly what training did to that chunk.
/// Decoding: the tokens' bytes, concatenated. Saving/loading: bpe_train_file.hpp.
///
/// Two trainers, tested equal: train_bpe_naive recounts every pair for every merge
/// (O(merges x total chunk bytes)); train_bpe keeps the counts and updates only the chunks that
/// contain the merged pair.
/// ```
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "glass/tokenize/bpe_merge.hpp"
#include "glass/errors.hpp"
#include "glass/formats/read_file.hpp"
#include "glass/tokenize/pretokenize.hpp"

namespace glass {

// The split used for training and for encoding with a trained vocabulary (GPT-2's pattern).
inline const Pretokenizer& bpe_train_split() {
    static const Pretokenizer split(std::vector<std::string>{kSplitR50k});
    return split;
}

// ---------------------------------------------------------------------------------------------
// What training produces.
// ---------------------------------------------------------------------------------------------
struct BpePair {
    int left;
    int right;
    bool operator==(const BpePair&) const = default;
};

class TrainedBpe {
public:
    // Builds the vocabulary from merges in learning order; merges[k] makes id 256 + k.
    // Each merge must join ids that already exist (below 256 + k).
    static TrainedBpe from_merges(const std::vector<BpePair>& merges) {
        TrainedBpe t;
        for (int b = 0; b < 256; ++b) t.token_bytes_.push_back(std::string(1, static_cast<char>(b)));
        for (const BpePair& m : merges) t.add_merge(m);
        return t;
    }

    // Appends one merge: (left, right) -> the next id. Fails if either id does not exist yet.
    void add_merge(BpePair m) {
        const int id = vocab_size();
        if (m.left < 0 || m.left >= id || m.right < 0 || m.right >= id)
            fail("merge ", id - 256, " joins (", m.left, ", ", m.right,
                 "), but only ids 0..", id - 1, " exist at that point");
        merges_.push_back(m);
        token_bytes_.push_back(token_bytes_[m.left] + token_bytes_[m.right]);
        lookup_.add(m.left, m.right, Merge{id, static_cast<double>(id)});  // rank = learning order
    }

    int vocab_size() const { return static_cast<int>(token_bytes_.size()); }
    const std::vector<BpePair>& merges() const { return merges_; }
    const std::string& bytes_of(int id) const {
        if (id < 0 || id >= vocab_size())
            fail("token id ", id, " is outside the trained vocabulary [0, ", vocab_size(), ")");
        return token_bytes_[id];
    }

    // One chunk (no splitting): [n_bytes] byte ids -> [n_tokens] ids, earliest merge first.
    std::vector<int> encode_chunk(std::string_view chunk) const {
        std::vector<int> ids;
        ids.reserve(chunk.size());
        for (unsigned char byte : chunk) ids.push_back(byte);
        bpe_merge(ids, [this](int left, int right) { return lookup_.find(left, right); });
        return ids;
    }

    // Text (any bytes) -> [n_tokens] ids: split as in training, then encode each chunk.
    std::vector<int> encode(std::string_view text) const {
        std::vector<int> ids;
        for (std::string_view chunk : bpe_train_split().split(text)) {
            const std::vector<int> chunk_ids = encode_chunk(chunk);
            ids.insert(ids.end(), chunk_ids.begin(), chunk_ids.end());
        }
        return ids;
    }

    // [n_tokens] ids -> the bytes they stand for. Fails on an id outside the vocabulary.
    std::string decode(const std::vector<int>& ids) const {
        std::string text;
        for (int id : ids) text += bytes_of(id);
        return text;
    }

private:
    std::vector<BpePair> merges_;           // [vocab_size - 256]
    std::vector<std::string> token_bytes_;  // [vocab_size]
    PairMerges lookup_;                     // (left, right) -> {id, rank}
};

// ---------------------------------------------------------------------------------------------
// Training input: the distinct chunks of the text, each as byte ids with its count.
// ---------------------------------------------------------------------------------------------
struct WeightedChunk {
    std::vector<int> ids;  // [n_tokens], bytes at first
    std::int64_t count;    // how often the chunk occurs in the text
};

// Distinct chunks in order of first appearance.
inline std::vector<WeightedChunk> count_chunks(const std::vector<std::string_view>& pieces) {
    std::vector<WeightedChunk> chunks;
    std::unordered_map<std::string_view, size_t> index_of;
    for (std::string_view piece : pieces) {
        auto [it, is_new] = index_of.emplace(piece, chunks.size());
        if (is_new) {
            WeightedChunk c{{}, 0};
            for (unsigned char byte : piece) c.ids.push_back(byte);
            chunks.push_back(std::move(c));
        }
        chunks[it->second].count += 1;
    }
    return chunks;
}

inline void check_vocab_size(int vocab_size) {
    if (vocab_size < 256)
        fail("vocabulary size ", vocab_size, " is below 256: the 256 single bytes come first");
}

[[noreturn]] inline void fail_out_of_pairs(int merges_done, int vocab_size) {
    fail("vocabulary size ", vocab_size, " is too large for this text: after ", merges_done,
         " merges every chunk is a single token (the largest possible size is ", 256 + merges_done,
         ")");
}

// [n] ids -> ids with every (left, right) replaced by `id`, left to right, without overlaps.
inline std::vector<int> replace_pair(const std::vector<int>& ids, BpePair pair, int id) {
    std::vector<int> out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == pair.left && ids[i + 1] == pair.right) {
            out.push_back(id);
            ++i;  // the right half is consumed too
        } else {
            out.push_back(ids[i]);
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// The plain trainer: recount everything for every merge.
// ---------------------------------------------------------------------------------------------
inline TrainedBpe train_bpe_naive_on(std::vector<WeightedChunk> chunks, int vocab_size) {
    check_vocab_size(vocab_size);
    std::vector<BpePair> merges;
    for (int id = 256; id < vocab_size; ++id) {
        // std::map iterates pairs in (left, right) order, so with a strict ">" the first pair
        // reaching the top count is the smallest one: the documented tie-break.
        std::map<std::pair<int, int>, std::int64_t> pair_counts;
        for (const WeightedChunk& c : chunks)
            for (size_t i = 0; i + 1 < c.ids.size(); ++i) pair_counts[{c.ids[i], c.ids[i + 1]}] += c.count;
        if (pair_counts.empty()) fail_out_of_pairs(id - 256, vocab_size);

        std::pair<int, int> best{-1, -1};
        std::int64_t best_count = 0;
        for (const auto& [pair, count] : pair_counts)
            if (count > best_count) {
                best = pair;
                best_count = count;
            }
        const BpePair merge{best.first, best.second};
        merges.push_back(merge);
        for (WeightedChunk& c : chunks) c.ids = replace_pair(c.ids, merge, id);
    }
    return TrainedBpe::from_merges(merges);
}

// ---------------------------------------------------------------------------------------------
// The fast trainer: same merges, but pair counts are kept between merges.
//   pair_count     (left, right) -> weighted count over all chunks
//   chunks_with    (left, right) -> indices of chunks that contained it when it was counted
//                  (an index may be stale — the chunk changed since — and is then skipped)
//   ranking        every pair with a positive count, most frequent first, then smallest pair:
//                  its first element is always the next merge.
// A merge rewrites only the chunks in chunks_with[pair]: their old pairs are subtracted, their
// new pairs added, and only pairs whose count changed move in the ranking.
// ---------------------------------------------------------------------------------------------
inline TrainedBpe train_bpe_on(std::vector<WeightedChunk> chunks, int vocab_size) {
    check_vocab_size(vocab_size);
    using Key = std::uint64_t;
    const auto key = [](int left, int right) {
        return (static_cast<Key>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
    };
    struct Ranked {
        std::int64_t count;
        int left, right;
        bool operator<(const Ranked& o) const {  // "comes first": higher count, then smaller pair
            if (count != o.count) return count > o.count;
            if (left != o.left) return left < o.left;
            return right < o.right;
        }
    };
    std::unordered_map<Key, std::int64_t> pair_count;
    std::unordered_map<Key, std::vector<int>> chunks_with;
    std::set<Ranked> ranking;

    for (int c = 0; c < static_cast<int>(chunks.size()); ++c) {
        const std::vector<int>& ids = chunks[c].ids;
        for (size_t i = 0; i + 1 < ids.size(); ++i) {
            const Key k = key(ids[i], ids[i + 1]);
            pair_count[k] += chunks[c].count;
            std::vector<int>& where = chunks_with[k];
            if (where.empty() || where.back() != c) where.push_back(c);
        }
    }
    for (const auto& [k, count] : pair_count)
        ranking.insert(Ranked{count, static_cast<int>(k >> 32), static_cast<int>(k & 0xffffffffu)});

    std::vector<BpePair> merges;
    std::vector<int> rewritten_by(chunks.size(), -1);  // the merge that last rewrote each chunk
    for (int id = 256; id < vocab_size; ++id) {
        if (ranking.empty()) fail_out_of_pairs(id - 256, vocab_size);
        const BpePair merge{ranking.begin()->left, ranking.begin()->right};
        merges.push_back(merge);

        // Rewrite every chunk that has the pair; collect how each pair's count changes.
        std::unordered_map<Key, std::int64_t> change;
        const std::vector<int> where = std::move(chunks_with[key(merge.left, merge.right)]);
        chunks_with.erase(key(merge.left, merge.right));
        for (int c : where) {
            if (rewritten_by[c] == id) continue;  // listed twice
            rewritten_by[c] = id;
            WeightedChunk& chunk = chunks[c];
            std::vector<int> merged = replace_pair(chunk.ids, merge, id);
            if (merged.size() == chunk.ids.size()) continue;  // stale: the pair is gone already
            for (size_t i = 0; i + 1 < chunk.ids.size(); ++i) change[key(chunk.ids[i], chunk.ids[i + 1])] -= chunk.count;
            for (size_t i = 0; i + 1 < merged.size(); ++i) {
                change[key(merged[i], merged[i + 1])] += chunk.count;
                if (merged[i] == id || merged[i + 1] == id) {  // a pair that did not exist before
                    std::vector<int>& list = chunks_with[key(merged[i], merged[i + 1])];
                    if (list.empty() || list.back() != c) list.push_back(c);
                }
            }
            chunk.ids = std::move(merged);
        }

        // Move the changed pairs in the ranking. The merged pair itself drops to zero.
        for (const auto& [k, delta] : change) {
            if (delta == 0) continue;
            const int left = static_cast<int>(k >> 32), right = static_cast<int>(k & 0xffffffffu);
            std::int64_t& count = pair_count[k];
            if (count > 0) ranking.erase(Ranked{count, left, right});
            count += delta;
            if (count > 0) ranking.insert(Ranked{count, left, right});
            else pair_count.erase(k);
        }
    }
    return TrainedBpe::from_merges(merges);
}

// ---------------------------------------------------------------------------------------------
// Entry points: text or file in, TrainedBpe out.
// ---------------------------------------------------------------------------------------------
inline TrainedBpe train_bpe(std::string_view text, int vocab_size) {
    check_vocab_size(vocab_size);
    return train_bpe_on(count_chunks(bpe_train_split().split(text)), vocab_size);
}

inline TrainedBpe train_bpe_naive(std::string_view text, int vocab_size) {
    check_vocab_size(vocab_size);
    return train_bpe_naive_on(count_chunks(bpe_train_split().split(text)), vocab_size);
}

inline TrainedBpe train_bpe_file(const std::string& path, int vocab_size) {
    check_vocab_size(vocab_size);
    const std::string text = read_file_bytes(path, "training text");
    try {
        return train_bpe(text, vocab_size);
    } catch (const Error& e) {
        fail("training text '", path, "': ", e.what());
    }
}

}  // namespace glass
