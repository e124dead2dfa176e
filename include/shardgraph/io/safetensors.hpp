#pragma once
// Reading and writing safetensors, the weight format of Hugging Face models:
//   bytes [0, 8)        N, the length of the header, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    a JSON object, padded with spaces:
//                         {"__metadata__": {"format": "pt"},
//                          "wte.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
//   bytes [8 + N, end)  the data section; a tensor holds bytes [begin, end) of it, row-major, little-endian
// safetensors_file validates the whole header when it opens a file, so that later reads cannot meet
// a malformed file; each failure names the file and, where there is one, the tensor.
// Files written here are contiguous and fully covered, as the reference (Rust) reader demands;
// the reader here also accepts holes between tensors and bytes after the last one.
// Checksums: write_safetensors stores the CRC-32C of each 1 MiB block of every tensor as the
// metadata entry "crc32c:<name>" (block_checksums.hpp), computed while the bytes are written. The
// reader checks the blocks that a read touches (bytes(), read_as, read_elements_as), each once, and
// throws, naming the file and the tensor, on a mismatch; files without these entries (from other
// writers) are read unchecked.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardgraph/core/checked_math.hpp"
#include "shardgraph/core/error.hpp"
#include "shardgraph/core/half.hpp"
#include "shardgraph/io/atomic_file_writer.hpp"
#include "shardgraph/io/block_checksums.hpp"
#include "shardgraph/io/crc32c.hpp"
#include "shardgraph/io/file_contents.hpp"
#include "shardgraph/io/json.hpp"

namespace shardgraph::io {

enum class st_dtype { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean };
inline constexpr st_dtype all_st_dtypes[] = {st_dtype::f64, st_dtype::f32,    st_dtype::f16, st_dtype::bf16,
                                             st_dtype::i64, st_dtype::i32,    st_dtype::i16, st_dtype::i8,
                                             st_dtype::u8,  st_dtype::boolean};

constexpr std::string_view st_dtype_name(st_dtype d) {  // as spelled in the file
  constexpr std::string_view names[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"};
  return names[static_cast<int>(d)];
}
constexpr std::size_t st_dtype_size(st_dtype d) {  // bytes per element
  constexpr std::size_t sizes[] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1};
  return sizes[static_cast<int>(d)];
}
constexpr std::optional<st_dtype> parse_st_dtype(std::string_view name) {
  for (const st_dtype d : all_st_dtypes)
    if (st_dtype_name(d) == name) return d;
  return std::nullopt;
}

struct tensor_info {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::int64_t> shape;   // empty for a scalar
  std::uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
  // The file's reader has checked that the shape's bytes fit in 64 bits (detail::byte_size).
  std::uint64_t element_count() const {
    return static_cast<std::uint64_t>(checked_product(shape, "safetensors: a tensor's element count"));
  }
};

namespace detail {

template <class U>  // U: an unsigned integer type
U load_little_endian(const std::byte* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v = static_cast<U>(v | (static_cast<U>(p[i]) << (8 * i)));
  return v;
}

template <class S>  // S: the element type as stored: double, float or an integer type
S load_element(const std::byte* p) {
  if constexpr (std::is_floating_point_v<S>)
    return std::bit_cast<S>(
        load_little_endian<std::conditional_t<sizeof(S) == 8, std::uint64_t, std::uint32_t>>(p));
  else
    return static_cast<S>(load_little_endian<std::make_unsigned_t<S>>(p));
}

constexpr bool multiply_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& product) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  product = a * b;
  return false;
}

// product(shape) * st_dtype_size(dtype), or nullopt when a dimension is negative or 64 bits overflow.
constexpr std::optional<std::uint64_t> byte_size(std::span<const std::int64_t> shape, st_dtype dtype) {
  std::uint64_t bytes = st_dtype_size(dtype);
  for (const std::int64_t d : shape)
    if (d < 0 || multiply_overflows(bytes, static_cast<std::uint64_t>(d), bytes)) return std::nullopt;
  return bytes;
}

