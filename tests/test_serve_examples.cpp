// The serving examples (15_block_manager, 16_scheduler, 18_paged_memory, 21_http_server): run
// each one and check what it prints against what this file works out on its own — the block
// manager's rules applied by hand (LRU free list, last-first release, chained xxHash hashes), the
// same engine driven again here with the same inputs, each request generated alone with the plain
// CpuSession, C17's arithmetic redone from the workload's lengths, and a chat's prefix-cache hit
// worked out from its tokens. Never the output against itself.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "test_support.hpp"
#include "xml_reader.hpp"

namespace test_serve_examples {  // this file's own names (tests are built in unity batches)

using glass::serve::BlockManager;
using test::value_of;
using test::number;
using test::read_file;
using test::run_example;
using test::temp_dir;

namespace {

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> lines;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// A number printed with `decimals` digits after the point equals `expected` to that rounding.
void check_printed(double printed, double expected, int decimals, const std::string& what) {
    INFO(what << ": printed " << printed << ", expected " << expected);
    CHECK(std::fabs(printed - expected) <= 0.5 * std::pow(10.0, -decimals) * (1 + 1e-9));
}

// "[3 4 5]" -> {3, 4, 5}; "[]" -> {}
std::vector<int> bracket_list(const std::string& s) {
    const size_t open = s.find('['), close = s.find(']');
    const bool has_list = open != std::string::npos && close != std::string::npos && open < close;
    REQUIRE_MESSAGE(has_list, "no [list] in '" << s << "'");
    std::vector<int> v;
    std::istringstream in(s.substr(open + 1, close - open - 1));
    for (int x; in >> x;) v.push_back(x);
    return v;
}

std::string hex(std::uint64_t h) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(h));
    return buf;
}

// ---- 15_block_manager ------------------------------------------------------------------------

// The text of one numbered part of the story: from "== N." up to the next "==" line.
std::string section(const std::string& out, int n) {
    const std::string head = "== " + std::to_string(n) + ".";
    const size_t at = out.find(head);
    REQUIRE_MESSAGE(at != std::string::npos, "no section '" << head << "' in the output:\n" << out);
    const size_t end = out.find("\n== ", at + head.size());
    return out.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at);
}

// A prompt as the example prints it, "[100..103 | 104..107 | 200 201] (10 tokens)", expanded.
std::vector<int> printed_prompt(const std::string& s) {
    const size_t open = s.find('['), close = s.find(']');
    REQUIRE(open != std::string::npos);
    REQUIRE(close != std::string::npos);
    std::vector<int> ids;
    std::istringstream in(s.substr(open + 1, close - open - 1));
    for (std::string w; in >> w;) {
        if (w == "|") continue;
        const size_t dots = w.find("..");
        if (dots == std::string::npos) {
            ids.push_back(std::stoi(w));
        } else {
            for (int id = std::stoi(w.substr(0, dots)); id <= std::stoi(w.substr(dots + 2)); ++id) ids.push_back(id);
        }
    }
    return ids;
}

struct ShownBlock {
    int ref = -1;
    bool cached = false;
    std::string hash;  // as printed
    int parent = -2;   // -1: "none"
};

// The pool lines ("  block N: ref R, cached, hash 0x..., parent P, tokens ...") of a piece of output.
std::map<int, ShownBlock> shown_pool(const std::string& text) {
    std::map<int, ShownBlock> pool;
    const std::regex cached(R"(  block (\d+): ref (\d+), cached, hash (0x[0-9a-f]{16}), parent (none|\d+), tokens .*)");
    const std::regex plain(R"(  block (\d+): ref (\d+), not cached)");
    for (const std::string& line : lines_of(text)) {
        std::smatch m;
        if (std::regex_match(line, m, cached))
            pool[std::stoi(m[1])] = {std::stoi(m[2]), true, m[3], m[4] == "none" ? -1 : std::stoi(m[4])};
        else if (std::regex_match(line, m, plain))
            pool[std::stoi(m[1])] = {std::stoi(m[2]), false, "", -2};
        else
            CHECK_MESSAGE(line.rfind("  block", 0) != 0, "unreadable pool line: " << line);
    }
    return pool;
}

// What the pool lines should say: every block held by a sequence or still cached.
void check_pool_lines(const std::string& text, const BlockManager& bm) {
    const std::map<int, ShownBlock> shown = shown_pool(text);
    std::set<int> expected_ids;
    for (int id = 0; id < bm.num_blocks(); ++id) {
        const BlockManager::Block& b = bm.block(id);
        if (b.ref_count == 0 && !b.cached) continue;
        expected_ids.insert(id);
        INFO("block " << id);
        REQUIRE(shown.count(id));
        CHECK(shown.at(id).ref == b.ref_count);
        CHECK(shown.at(id).cached == b.cached);
        if (b.cached) {
            CHECK(shown.at(id).hash == hex(b.hash));
            CHECK(shown.at(id).parent == b.parent);
        }
    }
    for (const auto& [id, block] : shown) CHECK_MESSAGE(expected_ids.count(id), "block " << id << " shown but neither held nor cached");
    CHECK(bracket_list(value_of(text, "free list")) == bm.free_list());
}

std::vector<int> count_from(int first, int n) {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) v.push_back(first + i);
    return v;
}

