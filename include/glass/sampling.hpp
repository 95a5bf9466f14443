/// \file
/// \brief glass/sampling.hpp — journey step 7: logits -> the next token.
/// ```text
/// In:  logits [vocab] (one score per token, any real numbers); sampling parameters; a seeded RNG.
/// Out: one token id.
///
/// The pipeline, each stage optional:
///   greedy (temperature 0): the id with the largest logit, lowest id on a tie.
///   temperature T:  p = softmax(logits / T). T < 1 sharpens, T = 1 leaves the model's
///                   distribution as is, T > 1 flattens it.
///   top-k:          keep the k most probable tokens; renormalize them to sum to 1.
///   min-p:          keep tokens with p >= min_p · p_max; renormalize.
///   top-p (nucleus):keep the smallest most-probable set whose probability reaches top_p
///                   (running sum >= top_p); top_p = 1 keeps everything.
///   draw:           one uniform coin in [0, 1), scaled by the kept mass, walks the cumulative
///                   sum of what is kept. Scaling the coin picks with the same odds as
///                   renormalizing, so top-p does not renormalize. top-k and min-p do, so that a
///                   top-p after them measures p among the tokens they kept.
///
/// Two nucleus rules (SamplingParams::nucleus):
///   reaches_p           the textbook rule above: stop at the token whose running sum >= top_p.
///                       C12: 0.80 + 0.10 = 0.90 reaches 0.9, so {Paris, Lyon}.
///   exceeds_p_llama2c   llama2.c's: stop at the token whose running sum > top_p, after first
///                       dropping tokens below (1 - top_p)/(n - 1), which can never be needed.
/// They keep different sets only when a running sum lands exactly on top_p: reaches_p stops
/// there, exceeds_p_llama2c takes one more token. With 0.5/0.25/0.125/0.125 (exact in fp32) and
/// top_p = 0.75, reaches_p keeps 2 tokens and exceeds_p_llama2c keeps 3. C12 is such a landing on
/// paper, but in fp32 0.8f + 0.1f rounds to 0.90000004 > 0.9f (0.89999998), so llama2.c's rule
/// also keeps {Paris, Lyon} there, by rounding.
///
/// The default is exceeds_p_llama2c: with it, and only temperature and top-p set, this reproduces
/// llama2.c's sampler draw for draw (its xorshift64* generator, its fp32 softmax, its nucleus
/// rule and cutoff, its stable descending sort), so `--seed N` gives the same story as run.c, and
/// the tests replay run.c's seeded stories. Real model distributions almost never put a running
/// sum exactly on top_p, so the default costs nothing in practice.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "glass/errors.hpp"

