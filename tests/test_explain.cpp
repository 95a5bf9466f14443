// glass explain, run as a program: its numbers against values computed here another way.
//   - tokens: llama2.c's greedy golden ids;
//   - attention weights and residual norms: the whole sequence recomputed in one causal pass
//     from the stage functions (embed, rmsnorm, RoPE, glass::attention_head, MLP), not through
//     the trace, the KV cache or the decode path explain used;
//   - top-5 probabilities and KV bytes: a CpuSession fed the same ids, softmax taken here in
//     double, bytes from the C8/C9 formula written out here;
//   - the page: its embedded data equals --json, and it loads nothing from the network.
// Also: JSON shape, and bad input (missing -p, bad -n, unknown flag, unwritable --html).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace test_explain {  // this file's own names (tests are built in unity batches)

namespace {

std::string glass_cmd() { return test::bin_dir() + "/glass"; }

// Absolute tolerance on attention weights in [0, 1]: the recomputation runs all positions in one
// matrix product where explain ran a prefill and then one row per decode step; fp32 sums in a
// different order differ by a few ulps of the scores, ~1e-6 after softmax.
constexpr double kWeightTolerance = 1e-5;
// Relative tolerance on residual norms (~3..15): same reason, accumulated over 5 layers.
constexpr double kNormTolerance = 1e-4;
// Probabilities: explain's fp32 softmax against the double softmax here, of logits that agree to
// ~1e-5 (CpuSession vs explain's own forward pass are the same code, so in practice exactly).
constexpr double kProbabilityTolerance = 1e-5;

struct Explained {
    std::string text;     // everything before the JSON line
    nlohmann::json json;  // the last line
};

Explained explain(const std::string& args) {
    const test::Run r = test::run(glass_cmd() + " explain " + args);
    CAPTURE(args);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(!r.out.empty());
    REQUIRE(r.out.back() == '\n');
    const size_t start = r.out.rfind('\n', r.out.size() - 2);
    REQUIRE(start != std::string::npos);
    Explained e;
    e.text = r.out.substr(0, start + 1);
    REQUIRE_NOTHROW(e.json = nlohmann::json::parse(r.out.substr(start + 1)));
    REQUIRE(e.json.is_object());
    return e;
}

nlohmann::json golden_greedy(const std::string& name) {
    for (const nlohmann::json& row : test::read_jsonl(test::golden("stories260K_greedy.jsonl")))
        if (row["case"] == name) return row;
    FAIL("no golden case " << name);
    return {};
}

// Every position's attention weights and every position's residual norms, recomputed in one
// causal pass over the whole sequence with the stage functions.
struct Recomputed {
    std::vector<std::vector<glass::RowMatrix>> weights;  // [layer][head] -> [n, n]
    std::vector<glass::Vector> norm_after_attention;     // [layer] -> [n]
    std::vector<glass::Vector> norm_after_mlp;           // [layer] -> [n]
};

Recomputed recompute(const glass::Model& m, const std::vector<int>& ids) {
    const glass::ModelConfig& c = m.config;
    const int hd = c.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    Recomputed r;
    glass::RowMatrix x = glass::embed_tokens(m.embedding_table(), ids);
    for (int l = 0; l < c.n_layers; ++l) {
        const glass::LayerWeights& w = m.layers[l];
        const glass::RowMatrix xn = glass::rmsnorm(x, w.rms_att, c.norm_eps);
        glass::RowMatrix q = xn * w.wq.transpose(), k = xn * w.wk.transpose();
        const glass::RowMatrix v = xn * w.wv.transpose();
        glass::apply_rope(q, c.n_heads, hd, 0, c.rope_theta, c.rope_layout);
        glass::apply_rope(k, c.n_kv_heads, hd, 0, c.rope_theta, c.rope_layout);
        glass::RowMatrix att(x.rows(), c.dim);
        auto& heads = r.weights.emplace_back(c.n_heads);
        for (int h = 0; h < c.n_heads; ++h) {
            const int g = h / c.heads_per_kv_head();
            att.middleCols(h * hd, hd) = glass::attention_head(q.middleCols(h * hd, hd), k.middleCols(g * hd, hd),
                                                               v.middleCols(g * hd, hd), 0, scale, &heads[h]);
        }
        x += att * w.wo.transpose();
        r.norm_after_attention.push_back(x.rowwise().norm());
        x += glass::swiglu_mlp(glass::rmsnorm(x, w.rms_ffn, c.norm_eps), w.w1, w.w2, w.w3);
        r.norm_after_mlp.push_back(x.rowwise().norm());
    }
    return r;
}

std::vector<double> softmax_double(std::span<const float> logits) {
    double max_logit = logits[0];
    for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] - max_logit);
    for (double& x : p) x /= sum;
    return p;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