std::vector<int> join(std::vector<int> a, const std::vector<int>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// xxHash's XXH3 itself, seeded with the parent's hash: the chain, without going through glass.
std::uint64_t xxh(std::uint64_t parent, const std::vector<int>& tokens, size_t first, size_t n) {
    return XXH3_64bits_withSeed(tokens.data() + first, n * sizeof(int), parent);
}

void check_block_manager_story(int bs, int num_blocks, const std::string& args) {
    INFO("15_block_manager " << args);
    const test::Run r = run_example("15_block_manager", args);
    CHECK(value_of(r.out, "pool") == std::to_string(num_blocks) + " blocks of " + std::to_string(bs) +
                                         " positions, prefix caching on");

    // The story's prompts, as the example's header describes them.
    const std::vector<int> S = count_from(100, 2 * bs);
    const std::vector<int> A = join(S, count_from(200, bs / 2)), B = count_from(300, bs + bs / 2),
                           C = join(S, count_from(400, bs - 1)),
                           D = join(join(count_from(500, bs), count_from(100 + bs, bs)), {600}),
                           E = join(count_from(100, bs), count_from(600, bs / 2));
    const auto blocks_for = [&](const std::vector<int>& t) { return static_cast<int>((t.size() + bs - 1) / bs); };

    // Our own manager, driven the way the scheduler and engine drive theirs, beside the rules
    // checked by hand.
    BlockManager bm(num_blocks, bs);
    const auto admit = [&](const std::vector<int>& t) {
        std::vector<int> table;
        bm.grow(table, bm.find_cached_prefix(t), static_cast<int>(t.size()));
        bm.cache_full_blocks(table, t, static_cast<int>(t.size()));
        return table;
    };
    const std::uint64_t root = glass::serve::kRootBlockHash;
    const std::uint64_t h0 = xxh(root, S, 0, static_cast<size_t>(bs)), h1 = xxh(h0, S, static_cast<size_t>(bs), static_cast<size_t>(bs));

    {  // 1. A and B: fresh blocks in id order; A's two full blocks hashed as a chain.
        const std::string s = section(r.out, 1);
        CHECK(printed_prompt(value_of(s, "A prompt")) == A);
        CHECK(printed_prompt(value_of(s, "B prompt")) == B);
        std::vector<int> a = admit(A), b = admit(B);
        CHECK(a == count_from(0, blocks_for(A)));
        CHECK(b == count_from(blocks_for(A), blocks_for(B)));
        CHECK(bracket_list(value_of(s, "A block table")) == a);
        CHECK(bracket_list(value_of(s, "B block table")) == b);
        CHECK(value_of(s, "A cached prefix") == "none");
        CHECK(value_of(s, "hash of A's block 0, H(root, " + std::to_string(S[0]) + ".." + std::to_string(S[bs - 1]) + ")") == hex(h0));
        CHECK(value_of(s, "hash of A's block 1, H(hash of block 0, " + std::to_string(S[bs]) + ".." + std::to_string(S[2 * bs - 1]) + ")") ==
              hex(h1));
        CHECK(bm.block(a[0]).hash == h0);
        CHECK(bm.block(a[1]).hash == h1);
        check_pool_lines(s, bm);

        // 2. C shares A's two blocks (ref count 2) and takes the oldest free block.
        const std::string s2 = section(r.out, 2);
        CHECK(printed_prompt(value_of(s2, "C prompt")) == C);
        const std::vector<int> free_before = bm.free_list();
        std::vector<int> c = admit(C);
        CHECK(c == std::vector<int>{a[0], a[1], free_before.front()});
        CHECK(bracket_list(value_of(s2, "C block table")) == c);
        CHECK(bracket_list(value_of(s2, "C cached prefix")) == std::vector<int>{a[0], a[1]});
        CHECK(value_of(s2, "C cached prefix").find(std::to_string(2 * bs) + " tokens not computed again") != std::string::npos);
        CHECK(bm.block(a[0]).ref_count == 2);
        CHECK(bm.block(a[1]).ref_count == 2);
        check_pool_lines(s2, bm);

        // 3. D: A's second block of tokens after another first block: a different hash, no hit.
        const std::string s3 = section(r.out, 3);
        CHECK(printed_prompt(value_of(s3, "D prompt")) == D);
        const std::uint64_t d1 = xxh(xxh(root, D, 0, static_cast<size_t>(bs)), D, static_cast<size_t>(bs), static_cast<size_t>(bs));
        CHECK(d1 != h1);
        CHECK(value_of(s3, "hash of D's block 1, H(hash of " + std::to_string(500) + ".." + std::to_string(500 + bs - 1) + ", " +
                               std::to_string(100 + bs) + ".." + std::to_string(100 + 2 * bs - 1) + ")") == hex(d1));
        CHECK(value_of(s3, "same tokens as A's block 1, same hash") == "no");
        CHECK(value_of(s3, "D cached prefix") == "none");

        // 4. The last token is computed: S alone (whole blocks) hits one block, S + 1 token two.
        const std::string s4 = section(r.out, 4);
        CHECK(bracket_list(value_of(s4, "lookup S alone [" + std::to_string(S[0]) + ".." + std::to_string(S[bs - 1]) + " | " +
                                        std::to_string(S[bs]) + ".." + std::to_string(S[2 * bs - 1]) + "] (" +
                                        std::to_string(2 * bs) + " tokens)")) == std::vector<int>{a[0]});
        const std::string s4_more = value_of(s4, "lookup S + 1 token [" + std::to_string(S[0]) + ".." + std::to_string(S[bs - 1]) +
                                                     " | " + std::to_string(S[bs]) + ".." + std::to_string(S[2 * bs - 1]) +
                                                     " | 600] (" + std::to_string(2 * bs + 1) + " tokens)");
        CHECK(bracket_list(s4_more) == std::vector<int>{a[0], a[1]});

        // 5. A, then C, release: blocks whose count drops to 0 join the back, last block first.
        const std::string s5 = section(r.out, 5);
        const size_t c_releases = s5.find("C releases");
        REQUIRE(c_releases != std::string::npos);
        std::vector<int> expected_free = bm.free_list();
        expected_free.push_back(a[2]);  // a[0], a[1] are still C's
        bm.release(a);
        CHECK(bm.free_list() == expected_free);
        check_pool_lines(s5.substr(0, c_releases), bm);
        for (const int id : {c[2], c[1], c[0]}) expected_free.push_back(id);
        bm.release(c);
        CHECK(bm.free_list() == expected_free);
        check_pool_lines(s5.substr(c_releases), bm);
        CHECK(bm.block(c[0]).cached);  // free, but still findable

        // 6. E hits block a[0] in the free list: it leaves the list; E's new block is the oldest free one.
        const std::string s6 = section(r.out, 6);
        CHECK(printed_prompt(value_of(s6, "E prompt")) == E);
        std::vector<int> free_list = bm.free_list();
        free_list.erase(std::find(free_list.begin(), free_list.end(), a[0]));
        std::vector<int> e = admit(E);
        CHECK(e == std::vector<int>{a[0], free_list.front()});
        free_list.erase(free_list.begin());
        CHECK(bm.free_list() == free_list);
        CHECK(bracket_list(value_of(s6, "E cached prefix")) == std::vector<int>{a[0]});
        CHECK(bracket_list(value_of(s6, "E block table")) == e);
        check_pool_lines(s6, bm);

        // 7. F takes every free block, front first: of the cached ones among them, only a[1]
        //    (A's second block) had a hash; it is evicted, so S + 1 token now hits a[0] alone.
        const std::string s7 = section(r.out, 7);
        const std::vector<int> f_expected = bm.free_list();
        const std::vector<int> F = count_from(700, bm.num_free() * bs);
        CHECK(printed_prompt(value_of(s7, "F prompt")) == F);
        std::vector<int> f = admit(F);
        CHECK(f == f_expected);
        CHECK(bracket_list(value_of(s7, "F block table")) == f);
        CHECK(bracket_list(value_of(s7, "cached blocks evicted")) == std::vector<int>{a[1]});
        CHECK(bracket_list(value_of(s7, "lookup S + 1 token again")) == std::vector<int>{a[0]});
        check_pool_lines(s7, bm);
        bm.release(b);
        bm.release(e);
        bm.release(f);
    }
    CHECK(value_of(r.out, "after B, E and F finish") ==
          std::to_string(num_blocks) + " of " + std::to_string(num_blocks) + " blocks free");
}

// ---- 16_scheduler ----------------------------------------------------------------------------

struct ShownPart {
    int id;
    std::string kind;  // decode | prefill | recompute
    int start, end;
    bool operator==(const ShownPart&) const = default;
};

struct ShownStep {
    std::vector<ShownPart> batch;
    int tokens = -1;
    std::vector<int> preempted, finished, waiting;
    int free = -1;
};

std::vector<int> r_ids(const std::string& s) {  // "r2 r3" -> {2, 3}
    std::vector<int> v;
    std::istringstream in(s);
    for (std::string w; in >> w;) {
        REQUIRE(w.size() >= 2);
        REQUIRE(w[0] == 'r');
        v.push_back(std::stoi(w.substr(1)));
    }
    return v;
}

// "step  7: r0 decode 10, r1 prefill [8,16) (2 tokens) | preempted r2 | waiting r2 r3 | free 2"
ShownStep parse_step(const std::string& line) {
    ShownStep s;
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_match(line, m, std::regex(R"(step +\d+: (.*) \((\d+) tokens?\)((?: \| [^|]+)*))")),
                    "unreadable step line: " << line);
    s.tokens = std::stoi(m[2]);
    const std::string batch = m[1], tail = m[3];
    if (batch != "nothing") {
        const std::regex part(R"(r(\d+) (?:decode (\d+)|(prefill|recompute) \[(\d+),(\d+)\)))");
        size_t at = 0;
        while (at <= batch.size()) {
            const size_t comma = batch.find(", ", at);
            const std::string p = batch.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
            std::smatch pm;
            REQUIRE_MESSAGE(std::regex_match(p, pm, part), "unreadable batch part '" << p << "' in: " << line);
            if (pm[2].matched)
                s.batch.push_back({std::stoi(pm[1]), "decode", std::stoi(pm[2]), std::stoi(pm[2]) + 1});
            else
                s.batch.push_back({std::stoi(pm[1]), pm[3], std::stoi(pm[4]), std::stoi(pm[5])});
            if (comma == std::string::npos) break;
            at = comma + 2;
        }
    }
    std::istringstream fields(tail);
    for (std::string f; std::getline(fields, f, '|');) {
        while (!f.empty() && f.front() == ' ') f.erase(f.begin());
        while (!f.empty() && f.back() == ' ') f.pop_back();
        if (f.empty()) continue;
        const size_t space = f.find(' ');
        REQUIRE(space != std::string::npos);
        const std::string key = f.substr(0, space), rest = f.substr(space + 1);
        if (key == "preempted") s.preempted = r_ids(rest);
        else if (key == "finished") s.finished = r_ids(rest);
        else if (key == "waiting") s.waiting = r_ids(rest);
        else if (key == "free") s.free = std::stoi(rest);
        else FAIL("unknown field '" << key << "' in: " << line);
    }
    return s;
}

