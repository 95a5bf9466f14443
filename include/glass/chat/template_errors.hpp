/// \file
/// \brief glass/chat/template_errors.hpp — how a chat template says no.
/// ```text
/// Two ways a template can fail to give a prompt, and they mean different things:
///   TemplateError   the template is broken, or uses a construct glass does not implement, or
///                   runs past a limit (recursion, loop iterations, output size). what() names
///                   the construct and the line: "chat template line 12: unsupported filter
///                   'wordwrap'".
///   TemplateRaised  the template itself called raise_exception(msg): it refuses this
///                   conversation (e.g. "Conversation roles must alternate ..."). what() == msg.
/// Both are glass::Error, so a caller that only wants "it failed, say why" catches that.
/// ```
#pragma once

#include <string>

#include "glass/errors.hpp"

namespace glass::chat {

class TemplateError : public glass::Error {
public:
    /// `line` 0 means "no line" (e.g. a limit of the whole render); `name` starts the message.
    TemplateError(const std::string& what, int line, const std::string& name = "chat template")
        : glass::Error(name + (line > 0 ? " line " + std::to_string(line) : std::string()) + ": " + what),
          line_(line), message_(what) {}
    int line() const { return line_; }
    /// what() without the "chat template line N: " in front.
    const std::string& message() const { return message_; }

private:
    int line_;
    std::string message_;
};

class TemplateRaised : public glass::Error {
public:
    using glass::Error::Error;
};

}  // namespace glass::chat
