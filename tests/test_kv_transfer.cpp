// Disaggregated prefill/decode's wire (dist/kv_transfer.hpp): a prompt computed in one pool,
// its blocks shipped to another pool with other block ids, decodes there exactly as where it was
// computed; the bytes are kv_bytes_per_token × positions; bad shipments are refused by name.
#include <span>
#include <vector>

#include "test_support.hpp"

namespace test_kv_transfer {

using glass::KvType;
using glass::serve::BatchEntry;
using glass::serve::KvPart;
using glass::serve::PagedKVPool;

namespace {

constexpr int kBlockSize = 8;

// One forward step of one sequence: `tokens` at positions start.., its last row's logits.
std::vector<float> step(const glass::Model& m, PagedKVPool& pool, std::span<const int> table, std::span<const int> tokens,
                        int start) {
    const BatchEntry e{.tokens = tokens, .start = start, .block_table = table};
    return glass::serve::paged_forward(m, pool, std::span<const BatchEntry>(&e, 1));
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// Greedy decoding of `steps` tokens from `logits`, continuing the sequence of `table` in `pool`
// after `positions` positions; every step's logits.
std::vector<std::vector<float>> decode(const glass::Model& m, PagedKVPool& pool, std::span<const int> table,
                                       std::vector<float> logits, int positions, int steps) {
    std::vector<std::vector<float>> out;
    for (int i = 0; i < steps; ++i) {
        out.push_back(logits);
        const int id = argmax(logits);
        logits = step(m, pool, table, std::span<const int>(&id, 1), positions + i);
    }
    return out;
}

const std::vector<int> kPrompt = {1, 403, 407, 261, 378, 279, 310, 365, 302, 271, 430, 278, 281, 266, 290, 409, 270, 295, 329, 301};

}  // namespace

TEST_CASE("a prompt's blocks shipped to another pool decode there exactly as where they were computed") {
    const glass::Model& m = test::shipped();
    const int n = static_cast<int>(kPrompt.size());  // 20 positions: two full blocks and a partial one
    for (const KvType kv : {KvType::fp32, KvType::int8}) {
        CAPTURE(glass::to_string(kv));
        // Prefill side: blocks 5, 1, 6 of its pool (and 2 of them for the decoded tokens after).
        PagedKVPool prefill_pool(m.config, 8, kBlockSize, kv);
        const std::vector<int> prefill_table = {5, 1, 6, 2, 7};
        const std::vector<float> last = step(m, prefill_pool, prefill_table, kPrompt, 0);
        // Decode side: other block ids, rows of other sequences already there.
        PagedKVPool decode_pool(m.config, 8, kBlockSize, kv);
        const std::vector<int> decode_table = {0, 4, 3, 6, 2};
        const std::vector<int> other = {1, 300, 301, 302};
        const std::vector<int> other_table = {7};
        step(m, decode_pool, other_table, other, 0);
        const std::vector<float> other_before = step(m, decode_pool, other_table, std::span<const int>(&other[1], 1), 4);

        const std::vector<std::byte> bytes = glass::dist::pack_kv_blocks(prefill_pool, prefill_table, n);
        CHECK(static_cast<std::int64_t>(bytes.size()) == glass::kv_bytes_per_token(m.config, kv) * n);
        glass::dist::unpack_kv_blocks(decode_pool, decode_table, n, bytes);

        // Every shipped row (and int8 scale) is stored with the same bits.
        for (int layer = 0; layer < m.config.n_layers; ++layer)
            for (const KvPart part : {KvPart::key, KvPart::value})
                for (int pos = 0; pos < n; ++pos) {
                    const auto a = prefill_pool.row(part, layer, prefill_table, pos);
                    const auto b = decode_pool.row(part, layer, decode_table, pos);
                    REQUIRE(std::equal(a.begin(), a.end(), b.begin()));
                    if (kv == KvType::int8) {
                        const auto sa = prefill_pool.row_scales(part, layer, prefill_table, pos);
                        const auto sb = decode_pool.row_scales(part, layer, decode_table, pos);
                        REQUIRE(std::equal(sa.begin(), sa.end(), sb.begin()));
                    }
                }
        // Decoding on either side gives the same logits at every step, bit for bit.
        const auto here = decode(m, prefill_pool, prefill_table, last, n, 12);
        const auto there = decode(m, decode_pool, decode_table, last, n, 12);
        CHECK(here == there);
        // The other sequence's block was not touched: its next step reads what it read before.
        CHECK(step(m, decode_pool, other_table, std::span<const int>(&other[1], 1), 4) == other_before);
    }
}

TEST_CASE("an int8 shipment carries codes and scales: about a quarter of fp32's bytes") {
    const glass::ModelConfig& c = test::shipped().config;
    PagedKVPool fp32(c, 4, kBlockSize, KvType::fp32), int8(c, 4, kBlockSize, KvType::int8);
    const std::vector<int> table = {0, 1};
    const auto a = glass::dist::pack_kv_blocks(fp32, table, 10);
    const auto b = glass::dist::pack_kv_blocks(int8, table, 10);
    // Per position: 2 × layers × kv_dim × 4 B, against 2 × layers × (kv_dim + 4 B per KV head).
    CHECK(a.size() == size_t(2 * c.n_layers * c.kv_dim() * 4 * 10));
    CHECK(b.size() == size_t(2 * c.n_layers * (c.kv_dim() + 4 * c.n_kv_heads) * 10));
    // The reference int8 pool counts its scales among its bytes.
    CHECK(int8.bytes() == fp32.bytes() + 2 * c.n_layers * 4 * kBlockSize * c.n_kv_heads * 4);
    CHECK(int8.bytes() == PagedKVPool::bytes_for(c, 4, kBlockSize, KvType::int8));
}

TEST_CASE("ship_kv / receive_kv between two ranks: the decode side samples from the shipped logits") {
    const glass::Model& m = test::shipped();
    const int n = static_cast<int>(kPrompt.size());
    for (const KvType kv : {KvType::fp32, KvType::int8}) {
        CAPTURE(glass::to_string(kv));
        // One process, as the reference.
        PagedKVPool local(m.config, 8, kBlockSize, kv);
        const std::vector<int> local_table = {0, 1, 2, 3};
        const auto expected = decode(m, local, local_table, step(m, local, local_table, kPrompt, 0), n, 10);

        std::vector<std::vector<float>> got;
        std::int64_t sent = 0;
        glass::dist::run_ranks(2, [&](glass::dist::Communicator& comm) {
            PagedKVPool pool(m.config, 8, kBlockSize, kv);
            if (comm.rank() == 1) {  // prefill worker
                const std::vector<int> table = {6, 2, 4};
                const std::vector<float> last = step(m, pool, table, kPrompt, 0);
                sent = glass::dist::ship_kv(comm, 0, pool, table, n, last);
            } else {  // decode worker: reserves its blocks, receives, decodes
                const std::vector<int> table = {3, 7, 1, 0};
                std::vector<float> last(static_cast<size_t>(m.config.vocab_size));
                glass::dist::receive_kv(comm, 1, pool, table, n, last);
                got = decode(m, pool, table, last, n, 10);
            }
        });
        CHECK(got == expected);
        CHECK(sent == 6 * 4 + glass::kv_bytes_per_token(m.config, kv) * n + 4 * m.config.vocab_size);
    }
}

TEST_CASE("a shipment the decode side cannot take is refused on both sides, naming the value") {
    const glass::Model& m = test::shipped();
    const std::vector<float> logits(static_cast<size_t>(m.config.vocab_size), 0.0f);
    struct Case {
        KvType sender_kv, receiver_kv;
        int sent_positions, expected_positions;
        std::vector<int> receiver_table;
        const char* receiver_error;
        const char* sender_error;
    };
    const Case cases[] = {
        {KvType::int8, KvType::fp32, 10, 10, {0, 1}, "its KV type is 1, this side's is 0", "refused: its KV type"},
        {KvType::fp32, KvType::fp32, 10, 12, {0, 1}, "its positions is 10, this side's is 12", "refused: its positions"},
        {KvType::fp32, KvType::fp32, 20, 20, {0, 1}, "2 blocks of 8 positions cannot hold 20", "cannot hold 20 positions"},
        {KvType::fp32, KvType::fp32, 10, 10, {0, 9}, "block 9 is outside the pool of 8", "cannot hold 10 positions"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.receiver_error);
        std::string receiver_said, sender_said;
        CHECK_THROWS(glass::dist::run_ranks(2, [&](glass::dist::Communicator& comm) {
            if (comm.rank() == 1) {
                PagedKVPool pool(m.config, 8, kBlockSize, c.sender_kv);
                const std::vector<int> table = {0, 1, 2};
                try {
                    glass::dist::ship_kv(comm, 0, pool, table, c.sent_positions, logits);
                } catch (const glass::Error& e) {
                    sender_said = e.what();
                    throw;
                }
            } else {
                PagedKVPool pool(m.config, 8, kBlockSize, c.receiver_kv);
                std::vector<float> last(logits.size());
                try {
                    glass::dist::receive_kv(comm, 1, pool, c.receiver_table, c.expected_positions, last);
                } catch (const glass::Error& e) {
                    receiver_said = e.what();
                    throw;
                }
            }
        }));
        CHECK_MESSAGE(receiver_said.find(c.receiver_error) != std::string::npos, receiver_said);
        CHECK_MESSAGE(sender_said.find(c.sender_error) != std::string::npos, sender_said);
    }
    // Bytes that do not match the positions are refused before a row is stored.
    PagedKVPool pool(m.config, 4, kBlockSize, KvType::fp32);
    const std::vector<int> table = {0, 1};
    std::vector<std::byte> short_bytes(100);
    CHECK_THROWS_WITH(glass::dist::unpack_kv_blocks(pool, table, 10, short_bytes),
                      doctest::Contains("100 bytes for 10 positions"));
}

}  // namespace test_kv_transfer
