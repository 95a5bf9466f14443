// The architecture written once (issue "Real models", step 1): every family delta of ModelConfig
// run by the one reference block body (transformer.hpp), through a contiguous KVCache and through
// the serving engine's paged pool; each delta checked against its definition; the backends that
// run Llama 2 only refuse the rest by name.
#include <cmath>
#include <memory>
#include <numeric>

#include "test_support.hpp"

namespace test_model_families {  // this file's own names (tests are built in unity batches)

namespace {

const std::vector<std::string> kFamilies = {"llama2", "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"};

// Deterministic token ids inside the vocabulary.
std::vector<int> ids_from(int seed, int n, int vocab) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (seed * 31 + i * 17 + (i * i) % 7) % vocab;
    return ids;
}

// A pool and the batch bookkeeping for calling paged_forward directly.
struct Pool {
    glass::serve::PagedKVPool pool;
    explicit Pool(const glass::ModelConfig& c) : pool(c, 16, 4) {}
};

// paged_forward on one batch entry per (tokens, start, table); logits rows as append_logit_rows says.
std::vector<float> paged(const glass::Model& m, Pool& p, const std::vector<std::vector<int>>& tokens,
                         const std::vector<int>& starts, const std::vector<std::vector<int>>& tables) {
    std::vector<glass::serve::BatchEntry> batch;
    for (size_t e = 0; e < tokens.size(); ++e)
        batch.push_back({.tokens = tokens[e], .start = starts[e], .block_table = tables[e]});
    return glass::serve::paged_forward(m, p.pool, batch);
}

std::vector<float> row(std::span<const float> logits, int r, int vocab) {
    return {logits.begin() + static_cast<std::ptrdiff_t>(r) * vocab, logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * vocab};
}

std::vector<float> last_logits_of(const glass::Model& m, std::span<const int> ids) {
    glass::CpuSession s(m);
    const std::span<const float> l = s.prefill(ids);
    return {l.begin(), l.end()};
}

}  // namespace

TEST_CASE("Llama 2 is the default: every family field at its default, and each family differs from it") {
    CHECK(glass::family_deltas(glass::fast::small_family_config("llama2")).empty());
    CHECK(glass::family_deltas(test::shipped().config).empty());
    for (const std::string& f : kFamilies) {
        if (f == "llama2") continue;
        CAPTURE(f);
        CHECK(!glass::family_deltas(glass::fast::small_family_config(f)).empty());
    }
    const glass::ModelConfig qwen3 = glass::fast::small_family_config("qwen3");
    CHECK(qwen3.q_dim() == 128);  // 4 heads of 32 on a residual stream of 64
    CHECK(qwen3.kv_dim() == 64);
}

TEST_CASE("which layers are local: Mistral all, Gemma 2 every other, Gemma 3 five of six") {
    const glass::ModelConfig mistral = glass::fast::small_family_config("mistral");
    const glass::ModelConfig gemma2 = glass::fast::small_family_config("gemma2");
    const glass::ModelConfig gemma3 = glass::fast::small_family_config("gemma3");
    for (int l = 0; l < 12; ++l) {
        CAPTURE(l);
        CHECK(mistral.window_of_layer(l) == 6);
        CHECK(gemma2.layer_is_local(l) == (l % 2 == 0));
        CHECK(gemma3.layer_is_local(l) == (l % 6 != 5));
        // Gemma 3: local layers turn with base 1e4 and no scaling; global ones with 1e6 and linear x8.
        CHECK(gemma3.rope_theta_of_layer(l) == (l % 6 == 5 ? 1000000.0f : 10000.0f));
        CHECK((gemma3.rope_scaling_of_layer(l).type == glass::RopeScalingType::linear) == (l % 6 == 5));
    }
    CHECK(glass::fast::small_family_config("llama2").window_of_layer(0) == 0);
}

