#pragma once
// A LLaMA config.json's RoPE: rope_theta and the scaling kind, in either spelling of HF
// transformers (ir/rope_scaling.hpp for what each kind computes):
//   older  "rope_theta": 500000.0, "rope_scaling": {"type" or "rope_type": "linear", "factor": 2.0}
//   newer  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, ...}
// null (or absent) meaning unscaled. Every field is honoured as transformers' modeling_rope_utils.py
// computes it, or refused with an error naming the field and its value:
//   all kinds  rope_type (or type), rope_theta, partial_rotary_factor (1 only)
//   linear     factor
//   dynamic    factor; the top-level max_position_embeddings (default 2048) is the length beyond
//              which theta grows (computed afresh for each bound sequence length, as a model
//              that starts from its original frequencies does)
//   llama3     factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
//              (default: max_position_embeddings)
//   yarn       factor (null: max_position_embeddings / original), original_max_position_embeddings
//              (default: max_position_embeddings; when given, factor must equal that ratio, which
//              transformers 4 uses in its place), attention_factor (null: 0.1 ln(factor) + 1),
//              beta_fast (null or 0: 32), beta_slow (null or 0: 1), truncate (default true)
// Refused: other kinds (longrope, proportional, ...), yarn's mscale and mscale_all_dim, any other
// field, a top-level original_max_position_embeddings or partial_rotary_factor other than 1.
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "shardgraph/compute/rope_frequencies.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/ir/rope_scaling.hpp"

