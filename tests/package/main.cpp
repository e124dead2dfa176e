// Compiles only if shardgraph::cpu and shardgraph::threads carry what a user needs: the core's and
// the cpu backend's headers, Eigen's include path, C++20, and a thread library to link.
#include <shardgraph/core/error.hpp>
#include <shardgraph/cpu/kernels.hpp>

#include <Eigen/Core>
#include <concepts>
#include <cstdio>
#include <string>
#include <thread>

int main() {
  static_assert(std::same_as<shardgraph::error, shardgraph::error>, "C++20 concepts are available");
  std::string message;
  std::thread worker([&] {
    try {
      shardgraph::fail("consumer", "a deliberate error", "nothing to fix");
    } catch (const shardgraph::error& e) {
      message = e.what();
    }
  });
  worker.join();
  const Eigen::Matrix2d identity = Eigen::Matrix2d::Identity();
  if (message != "shardgraph: consumer: a deliberate error. nothing to fix" || identity.trace() != 2.0) {
    std::printf("unexpected: '%s'\n", message.c_str());
    return 1;
  }
  std::printf("shardgraph consumer: ok\n");
  return 0;
}
