#pragma once
// hf_eos_tokens: the ids that end a generated sequence, as HF's generate reads them: "eos_token_id"
// of generation_config.json when the directory has one, else of config.json; an integer, a list of
// integers, or null / absent (no eos: generation stops at max_new_tokens or the positions).
//
//   hf_eos_tokens("tests/golden/llama")   ->  {2}
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/json.hpp"

namespace shardgraph::io {

inline std::vector<std::int64_t> hf_eos_tokens(const std::string& directory) {
  const std::string generation_config = directory + "/generation_config.json";
  const std::string path =
      std::filesystem::exists(generation_config) ? generation_config : directory + "/config.json";
  const json::value config = read_json_file(path);
  const json::value* eos = config.find("eos_token_id");
  if (eos == nullptr || eos->is_null()) return {};
  if (eos->type() == json::kind::integer) return {eos->as_int()};
  if (eos->type() != json::kind::array)
    fail(path, "\"eos_token_id\" is neither an integer nor a list of integers",
         "give the end-of-sequence id, a list of them, or null");
  std::vector<std::int64_t> ids;
  for (const json::value& id : eos->as_array()) ids.push_back(id.as_int());
  return ids;
}

}  // namespace shardgraph::io