namespace glass {

/// llama2.c's random number generator: xorshift64* (Marsaglia / Vigna).
class Llama2cRng {
public:
    explicit Llama2cRng(std::uint64_t seed) : state_(seed) {}
    std::uint32_t next_u32() {
        state_ ^= state_ >> 12;
        state_ ^= state_ << 25;
        state_ ^= state_ >> 27;
        return static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
    }
    float next_f32() { return static_cast<float>(next_u32() >> 8) / 16777216.0f; }  // [0, 1)
    std::uint64_t state() const { return state_; }

private:
    std::uint64_t state_;
};

/// Where the nucleus (top-p) walk stops; they differ only when a running sum equals top_p exactly.
enum class NucleusRule {
    exceeds_p_llama2c,  ///< llama2.c: stop once the running sum is greater than top_p (the default)
    reaches_p,          ///< textbook: stop once the running sum is greater than or equal to top_p
};

struct SamplingParams {
    float temperature = 1.0f;  ///< 0 = greedy
    float top_p = 1.0f;        ///< (0, 1]; 1 = no nucleus truncation
    int top_k = 0;             ///< 0 = off
    float min_p = 0.0f;        ///< [0, 1]; 0 = off
    NucleusRule nucleus = NucleusRule::exceeds_p_llama2c;  ///< so that a seed replays run.c
};

inline void validate(const SamplingParams& p) {
    if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
        fail("temperature must be a finite number >= 0, got ", p.temperature);
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("top-p must be in (0, 1], got ", p.top_p);
    if (p.top_k < 0) fail("top-k must be >= 0 (0 = off), got ", p.top_k);
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("min-p must be in [0, 1], got ", p.min_p);
}

inline void check_finite(std::span<const float> logits) {
    for (size_t i = 0; i < logits.size(); ++i)
        if (!std::isfinite(logits[i]))
            fail("logit of token ", i, " is ", logits[i], ": the model produced a non-finite value");
}

/// Greedy: first index of the maximum.
inline int sample_argmax(std::span<const float> logits) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(logits.size()); ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/// p_i = exp(l_i/T - max) / Σ, in fp32 with a sequential sum (llama2.c's order of operations).
inline std::vector<float> probabilities(std::span<const float> logits, float temperature) {
    if (!(temperature > 0.0f) || logits.empty())
        fail("probabilities need a temperature > 0 (0 means greedy: use sample_argmax), got ", temperature);
    std::vector<float> p(logits.begin(), logits.end());
    for (float& x : p) x /= temperature;
    float max_value = p[0];
    for (float x : p) max_value = std::max(max_value, x);
    float sum = 0.0f;
    for (float& x : p) {
        x = std::exp(x - max_value);
        sum += x;
    }
    for (float& x : p) x /= sum;
    return p;
}

struct Candidate {
    int id;
    float p;
};

/// Tokens sorted by probability, largest first; equal probabilities keep id order.
inline std::vector<Candidate> sorted_candidates(std::span<const float> probs) {
    std::vector<Candidate> c(probs.size());
    for (size_t i = 0; i < probs.size(); ++i) c[i] = {static_cast<int>(i), probs[i]};
    std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.p > b.p; });
    return c;
}

/// Scale the kept probabilities to sum to 1.
inline void renormalize(std::vector<Candidate>& c) {
    float sum = 0.0f;
    for (const Candidate& x : c) sum += x.p;
    for (Candidate& x : c) x.p /= sum;
}

/// Keep the k most probable (c sorted descending) and renormalize them.
inline void keep_top_k(std::vector<Candidate>& c, int k) {
    if (k > 0 && static_cast<size_t>(k) < c.size()) {
        c.resize(static_cast<size_t>(k));
        renormalize(c);
    }
}

/// Keep tokens at least min_p times as probable as the most probable one, renormalized.
inline void keep_min_p(std::vector<Candidate>& c, float min_p) {
    if (min_p <= 0.0f || c.empty()) return;
    const float threshold = min_p * c.front().p;
    size_t n = 0;
    while (n < c.size() && c[n].p >= threshold) ++n;
    if (n < c.size()) {
        c.resize(n);
        renormalize(c);
    }
}

/// Nucleus, textbook rule: the shortest prefix of `c` (sorted descending) whose probability
/// reaches top_p (`running sum >= top_p`). If fp32 rounding keeps the sum just short of top_p,
/// everything is kept.
inline void keep_top_p_reaching(std::vector<Candidate>& c, float top_p) {
    if (top_p >= 1.0f) return;
    float cumulative = 0.0f;
    for (size_t i = 0; i < c.size(); ++i) {
        cumulative += c[i].p;
        if (cumulative >= top_p) {
            c.resize(i + 1);
            return;
        }
    }
}

/// Nucleus, llama2.c's rule (its sample_topp, line for line): the shortest prefix whose
/// probability exceeds top_p (`running sum > top_p`). Tokens below (1 - top_p)/(n - 1) can
/// never be needed (together they hold less than 1 - top_p), so they are dropped first; if fp32
/// rounding means the running sum never exceeds top_p, everything above that cutoff is kept.
inline void keep_top_p_llama2c(std::vector<Candidate>& c, float top_p) {
    if (top_p >= 1.0f || c.size() < 2) return;
    const float cutoff = (1.0f - top_p) / static_cast<float>(c.size() - 1);
    size_t n = 0;
    while (n < c.size() && c[n].p >= cutoff) ++n;
    size_t keep = n;
    float cumulative = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        cumulative += c[i].p;
        if (cumulative > top_p) {
            keep = i + 1;
            break;
        }
    }
    c.resize(std::max<size_t>(keep, 1));
}

