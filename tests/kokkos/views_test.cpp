// Kokkos::View interop: round trips of LayoutRight, LayoutLeft and LayoutStride views of rank 1-4
// against hand-computed row-major positions, the dtype and shape errors, and view_weights slices.
//
// A test view holds its own position: element (i) holds i, (i, j) holds 10 i + j and (i, j, k)
// holds 100 i + 10 j + k.
#include <shardgraph/kokkos.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

// Catch2 2.x declares its listener base only where this is defined before its header; 3.x ignores it.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "catch.hpp"

namespace sg = shardgraph;
namespace sk = shardgraph::kokkos;

namespace {

// Kokkos is initialized once for the whole binary when the test run starts and finalized when it
// ends, by a Catch listener. Both run inside main(), after every static object is constructed: a
// namespace-scope Kokkos::ScopeGuard would instead run before main(), in an order relative to
// Kokkos's own static objects that nothing guarantees when libkokkoscore is a static library
// (Kokkos's default build), whose execution spaces register themselves from static initializers.
// The listener base is the one name that differs between Catch2 2.13 and 3.x; the events and
// CATCH_REGISTER_LISTENER are the same in both.
#if defined(SHARDGRAPH_CATCH3)
using listener_base = Catch::EventListenerBase;
#else
using listener_base = Catch::TestEventListenerBase;
#endif

struct kokkos_session : listener_base {
  using listener_base::listener_base;
  void testRunStarting(const Catch::TestRunInfo& info) override {
    listener_base::testRunStarting(info);
    Kokkos::initialize();
  }
  void testRunEnded(const Catch::TestRunStats& stats) override {
    Kokkos::finalize();
    listener_base::testRunEnded(stats);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(kokkos_session)

namespace {

using shardgraph::testing::ContainsSubstring;

template <class T>
std::vector<T> values_of(const sg::host_tensor& t) {
  const auto v = t.values<T>();
  return {v.begin(), v.end()};
}

template <class View>
void fill_by_position(const View& v) {
  using T = typename View::value_type;
  constexpr int rank = static_cast<int>(View::rank);
  for (std::size_t i = 0; i < v.extent(0); ++i) {
    if constexpr (rank == 1) {
      v(i) = static_cast<T>(i);
    } else {
      for (std::size_t j = 0; j < v.extent(1); ++j) {
        if constexpr (rank == 2) {
          v(i, j) = static_cast<T>(10 * i + j);
        } else {
          for (std::size_t k = 0; k < v.extent(2); ++k) v(i, j, k) = static_cast<T>(100 * i + 10 * j + k);
        }
      }
    }
  }
}

// What to_host_tensor must return for a (2, 3) and a (2, 3, 4) view filled by position.
const std::vector<double> expected_2x3 = {0, 1, 2, 10, 11, 12};
std::vector<double> expected_2x3x4() {
  std::vector<double> e;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) e.push_back(100 * i + 10 * j + k);
  return e;
}

// The message of the shardgraph::error that fn throws; empty if it throws none.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const sg::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("readable_view and writable_view state what a View must be", "[kokkos]") {
  STATIC_REQUIRE(sk::readable_view<Kokkos::View<double*>>);
  STATIC_REQUIRE(sk::readable_view<Kokkos::View<float**, Kokkos::LayoutLeft>>);
  STATIC_REQUIRE(sk::readable_view<Kokkos::View<std::int64_t***, Kokkos::LayoutStride>>);
  STATIC_REQUIRE(sk::readable_view<Kokkos::View<std::int32_t* [2][3][4]>>);
  STATIC_REQUIRE(sk::readable_view<Kokkos::View<const double**>>);
  STATIC_REQUIRE(sk::writable_view<Kokkos::View<double**, Kokkos::LayoutLeft>>);

  STATIC_REQUIRE_FALSE(sk::writable_view<Kokkos::View<const double**>>);
  STATIC_REQUIRE_FALSE(sk::readable_view<Kokkos::View<double>>);          // rank 0
  STATIC_REQUIRE_FALSE(sk::readable_view<Kokkos::View<double*****>>);     // rank 5
  STATIC_REQUIRE_FALSE(sk::readable_view<Kokkos::View<char**>>);          // no such dtype
  STATIC_REQUIRE_FALSE(sk::readable_view<Kokkos::View<std::uint64_t*>>);  // no such dtype
  STATIC_REQUIRE_FALSE(sk::readable_view<std::vector<double>>);
  STATIC_REQUIRE_FALSE(sk::readable_view<double*>);
}

TEST_CASE("to_host_tensor reads LayoutRight views of rank 1 to 3 in row-major order", "[kokkos]") {
  SECTION("rank 1") {
    Kokkos::View<double*> v("v", 5);
    fill_by_position(v);
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.type() == sg::dtype::f64);
    CHECK(t.shape() == std::vector<std::int64_t>{5});
    CHECK(values_of<double>(t) == std::vector<double>{0, 1, 2, 3, 4});
  }
  SECTION("rank 2") {
    Kokkos::View<double**, Kokkos::LayoutRight> v("v", 2, 3);
    fill_by_position(v);
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.shape() == std::vector<std::int64_t>{2, 3});
    CHECK(values_of<double>(t) == expected_2x3);
  }
  SECTION("rank 3") {
    Kokkos::View<double***, Kokkos::LayoutRight> v("v", 2, 3, 4);
    fill_by_position(v);
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.shape() == std::vector<std::int64_t>{2, 3, 4});
    CHECK(values_of<double>(t) == expected_2x3x4());
    CHECK(t.at(1 * 12 + 2 * 4 + 3) == 123);  // element (1, 2, 3)
    CHECK(t.at(0 * 12 + 1 * 4 + 0) == 10);   // element (0, 1, 0)
  }
}

