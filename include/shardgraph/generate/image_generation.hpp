#pragma once
// generate_from_image: a vision-language model (models::llava) continues prompts that open with an
// image, on one rank of the mesh; every rank of the mesh runs it with the same arguments.
//
// It runs two generation programs compiled from the one model (inference{.kv_cache = true}):
//   prefill  models::llava<Mesh>(o)                                  once, seq = the prompt
//            pixel_values, input_ids (batch, prompt), kv_context: the tower, the projector and the
//            join of image features and text run once; the decoder writes the prompt's keys and values
//   decode   models::llama<Mesh>(models::llava_language_model(o))    per new token, seq = 1
//            input_ids (batch, 1), kv_context: the language model alone, with no image input and no
//            tower. Its caches carry the prefill's names and placement; copy_kv_cache hands them over.
//
//   auto bind_rank = [&](generate::image_generation_step step, const model_sizes& sizes) {
//     const bool first = step == generate::image_generation_step::prefill;
//     return bind(first ? program_view(prefill) : program_view(decode), sizes, comm, cpu::backend{},
//                 mesh, weights);
//   };
//   auto results = generate::generate_from_image(config, bind_rank, pixel_values, prompt_ids,
//                                                {.max_new_tokens = 16, .max_positions = 4096});
//
// Every row is one request: its image (pixel_values (batch, channels, image_size, image_size)) and
// its prompt (prompt_ids (batch, prompt) i64), whose first config.image_tokens() positions are the
// image's tokens (models::llava reads the features there, not the ids) and the rest its text. The
// rows share the prompt's length (no padding), max_new_tokens, stop tokens and sampling; a row
// finishes at its first stop token (kept), at max_new_tokens or at max_positions, as a scheduler's
// request does, and the others go on. The cache is contiguous: each row owns the blocks of its
// prompt and new tokens, numbered within its data-parallel rank's pool. The prefill's binding is
// dropped once the decode binding holds the cache: the decode steps keep one copy of the weights.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/model_sizes.hpp"
#include "shardgraph/generate/request.hpp"
#include "shardgraph/generate/runner.hpp"
#include "shardgraph/generate/sampler.hpp"
#include "shardgraph/models/llava.hpp"
#include "shardgraph/runtime/kv_cache.hpp"
#include "shardgraph/runtime/rank_io.hpp"

