// 29_tensor_parallel — one model over several ranks, each holding a slice of every layer.
// The split Megatron-LM drew (query/key/value and MLP gate/up by output, the two projections back
// to the residual stream by input), the two all-reduces per layer it needs, and the proof that the
// text does not change.
//
// In:  the shipped model (stories260K: dim 64, 8 query heads on 4 KV heads of 8, MLP 172,
//      vocabulary 512, 5 layers) and tok512; the prompt "Once upon a time", greedy, 16 new tokens;
//      the ranks are threads of this process (dist/thread_communicator.hpp: run_ranks). Llama 3
//      8B's head counts (32 query heads on 8 KV heads) for the KV heads that must be replicated.
// Out: 1. per rank, at tp 2 and tp 4 (or --tp N): the query heads, KV heads, MLP units (rows of
//         W1 and W3, columns of W2) and vocabulary rows it holds (tensor_split), and the bytes of
//         layer 0 and of weights read per token on that rank against one process (shard_model);
//         then which KV head each rank keeps when there are more ranks than KV heads;
//      2. where the ranks talk in one forward pass, and how many all-reduces that makes;
//      3. greedy text from one process and from tp ranks: the same tokens, the largest relative
//         gap between their logits, and rank 0's counters (calls and bytes of all-reduce, gather
//         and broadcast) for the prefill and for every decoded token;
//      4. serving over pp 2 stages: one engine step of 8 requests cut into 1, 2 and 4 micro-batches
//         (cut_micro_batches), each stage's idle share of the step when a stage's work is its
//         layers × tokens, the ints that carry the batch to the other ranks (pack_batch), and
//         whether the split backend's logits change with the number of micro-batches; the same
//         step with each rank's part on the fast path (FastRankPart) at tp 2 and at pp 2, and the
//         largest relative gap between its logits and the reference split's;
//      5. disaggregated prefill/decode: bytes shipped per prompt position (kv_bytes_per_token, fp32
//         and int8) for this model, TinyLlama 1.1B and Llama 3 8B; the prompt prefilled on rank 1,
//         its KV and last logits shipped to rank 0 (ship_kv, receive_kv), the bytes sent, the text
//         decoded there and whether it equals one process's;
//      6. the serving engine with a prefill worker (serve/remote_prefill.hpp: ThreadPrefill, its own
//         backend on a thread): four requests, sampled; per request the prompt positions, the
//         positions its worker shipped and their bytes, and whether its text equals the
//         combined engine's (prompts computed in the engine itself).
// Everything printed is computed; tests/test_examples_parallel.cpp recomputes it.
//
// Usage: 29_tensor_parallel [--tp N]      N in [1, 8] (must divide the heads and the MLP width)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/dist/shard.hpp"
#include "glass/dist/fast_rank_part.hpp"
#include "glass/dist/kv_transfer.hpp"
#include "glass/dist/parallel_paged_backend.hpp"
#include "glass/dist/parallel_session.hpp"
#include "glass/dist/tensor_parallel.hpp"
#include "glass/dist/thread_communicator.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/paged_transformer.hpp"
#include "glass/serve/remote_prefill.hpp"
#include "glass/sampling.hpp"
#include "glass/transformer.hpp"