TEST_CASE("to_host_tensor transposes LayoutLeft views into row-major order", "[kokkos]") {
  SECTION("rank 2") {
    Kokkos::View<double**, Kokkos::LayoutLeft> v("v", 2, 3);
    fill_by_position(v);
    // Column-major memory: (0,0) (1,0) (0,1) (1,1) (0,2) (1,2).
    REQUIRE(std::vector<double>(v.data(), v.data() + 6) == std::vector<double>{0, 10, 1, 11, 2, 12});
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.shape() == std::vector<std::int64_t>{2, 3});
    CHECK(values_of<double>(t) == expected_2x3);
  }
  SECTION("rank 3") {
    Kokkos::View<float***, Kokkos::LayoutLeft> v("v", 2, 3, 4);
    fill_by_position(v);
    REQUIRE(v.data()[1] == 100.0f);  // element (1, 0, 0): the first index moves fastest
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.type() == sg::dtype::f32);
    CHECK(t.shape() == std::vector<std::int64_t>{2, 3, 4});
    for (std::size_t i = 0; i < expected_2x3x4().size(); ++i)
      CHECK(t.at(static_cast<std::int64_t>(i)) == expected_2x3x4()[i]);
  }
  SECTION("rank 1: both layouts are the same") {
    Kokkos::View<std::int32_t*, Kokkos::LayoutLeft> v("v", 4);
    fill_by_position(v);
    CHECK(values_of<std::int32_t>(sk::to_host_tensor(v)) == std::vector<std::int32_t>{0, 1, 2, 3});
  }
}

