/// \file
/// \brief glass/speculative.hpp — speculative decoding: a cheap draft guesses k tokens, the target
/// model checks all of them in one pass, and an acceptance rule keeps the target's distribution.
/// ```text
/// In:  a target Session, a Drafter, prompt ids, GenerateOptions, k (drafted tokens per round).
/// Out: what generate() returns, plus the counts: tokens drafted, accepted, target passes.
///
///   logits = target.prefill(prompt)               target pass 1
///   t = sample(logits)                            the first new token, exactly as generate() picks it
///   each round:
///     d_1..d_k, q_1..q_k = drafter(prompt.., t)    q_i: the distribution d_i was drawn from
///     rows = target.verify([t, d_1, .., d_k])      ONE target pass over k+1 positions;
///                                                  rows[i] predicts the token after position i
///     p_i = sampling_distribution(rows[i])         after the request's temperature/top-k/top-p/min-p
///     for i = 1..k:
///       accept d_i with probability min(1, p_{i-1}(d_i) / q_i(d_i))
///       first rejection: emit a draw from max(0, p_{i-1} - q_i), renormalised; the round ends
///     all k accepted: emit a draw from p_k         (the "bonus" token: k+1 tokens for one pass)
///     target.rewind(..)                            the rejected drafts' K/V leave the cache
///   greedy (temperature 0): accept while d_i is the target's argmax; emit the argmax where not.
///
/// Why the output is distributed exactly as the target's, for one drafted position (p, q):
///   P(emit x) = P(draft x and accept) + P(reject) P(residual draw gives x)
///             = q(x) min(1, p(x)/q(x)) + (1 - Σ_y min(p(y), q(y))) max(0, p(x) - q(x)) / Z
///   with Z = Σ_y max(0, p(y) - q(y)) = 1 - Σ_y min(p(y), q(y)); so
///   P(emit x) = min(q(x), p(x)) + max(0, p(x) - q(x)) = p(x).
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/generate.hpp"
#include "glass/sampling.hpp"
#include "glass/session.hpp"

namespace glass {

// ---- The acceptance rule ------------------------------------------------------------------------

/// Which rule decides a drafted token. `exact` is the rule above; `always_accept` is wrong on
/// purpose (it emits the draft's distribution q, not p): the tests and the example use it to show
/// that the statistical check catches a broken rule.
enum class AcceptRule { exact, always_accept };

/// The outcome at one drafted position: kept, or replaced by a draw from the residual.
struct Verdict {
    bool accepted = false;
    int token = 0;  ///< the drafted token if accepted, else the residual draw
};

/// One drafted position. `p` `[vocab]`: the target's distribution there; `q` `[vocab]`: the one
/// `drafted` was drawn from. Draws one coin for the decision and, on a rejection, one for the
/// residual.
inline Verdict accept_or_resample(std::span<const float> p, std::span<const float> q, int drafted, Llama2cRng& rng,
                                  AcceptRule rule = AcceptRule::exact) {
    if (p.size() != q.size() || p.empty()) fail("acceptance: p has ", p.size(), " entries but q has ", q.size());
    if (drafted < 0 || drafted >= static_cast<int>(p.size()))
        fail("acceptance: drafted token ", drafted, " is outside the vocabulary [0, ", p.size(), ")");
    const float qx = q[static_cast<size_t>(drafted)], px = p[static_cast<size_t>(drafted)];
    if (!(qx > 0.0f)) fail("acceptance: the draft proposed token ", drafted, " but gave it probability ", qx);
    if (rule == AcceptRule::always_accept) return {true, drafted};

    const float coin = rng.next_f32();  // in [0, 1)
    if (coin < std::min(1.0f, px / qx)) return {true, drafted};

    // Rejected: draw from the residual max(0, p - q), renormalised: the mass p has where q fell short.
    std::vector<float> residual(p.size());
    float mass = 0.0f;
    for (size_t i = 0; i < p.size(); ++i) {
        residual[i] = std::max(0.0f, p[i] - q[i]);
        mass += residual[i];
    }
    // mass is 0 only when p == q up to rounding, where a rejection has probability ~0: draw from p.
    if (!(mass > 0.0f)) residual.assign(p.begin(), p.end()), mass = 1.0f;
    for (float& r : residual) r /= mass;
    return {false, draw_kept_in_id_order(residual, rng.next_f32())};
}

// ---- Drafters -----------------------------------------------------------------------------------

/// k guessed tokens and the distribution each was drawn from.
struct Draft {
    std::vector<int> tokens;              ///< [k'] (k' <= k: a drafter may propose fewer, even none)
    std::vector<std::vector<float>> q;    ///< [k'][vocab]; empty: each token was certain (q one-hot)
};

/// Anything that proposes tokens: a smaller model, the target's own first layers, an n-gram lookup.
class Drafter {
public:
    virtual ~Drafter() = default;
    virtual std::string name() const = 0;
    /// Up to `k` tokens to follow `ids` (the prompt and every token so far), drawn with `params`
    /// from `rng` where the drafter has a distribution (greedy: its argmax).
    virtual Draft propose(std::span<const int> ids, int k, const SamplingParams& params, Llama2cRng& rng) = 0;
};

/// Prompt lookup (n-gram) drafting: find the latest earlier place where the last n tokens
/// (n = max_n down to 1) occurred, and propose the tokens that followed there. No model, so the
/// draft is certain: q is one-hot, and a token is accepted with probability p(token).
class NgramDrafter : public Drafter {
public:
    explicit NgramDrafter(int max_n = 3) : max_n_(max_n) {
        if (max_n < 1 || max_n > 64) fail("ngram drafter: n must be in [1, 64], got ", max_n);
    }
    std::string name() const override { return "ngram:" + std::to_string(max_n_); }