inline std::string shape_string(std::span<const std::int64_t> shape) {  // "(2, 3)", "(4,)"
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Why a tensor's byte count is wrong, or empty when it is right.
inline std::string size_mismatch(std::span<const std::int64_t> shape, st_dtype dtype, std::uint64_t bytes) {
  const std::optional<std::uint64_t> needed = byte_size(shape, dtype);
  const std::string what = "shape " + shape_string(shape) + " of " + std::string(st_dtype_name(dtype));
  if (!needed) return what + " has a negative dimension or more bytes than 64 bits count";
  if (*needed == bytes) return "";
  return "wrong dtype size: " + what + " needs " + std::to_string(*needed) + " bytes, but there are " +
         std::to_string(bytes);
}

inline std::string shorten(std::string_view s) {  // names from a file can be any length
  return s.size() <= 200 ? std::string(s) : std::string(s.substr(0, 200)) + "...";
}

inline std::size_t edit_distance(std::string_view a, std::string_view b) {  // Levenshtein
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      diagonal =
          std::exchange(row[j], std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])}));
  }
  return row[b.size()];
}

}  // namespace detail

class safetensors_file {
 public:
  static constexpr std::uint64_t max_header_bytes = 100'000'000;  // the reference implementation's limit

  explicit safetensors_file(const std::string& path) : safetensors_file(file_contents::open(path), path) {}
  // The same checks on bytes already in memory; `name` stands for the file in messages.
  static safetensors_file from_bytes(std::vector<std::byte> bytes, std::string name) {
    return safetensors_file(file_contents(std::move(bytes)), std::move(name));
  }

