#include "addition_task.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "shardgraph/data/batch_loader.hpp"
#include "shardgraph/data/token_accuracy.hpp"
#include "shardgraph/data/token_file.hpp"

namespace data = shardgraph::data;
using shardgraph::host_tensor;
using shardgraph::examples::addition_task;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;

namespace {

using ids = std::vector<std::int64_t>;

struct parsed_example {
  std::string a, b, reversed_sum;
};

// Splits decoded text "a+b=s;a+b=s;..." back into its examples, independently of the task's code.
std::vector<parsed_example> parse(const std::string& text) {
  std::vector<parsed_example> out;
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t end = text.find(';', begin);
    REQUIRE(end != std::string::npos);
    const std::string example = text.substr(begin, end - begin);
    const std::size_t plus = example.find('+'), equals = example.find('=');
    REQUIRE(plus != std::string::npos);
    REQUIRE(equals != std::string::npos);
    REQUIRE(plus < equals);
    out.push_back(
        {example.substr(0, plus), example.substr(plus + 1, equals - plus - 1), example.substr(equals + 1)});
    begin = end + 1;
  }
  return out;
}

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         (s.size() == 1 || s[0] != '0');
}

std::set<std::pair<std::int64_t, std::int64_t>> unordered_pairs(const std::vector<parsed_example>& examples) {
  std::set<std::pair<std::int64_t, std::int64_t>> pairs;
  for (const auto& e : examples) {
    const std::int64_t a = std::stoll(e.a), b = std::stoll(e.b);
    pairs.insert({std::min(a, b), std::max(a, b)});
  }
  return pairs;
}

// The mask as a string of '1' (counted) and '.', one per target, for readable expectations.
std::string mask_text(const std::vector<bool>& mask) {
  std::string s;
  for (bool m : mask) s += m ? '1' : '.';
  return s;
}

ids tokens_of(const std::string& text) {
  ids out;
  for (char c : text) {
    if (c >= '0' && c <= '9')
      out.push_back(c - '0');
    else if (c == '+')
      out.push_back(addition_task::plus_token);
    else if (c == '=')
      out.push_back(addition_task::equals_token);
    else if (c == ';')
      out.push_back(addition_task::end_token);
    else
      out.push_back(addition_task::pad_token);
  }
  return out;
}

}  // namespace

TEST_CASE("addition_task writes the answer least significant digit first", "[examples]") {
  CHECK(addition_task::decode(addition_task::example(12, 345)) == "12+345=753;");
  CHECK(addition_task::decode(addition_task::example(0, 0)) == "0+0=0;");
  CHECK(addition_task::decode(addition_task::example(999, 1)) == "999+1=0001;");
  CHECK(addition_task::decode(ids{13, 14, -1}) == "_??");
  CHECK(addition_task::vocab_size == 14);
  CHECK_THAT(error_of([] { addition_task::example(-1, 2); }), ContainsSubstring("operands -1 and 2"));
}

TEST_CASE("addition_task's examples parse back and their answers are correct arithmetic", "[examples]") {
  for (const int digits : {1, 3, 5}) {
    const addition_task task{.max_digits = digits, .seed = 17};
    const ids stream = task.make_stream(400, false);
    for (auto t : stream) REQUIRE((t >= 0 && t < addition_task::pad_token));  // no pad, all in vocabulary
    const auto examples = parse(addition_task::decode(stream));
    REQUIRE(examples.size() == 400);
    std::set<std::size_t> lengths;
    for (const auto& e : examples) {
      REQUIRE(is_number(e.a));
      REQUIRE(is_number(e.b));
      CHECK(e.a.size() <= static_cast<std::size_t>(digits));
      CHECK(e.b.size() <= static_cast<std::size_t>(digits));
      lengths.insert(e.a.size());
      std::string sum(e.reversed_sum.rbegin(), e.reversed_sum.rend());
      REQUIRE(is_number(sum));
      CHECK(std::stoll(sum) == std::stoll(e.a) + std::stoll(e.b));
    }
    CHECK(lengths.size() == static_cast<std::size_t>(digits));  // every digit count occurs
  }
}

TEST_CASE("addition_task's train and held-out pairs never overlap, under any seed or operand order",
          "[examples]") {
  for (const int digits : {1, 2, 3}) {
    const addition_task train_task{.max_digits = digits, .seed = 1};
    const addition_task eval_task{.max_digits = digits, .seed = 2};
    const auto train = unordered_pairs(parse(addition_task::decode(train_task.make_stream(3000, false))));
    const auto held_out = unordered_pairs(parse(addition_task::decode(eval_task.make_stream(300, true))));
    CHECK(!held_out.empty());
    for (const auto& p : held_out) {
      CHECK(train.count(p) == 0);
      CHECK(train_task.is_held_out(p.first, p.second));
      CHECK(train_task.is_held_out(p.second, p.first));
    }
    for (const auto& p : train) CHECK_FALSE(train_task.is_held_out(p.first, p.second));
  }
  // About held_out_percent of all pairs are held out.
  const addition_task task{.max_digits = 2};
  int held = 0;
  for (int a = 0; a < 100; ++a)
    for (int b = 0; b < 100; ++b) held += task.is_held_out(a, b);
  CHECK((held > 700 && held < 1300));
}

