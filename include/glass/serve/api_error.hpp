/// \file
/// \brief glass/serve/api_error.hpp — a request the server refuses, in OpenAI's terms: the HTTP
/// status, the message naming the value at fault, the parameter and a short code.
/// ```text
/// In:  whatever check a request fails (openai_api.hpp, openai_chat.hpp).
/// Out: ApiError; the server answers it as {"error": {"message", "type", "param", "code"}}.
///      Both files write their messages with detail::shown (the value at fault, as the client
///      wrote it) and detail::invalid (400 "invalid_value").
/// ```
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

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

namespace detail {

// A value as the client wrote it (keys in its order), shortened for an error message.
inline std::string shown(const nlohmann::ordered_json& v) {
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A parameter with a value this server refuses: 400, "invalid_value".
inline ApiError invalid(const std::string& param, const std::string& message) {
    return ApiError(400, message, param, "invalid_value");
}

}  // namespace detail

}  // namespace glass::serve::openai
