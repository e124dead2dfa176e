#pragma once
// bytes_text: a byte count as messages and reports print it, exact and readable:
//
//   bytes_text(214748364800)   -> "214748364800 bytes (200.00 GiB)"
#include <cstddef>
#include <cstdio>
#include <string>

namespace shardgraph {

inline std::string bytes_text(std::size_t bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  char unit[48];
  if (mib >= 1024.0 * 1024.0)
    std::snprintf(unit, sizeof unit, "%.2f TiB", mib / (1024.0 * 1024.0));
  else if (mib >= 1024.0)
    std::snprintf(unit, sizeof unit, "%.2f GiB", mib / 1024.0);
  else
    std::snprintf(unit, sizeof unit, "%.2f MiB", mib);
  return std::to_string(bytes) + " bytes (" + unit + ")";
}

}  // namespace shardgraph
