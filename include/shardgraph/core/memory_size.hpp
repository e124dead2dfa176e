#pragma once
// memory_size: a memory amount written by a user, as bytes or as a share of something the caller
// knows (a GPU's total memory, the free memory of a device):
//
//   "40GiB", "512MiB", "40GB", "40G", "1.5TiB", "123456" (bytes)   -> {.bytes = ...}
//   "80%"                                                          -> {.fraction = 0.8}
//
// Binary and decimal units are told apart as usual: KiB = 1024, KB = 1000; a bare K/M/G/T is
// binary, as in nvidia-smi. A malformed value is an error naming `where`, never a silent default.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "shardgraph/core/error.hpp"

namespace shardgraph {

struct memory_amount {
  std::int64_t bytes = 0;  // > 0 when given as bytes
  double fraction = 0;     // in (0, 1] when given as a share

  // The bytes this amount stands for, given what a share is taken of.
  std::int64_t of(std::int64_t whole_bytes) const {
    if (bytes > 0) return bytes;
    return static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(whole_bytes)));
  }
};

// `share_example` ends the how-to-fix of a malformed value: "a share of the GPU (80%)".
inline memory_amount parse_memory_amount(std::string_view text, std::string_view where,
                                         std::string_view share_example) {
  const auto bad = [&] {
    fail(where, "'" + std::string(text) + "' is not a memory size",
         "give bytes with a unit (40GiB, 512MiB, 40GB) or " + std::string(share_example));
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) bad();
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(std::string(text.substr(0, i)), &used);
    if (used != i) bad();
  } catch (const std::exception&) {
    bad();
  }
  std::string unit(text.substr(i));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  if (unit == "%") {
    if (!(value > 0 && value <= 100))
      fail(where, "'" + std::string(text) + "' is not a share in (0, 100] %", "give a share such as 80%");
    return {.bytes = 0, .fraction = value / 100.0};
  }
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    const char prefix = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const std::string rest = unit.substr(1);
    const int power = prefix == 'K' ? 1 : prefix == 'M' ? 2 : prefix == 'G' ? 3 : prefix == 'T' ? 4 : 0;
    if (power == 0) bad();
    double base = 1024;
    if (rest == "B")
      base = 1000;
    else if (rest != "" && rest != "iB" && rest != "i")
      bad();
    scale = std::pow(base, power);
  }
  if (!(value > 0))
    fail(where, "'" + std::string(text) + "' is not a positive size", "give a size above zero");
  return {.bytes = static_cast<std::int64_t>(value * scale), .fraction = 0};
}

}  // namespace shardgraph
