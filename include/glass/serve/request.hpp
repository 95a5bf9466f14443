/// \file
/// \brief glass/serve/request.hpp — one request inside the serving engine: its tokens, its state, its blocks.
/// ```text
/// A request is what generate() keeps in local variables, made into a struct so that many can be
/// in flight at once, each at its own position:
///
///   tokens      prompt ids, then every generated id      [n_tokens]
///   computed    how many of tokens have K/V in the pool  (tokens[computed..] still need a pass)
///   block_table the pool blocks holding positions 0..    [ceil(computed / block_size)]
///   status      waiting -> running -> finished  (running -> waiting again when preempted)
///
/// A request that is decoding has exactly one uncomputed token: the one it sampled last, which
/// enters the cache at its next step (as in generate()). A waiting request has its whole prompt
/// uncomputed; a preempted one its prompt and everything it generated, computed again later
/// (minus what the prefix cache still holds). Sampling uses the request's own RNG, seeded from
/// its options, so it draws exactly the numbers generate() would draw alone.
///
/// With speculative decoding on (engine.hpp), a decoding request also has a drafter of its own
/// and a lookahead: how many drafted tokens it would like checked beside its last token in the
/// next step. The drafts are not tokens yet: they join `tokens` only once accepted.
/// ```
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "glass/generate.hpp"
#include "glass/sampling.hpp"
#include "glass/speculative.hpp"

namespace glass::serve {

enum class RequestStatus { waiting, running, finished };

inline const char* to_string(RequestStatus s) {
    switch (s) {
        case RequestStatus::waiting: return "waiting";
        case RequestStatus::running: return "running";
        case RequestStatus::finished: return "finished";
    }
    return "?";
}

using Clock = std::chrono::steady_clock;

struct Request {
    Request(int id, std::vector<int> prompt, const GenerateOptions& options, int last_prompt_id,
            const Tokenizer& tokenizer)
        : id(id), prompt_ids(std::move(prompt)), options(options), rng(options.seed),
          output(tokenizer, this->options, last_prompt_id), tokens(prompt_ids) {}
    Request(const Request&) = delete;  // `output` points at this request's own options
    Request& operator=(const Request&) = delete;

    int id;
    std::vector<int> prompt_ids;
    GenerateOptions options;
    Llama2cRng rng;                ///< this request's own random numbers
    TokenOutput output;            ///< stop rules and streamed text, exactly as generate() applies them

    RequestStatus status = RequestStatus::waiting;
    std::vector<int> tokens;       ///< prompt, then generated ids
    int computed = 0;              ///< tokens[0 .. computed) have K/V in the pool
    std::vector<int> block_table;  ///< pool blocks for positions 0, block_size, 2·block_size, ...
    int cached_tokens = 0;         ///< prompt tokens the prefix cache supplied on first admission
    int preemptions = 0;           ///< times its blocks were taken back and it was recomputed
    int scheduled_steps = 0;       ///< engine steps that computed part of it

    // Disaggregated prefill/decode (remote_prefill.hpp; false and 0 without it).
    bool awaiting_kv = false;      ///< its blocks are reserved; a prefill worker computes its tokens
    int prefill_ticket = 0;        ///< which submission an arriving shipment must answer

    // Speculative decoding (engine.hpp; empty and zero without it).
    std::unique_ptr<Drafter> drafter;  ///< this request's own (a model draft keeps its own K/V)
    int lookahead = 0;             ///< drafted positions it would like checked next step
    std::int64_t draft_proposed = 0;  ///< drafted tokens checked, all steps
    std::int64_t draft_accepted = 0;  ///< of which accepted

    Clock::time_point arrival = Clock::now();
    GenerationMetrics metrics;     ///< token_ms: ms from arrival at which each token was chosen
    std::vector<StepLogprobs> logprobs;  ///< per generated token, when the options ask for them

    int generated() const { return static_cast<int>(tokens.size() - prompt_ids.size()); }
    int uncomputed() const { return static_cast<int>(tokens.size()) - computed; }
    /// Its one uncomputed token is the one it sampled last: its next pass is a decode step.
    bool decoding() const { return uncomputed() == 1 && generated() > 0; }
};

}  // namespace glass::serve
