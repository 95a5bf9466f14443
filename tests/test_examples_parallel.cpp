// The example that splits the model over ranks (29_tensor_parallel): run it and check what it
// prints against values derived here on their own: the ranges from the Megatron rule (equal
// slices of heads, units and vocabulary rows), bytes from the config's shapes, the all-reduce
// count and sizes from the number of layers, the text from a one-process greedy run and the
// llama2.c golden. Never by comparing the program with itself.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "example_output.hpp"
#include "glass/fast/fast_paged_backend.hpp"
#include "glass/serve/paged_transformer.hpp"
#include "test_support.hpp"

namespace test_examples_parallel {  // this file's own names (tests are built in unity batches)

using test::example_output::greedy_golden;
using test::example_output::lines_starting;
using test::example_output::numbers;
using test::example_output::run_example;
using test::value_of;

namespace {

// One row of section 1: the first and last query head, KV head, MLP unit and vocabulary row, and
// the bytes of layer 0 and of weights read per token.
struct SplitRow {
    int head[2], kv[2], hidden[2], vocab[2];
    long long layer_bytes, weight_bytes;
};

SplitRow parse_split_row(const std::string& line, const char* format_head) {
    SplitRow r{};
    const std::string format = std::string(format_head) + " %d-%d %d-%d %d-%d %d-%d %lld %lld";
    const int n = std::sscanf(line.c_str(), format.c_str(), &r.head[0], &r.head[1], &r.kv[0], &r.kv[1], &r.hidden[0],
                              &r.hidden[1], &r.vocab[0], &r.vocab[1], &r.layer_bytes, &r.weight_bytes);
    REQUIRE_MESSAGE(n == 10, "cannot read the split row '" << line << "'");
    return r;
}

// Bytes of one layer holding `heads` query heads, `kv_heads` KV heads and `hidden` MLP units:
// Wq and Wo [heads·head_dim × dim], Wk and Wv [kv_heads·head_dim × dim], W1, W2, W3
// [hidden × dim], and the two norm gains [dim] (stories260K has no biases or extra norms).
long long layer_bytes(const glass::ModelConfig& c, int heads, int kv_heads, int hidden) {
    const long long hd = c.head_dim, dim = c.dim;
    return 4 * (2 * heads * hd * dim + 2 * kv_heads * hd * dim + 3LL * hidden * dim + 2 * dim);
}

// Weights read per token: every layer, the final norm and the classifier rows (the embedding
// lookup reads one row).
long long weight_bytes(const glass::ModelConfig& c, int heads, int kv_heads, int hidden, int vocab) {
    return c.n_layers * layer_bytes(c, heads, kv_heads, hidden) + 4LL * c.dim + 4LL * vocab * c.dim;
}

// Section 1 for `tp` ranks: every rank's row against the even split, then the one-process row.
void check_split(const std::string& out, int tp) {
    const glass::ModelConfig& c = test::shipped().config;
    const int heads = c.n_heads / tp, kv = c.n_kv_heads / tp, hidden = c.hidden_dim / tp;
    const int vocab = (c.vocab_size + tp - 1) / tp;
    REQUIRE(kv >= 1);  // tp ≤ n_kv_heads here: KV heads split like query heads
    for (int r = 0; r < tp; ++r) {
        const std::string label = "  rank " + std::to_string(r) + "/" + std::to_string(tp) + " ";
        const std::vector<std::string> rows = lines_starting(out, label);
        REQUIRE(rows.size() == 1);
        const SplitRow row = parse_split_row(rows[0], ("  rank " + std::to_string(r) + "/" + std::to_string(tp)).c_str());
        INFO("tp " << tp << " rank " << r);
        CHECK(row.head[0] == r * heads);
        CHECK(row.head[1] == (r + 1) * heads - 1);
        CHECK(row.kv[0] == r * kv);
        CHECK(row.kv[1] == (r + 1) * kv - 1);
        CHECK(row.hidden[0] == r * hidden);
        CHECK(row.hidden[1] == (r + 1) * hidden - 1);
        CHECK(row.vocab[0] == r * vocab);
        CHECK(row.vocab[1] == std::min(c.vocab_size, (r + 1) * vocab) - 1);
        CHECK(row.layer_bytes == layer_bytes(c, heads, kv, hidden));
        CHECK(row.weight_bytes == weight_bytes(c, heads, kv, hidden, std::min(c.vocab_size, (r + 1) * vocab) - r * vocab));
        // The library agrees with the rule (a second opinion on the same ranges).
        const glass::dist::TensorSplit s = glass::dist::tensor_split(c, r, tp);
        CHECK(s.head_begin == row.head[0]);
        CHECK(s.hidden_begin == row.hidden[0]);
        CHECK(s.vocab_begin == row.vocab[0]);
    }
    for (const std::string& line : lines_starting(out, "  one process ")) {
        const SplitRow whole = parse_split_row(line, "  one process");
        CHECK(whole.head[1] == c.n_heads - 1);
        CHECK(whole.kv[1] == c.n_kv_heads - 1);
        CHECK(whole.hidden[1] == c.hidden_dim - 1);
        CHECK(whole.vocab[1] == c.vocab_size - 1);
        CHECK(whole.layer_bytes == layer_bytes(c, c.n_heads, c.n_kv_heads, c.hidden_dim));
        CHECK(whole.weight_bytes == test::shipped().weight_bytes);
        CHECK(whole.weight_bytes == weight_bytes(c, c.n_heads, c.n_kv_heads, c.hidden_dim, c.vocab_size));
    }
}

// Section 3: the text against one process and the golden; rank 0's counters against the
// formulas: 1 + 2·n_layers all-reduces of n × dim floats per pass, counted × 4 B × tp; one gather
// of rank 0's ⌈vocab / tp⌉ logits per position; a broadcast of the step and of its n ids.
void check_generation(const std::string& out, int tp) {
    const glass::ModelConfig& c = test::shipped().config;
    const nlohmann::json golden = greedy_golden("Once upon a time", 32);
    const std::vector<int> prompt_ids = test::ids_of(golden["prompt_ids"]);
    const std::vector<int> golden_ids = test::ids_of(golden["generated_ids"]);
    const int n_prompt = static_cast<int>(prompt_ids.size());

    glass::CpuSession session(test::shipped());
    glass::GenerateOptions options;
    options.sampling.temperature = 0;
    options.max_new_tokens = 16;
    const glass::GenerateResult one = glass::generate(session, test::shipped_tok(), "Once upon a time", options);
    REQUIRE(one.generated_ids == std::vector<int>(golden_ids.begin(), golden_ids.begin() + 16));
    CHECK(value_of(out, "  one process") == "Once upon a time" + one.text);
    const std::string tp_label = "  tp " + std::to_string(tp) + ":";
    const std::vector<std::string> tp_text = lines_starting(out, tp_label);
    REQUIRE(tp_text.size() == 1);
    CHECK(tp_text[0] == tp_label + "        Once upon a time" + one.text);
    CHECK(value_of(out, "  same tokens") == "yes");
    const std::vector<double> gap =
        numbers(value_of(out, "  largest relative logit gap, tp " + std::to_string(tp) + " vs one process, over 16 steps"));
    REQUIRE(gap.size() == 1);
    CHECK(gap[0] <= 1e-5);  // fp32: Wo's and W2's sums in tp pieces instead of one (tensor_parallel.hpp)

    const long long passes = 1 + 2LL * c.n_layers;
    const long long all_reduce_per_position = passes * c.dim * 4LL * tp;
    const long long gather = 4LL * ((c.vocab_size + tp - 1) / tp);
    // The last six numbers of a row: all-reduce, gather and broadcast calls and bytes.
    const auto counters = [](const std::string& line) {
        const std::vector<double> v = numbers(line);
        REQUIRE(v.size() >= 6);
        std::vector<long long> last;
        for (auto x = v.end() - 6; x != v.end(); ++x) last.push_back(static_cast<long long>(*x));
        return last;
    };
    const std::vector<std::string> prefill = lines_starting(out, "  prefill " + std::to_string(n_prompt) + " ");
    REQUIRE(prefill.size() == 1);
    const std::vector<long long> p = counters(prefill[0]);
    CHECK(p[0] == passes);
    CHECK(p[1] == all_reduce_per_position * n_prompt);
    CHECK(p[2] == 1);
    CHECK(p[3] == gather);  // the last position's logits only
    CHECK(p[4] == 2);
    CHECK(prefill[0].find("\"" + test::shipped_tok().decode(prompt_ids.back(), golden_ids[0]) + "\"") != std::string::npos);
    const std::vector<std::string> decodes = lines_starting(out, "  decode ");
    REQUIRE(decodes.size() == 15);  // 16 tokens: the prefill gives the first, each decode one more
    for (size_t i = 0; i < decodes.size(); ++i) {
        INFO(decodes[i]);
        const std::vector<long long> d = counters(decodes[i]);
        CHECK(d[0] == passes);
        CHECK(d[1] == all_reduce_per_position);
        CHECK(d[2] == 1);
        CHECK(d[3] == gather);
        CHECK(d[4] == 2);
        CHECK(p[5] - d[5] == 4LL * (n_prompt - 1));  // the same header, n_prompt ids instead of 1
        // The token this step gives: the golden's next id, as the tokenizer spells it.
        const std::string piece = test::shipped_tok().decode(golden_ids[i], golden_ids[i + 1]);
        CHECK(decodes[i].find("\"" + piece + "\"") != std::string::npos);
    }
    const std::vector<double> per_call = numbers(value_of(out, "  all-reduce bytes per call and position"));
    CHECK(per_call == std::vector<double>{double(c.dim), 4.0, double(tp), double(c.dim * 4 * tp)});
    const std::vector<double> per_gather = numbers(value_of(out, "  gather bytes per position"));
    CHECK(per_gather.back() == double(gather));
}

// Section 4's step on one process: the logits of the 8 requests from `backend` (ids and block
// tables drawn as the example draws them).
std::vector<float> one_process_step(glass::serve::PagedBackend& backend) {
    const int vocab = backend.config().vocab_size;
    const int lengths[8] = {24, 1, 16, 1, 20, 1, 12, 1};
    std::vector<std::vector<int>> tokens(8), tables(8);
    std::vector<glass::serve::BatchEntry> batch;
    for (int r = 0; r < 8; ++r) {
        for (int t = 0; t < lengths[r]; ++t) tokens[static_cast<size_t>(r)].push_back(1 + (r * 31 + t * 7) % (vocab - 1));
        tables[static_cast<size_t>(r)] = {2 * r, 2 * r + 1};
        batch.push_back({.tokens = tokens[static_cast<size_t>(r)], .start = 0, .block_table = tables[static_cast<size_t>(r)]});
    }
    backend.allocate_pool(16, 16);
    const std::span<const float> logits = backend.forward(batch);
    return {logits.begin(), logits.end()};
}

// Section 4's fast parts. A pipeline stage's part runs FastModel on whole layers, so pp 2's logits
// are one FastPagedBackend's bit for bit (test_parallel_engine): its printed gap to the reference
// split (= one reference process's bits) is recomputed here from two one-process backends. At
// tp 2 the partial sums add in another order: within the 1e-5 of test_parallel_engine's bound.
void check_fast_parts(const std::string& out) {
    glass::serve::CpuPagedBackend reference(test::shipped());
    glass::fast::FastPagedBackend fast(test::shipped(), {.threads = 1});
    const std::vector<float> want = one_process_step(reference), got = one_process_step(fast);
    double gap = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        gap = std::max(gap, std::fabs(double(got[i]) - want[i]));
        scale = std::max(scale, std::fabs(double(want[i])));
    }
    const double pp = test::number(out, "    fast tp 1 x pp 2");
    CHECK(gap / scale > 0.0);  // another summation order: the figure is measured, not zero by construction
    CHECK(std::abs(pp - gap / scale) <= 0.006 * gap / scale);  // printed with 3 significant digits
    const double tp = test::number(out, "    fast tp 2 x pp 1");
    CHECK(tp <= 1e-5);
}

// Section 4: one engine step of requests with 24 1 16 1 20 1 12 1 new tokens through pp 2 stages
// of 3 and 2 layers. The micro-batches must cut that list in order into m pieces; each stage's
// idle share is recomputed from the pieces by the closed form of a two-stage pipeline: stage 1
// starts piece j when stage 0 has finished it and stage 1 the piece before.
void check_micro_batches(const std::string& out) {
    const std::vector<long long> lengths{24, 1, 16, 1, 20, 1, 12, 1};
    const long long a = 3, b = 2;  // the layers of stages 0 and 1 (5 layers dealt out in order)
    CHECK(numbers(value_of(out, "  requests' new tokens this step")).back() == 2);
    const std::vector<double> sizes = numbers(value_of(out, "  the batch as broadcast"));
    CHECK(sizes == std::vector<double>{1 + 5 * 8 + 76 + 16, 4 * (1 + 5 * 8 + 76 + 16)});  // header, fields, tokens, 2 blocks each
    for (const int m : {1, 2, 4}) {
        INFO("m = " << m);
        const std::vector<std::string> rows = lines_starting(out, "  m = " + std::to_string(m) + " ");
        REQUIRE(rows.size() == 1);
        std::vector<double> v = numbers(rows[0]);
        REQUIRE(v.size() == static_cast<size_t>(m) + 3);  // m, the pieces' tokens, two shares
        const std::vector<long long> pieces(v.begin() + 1, v.begin() + 1 + m);
        size_t next = 0;  // each piece: the tokens of the next requests, in order
        for (const long long piece : pieces) {
            long long sum = 0;
            while (next < lengths.size() && sum < piece) sum += lengths[next++];
            CHECK(sum == piece);
        }
        CHECK(next == lengths.size());
        long long done0 = 0, done1 = 0, total = 0;
        for (const long long piece : pieces) {
            done0 += a * piece;
            done1 = std::max(done0, done1) + b * piece;
            total += piece;
        }
        // printed with one decimal: within 0.05 of the percentage
        CHECK(std::abs(v[static_cast<size_t>(m) + 1] - 100.0 * (1.0 - double(a * total) / double(done1))) <= 0.05);
        CHECK(std::abs(v[static_cast<size_t>(m) + 2] - 100.0 * (1.0 - double(b * total) / double(done1))) <= 0.05);
        if (m == 1) CHECK(std::abs(v[2] - 100.0 * double(b) / double(a + b)) <= 0.05);  // stage 0 waits for all of stage 1
    }
    CHECK(value_of(out, "  logits of the 8 requests, m = 2 and 4 vs m = 1") == "identical bits");
    check_fast_parts(out);
}

// Section 5: bytes per prompt position from each shape's published head counts (K and V of every
// layer: fp32 4 bytes a number; int8 1 byte a number and a 4-byte scale per KV head); the shipment
// on threads: its positions are the prompt's, its bytes the blocks + a 6-int header + a logits
// row, and the text decoded after it is glass generate's greedy text (fp32) and one process's.
void check_shipment(const std::string& out) {
    struct Shape {
        const char* label;
        long long layers, kv_heads, head_dim;
    };
    const glass::ModelConfig& c = test::shipped().config;
    const Shape shapes[] = {{"  stories260K (this model) ", c.n_layers, c.n_kv_heads, c.head_dim},
                            {"  TinyLlama 1.1B ", 22, 4, 64},
                            {"  Llama 3 8B ", 32, 8, 128}};
    for (const Shape& sh : shapes) {
        INFO(sh.label);
        const std::vector<std::string> rows = lines_starting(out, sh.label);
        REQUIRE(rows.size() == 1);
        const std::vector<double> v = numbers(rows[0]);
        REQUIRE(v.size() >= 7);
        const double fp32 = 2.0 * sh.layers * sh.kv_heads * sh.head_dim * 4, int8 = 2.0 * sh.layers * sh.kv_heads * (sh.head_dim + 4);
        const size_t k = v.size() - 7;  // layers, KV heads, head_dim, fp32, int8, two MB figures
        CHECK(v[k] == sh.layers);
        CHECK(v[k + 1] == sh.kv_heads);
        CHECK(v[k + 2] == sh.head_dim);
        CHECK(v[k + 3] == fp32);
        CHECK(v[k + 4] == int8);
        CHECK(std::abs(v[k + 5] - 1000 * fp32 / 1e6) <= 0.05);
        CHECK(std::abs(v[k + 6] - 1000 * int8 / 1e6) <= 0.05);
    }
    const long long n = static_cast<long long>(test::shipped_tok().encode("Once upon a time", true, false).size());
    glass::GenerateOptions options;
    options.sampling.temperature = 0;
    options.max_new_tokens = 16;
    glass::CpuSession session(test::shipped());
    const std::string fp32_text = glass::generate(session, test::shipped_tok(), "Once upon a time", options).text;
    for (const char* kv : {"fp32", "int8"}) {
        INFO(kv);
        const std::vector<std::string> rows = lines_starting(out, std::string("  ") + kv + " KV:");
        REQUIRE(rows.size() == 1);
        long long positions = 0, sent = 0, blocks = 0, header = 0, logits = 0;
        const std::string format = std::string("  ") + kv + " KV: %lld positions; sent %lld bytes = %lld of blocks + %lld of header + %lld of logits";
        REQUIRE(std::sscanf(rows[0].c_str(), format.c_str(), &positions, &sent, &blocks, &header, &logits) == 5);
        CHECK(positions == n);
        const long long per_position = std::string(kv) == "fp32" ? 2LL * c.n_layers * c.kv_dim() * 4
                                                                 : 2LL * c.n_layers * c.n_kv_heads * (c.head_dim + 4);
        CHECK(blocks == per_position * n);
        CHECK(header == 6 * 4);
        CHECK(logits == 4LL * c.vocab_size);
        CHECK(sent == blocks + header + logits);
    }
    const std::vector<std::string> decoded = lines_starting(out, "    decoded on rank 0: ");
    REQUIRE(decoded.size() == 2);
    CHECK(decoded[0] == "    decoded on rank 0: Once upon a time" + fp32_text);
    CHECK(lines_starting(out, "    same tokens as one process: yes").size() == 2);
}

// Section 6: each request's prompt positions are its prompt's; the bytes are kv_bytes_per_token ×
// the positions shipped; the text is the combined engine's, and request 3's is generate()'s alone.
void check_remote_prefill(const std::string& out) {
    const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben went to the park",
                                              "The little dog was very happy because", "Once upon a time, there was a big tree"};
    const glass::ModelConfig& c = test::shipped().config;
    const long long per_position = 2LL * c.n_layers * c.kv_dim() * 4;
    for (size_t i = 0; i < prompts.size(); ++i) {
        INFO(prompts[i]);
        const std::vector<std::string> rows = lines_starting(out, "  request " + std::to_string(i) + ":");
        REQUIRE(rows.size() == 1);
        long long positions = 0, shipped = 0, bytes = 0;
        char same[8] = {};
        const std::string format = "  request " + std::to_string(i) +
                                   ": %lld prompt positions, %lld shipped = %lld bytes of rows; same text as combined: %7s";
        REQUIRE(std::sscanf(rows[0].c_str(), format.c_str(), &positions, &shipped, &bytes, same) == 4);
        CHECK(positions == static_cast<long long>(test::shipped_tok().encode(prompts[i], true, false).size()));
        CHECK(shipped >= 1);
        CHECK(shipped <= positions);
        CHECK(bytes == shipped * per_position);
        CHECK(std::string(same) == "yes");
    }
    glass::GenerateOptions o;
    o.max_new_tokens = 24;
    o.sampling.temperature = 0.8f;
    o.seed = 103;
    glass::CpuSession session(test::shipped());
    std::string alone = glass::generate(session, test::shipped_tok(), prompts[3], o).text;
    for (size_t at = alone.find('\n'); at != std::string::npos; at = alone.find('\n', at + 2)) alone.replace(at, 1, "\\n");
    CHECK(value_of(out, "    request 3 (from the worker)") == prompts[3] + alone);
}

}  // namespace

