#pragma once
// shardgraph::text::chat_template: turns a conversation into the prompt a chat model was trained
// on, with the Jinja2 chat template its checkpoint carries (tokenizer_config.json's
// "chat_template", or chat_template.jinja), rendering byte for byte what transformers'
// tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders.
// The template is parsed once (a construct outside the supported subset fails then, naming it and
// its line and column) and rendered for each request; render() is const and may run on many
// threads at once.
//
//   auto chat = text::chat_template::from_directory("TinyLlama-1.1B-Chat");
//   std::vector<text::chat_message> messages = {{"system", "Be brief."}, {"user", "Hi"}};
//   chat.render(messages, true);  // "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"
//
// The template sees `messages` (a list of {role, content} dicts), `bos_token`, `eos_token`,
// `add_generation_prompt`, `tools` and `documents` (none, as transformers passes them without
// tools), and any extra variables given to render (which override these).
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/file_contents.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/text/jinja_evaluator.hpp"
#include "shardgraph/text/jinja_parser.hpp"
#include "shardgraph/text/jinja_value.hpp"

namespace shardgraph::text {

struct chat_message {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

class chat_template {
 public:
  // Parses source (Jinja2). Fails, naming the construct and its position, when it uses what the
  // subset lacks (docs/tokenizers.md, "Chat templates").
  chat_template(std::string source, std::string bos_token, std::string eos_token)
      : source_(std::make_shared<const std::string>(as_jinja_reads(std::move(source)))),
        bos_token_(std::move(bos_token)),
        eos_token_(std::move(eos_token)),
        body_(std::make_shared<const jinja::block>(jinja::parser(*source_).parse_template())) {}

  // The template of a checkpoint directory: chat_template.jinja when present (newer checkpoints),
  // else tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"}. As
  // transformers chooses: the template called `name` where there is one (in that list, or as
  // additional_chat_templates/<name>.jinja), else the default one (named "default" in a list).
  // bos_token and eos_token come from tokenizer_config.json (strings or {"content": ...} objects;
  // "" when absent). Fails when the directory has no template.
  static chat_template from_directory(const std::filesystem::path& dir, std::string_view name = "default") {
    const std::filesystem::path config_path = dir / "tokenizer_config.json",
                                jinja_path = dir / "chat_template.jinja",
                                named_path =
                                    dir / "additional_chat_templates" / (std::string(name) + ".jinja");
    const bool has_config = std::filesystem::exists(config_path);
    const io::json::value config = has_config ? read_json(config_path) : io::json::value();
    const auto token = [&](std::string_view token_name) {
      return has_config ? token_text(config, token_name, config_path) : std::string();
    };
    if (name != "default" && std::filesystem::exists(named_path))
      return chat_template(read_text(named_path), token("bos_token"), token("eos_token"));
    if (std::filesystem::exists(jinja_path))
      return chat_template(read_text(jinja_path), token("bos_token"), token("eos_token"));
    const io::json::value* source = has_config ? config.find("chat_template") : nullptr;
    if (source == nullptr || source->is_null())
      fail("chat template",
           dir.string() + " has no chat template (" +
               (has_config ? "tokenizer_config.json has no \"chat_template\"" : "no tokenizer_config.json") +
               ", and no chat_template.jinja)",
           "Copy tokenizer_config.json (or chat_template.jinja) of the checkpoint's chat model into the "
           "directory, or send prompts to /v1/completions instead");
    return chat_template(template_text(*source, config_path, name), token("bos_token"), token("eos_token"));
  }

  // Whether dir holds a chat template for from_directory (chat_template.jinja, or a non-null
  // "chat_template" in tokenizer_config.json); from_directory still fails on one it cannot parse.
  static bool present_in(const std::filesystem::path& dir) {
    if (std::filesystem::exists(dir / "chat_template.jinja")) return true;
    if (!std::filesystem::exists(dir / "tokenizer_config.json")) return false;
    const io::json::value config = read_json(dir / "tokenizer_config.json");
    const io::json::value* source = config.find("chat_template");
    return source != nullptr && !source->is_null();
  }