TEST_CASE("to_host_tensor reads strided subviews, const views, static extents and rank 4", "[kokkos]") {
  SECTION("a column block of a LayoutRight view (LayoutStride)") {
    Kokkos::View<double**> v("v", 3, 4);
    fill_by_position(v);
    auto block = Kokkos::subview(v, Kokkos::pair<int, int>(1, 3), Kokkos::pair<int, int>(1, 3));
    const sg::host_tensor t = sk::to_host_tensor(block);
    CHECK(t.shape() == std::vector<std::int64_t>{2, 2});
    CHECK(values_of<double>(t) == std::vector<double>{11, 12, 21, 22});
  }
  SECTION("a row of a LayoutLeft view (stride 2)") {
    Kokkos::View<double**, Kokkos::LayoutLeft> v("v", 2, 3);
    fill_by_position(v);
    const sg::host_tensor t = sk::to_host_tensor(Kokkos::subview(v, 1, Kokkos::ALL));
    CHECK(t.shape() == std::vector<std::int64_t>{3});
    CHECK(values_of<double>(t) == std::vector<double>{10, 11, 12});
  }
  SECTION("a const view") {
    Kokkos::View<std::int64_t**> v("v", 2, 3);
    fill_by_position(v);
    const Kokkos::View<const std::int64_t**> read_only = v;
    const sg::host_tensor t = sk::to_host_tensor(read_only);
    CHECK(t.type() == sg::dtype::i64);
    CHECK(values_of<std::int64_t>(t) == std::vector<std::int64_t>{0, 1, 2, 10, 11, 12});
  }
  SECTION("static extents") {
    Kokkos::View<double* [3]> v("v", 2);
    fill_by_position(v);
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.shape() == std::vector<std::int64_t>{2, 3});
    CHECK(values_of<double>(t) == expected_2x3);
  }
  SECTION("rank 4, LayoutLeft") {
    Kokkos::View<double****, Kokkos::LayoutLeft> v("v", 2, 3, 2, 2);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 2; ++k)
          for (int l = 0; l < 2; ++l) v(i, j, k, l) = 1000 * i + 100 * j + 10 * k + l;
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.shape() == std::vector<std::int64_t>{2, 3, 2, 2});
    CHECK(t.at(((1 * 3 + 2) * 2 + 1) * 2 + 0) == 1210);  // element (1, 2, 1, 0)
    CHECK(t.at(((0 * 3 + 1) * 2 + 0) * 2 + 1) == 101);   // element (0, 1, 0, 1)
  }
  SECTION("an empty view") {
    Kokkos::View<float**> v("v", 0, 3);
    const sg::host_tensor t = sk::to_host_tensor(v);
    CHECK(t.shape() == std::vector<std::int64_t>{0, 3});
    CHECK(t.numel() == 0);
  }
}

TEST_CASE("copy_to_view writes row-major tensors into views of any layout", "[kokkos]") {
  SECTION("LayoutRight, rank 2") {
    Kokkos::View<double**, Kokkos::LayoutRight> v("v", 2, 3);
    sk::copy_to_view(sg::host_tensor::from<double>({2, 3}, expected_2x3), v);
    CHECK(v(0, 2) == 2);
    CHECK(v(1, 0) == 10);
    CHECK(v(1, 2) == 12);
  }
  SECTION("LayoutLeft, rank 2: memory ends up column-major") {
    Kokkos::View<double**, Kokkos::LayoutLeft> v("v", 2, 3);
    sk::copy_to_view(sg::host_tensor::from<double>({2, 3}, expected_2x3), v);
    CHECK(v(1, 0) == 10);
    CHECK(v(0, 2) == 2);
    CHECK(std::vector<double>(v.data(), v.data() + 6) == std::vector<double>{0, 10, 1, 11, 2, 12});
  }
  SECTION("LayoutLeft, rank 3") {
    Kokkos::View<std::int32_t***, Kokkos::LayoutLeft> v("v", 2, 3, 4);
    std::vector<std::int32_t> e;
    for (double x : expected_2x3x4()) e.push_back(static_cast<std::int32_t>(x));
    sk::copy_to_view(sg::host_tensor::from<std::int32_t>({2, 3, 4}, e), v);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) CHECK(v(i, j, k) == 100 * i + 10 * j + k);
  }
  SECTION("a strided subview changes only its elements") {
    Kokkos::View<float**> v("v", 3, 4);
    auto column = Kokkos::subview(v, Kokkos::ALL, 2);
    sk::copy_to_view(sg::host_tensor::from<float>({3}, std::vector<float>{7, 8, 9}), column);
    CHECK(v(0, 2) == 7);
    CHECK(v(1, 2) == 8);
    CHECK(v(2, 2) == 9);
    CHECK(v(1, 1) == 0);
    CHECK(v(1, 3) == 0);
  }
}

