#pragma once
// splitmix64: the small, fixed pseudo-random generator behind every seeded choice in data/ (the
// sampler's shuffle) and in the examples' addition task. Its algorithm is written down here, not left
// to the standard library (std::shuffle and the std distributions differ between implementations), so
// the same seed gives the same data on every compiler, platform and rank, and a script in another
// language can reproduce it:
//
//   next():      state += 0x9E3779B97F4A7C15; return mix64(state)
//   mix64(z):    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//                return z ^ (z >> 31)                         (all arithmetic modulo 2^64)
//   below(n):    draw x = next() until x >= (2^64 mod n); return x mod n            (unbiased)
//
// Example: splitmix64(0).next() == 0xE220A8397B1DCDAF.
#include <cstdint>

namespace shardgraph::data {

// The splitmix64 output function: a bijection on 64-bit words that scatters nearby inputs far apart.
// Also the hash of data/ (distinct inputs give distinct outputs).
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class splitmix64 {
 public:
  constexpr explicit splitmix64(std::uint64_t seed) : state_(seed) {}

  constexpr std::uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix64(state_);
  }

  // Uniform in [0, n) for n >= 1, without the bias of a bare `next() % n`.
  constexpr std::uint64_t below(std::uint64_t n) {
    const std::uint64_t rejected = (0 - n) % n;  // 2^64 mod n: the top values that would favour small results
    for (;;) {
      const std::uint64_t x = next();
      if (x >= rejected) return x % n;  // [rejected, 2^64) holds a whole number of copies of [0, n)
    }
  }

 private:
  std::uint64_t state_;
};

}  // namespace shardgraph::data