TEST_CASE("addition_task's streams are deterministic in the seed", "[examples]") {
  const addition_task a{.max_digits = 4, .seed = 5}, b{.max_digits = 4, .seed = 5},
      c{.max_digits = 4, .seed = 6};
  CHECK(a.make_stream(50, false) == b.make_stream(50, false));
  CHECK(a.make_stream(50, true) == b.make_stream(50, true));
  CHECK(a.make_stream(50, false) != c.make_stream(50, false));
  CHECK(a.make_stream(0, true).empty());
}

TEST_CASE("addition_task rejects sizes it cannot serve", "[examples]") {
  CHECK_THAT(error_of([] { (void)addition_task{.max_digits = 0}.make_stream(1, false); }),
             ContainsSubstring("max_digits is 0, outside [1, 9]"));
  CHECK_THAT(error_of([] { (void)addition_task{.max_digits = 10}.make_stream(1, false); }),
             ContainsSubstring("max_digits is 10"));
  CHECK_THAT(error_of([] { (void)addition_task{.held_out_percent = 0}.make_stream(1, true); }),
             ContainsSubstring("held_out_percent is 0, outside [1, 99]"));
  CHECK_THAT(error_of([] { (void)addition_task{}.make_stream(-1, true); }),
             ContainsSubstring("examples is -1"));
}

TEST_CASE("answer_mask marks the answer digits of the examples whole in the window", "[examples]") {
  // window:  "3=21;12+345=753;7+"   targets are the window from its second token
  //  The first answer ("21") belongs to an example cut at the window's start: not counted.
  const ids window = tokens_of("3=21;12+345=753;7+");
  //                      targets: "=21;12+345=753;7+"
  CHECK(mask_text(addition_task::answer_mask(window)) == "...........111...");
  CHECK(mask_text(addition_task::answer_mask(tokens_of("1+2=3;"))) == ".....");
  CHECK(mask_text(addition_task::answer_mask(tokens_of(";1+2=3;"))) == "....1.");
  CHECK(mask_text(addition_task::answer_mask(tokens_of(";1+2=3"))) == "....1");
  CHECK(addition_task::answer_mask(tokens_of(";")).empty());
  CHECK_THAT(error_of([] { addition_task::answer_mask(ids{}); }), ContainsSubstring("the window is empty"));
}

TEST_CASE("answer_mask of a batch is the mask of each row's window", "[examples]") {
  const addition_task task{.max_digits = 3, .seed = 3};
  const ids stream = task.make_stream(60, true);
  struct vector_tokens {
    const ids* tokens;
    std::int64_t size() const { return static_cast<std::int64_t>(tokens->size()); }
    std::int64_t token(std::int64_t i) const { return (*tokens)[static_cast<std::size_t>(i)]; }
  } source{&stream};
  const std::int64_t seq = 24;
  data::batch_loader loader(
      source, data::distributed_sampler(data::window_count(source.size(), seq), 0, 1, 8), 4, seq);
  const auto batch = loader.global_batch(0);
  const auto mask = addition_task::answer_mask(batch.at("input_ids"), batch.at("targets"));
  REQUIRE(mask.size() == 4 * 24);
  const auto inputs = batch.at("input_ids").values<std::int64_t>();
  const auto targets = batch.at("targets").values<std::int64_t>();
  std::int64_t counted = 0;
  for (std::int64_t row = 0; row < 4; ++row) {
    ids window{inputs[static_cast<std::size_t>(row * seq)]};
    window.insert(window.end(), targets.begin() + row * seq, targets.begin() + (row + 1) * seq);
    const auto row_mask = addition_task::answer_mask(window);
    for (std::int64_t t = 0; t < seq; ++t) {
      CHECK(mask[static_cast<std::size_t>(row * seq + t)] == row_mask[static_cast<std::size_t>(t)]);
      counted += row_mask[static_cast<std::size_t>(t)];
    }
  }
  CHECK(counted > 0);

  // Perfect predictions score 1 on the answer digits; predicting pad everywhere scores 0.
  const ids perfect(targets.begin(), targets.end());
  const auto best = data::accuracy(perfect, targets, mask);
  CHECK(best.counted == counted);
  CHECK(best.value() == 1.0);
  const ids wrong(targets.size(), addition_task::pad_token);
  CHECK(data::accuracy(wrong, targets, mask).correct == 0);

  CHECK_THAT(
      error_of([&] {
        addition_task::answer_mask(batch.at("input_ids"), host_tensor::from<std::int64_t>({2}, ids{1, 2}));
      }),
      ContainsSubstring("input_ids and targets must both be (batch, seq)"));
}

TEST_CASE("addition_task streams round-trip through a token file", "[examples]") {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("shardgraph-addition-task-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  struct remove_at_exit {
    std::filesystem::path path;
    ~remove_at_exit() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{directory};
  const std::string path = (directory / "addition.bin").string();
  const addition_task task{.max_digits = 3, .seed = 4};
  const ids stream = task.make_stream(200, false);
  data::write_token_file(path, stream, 1);
  const data::token_file file(path, addition_task::vocab_size);
  REQUIRE(file.size() == static_cast<std::int64_t>(stream.size()));
  for (std::int64_t i = 0; i < file.size(); ++i)
    REQUIRE(file.token(i) == stream[static_cast<std::size_t>(i)]);
  CHECK_THAT(error_of([&] { data::token_file narrow(path, 10); }),
             ContainsSubstring("not below the vocabulary size 10"));
}
