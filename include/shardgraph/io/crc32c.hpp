#pragma once
// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78), the checksum of every tensor
// a shardgraph writer saves (iSCSI, ext4 and Btrfs use it too; `crc32c` in Python computes the same).
//
//   std::uint32_t c = crc32c_update(0, bytes);     // crc32c("123456789") == 0xE3069283
//   c = crc32c_update(c, more_bytes);              // the same as one call over both
//
// Uses the SSE 4.2 crc32 instruction where the CPU has it (checked at run time, x86-64 with GCC or
// Clang), eight table lookups per 8 bytes elsewhere. Either way it is one pass over the bytes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define SHARDGRAPH_HAS_CRC32C_INSTRUCTION 1
#endif

namespace shardgraph::io {

namespace detail {

using crc32c_tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr crc32c_tables make_crc32c_tables() {  // slicing-by-8: table k advances a byte by k more bytes
  crc32c_tables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
    t[0][i] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}
inline constexpr crc32c_tables crc32c_table = make_crc32c_tables();

// The register form (pre- and post-inversion done by the caller).
inline std::uint32_t crc32c_portable(std::uint32_t c, const unsigned char* p, std::size_t n) {
  const auto& t = crc32c_table;
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint32_t lo = c ^ (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
                                  std::uint32_t{p[3]} << 24);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
        t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
  return c;
}

#if defined(SHARDGRAPH_HAS_CRC32C_INSTRUCTION)
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_instruction(std::uint32_t c,
                                                                          const unsigned char* p,
                                                                          std::size_t n) {
  std::uint64_t wide = c;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    wide = _mm_crc32_u64(wide, word);
  }
  c = static_cast<std::uint32_t>(wide);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}
inline bool cpu_has_crc32c_instruction() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace detail

// The CRC-32C of the bytes that `crc` covered followed by `bytes` (start with crc = 0).
inline std::uint32_t crc32c_update(std::uint32_t crc, std::span<const std::byte> bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::uint32_t c = ~crc;
#if defined(SHARDGRAPH_HAS_CRC32C_INSTRUCTION)
  if (detail::cpu_has_crc32c_instruction()) return ~detail::crc32c_instruction(c, p, bytes.size());
#endif
  return ~detail::crc32c_portable(c, p, bytes.size());
}

// Eight lowercase hex digits, as checkpoints store a CRC-32C: "e3069283".
inline std::string crc32c_hex(std::uint32_t crc) {
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) s[static_cast<std::size_t>(i)] = "0123456789abcdef"[crc & 0xf];
  return s;
}

}  // namespace shardgraph::io