namespace shardgraph::io {

namespace detail {

inline std::string rope_json_text_of(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A JSON value as it reads in the file (short), for messages.
inline std::string rope_json_text(const json::value& v) {
  switch (v.type()) {
    case json::kind::null: return "null";
    case json::kind::boolean: return v.as_bool() ? "true" : "false";
    case json::kind::integer: return std::to_string(v.as_int());
    case json::kind::number: return rope_json_text_of(v.as_double());
    case json::kind::string: return "\"" + v.as_string() + "\"";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "?";
}

// Reads the RoPE fields of one config.json; `path` and `section` ("rope_parameters" or
// "rope_scaling") name the fields in errors.
class hf_rope_reader {
 public:
  hf_rope_reader(const json::value& config, const json::value* section, std::string path, std::string name)
      : config_(config), section_(section), path_(std::move(path)), name_(std::move(name)) {}

  [[noreturn]] void refuse(std::string_view field, const json::value& v, std::string_view why,
                           std::string_view how) const {
    fail(path_ + ": " + std::string(field), std::string(field) + " " + rope_json_text(v) + " " + std::string(why), how);
  }

  const json::value* field(std::string_view key) const {  // in the section; nullptr when absent or null
    const json::value* v = section_ ? section_->find(key) : nullptr;
    return v && !v->is_null() ? v : nullptr;
  }
  std::string field_name(std::string_view key) const { return name_ + "." + std::string(key); }

  double number(const json::value& v, std::string_view field) const {
    if (v.type() != json::kind::integer && v.type() != json::kind::number)
      refuse(field, v, "is not a number", "give a number");
    return v.as_double();
  }
  double number_or(std::string_view key, double fallback) const {
    const json::value* v = field(key);
    return v ? number(*v, field_name(key)) : fallback;
  }
  double required(std::string_view key, std::string_view kind) const {
    const json::value* v = field(key);
    if (v == nullptr)
      fail(path_ + ": " + field_name(key), "rope_type \"" + std::string(kind) + "\" needs " + std::string(key),
           "add it to " + name_);
    return number(*v, field_name(key));
  }
  std::int64_t positive_int(const json::value& v, std::string_view field) const {
    if (v.type() != json::kind::integer || v.as_int() < 1) refuse(field, v, "is not a positive integer", "give a length in tokens");
    return v.as_int();
  }
  // max_position_embeddings at the top level (LlamaConfig's default 2048 when absent).
  std::int64_t max_positions() const {
    const json::value* v = config_.find("max_position_embeddings");
    return v && !v->is_null() ? positive_int(*v, "max_position_embeddings") : 2048;
  }
  std::int64_t original_max_positions() const {
    const json::value* v = field("original_max_position_embeddings");
    return v ? positive_int(*v, field_name("original_max_position_embeddings")) : max_positions();
  }

  const json::value& config_;
  const json::value* section_;
  std::string path_, name_;
};

// rope_type (or type) of the section: "default" when absent.
inline std::string hf_rope_type(const hf_rope_reader& r) {
  const json::value* type = r.field("rope_type");
  const json::value* old = r.field("type");
  for (const json::value* v : {type, old})
    if (v && v->type() != json::kind::string) r.refuse(r.field_name(v == type ? "rope_type" : "type"), *v, "is not a string", "give a RoPE kind, e.g. \"linear\"");
  if (type && old && type->as_string() != old->as_string())
    r.refuse(r.field_name("type"), *old, "differs from rope_type " + rope_json_text(*type), "give one of them");
  return type ? type->as_string() : old ? old->as_string() : "default";
}

// rope_theta: in the section (which HF prefers) or at the top level; 10000 when neither.
inline double hf_rope_theta(const hf_rope_reader& r) {
  const json::value* top = r.config_.find("rope_theta");
  if (top && top->is_null()) top = nullptr;
  const json::value* inside = r.field("rope_theta");
  if (top && inside && r.number(*top, "rope_theta") != r.number(*inside, r.field_name("rope_theta")))
    r.refuse(r.field_name("rope_theta"), *inside, "differs from the top-level rope_theta " + rope_json_text(*top),
             "give one of them");
  return inside ? r.number(*inside, r.field_name("rope_theta")) : top ? r.number(*top, "rope_theta") : 10000.0;
}

// The fields each kind honours, beyond rope_type, type, rope_theta and partial_rotary_factor.
inline bool hf_rope_field_honoured(rope_type kind, std::string_view key) {
  switch (kind) {
    case rope_type::standard: return false;
    case rope_type::linear:
    case rope_type::dynamic: return key == "factor";
    case rope_type::llama3:
      return key == "factor" || key == "low_freq_factor" || key == "high_freq_factor" ||
             key == "original_max_position_embeddings";
    case rope_type::yarn:
      return key == "factor" || key == "original_max_position_embeddings" || key == "attention_factor" ||
             key == "beta_fast" || key == "beta_slow" || key == "truncate";
  }
  return false;
}

inline rope_type hf_rope_kind(const hf_rope_reader& r, const std::string& type) {
  for (rope_type k : {rope_type::standard, rope_type::linear, rope_type::dynamic, rope_type::llama3, rope_type::yarn})
    if (type == rope_type_name(k)) return k;
  const json::value* v = r.field("rope_type") ? r.field("rope_type") : r.field("type");
  r.refuse(r.field_name(r.field("rope_type") ? "rope_type" : "type"), *v, "is not a RoPE kind shardgraph computes",
           "use \"default\", \"linear\", \"dynamic\", \"llama3\" or \"yarn\"");
}

// Refuses each field of the section that `kind` does not honour, and partial_rotary_factor other than 1.
inline void hf_rope_check_fields(const hf_rope_reader& r, rope_type kind) {
  if (r.section_ == nullptr) return;
  for (const auto& [key, v] : r.section_->as_object()) {
    if (key == "rope_type" || key == "type" || key == "rope_theta") continue;
    if (key == "partial_rotary_factor") {
      if (!v.is_null() && r.number(v, r.field_name(key)) != 1.0)
        r.refuse(r.field_name(key), v, "rotates part of each head, which shardgraph does not", "use 1 (the whole head)");
      continue;
    }
    if (!hf_rope_field_honoured(kind, key))
      r.refuse(r.field_name(key), v,
               "is not a field shardgraph honours for rope_type \"" + std::string(rope_type_name(kind)) + "\"",
               "remove it, or use a checkpoint without it (docs/loading.md lists the RoPE fields honoured)");
  }
}

// The top-level fields transformers folds into the RoPE parameters.
inline void hf_rope_check_top_level(const hf_rope_reader& r) {
  if (const json::value* v = r.config_.find("partial_rotary_factor"); v && !v->is_null() && r.number(*v, "partial_rotary_factor") != 1.0)
    r.refuse("partial_rotary_factor", *v, "rotates part of each head, which shardgraph does not", "use 1 (the whole head)");
  if (const json::value* v = r.config_.find("original_max_position_embeddings"); v && !v->is_null())
    r.refuse("original_max_position_embeddings", *v,
             "at the top level is read differently by different transformers versions",
             "move it into " + r.name_ + " (or rope_scaling)");
}

inline rope_scaling hf_rope_numbers(const hf_rope_reader& r, rope_type kind) {
  rope_scaling s{.type = kind, .theta = hf_rope_theta(r)};
  if (kind == rope_type::standard) return s;
  if (kind == rope_type::yarn) {
    s.original_max_positions = r.original_max_positions();
    const double implicit_factor = double(r.max_positions()) / double(s.original_max_positions);
    s.factor = r.number_or("factor", implicit_factor);
    // transformers 4 replaces factor by this ratio whenever original_max_position_embeddings is
    // given, transformers 5 keeps factor: only configs on which both agree are taken.
    if (r.field("original_max_position_embeddings") && s.factor != implicit_factor)
      r.refuse(r.field_name("factor"), *r.field("factor"),
               "differs from max_position_embeddings / original_max_position_embeddings = " +
                   rope_json_text_of(implicit_factor) + ", which older transformers use instead",
               "make max_position_embeddings factor times original_max_position_embeddings");
    if (const json::value* a = r.field("attention_factor"); a && !(r.number(*a, r.field_name("attention_factor")) > 0))
      r.refuse(r.field_name("attention_factor"), *a, "is not positive", "give a positive factor, or null to derive it");
    s.attention_factor = r.number_or("attention_factor", 0.0);
    s.beta_fast = r.number_or("beta_fast", 0.0);
    s.beta_slow = r.number_or("beta_slow", 0.0);
    if (s.beta_fast == 0) s.beta_fast = 32;  // HF: `beta_fast or 32`
    if (s.beta_slow == 0) s.beta_slow = 1;
    if (const json::value* t = r.field("truncate")) {
      if (t->type() != json::kind::boolean) r.refuse(r.field_name("truncate"), *t, "is not a boolean", "give true or false");
      s.truncate = t->as_bool();
    }
    return s;
  }
  s.factor = r.required("factor", rope_type_name(kind));
  if (kind == rope_type::dynamic) s.original_max_positions = r.max_positions();
  if (kind == rope_type::llama3) {
    s.low_freq_factor = r.required("low_freq_factor", "llama3");
    s.high_freq_factor = r.required("high_freq_factor", "llama3");
    s.original_max_positions = r.original_max_positions();
  }
  return s;
}

}  // namespace detail

// The RoPE of a LLaMA config.json (parsed), `path` naming it in errors. Throws for a kind or a
// field it does not honour (see above), naming the field and its value.
inline rope_scaling hf_rope_scaling(const json::value& config, const std::string& path) {
  const json::value* parameters = config.find("rope_parameters");
  const json::value* scaling = config.find("rope_scaling");
  if (parameters && parameters->is_null()) parameters = nullptr;
  if (scaling && scaling->is_null()) scaling = nullptr;
  if (parameters && scaling)
    fail(path + ": rope_scaling", "the config has both rope_scaling and rope_parameters",
         "keep one of them (rope_parameters in newer transformers)");
  const json::value* section = parameters ? parameters : scaling;
  const std::string name = scaling ? "rope_scaling" : "rope_parameters";
  if (section && section->type() != json::kind::object)
    fail(path + ": " + name, name + " is " + std::string(json::kind_name(section->type())) + ", not an object",
         "give an object such as {\"rope_type\": \"linear\", \"factor\": 2.0}, or null");
  const detail::hf_rope_reader r(config, section, path, name);
  const rope_type kind = detail::hf_rope_kind(r, detail::hf_rope_type(r));
  detail::hf_rope_check_top_level(r);
  detail::hf_rope_check_fields(r, kind);
  const rope_scaling s = detail::hf_rope_numbers(r, kind);
  compute::check_rope_scaling(s, section ? path + ": " + name : path);
  return s;
}

}  // namespace shardgraph::io
