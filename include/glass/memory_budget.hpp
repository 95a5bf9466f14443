/// \file
/// \brief glass/memory_budget.hpp — is there room for it? Sizes checked before anything is allocated.
/// ```text
/// A file can be valid and still ask for more memory than the machine has (a header whose
/// context window implies a 2 TiB KV cache). glass computes such sizes in 64 bits, compares them
/// with the machine's physical memory, and fails with the size in GiB before allocating, instead
/// of an allocation failing (or the machine thrashing) much later.
/// ```
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "glass/errors.hpp"

namespace glass {

/// Bytes of memory this machine has (physical pages times page size); 0 when the system does not say.
inline std::int64_t physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    std::int64_t bytes = 0;
    if (pages <= 0 || page <= 0 || __builtin_mul_overflow(std::int64_t{pages}, std::int64_t{page}, &bytes)) return 0;
    return bytes;
}

/// "64.0 GiB".
inline std::string gib_text(std::int64_t bytes) {
    char text[48];
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    return text;
}

/// \brief Fails when `bytes` (what `what` needs) is more than this machine's memory: call it before
/// allocating.
///
/// The message reads "<what> needs <bytes in GiB><how>, more than this machine's <memory> of
/// memory"; `how` (optional) says where the size comes from, e.g. " (2 x n_layers 32 x ...)".
inline void check_fits_in_memory(std::int64_t bytes, const std::string& what, const std::string& how = "") {
    const std::int64_t memory = physical_memory_bytes();
    if (memory > 0 && bytes > memory)
        fail(what, " needs ", gib_text(bytes), how, ", more than this machine's ", gib_text(memory), " of memory");
}

}  // namespace glass
