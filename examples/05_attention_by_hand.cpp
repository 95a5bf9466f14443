// 05_attention_by_hand — journey step 4: attention on numbers small enough to check by hand (C3).
//
// In:  one query Q [1, 2] = [1, 0] and two tokens it may look at:
//        A: key [1, 0], value [10,  0]
//        B: key [0, 1], value [ 0, 20]   (B's key can be given as two arguments)
//      so K = [[1,0],[0,1]] and V = [[10,0],[0,20]], both [2, 2]. No 1/sqrt(d) scaling (scale 1).
//      The toy has no positions: no RoPE, and nothing is masked.
// Out: scores Q K^T [1, 2], weights softmax(scores) [1, 2], output weights V [1, 2].
//
// By hand: scores = [1·1 + 0·0, 1·0 + 0·1] = [1, 0]
//          weights = [e/(e+1), 1/(e+1)] = [0.731, 0.269]
//          output  = 0.731·[10, 0] + 0.269·[0, 20] = [7.31, 5.38]
// The query "matches" A's key better, so the output is mostly A's value — but not only.
//
// Usage: 05_attention_by_hand [B_KEY_X B_KEY_Y]   (default 0 1)
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "args.hpp"
#include "glass/attention.hpp"
#include "glass/errors.hpp"
#include "glass/tensor.hpp"

static int run(int argc, char** argv) {
    if (argc != 1 && argc != 3) glass::fail("give both components of B's key, or none (got ", argc - 1, " arguments)");
    const float b_x = argc == 3 ? static_cast<float>(example::number_arg(argv[1], "key component", -1e6, 1e6)) : 0.0f;
    const float b_y = argc == 3 ? static_cast<float>(example::number_arg(argv[2], "key component", -1e6, 1e6)) : 1.0f;
    glass::RowMatrix q(1, 2), k(2, 2), v(2, 2);
    q << 1, 0;
    k << 1, 0,      // token A
         b_x, b_y;  // token B
    v << 10, 0,  // token A
         0, 20;  // token B

    std::printf("query: %g %g\n", q(0, 0), q(0, 1));
    std::printf("key A: %g %g, key B: %g %g\n", k(0, 0), k(0, 1), k(1, 0), k(1, 1));

    // The raw scores, one per key: dot products of the query with each key.
    std::printf("scores:");
    for (int j = 0; j < 2; ++j) {
        float dot = 0;
        for (int i = 0; i < 2; ++i) dot += q(0, i) * k(j, i);
        std::printf(" %.6f", dot);
    }
    std::printf("\n");

    // The library's attention for one head. attention_head applies a causal mask, so it must be
    // told where the query sits: start_pos = 1 puts it at the position of the last key (as if
    // it were B's own query, the way a real token also attends to itself), so neither key is
    // masked. Positions change nothing else here: the toy has no RoPE. Scale 1: no 1/sqrt(d).
    glass::RowMatrix weights;
    const glass::RowMatrix out =
        glass::attention_head(q, k, v, /*start_pos=*/1, /*scale=*/1.0f, &weights);

    std::printf("weights: %.6f %.6f\n", weights(0, 0), weights(0, 1));
    std::printf("weights sum: %.6f\n", weights(0, 0) + weights(0, 1));
    std::printf("output: %.6f %.6f\n", out(0, 0), out(0, 1));
    std::printf("output rounded: %.1f %.1f\n", out(0, 0), out(0, 1));
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
