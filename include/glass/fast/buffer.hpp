/// \file
/// \brief glass/fast/buffer.hpp — one big, aligned, zeroed block of memory for packed weights.
/// ```text
/// Why not std::vector: decode streams gigabytes sequentially, and the hardware prefetcher stops
/// at every 4 KiB page boundary while a TLB miss costs a page walk. Asking the kernel for 2 MiB
/// "huge" pages (madvise MADV_HUGEPAGE; Linux defaults to madvise-only here) cuts page crossings
/// 512-fold. The read-bandwidth probe allocates its buffer the same way, so the comparison is fair.
/// ```
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "glass/errors.hpp"

namespace glass::fast {

/// Lets the kernel drop this process's copies of the pages of a read-only file mapping inside
/// [p, p + bytes) (MADV_DONTNEED): the fast path calls it once the weights are packed, so the
/// file's pages stop counting twice. Reading them again is still correct (they fault back in
/// from the file); only for a file mapping — on anonymous memory it would zero the pages.
inline void release_file_pages(const void* p, std::size_t bytes) {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
    const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(p) + bytes) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

class HugeBuffer {
public:
    HugeBuffer() = default;
    explicit HugeBuffer(std::size_t bytes) {
        constexpr std::size_t huge = std::size_t{2} << 20;
        size_ = (bytes + huge - 1) / huge * huge;
        if (size_ == 0) size_ = huge;
        void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("cannot allocate ", bytes, " bytes: ", std::strerror(errno));
#ifdef MADV_HUGEPAGE
        ::madvise(p, size_, MADV_HUGEPAGE);  // a hint: fine if the kernel says no
#endif
        data_ = static_cast<unsigned char*>(p);  // mmap memory is zeroed and page-aligned
    }
    ~HugeBuffer() {
        if (data_) ::munmap(data_, size_);
    }
    HugeBuffer(HugeBuffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    HugeBuffer& operator=(HugeBuffer&& o) noexcept {
        std::swap(data_, o.data_);
        std::swap(size_, o.size_);
        return *this;
    }

    template <typename T>
    T* as() const { return reinterpret_cast<T*>(data_); }
    std::size_t size() const { return size_; }

private:
    unsigned char* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace glass::fast