TEST_CASE("to_host_tensor and copy_to_view round trip through every layout", "[kokkos]") {
  Kokkos::View<double***, Kokkos::LayoutLeft> left("left", 2, 3, 4);
  fill_by_position(left);
  Kokkos::View<double***, Kokkos::LayoutRight> right("right", 2, 3, 4);
  sk::copy_to_view(sk::to_host_tensor(left), right);
  Kokkos::View<double***, Kokkos::LayoutLeft> back("back", 2, 3, 4);
  sk::copy_to_view(sk::to_host_tensor(right), back);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        CHECK(right(i, j, k) == 100 * i + 10 * j + k);
        CHECK(back(i, j, k) == 100 * i + 10 * j + k);
      }
}

TEST_CASE("copy_to_view names the view and both shapes when they do not match", "[kokkos]") {
  Kokkos::View<double**> v("pressure", 2, 3);
  const std::vector<double> six = {1, 2, 3, 4, 5, 6};

  SECTION("dtype") {
    const std::string m = error_of([&] {
      sk::copy_to_view(sg::host_tensor::from<float>({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}), v);
    });
    CHECK_THAT(m, ContainsSubstring("shardgraph: kokkos::copy_to_view: view 'pressure'"));
    CHECK_THAT(m, ContainsSubstring("the tensor is f32 (2, 3) but the view is f64 (2, 3)"));
  }
  SECTION("shape") {
    const std::string m = error_of([&] { sk::copy_to_view(sg::host_tensor::from<double>({3, 2}, six), v); });
    CHECK_THAT(m, ContainsSubstring("view 'pressure'"));
    CHECK_THAT(m, ContainsSubstring("the tensor is f64 (3, 2) but the view is f64 (2, 3)"));
  }
  SECTION("rank") {
    const std::string m = error_of([&] { sk::copy_to_view(sg::host_tensor::from<double>({6}, six), v); });
    CHECK_THAT(m, ContainsSubstring("the tensor is f64 (6,) but the view is f64 (2, 3)"));
  }
  SECTION("an unlabelled view") {
    Kokkos::View<double*> unlabelled;
    const std::string m =
        error_of([&] { sk::copy_to_view(sg::host_tensor::from<double>({6}, six), unlabelled); });
    CHECK_THAT(m, ContainsSubstring("an unlabelled view"));
    CHECK_THAT(m, ContainsSubstring("f64 (6,) but the view is f64 (0,)"));
  }
  SECTION("the view is left untouched") {
    v(0, 0) = 42;
    CHECK_THROWS_AS(sk::copy_to_view(sg::host_tensor::from<double>({3, 2}, six), v), sg::error);
    CHECK(v(0, 0) == 42);
  }
}