TEST_CASE("explain: greedy tokens are llama2.c's, and every number matches an independent recomputation") {
    const nlohmann::json g = golden_greedy("once_upon_n32");
    const int decode_steps = 6;
    const Explained e = explain("-p " + test::sh(g["prompt"]) + " -n " + std::to_string(decode_steps) + " --json");
    const nlohmann::json& j = e.json;
    const glass::Model& m = test::shipped();
    const glass::ModelConfig& c = m.config;

    // Tokens: the prompt's ids, then as many greedy ids as were chosen (N fed back + 1 last).
    const std::vector<int> prompt_ids = test::ids_of(g["prompt_ids"]);
    std::vector<int> golden_generated = test::ids_of(g["generated_ids"]);
    golden_generated.resize(decode_steps + 1);
    CHECK(test::ids_of(j["prompt_ids"]) == prompt_ids);
    CHECK(test::ids_of(j["generated_ids"]) == golden_generated);
    CHECK(j["stop"] == "steps");
    const int n_prompt = static_cast<int>(prompt_ids.size());
    std::vector<int> fed = prompt_ids;  // every id that went through the model
    fed.insert(fed.end(), golden_generated.begin(), golden_generated.end() - 1);
    const int n_fed = static_cast<int>(fed.size());
    REQUIRE(j["tokens"].size() == fed.size() + 1);
    for (int p = 0; p <= n_fed; ++p) {
        const nlohmann::json& t = j["tokens"][p];
        CHECK(t["position"] == p);
        CHECK(t["id"] == (p < n_fed ? fed[p] : golden_generated.back()));
        CHECK(t["piece"] == test::shipped_tok().piece(t["id"]));
        CHECK(t["role"] == (p < n_prompt ? "prompt" : p < n_fed ? "generated" : "next"));
    }

    // Embedding rows: the table's rows.
    const nlohmann::json& rows = j["embedding"]["rows"];
    REQUIRE(rows.size() == fed.size());
    REQUIRE(j["embedding"]["values_shown"] == 8);
    for (int p = 0; p < n_fed; ++p) {
        REQUIRE(rows[p].size() == 8);
        for (int i = 0; i < 8; ++i) CHECK(rows[p][i].get<float>() == m.embedding_table()(fed[p], i));  // a copy: exact
    }

    // Attention of every position, every layer and head, against glass::attention_head over the whole
    // sequence at once; each row sums to 1.
    const Recomputed r = recompute(m, fed);
    const nlohmann::json& att = j["attention"];
    REQUIRE(att.size() == fed.size());
    double max_diff = 0;
    for (int p = 0; p < n_fed; ++p) {
        REQUIRE(att[p].size() == static_cast<size_t>(c.n_layers));
        for (int l = 0; l < c.n_layers; ++l) {
            REQUIRE(att[p][l].size() == static_cast<size_t>(c.n_heads));
            for (int h = 0; h < c.n_heads; ++h) {
                const nlohmann::json& w = att[p][l][h];
                REQUIRE(w.size() == static_cast<size_t>(p + 1));  // itself and everything before
                double sum = 0;
                for (int k = 0; k <= p; ++k) {
                    sum += w[k].get<double>();
                    max_diff = std::max(max_diff, std::fabs(w[k].get<double>() - r.weights[l][h](p, k)));
                }
                CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));  // fp32 softmax of <= 12 terms
            }
        }
    }
    CHECK(max_diff <= kWeightTolerance);
    MESSAGE("max |attention weight - recomputed| = " << max_diff);

    // Per step: residual norms and top heads at its last position, top-5, decision, KV bytes.
    REQUIRE(j["steps"].size() == static_cast<size_t>(decode_steps + 1));
    glass::CpuSession session(m);
    const std::int64_t per_token = std::int64_t{2} * c.n_layers * c.n_kv_heads * c.head_dim * 4;  // C8/C9
    for (int s = 0; s <= decode_steps; ++s) {
        CAPTURE(s);
        const nlohmann::json& step = j["steps"][s];
        const int last = n_prompt - 1 + s;
        CHECK(step["kind"] == (s == 0 ? "prefill" : "decode"));
        CHECK(step["first_position"] == (s == 0 ? 0 : last));
        REQUIRE(step["layers"].size() == static_cast<size_t>(c.n_layers));
        for (int l = 0; l < c.n_layers; ++l) {
            const nlohmann::json& layer = step["layers"][l];
            CHECK(layer["residual_norm_after_attention"].get<double>() ==
                  doctest::Approx(r.norm_after_attention[l](last)).epsilon(kNormTolerance));
            CHECK(layer["residual_norm_after_mlp"].get<double>() ==
                  doctest::Approx(r.norm_after_mlp[l](last)).epsilon(kNormTolerance));
            REQUIRE(layer["heads"].size() == static_cast<size_t>(c.n_heads));
            for (int h = 0; h < c.n_heads; ++h) {
                const nlohmann::json& head = layer["heads"][h];
                CHECK(head["kv_head"] == h / c.heads_per_kv_head());
                REQUIRE(!head["top"].empty());
                Eigen::Index best = 0;  // the most attended position, recomputed
                r.weights[l][h].row(last).head(last + 1).maxCoeff(&best);
                CHECK(head["top"][0]["position"] == best);
            }
        }

        const std::span<const float> logits = s == 0 ? session.prefill(prompt_ids) : session.decode(fed[last]);
        const std::vector<double> probs = softmax_double(logits);
        std::vector<int> order(probs.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[a] > probs[b]; });
        REQUIRE(step["top5"].size() == 5);
        for (int k = 0; k < 5; ++k) {
            CHECK(step["top5"][k]["id"] == order[k]);
            CHECK(std::fabs(step["top5"][k]["probability"].get<double>() - probs[order[k]]) <= kProbabilityTolerance);
            CHECK(step["top5"][k]["logit"].get<float>() == logits[order[k]]);
        }
        CHECK(step["decision"]["rule"] == "greedy");
        CHECK(step["decision"]["id"] == golden_generated[s]);

        const nlohmann::json& kv = step["kv_cache"];
        const int tokens = last + 1;
        CHECK(kv["tokens"] == tokens);
        CHECK(kv["formula_bytes"] == per_token * tokens);
        CHECK(kv["cache_bytes_used"] == session.kv_bytes_used());
        CHECK(kv["cache_bytes_used"] == per_token * tokens);
        CHECK(kv["cache_bytes_in_rows"] == per_token * tokens);
        CHECK(kv["cache_bytes_reserved"] == per_token * c.seq_len);
        CHECK(kv["cache_bytes_reserved"] == session.cache().bytes_reserved());
        // The text view says the same bytes.
        CHECK(e.text.find("= " + std::to_string(per_token * tokens) + " B") != std::string::npos);
    }

    // Greedy: the draw's distribution is all on the argmax, which is the top-1.
    for (const nlohmann::json& step : j["steps"]) {
        CHECK(step["top5"][0]["draw_probability"] == 1.0);
        for (int k = 1; k < 5; ++k) CHECK(step["top5"][k]["draw_probability"] == 0.0);
        CHECK(step["decision"]["draw_probability"] == 1.0);
    }

    // The text is labelled by stage, in journey order.
    size_t at = 0;
    for (const char* label : {"[1 tokenization]", "[2 embedding]", "[6 prefill]", "  KV cache: ", "[7 sampling]",
                              "[8 decode step 1]", "[7 sampling]", "[8 decode step 6]"}) {
        CAPTURE(label);
        const size_t found = e.text.find(label, at);
        CHECK(found != std::string::npos);
        if (found != std::string::npos) at = found + 1;
    }
}