struct Planned {
    std::string prompt;
    int n_prompt, max_new, arrival;
};

void check_scheduler_run(const std::string& args, int budget, int num_blocks, int block_size) {
    INFO("16_scheduler " << args);
    const test::Run r = run_example("16_scheduler", args);
    const glass::Llama2cTokenizer& tok = test::shipped_tok();
    CHECK(value_of(r.out, "engine") == "budget " + std::to_string(budget) + " tokens per step, pool " +
                                           std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                                           " positions, prefix caching on");

    // The requests, as announced; their token counts come from the tokenizer here.
    std::vector<Planned> planned;
    std::vector<ShownStep> steps;
    const std::regex announce(R"re(r(\d+): "(.*)" \((\d+) prompt tokens\), (\d+) new tokens, arrives before step (\d+))re");
    for (const std::string& line : lines_of(r.out)) {
        std::smatch m;
        if (std::regex_match(line, m, announce)) {
            REQUIRE(std::stoi(m[1]) == static_cast<int>(planned.size()));
            planned.push_back({m[2], std::stoi(m[3]), std::stoi(m[4]), std::stoi(m[5])});
            CHECK(planned.back().n_prompt == static_cast<int>(tok.encode(planned.back().prompt, true, false).size()));
        } else if (line.rfind("step ", 0) == 0) {
            steps.push_back(parse_step(line));
        }
    }
    REQUIRE(planned.size() >= 3);
    REQUIRE(!steps.empty());

    // Every step, from the printed lines alone: within the budget; each request's pieces follow
    // on from what it had computed (a decode computes exactly the next position); a request is
    // recomputed only after a preemption, and then from a block boundary (what the prefix cache
    // kept) no further than it had got.
    std::map<int, int> computed;  // id -> positions with K/V, as the printed steps tell it
    std::map<int, int> reached;   // id -> the most positions it ever had
    std::set<int> preempted_ever, finished;
    int max_requests_in_a_step = 0, preemptions = 0;
    std::map<int, int> prefill_steps;
    for (size_t k = 0; k < steps.size(); ++k) {
        const ShownStep& s = steps[k];
        INFO("step " << k + 1);
        int tokens = 0;
        for (const ShownPart& p : s.batch) {
            tokens += p.end - p.start;
            CHECK(p.end > p.start);
            if (p.kind == "recompute") CHECK(preempted_ever.count(p.id));
            if (p.kind == "recompute" && computed[p.id] == 0) {  // its first piece: after what the cache kept
                CHECK(p.start % block_size == 0);
                CHECK(p.start <= reached[p.id]);
            } else {
                CHECK(p.start == computed[p.id]);
            }
            if (p.kind != "decode") ++prefill_steps[p.id];
            computed[p.id] = p.end;
            reached[p.id] = std::max(reached[p.id], p.end);
        }
        CHECK(tokens == s.tokens);
        CHECK(tokens <= budget);
        max_requests_in_a_step = std::max(max_requests_in_a_step, static_cast<int>(s.batch.size()));
        for (int id : s.preempted) {
            computed[id] = 0;
            preempted_ever.insert(id);
            ++preemptions;
        }
        for (int id : s.finished) CHECK(finished.insert(id).second);
    }
    CHECK(finished.size() == planned.size());

    // The same engine, driven here with the same inputs: every printed step is its StepReport.
    {
        glass::serve::CpuPagedBackend backend(test::shipped());
        glass::serve::EngineOptions eo;
        eo.block_size = block_size;
        eo.num_blocks = num_blocks;
        eo.scheduler.max_tokens_per_step = budget;
        glass::serve::Engine engine(backend, tok, eo);
        std::set<int> preempted_here;
        for (size_t k = 0; k < steps.size(); ++k) {
            INFO("step " << k + 1);
            for (size_t i = 0; i < planned.size(); ++i)
                if (planned[i].arrival == static_cast<int>(k) + 1) {
                    glass::GenerateOptions o;
                    o.sampling.temperature = 0.0f;
                    o.max_new_tokens = planned[i].max_new;
                    CHECK(engine.add_request(planned[i].prompt, o) == static_cast<int>(i));
                }
            const glass::serve::StepReport report = engine.step();
            for (int id : report.preempted) preempted_here.insert(id);
            std::vector<ShownPart> expected;
            for (const glass::serve::StepReport::Part& p : report.batch)
                expected.push_back({p.id, !p.prefill ? "decode" : preempted_here.count(p.id) ? "recompute" : "prefill", p.start,
                                    p.start + p.n});
            CHECK(steps[k].batch == expected);
            CHECK(steps[k].preempted == report.preempted);
            CHECK(steps[k].finished == report.finished);
            CHECK(steps[k].waiting == report.waiting);
            CHECK(steps[k].free == engine.blocks().num_free());
            engine.take_finished();
        }
        CHECK_FALSE(engine.has_unfinished());
    }

    // Each request alone, with the plain reference session (not paged at all): same text.
    glass::CpuSession session(test::shipped());
    for (size_t i = 0; i < planned.size(); ++i) {
        glass::GenerateOptions o;
        o.sampling.temperature = 0.0f;
        o.max_new_tokens = planned[i].max_new;
        const glass::GenerateResult alone = glass::generate(session, tok, planned[i].prompt, o);
        std::string text = planned[i].prompt;
        for (char ch : alone.text) text += ch == '\n' ? std::string("\\n") : std::string(1, ch);
        const std::string id = "r" + std::to_string(i);
        CHECK(value_of(r.out, id + " text") == text);
        CHECK(value_of(r.out, id + " result").find(std::to_string(alone.generated_ids.size()) + " new tokens") == 0);
        CHECK(value_of(r.out, id + " result").find("same as alone: yes") != std::string::npos);
    }
    CHECK(value_of(r.out, "requests equal to their run alone") ==
          std::to_string(planned.size()) + " of " + std::to_string(planned.size()));
    if (args.empty()) {  // the default run shows all three things the walkthrough is about
        CHECK(max_requests_in_a_step >= 3);                                   // continuous batching
        CHECK(std::any_of(prefill_steps.begin(), prefill_steps.end(), [](const auto& kv) { return kv.second >= 3; }));  // chunks
        CHECK(preemptions >= 2);                                               // preemption
        CHECK(std::any_of(planned.begin(), planned.end(), [](const Planned& p) { return p.arrival > 1; }));
    }
}