TEST_CASE("view_weights serves a rank's slice of each parameter", "[kokkos]") {
  Kokkos::View<double**> w("w", 4, 6);
  fill_by_position(w);
  Kokkos::View<double**, Kokkos::LayoutLeft> w_left("w_left", 4, 6);
  fill_by_position(w_left);
  const sg::weight_source weights =
      sk::view_weights(std::map<std::string, Kokkos::View<double**>>{{"mlp.w", w}});

  SECTION("columns 3-5 of a (4, 6) view (Shard<1> on 2 ranks, rank 1)") {
    sg::host_tensor out(sg::dtype::f64, {4, 3});
    weights("mlp.w", sg::tensor_slice{{4, 6}, {0, 3}, {4, 3}}, out);
    CHECK(values_of<double>(out) == std::vector<double>{3, 4, 5, 13, 14, 15, 23, 24, 25, 33, 34, 35});
  }
  SECTION("rows 2-3 (Shard<0> on 2 ranks, rank 1)") {
    sg::host_tensor out(sg::dtype::f64, {2, 6});
    weights("mlp.w", sg::tensor_slice{{4, 6}, {2, 0}, {2, 6}}, out);
    CHECK(values_of<double>(out) == std::vector<double>{20, 21, 22, 23, 24, 25, 30, 31, 32, 33, 34, 35});
  }
  SECTION("the whole parameter") {
    sg::host_tensor out(sg::dtype::f64, {4, 6});
    weights("mlp.w", sg::tensor_slice{{4, 6}, {0, 0}, {4, 6}}, out);
    CHECK(values_of<double>(out) == values_of<double>(sk::to_host_tensor(w)));
  }
  SECTION("a LayoutLeft view serves the same slice") {
    const auto left = sk::view_weights(
        std::map<std::string, Kokkos::View<double**, Kokkos::LayoutLeft>>{{"mlp.w", w_left}});
    sg::host_tensor out(sg::dtype::f64, {4, 3});
    left("mlp.w", sg::tensor_slice{{4, 6}, {0, 3}, {4, 3}}, out);
    CHECK(values_of<double>(out) == std::vector<double>{3, 4, 5, 13, 14, 15, 23, 24, 25, 33, 34, 35});
  }
  SECTION("f64 views fill f32 parameters") {
    sg::host_tensor out(sg::dtype::f32, {2, 2});
    weights("mlp.w", sg::tensor_slice{{4, 6}, {1, 4}, {2, 2}}, out);
    CHECK(values_of<float>(out) == std::vector<float>{14, 15, 24, 25});
  }
  SECTION("the source reads the views when called, not when made") {
    w(3, 5) = -1;
    sg::host_tensor out(sg::dtype::f64, {1, 1});
    weights("mlp.w", sg::tensor_slice{{4, 6}, {3, 5}, {1, 1}}, out);
    CHECK(out.at(0) == -1);
  }
  SECTION("ranks as threads read one source concurrently") {
    std::vector<std::vector<double>> seen(4);
    std::vector<std::thread> ranks;
    ranks.reserve(4);
    for (int r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        sg::host_tensor out(sg::dtype::f64, {1, 6});
        weights("mlp.w", sg::tensor_slice{{4, 6}, {r, 0}, {1, 6}}, out);
        seen[static_cast<std::size_t>(r)] = values_of<double>(out);
      });
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 4; ++r)
      CHECK(seen[static_cast<std::size_t>(r)] == std::vector<double>{10.0 * r, 10.0 * r + 1, 10.0 * r + 2,
                                                                     10.0 * r + 3, 10.0 * r + 4,
                                                                     10.0 * r + 5});
  }
}

TEST_CASE("view_weights serves Views of different types under their labels", "[kokkos]") {
  Kokkos::View<double**> weight("h.0.mlp.c_fc.weight", 2, 3);
  fill_by_position(weight);
  Kokkos::View<double*, Kokkos::LayoutLeft> bias("h.0.mlp.c_fc.bias", 3);
  fill_by_position(bias);
  Kokkos::View<std::int32_t*> positions("positions", 4);
  fill_by_position(positions);
  const sg::weight_source weights = sk::view_weights(weight, bias, positions);

  sg::host_tensor w(sg::dtype::f32, {2, 1});
  weights("h.0.mlp.c_fc.weight", sg::tensor_slice{{2, 3}, {0, 2}, {2, 1}}, w);
  CHECK(values_of<float>(w) == std::vector<float>{2, 12});

  sg::host_tensor b(sg::dtype::f64, {2});
  weights("h.0.mlp.c_fc.bias", sg::tensor_slice{{3}, {1}, {2}}, b);
  CHECK(values_of<double>(b) == std::vector<double>{1, 2});

  sg::host_tensor p(sg::dtype::i32, {4});
  weights("positions", sg::tensor_slice{{4}, {0}, {4}}, p);
  CHECK(values_of<std::int32_t>(p) == std::vector<std::int32_t>{0, 1, 2, 3});
}