    Draft propose(std::span<const int> ids, int k, const SamplingParams&, Llama2cRng&) override {
        Draft d;
        const int len = static_cast<int>(ids.size());
        for (int n = std::min(max_n_, len - 1); n >= 1 && d.tokens.empty(); --n) {
            const std::span<const int> tail = ids.subspan(static_cast<size_t>(len - n));
            for (int start = len - n - 1; start >= 0; --start) {  // latest match first
                if (!std::equal(tail.begin(), tail.end(), ids.begin() + start)) continue;
                for (int i = start + n; i < len && static_cast<int>(d.tokens.size()) < k; ++i)
                    d.tokens.push_back(ids[static_cast<size_t>(i)]);
                break;
            }
        }
        return d;
    }

private:
    int max_n_;
};

/// A model as the drafter: a Session of its own (a smaller model with the target's vocabulary,
/// or the target's first layers: first_layers below) whose KV cache follows the sequence. Each
/// round it catches up on the tokens it has not seen, then decodes k tokens one by one.
class ModelDrafter : public Drafter {
public:
    ModelDrafter(std::unique_ptr<Session> session, std::string name)
        : session_(std::move(session)), name_(std::move(name)) {}
    std::string name() const override { return name_; }

    Draft propose(std::span<const int> ids, int k, const SamplingParams& params, Llama2cRng& rng) override {
        Draft d;
        // Nothing to propose past the draft's own context window (a smaller model's may be shorter).
        if (k <= 0 || ids.empty() || static_cast<std::int64_t>(ids.size()) >= session_->config().seq_len) return d;
        // Keep the K/V of the longest prefix this cache shares with ids (all but at least one
        // token, so the catch-up pass has logits to return), drop the rest: rejected drafts.
        size_t keep = 0;
        while (keep < cached_.size() && keep + 1 < ids.size() && cached_[keep] == ids[keep]) ++keep;
        session_->rewind(static_cast<int>(keep));
        cached_.assign(ids.begin(), ids.end());
        std::span<const float> logits = session_->prefill(ids.subspan(keep));
        const bool greedy = params.temperature == 0.0f;
        for (int i = 0; i < k; ++i) {
            int token;
            if (greedy) {
                token = sample(logits, params, rng);  // the checked argmax; q is one-hot, so no copy
            } else {  // draw from the very q the judge will divide by: one softmax, one number from rng
                d.q.push_back(sampling_distribution(logits, params));
                token = draw_kept_in_id_order(d.q.back(), rng.next_f32());
            }
            d.tokens.push_back(token);
            if (i + 1 == k || session_->position() >= session_->config().seq_len) break;
            logits = session_->decode(token);
            cached_.push_back(token);
        }
        return d;
    }

private:
    std::unique_ptr<Session> session_;
    std::string name_;
    std::vector<int> cached_;  // the ids whose K/V the draft session holds, in order
};

/// The target's first `n_layers` layers with its own final norm and classifier: a real draft
/// for any model, sharing its weights (self-speculative decoding). It computes exactly what the
/// target computes, stopping early.
inline Model first_layers(const Model& m, int n_layers) {
    if (n_layers < 1 || n_layers >= m.config.n_layers)
        fail("a draft of the first N layers needs N in [1, ", m.config.n_layers - 1, "] (the model has ",
             m.config.n_layers, " layers), got ", n_layers);
    Model d;
    d.config = m.config;
    d.config.n_layers = n_layers;
    d.layers = std::vector<LayerWeights>(m.layers.begin(), m.layers.begin() + n_layers);  // views, not copies
    d.token_embedding = m.token_embedding;
    d.rms_final = m.rms_final;
    d.classifier = m.classifier;
    d.storage = m.storage;
    const std::int64_t per_layer = (m.weight_bytes - 4 * (std::int64_t{m.config.dim} +
                                                          std::int64_t{m.config.vocab_size} * m.config.dim)) /
                                   m.config.n_layers;
    d.weight_bytes = m.weight_bytes - per_layer * (m.config.n_layers - n_layers);
    return d;
}

/// One round, for the example's token-by-token display.
struct SpeculativeRound {
    std::vector<int> drafted;   ///< what the drafter proposed
    int accepted = 0;           ///< how many of them were kept (a prefix)
    std::vector<int> emitted;   ///< accepted drafts, then the correction or the bonus token
};

/// One round's decisions, in order: `rows` `[(n+1), vocab]` are the target's logits at the
/// verified positions (row i predicts what follows the i-th token of [t, d_1..d_n]). Drafts are
/// accepted until the first rejection, which emits the residual draw; if all n are accepted, a
/// bonus token is drawn from the last row. Greedy (temperature 0): a draft is accepted when it is
/// the row's argmax, and the argmax is emitted where it is not.
inline SpeculativeRound judge_draft(std::span<const float> rows, int vocab, const Draft& draft,
                                    const SamplingParams& params, Llama2cRng& rng,
                                    AcceptRule rule = AcceptRule::exact) {
    const int n = static_cast<int>(draft.tokens.size());
    if (rows.size() != static_cast<size_t>(n + 1) * static_cast<size_t>(vocab))
        fail("judge_draft: ", rows.size(), " logits for ", n, " drafted tokens of a ", vocab, "-token vocabulary");
    if (!draft.q.empty() && draft.q.size() != draft.tokens.size())
        fail("judge_draft: ", draft.q.size(), " distributions for ", n, " drafted tokens");
    const auto row = [&](int i) { return rows.subspan(static_cast<size_t>(i) * vocab, static_cast<size_t>(vocab)); };
    SpeculativeRound round;
    round.drafted = draft.tokens;
    std::vector<float> one_hot;  // q for a drafter without a distribution (it was certain); one per round
    int hot = -1;                // the index of one_hot's 1, if any
    for (int i = 0; i < n; ++i) {
        const int d = draft.tokens[static_cast<size_t>(i)];
        if (d < 0 || d >= vocab) fail("drafted token ", d, " is outside the vocabulary [0, ", vocab, ")");
        Verdict v;
        if (params.temperature == 0.0f) {
            const int best = sample_argmax(row(i));
            v.accepted = d == best || rule == AcceptRule::always_accept;
            v.token = v.accepted ? d : best;
        } else {
            if (draft.q.empty()) {  // filled once per round; after that only the 1 moves
                if (one_hot.empty()) one_hot.assign(static_cast<size_t>(vocab), 0.0f);
                if (hot >= 0) one_hot[static_cast<size_t>(hot)] = 0.0f;
                one_hot[static_cast<size_t>(d)] = 1.0f;
                hot = d;
            }
            const std::span<const float> q = draft.q.empty() ? std::span<const float>(one_hot)
                                                             : std::span<const float>(draft.q[static_cast<size_t>(i)]);
            v = accept_or_resample(sampling_distribution(row(i), params), q, d, rng, rule);
        }
        round.emitted.push_back(v.token);
        if (!v.accepted) return round;
        ++round.accepted;
    }
    round.emitted.push_back(sample(row(n), params, rng));  // every draft accepted: the bonus token
    return round;
}

// ---- The loop -----------------------------------------------------------------------------------

/// drafter.propose(), refusing what no judge could use: more than k tokens, ids outside the
/// vocabulary. (A wrong number of distributions is judge_draft's to refuse.)
inline Draft checked_draft(Drafter& drafter, std::span<const int> ids, int k, const SamplingParams& params,
                           Llama2cRng& rng, int vocab) {
    Draft draft = drafter.propose(ids, k, params, rng);
    if (static_cast<int>(draft.tokens.size()) > k)
        fail("drafter ", drafter.name(), " proposed ", draft.tokens.size(), " tokens, more than the ", k, " asked");
    for (const int d : draft.tokens)
        if (d < 0 || d >= vocab)
            fail("drafter ", drafter.name(), " proposed token ", d, ", outside the vocabulary [0, ", vocab, ")");
    return draft;
}

struct SpeculativeOptions {
    int k = 4;                            ///< tokens drafted per round (1..16)
    AcceptRule rule = AcceptRule::exact;  ///< always_accept only to show it is wrong
};

struct SpeculativeStats {
    std::int64_t proposed = 0;       ///< drafted tokens, all rounds
    std::int64_t accepted = 0;       ///< of which accepted
    int target_passes = 0;           ///< prefill + one verify per round
    std::vector<SpeculativeRound> rounds;
    double acceptance_rate() const { return proposed > 0 ? double(accepted) / double(proposed) : 0.0; }
};

struct SpeculativeResult {
    GenerateResult result;  ///< exactly what generate() returns (ids, text, stop reason, metrics, logprobs)
    SpeculativeStats stats;
};

/// generate_from_ids() with a drafter: the same checks, stop rules, streaming and metrics.
/// Greedy output is token for token generate()'s; sampled output has the same distribution
/// (the random draws differ: the rule spends its own coins).
inline SpeculativeResult generate_speculative_from_ids(
    Session& target, Drafter& drafter, const Tokenizer& tokenizer, std::vector<int> prompt_ids,
    const GenerateOptions& options, const SpeculativeOptions& spec,
    const std::function<void(std::string_view)>& on_text = {},
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now()) {
    using clock = std::chrono::steady_clock;
    const auto ms_since_start = [t0] { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); };
    if (spec.k < 1 || spec.k > 16) fail("draft k (tokens drafted per round) must be in [1, 16], got ", spec.k);
    check_generate_request(target, tokenizer, options, prompt_ids);
    if (options.cached_prompt_tokens != 0)
        fail("speculative decoding starts its sessions afresh: cached prompt tokens must be 0, got ", options.cached_prompt_tokens);