// ---- 18_paged_memory -------------------------------------------------------------------------

// Logits of zeros: the pool's bookkeeping does not depend on what the model computes when every
// request produces exactly its number of tokens, so the memory run is repeated here without the
// model at all.
class ZeroBackend : public glass::serve::PagedBackend {
public:
    explicit ZeroBackend(const glass::ModelConfig& c) : config_(c) {}
    const glass::ModelConfig& config() const override { return config_; }
    void allocate_pool(int, int) override {}
    std::int64_t pool_bytes() const override { return 0; }
    std::span<const float> forward(std::span<const glass::serve::BatchEntry> batch) override {
        size_t wanting = 0;
        for (const glass::serve::BatchEntry& e : batch) wanting += e.wants_logits;
        logits_.assign(wanting * static_cast<size_t>(config_.vocab_size), 0.0f);
        return logits_;
    }
    std::int64_t weight_bytes() const override { return 0; }

private:
    glass::ModelConfig config_;
    std::vector<float> logits_;
};

struct Step {
    int running;
    std::int64_t reserved, held;  // positions
};

struct MemoryRun {
    std::vector<Step> steps;
    int preemptions = 0;
    std::int64_t computed = 0;
};

MemoryRun memory_run(const std::vector<std::pair<int, int>>& lengths, int block_size, int pool_positions) {
    ZeroBackend backend(test::shipped().config);
    glass::serve::EngineOptions eo;
    eo.block_size = block_size;
    eo.num_blocks = pool_positions / block_size;
    eo.prefix_caching = false;
    eo.scheduler.max_tokens_per_step = 512;
    eo.scheduler.max_running = 256;
    glass::serve::Engine engine(backend, test::shipped_tok(), eo);
    for (const auto& [p, g] : lengths) {
        std::vector<int> prompt(static_cast<size_t>(p), 5);
        prompt[0] = 1;
        glass::GenerateOptions o;
        o.sampling.temperature = 0.0f;
        o.max_new_tokens = g;
        o.stop_on_bos = o.stop_on_eos = false;
        engine.add_request_ids(prompt, o);
    }
    MemoryRun run;
    while (engine.has_unfinished()) {
        const glass::serve::StepReport report = engine.step();
        run.preemptions += static_cast<int>(report.preempted.size());
        for (const auto& p : report.batch) run.computed += p.n;
        Step s{0, 0, 0};
        std::int64_t blocks_held = 0;
        for (const glass::serve::Request* r : engine.scheduler().running()) {
            ++s.running;
            s.held += r->computed;
            blocks_held += static_cast<std::int64_t>(r->block_table.size());
        }
        s.reserved = blocks_held * block_size;  // no prefix caching: no block is in two tables
        // C17's mechanism, step by step: each request wastes less than one block.
        CHECK(s.reserved - s.held >= 0);
        CHECK(s.reserved - s.held <= std::int64_t{s.running} * (block_size - 1));
        CHECK(s.reserved <= pool_positions);
        run.steps.push_back(s);
        REQUIRE(run.steps.size() < 100000);
    }
    return run;
}

}  // namespace