  // The prompt for messages; add_generation_prompt appends the opening of the assistant's turn.
  // extra_variables: more names the template may read (e.g. {"enable_thinking", false}).
  std::string render(std::span<const chat_message> messages, bool add_generation_prompt,
                     const jinja::dict& extra_variables = {}) const {
    jinja::list message_values;
    for (const chat_message& m : messages)
      message_values.push_back(jinja::dict{{"role", m.role}, {"content", m.content}});
    jinja::variables globals{{"messages", std::move(message_values)},
                             {"bos_token", bos_token_},
                             {"eos_token", eos_token_},
                             {"add_generation_prompt", add_generation_prompt},
                             {"tools", jinja::value::none()},
                             {"documents", jinja::value::none()}};
    for (const auto& [name, v] : extra_variables) globals[name] = v;
    std::string out;
    jinja::evaluator(*source_, std::move(globals)).run(*body_, out);  // {% break %} only inside loops
    return out;
  }

  // The template text as Jinja2 reads it: "\r\n" and "\r" made "\n", one final newline dropped.
  const std::string& source() const { return *source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  // Shared, so that copies are cheap and the tree's offsets keep pointing into the same text.
  std::shared_ptr<const std::string> source_;
  std::string bos_token_, eos_token_;
  std::shared_ptr<const jinja::block> body_;

  static std::string as_jinja_reads(std::string source) {
    std::string out;
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] != '\r')
        out += source[i];
      else if (i + 1 >= source.size() || source[i + 1] != '\n')
        out += '\n';
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }
  static std::string read_text(const std::filesystem::path& path) {
    const auto file = io::file_contents::open(path.string());
    const auto bytes = file.bytes();
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  static io::json::value read_json(const std::filesystem::path& path) {
    return io::json::parse(read_text(path), path.string());
  }
  // A special token as tokenizer_config.json writes it: "</s>", {"content": "</s>", ...} or null.
  static std::string token_text(const io::json::value& config, std::string_view name,
                                const std::filesystem::path& path) {
    const io::json::value* token = config.find(name);
    if (token == nullptr || token->is_null()) return "";
    if (token->type() == io::json::kind::string) return token->as_string();
    if (token->type() == io::json::kind::object && token->contains("content"))
      return token->at("content").as_string();
    fail("chat template",
         path.string() + ": \"" + std::string(name) + "\" is " +
             std::string(io::json::kind_name(token->type())),
         "Write it as a string or as an object with a \"content\" string, as save_pretrained does");
  }
  // The template called `name` in tokenizer_config.json's "chat_template", else the default one.
  static std::string template_text(const io::json::value& source, const std::filesystem::path& path,
                                   std::string_view name) {
    if (source.type() == io::json::kind::string) return source.as_string();
    if (source.type() != io::json::kind::array)
      fail("chat template",
           path.string() + ": \"chat_template\" is " + std::string(io::json::kind_name(source.type())),
           "Write it as a string, or as a list of {\"name\", \"template\"} objects");
    const auto named = [&](std::string_view wanted) -> const io::json::value* {
      for (const io::json::value& entry : source.as_array())
        if (entry.at("name").as_string() == wanted) return &entry.at("template");
      return nullptr;
    };
    if (const io::json::value* chosen = named(name) ? named(name) : named("default"))
      return chosen->as_string();
    std::string names;
    for (const io::json::value& entry : source.as_array())
      names += (names.empty() ? "" : ", ") + entry.at("name").as_string();
    fail("chat template",
         path.string() + ": \"chat_template\" lists the templates " + names + " but none named \"" +
             std::string(name) + "\"" + (name == "default" ? "" : " or \"default\""),
         "Name the template for plain chat \"default\", as transformers expects");
  }
};

}  // namespace shardgraph::text