namespace {

using glass::dist::CommCounters;
using glass::dist::TensorSplit;

const char* kPrompt = "Once upon a time";
constexpr int kNewTokens = 16;

// "a-b": the first and last of `count` items starting at `begin`.
std::string range(int begin, int count) { return std::to_string(begin) + "-" + std::to_string(begin + count - 1); }

// Text with its newlines shown as \n, so that each token stays on one line.
std::string shown(std::string s) {
    for (size_t at = s.find('\n'); at != std::string::npos; at = s.find('\n', at + 2)) s.replace(at, 1, "\\n");
    return s;
}

// Bytes of one layer's weights as a model holds them (matrices, biases and norm gains).
std::int64_t layer_bytes(const glass::LayerWeights& w) {
    const std::int64_t floats = w.wq.size() + w.wk.size() + w.wv.size() + w.wo.size() + w.w1.size() + w.w2.size() +
                                w.w3.size() + w.bq.size() + w.bk.size() + w.bv.size() + w.rms_att.size() +
                                w.rms_ffn.size() + w.q_norm.size() + w.k_norm.size() + w.post_attention_norm.size() +
                                w.post_mlp_norm.size();
    return 4 * floats;
}

// 1. Who holds what at tp ranks, and the bytes each rank holds of layer 0 and reads per token.
void show_split(const glass::Model& m, int tp) {
    const glass::ModelConfig& c = m.config;
    std::printf("  tp %d        query   KV      MLP units:        vocabulary   bytes of   weight bytes read\n", tp);
    std::printf("              heads   heads   W1, W3 rows and   rows         layer 0    per token\n");
    std::printf("                              W2 columns\n");
    for (int r = 0; r < tp; ++r) {
        const TensorSplit s = glass::dist::tensor_split(c, r, tp);
        const glass::Model shard = glass::dist::shard_model(m, s);
        std::printf("  rank %d/%d    %-7s %-7s %-17s %-12s %-10lld %lld\n", r, tp, range(s.head_begin, s.heads).c_str(),
                    range(s.kv_head_begin, s.kv_heads).c_str(), range(s.hidden_begin, s.hidden).c_str(),
                    range(s.vocab_begin, s.vocab).c_str(), static_cast<long long>(layer_bytes(shard.layers[0])),
                    static_cast<long long>(shard.weight_bytes));
    }
    std::printf("  one process %-7s %-7s %-17s %-12s %-10lld %lld\n\n", range(0, c.n_heads).c_str(),
                range(0, c.n_kv_heads).c_str(), range(0, c.hidden_dim).c_str(), range(0, c.vocab_size).c_str(),
                static_cast<long long>(layer_bytes(m.layers[0])), static_cast<long long>(m.weight_bytes));
}

// 1b. More ranks than KV heads: each rank keeps the KV head its query heads read.
void show_replicated_kv() {
    glass::ModelConfig llama3;
    llama3.n_heads = 32;
    llama3.n_kv_heads = 8;
    llama3.hidden_dim = 14336;
    llama3.vocab_size = 128256;
    for (int tp : {8, 16}) {
        std::printf("  Llama 3 8B's 32 query heads on 8 KV heads at tp %2d, KV head of each rank:", tp);
        for (int r = 0; r < tp; ++r) std::printf(" %d", glass::dist::tensor_split(llama3, r, tp).kv_head_begin);
        std::printf("\n");
    }
}

// 2. The ranks' conversations in one forward pass of n positions.
void show_talk(const glass::ModelConfig& c, int tp) {
    const TensorSplit s = glass::dist::tensor_split(c, 0, tp);
    std::printf("  embedding   each rank writes the rows of the ids in its vocabulary slice, zeros elsewhere\n");
    std::printf("              -> all-reduce [n, %d]: every row completed by the one rank that holds it\n", c.dim);
    std::printf("  each layer  attention over my %d heads -> Wo's columns of my heads: a partial sum [n, %d]\n", s.heads,
                c.dim);
    std::printf("              -> all-reduce, then added to the residual stream\n");
    std::printf("              MLP over my %d units -> W2's columns of my units: a partial sum [n, %d]\n", s.hidden, c.dim);
    std::printf("              -> all-reduce, then added to the residual stream\n");
    std::printf("  classifier  my %d vocabulary rows of the logits -> gather at rank 0 -> [%d]\n", s.vocab_stride,
                c.vocab_size);
    std::printf("  all-reduces per forward pass: 1 + 2 x %d layers = %d\n\n", c.n_layers, 1 + 2 * c.n_layers);
}

// One greedy run: the ids after the prompt, each step's logits, and (tensor parallel) rank 0's
// counters after the prefill and after each decode step.
struct Run {
    std::vector<int> ids;
    std::vector<std::vector<float>> logits;
    std::vector<CommCounters> counters;
    double seconds = 0;
};

void greedy(glass::Session& s, const std::vector<int>& prompt, Run& run, const std::function<CommCounters()>& snapshot) {
    const auto t0 = std::chrono::steady_clock::now();
    std::span<const float> l = s.prefill(prompt);
    for (int i = 0;; ++i) {
        if (snapshot) run.counters.push_back(snapshot());
        run.logits.emplace_back(l.begin(), l.end());
        run.ids.push_back(glass::sample_argmax(l));
        if (i + 1 == kNewTokens) break;
        l = s.decode(run.ids.back());
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Run tensor_parallel_run(const glass::Model& m, int tp, const std::vector<int>& prompt) {
    Run run;
    glass::dist::run_ranks(tp, [&](glass::dist::Communicator& comm) {
        glass::dist::TensorParallelSession s(m, comm);
        if (comm.rank() != 0) {
            s.follow();
            return;
        }
        comm.reset_counters();  // count the steps only
        s.stage_group().reset_counters();
        // The all-reduces and the gather run in the ranks' tensor-parallel group (a SubCommunicator:
        // here every rank), each step's broadcast in the whole group.
        greedy(s, prompt, run, [&] {
            CommCounters c = s.stage_group().counters();
            c.broadcast = comm.counters().broadcast;
            return c;
        });
        s.finish();
    });
    return run;
}

// max |a - b| / max |b| over one set of logits.
double relative_gap(std::span<const float> a, std::span<const float> b) {
    double gap = 0, scale = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        gap = std::max(gap, std::fabs(double(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return gap / scale;
}

// The largest relative_gap over every step's logits.
double largest_relative_gap(const Run& a, const Run& b) {
    double worst = 0;
    for (size_t step = 0; step < b.logits.size(); ++step) worst = std::max(worst, relative_gap(a.logits[step], b.logits[step]));
    return worst;
}

std::string text_of(const glass::Llama2cTokenizer& tok, int prev, const std::vector<int>& ids) {
    std::string text;
    for (int id : ids) text += tok.decode(prev, id), prev = id;
    return text;
}

// "word N" and "\"text\"", appended piece by piece (GCC 12 reports `"literal" + std::string` as a
// possible overlap once inlined: a false positive).
std::string labelled(const char* word, size_t n) {
    std::string s = word;
    s += std::to_string(n);
    return s;
}
std::string quoted(const std::string& text) {
    std::string s = "\"";
    s += text;
    s += '"';
    return s;
}

// One row of the counters table: what rank 0 did between two snapshots.
void show_counters(const std::string& label, const std::string& token, const CommCounters& a, const CommCounters& b) {
    std::printf("  %-11s %-10s %-6lld %-8lld %-6lld %-8lld %-6lld %lld\n", label.c_str(), token.c_str(),
                static_cast<long long>(b.all_reduce.calls - a.all_reduce.calls),
                static_cast<long long>(b.all_reduce.bytes - a.all_reduce.bytes),
                static_cast<long long>(b.gather.calls - a.gather.calls),
                static_cast<long long>(b.gather.bytes - a.gather.bytes),
                static_cast<long long>(b.broadcast.calls - a.broadcast.calls),
                static_cast<long long>(b.broadcast.bytes - a.broadcast.bytes));
}

// 3. One process and tp ranks, greedy; the text, the logits' gap and rank 0's counters.
void show_generation(const glass::Model& m, const glass::Llama2cTokenizer& tok, int tp) {
    const std::vector<int> prompt = tok.encode(kPrompt, tok.adds_bos(), false);
    Run one;
    glass::CpuSession session(m);
    greedy(session, prompt, one, nullptr);
    const Run split = tensor_parallel_run(m, tp, prompt);
    std::printf("  one process: %s%s\n", kPrompt, shown(text_of(tok, prompt.back(), one.ids)).c_str());
    std::printf("  tp %d:        %s%s\n", tp, kPrompt, shown(text_of(tok, prompt.back(), split.ids)).c_str());
    std::printf("  same tokens: %s\n", one.ids == split.ids ? "yes" : "NO");
    std::printf("  largest relative logit gap, tp %d vs one process, over %d steps: %.1e\n\n", tp, kNewTokens,
                largest_relative_gap(split, one));

    std::printf("  rank 0's counters (bytes as communicator.hpp counts them)\n");
    std::printf("              gives      all-reduce      gather          broadcast\n");
    std::printf("                         calls  bytes    calls  bytes    calls  bytes\n");
    show_counters(labelled("prefill ", prompt.size()), quoted(shown(tok.decode(prompt.back(), split.ids[0]))),
                  CommCounters{}, split.counters[0]);
    for (size_t i = 1; i < split.counters.size(); ++i)
        show_counters(labelled("decode ", i), quoted(shown(tok.decode(split.ids[i - 1], split.ids[i]))),
                      split.counters[i - 1], split.counters[i]);
    const CommCounters& total = split.counters.back();
    const TensorSplit s = glass::dist::tensor_split(m.config, 0, tp);
    std::printf("  all-reduce bytes per call and position: %d floats x 4 B x %d ranks = %d (every rank's partial,\n"
                "    gathered and added in rank order)\n", m.config.dim, tp, m.config.dim * 4 * tp);
    std::printf("  gather bytes per position: rank 0's own slice, %d floats x 4 B = %d\n", s.vocab_stride,
                s.vocab_stride * 4);
    std::printf("  broadcast: what to do next, then the ids (4 B each)\n");
    std::printf("  seconds in all-reduce at rank 0 (waiting for the slower rank included): %.4f of %.4f\n",
                total.all_reduce.seconds, split.seconds);
}

// Section 4's pipeline: when does stage s finish micro-batch j, if a stage's work on a micro-batch
// is (its layers × the micro-batch's tokens) units and a micro-batch enters stage s once stage
// s − 1 has finished it and stage s has finished the one before? Returns each stage's idle share of
// the step, which ends when the last stage finishes the last micro-batch.
std::vector<double> stage_idle_shares(const std::vector<int>& stage_layers, const std::vector<long long>& mb_tokens) {
    const size_t stages = stage_layers.size(), mbs = mb_tokens.size();
    std::vector<std::vector<long long>> done(stages, std::vector<long long>(mbs, 0));
    for (size_t s = 0; s < stages; ++s)
        for (size_t j = 0; j < mbs; ++j) {
            const long long ready = std::max(s > 0 ? done[s - 1][j] : 0LL, j > 0 ? done[s][j - 1] : 0LL);
            done[s][j] = ready + stage_layers[s] * mb_tokens[j];
        }
    const double step = static_cast<double>(done[stages - 1][mbs - 1]);
    std::vector<double> idle;
    for (size_t s = 0; s < stages; ++s) {
        long long busy = 0;
        for (size_t j = 0; j < mbs; ++j) busy += stage_layers[s] * mb_tokens[j];
        idle.push_back(1.0 - static_cast<double>(busy) / step);
    }
    return idle;
}

// One step of `batch` through the split serving backend on tp × pp thread ranks, each rank's part
// made by `make` (empty: the CPU reference's): the logits rows rank 0 gets.
std::vector<float> split_step_logits(const glass::Model& model, glass::dist::ParallelShape shape, int micro_batches,
                                     const glass::dist::MakeRankPart& make, std::span<const glass::serve::BatchEntry> batch) {
    std::vector<float> logits;
    glass::dist::run_ranks(shape.tp * shape.pp, [&](glass::dist::Communicator& comm) {
        glass::dist::ParallelPagedBackend b(model, comm, shape, {.micro_batches = micro_batches}, make);
        if (comm.rank() != 0) {
            b.follow();
            return;
        }
        b.allocate_pool(16, 16);
        const std::span<const float> l = b.forward(batch);
        logits.assign(l.begin(), l.end());
        b.finish();
    });
    return logits;
}

// 4. One engine step of 8 requests (4 prompts being prefilled, 4 decoding) through pp 2 stages.
void show_micro_batches(const glass::Model& model) {
    const glass::ModelConfig& c = model.config;
    const int lengths[8] = {24, 1, 16, 1, 20, 1, 12, 1};  // new tokens of each request this step
    std::vector<std::vector<int>> tokens(8), tables(8);
    std::vector<glass::serve::BatchEntry> batch;
    for (int r = 0; r < 8; ++r) {
        for (int t = 0; t < lengths[r]; ++t) tokens[static_cast<size_t>(r)].push_back(1 + (r * 31 + t * 7) % (c.vocab_size - 1));
        tables[static_cast<size_t>(r)] = {2 * r, 2 * r + 1};  // two blocks of 16 positions each
        batch.push_back({.tokens = tokens[static_cast<size_t>(r)], .start = 0, .block_table = tables[static_cast<size_t>(r)]});
    }
    std::vector<int> stage_layers;
    for (int p = 0; p < 2; ++p) stage_layers.push_back(glass::dist::pipeline_stage(c, p, 2).layers);
    std::printf("  requests' new tokens this step: 24 1 16 1 20 1 12 1 (76); stage layers: %d + %d\n",
                stage_layers[0], stage_layers[1]);
    const std::vector<int> ints = glass::dist::pack_batch(batch);
    std::printf("  the batch as broadcast: %zu ints = %zu bytes\n\n", ints.size(), 4 * ints.size());
    std::printf("  micro-batches   tokens in each          %% of the step idle:   stage 0   stage 1\n");
    std::vector<std::vector<float>> logits;
    for (const int m : {1, 2, 4}) {
        std::vector<long long> mb_tokens;
        std::string cuts;
        for (const glass::dist::MicroBatch& mb : glass::dist::cut_micro_batches(batch, m)) {
            long long n = 0;
            for (int e = mb.begin; e < mb.end; ++e) n += lengths[e];
            mb_tokens.push_back(n);
            cuts += std::to_string(n) + " ";
        }
        const std::vector<double> idle = stage_idle_shares(stage_layers, mb_tokens);
        std::printf("  m = %d           %-22s %30.1f %9.1f\n", m, cuts.c_str(), 100 * idle[0], 100 * idle[1]);
        logits.push_back(split_step_logits(model, {.tp = 1, .pp = 2}, m, {}, batch));
    }
    const bool same = logits[1] == logits[0] && logits[2] == logits[0];
    std::printf("\n  logits of the 8 requests, m = 2 and 4 vs m = 1: %s\n", same ? "identical bits" : "DIFFERENT");

    // The same step with every rank's part on the fast path (dist/fast_rank_part.hpp): the grid's
    // code is the reference's, the arithmetic FastModel's (packed panels, its own summation order).
    std::printf("\n  the same step, each rank's part on the fast path (FastRankPart: fp32, 1 thread a rank),\n"
                "  largest relative logit gap to the reference split's (pp 2, m = 1):\n");
    for (const glass::dist::ParallelShape shape : {glass::dist::ParallelShape{.tp = 2, .pp = 1}, {.tp = 1, .pp = 2}}) {
        const std::vector<float> fast = split_step_logits(model, shape, 1, glass::dist::fast_rank_parts({.threads = 1}), batch);
        std::printf("    fast tp %d x pp %d: %.2e\n", shape.tp, shape.pp, relative_gap(fast, logits[0]));
    }
}

// 5a. Bytes a prefill worker ships per prompt position: K and V of every layer (kv_transfer.hpp).
void show_shipment_sizes(const glass::ModelConfig& here) {
    struct Shape {
        const char* name;
        int n_layers, n_kv_heads, head_dim;
    };
    const Shape shapes[] = {{"stories260K (this model)", here.n_layers, here.n_kv_heads, here.head_dim},
                            {"TinyLlama 1.1B", 22, 4, 64},
                            {"Llama 3 8B", 32, 8, 128}};
    std::printf("  model                      layers  KV heads x dim   bytes/position fp32    int8   1,000-token prompt fp32      int8\n");
    for (const Shape& sh : shapes) {
        glass::ModelConfig c;  // the shape's head counts: all kv_bytes_per_token reads
        c.n_layers = sh.n_layers;
        c.n_kv_heads = sh.n_kv_heads;
        c.head_dim = sh.head_dim;
        const long long fp32 = glass::kv_bytes_per_token(c, glass::KvType::fp32);
        const long long int8 = glass::kv_bytes_per_token(c, glass::KvType::int8);
        std::printf("  %-26s %6d  %8d x %-4d %20lld %7lld %22.1f MB %6.1f MB\n", sh.name, sh.n_layers, sh.n_kv_heads,
                    sh.head_dim, fp32, int8, 1000 * fp32 / 1e6, 1000 * int8 / 1e6);
    }
}

// One greedy step of one sequence over a pool: `tokens` at positions start.., its last logits.
std::vector<float> pool_step(const glass::Model& m, glass::serve::PagedKVPool& pool, const std::vector<int>& table,
                             std::span<const int> tokens, int start) {
    const glass::serve::BatchEntry e{.tokens = tokens, .start = start, .block_table = table};
    return glass::serve::paged_forward(m, pool, std::span<const glass::serve::BatchEntry>(&e, 1));
}

// kNewTokens greedy ids from `logits`, the sequence continuing in `pool` after `positions`.
std::vector<int> pool_greedy(const glass::Model& m, glass::serve::PagedKVPool& pool, const std::vector<int>& table,
                             std::vector<float> logits, int positions) {
    std::vector<int> ids;
    for (int i = 0; i < kNewTokens; ++i) {
        ids.push_back(glass::sample_argmax(logits));
        logits = pool_step(m, pool, table, std::span<const int>(&ids.back(), 1), positions + i);
    }
    return ids;
}

// 5b. The prompt prefilled on rank 1, its blocks shipped to rank 0 (other block ids), decoded there.
void show_shipment(const glass::Model& m, const glass::Llama2cTokenizer& tok) {
    const std::vector<int> prompt = tok.encode(kPrompt, tok.adds_bos(), false);
    const int n = static_cast<int>(prompt.size());
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8}) {
        glass::serve::PagedKVPool alone(m.config, 4, 16, kv);  // one process: prefill and decode in one pool
        const std::vector<int> alone_table = {0, 1};
        const std::vector<int> one = pool_greedy(m, alone, alone_table, pool_step(m, alone, alone_table, prompt, 0), n);
        std::vector<int> shipped_ids;
        long long sent = 0;
        glass::dist::run_ranks(2, [&](glass::dist::Communicator& comm) {
            glass::serve::PagedKVPool pool(m.config, 4, 16, kv);
            if (comm.rank() == 1) {  // the prefill worker: its blocks 2 and 3
                const std::vector<int> table = {2, 3};
                sent = glass::dist::ship_kv(comm, 0, pool, table, n, pool_step(m, pool, table, prompt, 0));
                return;
            }
            const std::vector<int> table = {1, 0};  // the decode worker reserved blocks 1 and 0
            std::vector<float> last(static_cast<size_t>(m.config.vocab_size));
            glass::dist::receive_kv(comm, 1, pool, table, n, last);
            shipped_ids = pool_greedy(m, pool, table, last, n);
        });
        const long long blocks = glass::kv_bytes_per_token(m.config, kv) * n;
        std::printf("  %s KV: %d positions; sent %lld bytes = %lld of blocks + %d of header + %d of logits\n",
                    glass::to_string(kv), n, sent, blocks, 4 * glass::dist::kShipmentHeaderInts, 4 * m.config.vocab_size);
        std::printf("    decoded on rank 0: %s%s\n", kPrompt, shown(text_of(tok, prompt.back(), shipped_ids)).c_str());
        std::printf("    same tokens as one process: %s\n", shipped_ids == one ? "yes" : "NO");
    }
}

// 6. The serving engine computes no prompt: a prefill worker on its own thread and backend does,
// and ships each request's rows; the engine samples the first token from the shipped logits.
void show_remote_prefill(const glass::Model& m, const glass::Llama2cTokenizer& tok) {
    const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben went to the park",
                                              "The little dog was very happy because", "Once upon a time, there was a big tree"};
    const auto serve_all = [&](glass::serve::EngineOptions eo) {
        glass::serve::CpuPagedBackend backend(m);
        glass::serve::Engine engine(backend, tok, eo);
        for (size_t i = 0; i < prompts.size(); ++i) {
            glass::GenerateOptions o;
            o.max_new_tokens = 24;
            o.sampling.temperature = 0.8f;
            o.seed = 100 + i;
            engine.add_request(prompts[i], o);
        }
        return engine.run_to_completion();
    };
    const std::vector<glass::serve::RequestResult> combined = serve_all({});
    glass::serve::CpuPagedBackend worker_backend(m);
    glass::serve::ThreadPrefill worker(worker_backend);  // the worker thread, with its own pool
    glass::serve::EngineOptions eo;
    eo.remote_prefill = &worker;
    const std::vector<glass::serve::RequestResult> apart = serve_all(eo);
    const long long per_position = glass::kv_bytes_per_token(m.config, glass::KvType::fp32);
    for (size_t i = 0; i < apart.size(); ++i) {
        const glass::serve::RequestResult& r = apart[i];
        const long long n = static_cast<long long>(r.prompt_ids.size()), shipped = n - r.cached_tokens;
        std::printf("  request %zu: %2lld prompt positions, %2lld shipped = %6lld bytes of rows; same text as combined: %s\n",
                    i, n, shipped, shipped * per_position,
                    r.generated_ids == combined[i].generated_ids && r.text == combined[i].text ? "yes" : "NO");
    }
    std::printf("    request 3 (from the worker): %s%s\n", prompts[3].c_str(), shown(apart[3].text).c_str());
}

}  // namespace

static int run(int argc, char** argv) {
    int tp = 0;  // 0: draw tp 2 and 4, generate with 2
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--tp") == 0 && i + 1 < argc) tp = example::int_arg(argv[++i], "--tp", 1, 8);
        else glass::fail("unknown argument '", argv[i], "' (usage: 29_tensor_parallel [--tp N])");
    }
    const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const auto tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", model.config.vocab_size);
    const glass::ModelConfig& c = model.config;
    if (tp > 0) glass::dist::tensor_split(c, 0, tp);  // a split that does not divide is refused before any output

    std::printf("1. Who holds what: stories260K (dim %d; %d query heads on %d KV heads of %d; MLP %d; vocabulary %d;\n"
                "   %d layers) split by tensor_split and copied by shard_model\n\n",
                c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.hidden_dim, c.vocab_size, c.n_layers);
    for (int t : tp == 0 ? std::vector<int>{2, 4} : std::vector<int>{tp}) show_split(model, t);
    show_replicated_kv();

    const int gen_tp = tp == 0 ? 2 : tp;
    std::printf("\n2. Where the ranks talk, in a forward pass over n positions (n = 1 when decoding), tp %d\n\n", gen_tp);
    show_talk(c, gen_tp);

    std::printf("3. Greedy, %d tokens: one process, then %d ranks (threads of this process)\n\n", kNewTokens, gen_tp);
    show_generation(model, tok, gen_tp);

    std::printf("\n4. Serving over pp 2 stages: one engine step's requests in micro-batches\n\n");
    show_micro_batches(model);

    std::printf("\n5. Disaggregated prefill and decode: what a prompt's KV costs to ship\n\n");
    show_shipment_sizes(c);
    std::printf("\n");
    show_shipment(model, tok);

    std::printf("\n6. The serving engine with a prefill worker: four sampled requests, their prompts computed on\n"
                "   the worker's thread and shipped in (%lld bytes a position), against the combined engine\n\n",
                static_cast<long long>(glass::kv_bytes_per_token(c, glass::KvType::fp32)));
    show_remote_prefill(model, tok);
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
