#pragma once
// Weights saved by the ranks of one layout and loaded under any other (change dp, tp, pp or the
// ZeRO stage): no converter step. A checkpoint directory holds
//   rank-00000.safetensors, ...   each rank's slices of its parameters, in their dtype; for each
//                                 tensor a metadata entry "slice:<name>" = {"global": [..], "offset": [..]}
//   shardgraph-checkpoint.json    {"format": "shardgraph-weights-1", "ranks": N}, written last
// save_weights writes every file under a temporary name and renames it into place, and rank 0 writes
// shardgraph-checkpoint.json only after every rank has finished (a barrier): a checkpoint without it
// is incomplete (the save was interrupted) and is refused. sharded_weights(directory) is a
// weight_source that assembles any requested slice from the saved pieces that overlap it, reading only
// those bytes; every element must be covered by some piece.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/atomic_file_writer.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors.hpp"
#include "shardgraph/runtime/host_tensor.hpp"
#include "shardgraph/runtime/weights.hpp"

namespace shardgraph::io {

inline constexpr std::string_view sharded_weights_format = "shardgraph-weights-1";
inline constexpr std::string_view sharded_weights_manifest = "shardgraph-checkpoint.json";

namespace detail {

inline std::string rank_file_name(int rank) {
  std::string digits = std::to_string(rank);
  return "rank-" + std::string(digits.size() < 5 ? 5 - digits.size() : 0, '0') + digits + ".safetensors";
}

inline std::string json_list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

inline st_dtype st_dtype_of(dtype t, const std::string& where) {
  switch (t) {
    case dtype::f64:
      return st_dtype::f64;
    case dtype::f32:
      return st_dtype::f32;
    case dtype::bf16:
      return st_dtype::bf16;
    case dtype::f16:
      return st_dtype::f16;
    default:
      fail(where, "a parameter of dtype " + std::string(dtype_name(t)), "parameters are floating point");
  }
}

// One saved piece of a tensor: where it sits in the global tensor, and where it is stored.
struct saved_piece {
  std::string file;  // path of the rank file
  std::vector<std::int64_t> global, offset, count;
};

inline std::vector<std::int64_t> int_list(const json::value& v, const std::string& where, const char* key) {
  const json::value* list = v.type() == json::kind::object ? v.find(key) : nullptr;
  if (list == nullptr || list->type() != json::kind::array)
    fail(where, std::string("its slice metadata lacks the list \"") + key + "\"",
         "the checkpoint is corrupt; save it again");
  std::vector<std::int64_t> out;
  for (const json::value& e : list->as_array()) {
    if (e.type() != json::kind::integer || e.as_int() < 0)
      fail(where, std::string("\"") + key + "\" holds something other than non-negative integers",
           "the checkpoint is corrupt; save it again");
    out.push_back(e.as_int());
  }
  return out;
}

// A 52-bit FNV-1a fingerprint of a piece's name and place, exact in a double so that the Communicator's
// all_gather can carry it.
inline double piece_fingerprint(const std::string& name, const tensor_slice& slice) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&](std::uint64_t x) {
    for (int i = 0; i < 8; ++i, x >>= 8) h = (h ^ (x & 0xff)) * 1099511628211ull;
  };
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  for (const std::int64_t x : slice.offset) mix(static_cast<std::uint64_t>(x));
  for (const std::int64_t x : slice.count) mix(static_cast<std::uint64_t>(x));
  return static_cast<double>(h & ((std::uint64_t{1} << 52) - 1));
}