TEST_CASE("example 15_block_manager: tables, shared blocks, chained hashes, LRU free list and eviction") {
    check_block_manager_story(4, 8, "");
    check_block_manager_story(3, 7, "--block-size 3 --blocks 7");
    check_block_manager_story(16, 6, "--block-size 16 --blocks 6");
}

TEST_CASE("example 15_block_manager: bad arguments are errors naming the value") {
    for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
             {"--blocks 5", "'5'"}, {"--block-size 1", "'1'"}, {"--block-size x", "'x'"}, {"--pool 3", "'--pool'"},
             {"--blocks", "'--blocks'"}}) {
        const test::Run r = test::run(test::bin_dir() + "/15_block_manager " + args);
        INFO(args << ": " << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(named) != std::string::npos);
    }
}

TEST_CASE("example 16_scheduler: every printed step is the engine's, and every request equals its run alone") {
    check_scheduler_run("", 8, 12, 4);
    check_scheduler_run("--budget 5 --blocks 14 --block-size 3", 5, 14, 3);
    check_scheduler_run("--budget 64 --blocks 40", 64, 40, 4);
}

TEST_CASE("example 16_scheduler: a pool too small for a request is refused, naming the sizes") {
    const test::Run r = test::run(test::bin_dir() + "/16_scheduler --blocks 6");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("only 24 (6 blocks of 4)") != std::string::npos);
    const test::Run bad = test::run(test::bin_dir() + "/16_scheduler --budget 0");
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("budget '0'") != std::string::npos);
}

