/// \file
/// \brief glass/errors.hpp — how glass reports bad input.
/// ```text
/// Every problem a user can cause (a missing file, a truncated checkpoint, an id outside the
/// vocabulary, a NaN temperature, ...) becomes a glass::Error whose message names the problem and
/// the offending value. Nothing in glass aborts or asserts on user input; the CLI prints the
/// message on one line and exits non-zero.
/// ```
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace glass {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// message_of("block ", b, " is outside the pool of ", n) — one message built from parts, for
/// a caller that reports a problem rather than throws it.
template <typename... Parts>
std::string message_of(Parts&&... parts) {
    std::ostringstream message;
    (message << ... << std::forward<Parts>(parts));
    return message.str();
}

/// fail("token id ", id, " is outside the vocabulary [0, ", n, ")") — builds the message from parts.
template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
    throw Error(message_of(std::forward<Parts>(parts)...));
}

}  // namespace glass
