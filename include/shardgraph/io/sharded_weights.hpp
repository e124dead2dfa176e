#pragma once
// Weights saved by the ranks of one layout and loaded under any other (change dp, tp, pp or the
// ZeRO stage): no converter step. A checkpoint directory holds
//   rank-00000.safetensors, ...   each rank's slices of its parameters, in their dtype; for each
//                                 tensor a metadata entry "slice:<name>" = {"global": [..], "offset": [..]}
//                                 and its CRC-32C, "crc32c:<name>"
//   shardgraph-checkpoint.json    the manifest (checkpoint_manifest.hpp): the rank count, each rank
//                                 file's size and header CRC-32C, the caller's state; written last
// save_weights never edits a checkpoint in place: it writes a new directory beside it and swaps it in
// when complete (directory_replacement.hpp states the protocol and its invariant), so a crash at any
// moment leaves the previous checkpoint, or the new one, loadable. sharded_weights(directory) is a
// weight_source that assembles any requested slice from the saved pieces that overlap it, reading
// only those bytes; every element must be covered by some piece. Every byte read is checked against
// the checksums: an error names the file (and the tensor) whose bytes changed after the save.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/core/host_tensor.hpp"
#include "shardgraph/core/weight_source.hpp"
#include "shardgraph/io/checkpoint_manifest.hpp"
#include "shardgraph/io/directory_replacement.hpp"
#include "shardgraph/io/file_contents.hpp"
#include "shardgraph/io/hf_config.hpp"
#include "shardgraph/io/json.hpp"
#include "shardgraph/io/safetensors.hpp"

namespace shardgraph::io {

namespace detail {

inline bool checkpoint_owns(std::string_view name) {  // the files a save of a checkpoint writes
  const bool rank_file = name.starts_with("rank-") && name.ends_with(".safetensors");
  return rank_file || name == sharded_weights_manifest || name == "config.json" ||
         name.find(".tmp.") != std::string_view::npos;
}
inline constexpr directory_kind checkpoint_directory{"checkpoint", sharded_weights_manifest, checkpoint_owns};

// The size of a safetensors file and the CRC-32C of its header (length and JSON).
inline saved_file_check file_header_check(const std::string& path) {
  const file_contents file = file_contents::open(path);
  const std::span<const std::byte> bytes = file.bytes();
  std::uint64_t header = 0;
  for (int i = 0; i < 8 && bytes.size() >= 8; ++i)
    header |= static_cast<std::uint64_t>(bytes[static_cast<std::size_t>(i)]) << (8 * i);
  if (bytes.size() < 8 || header > bytes.size() - 8)
    fail(path, "is not a complete safetensors file", "the checkpoint is corrupt; load an earlier one");
  return {bytes.size(), crc32c_update(0, bytes.first(static_cast<std::size_t>(8 + header)))};
}

// Whether any rank failed (ok == false): every rank learns it, so that all throw together instead
// of waiting for the failed one at the next collective. Returns the first failed rank, or -1.
template <class Comm>
int first_failed_rank(Comm& comm, bool ok) {
  const double mine = ok ? 0.0 : 1.0;
  std::vector<double> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const double>(&mine, 1), std::span<double>(all));
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != 0.0) return static_cast<int>(r);
  return -1;
}