TEST_CASE("explain: every stage label uses the article's (and README's) stage numbers") {
    // ARTICLE-MAP.md lists the stages as "N. **Name** — ...", and README's journey table numbers
    // its rows the same way; a label "[N word ...]" must name stage N.
    std::map<int, std::string> stage_names;  // 1 -> "tokenization", ...
    {
        std::ifstream map(test::shared_dir() + "/ARTICLE-MAP.md");
        REQUIRE(map.good());
        const std::regex stage_re("^(\\d+)\\. \\*\\*([^*]+)\\*\\*");
        for (std::string line; std::getline(map, line);) {
            std::smatch m;
            if (std::regex_search(line, m, stage_re)) {
                std::string name = m[2];
                for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                stage_names[std::stoi(m[1])] = name;
            }
        }
    }
    REQUIRE(stage_names.size() >= 9);
    const std::string readme = read_file(test::models_dir() + "/../README.md");
    for (const std::string& args : {std::string("-p 'Once upon a time' -n 2 --json"),
                                    std::string("-p 'Once upon a time' -n 2 --temperature 0.8 --json")}) {
        CAPTURE(args);
        const Explained e = explain(args);
        const std::regex label_re("\\[(\\d+)(-\\d+)? ([a-z]+)");
        int labels = 0;
        std::set<int> seen;
        for (auto it = std::sregex_iterator(e.text.begin(), e.text.end(), label_re); it != std::sregex_iterator(); ++it) {
            const int n = std::stoi((*it)[1]);
            const std::string word = (*it)[3];
            CAPTURE(it->str());
            CHECK(!(*it)[2].matched);  // one stage per label, no ranges like "3-5"
            REQUIRE(stage_names.count(n) == 1);
            CHECK(stage_names[n].rfind(word, 0) == 0);  // "[6 prefill]" names stage 6, "Prefill"
            CHECK(readme.find("| " + std::to_string(n) + " | ") != std::string::npos);
            seen.insert(n);
            ++labels;
        }
        CHECK(seen == std::set<int>{1, 2, 6, 7, 8});
        CHECK(labels == 2 + 1 + 3 + 2);  // tokenization, embedding, prefill, 3 sampling, 2 decode steps
    }
}