TEST_CASE("one block body: the paged engine equals a request run alone, bit for bit, in every family") {
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        const glass::ModelConfig c = glass::fast::small_family_config(f);
        const glass::Model m = glass::fast::random_family_model(c, 7);
        const std::vector<int> a = ids_from(1, 11, c.vocab_size), b = ids_from(2, 7, c.vocab_size);

        Pool alone_a(c), alone_b(c), together(c), chunked(c);
        const std::vector<float> la = paged(m, alone_a, {a}, {0}, {{0, 1, 2}});
        const std::vector<float> lb = paged(m, alone_b, {b}, {0}, {{0, 1}});
        // Both in one batch, in other blocks of one pool.
        const std::vector<float> both = paged(m, together, {a, b}, {0, 0}, {{5, 2, 9}, {3, 4}});
        REQUIRE(both.size() == 2 * static_cast<size_t>(c.vocab_size));
        CHECK(row(both, 0, c.vocab_size) == la);
        CHECK(row(both, 1, c.vocab_size) == lb);
        // A's prompt in two chunks (6 then 5 tokens) beside B's.
        const std::vector<int> a1(a.begin(), a.begin() + 6), a2(a.begin() + 6, a.end());
        paged(m, chunked, {a1}, {0}, {{0, 1}});
        const std::vector<float> rest = paged(m, chunked, {b, a2}, {0, 6}, {{7, 8}, {0, 1, 2}});
        CHECK(row(rest, 1, c.vocab_size) == la);
        CHECK(row(rest, 0, c.vocab_size) == lb);
        for (const float v : la) REQUIRE(std::isfinite(v));
    }
}

TEST_CASE("one block body: whole-batch and row-by-row products agree (CpuSession vs PagedSession), every family") {
    // The two differ only in how Eigen sums each product (matrix-matrix vs matrix-vector):
    // fp32 rounding of a 2-6 layer model, far below 1e-5 relative.
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        const glass::ModelConfig c = glass::fast::small_family_config(f);
        const glass::Model m = glass::fast::random_family_model(c, 3);
        glass::CpuSession contiguous(m);
        glass::serve::CpuPagedBackend backend(m);
        glass::serve::PagedSession paged_session(backend, 4);
        const std::vector<int> prompt = ids_from(5, 13, c.vocab_size);
        std::span<const float> want = contiguous.prefill(prompt);
        std::span<const float> got = paged_session.prefill(prompt);
        for (int step = 0; step < 6; ++step) {
            CAPTURE(step);
            CHECK(test::relative_error(got, want) <= 1e-5);
            const int next = glass::sample_argmax(want);
            CHECK(glass::sample_argmax(got) == next);
            want = contiguous.decode(next);
            got = paged_session.decode(next);
        }
    }
}

TEST_CASE("sliding window: a token past the window's reach changes nothing; with no window it does") {
    // Mistral-style: window 6 on both of 2 layers. The last position (19) sees 14..19 in layer 1,
    // and those saw back to 9 in layer 0: tokens 0..8 cannot reach its logits.
    glass::ModelConfig c = glass::fast::small_family_config("mistral");
    const glass::Model windowed = glass::fast::random_family_model(c, 11);
    std::vector<int> p = ids_from(3, 20, c.vocab_size), q = p;
    q[8] = (q[8] + 1) % c.vocab_size;  // at the edge of the reach
    std::vector<int> r = p;
    r[9] = (r[9] + 1) % c.vocab_size;  // just inside it
    CHECK(last_logits_of(windowed, p) == last_logits_of(windowed, q));
    CHECK(last_logits_of(windowed, p) != last_logits_of(windowed, r));

    c.sliding_window = 0;  // the same weights, every layer global
    const glass::Model global = glass::fast::random_family_model(c, 11);
    CHECK(last_logits_of(global, p) != last_logits_of(global, q));
    // A window at least as long as the sequence masks nothing: bit for bit the global model.
    c.sliding_window = 20;
    const glass::Model wide = glass::fast::random_family_model(c, 11);
    CHECK(last_logits_of(wide, p) == last_logits_of(global, p));

    // Decoding past the window through the cache obeys the same reach.
    glass::CpuSession sp(windowed), sq(windowed);
    sp.prefill(std::span<const int>(p).first(19));
    sq.prefill(std::span<const int>(q).first(19));
    const std::span<const float> dp = sp.decode(p[19]);
    const std::vector<float> dp_copy(dp.begin(), dp.end());
    const std::span<const float> dq = sq.decode(q[19]);
    CHECK(dp_copy == std::vector<float>(dq.begin(), dq.end()));
}