TEST_CASE("example 18_paged_memory: C17, reserved vs used, paged vs one context window per request") {
    const std::string dir = temp_dir("c17");
    const std::string svg_path = dir + "/c17.svg";
    const test::Run r = run_example("18_paged_memory", test::sh(svg_path));

    // The workload: the example's documented generator (mt19937 seeded 1; per request a prompt
    // length, then a number of new tokens, uniform in 16..256), 32 requests.
    const int n_requests = 32, windows = 4;
    std::mt19937 rng(1);
    std::vector<std::pair<int, int>> lengths;
    double prompt_sum = 0, gen_sum = 0;
    for (int i = 0; i < n_requests; ++i) {
        const int p = std::uniform_int_distribution<int>(16, 256)(rng);
        const int g = std::uniform_int_distribution<int>(16, 256)(rng);
        lengths.push_back({p, g});
        prompt_sum += p;
        gen_sum += g;
    }
    CHECK(value_of(r.out, "workload") == "32 requests arriving at once, seed 1");
    CHECK(value_of(r.out, "prompt tokens").find("16..256, mean ") == 0);
    check_printed(std::stod(value_of(r.out, "prompt tokens").substr(14)), prompt_sum / n_requests, 1, "mean prompt");
    check_printed(std::stod(value_of(r.out, "new tokens").substr(14)), gen_sum / n_requests, 1, "mean new tokens");

    // The shipped model's KV bytes per token from its shape: 2 (K, V) x layers x kv_dim x 4 bytes.
    const glass::ModelConfig& c = test::shipped().config;
    const std::int64_t per_token = 2LL * c.n_layers * c.n_kv_heads * (c.dim / c.n_heads) * 4;
    CHECK(per_token == 1280);
    const int context = c.seq_len, pool = windows * context;
    CHECK(value_of(r.out, "memory budget") == "4 context windows = " + std::to_string(pool) + " positions = " +
                                                  std::to_string(pool * per_token) + " bytes");

    // (a) A request holds its prompt after its first step and one token more after each later
    // one, g steps in all (its last token is never computed): the mean over all steps.
    double held = 0, request_steps = 0;
    for (const auto& [p, g] : lengths) {
        held += static_cast<double>(g) * p + g * (g - 1) / 2.0;  // sum of p + k for k = 0..g-1
        request_steps += g;
    }
    const double mean_held = held / request_steps;
    CHECK(value_of(r.out, "max-length reserved per request") ==
          std::to_string(context) + " positions = " + std::to_string(context * per_token) + " bytes");
    CHECK(number(r.out, "max-length requests at once") == windows);
    check_printed(number(r.out, "mean tokens held by a running request"), mean_held, 1, "mean held");
    check_printed(number(r.out, "max-length reserved but unused"), 100 * (1 - mean_held / context), 2, "max-length unused %");

    // (b) The same lengths through an engine driven here (with zero logits instead of the model).
    std::map<int, double> unused, per_request;
    for (const int bs : {1, 16, 64}) {
        INFO("block size " << bs);
        const MemoryRun run = memory_run(lengths, bs, pool);
        double reserved = 0, held_positions = 0, running = 0;
        int peak = 0;
        for (const Step& s : run.steps) {
            reserved += static_cast<double>(s.reserved);
            held_positions += static_cast<double>(s.held);
            running += s.running;
            peak = std::max(peak, s.running);
        }
        unused[bs] = 1 - held_positions / reserved;
        per_request[bs] = reserved / running;
        const std::string b = "block " + std::to_string(bs);
        CHECK(value_of(r.out, b) == std::to_string(pool / bs) + " blocks, " + std::to_string(run.steps.size()) + " steps, " +
                                        std::to_string(run.preemptions) + " preemptions, " + std::to_string(run.computed) +
                                        " tokens computed");
        check_printed(number(r.out, b + " reserved but unused"), 100 * unused[bs], 2, b + " unused %");
        check_printed(number(r.out, b + " positions reserved per running request"), per_request[bs], 1, b + " per request");
        const std::string at_once = value_of(r.out, b + " requests at once");
        check_printed(std::stod(at_once), pool / per_request[bs], 1, b + " at once");
        CHECK(at_once.find("peak running " + std::to_string(peak)) != std::string::npos);
        // Every request is computed at least once: prompt + new tokens - 1 positions each.
        CHECK(run.computed >= static_cast<std::int64_t>(prompt_sum + gen_sum) - n_requests);
    }
    // Blocks of one position waste nothing; bigger blocks waste more (the trade-off), and block
    // 1's footprint is the tokens held, as in (a) up to the steps chunking and preemption add
    // (a chunked prompt holds less than its prompt for a step or two: 2 % covers it here).
    CHECK(unused[1] == 0.0);
    CHECK(unused[16] > 0.0);
    CHECK(unused[64] > unused[16]);
    CHECK(std::fabs(per_request[1] / mean_held - 1) < 0.02);

    // The targets, from the numbers worked out here.
    const double ratio = pool / per_request[16] / windows;
    CHECK(value_of(r.out, "target reserved-but-unused < 4 % with paging (block 16)").find(
              unused[16] < 0.04 ? ", holds" : ", does not hold") != std::string::npos);
    CHECK(value_of(r.out, "target >= 3x concurrent requests (stories260K, 512-token window)").find(
              ratio >= 3 ? ", holds" : ", does not hold") != std::string::npos);
    check_printed(number(r.out, "target >= 3x concurrent requests (stories260K, 512-token window)"), ratio, 2, "ratio");

    // Llama-2-7B (C8): 2 x 32 layers x 32 KV heads x 128 x 2 bytes; a 4,096-token window.
    const std::int64_t llama = 2LL * 32 * 32 * 128 * 2;
    CHECK(llama == 524288);
    CHECK(number(r.out, "llama max-length reserved per request") == 4096.0 * llama);
    check_printed(number(r.out, "llama max-length reserved but unused"), 100 * (1 - mean_held / 4096), 2, "llama unused %");
    check_printed(number(r.out, "llama block 16 requests at once"), windows * 4096 / per_request[16], 1, "llama at once");
    const double llama_ratio = 4096 / per_request[16];
    CHECK(value_of(r.out, "target >= 3x concurrent requests (Llama-2-7B, 4096-token window)").find(
              llama_ratio >= 3 ? ", holds" : ", does not hold") != std::string::npos);

    // (c) The same bytes as an int8 pool: 2 x layers x KV heads x (head_dim bytes + a 4-byte
    // scale) per position, whole blocks of 16 of them; the same requests through an engine of
    // that many positions (the bookkeeping needs no model: memory_run again).
    const std::int64_t int8_per_token = 2LL * c.n_layers * c.n_kv_heads * ((c.dim / c.n_heads) + 4);
    CHECK(int8_per_token == 480);
    const int int8_pool = static_cast<int>(pool * per_token / (int8_per_token * 16) * 16);
    CHECK(value_of(r.out, "int8 KV bytes per token").find(std::to_string(int8_per_token) + " (fp32 " +
                                                          std::to_string(per_token) + ", 2.67x)") == 0);
    CHECK(value_of(r.out, "int8 pool positions") ==
          std::to_string(int8_pool) + " (fp32 " + std::to_string(pool) + ")");
    {
        const MemoryRun run = memory_run(lengths, 16, int8_pool);
        double reserved = 0, running = 0;
        int peak = 0;
        for (const Step& s : run.steps) {
            reserved += static_cast<double>(s.reserved);
            running += s.running;
            peak = std::max(peak, s.running);
        }
        CHECK(value_of(r.out, "int8 block 16") == std::to_string(int8_pool / 16) + " blocks, " +
                                                      std::to_string(run.steps.size()) + " steps, " +
                                                      std::to_string(run.preemptions) + " preemptions, peak running " +
                                                      std::to_string(peak));
        const double at_once = int8_pool / (reserved / running);
        check_printed(number(r.out, "int8 block 16 requests at once"), at_once, 1, "int8 at once");
        CHECK(at_once > pool / per_request[16]);  // more positions, more requests at once
    }

    // The chart: per step (block 16), the three lines at the heights of the numbers worked out
    // here, read back through the axis the SVG states (coordinates are printed to 0.01 px).
    CHECK(value_of(r.out, "svg written") == svg_path);
    std::vector<test::xml::Element> all;
    REQUIRE_NOTHROW(all = test::xml::parse_xml(read_file(svg_path)));
    const test::xml::Element& root = all.front();
    REQUIRE(root.name == "svg");
    CHECK(root.attributes.at("data-figure") == "C17");
    const MemoryRun run16 = memory_run(lengths, 16, pool);
    CHECK(test::xml::attr_number(root, "data-steps") == static_cast<double>(run16.steps.size()));
    const double top = test::xml::attr_number(root, "data-plot-top"), bottom = test::xml::attr_number(root, "data-plot-bottom");
    const double max_bytes = test::xml::attr_number(root, "data-max-bytes");
    const auto bytes_at = [&](double y) { return (bottom - y) / (bottom - top) * max_bytes; };
    const double tolerance = 0.006 / (bottom - top) * max_bytes;  // 0.005 px of rounding, and a little
    std::map<std::string, std::vector<std::pair<double, double>>> series;
    for (const test::xml::Element& e : test::xml::of_kind(all, "polyline")) series[e.attributes.at("data-series")] = test::xml::points_of(e);
    REQUIRE(series.size() == 3);
    for (const auto& [name, points] : series) {
        INFO(name);
        REQUIRE(points.size() == run16.steps.size());
        for (size_t k = 0; k < points.size(); ++k) {
            const Step& s = run16.steps[k];
            const double expected = name == "max-length" ? static_cast<double>(s.running) * context * per_token
                                    : name == "paged-reserved" ? static_cast<double>(s.reserved * per_token)
                                                               : static_cast<double>(s.held * per_token);
            if (std::fabs(bytes_at(points[k].second) - expected) > tolerance) {
                CHECK_MESSAGE(false, name << " at step " << k + 1 << ": " << bytes_at(points[k].second) << " bytes, expected " << expected);
                break;
            }
            if (k > 0) CHECK(points[k].first > points[k - 1].first);  // one point per step, in order
        }
    }
    bool budget_line = false;
    for (const test::xml::Element& e : test::xml::of_kind(all, "line"))
        if (e.attributes.count("data-series") && e.attributes.at("data-series") == "budget") {
            budget_line = true;
            CHECK(std::fabs(bytes_at(test::xml::attr_number(e, "y1")) - static_cast<double>(pool * per_token)) <= tolerance);
        }
    CHECK(budget_line);
    std::filesystem::remove_all(dir);
}