TEST_CASE("explain: sampling flags choose exactly what glass::generate chooses with the same seed") {
    const int decode_steps = 8;
    const Explained e = explain("-p 'Once upon a time' -n " + std::to_string(decode_steps) +
                                " --temperature 0.8 --top-p 0.9 --seed 7 --json");
    glass::CpuSession session(test::shipped());
    glass::GenerateOptions options;
    options.sampling.temperature = 0.8f;
    options.sampling.top_p = 0.9f;
    options.seed = 7;
    options.max_new_tokens = decode_steps + 1;
    const glass::GenerateResult want = glass::generate(session, test::shipped_tok(), "Once upon a time", options);
    CHECK(test::ids_of(e.json["generated_ids"]) == want.generated_ids);
    for (const nlohmann::json& step : e.json["steps"]) {
        CHECK(step["decision"]["rule"] == "sample");
        CHECK(step["decision"]["coin"].get<double>() >= 0.0);
        CHECK(step["decision"]["coin"].get<double>() < 1.0);
        CHECK(step["decision"]["candidates"].get<int>() >= 1);
    }
    CHECK(e.json["sampling"]["seed"] == 7);
}

TEST_CASE("explain: decoding stops where llama2.c's story ends (the model emits BOS)") {
    const nlohmann::json g = golden_greedy("the_cat_n256");
    REQUIRE(g["stopped_on_bos"] == true);
    const std::vector<int> golden_generated = test::ids_of(g["generated_ids"]);  // ends with BOS (1)
    REQUIRE(golden_generated.back() == 1);
    const Explained e = explain("-p " + test::sh(g["prompt"]) + " -n 300 --json");  // more than it needs
    CHECK(test::ids_of(e.json["generated_ids"]) == golden_generated);
    CHECK(e.json["stop"] == "bos");
    CHECK(e.json["steps"].size() == golden_generated.size());  // the prefill + one decode per id fed back
    CHECK(e.json["tokens"].back()["role"] == "next");          // BOS is chosen, never fed
    CHECK(e.text.find("(stopped: the model emitted BOS") != std::string::npos);
}