// Which of this rank's pieces it writes: a piece that a lower rank also holds (a data-parallel
// replica, the same name and place) is left to that rank, so every piece is written once.
template <class Parts, class Comm>
std::vector<bool> pieces_to_write(const Parts& parts, Comm& comm) {
  std::vector<double> mine;
  for (const auto& [name, part] : parts) mine.push_back(piece_fingerprint(name, part.slice));
  const auto ranks = static_cast<std::size_t>(comm.size());
  const double count = static_cast<double>(mine.size());
  std::vector<double> counts(ranks);
  comm.all_gather(std::span<const double>(&count, 1), std::span<double>(counts));
  std::size_t most = 0;
  for (const double c : counts) most = std::max(most, static_cast<std::size_t>(c));
  std::vector<double> padded(most, -1.0), all(most * ranks);
  std::copy(mine.begin(), mine.end(), padded.begin());
  comm.all_gather(std::span<const double>(padded), std::span<double>(all));
  std::vector<bool> write(mine.size(), true);
  for (std::size_t i = 0; i < mine.size(); ++i)
    for (std::size_t r = 0; r < static_cast<std::size_t>(comm.rank()) && write[i]; ++r)
      write[i] = std::find(all.begin() + static_cast<std::ptrdiff_t>(r * most),
                           all.begin() + static_cast<std::ptrdiff_t>((r + 1) * most),
                           mine[i]) == all.begin() + static_cast<std::ptrdiff_t>((r + 1) * most);
  return write;
}

// Checks that the rank files of a save (headers only) hold every element of every tensor exactly
// once: the pieces of one tensor do not overlap, so their element counts must add up to its size.
inline void check_every_element_saved(const std::string& directory, int ranks) {
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> saved;  // name -> (elements, of)
  for (int r = 0; r < ranks; ++r) {
    const std::string path = (std::filesystem::path(directory) / rank_file_name(r)).string();
    const safetensors_file file(path);
    for (const auto& [key, text] : file.metadata()) {
      if (key.rfind("slice:", 0) != 0) continue;
      const std::string name = key.substr(6), at = path + ": tensor '" + name + "'";
      std::int64_t global = 1, count = 1;
      for (const std::int64_t g : int_list(json::parse(text, at), at, "global")) global *= g;
      for (const std::int64_t c : file.info(name).shape) count *= c;
      auto& [elements, of] = saved[name];
      elements += count;
      of = global;
    }
  }
  for (const auto& [name, counts] : saved)
    if (counts.first != counts.second)
      fail("save_weights: " + directory + ": tensor '" + name + "'",
           "the ranks wrote " + std::to_string(counts.first) + " of its " + std::to_string(counts.second) +
               " elements",
           "every rank must pass all of its parameters() (and the same optimizer state) to save_weights");
}

}  // namespace detail

// Writes this rank's parameter slices (name -> {slice, values}, as the executor's parameters() gives
// them) into `directory`; every rank of the world calls it with its own parts. `comm` (barrier(),
// rank(), size(), all_gather) orders the manifest after every rank file. A piece that several ranks
// hold (data-parallel replicas) is written once, by the lowest of them.
// `state` (optional): a JSON object kept in the manifest, such as a training run's step and data
// position (checkpoint_state() reads it back).
template <class Parts, class Comm>
void save_weights(const std::string& directory, const Parts& parts, Comm& comm,
                  const std::string& state = "") {
  namespace fs = std::filesystem;
  const std::string where = "save_weights: " + directory;
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) fail(where, "cannot create the directory: " + ec.message(), "check the path and its permissions");
  if (!state.empty() && json::parse(state, where + ": state").type() != json::kind::object)
    fail(where, "the state to keep is not a JSON object", "give state as {\"key\": value, ...}");
  if (comm.rank() == 0)
    fs::remove(fs::path(directory) / sharded_weights_manifest, ec);      // incomplete until done
  const std::vector<bool> write = detail::pieces_to_write(parts, comm);  // also a barrier
  std::vector<tensor_to_write> tensors;
  std::map<std::string, std::string> metadata{{"format", std::string(sharded_weights_format)}};
  std::size_t i = 0;
  for (const auto& [name, part] : parts) {
    if (!write[i++]) continue;
    tensors.push_back({name, detail::st_dtype_of(part.values.type(), where + ": " + name), part.slice.count,
                       part.values.bytes()});
    metadata.emplace("slice:" + name, "{\"global\": " + detail::json_list(part.slice.global) +
                                          ", \"offset\": " + detail::json_list(part.slice.offset) + "}");
  }
  write_safetensors((fs::path(directory) / detail::rank_file_name(comm.rank())).string(), tensors, metadata);
  comm.barrier();  // every rank file is in place
  if (comm.rank() == 0) {
    detail::check_every_element_saved(directory, comm.size());
    atomic_file_writer manifest((fs::path(directory) / sharded_weights_manifest).string());
    const std::string text = "{\"format\": \"" + std::string(sharded_weights_format) +
                             "\", \"ranks\": " + std::to_string(comm.size()) +
                             (state.empty() ? "" : ", \"state\": " + state) + "}\n";
    manifest.write(text);
    manifest.commit();
  }
  comm.barrier();
}

