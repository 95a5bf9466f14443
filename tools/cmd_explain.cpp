// glass explain [-m MODEL] [-t TOKENIZER] -p PROMPT [-n N] [--layer L] [--head H] [--brief]
//               [--json] [--html FILE] [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//
// The journey of one request, printed stage by stage with the README's stage numbers:
//   [1 tokenization]    the prompt's pieces and ids
//   [2 embedding]       the first values of each id's embedding row
//   [6 prefill]         what every attention head looked at and how the residual stream grew in
//                       every layer (3 position, 4 attention and 5 MLP run inside each layer),
//                       and the KV cache's size, checked three ways
//   [7 sampling]        the top-5 next tokens by the model (T = 1) beside the distribution the draw
//                       used (temperature, truncation, renormalized), and where the coin landed
//   [8 decode step N]   the same for each of the N decode steps
// --layer/--head/--brief only thin the text; --json and --html always carry everything.
// The forward pass is the reference one (transformer.hpp), observed through a glass::ForwardTrace;
// the choice is glass::sample's. Only the draw's distribution is rebuilt beside it, with the same
// stage functions (sampling.hpp), so the printed numbers lead to the token that was picked.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "chat_setup.hpp"
#include "cli.hpp"
#include "explain.hpp"
#include "glass/glass.hpp"