/// Top-p with the chosen rule (c sorted descending). Keeps what it keeps without renormalizing:
/// draw() scales its coin by the kept mass instead.
inline void keep_top_p(std::vector<Candidate>& c, float top_p,
                       NucleusRule rule = NucleusRule::exceeds_p_llama2c) {
    if (rule == NucleusRule::reaches_p) keep_top_p_reaching(c, top_p);
    else keep_top_p_llama2c(c, top_p);
}

/// Walk the cumulative distribution of `c` (in its order) to where the draw `coin` in [0,1)
/// lands; `coin` is scaled by the kept mass, so no explicit renormalization is needed.
inline int draw(const std::vector<Candidate>& c, float coin) {
    float mass = 0.0f;
    for (const Candidate& x : c) mass += x.p;
    const float r = coin * mass;
    float cdf = 0.0f;
    for (const Candidate& x : c) {
        cdf += x.p;
        if (r < cdf) return x.id;
    }
    return c.back().id;  // rounding: r landed past the last cdf value
}

/// Multinomial draw over all tokens in id order (no truncation), exactly as llama2.c.
inline int draw_in_id_order(std::span<const float> probs, float coin) {
    float cdf = 0.0f;
    for (size_t i = 0; i < probs.size(); ++i) {
        cdf += probs[i];
        if (coin < cdf) return static_cast<int>(i);
    }
    return static_cast<int>(probs.size()) - 1;
}

/// draw_in_id_order for a distribution with zeros in it (truncated, or a residual): when rounding
/// leaves coin past the last cdf value, the last token with probability > 0 is drawn, never a
/// dropped one. (llama2.c's fallback, the last id, is kept above for its goldens.)
inline int draw_kept_in_id_order(std::span<const float> probs, float coin) {
    const int token = draw_in_id_order(probs, coin);
    for (int i = token; i >= 0; --i)
        if (probs[static_cast<size_t>(i)] > 0.0f) return i;
    fail("cannot draw from a distribution with no mass (", probs.size(), " entries)");
}

/// The whole pipeline. Draws exactly one number from rng unless greedy (like llama2.c).
inline int sample(std::span<const float> logits, const SamplingParams& params, Llama2cRng& rng) {
    validate(params);
    if (logits.empty()) fail("cannot sample from an empty vocabulary");
    check_finite(logits);
    if (params.temperature == 0.0f) return sample_argmax(logits);

    const std::vector<float> probs = probabilities(logits, params.temperature);
    const float coin = rng.next_f32();
    if (params.top_k == 0 && params.min_p == 0.0f && params.top_p >= 1.0f)
        return draw_in_id_order(probs, coin);

    std::vector<Candidate> c = sorted_candidates(probs);
    keep_top_k(c, params.top_k);
    keep_min_p(c, params.min_p);
    keep_top_p(c, params.top_p, params.nucleus);
    return draw(c, coin);
}

/// The distribution sample() draws from, per token id [vocab]: what a display should show.
/// Temperature 0 gives one-hot at sample_argmax (greedy is the T -> 0 limit of softmax(l / T));
/// otherwise softmax at T, with the truncations applied and the kept tokens renormalized to sum
/// to 1 (the odds draw() gives them); dropped tokens get 0.
inline std::vector<float> sampling_distribution(std::span<const float> logits, const SamplingParams& params) {
    validate(params);
    if (logits.empty()) fail("cannot sample from an empty vocabulary");
    check_finite(logits);
    std::vector<float> dist(logits.size(), 0.0f);
    if (params.temperature == 0.0f) {
        dist[static_cast<size_t>(sample_argmax(logits))] = 1.0f;
        return dist;
    }
    const std::vector<float> probs = probabilities(logits, params.temperature);
    if (params.top_k == 0 && params.min_p == 0.0f && params.top_p >= 1.0f) return probs;

    std::vector<Candidate> c = sorted_candidates(probs);
    keep_top_k(c, params.top_k);
    keep_min_p(c, params.min_p);
    keep_top_p(c, params.top_p, params.nucleus);
    renormalize(c);
    for (const Candidate& x : c) dist[static_cast<size_t>(x.id)] = x.p;
    return dist;
}

}  // namespace glass