// The saved pieces of every tensor of a checkpoint that save_weights wrote.
class sharded_weights_index {
 public:
  explicit sharded_weights_index(const std::string& directory) : directory_(directory) {
    namespace fs = std::filesystem;
    const std::string manifest = (fs::path(directory) / sharded_weights_manifest).string();
    if (!fs::is_regular_file(manifest))
      fail(directory,
           std::string("has no ") + std::string(sharded_weights_manifest) +
               ": the checkpoint is incomplete (a save was interrupted) or not a shardgraph checkpoint",
           "load the last complete checkpoint, or save again");
    const json::value m = read_json_file(manifest);
    const json::value* format = m.type() == json::kind::object ? m.find("format") : nullptr;
    const json::value* ranks = m.type() == json::kind::object ? m.find("ranks") : nullptr;
    if (format == nullptr || format->type() != json::kind::string ||
        format->as_string() != sharded_weights_format || ranks == nullptr ||
        ranks->type() != json::kind::integer || ranks->as_int() < 1)
      fail(manifest,
           std::string("is not {\"format\": \"") + std::string(sharded_weights_format) + "\", \"ranks\": N}",
           "the checkpoint is corrupt or from another version; save it again");
    for (int r = 0; r < ranks->as_int(); ++r) {
      const std::string path = (fs::path(directory) / detail::rank_file_name(r)).string();
      if (!fs::is_regular_file(path))
        fail(directory,
             "rank file " + detail::rank_file_name(r) + " of " + std::to_string(ranks->as_int()) +
                 " is missing",
             "copy every file of the checkpoint");
      auto file = std::make_shared<const safetensors_file>(path);
      for (const auto& [key, text] : file->metadata()) {
        if (key.rfind("slice:", 0) != 0) continue;
        const std::string name = key.substr(6), at = path + ": tensor '" + name + "'";
        if (!file->contains(name))
          fail(at, "has slice metadata but no data", "the checkpoint is corrupt; save it again");
        const json::value slice = json::parse(text, at);
        detail::saved_piece piece{path, detail::int_list(slice, at, "global"),
                                  detail::int_list(slice, at, "offset"), file->info(name).shape};
        if (piece.global.size() != piece.count.size() || piece.offset.size() != piece.count.size())
          fail(at, "its slice metadata and its shape differ in rank",
               "the checkpoint is corrupt; save it again");
        pieces_[name].push_back(std::move(piece));
      }
      files_.emplace(path, std::move(file));
    }
  }

  const std::vector<detail::saved_piece>& pieces(std::string_view tensor) const {
    const auto it = pieces_.find(tensor);
    if (it == pieces_.end())
      fail(directory_ + ": tensor '" + std::string(tensor) + "'", "is not in the checkpoint",
           "load the checkpoint into the model that saved it (same parameter names)");
    return it->second;
  }
  const safetensors_file& file(const std::string& path) const { return *files_.at(path); }
  std::vector<std::string> tensor_names() const {
    std::vector<std::string> names;
    for (const auto& [name, pieces] : pieces_) names.push_back(name);
    return names;
  }