TEST_CASE("example 29_tensor_parallel: each rank's heads, units, vocabulary rows and bytes; the same text as one process; two all-reduces per layer") {
    const test::Run r = run_example("29_tensor_parallel");
    check_split(r.out, 2);
    check_split(r.out, 4);
    CHECK(lines_starting(r.out, "  one process ").size() == 2);  // the last row of tp 2's table and of tp 4's

    // More ranks than KV heads (Llama 3 8B: 32 query heads on 8): a rank keeps the KV head its
    // query heads read, head_begin / 4 with 32 / tp query heads each.
    for (int tp : {8, 16}) {
        char label[96];
        std::snprintf(label, sizeof label, "  Llama 3 8B's 32 query heads on 8 KV heads at tp %2d, KV head of each rank", tp);
        const std::vector<double> kv = numbers(value_of(r.out, label));
        REQUIRE(kv.size() == static_cast<size_t>(tp));
        for (int rank = 0; rank < tp; ++rank) CHECK(kv[static_cast<size_t>(rank)] == rank * (32 / tp) / 4);
    }

    const glass::ModelConfig& c = test::shipped().config;
    CHECK(numbers(value_of(r.out, "  all-reduces per forward pass")).back() == 1 + 2 * c.n_layers);
    check_generation(r.out, 2);
    check_micro_batches(r.out);
    check_shipment(r.out);
    check_remote_prefill(r.out);
}

TEST_CASE("example 29_tensor_parallel --tp 4: the same text; splits that do not divide are refused by name") {
    const test::Run r = run_example("29_tensor_parallel", "--tp 4");
    check_split(r.out, 4);
    CHECK(lines_starting(r.out, "  rank 0/2 ").empty());
    check_generation(r.out, 4);

    const test::Run eight = test::run(test::bin_dir() + "/29_tensor_parallel --tp 8");
    CHECK(eight.exit_code == 1);
    CHECK(eight.err.find("hidden_dim 172") != std::string::npos);
    CHECK(eight.out.empty());  // refused before any output
    const test::Run three = test::run(test::bin_dir() + "/29_tensor_parallel --tp 3");
    CHECK(three.exit_code == 1);
    CHECK(three.err.find("8 heads") != std::string::npos);
}

}  // namespace test_examples_parallel
