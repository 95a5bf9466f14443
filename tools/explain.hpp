// tools/explain.hpp — what `glass explain` records about one request, stage by stage.
//
// cmd_explain.cpp runs the request (prefill, then decode steps) with a glass::ForwardTrace and
// fills an Explanation; the same Explanation is printed as text, as one JSON object (--json) and
// as the attention explorer page (--html, explain_html.cpp). One record, three views: the text,
// the JSON and the page can never tell different stories.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cli {

struct AttendedPosition {
    int position;
    float weight;
};

struct HeadFocus {                          // one head, at the step's last position
    int head;
    int kv_head;                            // the K/V head it reads (grouped-query attention)
    std::vector<AttendedPosition> top;      // most-attended positions, largest weight first
};

struct LayerRecord {                        // one layer, at the step's last position
    float residual_norm_after_attention;    // ‖x‖₂ once attention's output is added
    float residual_norm_after_mlp;          // ‖x‖₂ once the MLP's output is added
    std::vector<HeadFocus> heads;           // [n_heads]
};

struct TopToken {
    int id;
    std::string piece;
    float logit;
    float probability;                      // the model's own: softmax of the logits (temperature 1)
    float draw_probability;                 // in the distribution the draw used (0: truncated away)
};

struct DrawCandidate {
    int id;
    float probability;                      // renormalized: the draw's candidates sum to 1
};

struct Decision {                           // how the next token was chosen from the logits
    std::string rule;                       // "greedy" or "sample"
    int id;
    std::string piece;
    float probability;                      // of the chosen id, temperature 1
    float draw_probability = 1;             // of the chosen id, as the draw saw it (greedy: 1)
    // Sampling only: the distribution the draw walked (softmax(logits / T), then top-k, min-p and
    // top-p, renormalized), in the order it walks it: "probability" (most probable first, after
    // truncation) or "id" (no truncation asked: llama2.c walks every token in id order). The coin
    // lands between the running sums before and after the chosen token.
    float coin = 0;
    int candidates = 0;                     // tokens left after top-k/min-p/top-p
    std::string order;
    std::vector<DrawCandidate> distribution;
    double cumulative_before = 0, cumulative_after = 0;
};

struct KvRecord {                           // the KV cache once the step's K/V rows are written
    int tokens;                             // positions cached
    std::int64_t formula_bytes;             // 2 · layers · kv_heads · head_dim · 4 B · tokens
    std::int64_t cache_bytes_used;          // glass::KVCache::bytes_used
    std::int64_t cache_bytes_in_rows;       // bytes of the K and V rows the cache hands out
    std::int64_t cache_bytes_reserved;      // what KVCache allocated (the whole context window)
};

struct StepRecord {                         // one forward pass: the prefill, or one decode step
    std::string kind;                       // "prefill" or "decode"
    int first_position;                     // positions first_position .. +input_ids.size()-1
    std::vector<int> input_ids;
    std::vector<LayerRecord> layers;        // [n_layers], at the last position
    std::vector<TopToken> top;              // the 5 most probable next tokens (by the model, T = 1)
    Decision decision;
    KvRecord kv;
};

struct TokenRecord {
    int position;
    int id;
    std::string piece;                      // as stored in the vocabulary
    std::string role;                       // "prompt", "generated" or "next" (sampled last, not fed)
};

struct Explanation {
    std::string model_path, tokenizer_path, prompt;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size, seq_len;
    int decode_steps_requested;
    bool bos_added;  // whether the tokenizer put BOS before the prompt (the model says: Tokenizer::adds_bos)
    std::string chat_template;  // --chat: where the template came from ("" = -p is the prompt as given)
    float temperature, top_p, min_p;
    int top_k;
    std::uint64_t seed;
    std::vector<TokenRecord> tokens;        // prompt, then every sampled token
    int embedding_values_shown;
    std::vector<std::vector<float>> embedding_rows;  // [fed position] -> first values of its row
    std::vector<StepRecord> steps;          // prefill, then decode steps
    // attention[position][layer][head] -> weights over positions 0..position (sums to 1).
    std::vector<std::vector<std::vector<std::vector<float>>>> attention;
    std::string stop;                       // why decoding ended: "steps", "bos" or "eos"
    std::string text;                       // the generated text (decoded, valid UTF-8)
};

nlohmann::json to_json(const Explanation& e);
void write_explain_html(const std::string& path, const nlohmann::json& data);

}  // namespace cli
