// What the fast CPU path's test programs (tests/test_fast_{packing,kernel_checks,session,
// allocations,int8_kv,quantized,cli}.cpp) share: short names for the fast path's types, the
// kernel checks' helpers, and the kernel sets a test runs once each.
#pragma once

#include <string>
#include <vector>

#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/random_model.hpp"
#include "kernel_checks.hpp"
#include "test_support.hpp"

using glass::fast::FastCpuSession;
using glass::fast::FastOptions;
using glass::fast::Kernels;
using glass::fast::WeightType;
// The kernel checks' helpers (kernel_checks.hpp, shared with tests/neon/test_neon.cpp):
// relative_error is max |a − b| / max |b|, also for the logits (the 1e-5 rule: see there).
using kernel_checks::kAllTypes;
using kernel_checks::random_vector;
using kernel_checks::relative_error;
using kernel_checks::worst_error;

// Every kernel set this CPU runs, and those besides the portable reference: a test that loops
// over them runs once per set, so an AVX2 machine tests portable + avx2, a Zen 4 all three.
inline std::vector<std::string> all_sets() { return kernel_checks::set_names(); }
inline std::vector<Kernels> simd_sets() { return kernel_checks::vector_sets(); }