TEST_CASE("example 18_paged_memory: arguments change the workload; bad ones are errors naming the value") {
    const test::Run r = run_example("18_paged_memory", "--requests 6 --prompt-len 100:100 --gen 50:50 --windows 1 /dev/null");
    // Six equal requests of 100 + 50: each holds 100..149 over its 50 steps, a mean of 124.5.
    CHECK(value_of(r.out, "prompt tokens") == "100..100, mean 100.0");
    CHECK(value_of(r.out, "max-length requests at once") == "1");
    check_printed(number(r.out, "mean tokens held by a running request"), 124.5, 1, "mean held");
    check_printed(number(r.out, "max-length reserved but unused"), 100 * (1 - 124.5 / 512), 2, "max-length unused %");
    CHECK(number(r.out, "block 1 reserved but unused") == 0.0);
    for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
             {"--prompt-len 8:510", "510"}, {"--gen 9:3", "'9:3'"}, {"--requests 0", "'0'"}, {"--windows 65", "'65'"},
             {"--seed", "'--seed'"}, {"--bogus 1", "'--bogus'"}, {"/nonexistent/dir/c17.svg", "/nonexistent/dir/c17.svg"}}) {
        const test::Run bad = test::run(test::bin_dir() + "/18_paged_memory --requests 2 --prompt-len 8:8 --gen 8:8 " + args);
        INFO(args << ": " << bad.err);
        CHECK(bad.exit_code == 1);
        CHECK(bad.err.find(named) != std::string::npos);
    }
}

