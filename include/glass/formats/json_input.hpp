/// \file
/// \brief glass/formats/json_input.hpp — reading JSON that came from anywhere (tokenizer.json, encoder.json).
/// ```text
/// In:  the text of a JSON file nobody vouches for.
/// Out: a parsed nlohmann::json, token ids checked before anything uses them, and short
///      descriptions of values for error messages.
///
/// Three rules, each against one way a few hundred bytes could crash a loader:
///   depth    nesting is checked (a scan, no recursion) BEFORE parsing: copying, comparing or
///            printing a value recurses once per level, so 200,000 '[' would overflow the stack.
///   ids      an id must be an integer JSON number (not 1e20, not "7") inside [0, limit), where
///            the limit comes from what the file holds (its number of entries): an id is never
///            used to size an allocation before that check.
///   messages an error never prints a whole value (dump() recurses and may be megabytes long):
///            describe_json gives its type, its size, or a prefix of at most 40 bytes.
/// ```
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "glass/errors.hpp"

namespace glass {

/// Deepest nesting of arrays and objects a JSON input may have. Real vocabulary files nest 5 or
/// 6 levels; 64 leaves room and keeps every recursive walk of the value shallow.
constexpr int kMaxJsonDepth = 64;

/// Fails when `text` nests arrays/objects deeper than kMaxJsonDepth (strings are skipped, so a
/// '[' inside one does not count). Does not validate anything else: the parser does that.
inline void check_json_depth(std::string_view text, const std::string& where) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;  // skip the escaped character
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                fail(where, ": JSON nested more than ", kMaxJsonDepth, " levels deep at byte ", i);
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
}

/// Parses untrusted JSON text: depth first, then nlohmann's parser. Any problem is a glass::Error
/// naming `where`.
inline nlohmann::json parse_untrusted_json(const std::string& text, const std::string& where) {
    check_json_depth(text, where);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(where, " is not valid JSON: ", e.what());
    }
}

/// The same, keeping each object's keys in the order they were written: a chat template's
/// tojson prints a tool's parameters in that order, as Python's json.dumps does.
inline nlohmann::ordered_json parse_untrusted_ordered_json(const std::string& text, const std::string& where) {
    check_json_depth(text, where);
    try {
        return nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(where, " is not valid JSON: ", e.what());
    }
}

/// A short description of a JSON value for an error message, without recursion: scalars as
/// written (strings cut after 40 bytes), containers by type and size: `an array of 3 elements`.
inline std::string describe_json(const nlohmann::json& j) {
    if (j.is_array()) return "an array of " + std::to_string(j.size()) + " elements";
    if (j.is_object()) return "an object of " + std::to_string(j.size()) + " keys";
    if (j.is_binary()) return "binary data";
    if (j.is_string()) {
        const std::string& s = j.get_ref<const std::string&>();
        return "\"" + s.substr(0, 40) + (s.size() > 40 ? "...\"" : "\"");
    }
    return j.dump();  // null, true/false, a number: a few characters, no recursion
}

/// The token id in `j`: an integer JSON number in [0, limit), else glass::Error naming `where`,
/// `what` (which entry) and the value as written.
inline int json_token_id(const nlohmann::json& j, std::int64_t limit, const std::string& where,
                         const std::string& what) {
    if (limit > (std::int64_t{1} << 24)) limit = std::int64_t{1} << 24;  // glass's largest vocabulary
    if (!j.is_number_integer())
        fail(where, ": ", what, " has id ", describe_json(j), ", which is not an integer");
    const bool in_range = j.is_number_unsigned()
                              ? j.get<std::uint64_t>() < static_cast<std::uint64_t>(limit)
                              : j.get<std::int64_t>() >= 0 && j.get<std::int64_t>() < limit;
    if (!in_range)
        fail(where, ": ", what, " has id ", j.dump(), ", outside [0, ", limit,
             ") (the ids this file can hold: one per entry)");
    return static_cast<int>(j.get<std::int64_t>());
}

}  // namespace glass