 private:
  std::string directory_;
  std::map<std::string, std::vector<detail::saved_piece>, std::less<>> pieces_;
  std::map<std::string, std::shared_ptr<const safetensors_file>> files_;
};

// The "state" object save_weights kept in a complete checkpoint's manifest (null when none).
inline json::value checkpoint_state(const std::string& directory) {
  const std::string manifest = (std::filesystem::path(directory) / sharded_weights_manifest).string();
  if (!std::filesystem::is_regular_file(manifest))
    fail(directory,
         std::string("has no ") + std::string(sharded_weights_manifest) + ": the checkpoint is incomplete",
         "load the last complete checkpoint");
  const json::value m = read_json_file(manifest);
  const json::value* state = m.type() == json::kind::object ? m.find("state") : nullptr;
  return state != nullptr ? *state : json::value();
}

// A weight source over a saved checkpoint: each slice is copied from the pieces that overlap it.
inline weight_source sharded_weights(const std::string& directory) {
  auto index = std::make_shared<const sharded_weights_index>(directory);
  return [index, directory](std::string_view name, const tensor_slice& slice, host_tensor& out) {
    const std::string where = directory + ": tensor '" + std::string(name) + "'";
    const std::size_t rank = slice.global.size();
    std::vector<bool> covered(static_cast<std::size_t>(slice.numel()), false);
    std::vector<float> run;
    for (const detail::saved_piece& p : index->pieces(name)) {
      if (p.global != slice.global)
        fail(where,
             "was saved with shape " + detail::json_list(p.global) + ", the model has " +
                 detail::json_list(slice.global),
             "load the checkpoint into a model of the same sizes");
      // The intersection box [low, high) of the piece and the slice, in global coordinates.
      std::vector<std::int64_t> low(rank), high(rank);
      bool empty = false;
      for (std::size_t d = 0; d < rank; ++d) {
        low[d] = std::max(p.offset[d], slice.offset[d]);
        high[d] = std::min(p.offset[d] + p.count[d], slice.offset[d] + slice.count[d]);
        empty = empty || low[d] >= high[d];
      }
      if (empty && rank > 0) continue;
      const safetensors_file& file = index->file(p.file);
      const std::int64_t width = rank == 0 ? 1 : high[rank - 1] - low[rank - 1];
      std::vector<std::int64_t> at(low);  // the run's first element, global coordinates
      while (true) {
        std::int64_t from = 0, to = 0;  // flat indices in the piece and in the slice
        for (std::size_t d = 0; d < rank; ++d) {
          from = from * p.count[d] + (at[d] - p.offset[d]);
          to = to * slice.count[d] + (at[d] - slice.offset[d]);
        }
        const auto n = static_cast<std::size_t>(width);
        const auto t = static_cast<std::size_t>(to);
        if (out.type() == dtype::f64) {
          file.read_elements_as<double>(name, static_cast<std::uint64_t>(from), n,
                                        out.values<double>().data() + t);
        } else {
          run.resize(n);
          file.read_elements_as<float>(name, static_cast<std::uint64_t>(from), n, run.data());
          for (std::size_t j = 0; j < n; ++j) out.set(static_cast<std::int64_t>(t + j), run[j]);
        }
        for (std::size_t j = 0; j < n; ++j) covered[t + j] = true;
        // the next run: advance the leading dimensions (all but the last) within the box
        bool more = false;
        for (std::size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) {
          if (++at[d] < high[d]) {
            more = true;
            break;
          }
          at[d] = low[d];
        }
        if (!more) break;
      }
    }
    for (std::size_t i = 0; i < covered.size(); ++i)
      if (!covered[i])
        fail(where, "element " + std::to_string(i) + " of this rank's slice is in none of the saved pieces",
             "the checkpoint is incomplete; save it again");
  };
}

}  // namespace shardgraph::io
