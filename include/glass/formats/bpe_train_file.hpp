/// \file
/// \brief glass/formats/bpe_train_file.hpp — a trained BPE vocabulary on disk, in OpenAI's tiktoken rank format.
/// ```text
/// In/out: a text file with one line per token, in id order:
///     base64(the token's bytes) SPACE rank NEWLINE          e.g. "IHRoZQ== 300" if 300 is " the"
/// The rank is the token id (bpe_train.hpp): ranks 0..255 are the single bytes 0x00..0xFF in
/// byte order, rank 256 + k is the token merge k made.
///
/// The file lists tokens, not merges. Loading gets merge k back by encoding the bytes of token
/// 256 + k with the merges before it: training built that token out of exactly two earlier tokens,
/// and replaying the earlier merges on its bytes alone gives those two again (the same replay that
/// makes encode() agree with training). A token for which that does not give two tokens is not
/// from this trainer, and loading fails there, naming its rank.
///
/// General tiktoken files (cl100k_base, o200k_base — their byte tokens are not in byte order)
/// belong to the byte-level tokenizer; this reader is for vocabularies glass trained.
/// ```
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "glass/tokenize/bpe_train.hpp"
#include "glass/errors.hpp"
#include "glass/formats/tiktoken_loader.hpp"  // read_tiktoken_ranks, base64_decode

namespace glass {

// Bytes -> standard base64 with '=' padding (RFC 4648), the inverse of base64_decode:
// every 3 bytes (24 bits) become 4 characters of 6 bits each.
inline std::string base64_encode(std::string_view bytes) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = bytes.size() - i < 3 ? bytes.size() - i : 3;  // bytes in this group
        std::uint32_t bits = 0;
        for (size_t j = 0; j < 3; ++j)
            bits = (bits << 8) | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
        for (size_t j = 0; j < 4; ++j) out += j <= n ? kAlphabet[(bits >> (18 - 6 * j)) & 63] : '=';
    }
    return out;
}

inline void save_trained_bpe(const TrainedBpe& bpe, const std::string& path) {
    std::ofstream out(path, std::ios::binary);
    if (!out) fail("cannot write vocabulary file '", path, "': ", std::strerror(errno));
    for (int id = 0; id < bpe.vocab_size(); ++id) out << base64_encode(bpe.bytes_of(id)) << ' ' << id << '\n';
    out.flush();
    if (!out) fail("writing vocabulary file '", path, "' failed: ", std::strerror(errno));
}

inline TrainedBpe load_trained_bpe(const std::string& path) {
    // The lines themselves (base64, rank, no rank twice) are checked by the tiktoken reader.
    const std::vector<std::string> tokens = read_tiktoken_ranks(path);  // [n_ranks] token bytes
    if (tokens.size() < 256)
        fail("vocabulary file '", path, "' has ", tokens.size(),
             " ranks; a trained vocabulary starts with the 256 single bytes");
    const auto bad = [&](int rank, const auto&... why) {
        fail("vocabulary file '", path, "' rank ", rank, " (", base64_encode(tokens[rank].substr(0, 30)), "): ", why...);
    };
    TrainedBpe bpe = TrainedBpe::from_merges({});  // the 256 bytes; merges follow rank by rank
    std::unordered_map<std::string, int> rank_of;  // token bytes -> rank, to catch repeats
    for (int rank = 0; rank < static_cast<int>(tokens.size()); ++rank) {
        const std::string& bytes = tokens[rank];
        if (bytes.empty()) fail("vocabulary file '", path, "' has no rank ", rank, " (ranks must count up from 0)");
        if (rank < 256) {
            if (bytes.size() != 1 || static_cast<unsigned char>(bytes[0]) != rank)
                bad(rank, "must be the single byte ", rank, ", not a ", bytes.size(), "-byte token");
        } else {
            if (auto seen = rank_of.find(bytes); seen != rank_of.end()) bad(rank, "the same bytes as rank ", seen->second);
            const std::vector<int> parts = bpe.encode_chunk(bytes);  // with merges 0 .. rank-257
            if (parts.size() != 2)
                bad(rank, "the earlier merges split this token into ", parts.size(),
                    " tokens, not 2: it is not two earlier tokens joined");
            bpe.add_merge(BpePair{parts[0], parts[1]});
        }
        rank_of.emplace(bytes, rank);
    }
    return bpe;
}

}  // namespace glass
