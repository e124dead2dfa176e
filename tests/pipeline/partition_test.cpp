#include "shardgraph/pipeline/partition.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "catch.hpp"

namespace pl = shardgraph::pipeline;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;

namespace {

using counts = std::vector<std::int64_t>;

counts layer_counts(const pl::stage_partition& p) {
  counts c;
  for (int j = 0; j < p.stages(); ++j) c.push_back(p.layers_of(j));
  return c;
}

}  // namespace

TEST_CASE("partition_layers splits evenly when the embedding and the head fit beside the layers",
          "[pipeline]") {
  const pl::stage_partition p = pl::partition_layers(12, 4);
  CHECK(p.stages() == 4);
  CHECK(p.layers() == 12);
  CHECK(p.first_layer == counts{0, 3, 6, 9, 12});
  CHECK(p.counts_text() == "3,3,3,3");
  CHECK(p.report() ==
        "stage 0: embedding + layers 0-2 (3)\n"
        "stage 1: layers 3-5 (3)\n"
        "stage 2: layers 6-8 (3)\n"
        "stage 3: layers 9-11 (3) + head\n"
        "12 layers over 4 stages, 3 each\n");
  CHECK(layer_counts(pl::partition_layers(12, 2)) == counts{6, 6});
  CHECK(layer_counts(pl::partition_layers(12, 3)) == counts{4, 4, 4});
}

TEST_CASE("partition_layers gives the end stages fewer layers when they also hold the embedding and head",
          "[pipeline]") {
  // 22 layers + 2 on 4 stages: at most 6 each, so the embedding and head stages take 5.
  const pl::stage_partition p = pl::partition_layers(22, 4);
  CHECK(layer_counts(p) == counts{5, 6, 6, 5});
  CHECK(p.report() ==
        "stage 0: embedding + layers 0-4 (5)\n"
        "stage 1: layers 5-10 (6)\n"
        "stage 2: layers 11-16 (6)\n"
        "stage 3: layers 17-21 (5) + head\n"
        "22 layers over 4 stages (uneven: 5 to 6 each)\n");
  CHECK(layer_counts(pl::partition_layers(10, 4)) == counts{2, 3, 3, 2});
  // A heavy head (3 layers' worth): the last stage keeps one layer, the rest spread evenly.
  CHECK(layer_counts(pl::partition_layers(8, 4, {}, 1.0, 3.0)) == counts{2, 2, 3, 1});
  CHECK(layer_counts(pl::partition_layers(8, 2, {}, 4.0, 0.0)) == counts{2, 6});
  // Fractional costs.
  CHECK(layer_counts(pl::partition_layers(12, 4, {}, 0.5, 0.5)) == counts{3, 3, 3, 3});
  CHECK(layer_counts(pl::partition_layers(13, 4, {}, 0.5, 1.5)) == counts{3, 4, 4, 2});
}

TEST_CASE("partition_layers breaks ties toward fewer layers on earlier stages", "[pipeline]") {
  // No embedding or head cost: 10 layers on 4 stages as even as can be, the extra layers last.
  CHECK(layer_counts(pl::partition_layers(10, 4, {}, 0.0, 0.0)) == counts{2, 2, 3, 3});
  CHECK(layer_counts(pl::partition_layers(7, 2, {}, 0.0, 0.0)) == counts{3, 4});
  // The head's stage is the more expensive one: it gets the smaller share.
  CHECK(layer_counts(pl::partition_layers(7, 2, {}, 0.0, 1.0)) == counts{4, 3});
  CHECK(layer_counts(pl::partition_layers(6, 6)) == counts{1, 1, 1, 1, 1, 1});
  const pl::stage_partition one = pl::partition_layers(12, 1);
  CHECK(one.report() == "stage 0: embedding + layers 0-11 (12) + head\n12 layers over 1 stage, 12 each\n");
  CHECK_THAT(pl::partition_layers(6, 6).report(), ContainsSubstring("stage 1: layer 1 (1)\n"));
}

TEST_CASE("partition_layers takes the user's layer counts as given", "[pipeline]") {
  const counts user{3, 3, 4, 2};
  const pl::stage_partition p = pl::partition_layers(12, 4, user);
  CHECK(p.first_layer == counts{0, 3, 6, 10, 12});
  CHECK(layer_counts(p) == user);
  CHECK_THAT(p.report(), ContainsSubstring("stage 2: layers 6-9 (4)\n"));
  CHECK_THAT(p.report(), ContainsSubstring("stage 3: layers 10-11 (2) + head\n"));
  CHECK_THAT(p.report(), ContainsSubstring("(uneven: 2 to 4 each)"));
  CHECK(layer_counts(pl::partition_layers(5, 2, counts{1, 4})) == counts{1, 4});
}

TEST_CASE("partition_layers says what is wrong with a split and how to fix it", "[pipeline]") {
  const std::string too_many = error_of([] { pl::partition_layers(6, 8); });
  CHECK_THAT(too_many, ContainsSubstring("shardgraph: pipeline::partition_layers(6 layers, 8 stages): "));
  CHECK_THAT(too_many, ContainsSubstring("8 stages for 6 layers"));
  CHECK_THAT(too_many, ContainsSubstring("use at most 6 pipeline stages, or more layers"));

  const std::string no_stage = error_of([] { pl::partition_layers(6, 0); });
  CHECK_THAT(no_stage, ContainsSubstring("shardgraph: pipeline::partition_layers(6 layers, 0 stages): "));
  CHECK_THAT(no_stage, ContainsSubstring("use at least 1 pipeline stage"));

  CHECK_THAT(error_of([] { pl::partition_layers(0, 1); }),
             ContainsSubstring("give the model at least one layer"));

  const std::string size = error_of([] { pl::partition_layers(12, 4, counts{6, 6}); });
  CHECK_THAT(size, ContainsSubstring("the layer counts 6,6 name 2 stages, not 4"));
  CHECK_THAT(size, ContainsSubstring("give one count per (virtual) stage, e.g. the balanced 3,3,3,3"));

  const std::string empty_stage = error_of([] { pl::partition_layers(12, 4, counts{6, 0, 3, 3}); });
  CHECK_THAT(empty_stage, ContainsSubstring("stage 1 gets 0 layers"));
  CHECK_THAT(empty_stage,
             ContainsSubstring("give every stage at least one layer, e.g. the balanced 3,3,3,3"));
  CHECK_THAT(error_of([] {
               pl::partition_layers(12, 2, counts{13, -1});
             }),
             ContainsSubstring("stage 1 gets -1 layers"));

  const std::string sum = error_of([] { pl::partition_layers(12, 4, counts{3, 3, 3, 2}); });
  CHECK_THAT(sum, ContainsSubstring("the layer counts 3,3,3,2 sum to 11, but the model has 12 layers"));
  CHECK_THAT(sum, ContainsSubstring("make them sum to 12, e.g. the balanced 3,3,3,3"));

  CHECK_THAT(error_of([] { pl::partition_layers(12, 4, {}, -1.0, 1.0); }),
             ContainsSubstring("count each in layers, e.g. 1.0 (the default)"));
}