TEST_CASE("explain: -n 0 is the prefill alone") {
    const Explained e = explain("-p 'Once upon a time' -n 0 --json");
    CHECK(e.json["steps"].size() == 1);
    CHECK(e.json["attention"].size() == 5);
    CHECK(e.json["generated_ids"] == nlohmann::json::array({432}));  // the golden's first greedy id
}

TEST_CASE("explain --html: one self-contained page carrying the --json data") {
    const std::string page = "/tmp/glass_test_explain_" + std::to_string(::getpid()) + ".html";
    const Explained e = explain("-p 'Once upon a time' -n 3 --json --html " + test::sh(page));
    const std::string html = read_file(page);
    std::remove(page.c_str());
    CHECK(html.rfind("<!doctype html>", 0) == 0);
    // Nothing fetched: no external scripts, styles, images or imports. The one URL allowed is the
    // SVG namespace, an identifier that is never loaded.
    for (const char* banned : {"<link", "src=", "@import", "url(", "//cdn", "fetch(", "XMLHttpRequest"}) {
        CAPTURE(banned);
        CHECK(html.find(banned) == std::string::npos);
    }
    for (size_t at = html.find("http"); at != std::string::npos; at = html.find("http", at + 1))
        CHECK(html.compare(at, 26, "http://www.w3.org/2000/svg") == 0);
    const std::string open = "<script type=\"application/json\" id=\"glass-data\">";
    const size_t begin = html.find(open);
    REQUIRE(begin != std::string::npos);
    const size_t end = html.find("</script>", begin);
    REQUIRE(end != std::string::npos);
    nlohmann::json embedded;
    REQUIRE_NOTHROW(embedded = nlohmann::json::parse(html.substr(begin + open.size(), end - begin - open.size())));
    CHECK(embedded == e.json);
}

TEST_CASE("explain --html: a prompt containing </script> cannot break out of the data block") {
    const std::string page = "/tmp/glass_test_explain_script_" + std::to_string(::getpid()) + ".html";
    const Explained e = explain("-p '</script><script>alert(1)</script>' -n 1 --json --html " + test::sh(page));
    const std::string html = read_file(page);
    std::remove(page.c_str());
    CHECK(html.find("alert(1)</script>") == std::string::npos);
    CHECK(e.json["prompt"] == "</script><script>alert(1)</script>");
}

TEST_CASE("explain: bad input is one line on stderr, a non-zero exit and nothing on stdout") {
    struct Case {
        std::string args;
        int exit_code;
        std::string named;  // what the message must mention
    };
    const std::vector<Case> cases = {
        {"", 2, "-p"},
        {"-n 3", 2, "-p"},
        {"-p hi -n -1", 2, "-1"},
        {"-p hi -n abc", 2, "abc"},
        {"-p hi -n", 2, "-n"},
        {"-p hi --bogus", 2, "--bogus"},
        {"-p hi extra", 2, "extra"},
        {"-p hi --temperature -1", 1, "-1"},
        {"-p hi -n 600", 1, "512"},
        {"-p hi -m /nonexistent/model.bin", 1, "/nonexistent/model.bin"},
        {"-p hi --html /nonexistent_dir/page.html", 1, "/nonexistent_dir/page.html"},
    };
    for (const Case& k : cases) {
        CAPTURE(k.args);
        const test::Run r = test::run(glass_cmd() + " explain " + k.args);
        CAPTURE(r.err);
        CHECK(r.exit_code == k.exit_code);
        CHECK(r.out.empty());
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.err.find(k.named) != std::string::npos);
    }
}

// ---- the sampling decision: the distribution the draw used -------------------------------------

