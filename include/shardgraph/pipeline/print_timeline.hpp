#pragma once
// Draws a simulated schedule: timeline_text for a terminal, timeline_svg for a page. F<m> is micro-batch
// m's forward, B<m> its backward, followed by the chunk's letter (a, b, ...) when each rank holds
// several model chunks; dots are idle time.
//
//   timeline_text(s, simulate(s)) for s = make_schedule(schedule_kind::one_f_one_b, 4, 6):
//     1f1b, 4 ranks, 6 micro-batches: F<m> forward (1 unit), B<m> backward (2 units), . idle
//     time   | 0     2     4     6     8     10    12    14    16    18    20    22    24    26
//     rank 0 | F0 F1 F2 F3 .  .  .  .  .  .  B0    F4 B1    F5 B2    .  B3    .  B4    .  B5
//     rank 1 | .  F0 F1 F2 .  .  .  .  B0    F3 B1    F4 B2    F5 B3    .  B4    .  B5    .  .
//     rank 2 | .  .  F0 F1 .  .  B0    F2 B1    F3 B2    F4 B3    F5 B4    .  B5    .  .  .  .
//     rank 3 | .  .  .  F0 B0    F1 B1    F2 B2    F3 B3    F4 B4    F5 B5    .  .  .  .  .  .
//     bubble fraction 0.333 (textbook (p-1)/(m+p-1) = 0.333)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "shardgraph/pipeline/schedule.hpp"
#include "shardgraph/pipeline/timeline.hpp"

namespace shardgraph::pipeline {

namespace detail {

// "F3", or "F3b" for chunk 1 when ranks hold several chunks.
inline std::string compute_label(const schedule& s, const action& a) {
  std::string t = (a.kind == action_kind::forward ? "F" : "B") + std::to_string(a.micro_batch);
  if (s.virtual_stages > 1)
    t += a.chunk < 26 ? std::string(1, static_cast<char>('a' + a.chunk)) : "." + std::to_string(a.chunk);
  return t;
}

inline std::string fixed3(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3f", x);
  return buffer;
}

// "bubble fraction 0.273 (textbook (p-1)/(m+p-1) = 0.273)"
inline std::string bubble_line(const schedule& s, const timeline& t) {
  return "bubble fraction " + fixed3(t.bubble_fraction()) + " (textbook " +
         (s.virtual_stages > 1 ? "(p-1)/(v*m+p-1)" : "(p-1)/(m+p-1)") + " = " +
         fixed3(textbook_bubble_fraction(s)) + ")";
}

inline std::int64_t to_ticks(const schedule& s, double time) { return std::llround(time * s.virtual_stages); }

// "1 unit", "2 units", or for chunks a share of one: "1/2 unit", "2/3 unit".
inline std::string unit_text(const schedule& s, int ticks) {
  int num = ticks, den = s.virtual_stages;
  for (int d = 2; d <= num; ++d)
    while (num % d == 0 && den % d == 0) num /= d, den /= d;
  if (den == 1) return std::to_string(num) + (num == 1 ? " unit" : " units");
  return std::to_string(num) + "/" + std::to_string(den) + " unit";
}

}  // namespace detail

// One row per rank, each time tick (1 / virtual_stages time units) a few characters wide, then the
// bubble fraction beside its textbook value.
inline std::string timeline_text(const schedule& s, const timeline& t) {
  std::size_t label = 2;
  for (const auto& rank : t.per_rank)
    for (const timed_action& a : rank) label = std::max(label, detail::compute_label(s, a.what).size());
  const std::size_t width = label + 1;  // characters per tick
  const std::int64_t ticks = detail::to_ticks(s, t.makespan);
  const std::string first_column = "rank " + std::to_string(t.per_rank.empty() ? 0 : t.per_rank.size() - 1);
  const auto lead = [&](std::string name) {
    name.resize(std::max(name.size(), first_column.size()), ' ');
    return name + " | ";
  };
  const auto trimmed = [](std::string row) {
    row.erase(row.find_last_not_of(' ') + 1);
    return row;
  };

  std::string out = detail::schedule_text(s.kind, s.ranks, s.micro_batches, s.virtual_stages) + ": ";
  out += s.virtual_stages > 1 ? "F<m><chunk> forward of model chunk a, b, ... (" + detail::unit_text(s, 1) +
                                    "), B<m><chunk> backward (" + detail::unit_text(s, 2) + "), . idle\n"
                              : "F<m> forward (1 unit), B<m> backward (2 units), . idle\n";
  // The time ruler: a mark every `step` time units, far enough apart for their numbers.
  const std::size_t unit = width * static_cast<std::size_t>(s.virtual_stages);
  const std::size_t digits = std::to_string(static_cast<long long>(t.makespan)).size();
  const std::size_t spacing = std::max<std::size_t>(digits + 1, 6);
  std::size_t step = 1;
  for (std::size_t base = 1; step * unit < spacing; base *= 10)
    for (std::size_t factor : {std::size_t{1}, std::size_t{2}, std::size_t{5}})
      if ((step = factor * base) * unit >= spacing) break;
  std::string ruler(static_cast<std::size_t>(ticks) * width + digits + 1, ' ');
  for (std::size_t time = 0; time * unit <= static_cast<std::size_t>(ticks) * width; time += step) {
    const std::string n = std::to_string(time);
    ruler.replace(time * unit, n.size(), n);
  }
  out += lead("time") + trimmed(ruler) + "\n";

  for (std::size_t r = 0; r < t.per_rank.size(); ++r) {
    std::string row(static_cast<std::size_t>(ticks) * width, ' ');
    for (std::int64_t k = 0; k < ticks; ++k) row[static_cast<std::size_t>(k) * width] = '.';
    for (const timed_action& a : t.per_rank[r]) {
      const auto from = static_cast<std::size_t>(detail::to_ticks(s, a.start)) * width;
      const auto to = static_cast<std::size_t>(detail::to_ticks(s, a.end)) * width;
      row.replace(from, to - from, std::string(to - from, ' '));
      const std::string name = detail::compute_label(s, a.what);
      row.replace(from, name.size(), name);
    }
    out += lead("rank " + std::to_string(r)) + trimmed(row) + "\n";
  }
  return out + detail::bubble_line(s, t) + "\n";
}

// A self-contained SVG: one lane per rank, one <rect> per compute action (forwards blue, backwards
// orange) labelled with its micro-batch, a time axis, and a title with the schedule, the ranks, the
// micro-batches and the bubble fraction.
inline std::string timeline_svg(const schedule& s, const timeline& t) {
  std::size_t label = 2;
  for (const auto& rank : t.per_rank)
    for (const timed_action& a : rank) label = std::max(label, detail::compute_label(s, a.what).size());
  const double tick_px = std::max(18.0, 7.0 * static_cast<double>(label) + 6.0);
  const double unit_px = tick_px * s.virtual_stages;
  const double left = 70, top = 46, lane = 28, gap = 8;
  const double width = left + t.makespan * unit_px + 20;
  const double lanes_end = top + static_cast<double>(t.per_rank.size()) * (lane + gap);
  const double height = lanes_end + 34;
  const auto num = [](double x) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1f", x);
    return std::string(buffer);
  };