TEST_CASE("view_weights explains what is wrong", "[kokkos]") {
  Kokkos::View<double**> w("w", 4, 6);
  std::map<std::string, Kokkos::View<double**>> views;
  for (const char* name : {"h.0.attn.q.weight", "h.0.attn.k.weight", "h.0.attn.v.weight", "h.1.attn.q.weight",
                           "h.1.attn.k.weight", "h.1.attn.v.weight", "wte.weight"})
    views.emplace(name, w);
  const sg::weight_source weights = sk::view_weights(views);
  sg::host_tensor out(sg::dtype::f64, {4, 6});

  SECTION("a missing parameter, with the nearest names") {
    const std::string m = error_of([&] {
      weights("h.1.attn.o.weight", sg::tensor_slice{{4, 6}, {0, 0}, {4, 6}}, out);
    });
    CHECK_THAT(m,
               ContainsSubstring("shardgraph: kokkos::view_weights: no View is named 'h.1.attn.o.weight'"));
    CHECK_THAT(m, ContainsSubstring("it holds 'h.1.attn.k.weight', 'h.1.attn.q.weight', 'h.1.attn.v.weight', "
                                    "'h.0.attn.k.weight', 'h.0.attn.q.weight' and 2 more"));
  }
  SECTION("an empty source") {
    const auto none = sk::view_weights(std::map<std::string, Kokkos::View<double**>>{});
    const std::string m = error_of([&] {
      none("wte.weight", sg::tensor_slice{{4, 6}, {0, 0}, {4, 6}}, out);
    });
    CHECK_THAT(m, ContainsSubstring("no View is named 'wte.weight'; it holds no Views"));
  }
  SECTION("a global shape that is not the view's extents") {
    sg::host_tensor t(sg::dtype::f64, {6, 4});
    const std::string m = error_of([&] {
      weights("wte.weight", sg::tensor_slice{{6, 4}, {0, 0}, {6, 4}}, t);
    });
    CHECK_THAT(m, ContainsSubstring("kokkos::view_weights: parameter 'wte.weight'"));
    CHECK_THAT(m, ContainsSubstring("the model's global shape is (6, 4) but view 'w' has extents (4, 6)"));
  }
  SECTION("a slice outside the parameter") {
    sg::host_tensor t(sg::dtype::f64, {4, 3});
    const std::string m = error_of([&] {
      weights("wte.weight", sg::tensor_slice{{4, 6}, {0, 4}, {4, 3}}, t);
    });
    CHECK_THAT(m, ContainsSubstring("leaves the extents (4, 6)"));
    const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
    CHECK_THAT(error_of([&] {
                 weights("wte.weight", sg::tensor_slice{{4, 6}, {0, 1}, {4, huge}}, t);
               }),
               ContainsSubstring("leaves the extents (4, 6)"));
    CHECK_THAT(error_of([&] {
                 weights("wte.weight", sg::tensor_slice{{4, 6}, {0, -1}, {4, 3}}, t);
               }),
               ContainsSubstring("leaves the extents (4, 6)"));
    CHECK_THAT(error_of([&] {
                 weights("wte.weight", sg::tensor_slice{{4, 6}, {0}, {4}}, t);
               }),
               ContainsSubstring("pass one offset and one count per dimension"));
  }
  SECTION("an output that is not the slice's shape") {
    const std::string m = error_of([&] {
      weights("wte.weight", sg::tensor_slice{{4, 6}, {0, 3}, {4, 3}}, out);
    });
    CHECK_THAT(m, ContainsSubstring("the output tensor has shape (4, 6) but the slice count is (4, 3)"));
  }
  SECTION("an element type that does not convert") {
    sg::host_tensor ids(sg::dtype::i64, {4, 6});
    const std::string m = error_of([&] {
      weights("wte.weight", sg::tensor_slice{{4, 6}, {0, 0}, {4, 6}}, ids);
    });
    CHECK_THAT(m, ContainsSubstring("the model wants i64 but view 'w' holds f64"));
  }
  SECTION("views served by label need distinct, non-empty labels") {
    Kokkos::View<double*> a("bias", 3), b("bias", 3), unlabelled;
    CHECK_THAT(error_of([&] { sk::view_weights(a, b); }), ContainsSubstring("two Views are labelled 'bias'"));
    CHECK_THAT(error_of([&] { sk::view_weights(a, unlabelled); }), ContainsSubstring("a View has no label"));
  }
}