namespace shardgraph::generate {

// Which program bind_rank binds: the model with its tower (prefill) or its language model (decode).
enum class image_generation_step { prefill, decode };

struct image_generation_options {
  std::int64_t max_new_tokens = 16;
  std::vector<token_id> stop_tokens{};
  sampling_params sampling{};      // every row's; {}: greedy (HF's do_sample=False)
  std::int64_t max_positions = 0;  // the decoder's positions (text_config's max_position_embeddings)
  std::int64_t block_tokens = 16;  // tokens per cache block
  std::int64_t data_parallel = 1;  // the mesh's data-axis ranks, over which the rows are split
  // Called with (row, token) for each token as it is chosen, rows in order within a step.
  std::function<void(std::int64_t, token_id)> on_token{};
  // Called with (step, logits (batch, seq, padded vocab)) for each call: step 0 is the prefill.
  std::function<void(std::int64_t, const host_tensor&)> on_logits{};
};

namespace detail {

// kv_context (batch, 1 + max_blocks) for rows that hold `length` tokens each: row b owns blocks
// [r max_blocks, (r + 1) max_blocks) of its data-parallel rank's pool, r = b mod rows_per_pool.
inline host_tensor contiguous_kv_context(std::int64_t batch, std::int64_t rows_per_pool,
                                         std::int64_t max_blocks, std::int64_t length) {
  std::vector<std::int32_t> tables;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t k = 0; k < max_blocks; ++k)
      tables.push_back(static_cast<std::int32_t>(b % rows_per_pool * max_blocks + k));
  return make_kv_context(host_tensor::from<std::int32_t>({batch, max_blocks}, tables),
                         host_tensor::from<std::int32_t>(
                             {batch}, std::vector<std::int32_t>(std::size_t(batch), std::int32_t(length))));
}

// The rows as a scheduler's requests (row b: request b), checked as it checks them; throws for a
// row no run can serve, and for inputs or options out of shape.
inline std::vector<generation_request> image_requests(const models::llava_config& config,
                                                      const host_tensor& pixel_values,
                                                      const host_tensor& prompt_ids,
                                                      const image_generation_options& o) {
  const std::vector<std::int64_t>& ids = prompt_ids.shape();
  const std::vector<std::int64_t>& pixels = pixel_values.shape();
  if (prompt_ids.type() != dtype::i64 || ids.size() != 2 || ids[0] < 1)
    fail("generate_from_image", "prompt_ids must be (batch, prompt) i64 with at least one row",
         "give one row of token ids per image: the image's tokens, then the text");
  if (pixels.size() != 4 || pixels[0] != ids[0])
    fail("generate_from_image",
         "pixel_values must be (batch, channels, image_size, image_size) with one image per prompt row (" +
             std::to_string(ids[0]) + ")",
         "give as many images as prompts, in the prompts' order");
  if (o.data_parallel < 1 || ids[0] % o.data_parallel != 0)
    fail(
        "generate_from_image",
        std::to_string(ids[0]) + " rows do not split over data_parallel = " + std::to_string(o.data_parallel),
        "give a multiple of the mesh's data-axis size of rows");
  if (o.max_positions < 1)
    fail("generate_from_image", "max_positions is " + std::to_string(o.max_positions),
         "give the decoder's positions (text_config's max_position_embeddings)");
  if (o.block_tokens < 1)
    fail("generate_from_image", "block_tokens is " + std::to_string(o.block_tokens),
         "give a positive block size");
  config.sizes(ids[0], ids[1]);  // refuses a prompt with no text after the image tokens
  std::vector<generation_request> requests;
  for (std::int64_t b = 0; b < ids[0]; ++b) {
    generation_request r{
        .max_new_tokens = o.max_new_tokens, .stop_tokens = o.stop_tokens, .sampling = o.sampling};
    const auto* row = reinterpret_cast<const std::int64_t*>(prompt_ids.bytes().data()) + b * ids[1];
    r.prompt.assign(row, row + ids[1]);
    check_request(r, b, {.vocab_size = config.text.vocab, .max_positions = o.max_positions});
    requests.push_back(std::move(r));
  }
  return requests;
}

template <class BindRank>
using rank_of = std::invoke_result_t<BindRank&, image_generation_step, const model_sizes&>;

// Converts to the rank that bind_rank returns, so that std::optional::emplace holds it unmoved.
template <class BindRank>
struct binding {
  BindRank& bind;
  image_generation_step step;
  const model_sizes& sizes;
  operator rank_of<BindRank>() const { return bind(step, sizes); }
};

}  // namespace detail

// A prompt row for generate_from_image: config.image_tokens() copies of `image_token` (config.json's
// image_token_index), then `text` (ids of the tokenizer, without image tokens).
inline std::vector<token_id> image_prompt(const models::llava_config& config, std::span<const token_id> text,
                                          token_id image_token) {
  if (text.empty())
    fail("image_prompt", "the text is empty",
         "give at least one text token after the image (a BOS token, say)");
  if (std::find(text.begin(), text.end(), image_token) != text.end())
    fail("image_prompt", "the text holds the image token " + std::to_string(image_token),
         "give the text without image tokens: the image's tokens lead the prompt, and only there");
  std::vector<token_id> ids(static_cast<std::size_t>(config.image_tokens()), image_token);
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
}

