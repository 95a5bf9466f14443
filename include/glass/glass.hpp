/// \file
/// \brief glass/glass.hpp — every header of glass, in the order a request meets it.
/// ```text
/// Include this one header to get all of glass. The list below is also a reading order: the
/// journey's stages at the top level of include/glass/, and beside them the families a stage
/// grows into (tokenize/, formats/, chat/, serve/, fast/).
/// ```
#pragma once

// Foundations: how errors are reported, the matrix types, the shape of a model, room in memory.
#include "glass/errors.hpp"
#include "glass/tensor.hpp"
#include "glass/config.hpp"
#include "glass/memory_budget.hpp"

// 0. Weights: a llama2.c checkpoint, mmap'd and validated.
#include "glass/checkpoint.hpp"

// 1. Text -> ids. The interface, then the two BPE families and what they are built from...
#include "glass/tokenizer.hpp"
#include "glass/tokenize/bpe_merge.hpp"
#include "glass/tokenize/special_tokens.hpp"
#include "glass/tokenize/sentencepiece_bpe.hpp"
#include "glass/tokenize/pretokenize.hpp"
#include "glass/tokenize/byte_level.hpp"
#include "glass/tokenize/normalize.hpp"
#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/tokenize/bpe_train.hpp"
#include "glass/tokenize/number_tokenizer.hpp"  // a stand-in vocabulary for random weights: token i reads " i"
// ...and the files vocabularies come in.
#include "glass/formats/json_input.hpp"
#include "glass/formats/read_file.hpp"     // a whole file, or an error naming it
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "glass/formats/hf_loader.hpp"
#include "glass/formats/gguf.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "glass/formats/gguf_export.hpp"
#include "glass/formats/gguf_model.hpp"    // a model from a GGUF file: config, tensors, ggml types
#include "glass/formats/gguf_quantize.hpp" // glass quantize: a GGUF rewritten in another file type
#include "glass/formats/hf_model.hpp"      // a model from a Hugging Face folder: config.json + safetensors
#include "glass/formats/model_files.hpp"   // -m MODEL: llama2.c, GGUF; the model's own tokenizer
#include "glass/formats/bpe_train_file.hpp"

// 1'. A conversation -> the text an instruct model reads: its own Jinja chat template (chat/).
#include "glass/chat/template_errors.hpp"
#include "glass/chat/jinja_lexer.hpp"
#include "glass/chat/jinja_expressions.hpp"
#include "glass/chat/jinja_parser.hpp"
#include "glass/chat/jinja_value.hpp"
#include "glass/chat/jinja_strings.hpp"
#include "glass/chat/jinja_ops.hpp"
#include "glass/chat/jinja_methods.hpp"
#include "glass/chat/jinja_filters.hpp"
#include "glass/chat/jinja_builtins.hpp"
#include "glass/chat/jinja_eval.hpp"
#include "glass/chat/chat_template.hpp"
#include "glass/chat/model_template.hpp"   // where a model keeps its template; the prompt's ids

// 2.-6. The forward pass, stage by stage, then assembled.
#include "glass/embedding.hpp"      // 2. ids -> vectors
#include "glass/rope.hpp"           // 3. position
#include "glass/rmsnorm.hpp"        // 4. (normalization before attention and the MLP)
#include "glass/softmax.hpp"        // 4. scores -> weights
#include "glass/attention.hpp"      // 4. attention
#include "glass/flash_attention.hpp" // 4. the same attention, tile by tile (FlashAttention)
#include "glass/mlp.hpp"            // 5. MLP
#include "glass/kv_cache.hpp"       // 6, 8. the cache prefill fills and decode extends
#include "glass/trace.hpp"          // (an optional window into the forward pass)
#include "glass/session.hpp"        // the interface every backend implements
#include "glass/transformer.hpp"    // 4-6, 8. the forward pass, CpuSession