// ---- 21_http_server --------------------------------------------------------------------------

// The example's two chat turns redone here without HTTP: the chat template of openai_api.hpp
// written out by hand, the shipped tokenizer, and each answer generated alone by the plain
// CpuSession (greedy, "\n" as the template's stop string, as the server does for a chat). What
// the prefix cache must supply to turn 2 follows from the tokens: turn 1 left K/V for its prompt
// and every generated token but the last (sampled, never fed back); turn 2 gets the full blocks
// of that history which its own prompt starts with, and never its last token (vLLM's rule: a
// prompt's last position is always computed, so there are logits to sample from).
namespace {

struct HttpChat {
    glass::GenerateResult a1, a2;
    std::vector<int> ids1, ids2;
    int cached2 = 0;
};

HttpChat http_chat_expected(int block, int max_tokens) {
    const std::string q1 = "Tell me a story about a little dog who finds a red ball in the park.";
    const std::string q2 = "What did the dog do with the ball?";
    const glass::Llama2cTokenizer& tok = test::shipped_tok();
    const auto answer = [&](const std::string& prompt) {
        glass::CpuSession session(test::shipped());
        glass::GenerateOptions o;
        o.sampling.temperature = 0.0f;
        o.max_new_tokens = max_tokens;
        o.stop_strings = {"\n"};
        return glass::generate(session, tok, prompt, o);
    };
    HttpChat c;
    const std::string prompt1 = "User: " + q1 + "\nAssistant:";
    c.a1 = answer(prompt1);
    const std::string prompt2 = prompt1 + c.a1.text + "\nUser: " + q2 + "\nAssistant:";
    c.a2 = answer(prompt2);
    c.ids1 = tok.encode(prompt1, true, false);
    c.ids2 = tok.encode(prompt2, true, false);
    std::vector<int> history = c.ids1;  // the positions that hold K/V after turn 1
    history.insert(history.end(), c.a1.generated_ids.begin(), c.a1.generated_ids.end() - 1);
    size_t common = 0;
    while (common < history.size() && common + 1 < c.ids2.size() && history[common] == c.ids2[common]) ++common;
    c.cached2 = static_cast<int>(common) / block * block;
    return c;
}

// The value of the line "NAME VALUE" (a Prometheus sample as the example prints it).
double prometheus_sample(const std::string& out, const std::string& name) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    FAIL("no line '" << name << " VALUE' in the output:\n" << out);
    return -1.0;
}

void check_http_example(const std::string& out, int block, int max_tokens) {
    const HttpChat c = http_chat_expected(block, max_tokens);
    CAPTURE(block);
    CAPTURE(max_tokens);
    REQUIRE(c.cached2 >= 2 * block);  // the example shows a real hit, not an empty one
    const auto usage = [](const glass::GenerateResult& a, size_t prompt, int cached) {
        return "prompt_tokens " + std::to_string(prompt) + ", completion_tokens " + std::to_string(a.generated_ids.size()) +
               ", cached_tokens " + std::to_string(cached);
    };
    const auto finish = [](const glass::GenerateResult& a) { return a.stop_reason == glass::StopReason::length ? "length" : "stop"; };
    CHECK(value_of(out, "turn 1 answer") == nlohmann::json(c.a1.text).dump());
    CHECK(value_of(out, "turn 1 finish_reason") == finish(c.a1));
    CHECK(value_of(out, "turn 1 usage") == usage(c.a1, c.ids1.size(), 0));
    CHECK(value_of(out, "turn 2 answer") == nlohmann::json(c.a2.text).dump());
    CHECK(value_of(out, "turn 2 finish_reason") == finish(c.a2));
    CHECK(value_of(out, "turn 2 usage") == usage(c.a2, c.ids2.size(), c.cached2));

    // The server's counters: the sums of the usages computed here; the pool is the engine's
    // default, four context windows of blocks, none held once both answers are done.
    CHECK(prometheus_sample(out, "glass_prompt_tokens_total") == static_cast<double>(c.ids1.size() + c.ids2.size()));
    CHECK(prometheus_sample(out, "glass_generation_tokens_total") == static_cast<double>(c.a1.generated_ids.size() + c.a2.generated_ids.size()));
    CHECK(prometheus_sample(out, "glass_prefix_cache_hit_tokens_total") == c.cached2);
    const int seq_len = test::shipped().config.seq_len;
    CHECK(prometheus_sample(out, "glass_kv_blocks_total") == 4 * ((seq_len + block - 1) / block));
    CHECK(prometheus_sample(out, "glass_kv_blocks_used") == 0);
    CHECK(prometheus_sample(out, "glass_kv_blocks_free") == prometheus_sample(out, "glass_kv_blocks_total"));
    CHECK(out.find("\nglass serve exited with status 0\n") != std::string::npos);  // SIGTERM: a clean exit
}

}  // namespace

TEST_CASE("example 21_http_server: usage and metrics agree with the tokens computed here") {
    check_http_example(run_example("21_http_server").out, 16, 48);
}

TEST_CASE("example 21_http_server: other block sizes and lengths; bad arguments are errors naming the value") {
    check_http_example(run_example("21_http_server", "--block-size 4 --max-tokens 12").out, 4, 12);
    for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
             {"--block-size 0", "'0'"}, {"--max-tokens 500", "'500'"}, {"--bogus 1", "'--bogus'"},
             {"--glass /nonexistent/glass", "/nonexistent/glass"}}) {
        const test::Run bad = test::run(test::bin_dir() + "/21_http_server " + args);
        INFO(args << ": " << bad.err);
        CHECK(bad.exit_code == 1);
        CHECK(bad.err.find(named) != std::string::npos);
    }
}

}  // namespace test_serve_examples
