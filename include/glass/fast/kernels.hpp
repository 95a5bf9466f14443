/// \file
/// \brief glass/fast/kernels.hpp — the kernel sets, and which one runs on this CPU.
/// ```text
/// A kernel set is one table of inner loops (kernel_table.hpp). Four exist:
///   portable  plain loops, any CPU; the reference every other set is tested against
///   avx2      x86-64 with AVX2 + FMA + F16C (Intel since Haswell, AMD since Zen 1)
///   avx512    x86-64 with AVX-512 F/BW/VL/DQ (Intel Skylake-X and later servers, AMD since Zen 4)
///   neon      AArch64 (Apple M-series, Graviton, Ampere, Raspberry Pi 4/5); NEON is always there
/// best_kernels() takes the widest set the CPU runs, unless GLASS_KERNELS names one:
///   GLASS_KERNELS=avx2 glass bench ...    (a set the CPU lacks is refused, naming what it has)
/// so one machine can run and test every set it supports. The choice is a run-time CPU check,
/// not a compile flag: each set's functions carry their own `target` attributes, and one binary
/// runs everywhere.
/// int8 activations (matvec_int8) use the best integer dot product the CPU has inside the set:
/// AVX-512 VNNI (vpdpbusd, 16 lanes), AVX-VNNI (vpdpbusd, 8 lanes), AVX2's vpmaddubsw, or
/// NEON's sdot; `Kernels::int8_dot` says which.
/// ```
#pragma once

#include <cstdlib>
#include <string>
#include <vector>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "glass/errors.hpp"
#include "glass/fast/kernel_table.hpp"
#include "glass/fast/kernels_neon.hpp"  // neon_has_dotprod, neon_feature_list (empty off AArch64)
#include "glass/fast/kernels_portable.hpp"
#include "glass/fast/packed_weights.hpp"
#if !defined(GLASS_KERNEL_SETS_COMPILED)
#include "glass/fast/kernels_avx2_attention.hpp"    // with kernels_avx2.hpp, kernels_avx2_kquants.hpp
#include "glass/fast/kernels_avx512_attention.hpp"  // with kernels_avx512.hpp, kernels_avx512_kquants.hpp
#include "glass/fast/kernels_neon_attention.hpp"    // with kernels_neon_kquants.hpp
#endif

namespace glass::fast {

// ---- Where the vector sets are compiled ---------------------------------------------------------
// Header-only (the default, and what an installed or add_subdirectory user gets): each program
// that picks a set compiles every set's functions, inline, from the headers above.
// GLASS_KERNEL_SETS_COMPILED (glass's own build, CMakeLists.txt): they are compiled once, in
// src/kernel_sets.cpp, and these declarations are all a file sees. The functions are the same;
// each of glass's ~30 programs and test batches that run the fast path then skips compiling
// them again (1-5 s of a 12-22 s file; bench/RESULTS.md, "The kernel sets compiled once").
#if defined(GLASS_KERNEL_SETS_COMPILED)
#if defined(__x86_64__)
Kernels avx2_kernels(bool avx_vnni);
Kernels avx512_kernels(bool vnni);
#endif
#if defined(__aarch64__)
Kernels neon_kernels(bool dotprod);
#endif
#else
#if defined(__x86_64__)
inline Kernels avx2_kernels(bool avx_vnni) { return avx2::kernels(avx_vnni); }
inline Kernels avx512_kernels(bool vnni) { return avx512::kernels(vnni); }
#endif
#if defined(__aarch64__)
inline Kernels neon_kernels(bool dotprod) { return neon::kernels(dotprod); }
#endif
#endif

// ---- What this CPU has ----------------------------------------------------------------------
#if defined(__x86_64__)
// Bit `bit` of CPUID leaf `leaf` (subleaf `sub`), register `reg` (0..3 = eax, ebx, ecx, edx). For
// the two features not every compiler's __builtin_cpu_supports knows (clang 16: f16c, avxvnni);
// both are usable only where AVX is, which the avx2 check (OS support included) already demands.
inline bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1u;
}
#endif

inline bool cpu_supports(const char* feature) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    const std::string f = feature;
    if (f == "avx2") return __builtin_cpu_supports("avx2");
    if (f == "fma") return __builtin_cpu_supports("fma");
    if (f == "f16c") return cpuid_bit(1, 0, 2, 29);     // CPUID.1:ECX.F16C[bit 29]
    if (f == "avxvnni") return cpuid_bit(7, 1, 0, 4);   // CPUID.(7,1):EAX.AVX-VNNI[bit 4]
    if (f == "avx512f") return __builtin_cpu_supports("avx512f");
    if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
    if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
    if (f == "avx512dq") return __builtin_cpu_supports("avx512dq");
    if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
