/// \file
/// \brief glass/glass.hpp — everything, in the order a request meets it.
#pragma once

#include "glass/errors.hpp"
#include "glass/config.hpp"
#include "glass/checkpoint.hpp"     // 0. weights
#include "glass/tokenizer.hpp"      // 1. text -> ids
#include "glass/embedding.hpp"      // 2. ids -> vectors
#include "glass/rope.hpp"           // 3. position
#include "glass/attention.hpp"      // 4. attention
#include "glass/mlp.hpp"            // 5. MLP
#include "glass/kv_cache.hpp"       // 6/8. the cache prefill fills and decode extends
#include "glass/transformer.hpp"    // 4–8. the forward pass, CpuSession
#include "glass/sampling.hpp"       // 7. logits -> token
#include "glass/streaming.hpp"      // 8. text out, whole characters only
#include "glass/generate.hpp"       // 6–8. the loop
#include "glass/metrics.hpp"        // 9. TTFT, TPOT, bandwidth bound
