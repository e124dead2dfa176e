// comm::all_gather into a read-only buffer: the collectives' functions refuse it by name.
// expect: out is read-only\. Pass a writable buffer
#include <shardgraph/threads.hpp>

#include <vector>
namespace sg = shardgraph;
int main() {
  sg::threads::world(2).run([](sg::threads::communicator& comm) {
    const std::vector<float> in(1);
    const std::vector<float> out(2);
    sg::comm::all_gather(comm, in, out);
  });
}
