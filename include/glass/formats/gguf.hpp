/// \file
/// \brief glass/formats/gguf.hpp — reading the header of a GGUF file (llama.cpp's model format).
/// ```text
/// In:  a .gguf file (version 2 or 3), e.g. llama.cpp's vocab-only files.
/// Out: its key/value metadata: "tokenizer.ggml.model" = "gpt2", "tokenizer.ggml.tokens" = [...].
///
/// Layout (little-endian):
///   "GGUF" magic, uint32 version, uint64 tensor_count, uint64 metadata_kv_count
///   metadata_kv_count × { string key, uint32 type, value }
///     string = uint64 length + bytes;  array = uint32 element type + uint64 count + elements
///     types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array,
///            10 u64, 11 i64, 12 f64
///   tensor_count × { string name, uint32 n_dims, uint64 ne[n_dims], uint32 type, uint64 offset }
///   padding to general.alignment (32), then the tensors' data (gguf_model.hpp reads it)
/// The file is untrusted: every length and count is checked against the bytes that remain, so a
/// corrupted count cannot trigger a huge allocation.
/// ```
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "glass/errors.hpp"

namespace glass {

// One metadata value. Integers of every width become int64 (u64 above INT64_MAX is refused),
// floats become double; arrays keep only what vocabularies use (strings, numbers).
struct GgufValue {
    std::variant<std::int64_t, double, bool, std::string, std::vector<std::string>,
                 std::vector<std::int64_t>, std::vector<double>>
        value;
};

struct GgufFile {
    std::uint32_t version = 0;
    std::uint64_t tensor_count = 0;
    std::map<std::string, GgufValue> metadata;

    bool has(const std::string& key) const { return metadata.count(key) > 0; }

    template <typename T>
    const T& get(const std::string& key) const {
        auto it = metadata.find(key);
        if (it == metadata.end()) fail("GGUF: missing metadata key '", key, "'");
        const T* v = std::get_if<T>(&it->second.value);
        if (!v) fail("GGUF: metadata key '", key, "' has an unexpected type");
        return *v;
    }
    std::int64_t get_int(const std::string& key, std::int64_t fallback) const {
        return has(key) ? get<std::int64_t>(key) : fallback;
    }
    bool get_bool(const std::string& key, bool fallback) const {
        return has(key) ? get<bool>(key) : fallback;
    }
    std::string get_string(const std::string& key, const std::string& fallback) const {
        return has(key) ? get<std::string>(key) : fallback;
    }
};

namespace detail {

class GgufReader {
public:
    explicit GgufReader(std::span<const char> bytes) : bytes_(bytes) {}

