// src/kernel_sets.cpp — the vector kernel sets, compiled once for glass's own programs.
//
// include/glass/fast/kernels.hpp declares avx2_kernels, avx512_kernels and neon_kernels when
// GLASS_KERNEL_SETS_COMPILED is defined (CMakeLists.txt defines it for glass's own build, never
// for an installed or add_subdirectory user, who stays header-only). This file is where they are
// then defined: each returns its set's table (kernels_<set>_attention.hpp), whose functions carry
// their own `target` attributes, so this file is compiled with the same flags as everything else
// and the program still runs on any x86-64 (or AArch64) CPU.
#include "glass/fast/kernels.hpp"

#if !defined(GLASS_KERNEL_SETS_COMPILED)
#error "src/kernel_sets.cpp is compiled with GLASS_KERNEL_SETS_COMPILED (CMakeLists.txt: glass_kernel_sets)"
#endif

#include "glass/fast/kernels_avx2_attention.hpp"
#include "glass/fast/kernels_avx512_attention.hpp"
#include "glass/fast/kernels_neon_attention.hpp"

namespace glass::fast {

// Each architecture's sets only, as kernels.hpp declares them (kernels_of asks for no other).
#if defined(__x86_64__)
Kernels avx2_kernels(bool avx_vnni) { return avx2::kernels(avx_vnni); }
Kernels avx512_kernels(bool vnni) { return avx512::kernels(vnni); }
#endif
#if defined(__aarch64__)
Kernels neon_kernels(bool dotprod) { return neon::kernels(dotprod); }
#endif

}  // namespace glass::fast