namespace cli {
namespace {

constexpr int kTopPositionsPerHead = 3;  // attended positions shown per head
constexpr int kTopTokens = 5;            // next-token candidates shown per step
constexpr int kEmbeddingValuesShown = 8; // leading values of each embedding row

// The KV cache, measured three ways, after a step. They must agree (C8/C9); a disagreement is a
// bug in glass, reported as an error rather than printed as if it were fine.
KvRecord measure_kv_cache(const glass::ModelConfig& c, const glass::KVCache& cache) {
    KvRecord kv{};
    kv.tokens = cache.length();
    // 2 (K and V) · layers · KV heads · head_dim · 4 bytes (fp32) · tokens.
    kv.formula_bytes = std::int64_t{2} * c.n_layers * c.n_kv_heads * c.head_dim * 4 * kv.tokens;
    kv.cache_bytes_used = cache.bytes_used(c);
    kv.cache_bytes_in_rows = 0;
    for (int l = 0; l < c.n_layers; ++l)
        kv.cache_bytes_in_rows += static_cast<std::int64_t>(
            (cache.keys(l, kv.tokens).size() + cache.values(l, kv.tokens).size()) * sizeof(float));
    kv.cache_bytes_reserved = cache.bytes_reserved();
    const std::int64_t reserved_by_formula = kv.formula_bytes / std::max(kv.tokens, 1) * cache.capacity();
    if (kv.cache_bytes_used != kv.formula_bytes || kv.cache_bytes_in_rows != kv.formula_bytes ||
        kv.cache_bytes_reserved != reserved_by_formula)
        glass::fail("KV cache check failed at ", kv.tokens, " tokens: formula ", kv.formula_bytes,
                    " B, KVCache reports ", kv.cache_bytes_used, " B used and ", kv.cache_bytes_in_rows,
                    " B in its rows, ", kv.cache_bytes_reserved, " B reserved (formula: ",
                    reserved_by_formula, " B)");
    return kv;
}

// Keeps what the trace saw: every computed position's attention rows (trimmed to the positions it
// could see), and for the step's last position, each layer's residual norms and top heads.
std::vector<LayerRecord> record_trace(const glass::ForwardTrace& trace, Explanation& e) {
    const Eigen::Index n = trace.layers.front().attention.front().rows();
    for (Eigen::Index i = 0; i < n; ++i) {
        const int position = trace.start_pos + static_cast<int>(i);
        auto& at_position = e.attention.emplace_back();  // [layer][head] -> weights [position + 1]
        for (const glass::LayerTrace& layer : trace.layers) {
            auto& at_layer = at_position.emplace_back();
            for (const glass::RowMatrix& head : layer.attention)
                at_layer.emplace_back(head.row(i).data(), head.row(i).data() + position + 1);
        }
    }
    std::vector<LayerRecord> layers;
    for (const glass::LayerTrace& layer : trace.layers) {
        LayerRecord r{layer.residual_norm_after_attention(n - 1), layer.residual_norm_after_mlp(n - 1), {}};
        const auto& at_layer = e.attention.back()[layers.size()];
        for (int h = 0; h < static_cast<int>(at_layer.size()); ++h) {
            HeadFocus focus{h, h / (e.n_heads / e.n_kv_heads), {}};
            for (int p = 0; p < static_cast<int>(at_layer[h].size()); ++p) focus.top.push_back({p, at_layer[h][p]});
            std::stable_sort(focus.top.begin(), focus.top.end(),
                             [](const AttendedPosition& a, const AttendedPosition& b) { return a.weight > b.weight; });
            focus.top.resize(std::min<size_t>(focus.top.size(), kTopPositionsPerHead));
            r.heads.push_back(focus);
        }
        layers.push_back(r);
    }
    return layers;
}

// Sampling: the coin glass::sample is about to draw and the distribution it walks (temperature,
// then top-k, min-p, top-p, renormalized), into `d`; `draw_probs` [vocab] gets each candidate's share.
void rebuild_draw(std::span<const float> logits, const glass::SamplingParams& params, const glass::Llama2cRng& rng,
                  Decision& d, std::vector<float>& draw_probs) {
    d.rule = "sample";
    glass::Llama2cRng peek = rng;  // the draw glass::sample is about to make
    d.coin = peek.next_f32();
    const std::vector<float> at_t = glass::probabilities(logits, params.temperature);
    std::vector<glass::Candidate> kept;
    if (params.top_k == 0 && params.min_p == 0.0f && params.top_p >= 1.0f) {
        d.order = "id";  // glass::draw_in_id_order: every token, in id order
        for (size_t i = 0; i < at_t.size(); ++i) kept.push_back({static_cast<int>(i), at_t[i]});
    } else {
        d.order = "probability";
        kept = glass::sorted_candidates(at_t);
        glass::keep_top_k(kept, params.top_k);
        glass::keep_min_p(kept, params.min_p);
        glass::keep_top_p(kept, params.top_p, params.nucleus);
    }
    d.candidates = static_cast<int>(kept.size());
    float mass = 0.0f;  // glass::draw scales the coin by the kept mass; dividing by it is the same
    for (const glass::Candidate& c : kept) mass += c.p;
    for (const glass::Candidate& c : kept) {
        d.distribution.push_back({c.id, c.p / mass});
        draw_probs[static_cast<size_t>(c.id)] = c.p / mass;
    }
}

// The choice of the next token, and the numbers behind it: the top-5 by the model's own
// distribution (temperature 1) and, when sampling, the distribution the draw actually used.
// glass::sample makes the choice; the distribution is rebuilt here with the same stage functions
// in the same order, so the coin can be followed to the token it picked.
void decide(std::span<const float> logits, const glass::SamplingParams& params, glass::Llama2cRng& rng,
            const glass::Tokenizer& tok, StepRecord& step) {
    const std::vector<float> probs = glass::probabilities(logits, 1.0f);  // [vocab]
    Decision& d = step.decision;
    std::vector<float> draw_probs(probs.size(), 0.0f);                    // [vocab], 0 = not a candidate
    if (params.temperature == 0.0f)
        d.rule = "greedy";
    else
        rebuild_draw(logits, params, rng, d, draw_probs);
    d.id = glass::sample(logits, params, rng);
    d.piece = tok.piece(d.id);
    d.probability = probs[static_cast<size_t>(d.id)];
    if (d.rule == "greedy") {
        draw_probs[static_cast<size_t>(d.id)] = 1.0f;  // the largest logit always wins
    } else {
        d.draw_probability = draw_probs[static_cast<size_t>(d.id)];
        double before = 0;  // where the chosen token's stretch of the running sum starts
        for (const DrawCandidate& c : d.distribution) {
            if (c.id == d.id) break;
            before += c.probability;
        }
        d.cumulative_before = before;
        d.cumulative_after = before + d.draw_probability;
    }
    const std::vector<glass::Candidate> ranked = glass::sorted_candidates(probs);
    for (int k = 0; k < kTopTokens && k < static_cast<int>(ranked.size()); ++k) {
        const int id = ranked[k].id;
        step.top.push_back({id, tok.piece(id), logits[id], ranked[k].p, draw_probs[static_cast<size_t>(id)]});
    }
}

// One forward pass over `ids` with the trace on; records everything about it.
int run_step(const glass::Model& model, const glass::Tokenizer& tok, glass::KVCache& cache,
             const std::vector<int>& ids, const glass::SamplingParams& params, glass::Llama2cRng& rng,
             Explanation& e) {
    StepRecord step;
    step.kind = cache.length() == 0 ? "prefill" : "decode";
    step.first_position = cache.length();
    step.input_ids = ids;
    for (int id : ids) {
        const auto row = model.embedding_table().row(id);
        e.embedding_rows.emplace_back(row.data(), row.data() + std::min<Eigen::Index>(row.size(), kEmbeddingValuesShown));
    }
    glass::ForwardTrace trace;
    const std::vector<float> logits = glass::transformer_forward(model, cache, ids, &trace);
    step.layers = record_trace(trace, e);
    decide(logits, params, rng, tok, step);
    step.kv = measure_kv_cache(model.config, cache);
    e.steps.push_back(step);
    return step.decision.id;
}

std::string shown(const Explanation& e, int position) { return quoted(e.tokens[static_cast<size_t>(position)].piece); }

// What the text view shows (--layer, --head, --brief); the JSON and the page always hold everything.
struct TextFilter {
    int layer = -1;      // -1: every layer
    int head = -1;       // -1: every head
    bool brief = false;  // no embedding rows, no per-layer lines
};

// Step 7: the top-5 by the model, beside the distribution the draw used; then the draw itself.
void print_sampling(const StepRecord& s, float temperature) {
    const Decision& d = s.decision;
    if (d.rule == "greedy") {
        std::printf("[7 sampling] top-%d next tokens; p = softmax of the logits (the model's own, T = 1)\n",
                    kTopTokens);
        for (const TopToken& t : s.top)
            std::printf("  %5d %-14s p %.4f  (logit %+.3f)\n", t.id, quoted(t.piece).c_str(), t.probability, t.logit);
        std::printf("  greedy: the largest logit wins -> id %d %s (p %.4f)\n", d.id, quoted(d.piece).c_str(),
                    d.probability);
        return;
    }
    std::printf("[7 sampling] top-%d next tokens; p = softmax of the logits (the model's own, T = 1);\n"
                "  draw p = the distribution the draw used: temperature %g, then top-k/min-p/top-p, renormalized\n"
                "  over the %d candidate%s left (0 = truncated away)\n",
                kTopTokens, static_cast<double>(temperature), d.candidates, d.candidates == 1 ? "" : "s");
    for (const TopToken& t : s.top)
        std::printf("  %5d %-14s p %.4f  draw p %.4f  (logit %+.3f)\n", t.id, quoted(t.piece).c_str(), t.probability,
                    t.draw_probability, t.logit);
    std::printf("  coin %.4f lands between %.4f and %.4f of the running sum of draw p (candidates %s)\n"
                "  -> id %d %s (draw p %.4f; the model's p %.4f)\n",
                d.coin, d.cumulative_before, d.cumulative_after,
                d.order == "id" ? "in id order: no truncation, llama2.c's walk" : "most probable first",
                d.id, quoted(d.piece).c_str(), d.draw_probability, d.probability);
}

void print_step(const Explanation& e, const StepRecord& s, const TextFilter& filter) {
    const int last = s.first_position + static_cast<int>(s.input_ids.size()) - 1;
    if (s.kind == "prefill")
        std::printf("\n[6 prefill] positions 0..%d go through %d layers in one pass; in every layer 3 position\n"
                    "  (RoPE on q and k), 4 attention, 5 MLP; shown: the last position, %d %s\n",
                    last, e.n_layers, last, shown(e, last).c_str());
    else
        std::printf("\n[8 decode step %d] position %d, id %d %s: only its row is computed (3 position,\n"
                    "  4 attention, 5 MLP in every layer); attention reads the cached K/V of positions 0..%d\n",
                    static_cast<int>(&s - &e.steps[0]), last, s.input_ids[0], shown(e, last).c_str(), last);
    for (size_t l = 0; l < s.layers.size() && !filter.brief; ++l) {
        if (filter.layer >= 0 && static_cast<int>(l) != filter.layer) continue;
        const LayerRecord& r = s.layers[l];
        std::printf("  layer %zu  residual stream |x|: %.4f after attention, %.4f after MLP\n", l,
                    r.residual_norm_after_attention, r.residual_norm_after_mlp);
        for (const HeadFocus& h : r.heads) {
            if (filter.head >= 0 && h.head != filter.head) continue;
            std::printf("    head %d (kv %d) looks at", h.head, h.kv_head);
            for (const AttendedPosition& a : h.top)
                std::printf("  %3d %-10s %.3f", a.position, shown(e, a.position).c_str(), a.weight);
            std::printf("\n");
        }
    }
    const KvRecord& kv = s.kv;
    std::printf("  KV cache: %d tokens x 2 (K,V) x %d layers x %d KV heads x %d head_dim x 4 B = %lld B\n"
                "  KVCache: %lld B in use, %lld B in its K/V rows, %lld B reserved for %d positions: agree\n",
                kv.tokens, e.n_layers, e.n_kv_heads, e.head_dim, static_cast<long long>(kv.formula_bytes),
                static_cast<long long>(kv.cache_bytes_used), static_cast<long long>(kv.cache_bytes_in_rows),
                static_cast<long long>(kv.cache_bytes_reserved), e.seq_len);
    print_sampling(s, e.temperature);
}

void print_text(const Explanation& e, const TextFilter& filter) {
    std::printf("glass explain: one request through the model, stage by stage\n"
                "model %s: dim %d, %d layers, %d query heads sharing %d KV heads (head_dim %d),\n"
                "  MLP hidden %d, vocabulary %d, context %d\n",
                e.model_path.c_str(), e.dim, e.n_layers, e.n_heads, e.n_kv_heads, e.head_dim, e.hidden_dim,
                e.vocab_size, e.seq_len);
    if (e.temperature == 0.0f)
        std::printf("prompt %s; %d decode step%s; greedy\n", quoted(e.prompt).c_str(), e.decode_steps_requested,
                    e.decode_steps_requested == 1 ? "" : "s");
    else
        std::printf("prompt %s; %d decode step%s; temperature %g, top-p %g, top-k %d, min-p %g, seed %llu\n",
                    quoted(e.prompt).c_str(), e.decode_steps_requested, e.decode_steps_requested == 1 ? "" : "s",
                    e.temperature, e.top_p, e.top_k,
                    e.min_p, static_cast<unsigned long long>(e.seed));

    const StepRecord& prefill = e.steps.front();
    std::printf("\n[1 tokenization] text -> %zu piece%s -> ids (%s)\n  position     id  piece\n",
                prefill.input_ids.size(), prefill.input_ids.size() == 1 ? "" : "s",
                !e.chat_template.empty() ? ("the chat template's text, special tokens recognised; from " + e.chat_template).c_str()
                : e.bos_added            ? "BOS first"
                                         : "no BOS: this model adds none");
    for (size_t p = 0; p < prefill.input_ids.size(); ++p)
        std::printf("  %8zu %6d  %s\n", p, e.tokens[p].id, quoted(e.tokens[p].piece).c_str());

    if (!filter.brief) {
        std::printf("\n[2 embedding] each id picks one row of the embedding table [%d, %d]; its first %d values:\n",
                    e.vocab_size, e.dim, e.embedding_values_shown);
        for (size_t p = 0; p < prefill.input_ids.size(); ++p) {
            std::printf("  position %zu %-10s", p, quoted(e.tokens[p].piece).c_str());
            for (float v : e.embedding_rows[p]) std::printf(" %+.4f", v);
            std::printf("\n");
        }
    }

    for (const StepRecord& s : e.steps) print_step(e, s, filter);

    std::printf("\nresult: %s + %s (stopped: %s)\n", quoted(e.prompt).c_str(), quoted(e.text).c_str(),
                e.stop == "steps" ? "ran the requested decode steps" :
                e.stop == "bos" ? "the model emitted BOS, the end of a story" : "the model emitted EOS");
}

}  // namespace

// An fp32 value as the shortest decimal that reads back as the same float (9 significant digits),
// not as the 17 digits of the double it widens to: exact, and half the size.
static double exact_float(float x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
    return std::strtod(buf, nullptr);
}

static nlohmann::json floats(const std::vector<float>& values) {
    nlohmann::json out = nlohmann::json::array();
    for (float v : values) out.push_back(exact_float(v));
    return out;
}

// One step's layers: residual norms and each head's most attended positions.
static nlohmann::json layers_json(const StepRecord& s) {
    using nlohmann::json;
    json layers = json::array();
    for (const LayerRecord& r : s.layers) {
        json heads = json::array();
        for (const HeadFocus& h : r.heads) {
            json top = json::array();
            for (const AttendedPosition& a : h.top) top.push_back({{"position", a.position}, {"weight", exact_float(a.weight)}});
            heads.push_back({{"head", h.head}, {"kv_head", h.kv_head}, {"top", top}});
        }
        layers.push_back({{"residual_norm_after_attention", exact_float(r.residual_norm_after_attention)},
                          {"residual_norm_after_mlp", exact_float(r.residual_norm_after_mlp)},
                          {"heads", heads}});
    }
    return layers;
}

static nlohmann::json decision_json(const Decision& d) {
    using nlohmann::json;
    json decision = {{"rule", d.rule}, {"id", d.id}, {"piece", d.piece},
                     {"probability", exact_float(d.probability)},
                     {"draw_probability", exact_float(d.draw_probability)}};
    if (d.rule == "sample") {
        json distribution = json::array();  // [[id, draw probability], ...] in the order the draw walks
        for (const DrawCandidate& c : d.distribution) distribution.push_back({c.id, exact_float(c.probability)});
        decision["coin"] = exact_float(d.coin);
        decision["candidates"] = d.candidates;
        decision["order"] = d.order;
        decision["distribution"] = distribution;
        decision["cumulative_before"] = d.cumulative_before;
        decision["cumulative_after"] = d.cumulative_after;
    }
    return decision;
}

static nlohmann::json step_json(const StepRecord& s) {
    using nlohmann::json;
    json top = json::array();
    for (const TopToken& t : s.top)
        top.push_back({{"id", t.id}, {"piece", t.piece}, {"logit", exact_float(t.logit)},
                       {"probability", exact_float(t.probability)},
                       {"draw_probability", exact_float(t.draw_probability)}});
    return {{"kind", s.kind},
            {"first_position", s.first_position},
            {"input_ids", s.input_ids},
            {"layers", layers_json(s)},
            {"top5", top},
            {"decision", decision_json(s.decision)},
            {"kv_cache", {{"tokens", s.kv.tokens},
                          {"formula_bytes", s.kv.formula_bytes},
                          {"cache_bytes_used", s.kv.cache_bytes_used},
                          {"cache_bytes_in_rows", s.kv.cache_bytes_in_rows},
                          {"cache_bytes_reserved", s.kv.cache_bytes_reserved}}}};
}

// [position][layer][head] -> weights
static nlohmann::json attention_json(const Explanation& e) {
    using nlohmann::json;
    json attention = json::array();
    for (const auto& at_position : e.attention) {
        json layers = json::array();
        for (const auto& at_layer : at_position) {
            json heads = json::array();
            for (const std::vector<float>& weights : at_layer) heads.push_back(floats(weights));
            layers.push_back(heads);
        }
        attention.push_back(layers);
    }
    return attention;
}

nlohmann::json to_json(const Explanation& e) {
    using nlohmann::json;
    json tokens = json::array();
    for (const TokenRecord& t : e.tokens)
        tokens.push_back({{"position", t.position}, {"id", t.id}, {"piece", t.piece}, {"role", t.role}});
    json steps = json::array();
    for (const StepRecord& s : e.steps) steps.push_back(step_json(s));
    json embedding_rows = json::array();
    for (const std::vector<float>& row : e.embedding_rows) embedding_rows.push_back(floats(row));
    std::vector<int> prompt_ids, generated_ids;
    for (const TokenRecord& t : e.tokens) (t.role == "prompt" ? prompt_ids : generated_ids).push_back(t.id);
    return {{"model", {{"path", e.model_path}, {"tokenizer", e.tokenizer_path}, {"dim", e.dim},
                       {"hidden_dim", e.hidden_dim}, {"n_layers", e.n_layers}, {"n_heads", e.n_heads},
                       {"n_kv_heads", e.n_kv_heads}, {"head_dim", e.head_dim}, {"vocab_size", e.vocab_size},
                       {"seq_len", e.seq_len}}},
            {"prompt", e.prompt},
            {"chat_template", e.chat_template.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.chat_template)},
            {"decode_steps", e.decode_steps_requested},
            {"sampling", {{"temperature", as_decimal(e.temperature)}, {"top_p", as_decimal(e.top_p)},
                          {"top_k", e.top_k}, {"min_p", as_decimal(e.min_p)}, {"seed", e.seed}}},
            {"tokens", tokens},
            {"prompt_ids", prompt_ids},
            {"generated_ids", generated_ids},
            {"text", e.text},
            {"stop", e.stop},
            {"embedding", {{"values_shown", e.embedding_values_shown}, {"rows", embedding_rows}}},
            {"steps", steps},
            {"attention", attention_json(e)}};
}