    template <typename T>
    T scalar() {
        need(sizeof(T), "a number");
        T v;
        std::memcpy(&v, bytes_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return v;
    }

    std::string string() {
        const std::uint64_t n = scalar<std::uint64_t>();
        need(n, "a string");
        std::string s(bytes_.data() + at_, static_cast<size_t>(n));
        at_ += static_cast<size_t>(n);
        return s;
    }

    GgufValue value(std::uint32_t type) {
        switch (type) {
            case 0: return {std::int64_t{scalar<std::uint8_t>()}};
            case 1: return {std::int64_t{scalar<std::int8_t>()}};
            case 2: return {std::int64_t{scalar<std::uint16_t>()}};
            case 3: return {std::int64_t{scalar<std::int16_t>()}};
            case 4: return {std::int64_t{scalar<std::uint32_t>()}};
            case 5: return {std::int64_t{scalar<std::int32_t>()}};
            case 6: return {double{scalar<float>()}};
            case 7: return {scalar<std::uint8_t>() != 0};
            case 8: return {string()};
            case 9: return array();
            case 10: {
                const std::uint64_t v = scalar<std::uint64_t>();
                if (v > static_cast<std::uint64_t>(INT64_MAX)) fail("GGUF: uint64 value ", v, " too large");
                return {static_cast<std::int64_t>(v)};
            }
            case 11: return {scalar<std::int64_t>()};
            case 12: return {scalar<double>()};
            default: fail("GGUF: unknown value type ", type, " at byte ", at_);
        }
    }

    size_t position() const { return at_; }

private:
    // The least bytes one element of `type` takes in the file (a string: its 8-byte length).
    static std::uint64_t min_element_bytes(std::uint32_t type) {
        switch (type) {
            case 0: case 1: case 7: return 1;
            case 2: case 3: return 2;
            case 4: case 5: case 6: return 4;
            default: return 8;  // 8 string, 10 u64, 11 i64, 12 f64 (others are refused below)
        }
    }

    // n elements take at least n · min_element_bytes: a count the remaining bytes cannot hold is
    // a lie, refused before it sizes a vector.
    GgufValue array() {
        const std::uint32_t type = scalar<std::uint32_t>();
        const std::uint64_t n = scalar<std::uint64_t>();
        if (n > (bytes_.size() - at_) / min_element_bytes(type))
            fail("GGUF: array of ", n, " elements of type ", type, " at byte ", at_, " needs at least ",
                 min_element_bytes(type), " bytes each; only ", bytes_.size() - at_, " bytes are left");
        if (type == 8) {
            std::vector<std::string> out;
            out.reserve(static_cast<size_t>(n));
            for (std::uint64_t i = 0; i < n; ++i) out.push_back(string());
            return {std::move(out)};
        }
        if (type == 6 || type == 12) {
            std::vector<double> out;
            out.reserve(static_cast<size_t>(n));
            for (std::uint64_t i = 0; i < n; ++i) out.push_back(std::get<double>(value(type).value));
            return {std::move(out)};
        }
        if (type == 9 || type == 8 || type > 12) fail("GGUF: arrays of type ", type, " are not supported");
        std::vector<std::int64_t> out;
        out.reserve(static_cast<size_t>(n));
        for (std::uint64_t i = 0; i < n; ++i) {
            GgufValue v = value(type);
            if (auto* b = std::get_if<bool>(&v.value)) out.push_back(*b ? 1 : 0);
            else out.push_back(std::get<std::int64_t>(v.value));
        }
        return {std::move(out)};
    }

    void need(std::uint64_t n, const char* what) const {
        if (n > bytes_.size() - at_)
            fail("GGUF: file ends inside ", what, " at byte ", at_, " (", n, " bytes needed, ",
                 bytes_.size() - at_, " left)");
    }

    std::span<const char> bytes_;
    size_t at_ = 0;
};

}  // namespace detail

/// A read-only mapping of a whole file (mmap): the bytes stay on disk until touched, and a model's
/// weights can be used where they lie. Shared by everything that points into it.
struct MappedFile {
    std::shared_ptr<const void> mapping;
    std::span<const char> bytes;
};

inline MappedFile map_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("'", path, "' is not a regular file");
    }
    const size_t size = static_cast<size_t>(st.st_size);
    if (size == 0) {
        ::close(fd);
        return {};
    }
    void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (data == MAP_FAILED) fail("cannot mmap '", path, "': ", std::strerror(errno));
    std::shared_ptr<const void> mapping(data, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
    return {mapping, std::span<const char>(static_cast<const char*>(data), size)};
}

/// One tensor's description in a GGUF file (its data lies at data_offset + offset).
struct GgufTensorInfo {
    std::string name;
    std::vector<std::int64_t> ne;  ///< ggml order: ne[0] is the innermost (row length)
    std::uint32_t type = 0;        ///< ggml_type (gguf_model.hpp names them)
    std::uint64_t offset = 0;      ///< from the start of the data section
};

/// The header of a GGUF file: metadata, then (when asked) every tensor's description and where
/// the data section starts (aligned to general.alignment, 32 by default).
inline GgufFile parse_gguf(std::span<const char> bytes, std::vector<GgufTensorInfo>* tensors = nullptr,
                           std::uint64_t* data_offset = nullptr) {
    detail::GgufReader r(bytes);
    if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0) fail("not a GGUF file (no 'GGUF' magic)");
    r.scalar<std::uint32_t>();
    GgufFile f;
    f.version = r.scalar<std::uint32_t>();
    if (f.version < 2 || f.version > 3) fail("GGUF version ", f.version, " is not supported (2 or 3)");
    f.tensor_count = r.scalar<std::uint64_t>();
    const std::uint64_t n_kv = r.scalar<std::uint64_t>();
    if (n_kv > bytes.size()) fail("metadata count ", n_kv, " exceeds the file size");
    for (std::uint64_t i = 0; i < n_kv; ++i) {
        std::string key = r.string();
        const std::uint32_t type = r.scalar<std::uint32_t>();
        f.metadata[key] = r.value(type);
    }
    if (!tensors) return f;
    // Each description takes at least 8 (name length) + 4 + 4 + 8 bytes: a count the file
    // cannot hold is refused before it sizes anything.
    if (f.tensor_count > (bytes.size() - r.position()) / 24)
        fail("tensor count ", f.tensor_count, " exceeds what the file can hold");
    for (std::uint64_t i = 0; i < f.tensor_count; ++i) {
        GgufTensorInfo t;
        t.name = r.string();
        const std::uint32_t n_dims = r.scalar<std::uint32_t>();
        if (n_dims < 1 || n_dims > 4) fail("tensor '", t.name, "' has ", n_dims, " dimensions (1 to 4)");
        for (std::uint32_t d = 0; d < n_dims; ++d) {
            const std::uint64_t n = r.scalar<std::uint64_t>();
            if (n < 1 || n > (std::uint64_t{1} << 40)) fail("tensor '", t.name, "' dimension ", d, " = ", n);
            t.ne.push_back(static_cast<std::int64_t>(n));
        }
        t.type = r.scalar<std::uint32_t>();
        t.offset = r.scalar<std::uint64_t>();
        tensors->push_back(std::move(t));
    }
    const std::int64_t alignment = f.get_int("general.alignment", 32);
    if (alignment < 1 || alignment > 65536 || (alignment & (alignment - 1)) != 0)
        fail("general.alignment = ", alignment, " is not a power of two up to 65536");
    const std::uint64_t a = static_cast<std::uint64_t>(alignment);
    if (data_offset) *data_offset = (r.position() + a - 1) / a * a;
    return f;
}

/// The metadata of a GGUF file (vocabularies, model hyperparameters), read through a mapping: only
/// the pages the header spans are ever read, however large the file.
inline GgufFile read_gguf_metadata(const std::string& path) {
    const MappedFile file = map_file(path);
    try {
        return parse_gguf(file.bytes);
    } catch (const Error& e) {
        fail("GGUF file '", path, "': ", e.what());
    }
}

}  // namespace glass