// Runs `step` on this rank (when `here`), then agrees with every rank on whether all succeeded; a
// rank whose step threw rethrows, the others throw an error naming it.
template <class Comm, class Step>
void collective_step(Comm& comm, bool here, const std::string& where, std::string_view what, Step&& step) {
  std::exception_ptr failure;
  if (here) {
    try {
      step();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const int failed = first_failed_rank(comm, failure == nullptr);
  if (failure) std::rethrow_exception(failure);
  if (failed >= 0)
    fail(
        where,
        "rank " + std::to_string(failed) + " failed while " + std::string(what) + " (its own error says why)",
        "fix what rank " + std::to_string(failed) + " reports; the last complete checkpoint stays loadable");
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

// Checks a saved piece against its own metadata: a float tensor (F64, F32, BF16 or F16) lying
// within its global shape. `at` names the file and the tensor.
inline void check_saved_piece(const std::string& at, const saved_piece& piece, st_dtype stored) {
  const std::string how = "the checkpoint is corrupt; save it again";
  if (piece.global.size() != piece.count.size() || piece.offset.size() != piece.count.size())
    fail(at, "its slice metadata and its shape differ in rank", how);
  if (stored != st_dtype::f64 && stored != st_dtype::f32 && stored != st_dtype::bf16 &&
      stored != st_dtype::f16)
    fail(at,
         "expected a float tensor (F64, F32, BF16 or F16), found " + std::string(st_dtype_name(stored)) +
             " " + shape_string(piece.count),
         how);
  for (std::size_t d = 0; d < piece.count.size(); ++d)
    if (piece.offset[d] > piece.global[d] || piece.count[d] > piece.global[d] - piece.offset[d])
      fail(at,
           "its piece of shape " + shape_string(piece.count) + " at offset " + json_list(piece.offset) +
               " does not lie within its global shape " + json_list(piece.global),
           how);
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
// them) into `directory`; every rank of the world calls it with its own parts. A piece that several
// ranks hold (data-parallel replicas) is written once, by the lowest of them. `comm` (rank(), size(),
// all_gather of doubles) orders the steps: rank 0 does every directory operation, each
// rank writes its own file into the new directory in between (directory_replacement.hpp). A failure
// on any rank throws on every rank, and leaves the previous checkpoint in place.
// `state` (optional): a JSON object kept in the manifest, such as a training run's step and data
// position (checkpoint_state() reads it back). `hooks`: files to add, and a call after each stage.
template <class Parts, class Comm>
void save_weights(const std::string& directory, const Parts& parts, Comm& comm, const std::string& state = "",
                  const save_hooks& hooks = {}) {
  namespace fs = std::filesystem;
  const std::string final = detail::without_trailing_separators(directory);
  const std::string where = "save_weights: " + final;
  if (!state.empty() && json::parse(state, where + ": state").type() != json::kind::object)
    fail(where, "the state to keep is not a JSON object", "give state as {\"key\": value, ...}");
  // The save's id: rank 0's pid, so that every rank names the same new directory.
  const double pid = static_cast<double>(this_process_id());
  std::vector<double> pids(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const double>(&pid, 1), std::span<double>(pids));
  const long id = static_cast<long>(pids[0]);
  const std::string staging = detail::staging_name(final, id);
  const bool leader = comm.rank() == 0;

  detail::collective_step(comm, leader, where, "creating the new directory", [&] {
    begin_replacing_directory(final, id, detail::checkpoint_directory);
    hooks(save_stage::staging_created);
  });
  const std::vector<bool> write = detail::pieces_to_write(parts, comm);
  detail::collective_step(comm, true, where, "writing its file", [&] {
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
    write_safetensors((fs::path(staging) / detail::rank_file_name(comm.rank())).string(), tensors, metadata);
    hooks(save_stage::files_written);
  });
  detail::collective_step(comm, leader, where, "completing the checkpoint", [&] {
    try {
      detail::check_every_element_saved(staging, comm.size());
      std::map<std::string, saved_file_check> files;
      for (int r = 0; r < comm.size(); ++r)
        files.emplace(detail::rank_file_name(r),
                      detail::file_header_check((fs::path(staging) / detail::rank_file_name(r)).string()));
      if (hooks.add_files) hooks.add_files(staging);
      write_marker(staging, detail::checkpoint_directory,
                   checkpoint_manifest_text(comm.size(), files, state));
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(staging, ignored);  // incomplete: nothing in it is needed
      throw;
    }
    hooks(save_stage::staging_complete);
    finish_replacing_directory(final, id, detail::checkpoint_directory, hooks);
  });
}

// The directory that holds the newest complete checkpoint saved as `directory`: itself, or the
// new or previous version that a save interrupted during its swap left beside it.
inline std::string complete_checkpoint_directory(const std::string& directory) {
  const std::string final = detail::without_trailing_separators(directory);
  if (const auto found = complete_directory(final, sharded_weights_manifest)) return *found;
  fail(final,
       std::string("has no ") + std::string(sharded_weights_manifest) +
           ": the checkpoint is incomplete (a save was interrupted) or not a shardgraph checkpoint",
       "load the last complete checkpoint, or save again");
}

inline checkpoint_manifest read_checkpoint_manifest(const std::string& complete_directory) {
  const std::string path = (std::filesystem::path(complete_directory) / sharded_weights_manifest).string();
  const file_contents text = file_contents::open(path);
  return parse_checkpoint_manifest(
      std::string_view(reinterpret_cast<const char*>(text.bytes().data()), text.bytes().size()), path);
}

// The saved pieces of every tensor of a checkpoint that save_weights wrote.
class sharded_weights_index {
 public:
  explicit sharded_weights_index(const std::string& directory)
      : directory_(complete_checkpoint_directory(directory)) {
    namespace fs = std::filesystem;
    const checkpoint_manifest manifest = read_checkpoint_manifest(directory_);
    for (int r = 0; r < manifest.ranks; ++r) {
      const std::string path = (fs::path(directory_) / detail::rank_file_name(r)).string();
      if (!fs::is_regular_file(path))
        fail(directory_,
             "rank file " + detail::rank_file_name(r) + " of " + std::to_string(manifest.ranks) +
                 " is missing",
             "copy every file of the checkpoint");
      if (manifest.checked) check_saved_file(path, manifest.files.at(detail::rank_file_name(r)));
      auto file = std::make_shared<const safetensors_file>(path);
      for (const auto& [key, text] : file->metadata()) {
        if (key.rfind("slice:", 0) != 0) continue;
        const std::string name = key.substr(6), at = path + ": tensor '" + name + "'";
        if (!file->contains(name))
          fail(at, "has slice metadata but no data", "the checkpoint is corrupt; save it again");
        const json::value slice = json::parse(text, at);
        detail::saved_piece piece{path, detail::int_list(slice, at, "global"),
                                  detail::int_list(slice, at, "offset"), file->info(name).shape};
        detail::check_saved_piece(at, piece, file->info(name).dtype);
        pieces_[name].push_back(std::move(piece));
      }
      files_.emplace(path, std::move(file));
    }
  }

  // The directory read: `directory`, or where an interrupted save left its newest complete version.
  const std::string& directory() const { return directory_; }

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

  static void check_saved_file(const std::string& path, const saved_file_check& saved) {
    const saved_file_check found = detail::file_header_check(path);
    if (found.bytes != saved.bytes)
      fail(path,
           "the file has " + std::to_string(found.bytes) + " bytes, the manifest says " +
               std::to_string(saved.bytes) + ": it was changed after the save",
           "restore the file from a good copy, or load an earlier checkpoint");
    if (found.header_crc32c != saved.header_crc32c)
      fail(path,
           "its header does not match the checksum in the manifest (CRC-32C " +
               crc32c_hex(found.header_crc32c) + ", saved " + crc32c_hex(saved.header_crc32c) +
               "): it was damaged after the save",
           "restore the file from a good copy, or load an earlier checkpoint");
  }
  std::map<std::string, std::shared_ptr<const safetensors_file>> files_;
};

// The "state" object save_weights kept in a complete checkpoint's manifest (null when none).
inline json::value checkpoint_state(const std::string& directory) {
  return read_checkpoint_manifest(complete_checkpoint_directory(directory)).state;
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