  std::string title = detail::schedule_text(s.kind, s.ranks, s.micro_batches, s.virtual_stages) +
                      ", bubble fraction " + detail::fixed3(t.bubble_fraction());
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
                    num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" font-family=\"monospace\" font-size=\"11\">\n";
  out += "<title>" + title + "</title>\n";
  out += "<text x=\"" + num(left) + "\" y=\"20\" font-size=\"14\">" + title + "</text>\n";
  out += "<text x=\"" + num(left) + "\" y=\"36\" fill=\"#555\">forward (F, blue) " + detail::unit_text(s, 1) +
         ", backward (B, orange) " + detail::unit_text(s, 2) +
         (s.virtual_stages > 1 ? " per model chunk, named by its letter" : "") + "; blank: idle</text>\n";
  for (std::size_t r = 0; r < t.per_rank.size(); ++r) {
    const double y = top + static_cast<double>(r) * (lane + gap);
    out += "<text x=\"8\" y=\"" + num(y + lane / 2 + 4) + "\">rank " + std::to_string(r) + "</text>\n";
    out += "<line x1=\"" + num(left) + "\" y1=\"" + num(y + lane / 2) + "\" x2=\"" +
           num(left + t.makespan * unit_px) + "\" y2=\"" + num(y + lane / 2) +
           "\" stroke=\"#ddd\" stroke-dasharray=\"2,3\"/>\n";
    for (const timed_action& a : t.per_rank[r]) {
      const bool forward = a.what.kind == action_kind::forward;
      const double x = left + a.start * unit_px, w = (a.end - a.start) * unit_px;
      out += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
             num(lane) + "\" fill=\"" + (forward ? "#4e79a7" : "#f28e2b") + "\" stroke=\"#fff\"/>\n";
      out += "<text x=\"" + num(x + w / 2) + "\" y=\"" + num(y + lane / 2 + 4) +
             "\" text-anchor=\"middle\" fill=\"" + (forward ? "#fff" : "#000") + "\">" +
             detail::compute_label(s, a.what) + "</text>\n";
    }
  }
  const int step = t.makespan > 40 ? 10 : t.makespan > 16 ? 5 : 1;
  for (int time = 0; time <= t.makespan + 1e-9; time += step) {
    const double x = left + time * unit_px;
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(lanes_end) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(lanes_end + 5) + "\" stroke=\"#555\"/>\n";
    out += "<text x=\"" + num(x) + "\" y=\"" + num(lanes_end + 18) +
           "\" text-anchor=\"middle\" fill=\"#555\">" + std::to_string(time) + "</text>\n";
  }
  return out + "</svg>\n";
}

}  // namespace shardgraph::pipeline
