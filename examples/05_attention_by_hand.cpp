// 05_attention_by_hand — journey step 4: attention on numbers small enough to check by hand (C3).
//
// In:  one query Q [1, 2] = [1, 0] and two earlier tokens:
//        A: key [1, 0], value [10,  0]
//        B: key [0, 1], value [ 0, 20]
//      so K = [[1,0],[0,1]] and V = [[10,0],[0,20]], both [2, 2]. No 1/sqrt(d) scaling (scale 1).
// Out: scores Q K^T [1, 2], weights softmax(scores) [1, 2], output weights V [1, 2].
//
// By hand: scores = [1·1 + 0·0, 1·0 + 0·1] = [1, 0]
//          weights = [e/(e+1), 1/(e+1)] = [0.731, 0.269]
//          output  = 0.731·[10, 0] + 0.269·[0, 20] = [7.31, 5.38]
// The query "matches" A's key better, so the output is mostly A's value — but not only.
#include <cstdio>

#include "glass/glass.hpp"

int main() {
    glass::RowMatrix q(1, 2), k(2, 2), v(2, 2);
    q << 1, 0;
    k << 1, 0,   // token A
         0, 1;   // token B
    v << 10, 0,  // token A
         0, 20;  // token B

    // The raw scores, one per key: dot products of the query with each key.
    std::printf("scores:");
    for (int j = 0; j < 2; ++j) {
        float dot = 0;
        for (int i = 0; i < 2; ++i) dot += q(0, i) * k(j, i);
        std::printf(" %.6f", dot);
    }
    std::printf("\n");

    // The library's attention for one head. The query sits at position 1 (after A at 0 and
    // B at 1), so the causal mask lets it see both keys; scale 1 means no 1/sqrt(d).
    glass::RowMatrix weights;
    const glass::RowMatrix out =
        glass::attention_head(q, k, v, /*start_pos=*/1, /*scale=*/1.0f, &weights);

    std::printf("weights: %.6f %.6f\n", weights(0, 0), weights(0, 1));
    std::printf("weights sum: %.6f\n", weights(0, 0) + weights(0, 1));
    std::printf("output: %.6f %.6f\n", out(0, 0), out(0, 1));
    std::printf("output rounded: %.1f %.1f\n", out(0, 0), out(0, 1));
    return 0;
}