TEST_CASE("Gemma's norm gain x·(1+w) with offset 1 equals the stored w+1 with offset 0 (GGUF's form), bit for bit") {
    glass::ModelConfig hf = glass::fast::small_family_config("gemma3");  // offset 1: gains stored as g - 1
    glass::ModelConfig gguf = hf;
    gguf.norm_weight_offset = 0.0f;  // gains stored as g
    const glass::Model a = glass::fast::random_family_model(hf, 5), b = glass::fast::random_family_model(gguf, 5);
    CHECK(a.layers[0].rms_att(0) != b.layers[0].rms_att(0));  // different bytes ...
    const std::vector<int> prompt = ids_from(9, 9, hf.vocab_size);
    CHECK(last_logits_of(a, prompt) == last_logits_of(b, prompt));  // ... the same model
    // And one norm site without its offset would show: drop it from the per-head norms only.
    const glass::ModelConfig broken_like = gguf;
    glass::Model c = glass::fast::random_family_model(broken_like, 5);
    glass::ConstVectorMap& q_norm = c.layers[1].q_norm;  // a Map cannot be re-seated by =: rebuild it
    std::destroy_at(&q_norm);
    std::construct_at(&q_norm, a.layers[1].q_norm.data(), a.layers[1].q_norm.size());  // g - 1 read as g
    CHECK(last_logits_of(c, prompt) != last_logits_of(b, prompt));
}

TEST_CASE("soft-caps: Gemma 2's logits are cap·tanh(z/cap) of the uncapped ones; attention scores likewise") {
    glass::ModelConfig capped = glass::fast::small_family_config("gemma2");
    glass::ModelConfig uncapped = capped;
    uncapped.final_logit_softcap = 0.0f;
    const glass::Model m1 = glass::fast::random_family_model(capped, 2), m0 = glass::fast::random_family_model(uncapped, 2);
    const std::vector<int> prompt = ids_from(4, 10, capped.vocab_size);
    const std::vector<float> z = last_logits_of(m0, prompt), y = last_logits_of(m1, prompt);
    for (size_t i = 0; i < z.size(); ++i)
        REQUIRE(std::abs(y[i] - 30.0 * std::tanh(z[i] / 30.0)) <= 1e-5 * std::max(1.0f, std::abs(y[i])));

    // Attention: the weights are softmax(cap·tanh(s·scale/cap)) over the visible keys.
    std::mt19937 rng(1);
    const glass::RowMatrix q = glass::fast::random_normal_matrix(3, 8, rng) * 6.0f;
    const glass::RowMatrix k = glass::fast::random_normal_matrix(5, 8, rng) * 6.0f;
    const glass::RowMatrix v = glass::fast::random_normal_matrix(5, 8, rng);
    glass::RowMatrix w;
    glass::attention_head(q, k, v, 2, 0.5f, &w, /*window=*/0, /*softcap=*/4.0f);
    for (int i = 0; i < 3; ++i) {
        std::vector<double> s;
        for (int j = 0; j <= 2 + i; ++j) s.push_back(4.0 * std::tanh(0.5 * q.row(i).dot(k.row(j)) / 4.0));
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int j = 0; j < 5; ++j) {
            const double want = j <= 2 + i ? s[static_cast<size_t>(j)] / sum : 0.0;
            CHECK(std::abs(w(i, j) - want) <= 1e-6);
        }
    }
}

TEST_CASE("per-head q/k norm (Qwen3, Gemma 3): every head of every row has RMS 1 before its gain") {
    std::mt19937 rng(4);
    glass::RowMatrix x = glass::fast::random_normal_matrix(3, 4 * 16, rng) * 5.0f;
    const std::vector<float> ones(16, 1.0f);
    glass::rmsnorm_heads(x, 4, 16, glass::ConstVectorMap(ones.data(), 16), 1e-6f);
    for (int r = 0; r < 3; ++r)
        for (int h = 0; h < 4; ++h) {
            const double ms = x.row(r).segment(h * 16, 16).squaredNorm() / 16.0;
            CHECK(std::abs(ms - 1.0) <= 1e-5);
        }
}