  const std::string& name() const { return name_; }
  const std::vector<tensor_info>& tensors() const { return tensors_; }              // in header order
  // "__metadata__", less the checksums ("crc32c:<tensor>", see has_checksum)
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view tensor) const { return index_.find(tensor) != index_.end(); }

  const tensor_info& info(std::string_view tensor) const {
    if (const auto it = index_.find(tensor); it != index_.end()) return tensors_[it->second];
    std::string why = "no such tensor among the " + std::to_string(tensors_.size()) + " in the file";
    if (const auto similar = similar_names(tensor); !similar.empty()) why += "; similar names: " + similar;
    fail(where(tensor), why, "Check the name; models differ in prefixes such as 'model.' or 'transformer.'");
  }

  // The tensor's bytes, little-endian, row-major; valid while this object lives.
  std::span<const std::byte> bytes(std::string_view tensor) const {
    const tensor_info& t = info(tensor);
    verify_checksum(t, 0, t.end - t.begin);
    return data_.subspan(t.begin, t.end - t.begin);
  }
  // Whether the file stores the tensor's checksums (then every read checks the blocks it touches).
  bool has_checksum(std::string_view tensor) const {
    return checksums_.has(static_cast<std::size_t>(&info(tensor) - tensors_.data()));
  }

  // The tensor's elements converted to T, row-major. Floating-point T takes every dtype (integers
  // convert as static_cast does; F64 values beyond float's range are refused rather than made inf);
  // bf16 and f16 widen exactly. Integer T takes the integer dtypes and BOOL, refusing values out of
  // its range, and refuses floating-point dtypes, which would lose fractions.
  template <class T>
  std::vector<T> read_as(std::string_view tensor) const {
    const std::uint64_t count = info(tensor).element_count();
    std::vector<T> out;
    try {
      out.resize(static_cast<std::size_t>(count));
    } catch (const std::bad_alloc&) {
      fail(where(tensor),
           "cannot allocate " + std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
               " bytes in host memory to read it",
           "free host memory, or read the tensor in parts with read_elements_as");
    } catch (const std::length_error&) {
      fail(where(tensor), std::to_string(count) + " elements are more than a vector holds",
           "read the tensor in parts with read_elements_as");
    }
    read_elements_as<T>(tensor, 0, out.size(), out.data());
    return out;
  }

  // Elements [first, first + count) of the tensor in row-major order, converted as read_as does,
  // into out[0, count): only those bytes are read (a mapped file loads only the pages they sit in),
  // so a rank reading its slice row by row touches about its share of the file.
  template <class T>
  void read_elements_as(std::string_view tensor, std::uint64_t first, std::uint64_t count, T* out) const {
    static_assert(
        std::is_same_v<T, double> || std::is_same_v<T, float> || std::is_same_v<T, std::int64_t> ||
            std::is_same_v<T, std::int32_t>,
        "shardgraph: safetensors_file::read_as<T>: T must be double, float, std::int64_t or std::int32_t");
    using detail::load_element;
    const tensor_info& t = info(tensor);
    if (first > t.element_count() || count > t.element_count() - first)
      fail(where(tensor),
           "elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
               ") were asked for; the tensor has " + std::to_string(t.element_count()),
           "this is a bug in the caller; please report it");
    verify_checksum(t, first * st_dtype_size(t.dtype), (first + count) * st_dtype_size(t.dtype));
    const run<T> r{first, count, out};
    switch (t.dtype) {
      case st_dtype::f64:
        return convert<T>(t, r, load_element<double>);
      case st_dtype::f32:
        return convert<T>(t, r, load_element<float>);
      case st_dtype::f16:
        return convert<T>(t, r, [](auto p) { return f16_to_float(load_element<std::uint16_t>(p)); });
      case st_dtype::bf16:
        return convert<T>(t, r, [](auto p) { return bf16_to_float(load_element<std::uint16_t>(p)); });
      case st_dtype::i64:
        return convert<T>(t, r, load_element<std::int64_t>);
      case st_dtype::i32:
        return convert<T>(t, r, load_element<std::int32_t>);
      case st_dtype::i16:
        return convert<T>(t, r, load_element<std::int16_t>);
      case st_dtype::i8:
        return convert<T>(t, r, load_element<std::int8_t>);
      case st_dtype::u8:
        return convert<T>(t, r, load_element<std::uint8_t>);
      case st_dtype::boolean:
        return convert<T>(t, r, [](auto p) { return std::uint8_t{p[0] != std::byte{0}}; });
    }
  }

 private:
  file_contents contents_;
  std::string name_;
  std::span<const std::byte> data_;  // the data section
  std::vector<tensor_info> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
  block_checksums checksums_;  // from the "crc32c:<name>" entries

  safetensors_file(file_contents contents, std::string name)
      : contents_(std::move(contents)), name_(std::move(name)) {
    const std::span<const std::byte> file = contents_.bytes();
    const std::string how =
        "Check that the file is a safetensors file and complete (download or write it again)";
    if (file.size() < 8)
      fail(name_,
           "the file is " + std::to_string(file.size()) +
               " bytes, shorter than the 8-byte header length that starts a safetensors file",
           how);
    const auto header_bytes = detail::load_little_endian<std::uint64_t>(file.data());
    if (header_bytes > max_header_bytes)
      fail(name_,
           "the header length is " + std::to_string(header_bytes) + " bytes, over the format's limit of " +
               std::to_string(max_header_bytes),
           how);
    if (header_bytes > file.size() - 8)
      fail(name_,
           "the header length " + std::to_string(header_bytes) +
               " runs past the end of the file, which has " + std::to_string(file.size()) + " bytes",
           how);
    data_ = file.subspan(8 + header_bytes);

    json::parse_limits limits;
    limits.first_byte_offset = 8;
    const json::value header =
        json::parse({reinterpret_cast<const char*>(file.data() + 8), header_bytes}, name_, limits);
    if (header.type() != json::kind::object)
      fail(name_, "the header is " + std::string(json::kind_name(header.type())) + ", not a JSON object",
           how);
    for (const auto& [key, entry] : header.as_object()) {
      if (key == "__metadata__")
        read_metadata(entry);
      else
        read_tensor(key, entry);
    }
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
    check_no_overlap();
    read_checksums();
  }

  void read_checksums() {
    checksums_ = block_checksums(tensors_.size());
    for (auto entry = metadata_.begin(); entry != metadata_.end();) {
      const auto& [key, value] = *entry;
      if (!key.starts_with(checksum_key_prefix)) {
        ++entry;
        continue;
      }
      const std::string tensor = key.substr(checksum_key_prefix.size());
      const auto it = index_.find(tensor);
      if (it == index_.end())
        fail(name_,
             "metadata entry \"" + detail::shorten(key) + "\" is the checksum of a tensor not in the file",
             "The file is corrupt; write it again");
      const tensor_info& t = tensors_[it->second];
      auto crcs = parse_block_checksums(value, checksum_block_count(t.end - t.begin));
      if (!crcs)
        bad_tensor(tensor, "its checksums \"" + detail::shorten(value) + "\" are not " +
                               std::to_string(checksum_block_count(t.end - t.begin)) +
                               " groups of eight lowercase hex digits, one per MiB of its bytes");
      checksums_.set(it->second, std::move(*crcs));
      entry = metadata_.erase(entry);  // metadata() shows the writer's own entries
    }
    checksums_.seal();
  }

  // Checks the tensor's bytes [first, last) (relative to the tensor) against its stored checksums.
  void verify_checksum(const tensor_info& t, std::uint64_t first, std::uint64_t last) const {
    const auto bad = checksums_.verify(static_cast<std::size_t>(&t - tensors_.data()),
                                       data_.subspan(t.begin, t.end - t.begin), first, last);
    if (bad)
      fail(where(t.name),
           "its bytes [" + std::to_string(bad->block_begin) + ", " + std::to_string(bad->block_end) +
               ") do not match the checksum stored with them (CRC-32C " + crc32c_hex(bad->found) +
               ", stored " + crc32c_hex(bad->stored) + "): the file was damaged after it was written",
           "Restore the file from a good copy or save the checkpoint again");
  }

  std::string where(std::string_view tensor) const {
    return name_ + ": tensor '" + detail::shorten(tensor) + "'";
  }
  [[noreturn]] void bad_tensor(std::string_view tensor, const std::string& why) const {
    fail(where(tensor), why,
         "The file is corrupt or was not written by a safetensors writer; write it again");
  }

  void read_metadata(const json::value& entry) {
    const std::string how = "\"__metadata__\" must map strings to strings; write the file again";
    if (entry.type() != json::kind::object)
      fail(name_, "\"__metadata__\" is " + std::string(json::kind_name(entry.type())) + ", not an object",
           how);
    for (const auto& [key, value] : entry.as_object()) {
      if (value.type() != json::kind::string)
        fail(name_,
             "\"__metadata__\" entry \"" + detail::shorten(key) + "\" is " +
                 std::string(json::kind_name(value.type())) + ", not a string",
             how);
      metadata_.emplace(key, value.as_string());
    }
  }

  void read_tensor(const std::string& name, const json::value& entry) {
    if (entry.type() != json::kind::object)
      bad_tensor(name, "its header entry is " + std::string(json::kind_name(entry.type())) +
                           ", not an object with dtype, shape and data_offsets");
    const auto field = [&](std::string_view key, json::kind kind) -> const json::value& {
      const json::value* v = entry.find(key);
      if (!v) bad_tensor(name, "\"" + std::string(key) + "\" is missing from its header entry");
      if (v->type() != kind)
        bad_tensor(name, "\"" + std::string(key) + "\" is " + std::string(json::kind_name(v->type())) +
                             ", not " + std::string(json::kind_name(kind)));
      return *v;
    };
    tensor_info t;
    t.name = name;
    const std::string& dtype = field("dtype", json::kind::string).as_string();
    const auto parsed = parse_st_dtype(dtype);
    if (!parsed)
      fail(where(name), "unknown dtype \"" + detail::shorten(dtype) + "\"",
           "Convert the tensor to one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL");
    t.dtype = *parsed;
    for (const json::value& dim : field("shape", json::kind::array).as_array()) {
      if (dim.type() != json::kind::integer)
        bad_tensor(name, "its shape holds " + std::string(json::kind_name(dim.type())) + ", not an integer");
      t.shape.push_back(dim.as_int());
    }
    const json::array& offsets = field("data_offsets", json::kind::array).as_array();
    if (offsets.size() != 2 || std::any_of(offsets.begin(), offsets.end(), [](const json::value& o) {
          return o.type() != json::kind::integer || o.as_int() < 0;
        }))
      bad_tensor(name, "data_offsets must be two non-negative integers [begin, end]");
    t.begin = static_cast<std::uint64_t>(offsets[0].as_int());
    t.end = static_cast<std::uint64_t>(offsets[1].as_int());
    const std::string range = "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    if (t.begin > t.end) bad_tensor(name, range + " decrease");
    if (t.end > data_.size())
      bad_tensor(name, range + " run past the end of the data section, which has " +
                           std::to_string(data_.size()) + " bytes");
    if (const std::string why = detail::size_mismatch(t.shape, t.dtype, t.end - t.begin); !why.empty())
      bad_tensor(name, why + " (" + range + ")");
    tensors_.push_back(std::move(t));
  }

  void check_no_overlap() const {  // empty tensors occupy no bytes and overlap nothing
    std::vector<const tensor_info*> by_begin;
    for (const tensor_info& t : tensors_)
      if (t.begin != t.end) by_begin.push_back(&t);
    std::sort(by_begin.begin(), by_begin.end(), [](auto a, auto b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < by_begin.size(); ++i)
      if (by_begin[i]->begin < by_begin[i - 1]->end)
        bad_tensor(by_begin[i]->name, "its bytes [" + std::to_string(by_begin[i]->begin) + ", " +
                                          std::to_string(by_begin[i]->end) + ") overlap those of tensor '" +
                                          detail::shorten(by_begin[i - 1]->name) + "' [" +
                                          std::to_string(by_begin[i - 1]->begin) + ", " +
                                          std::to_string(by_begin[i - 1]->end) + ")");
  }

  std::string similar_names(std::string_view wanted) const {              // up to three, closest first
    const auto cut = [](std::string_view s) { return s.substr(0, 64); };  // bounds the cost
    std::vector<std::pair<std::size_t, std::string_view>> ranked;
    for (const tensor_info& t : tensors_)
      ranked.emplace_back(detail::edit_distance(cut(wanted), cut(t.name)), t.name);
    const std::size_t shown = std::min<std::size_t>(3, ranked.size());
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(shown), ranked.end());
    std::string list;
    for (std::size_t i = 0; i < shown; ++i)
      list += (i ? ", '" : "'") + detail::shorten(ranked[i].second) + "'";
    return list;
  }

  template <class T>
  struct run {  // elements [first, first + count) into out
    std::uint64_t first, count;
    T* out;
  };

  template <class T, class Load>
  void convert(const tensor_info& t, run<T> r, Load load) const {
    using S = decltype(load(std::declval<const std::byte*>()));
    const std::string from = std::string(st_dtype_name(t.dtype));
    if constexpr (std::is_integral_v<T> && std::is_floating_point_v<S>) {
      fail(where(t.name), "cannot read " + from + " as an integer type: that would drop fractions",
           "Read it with read_as<float> or read_as<double>");
    } else {
      const std::size_t stride = st_dtype_size(t.dtype);
      const std::byte* p = data_.data() + t.begin + r.first * stride;
      T* out = r.out;
      for (std::size_t i = 0; i < r.count; ++i) {
        const S v = load(p + i * stride);
        bool fits = true;
        if constexpr (std::is_same_v<T, float> && std::is_same_v<S, double>)
          fits = !std::isfinite(v) || std::abs(v) <= static_cast<double>(std::numeric_limits<float>::max());
        else if constexpr (std::is_integral_v<T> && sizeof(S) > sizeof(T))
          fits = v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
        if (!fits)
          fail(where(t.name),
               "element " + std::to_string(r.first + i) + " of " + from + " (" + std::to_string(v) +
                   ") is outside the range of the requested type",
               "Read it as a wider type (double or std::int64_t)");
        out[i] = static_cast<T>(v);
      }
    }
  }
};