namespace {

// The distribution a draw walks, recomputed here in double from the logits and the rules as the
// README states them: softmax(logits / T); most probable first (ties: lower id); keep the top k;
// keep p >= min_p · p_max; keep the shortest prefix whose sum exceeds top_p (llama2.c's rule, the
// default); renormalize. With no truncation asked, llama2.c walks every token in id order.
// `margin` receives how close any cut came to its threshold (a near tie fp32 could decide the
// other way; the test then says so rather than compare).
std::vector<std::pair<int, double>> draw_distribution(std::span<const float> logits, double t, int top_k, double min_p,
                                                      double top_p, double& margin) {
    std::vector<double> p(logits.size());
    double max_logit = logits[0], sum = 0;
    for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
    for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - max_logit) / t);
    std::vector<std::pair<int, double>> kept;
    for (size_t i = 0; i < p.size(); ++i) kept.push_back({static_cast<int>(i), p[i] / sum});
    margin = 1;
    if (top_k == 0 && min_p == 0 && top_p >= 1) return kept;  // id order, nothing cut
    std::stable_sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    auto renormalize = [&] {
        double mass = 0;
        for (const auto& c : kept) mass += c.second;
        for (auto& c : kept) c.second /= mass;
    };
    if (top_k > 0 && static_cast<size_t>(top_k) < kept.size()) {
        margin = std::min(margin, kept[top_k - 1].second - kept[top_k].second);
        kept.resize(static_cast<size_t>(top_k));
        renormalize();
    }
    if (min_p > 0) {
        const double threshold = min_p * kept.front().second;
        size_t n = 0;
        while (n < kept.size() && kept[n].second >= threshold) ++n;
        for (const auto& c : kept) margin = std::min(margin, std::fabs(c.second - threshold));
        kept.resize(n);
        renormalize();
    }
    if (top_p < 1) {
        double cumulative = 0;
        for (size_t i = 0; i < kept.size(); ++i) {
            cumulative += kept[i].second;
            margin = std::min(margin, std::fabs(cumulative - top_p));
            if (cumulative > top_p) {
                kept.resize(i + 1);
                break;
            }
        }
        renormalize();
    }
    return kept;
}

}  // namespace

