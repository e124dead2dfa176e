// value_storage: every allocation counted against the device's memory. While the total fits each
// is made; past it, empty buffers stand in and check() fails naming the first value that did not
// fit and the bytes the whole plan needs. Budget here: 1,000 bytes.
#include <shardgraph/cpu.hpp>
#include <shardgraph/runtime/value_storage.hpp>

#include <string>

#include "../passes/test_models.hpp"
#include "catch.hpp"

namespace sg = shardgraph;

TEST_CASE("value_storage: allocations within the budget are made, the first past it is named", "[runtime]") {
  sg::cpu::backend backend;
  sg::value_storage<sg::cpu::backend> storage(sg::memory_budget(1000, "a test budget"));
  const sg::node& w = test_models::named(test_models::mlp, "mlp.c_fc.weight", sg::op::parameter);

  const sg::cpu::backend::buffer first = storage.allocate_for(backend, w, sg::dtype::f32, 200);  // 800 bytes
  CHECK(first.numel() == 200);
  CHECK_NOTHROW(storage.check(0));
  const sg::cpu::backend::buffer second = storage.allocate(backend, "the second", sg::dtype::f64, 50);  // 400
  CHECK(second.numel() == 0);  // past the budget: an empty buffer stands in
  const sg::cpu::backend::buffer third = storage.allocate(backend, "the third", sg::dtype::f32, 1);
  CHECK(third.numel() == 0);  // and for every later request
  CHECK_THROWS_WITH(storage.check(3), sg::testing::ContainsSubstring(
                                          "shardgraph: bind: memory (rank 3): this rank's program needs at "
                                          "least 1204 bytes (0.00 MiB) but the device has 1000 bytes"));
  CHECK_THROWS_WITH(storage.check(3),
                    sg::testing::ContainsSubstring("the second is the first value that does not fit"));
}

TEST_CASE("value_storage: a value's allocation is named by its node", "[runtime]") {
  sg::cpu::backend backend;
  sg::value_storage<sg::cpu::backend> storage(sg::memory_budget(100, "a test budget"));
  const sg::node& w = test_models::named(test_models::mlp, "mlp.c_fc.weight", sg::op::parameter);
  storage.allocate_for(backend, w, sg::dtype::f32, 30);
  CHECK_THROWS_WITH(
      storage.check(0),
      sg::testing::ContainsSubstring(
          "value 'mlp.c_fc.weight' (parameter, 30 f32 elements) is the first value that does not fit"));
}