// One tensor to write: its bytes, little-endian and row-major, product(shape) * st_dtype_size(dtype)
// of them. `data` is a view: the bytes must outlive the write_safetensors call.
struct tensor_to_write {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

template <class T>  // the dtype that holds T
constexpr st_dtype st_dtype_of() {
  using std::is_same_v;
  static_assert(
      is_same_v<T, double> || is_same_v<T, float> || is_same_v<T, std::int64_t> ||
          is_same_v<T, std::int32_t> || is_same_v<T, std::int16_t> || is_same_v<T, std::int8_t> ||
          is_same_v<T, std::uint8_t>,
      "shardgraph: st_dtype_of<T>: T must be double, float, std::int64_t, std::int32_t, std::int16_t, "
      "std::int8_t or std::uint8_t; pass bf16/f16 bits as bytes with an explicit st_dtype");
  return is_same_v<T, double>         ? st_dtype::f64
         : is_same_v<T, float>        ? st_dtype::f32
         : is_same_v<T, std::int64_t> ? st_dtype::i64
         : is_same_v<T, std::int32_t> ? st_dtype::i32
         : is_same_v<T, std::int16_t> ? st_dtype::i16
         : is_same_v<T, std::int8_t>  ? st_dtype::i8
                                      : st_dtype::u8;
}

// A view of `values` as a tensor of shape `shape`, dtype from T (double -> F64, float -> F32, ...).
//   std::vector<float> w(6);  write_safetensors("w.safetensors", {make_tensor_to_write("w", {2, 3}, w)});
template <class T>
tensor_to_write make_tensor_to_write(std::string name, std::vector<std::int64_t> shape,
                                     const std::vector<T>& values) {
  static_assert(
      std::endian::native == std::endian::little || sizeof(T) == 1,
      "shardgraph: make_tensor_to_write: safetensors is little-endian; convert the values' bytes first");
  return {std::move(name), st_dtype_of<T>(), std::move(shape), std::as_bytes(std::span(values))};
}
template <class T>  // the view would outlive a temporary vector
tensor_to_write make_tensor_to_write(std::string, std::vector<std::int64_t>, const std::vector<T>&&) = delete;

// Writes the tensors (header in the given order; data ordered by element size, largest first, so
// each tensor starts at a multiple of its element size) and `metadata` as "__metadata__".
// Each tensor's block CRC-32Cs are added to the metadata as "crc32c:<name>" (replacing any such entry
// given; block_checksums.hpp).
// Atomic: readers see the old file or the new one. Throws, naming the tensor, before writing anything
// when a name is empty, repeated, "__metadata__" or not UTF-8, a dimension is negative, or the data
// size is not product(shape) * element size.
inline void write_safetensors(const std::string& path, std::span<const tensor_to_write> tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  const auto bad = [&](std::string_view tensor, const std::string& why, std::string_view how) {
    fail(path + ": tensor '" + detail::shorten(tensor) + "'", why, how);
  };
  std::vector<std::string_view> names;
  for (const tensor_to_write& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !json::is_valid_utf8(t.name))
      bad(t.name, "the name is empty, \"__metadata__\" or not UTF-8",
          "Give the tensor a UTF-8 name other than \"__metadata__\"");
    if (const std::string why = detail::size_mismatch(t.shape, t.dtype, t.data.size()); !why.empty())
      bad(t.name, why, "Pass product(shape) * element size bytes, or fix the shape or the dtype");
    names.push_back(t.name);
  }
  std::sort(names.begin(), names.end());
  if (const auto d = std::adjacent_find(names.begin(), names.end()); d != names.end())
    bad(*d, "two tensors have this name", "Give every tensor its own name");
  for (const auto& [key, value] : metadata)
    if (!json::is_valid_utf8(key) || !json::is_valid_utf8(value))
      fail(path, "the metadata entry \"" + detail::shorten(key) + "\" is not UTF-8",
           "Write metadata keys and values as UTF-8");

