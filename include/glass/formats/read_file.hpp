/// \file
/// \brief glass/formats/read_file.hpp — a whole file as bytes, or an error that names it.
/// ```text
/// In:  a path and what the file is meant to be ("tokenizer.json", "chat template", ...).
/// Out: the file's bytes as a std::string; or glass::Error "cannot open WHAT 'PATH': REASON",
///      REASON being the system's own words (No such file or directory, Permission denied).
/// ```
/// Every loader that reads a text or JSON file whole (tokenizer files, chat templates, training
/// text) calls this one function, so a missing file reads the same everywhere.
#pragma once

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "glass/errors.hpp"

namespace glass {

/// The bytes of the file at `path`; `what` names the file in the error when it cannot be opened.
inline std::string read_file_bytes(const std::string& path, const char* what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open ", what, " '", path, "': ", std::strerror(errno));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace glass
