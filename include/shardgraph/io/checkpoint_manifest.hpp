#pragma once
// The manifest of a shardgraph checkpoint, shardgraph-checkpoint.json, written last into the
// directory (directory_replacement.hpp): its presence is what makes the checkpoint complete.
//
//   {"format": "shardgraph-weights-2", "ranks": 2,
//    "files": {"rank-00000.safetensors": {"bytes": 4216, "header_crc32c": "9a0c41f2"},
//              "rank-00001.safetensors": {"bytes": 4104, "header_crc32c": "03b7e5d1"}},
//    "state": {...}}                                                   (optional, any JSON object)
//
// "files" covers each rank file's size and the CRC-32C of its header (the 8-byte length and the
// JSON header, which holds the tensors' places and their own CRC-32Cs), so that every byte of a
// checkpoint is checked: the header here when the checkpoint opens, each tensor's data on its first
// read (safetensors.hpp). Format 1 (no "files") is still read, unchecked.
// parse_checkpoint_manifest validates everything it returns: any text either parses into a
// manifest whose fields have the documented types and ranges or throws shardgraph::error naming
// `source` (a fuzz target holds it to that: tests/io/checkpoint_manifest_fuzz.cpp).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/crc32c.hpp"
#include "shardgraph/io/json.hpp"

namespace shardgraph::io {

inline constexpr std::string_view sharded_weights_format = "shardgraph-weights-2";
inline constexpr std::string_view sharded_weights_format_unchecked = "shardgraph-weights-1";
inline constexpr std::string_view sharded_weights_manifest = "shardgraph-checkpoint.json";
inline constexpr int max_checkpoint_ranks = 1 << 20;

// What the manifest says of one rank file.
struct saved_file_check {
  std::uint64_t bytes = 0;
  std::uint32_t header_crc32c = 0;
};

struct checkpoint_manifest {
  int ranks = 0;
  bool checked = true;                            // format 2: every rank file is in `files`
  std::map<std::string, saved_file_check> files;  // by file name, e.g. "rank-00000.safetensors"
  json::value state;                              // a JSON object, or null when none was kept
};

namespace detail {

inline std::string rank_file_name(int rank) {
  std::string digits = std::to_string(rank);
  return "rank-" + std::string(digits.size() < 5 ? 5 - digits.size() : 0, '0') + digits + ".safetensors";
}

[[noreturn]] inline void corrupt_manifest(const std::string& source, const std::string& why) {
  fail(source, why,
       "the checkpoint is corrupt or from another version; load an earlier checkpoint or save again");
}

inline std::uint32_t parse_crc32c_hex(const json::value& v, const std::string& source,
                                      const std::string& file) {
  std::uint32_t crc = 0;
  bool ok = v.type() == json::kind::string && v.as_string().size() == 8;
  for (const char c : ok ? v.as_string() : std::string()) {
    const bool digit = c >= '0' && c <= '9', letter = c >= 'a' && c <= 'f';
    ok = ok && (digit || letter);
    crc = crc << 4 | static_cast<std::uint32_t>(digit ? c - '0' : letter ? c - 'a' + 10 : 0);
  }
  if (!ok) corrupt_manifest(source, "\"header_crc32c\" of " + file + " is not eight lowercase hex digits");
  return crc;
}

inline std::map<std::string, saved_file_check> parse_file_checks(const json::value& files, int ranks,
                                                                 const std::string& source) {
  if (files.type() != json::kind::object) corrupt_manifest(source, "\"files\" is not a JSON object");
  std::map<std::string, saved_file_check> out;
  for (int r = 0; r < ranks; ++r) {
    const std::string name = rank_file_name(r);
    const json::value* entry = files.find(name);
    if (entry == nullptr || entry->type() != json::kind::object)
      corrupt_manifest(source, "\"files\" has no object for " + name);
    const json::value* bytes = entry->find("bytes");
    const json::value* crc = entry->find("header_crc32c");
    if (bytes == nullptr || bytes->type() != json::kind::integer || bytes->as_int() < 8)
      corrupt_manifest(source, "\"bytes\" of " + name + " is not an integer of at least 8");
    if (crc == nullptr) corrupt_manifest(source, "\"header_crc32c\" of " + name + " is missing");
    out.emplace(name, saved_file_check{static_cast<std::uint64_t>(bytes->as_int()),
                                       parse_crc32c_hex(*crc, source, name)});
  }
  if (files.as_object().size() != out.size())
    corrupt_manifest(source, "\"files\" names files that are not rank files of this checkpoint");
  return out;
}

}  // namespace detail

// Parses a manifest's text; `source` (its path) names it in errors.
inline checkpoint_manifest parse_checkpoint_manifest(std::string_view text, const std::string& source) {
  const json::value m = json::parse(text, source);
  const json::value* format = m.type() == json::kind::object ? m.find("format") : nullptr;
  const json::value* ranks = m.type() == json::kind::object ? m.find("ranks") : nullptr;
  const bool known_format = format != nullptr && format->type() == json::kind::string &&
                            (format->as_string() == sharded_weights_format ||
                             format->as_string() == sharded_weights_format_unchecked);
  if (!known_format || ranks == nullptr || ranks->type() != json::kind::integer || ranks->as_int() < 1 ||
      ranks->as_int() > max_checkpoint_ranks)
    detail::corrupt_manifest(
        source, "is not {\"format\": \"" + std::string(sharded_weights_format) +
                    "\", \"ranks\": N, ...} with 1 <= N <= " + std::to_string(max_checkpoint_ranks));
  checkpoint_manifest out;
  out.ranks = static_cast<int>(ranks->as_int());
  out.checked = format->as_string() == sharded_weights_format;
  if (out.checked) {
    const json::value* files = m.find("files");
    if (files == nullptr)
      detail::corrupt_manifest(source, "has no \"files\" (the sizes and checksums of the rank files)");
    out.files = detail::parse_file_checks(*files, out.ranks, source);
  }
  if (const json::value* state = m.find("state"); state != nullptr) {
    if (state->type() != json::kind::object)
      detail::corrupt_manifest(source, "\"state\" is not a JSON object");
    out.state = *state;
  }
  return out;
}

// The manifest's text. `state` is a JSON object's text, or empty for none.
inline std::string checkpoint_manifest_text(int ranks, const std::map<std::string, saved_file_check>& files,
                                            const std::string& state) {
  std::string text = "{\"format\": \"" + std::string(sharded_weights_format) +
                     "\", \"ranks\": " + std::to_string(ranks) + ",\n \"files\": {";
  for (const auto& [name, check] : files)
    text += std::string(text.back() == '{' ? "" : ",") + "\n  " + json::quote(name) +
            ": {\"bytes\": " + std::to_string(check.bytes) + ", \"header_crc32c\": \"" +
            crc32c_hex(check.header_crc32c) + "\"}";
  return text + "}" + (state.empty() ? "" : ",\n \"state\": " + state) + "}\n";
}

}  // namespace shardgraph::io