  std::vector<std::size_t> data_order(tensors.size());
  std::iota(data_order.begin(), data_order.end(), std::size_t{0});
  std::stable_sort(data_order.begin(), data_order.end(), [&](std::size_t a, std::size_t b) {
    return st_dtype_size(tensors[a].dtype) > st_dtype_size(tensors[b].dtype);
  });
  std::vector<std::uint64_t> begin(tensors.size());
  std::uint64_t offset = 0;
  for (const std::size_t i : data_order) begin[i] = std::exchange(offset, offset + tensors[i].data.size());

  // The checksums are known only once the data is written: the header first holds zeros for them,
  // and is written again, at the same length, with the real ones.
  std::map<std::string, std::string> entries = metadata;
  for (const tensor_to_write& t : tensors)
    entries[std::string(checksum_key_prefix) + t.name] =
        std::string(8 * checksum_block_count(t.data.size()), '0');
  const auto make_header = [&] {
    std::string header = "{\"__metadata__\":{";
    for (const auto& [key, value] : entries)
      header += (header.back() == '{' ? "" : ",") + json::quote(key) + ":" + json::quote(value);
    header += "}";
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const tensor_to_write& t = tensors[i];
      header += "," + json::quote(t.name) + ":{\"dtype\":\"" + std::string(st_dtype_name(t.dtype)) +
                "\",\"shape\":[";
      for (std::size_t d = 0; d < t.shape.size(); ++d) header += (d ? "," : "") + std::to_string(t.shape[d]);
      header += "],\"data_offsets\":[" + std::to_string(begin[i]) + "," +
                std::to_string(begin[i] + t.data.size()) + "]}";
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');  // the data section starts 8-aligned
    return header;
  };
  std::string header = make_header();
  if (header.size() > safetensors_file::max_header_bytes)
    fail(path,
         "the header would be " + std::to_string(header.size()) + " bytes, over the format's limit of " +
             std::to_string(safetensors_file::max_header_bytes),
         "Split the tensors over several files");

  std::byte length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xff);
  atomic_file_writer out(path);
  out.write(length);
  out.write(header);
  for (const std::size_t i : data_order) {  // each block checksummed while still in cache, then written
    const std::span<const std::byte> data = tensors[i].data;
    std::string crcs = data.empty() ? crc32c_hex(0) : "";
    for (std::size_t at = 0; at < data.size(); at += checksum_block_bytes) {
      const auto block = data.subspan(at, std::min<std::size_t>(checksum_block_bytes, data.size() - at));
      crcs += crc32c_hex(crc32c_update(0, block));
      out.write(block);
    }
    entries[std::string(checksum_key_prefix) + tensors[i].name] = std::move(crcs);
  }
  out.overwrite(sizeof length, make_header());
  out.commit();
}

inline void write_safetensors(const std::string& path, std::initializer_list<tensor_to_write> tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  write_safetensors(path, std::span<const tensor_to_write>(tensors.begin(), tensors.size()), metadata);
}

}  // namespace shardgraph::io