#else
    (void)feature;
#endif
    return false;
}

inline bool cpu_has_avx2() { return cpu_supports("avx2") && cpu_supports("fma") && cpu_supports("f16c"); }
inline bool cpu_has_avx512() {
    return cpu_supports("avx512f") && cpu_supports("avx512bw") && cpu_supports("avx512vl") && cpu_supports("avx512dq");
}
inline bool cpu_has_vnni() { return cpu_has_avx512() && cpu_supports("avx512vnni"); }   // AVX-512 VNNI
inline bool cpu_has_avx_vnni() { return cpu_has_avx2() && cpu_supports("avxvnni"); }    // the VEX form

// The ISA extensions glass looks for that this CPU has, for messages and bench records:
// "avx2 fma f16c avxvnni avx512f ..." (x86-64) or "neon dotprod" (AArch64).
inline std::string cpu_feature_list() {
#if defined(__aarch64__)
    return neon_feature_list();
#else
    std::string out;
    for (const char* f : {"avx2", "fma", "f16c", "avxvnni", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512vnni"})
        if (cpu_supports(f)) {
            if (!out.empty()) out += ' ';
            out += f;
        }
    return out.empty() ? "none of avx2/fma/f16c/avx512" : out;
#endif
}

// ---- The sets -------------------------------------------------------------------------------
enum class KernelSet { portable, avx2, avx512, neon };

inline const char* to_string(KernelSet s) {
    switch (s) {
        case KernelSet::portable: return "portable";
        case KernelSet::avx2: return "avx2";
        case KernelSet::avx512: return "avx512";
        case KernelSet::neon: return "neon";
    }
    return "?";
}

inline bool cpu_runs(KernelSet s) {
    switch (s) {
        case KernelSet::portable: return true;
        case KernelSet::avx2: return cpu_has_avx2();
        case KernelSet::avx512: return cpu_has_avx512() && cpu_has_avx2();
#if defined(__aarch64__)
        case KernelSet::neon: return true;
#else
        case KernelSet::neon: return false;
#endif
    }
    return false;
}

// Every set this CPU runs, narrowest first (portable, then avx2, avx512 or neon).
inline std::vector<KernelSet> available_kernel_sets() {
    std::vector<KernelSet> out;
    for (KernelSet s : {KernelSet::portable, KernelSet::avx2, KernelSet::avx512, KernelSet::neon})
        if (cpu_runs(s)) out.push_back(s);
    return out;
}

inline std::string available_kernel_names() {
    std::string out;
    for (KernelSet s : available_kernel_sets()) out += (out.empty() ? "" : ", ") + std::string(to_string(s));
    return out;
}

inline KernelSet kernel_set_from_string(const std::string& name) {
    for (KernelSet s : {KernelSet::portable, KernelSet::avx2, KernelSet::avx512, KernelSet::neon})
        if (name == to_string(s)) return s;
    fail("unknown kernel set '", name, "' (portable, avx2, avx512, neon; this CPU runs ", available_kernel_names(), ")");
}

// The table of one set; refuses a set this CPU cannot run, naming what it has.
inline Kernels kernels_of(KernelSet s) {
    if (!cpu_runs(s))
        fail("kernel set ", to_string(s), " needs instructions this CPU lacks (it has: ", cpu_feature_list(),
             "); kernel sets it runs: ", available_kernel_names());
    switch (s) {
        case KernelSet::portable: return portable::kernels();
#if defined(__x86_64__)
        case KernelSet::avx2: return avx2_kernels(cpu_has_avx_vnni());
        case KernelSet::avx512: return avx512_kernels(cpu_has_vnni());
#endif
#if defined(__aarch64__)
        case KernelSet::neon: return neon_kernels(neon_has_dotprod());
#endif
        default: break;
    }
    fail("kernel set ", to_string(s), " is not built into this program");
}
inline Kernels kernels_of(const std::string& name) { return kernels_of(kernel_set_from_string(name)); }

inline Kernels portable_kernels() { return portable::kernels(); }

// The widest set this CPU runs, or the one GLASS_KERNELS names (refused if the CPU lacks it).
inline Kernels best_kernels() {
    if (const char* forced = std::getenv("GLASS_KERNELS"); forced != nullptr && *forced != '\0') {
        try {
            return kernels_of(forced);
        } catch (const Error& e) {
            fail("GLASS_KERNELS=", forced, ": ", e.what());
        }
    }
    return kernels_of(available_kernel_sets().back());
}

}  // namespace glass::fast