TEST_CASE("GELU-tanh (Gemma) follows its formula and stays within 1e-3 of the exact GELU") {
    for (double g = -6.0; g <= 6.0; g += 0.125) {
        CAPTURE(g);
        const double formula = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
        const double exact = 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0)));
        CHECK(std::abs(glass::gelu_tanh(static_cast<float>(g)) - formula) <= 2e-6 * std::max(1.0, std::abs(g)));
        CHECK(std::abs(formula - exact) <= 1e-3);
    }
    CHECK(glass::mlp_gate(1.5f, glass::MlpActivation::silu) == glass::silu(1.5f));
}

TEST_CASE("embedding scale (Gemma): rows times √dim; scale 1 is the plain lookup, bit for bit") {
    const glass::Model& m = test::shipped();
    const std::vector<int> ids = {1, 5, 9};
    const glass::RowMatrix plain = glass::embed_tokens(m.embedding_table(), ids);
    const glass::RowMatrix scaled = glass::embed_tokens(m.embedding_table(), ids, 8.0f);
    CHECK(plain == glass::embed_tokens(m.embedding_table(), ids, 1.0f));
    CHECK(scaled == plain * 8.0f);
}

TEST_CASE("Qwen2's q/k/v biases are added once per row, in both product orders") {
    const glass::ModelConfig c = glass::fast::small_family_config("qwen2");
    const glass::Model m = glass::fast::random_family_model(c, 8);
    const glass::LayerWeights& w = m.layers[0];
    std::mt19937 rng(2);
    const glass::RowMatrix x = glass::fast::random_normal_matrix(3, c.dim, rng);
    const glass::RowMatrix want = (x * w.wq.transpose()).rowwise() + w.bq.transpose();
    CHECK((glass::project(x, w.wq, w.bq, glass::RowOrder::whole_batch) - want).norm() <= 1e-5 * want.norm());
    CHECK((glass::project(x, w.wq, w.bq, glass::RowOrder::row_by_row) - want).norm() <= 1e-5 * want.norm());
}

TEST_CASE("backends that run Llama 2 only refuse the other families, naming what they lack") {
    const glass::Model qwen3 = glass::fast::random_family_model(glass::fast::small_family_config("qwen3"), 1);
    const auto refuses = [&](auto&& make, const char* who) {
        CAPTURE(who);
        try {
            make();
            FAIL("accepted a Qwen3 model");
        } catch (const glass::Error& e) {
            const std::string what = e.what();
            CHECK(what.find("qk_norm") != std::string::npos);
            CHECK(what.find("head_dim != dim / n_heads") != std::string::npos);
            CHECK(what.find("run it on the CPU") != std::string::npos);
        }
    };
    refuses([&] { glass::fast::write_random_checkpoint(qwen3.config, "/nonexistent/x.bin", 1); }, "llama2.c writer");
}

// ---- example 26_model_families: what it prints, recomputed here through CpuSession's trace ------

namespace {

std::vector<int> example_prompt() {
    std::vector<int> ids;
    for (int i = 0; i < 16; ++i) ids.push_back((17 * i + 5) % 96);
    return ids;
}

// The whitespace-separated fields of the line starting (after its indent) with `first`, in `section`.
std::vector<std::string> fields_of(const std::string& section, const std::string& first) {
    std::istringstream lines(section);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string s; words >> s;) w.push_back(s);
        if (!w.empty() && w[0] == first) return w;
    }
    FAIL("no line starting with " << first);
    return {};
}

}  // namespace