// Runs the requests of `pixel_values` and `prompt_ids` (see above) to the end on this rank.
// bind_rank(step, sizes) binds the step's program on this rank (its communicator, backend, mesh
// and weights) with `sizes`: config's for (batch, prompt) or the decoder's for (batch, 1), and
// the cache's. Returns each row's result (id = the row), its new tokens without the prompt.
template <class BindRank>
std::vector<generation_result> generate_from_image(const models::llava_config& config, BindRank bind_rank,
                                                   const host_tensor& pixel_values,
                                                   const host_tensor& prompt_ids,
                                                   const image_generation_options& o) {
  std::vector<generation_request> requests = detail::image_requests(config, pixel_values, prompt_ids, o);
  const std::int64_t batch = prompt_ids.shape()[0], prompt = prompt_ids.shape()[1];
  const std::int64_t fed =
      std::min(prompt + o.max_new_tokens, o.max_positions) - 1;  // the last token is never fed
  const shardgraph::kv_cache_shape cache{.blocks = batch * ((fed + o.block_tokens - 1) / o.block_tokens),
                                         .block_tokens = o.block_tokens,
                                         .max_blocks = (fed + o.block_tokens - 1) / o.block_tokens};
  const std::int64_t rows_per_pool = batch / o.data_parallel;
  model_sizes prefill_sizes = config.sizes(batch, prompt), decode_sizes = config.text.sizes(batch, 1);
  set_kv_cache_sizes(prefill_sizes, cache);
  set_kv_cache_sizes(decode_sizes, cache);

  std::vector<generation_result> results(static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b) results[static_cast<std::size_t>(b)].id = b;
  std::vector<bool> finished(static_cast<std::size_t>(batch), false);
  std::int64_t running = batch;
  // Picks each running row's next token from the step's logits; finishes rows as a scheduler does.
  const auto choose = [&](std::int64_t step, const host_tensor& logits) {
    if (o.on_logits) o.on_logits(step, logits);
    for (std::int64_t b = 0; b < batch; ++b) {
      generation_result& r = results[static_cast<std::size_t>(b)];
      std::vector<token_id>& history =
          requests[static_cast<std::size_t>(b)].prompt;  // prompt, then new tokens
      if (finished[static_cast<std::size_t>(b)]) continue;
      const std::vector<double> row = detail::last_position_logits(logits, b, config.text.vocab);
      const token_id next = sample_next_token(std::span<const double>(row), o.sampling, history,
                                              static_cast<std::int64_t>(r.generated.size()));
      r.generated.push_back(next);
      history.push_back(next);
      if (o.on_token) o.on_token(b, next);
      const bool stop = std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next) != o.stop_tokens.end();
      const auto generated = static_cast<std::int64_t>(r.generated.size());
      if (stop || generated == o.max_new_tokens || prompt + generated == o.max_positions) {
        r.reason = stop                            ? finish_reason::stop_token
                   : generated == o.max_new_tokens ? finish_reason::max_new_tokens
                                                   : finish_reason::max_positions;
        finished[static_cast<std::size_t>(b)] = true;
        --running;
      }
    }
  };

  std::optional<detail::rank_of<BindRank>> prefill;  // dropped once the decode binding holds the cache
  prefill.emplace(detail::binding<BindRank>{bind_rank, image_generation_step::prefill, prefill_sizes});
  choose(0, prefill
                ->forward(tensor_map{{"pixel_values", pixel_values},
                                     {"input_ids", prompt_ids},
                                     {"kv_context", detail::contiguous_kv_context(batch, rows_per_pool,
                                                                                  cache.max_blocks, prompt)}})
                .at("logits"));
  if (running == 0) return results;
  auto decode = bind_rank(image_generation_step::decode, decode_sizes);
  copy_kv_cache(*prefill, decode);
  prefill.reset();
  // choose() counts `running` down; every row has finished by step max_new_tokens - 1.
  for (std::int64_t step = 1; step < o.max_new_tokens && running > 0; ++step) {
    std::vector<token_id> last;  // a finished row feeds its last token too: the batch keeps its rows
    for (const generation_request& r : requests) last.push_back(r.prompt.back());
    choose(step, decode
                     .forward(tensor_map{
                         {"input_ids", host_tensor::from<std::int64_t>({batch, 1}, last)},
                         {"kv_context", detail::contiguous_kv_context(batch, rows_per_pool, cache.max_blocks,
                                                                      prompt + step)}})
                     .at("logits"));
  }
  return results;
}

}  // namespace shardgraph::generate
