/// \file
/// \brief glass/serve/outcome.hpp — how a request to the server ended, as the server counts it.
/// ```text
/// A request refused before it reached the engine (4xx, or 503 for a full queue or a shutdown)
/// is "rejected" (counted by the HTTP layer); one the engine refused or failed is "error"; one
/// cancelled (client gone, shutdown) is "cancelled"; the others carry their finish_reason:
/// "stop" (EOS, BOS, a stop string) or "length" (max_tokens, a full context).
///
/// Both views of a running server use it: the Prometheus counters (prometheus_counters.hpp)
/// count requests by outcome, and the live page's engine state (engine_state.hpp) shows it for
/// each recent request.
/// ```
#pragma once

#include "glass/generate.hpp"

namespace glass::serve {

enum class Outcome { stop, length, cancelled, error, rejected };
inline constexpr int kOutcomes = 5;

inline const char* to_string(Outcome o) {
    switch (o) {
        case Outcome::stop: return "stop";
        case Outcome::length: return "length";
        case Outcome::cancelled: return "cancelled";
        case Outcome::error: return "error";
        case Outcome::rejected: return "rejected";
    }
    return "?";
}

/// The outcome of a request the engine ran: its finish_reason (as openai_api.hpp's), or cancelled.
inline Outcome outcome_of(StopReason r) {
    switch (r) {
        case StopReason::length:
        case StopReason::context_full: return Outcome::length;
        case StopReason::bos:
        case StopReason::eos:
        case StopReason::stop_string: return Outcome::stop;
        case StopReason::cancelled: return Outcome::cancelled;
    }
    return Outcome::stop;
}

}  // namespace glass::serve