// 7.-9. From logits to text, and what it costs.
#include "glass/sampling.hpp"       // 7. logits -> token
#include "glass/streaming.hpp"      // 8. text out, whole characters only
#include "glass/metrics.hpp"        // 9. TTFT, TPOT, bandwidth bound
#include "glass/generate.hpp"       // 6-8. the loop: prefill once, decode until done
#include "glass/speculative.hpp"    // the loop with a drafter: k guesses, one target pass checks them
#include "glass/half.hpp"           // 16-bit floats (fp16, bf16)
#include "glass/int8.hpp"           // int8 with one scale per group (KV cache rows, activations)
#include "glass/quantize.hpp"       // weights in 8 or 4 bits, blocks of 32 with one scale (C14)
#include "glass/ggml_quants.hpp"    // the blocks of downloaded files: Q4_1 .. Q6_K, k-quants
#include "glass/ggml_quants_write.hpp"  // ... and fp32 into them; the Q4_K_M mix

// Serving many requests at once: requests, the block pool with its prefix cache, the scheduler,
// the batched paged forward pass, the engine that steps them; then what a server counts, the
// engine on its own thread and the OpenAI API's JSON, which `glass serve` puts on HTTP.
#include "glass/serve/request.hpp"
#include "glass/serve/block_manager.hpp"
#include "glass/serve/scheduler.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/serve/paged_kv_pool.hpp"
#include "glass/serve/kv_shipment.hpp"
#include "glass/serve/paged_transformer.hpp"
#include "glass/serve/remote_prefill.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/outcome.hpp"
#include "glass/serve/prometheus_counters.hpp"
#include "glass/serve/engine_state.hpp"
#include "glass/serve/ticket.hpp"
#include "glass/serve/engine_thread.hpp"
#include "glass/serve/api_error.hpp"
#include "glass/serve/openai_chat.hpp"
#include "glass/serve/openai_api.hpp"
#include "glass/serve/openai_response.hpp"

// The fast CPU path: the same Session, with packed weights, AVX-512 and threads; then the same
// machinery as a serving backend, the whole batch in one pass over the weights.
#include "glass/fast/thread_pool.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/packed_kquants.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/kernel_table.hpp"
#include "glass/fast/kernels_portable.hpp"
#include "glass/fast/kernels_avx2.hpp"
#include "glass/fast/kernels_avx2_matmul.hpp"
#include "glass/fast/kernels_avx2_kquants.hpp"
#include "glass/fast/kernels_avx2_attention.hpp"
#include "glass/fast/kernels_avx512.hpp"
#include "glass/fast/kernels_avx512_kquants.hpp"
#include "glass/fast/kernels_avx512_attention.hpp"
#include "glass/fast/kernels_neon.hpp"
#include "glass/fast/kernels_neon_kquants.hpp"
#include "glass/fast/kernels_neon_attention.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/token_tiles.hpp"
#include "glass/fast/fast_model.hpp"
#include "glass/fast/fast_weights.hpp"
#include "glass/fast/fast_flash_attention.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/benchmark.hpp"
#include "glass/fast/random_model.hpp"

// When a model outgrows one machine: ranks that talk (threads, or Open MPI processes:
// dist/mpi_communicator.hpp, included by MPI programs only), the cut of a model into ranks, and
// the forward pass split over them; a prompt's KV cache shipped from a prefill worker to a decode
// worker (disaggregated serving).
#include "glass/dist/communicator.hpp"
#include "glass/dist/thread_communicator.hpp"
#include "glass/dist/driven_session.hpp"
#include "glass/dist/shard.hpp"
#include "glass/dist/tensor_parallel.hpp"
#include "glass/dist/pipeline_parallel.hpp"
#include "glass/dist/parallel_session.hpp"
#include "glass/dist/split_shipment.hpp"
#include "glass/dist/rank_share.hpp"
#include "glass/dist/rank_part.hpp"
#include "glass/dist/split_paged_forward.hpp"
#include "glass/dist/parallel_paged_backend.hpp"
#include "glass/dist/fast_rank_part.hpp"
#include "glass/dist/kv_transfer.hpp"
#include "glass/dist/disaggregated.hpp"
#if __has_include(<mpi.h>)  // only programs built with Open MPI's include path (tools/, tests/dist/)
#include "glass/dist/mpi_communicator.hpp"
#endif
