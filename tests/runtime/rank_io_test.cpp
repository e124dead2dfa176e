// rank_io: a rank keeps its slice of each whole input, or takes the slice it is given, fails naming an
// input that is missing or of another dtype or shape (both its global and local shapes), and
// downloads outputs and parameter slices as it holds them.
#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/rank_io.hpp>

#include <string>
#include <vector>

#include "../passes/test_models.hpp"
#include "catch.hpp"

namespace sg = shardgraph;

namespace {

// x (4, 2, 3): element (b, t, c) = 100 b + 10 t + c. This rank: batch rows [2, 4) (dp coordinate 1 of 2).
sg::host_tensor numbered() {
  std::vector<float> v;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 2; ++t)
      for (int c = 0; c < 3; ++c) v.push_back(static_cast<float>(100 * b + 10 * t + c));
  return sg::host_tensor::from<float>({4, 2, 3}, v);
}
sg::local_dims second_half() {
  sg::local_dims d;
  d.global = {4, 2, 3};
  d.local = {2, 2, 3};
  d.offset = {2, 0, 0};
  return d;
}
std::string error_of(const sg::tensor_map& inputs) {
  const sg::node& x = test_models::named(test_models::mlp, "x", sg::op::input);
  try {
    sg::local_input(x, second_half(), inputs);
  } catch (const sg::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("local_input: this rank's slice of the whole input", "[runtime]") {
  const sg::node& x = test_models::named(test_models::mlp, "x", sg::op::input);
  const sg::host_tensor mine = sg::local_input(x, second_half(), {{"x", numbered()}});
  REQUIRE(mine.shape() == std::vector<std::int64_t>{2, 2, 3});
  const auto v = mine.values<float>();
  CHECK(v[0] == 200.0f);   // (2, 0, 0)
  CHECK(v[4] == 211.0f);   // (2, 1, 1)
  CHECK(v[11] == 312.0f);  // (3, 1, 2)
}

TEST_CASE("local_input: a missing input, or one of another shape or dtype, fails naming it", "[runtime]") {
  CHECK(error_of({{"y", numbered()}}) ==
        "shardgraph: forward: input 'x' is missing. pass every input of the program by name");
  const std::string shape = error_of({{"x", sg::host_tensor(sg::dtype::f32, {4, 2})}});
  CHECK(shape.find("forward: input 'x': expected f32 (4, 2, 3) but got f32 (4, 2)") != std::string::npos);
  const std::string type = error_of({{"x", sg::host_tensor(sg::dtype::f64, {4, 2, 3})}});
  CHECK(type.find("but got f64 (4, 2, 3)") != std::string::npos);
}

TEST_CASE("download_part: the slice, from a buffer of its size or one padded past it", "[runtime]") {
  sg::cpu::backend backend;
  const sg::node& w = test_models::named(test_models::mlp, "mlp.c_fc.weight", sg::op::parameter);
  sg::local_dims d;
  d.global = {4, 6};
  d.local = {4, 3};
  d.offset = {0, 3};
  const std::vector<float> values{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1, -1};  // 12, and 2 of padding
  sg::cpu::backend::buffer exact = backend.allocate(sg::dtype::f32, 12),
                           padded = backend.allocate(sg::dtype::f32, 14);
  backend.upload(exact, values.data());
  backend.upload(padded, values.data());
  for (const auto* b : {&exact, &padded}) {
    const sg::tensor_part part = sg::download_part(backend, w, d, *b);
    CHECK(part.slice.offset == std::vector<std::int64_t>{0, 3});
    CHECK(part.slice.count == std::vector<std::int64_t>{4, 3});
    const auto got = part.values.values<float>();
    CHECK(std::vector<float>(got.begin(), got.end()) ==
          std::vector<float>(values.begin(), values.begin() + 12));
  }
}

TEST_CASE("local_input: this rank's slice given in place of the whole input says how to mark it",
          "[runtime]") {
  CHECK(error_of({{"x", sg::host_tensor(sg::dtype::f32, {2, 2, 3})}}) ==
        "shardgraph: forward: input 'x': expected f32 (4, 2, 3) but got f32 (2, 2, 3) (this rank's slice is "
        "f32 "
        "(2, 2, 3)). this is this rank's slice: say so with io_options{.inputs = io_part::local}, or pass "
        "the whole "
        "global tensor");
}

TEST_CASE("given_local_input: the slice is taken as given; another shape names the local and global ones",
          "[runtime]") {
  const sg::node& x = test_models::named(test_models::mlp, "x", sg::op::input);
  const sg::tensor_map slice{{"x", sg::host_tensor(sg::dtype::f32, {2, 2, 3})}};
  CHECK(&sg::given_local_input(x, second_half(), slice) == &slice.at("x"));
  auto error_given = [&](sg::host_tensor t) {
    try {
      sg::given_local_input(x, second_half(), {{"x", std::move(t)}});
    } catch (const sg::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error_given(numbered()) ==
        "shardgraph: forward: input 'x': expected this rank's slice f32 (2, 2, 3) of the global f32 (4, 2, "
        "3) but "
        "got the whole tensor. pass this rank's slice, or the whole tensor without io_options{.inputs = "
        "io_part::local}");
  CHECK(error_given(sg::host_tensor(sg::dtype::f32, {3, 2, 3})) ==
        "shardgraph: forward: input 'x': expected this rank's slice f32 (2, 2, 3) of the global f32 (4, 2, "
        "3) but "
        "got f32 (3, 2, 3). give each rank its own slice of the global tensor "
        "(shardgraph::input_slice gives its offset and shape)");
  CHECK(error_given(sg::host_tensor(sg::dtype::f64, {2, 2, 3})).find("but got f64 (2, 2, 3)") !=
        std::string::npos);
}