namespace {

// What explain checks before the model loads.
struct ExplainOptions {
    int decode_steps = 4;
    TextFilter filter;             // --layer, --head, --brief
    glass::SamplingParams params;  // greedy unless asked otherwise: an explanation should repeat
};

ExplainOptions explain_options_from_flags(const Flags& flags) {
    if (!flags.positional().empty())
        throw UsageError("unexpected argument '" + flags.positional()[0] + "' (the prompt goes after -p)");
    if (!flags.has("-p")) throw UsageError("glass explain needs a prompt: -p PROMPT");
    ExplainOptions o;
    o.decode_steps = flags.number<int>("-n").value_or(4);
    if (o.decode_steps < 0)
        throw UsageError("-n (decode steps) must be >= 0, got " + std::to_string(o.decode_steps));
    if (flags.has("--html") && flags.get("--html", "").empty()) throw UsageError("--html needs a file name");
    o.filter.layer = flags.number<int>("--layer").value_or(-1);
    o.filter.head = flags.number<int>("--head").value_or(-1);
    o.filter.brief = flags.has("--brief");
    if (o.filter.brief && (flags.has("--layer") || flags.has("--head")))
        throw UsageError("--brief drops every per-layer line; --layer/--head choose among them: give one or the other");
    o.params = sampling_from_flags(flags, /*temperature=*/0.0f);  // greedy unless asked
    return o;
}

// The explanation's header: the model's shape and the request's settings; --layer/--head checked
// against the model.
void describe_request(const Flags& flags, const ExplainOptions& o, const glass::ModelConfig& c, Explanation& e) {
    e.tokenizer_path = flags.has("-t") || glass::model_file_kind(e.model_path) == glass::ModelFileKind::llama2c
                           ? flags.get("-t", kDefaultTokenizer)
                           : e.model_path;
    e.dim = c.dim, e.hidden_dim = c.hidden_dim, e.n_layers = c.n_layers, e.n_heads = c.n_heads;
    e.n_kv_heads = c.n_kv_heads, e.head_dim = c.head_dim, e.vocab_size = c.vocab_size, e.seq_len = c.seq_len;
    e.decode_steps_requested = o.decode_steps;
    e.temperature = o.params.temperature, e.top_p = o.params.top_p, e.top_k = o.params.top_k, e.min_p = o.params.min_p;
    e.seed = flags.number<std::uint64_t>("--seed").value_or(42);
    e.embedding_values_shown = std::min(kEmbeddingValuesShown, c.dim);
    if (flags.has("--layer") && (o.filter.layer < 0 || o.filter.layer >= c.n_layers))
        glass::fail("--layer ", o.filter.layer, ": the model has ", c.n_layers, " layers (0..", c.n_layers - 1, ")");
    if (flags.has("--head") && (o.filter.head < 0 || o.filter.head >= c.n_heads))
        glass::fail("--head ", o.filter.head, ": the model has ", c.n_heads, " query heads per layer (0..",
                    c.n_heads - 1, ")");
}

// --chat: -p is a user message; the prompt is the model's chat template around it (the text
// the model reads, special tokens recognised, BOS only if the template writes it).
void apply_chat_template(const Flags& flags, const glass::Tokenizer& tok, Explanation& e) {
    if (!flags.has("--chat") && (flags.has("--chat-template") || flags.has("--system")))
        throw UsageError("--chat-template and --system go with --chat");
    if (!flags.has("--chat")) return;
    const std::optional<glass::chat::ModelChatTemplate> t = chat_template_from_flags(flags, e.model_path, tok);
    if (!t) glass::fail("--chat: model '", e.model_path, "' carries no chat template; give one with --chat-template FILE");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (flags.has("--system")) messages.push_back({{"role", "system"}, {"content", flags.get("--system", "")}});
    messages.push_back({{"role", "user"}, {"content", e.prompt}});
    e.prompt = glass::chat::ChatTemplate(t->source, "chat template " + t->origin)
                   .render({.messages = messages, .tools = std::nullopt, .add_generation_prompt = true,
                            .bos_token = t->bos_token, .eos_token = t->eos_token,
                            .extra = nlohmann::ordered_json::object(), .now_unix_seconds = std::nullopt});
    e.chat_template = t->origin;
}

// The prompt's ids (checked against the context window), recorded as the first tokens.
std::vector<int> tokenize_prompt(const glass::Tokenizer& tok, int decode_steps, int seq_len, Explanation& e) {
    e.bos_added = e.chat_template.empty() && tok.adds_bos();
    const std::vector<int> prompt_ids = e.chat_template.empty() ? tok.encode(e.prompt, e.bos_added, /*add_eos=*/false)
                                                                : glass::chat::chat_prompt_ids(tok, e.prompt);
    if (prompt_ids.empty()) glass::fail("the prompt is empty (no tokens)");
    const int n_prompt = static_cast<int>(prompt_ids.size());
    if (static_cast<std::int64_t>(n_prompt) + decode_steps > seq_len)
        glass::fail("prompt of ", n_prompt, " tokens plus ", decode_steps, " decode steps needs ",
                    static_cast<std::int64_t>(n_prompt) + decode_steps,
                    " positions, more than the context window of ", seq_len);
    for (int p = 0; p < n_prompt; ++p) e.tokens.push_back({p, prompt_ids[p], tok.piece(prompt_ids[p]), "prompt"});
    return prompt_ids;
}

// The request: prefill the prompt, then feed each chosen token back for N decode steps.
void run_request(const glass::Model& model, const glass::Tokenizer& tok, const std::vector<int>& prompt_ids,
                 const ExplainOptions& o, Explanation& e) {
    glass::KVCache cache(model.config);
    glass::Llama2cRng rng(e.seed);
    int next = run_step(model, tok, cache, prompt_ids, o.params, rng, e);
    int prev = prompt_ids.back();
    glass::Utf8Stream text;
    e.stop = "steps";
    for (int step = 0;; ++step) {
        e.tokens.push_back({cache.length(), next, tok.piece(next), "next"});
        if (next == tok.bos_id() || tok.ends_generation(next)) {  // EOS, <|im_end|>, <end_of_turn> ...
            e.stop = next == tok.bos_id() ? "bos" : "eos";
            break;
        }
        e.text += text.push(tok.decode(prev, next));
        if (step == o.decode_steps) break;
        e.tokens.back().role = "generated";  // it goes through the model now
        prev = next;
        next = run_step(model, tok, cache, {next}, o.params, rng, e);
    }
    e.text += text.finish();
}

}  // namespace

