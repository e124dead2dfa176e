#pragma once
// The post-processor of tokenizer.json, as encode(text, {.add_special_tokens = true}) applies it:
// TemplateProcessing's "single" template puts special tokens around the sequence (LLaMA-2 and
// LLaMA-3 add their BOS: "<s> $A" -> [1, ids...]). GPT-2 and LLaMA-3 files also carry a
// ByteLevel post-processor, which only trims offsets and leaves ids alone.
#include <cstdint>
#include <utility>
#include <vector>

namespace shardgraph::text {

class post_processor {
 public:
  // One element of the single template: the ids of a special token, or the sequence ($A).
  struct template_item {
    bool is_sequence = false;
    std::vector<std::int32_t> ids;  // the special token's ids when !is_sequence
  };

  post_processor() = default;  // none: ids unchanged
  explicit post_processor(std::vector<template_item> single) : single_(std::move(single)) {}

  std::vector<std::int32_t> apply(std::vector<std::int32_t> sequence) const {
    if (single_.empty()) return sequence;
    std::vector<std::int32_t> out;
    for (const template_item& item : single_) {
      const std::vector<std::int32_t>& ids = item.is_sequence ? sequence : item.ids;
      out.insert(out.end(), ids.begin(), ids.end());
    }
    return out;
  }

 private:
  std::vector<template_item> single_;
};

}  // namespace shardgraph::text