TEST_CASE("example 26_model_families: shapes, layer 0 and each delta's weight recomputed") {
    const std::string out = test::run_example("26_model_families").out;
    const size_t s2 = out.find("\n2. "), s3 = out.find("\n3. ");
    REQUIRE(s2 != std::string::npos);
    REQUIRE(s3 != std::string::npos);
    const std::string table = out.substr(0, s2), layer0 = out.substr(s2, s3 - s2), deltas = out.substr(s3);
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        const glass::ModelConfig c = glass::fast::small_family_config(f);
        // 1. head_dim, q_dim and the deltas.
        const std::vector<std::string> row = fields_of(table, f);
        REQUIRE(row.size() >= 4);
        CHECK(std::stoi(row[1]) == c.head_dim);
        CHECK(std::stoi(row[2]) == c.q_dim());
        for (const std::string& d : glass::family_deltas(c)) CHECK(table.find(d) != std::string::npos);
        // 2. Layer 0 through transformer_forward's trace: the RMS of the last row after each half
        //    and the weights position 15 gives to 0 and to itself, averaged over heads.
        const glass::Model m = glass::fast::random_family_model(c, 26);
        glass::KVCache cache(c);
        glass::ForwardTrace trace;
        const std::vector<int> ids = example_prompt();
        glass::transformer_forward(m, cache, ids, &trace);
        const glass::LayerTrace& t = trace.layers[0];
        const glass::RowMatrix x = glass::embed_tokens(m.embedding_table(), ids, c.embedding_scale);
        const double sqrt_dim = std::sqrt(static_cast<double>(c.dim));
        double w0 = 0, w15 = 0;
        for (const glass::RowMatrix& w : t.attention) w0 += w(15, 0) / c.n_heads, w15 += w(15, 15) / c.n_heads;
        const std::vector<std::string> l = fields_of(layer0, f);
        REQUIRE(l.size() == 6);
        CHECK(std::abs(std::stod(l[1]) - x.row(15).norm() / sqrt_dim) <= 6e-5);  // printed with 4 decimals
        CHECK(std::abs(std::stod(l[2]) - t.residual_norm_after_attention(15) / sqrt_dim) <= 6e-5);
        CHECK(std::abs(std::stod(l[3]) - t.residual_norm_after_mlp(15) / sqrt_dim) <= 6e-5);
        CHECK(std::abs(std::stod(l[4]) - w0) <= 6e-5);
        CHECK(std::abs(std::stod(l[5]) - w15) <= 6e-5);
        if (c.sliding_window > 0 && c.layer_is_local(0)) CHECK(w0 == 0.0);  // outside the window: exactly 0
    }
    // 3. Two of the deltas' weights, recomputed with a CpuSession: Qwen2 without its biases, Gemma 3
    //    with every layer global.
    const auto change = [](const glass::Model& changed, const glass::Model& original) {
        glass::CpuSession a(changed), b(original);
        const std::span<const float> la = a.prefill(example_prompt());
        const std::vector<float> va(la.begin(), la.end());
        return test::relative_error(va, b.prefill(example_prompt()));
    };
    {
        const glass::ModelConfig c = glass::fast::small_family_config("qwen2");
        const glass::Model original = glass::fast::random_family_model(c, 26);
        glass::ModelConfig k = c;
        k.qkv_bias = false;
        glass::Model no_bias = glass::fast::random_family_model(c, 26);
        no_bias.config = k;
        for (glass::LayerWeights& w : no_bias.layers)
            for (glass::ConstVectorMap* b : {&w.bq, &w.bk, &w.bv}) std::destroy_at(b), std::construct_at(b, nullptr, 0);
        const std::vector<std::string> row = fields_of(deltas.substr(deltas.find("qwen2:")), "qkv_bias");
        CHECK(std::abs(std::stod(row[1]) - change(no_bias, original)) <= 6e-5);
    }
    {
        const glass::ModelConfig c = glass::fast::small_family_config("gemma3");
        const glass::Model original = glass::fast::random_family_model(c, 26);
        glass::Model global = glass::fast::random_family_model(c, 26);
        global.config.sliding_window = 0;
        const std::vector<std::string> row = fields_of(deltas.substr(deltas.find("gemma3:")), "sliding_window");
        CHECK(std::abs(std::stod(row[3]) - change(global, original)) <= 6e-5);
    }
}

}  // namespace test_model_families