int cmd_explain(int argc, char** argv) {
    Flags flags("explain", {{"-m", true}, {"-t", true}, {"-p", true}, {"-n", true}, {"--json", false},
                            {"--html", true}, {"--temperature", true}, {"--top-p", true}, {"--top-k", true},
                            {"--min-p", true}, {"--seed", true}, {"--layer", true}, {"--head", true},
                            {"--brief", false}, {"--context", true}, {"--chat", false}, {"--chat-template", true},
                            {"--system", true}});
    flags.parse(argc, argv, 2);
    const ExplainOptions options = explain_options_from_flags(flags);

    Explanation e{};
    e.model_path = flags.get("-m", kDefaultModel);
    e.prompt = flags.get("-p", "");
    // -m: a llama2.c checkpoint, a GGUF or a Hugging Face folder; the tokenizer comes with a GGUF
    // or a folder (-t overrides it).
    glass::Model model = glass::load_model(e.model_path);
    context_from_flags(flags, model);
    const std::unique_ptr<glass::Tokenizer> tok_owned =
        glass::load_model_tokenizer(e.model_path, model, flags.get("-t", ""), kDefaultTokenizer);
    const glass::Tokenizer& tok = *tok_owned;
    describe_request(flags, options, model.config, e);
    apply_chat_template(flags, tok, e);
    const std::vector<int> prompt_ids = tokenize_prompt(tok, options.decode_steps, model.config.seq_len, e);
    run_request(model, tok, prompt_ids, options, e);

    const nlohmann::json j = to_json(e);
    if (flags.has("--html")) write_explain_html(flags.get("--html", ""), j);  // fails before printing
    print_text(e, options.filter);
    if (flags.has("--json")) std::cout << dump(j) << "\n";
    return 0;
}

}  // namespace cli