TEST_CASE("explain: the printed sampling distribution is the one the draw used") {
    struct Case {
        std::string flags;
        double temperature, top_p, min_p;
        int top_k;
        std::uint64_t seed;
    };
    const std::vector<Case> cases = {
        {"--temperature 0.8 --top-p 0.9 --seed 7", 0.8, 0.9, 0, 0, 7},
        {"--temperature 1.5 --top-k 5 --top-p 1 --seed 3", 1.5, 1, 0, 5, 3},
        {"--temperature 1.2 --min-p 0.05 --top-p 0.95 --seed 9", 1.2, 0.95, 0.05, 0, 9},
        {"--temperature 1 --top-p 1 --seed 5", 1, 1, 0, 0, 5},  // no truncation: id order
    };
    // Probabilities: explain's fp32 softmax and renormalization against double here; a few ulps of
    // values <= 1, so 1e-5 absolute. The coin is compared exactly (the same xorshift64*, fp32).
    constexpr double kTolerance = 1e-5;
    const glass::Model& m = test::shipped();
    for (const Case& c : cases) {
        CAPTURE(c.flags);
        const int decode_steps = 6;
        const Explained e = explain("-p 'Once upon a time' -n " + std::to_string(decode_steps) + " " + c.flags + " --json");
        const std::vector<int> prompt_ids = test::ids_of(e.json["prompt_ids"]);
        const std::vector<int> generated = test::ids_of(e.json["generated_ids"]);
        REQUIRE(e.json["steps"].size() == generated.size());
        glass::CpuSession session(m);
        glass::Llama2cRng rng(c.seed);
        int coins_checked = 0;
        for (size_t s = 0; s < generated.size(); ++s) {
            CAPTURE(s);
            const nlohmann::json& d = e.json["steps"][s]["decision"];
            const std::span<const float> logits = s == 0 ? session.prefill(prompt_ids) : session.decode(generated[s - 1]);
            double margin = 1;
            const auto want = draw_distribution(logits, c.temperature, c.top_k, c.min_p, c.top_p, margin);
            REQUIRE_MESSAGE(margin > 1e-5, "a cut lands within 1e-5 of its threshold; pick another case");

            // The distribution in the JSON: the same tokens, in the order the draw walks, same p.
            CHECK(d["rule"] == "sample");
            CHECK(d["order"] == (c.top_k == 0 && c.min_p == 0 && c.top_p >= 1 ? "id" : "probability"));
            CHECK(d["candidates"] == want.size());
            REQUIRE(d["distribution"].size() == want.size());
            double max_diff = 0;
            for (size_t i = 0; i < want.size(); ++i) {
                CHECK(d["distribution"][i][0] == want[i].first);
                max_diff = std::max(max_diff, std::fabs(d["distribution"][i][1].get<double>() - want[i].second));
            }
            CHECK(max_diff <= kTolerance);

            // The coin is llama2.c's next draw from the seed; it lands in the chosen token's stretch.
            const float coin = rng.next_f32();
            CHECK(d["coin"].get<float>() == coin);
            double before = 0;
            for (const auto& [id, p] : want) {
                if (id == generated[s]) {
                    CHECK(std::fabs(d["cumulative_before"].get<double>() - before) <= kTolerance);
                    CHECK(std::fabs(d["cumulative_after"].get<double>() - (before + p)) <= kTolerance);
                    CHECK(std::fabs(d["draw_probability"].get<double>() - p) <= kTolerance);
                    if (coin - before > kTolerance && before + p - coin > kTolerance) ++coins_checked;
                    CHECK(coin >= before - kTolerance);
                    CHECK(coin < before + p + kTolerance);
                    break;
                }
                before += p;
            }
            CHECK(d["id"] == generated[s]);

            // Top-5 (by the model, T = 1) each carry their draw probability (0 = truncated away).
            std::map<int, double> draw_p;
            for (const auto& [id, p] : want) draw_p[id] = p;
            for (const nlohmann::json& t : e.json["steps"][s]["top5"]) {
                const double expected = draw_p.count(t["id"]) ? draw_p[t["id"]] : 0.0;
                CHECK(std::fabs(t["draw_probability"].get<double>() - expected) <= kTolerance);
            }
        }
        CHECK(coins_checked >= decode_steps);  // (nearly) every coin was clear of an edge

        // The text prints the same numbers: "p P  draw p Q" per top-5 row (4 decimals: 5e-5 + tolerance).
        const std::regex row_re("\\n +(\\d+) .* p ([0-9.]+)  draw p ([0-9.]+)  \\(logit");
        size_t rows = 0, step = 0;
        for (auto it = std::sregex_iterator(e.text.begin(), e.text.end(), row_re); it != std::sregex_iterator(); ++it, ++rows) {
            step = rows / 5;
            REQUIRE(step < e.json["steps"].size());
            const nlohmann::json& t = e.json["steps"][step]["top5"][rows % 5];
            CHECK(std::stoi((*it)[1]) == t["id"].get<int>());
            CHECK(std::fabs(std::stod((*it)[2]) - t["probability"].get<double>()) <= 5e-5 + kTolerance);
            CHECK(std::fabs(std::stod((*it)[3]) - t["draw_probability"].get<double>()) <= 5e-5 + kTolerance);
        }
        CHECK(rows == 5 * e.json["steps"].size());
    }
}

// ---- the text filters ----------------------------------------------------------------------------

