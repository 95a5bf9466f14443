/// \file
/// \brief glass/serve/api_error.hpp — a request the server refuses, in OpenAI's terms: the HTTP
/// status, the message naming the value at fault, the parameter and a short code.
/// ```text
/// In:  whatever check a request fails (openai_api.hpp, openai_chat.hpp).
/// Out: ApiError; the server answers it as {"error": {"message", "type", "param", "code"}}.
/// ```
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace glass::serve::openai {

/// A request the server refuses: the HTTP status and OpenAI's error fields.
struct ApiError : std::runtime_error {
    ApiError(int status, const std::string& message, std::string param = "", std::string code = "",
             std::string type = "invalid_request_error")
        : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)),
          type(std::move(type)) {}
    int status;
    std::string param;  ///< the request field at fault ("" = none)
    std::string code;   ///< a short machine-readable reason ("" = none)
    std::string type;   ///< "invalid_request_error", "server_error", ...
};

}  // namespace glass::serve::openai
