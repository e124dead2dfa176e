// comm::all_gather of floats into doubles: the collectives' functions name the mismatch once.
// expect: in and out hold different element types\. Pass buffers of one type
#include <shardgraph/threads.hpp>

#include <vector>
namespace sg = shardgraph;
int main() {
  sg::threads::world(2).run([](sg::threads::communicator& comm) {
    const std::vector<float> in(1);
    std::vector<double> out(2);
    sg::comm::all_gather(comm, in, out);
  });
}