    SpeculativeResult out{new_result(target, std::move(prompt_ids)), {}};
    GenerateResult& r = out.result;
    SpeculativeStats& s = out.stats;
    GenerationMetrics& m = r.metrics;
    const ModelConfig& config = target.config();
    const int vocab = config.vocab_size;
    const int n_prompt = m.prompt_tokens;
    if (options.max_new_tokens == 0) return out;

    Llama2cRng rng(options.seed);
    TokenOutput output(tokenizer, options, r.prompt_ids.back());
    const bool want_logprobs = options.logprobs || options.top_logprobs > 0;
    std::vector<int> ids = r.prompt_ids;  // the whole sequence so far
    // Hands one chosen token to the output (stop rules, streaming); false once it stopped.
    const auto emit = [&](int token, std::span<const float> logits) {
        m.token_ms.push_back(ms_since_start());
        if (want_logprobs) r.logprobs.push_back(step_logprobs(logits, token, options.top_logprobs));
        const std::string text = output.push(token, static_cast<int>(ids.size()), config.seq_len);
        ids.push_back(token);
        if (!text.empty() && on_text) on_text(text);
        return !output.done();
    };

    target.reset();
    std::span<const float> logits = target.prefill(r.prompt_ids);  // [vocab], the last prompt position
    s.target_passes = 1;
    bool going = emit(sample(logits, options.sampling, rng), logits);
    while (going) {
        // ids.back() (t) has no K/V yet. Draft at most what fits the window and what may still be
        // generated (a round emits up to k+1 tokens).
        const int t_position = static_cast<int>(ids.size()) - 1;  // == target.position()
        const int remaining = options.max_new_tokens - static_cast<int>(output.generated_ids().size());
        const int k = std::min({spec.k, config.seq_len - t_position - 1, remaining - 1});
        const Draft draft = k > 0 ? checked_draft(drafter, ids, k, options.sampling, rng, vocab) : Draft{};
        const int n_draft = static_cast<int>(draft.tokens.size());

        std::vector<int> chunk = {ids.back()};
        chunk.insert(chunk.end(), draft.tokens.begin(), draft.tokens.end());
        const std::span<const float> rows = target.verify(chunk);  // [(n_draft+1), vocab]
        ++s.target_passes;
        const auto row = [&](int i) { return rows.subspan(static_cast<size_t>(i) * vocab, static_cast<size_t>(vocab)); };

        SpeculativeRound round = judge_draft(rows, vocab, draft, options.sampling, rng, spec.rule);
        s.proposed += n_draft;
        s.accepted += round.accepted;
        // Keep t and the accepted drafts; the rejected drafts' positions are forgotten.
        target.rewind(t_position + 1 + round.accepted);
        for (size_t j = 0; j < round.emitted.size() && going; ++j)  // emitted[j] was predicted by row j
            going = emit(round.emitted[j], row(static_cast<int>(j)));
        s.rounds.push_back(std::move(round));
    }
    r.generated_ids = output.generated_ids();
    r.text = output.text();
    r.stop_reason = output.stop_reason();
    finish_metrics(m, n_prompt);
    return out;
}

/// The whole request: encode the prompt (BOS first), then generate_speculative_from_ids().
inline SpeculativeResult generate_speculative(Session& target, Drafter& drafter, const Tokenizer& tokenizer,
                                              std::string_view prompt, const GenerateOptions& options,
                                              const SpeculativeOptions& spec,
                                              const std::function<void(std::string_view)>& on_text = {}) {
    const auto t0 = std::chrono::steady_clock::now();
    return generate_speculative_from_ids(target, drafter, tokenizer,
                                         tokenizer.encode(prompt, /*add_bos=*/true, /*add_eos=*/false), options,
                                         spec, on_text, t0);
}

}  // namespace glass