namespace {

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("explain: --brief, --layer and --head thin the text, never the JSON") {
    const glass::ModelConfig& c = test::shipped().config;
    const std::string base = "-p 'Once upon a time' -n 4 --json";
    const Explained full = explain(base);
    const std::vector<std::string> all = lines_of(full.text);
    const size_t steps = full.json["steps"].size();
    REQUIRE(steps == 5);
    auto count = [](const std::vector<std::string>& lines, const std::string& prefix) {
        return static_cast<size_t>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return starts_with(l, prefix); }));
    };
    REQUIRE(count(all, "  layer ") == steps * c.n_layers);
    REQUIRE(count(all, "    head ") == steps * c.n_layers * c.n_heads);

    SUBCASE("--brief: pieces, top-5, decision and cache bytes; no embedding, layer or head lines") {
        const Explained brief = explain(base + " --brief");
        const std::vector<std::string> lines = lines_of(brief.text);
        CHECK(brief.json == full.json);
        CHECK(count(lines, "  layer ") == 0);
        CHECK(count(lines, "    head ") == 0);
        CHECK(count(lines, "  position 0 ") == 0);  // embedding rows ("  position 0 \"...\"  -0.1271 ...")
        CHECK(brief.text.find("[2 embedding]") == std::string::npos);
        // Exactly the full text minus those lines (and the embedding block's title and blank line).
        size_t embedding_lines = 2;
        for (size_t p = 0; p < full.json["prompt_ids"].size(); ++p)
            embedding_lines += count(all, "  position " + std::to_string(p) + " ");
        CHECK(embedding_lines == 2 + full.json["prompt_ids"].size());
        CHECK(lines.size() == all.size() - count(all, "  layer ") - count(all, "    head ") - embedding_lines);
        CHECK(count(lines, "  KV cache: ") == steps);
        CHECK(count(lines, "[7 sampling]") == steps);
        CHECK(count(lines, "  greedy: ") == steps);
        CHECK(lines.size() < all.size() / 3);
    }
    SUBCASE("--layer L: that layer's lines, as in the full text") {
        const Explained one = explain(base + " --layer 2");
        const std::vector<std::string> lines = lines_of(one.text);
        CHECK(one.json == full.json);
        CHECK(count(lines, "  layer ") == steps);
        CHECK(count(lines, "  layer 2 ") == steps);
        CHECK(count(lines, "    head ") == steps * c.n_heads);
        for (const std::string& line : lines)  // every kept line is one of the full text's
            if (starts_with(line, "  layer ") || starts_with(line, "    head "))
                CHECK(std::find(all.begin(), all.end(), line) != all.end());
    }
    SUBCASE("--head H: that head in every layer, with its KV head") {
        const int h = 3;
        const Explained one = explain(base + " --head " + std::to_string(h));
        const std::vector<std::string> lines = lines_of(one.text);
        const std::string kv = std::to_string(h / c.heads_per_kv_head());
        CHECK(count(lines, "  layer ") == steps * c.n_layers);
        CHECK(count(lines, "    head ") == steps * c.n_layers);
        CHECK(count(lines, "    head 3 (kv " + kv + ") ") == steps * c.n_layers);
    }
    SUBCASE("--layer and --head together: one line per step") {
        const Explained one = explain(base + " --layer 4 --head 7");
        const std::vector<std::string> lines = lines_of(one.text);
        CHECK(count(lines, "  layer 4 ") == steps);
        CHECK(count(lines, "  layer ") == steps);
        CHECK(count(lines, "    head 7 ") == steps);
        CHECK(count(lines, "    head ") == steps);
    }
}

TEST_CASE("explain: filter values are checked against the model and name themselves") {
    const glass::ModelConfig& c = test::shipped().config;
    struct Case {
        std::string args;
        int exit_code;
        std::vector<std::string> named;
    };
    const std::vector<Case> cases = {
        {"--layer " + std::to_string(c.n_layers), 1, {"--layer " + std::to_string(c.n_layers), std::to_string(c.n_layers) + " layers"}},
        {"--layer -1", 1, {"--layer -1"}},
        {"--head " + std::to_string(c.n_heads), 1, {"--head " + std::to_string(c.n_heads), std::to_string(c.n_heads) + " query heads"}},
        {"--head two", 2, {"--head", "two"}},
        {"--brief --layer 1", 2, {"--brief", "--layer"}},
        {"--brief --head 1", 2, {"--brief", "--head"}},
    };
    for (const Case& k : cases) {
        CAPTURE(k.args);
        const test::Run r = test::run(glass_cmd() + " explain -p hi " + k.args);
        CAPTURE(r.err);
        CHECK(r.exit_code == k.exit_code);
        CHECK(r.out.empty());
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        for (const std::string& s : k.named) CHECK(r.err.find(s) != std::string::npos);
    }
}

}  // namespace test_explain
