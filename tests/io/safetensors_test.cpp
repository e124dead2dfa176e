#include "shardgraph/io/safetensors.hpp"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "catch.hpp"

namespace io = shardgraph::io;
using io::st_dtype;

namespace {

using shardgraph::testing::contains;
using shardgraph::testing::error_of;



// A fresh directory per process, so that concurrent test runs do not meet; removed at exit.
std::string temp_path(const std::string& file) {
  static const struct scratch_directory {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("shardgraph-io-test-" + std::to_string(::getpid()));
    scratch_directory() { std::filesystem::create_directories(path); }
    ~scratch_directory() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } directory;
  return (directory.path / file).string();
}

// A safetensors file as the format's description builds it: the header length as 8 bytes
// little-endian, the JSON header, the data section.
std::vector<std::byte> safetensors_bytes(std::string_view header, const std::vector<std::byte>& data = {}) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((header.size() >> (8 * i)) & 0xff));
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<std::byte> zeros(std::size_t n) { return std::vector<std::byte>(n); }

template <class T>
std::vector<std::byte> little_endian(const std::vector<T>& values) {  // the test host is little-endian
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string parse_error(const std::vector<std::byte>& bytes) {
  return error_of([&] { io::safetensors_file::from_bytes(bytes, "bad.safetensors"); });
}

}  // namespace

TEST_CASE("safetensors reads a file built byte by byte as the format describes", "[io]") {
  // What Python's safetensors writes for {"b": int64 [42], "a": float32 [1.0, -2.5]} with
  // metadata {"format": "pt"}: compact JSON, "__metadata__" first, padded with spaces to 8 bytes.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> data = {std::byte{42},
                                 {},
                                 {},
                                 {},
                                 {},
                                 {},
                                 {},
                                 {},  // int64 42
                                 {},
                                 {},
                                 std::byte{0x80},
                                 std::byte{0x3f},  // float 1.0
                                 {},
                                 {},
                                 std::byte{0x20},
                                 std::byte{0xc0}};  // float -2.5
  const std::string path = temp_path("by_hand.safetensors");
  write_file(path, safetensors_bytes(header, data));

  const io::safetensors_file file(path);
  REQUIRE(file.tensors().size() == 2);
  CHECK(file.tensors()[0].name == "b");  // header order
  CHECK(file.tensors()[1].name == "a");
  CHECK(file.metadata().at("format") == "pt");
  const io::tensor_info& a = file.info("a");
  CHECK(a.dtype == st_dtype::f32);
  CHECK(a.shape == std::vector<std::int64_t>{2});
  CHECK(a.begin == 8);
  CHECK(a.end == 16);
  CHECK(file.read_as<float>("a") == std::vector<float>{1.0f, -2.5f});
  CHECK(file.read_as<double>("a") == std::vector<double>{1.0, -2.5});
  CHECK(file.read_as<std::int64_t>("b") == std::vector<std::int64_t>{42});
  CHECK(file.bytes("b").size() == 8);
  CHECK(file.contains("a"));
  CHECK_FALSE(file.contains("c"));

  const auto in_memory = io::safetensors_file::from_bytes(safetensors_bytes(header, data), "memory");
  CHECK(in_memory.read_as<float>("a") == std::vector<float>{1.0f, -2.5f});
}

TEST_CASE("safetensors round-trips every dtype, scalars and empty tensors", "[io]") {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<io::tensor_to_write> tensors;
  for (const st_dtype d : io::all_st_dtypes) {
    std::vector<std::byte> bytes(6 * io::st_dtype_size(d));
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 7 + 3);
    if (d == st_dtype::boolean)
      for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i % 2);
    payloads.push_back(std::move(bytes));
  }
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    const st_dtype d = io::all_st_dtypes[i];
    tensors.push_back({"t." + std::string(io::st_dtype_name(d)), d, {2, 3}, payloads[i]});
  }
  const std::vector<double> scalar = {3.25};
  tensors.push_back(io::make_tensor_to_write("scalar", {}, scalar));
  tensors.push_back({"empty", st_dtype::f32, {0, 4}, {}});
  const std::string path = temp_path("every_dtype.safetensors");
  io::write_safetensors(path, tensors, {{"format", "pt"}, {"note", "quote \" and \\ and \xc3\xa9"}});

  CHECK_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  const std::vector<std::byte> raw = read_file(path);
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= std::to_integer<std::uint64_t>(raw[i]) << (8 * i);
  CHECK((8 + header_size) % 8 == 0);
  CHECK(raw[8] == std::byte{'{'});

  const io::safetensors_file file(path);
  REQUIRE(file.tensors().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const io::tensor_info& t = file.tensors()[i];
    INFO(tensors[i].name);
    CHECK(t.name == tensors[i].name);
    CHECK(t.dtype == tensors[i].dtype);
    CHECK(t.shape == tensors[i].shape);
    CHECK(t.begin % io::st_dtype_size(t.dtype) == 0);  // aligned to the element size
    const auto back = file.bytes(t.name);
    CHECK(std::equal(back.begin(), back.end(), tensors[i].data.begin(), tensors[i].data.end()));
  }
  CHECK(file.metadata().size() == 2);
  CHECK(file.metadata().at("note") == "quote \" and \\ and \xc3\xa9");
  CHECK(file.read_as<double>("scalar") == std::vector<double>{3.25});
  CHECK(file.read_as<float>("empty").empty());
  CHECK(file.read_as<std::int32_t>("t.BOOL") == std::vector<std::int32_t>{0, 1, 0, 1, 0, 1});

  // The data section is covered exactly, as the reference reader requires.
  std::uint64_t covered = 0;
  for (const io::tensor_info& t : file.tensors()) covered += t.end - t.begin;
  CHECK(raw.size() == 8 + header_size + covered);

  io::write_safetensors(path, {io::make_tensor_to_write("only", {1}, scalar)});  // replaces the file
  CHECK(io::safetensors_file(path).tensors().size() == 1);
}

TEST_CASE("safetensors read_as converts widening and refuses what would lose values", "[io]") {
  const std::vector<double> f64 = {1.5, -2.0, 1e300};
  const std::vector<float> f32 = {0.1f, -3.0f};
  const std::vector<std::int64_t> i64 = {1, -5, std::int64_t{1} << 40};
  const std::vector<std::int32_t> i32 = {7, -8};
  const std::vector<std::int16_t> i16 = {-300};
  const std::vector<std::int8_t> i8 = {-128, 127};
  const std::vector<std::uint8_t> u8 = {255};
  const std::vector<float> halves = {1.0f, -0.5f, 61440.0f, std::ldexp(1.0f, -24), INFINITY};
  std::vector<std::uint16_t> f16, bf16;
  for (const float h : halves)
    f16.push_back(shardgraph::float_to_f16(h)), bf16.push_back(shardgraph::float_to_bf16(h));
  const std::vector<std::byte> f16_bytes = little_endian(f16), bf16_bytes = little_endian(bf16);

  const std::string path = temp_path("convert.safetensors");
  io::write_safetensors(path, {io::make_tensor_to_write("f64", {3}, f64),
                               io::make_tensor_to_write("f32", {2}, f32),
                               io::make_tensor_to_write("i64", {3}, i64),
                               io::make_tensor_to_write("i32", {2}, i32),
                               io::make_tensor_to_write("i16", {1}, i16),
                               io::make_tensor_to_write("i8", {2}, i8),
                               io::make_tensor_to_write("u8", {1, 1}, u8),
                               {"f16", st_dtype::f16, {5}, f16_bytes},
                               {"bf16", st_dtype::bf16, {5}, bf16_bytes}});
  const io::safetensors_file file(path);

  CHECK(file.read_as<double>("f64") == f64);
  CHECK(file.read_as<double>("f32") == std::vector<double>{0.1f, -3.0f});
  CHECK(file.read_as<float>("f32") == f32);
  CHECK(file.read_as<std::int64_t>("i64") == i64);
  CHECK(file.read_as<double>("i64") == std::vector<double>{1, -5, 1099511627776.0});
  CHECK(file.read_as<std::int32_t>("i32") == i32);
  CHECK(file.read_as<std::int64_t>("i16") == std::vector<std::int64_t>{-300});
  CHECK(file.read_as<std::int32_t>("i8") == std::vector<std::int32_t>{-128, 127});
  CHECK(file.read_as<float>("u8") == std::vector<float>{255.0f});
  CHECK(file.read_as<float>("f16") == halves);
  CHECK(file.read_as<double>("bf16") == std::vector<double>(halves.begin(), halves.end()));

  std::string message = error_of([&] { file.read_as<std::int64_t>("f32"); });
  CHECK(contains(message, path + ": tensor 'f32': cannot read F32 as an integer type"));
  message = error_of([&] { file.read_as<std::int32_t>("bf16"); });
  CHECK(contains(message, "cannot read BF16"));
  message = error_of([&] { file.read_as<std::int32_t>("i64"); });
  CHECK(contains(message, "tensor 'i64': element 2 of I64 (1099511627776) is outside the range"));
  message = error_of([&] { file.read_as<float>("f64"); });
  CHECK(contains(message, "tensor 'f64': element 2 of F64"));
}

TEST_CASE("safetensors refuses truncated files at every kind of length", "[io]") {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  const std::vector<std::byte> whole = safetensors_bytes(header, zeros(16));
  REQUIRE_NOTHROW(io::safetensors_file::from_bytes(whole, "bad.safetensors"));
  const std::size_t header_end = 8 + header.size();
  for (const std::size_t length :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, header_end - 1,
        header_end, header_end + 1, whole.size() - 1}) {
    const std::string message =
        parse_error({whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(length)});
    INFO("length " << length << ": " << message);
    CHECK(contains(message, "shardgraph: bad.safetensors: "));
    if (length < 8)
      CHECK(contains(message, "shorter than the 8-byte header length"));
    else if (length < header_end)
      CHECK(contains(message, "runs past the end of the file"));
    else
      CHECK(contains(message, "tensor 'w': data_offsets [0, 16] run past the end of the data section"));
  }
  const std::string path = temp_path("empty.safetensors");
  write_file(path, {});
  CHECK(contains(error_of([&] { io::safetensors_file file(path); }), path + ": the file is 0 bytes"));
}

TEST_CASE("safetensors refuses malformed headers, naming the file and the tensor", "[io]") {
  struct bad_case {
    std::string header;
    std::size_t data_bytes;
    std::string_view phrase;
  };
  // The header of one tensor "w" from its three fields, each given as JSON text.
  const auto w = [](std::string_view dtype, std::string_view shape, std::string_view offsets) {
    return R"({"w":{"dtype":)" + std::string(dtype) + R"(,"shape":)" + std::string(shape) +
           R"(,"data_offsets":)" + std::string(offsets) + "}}";
  };
  const std::string a_then_b = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const std::string b_in_a = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("b":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  const std::string twice = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                            R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  const bad_case cases[] = {
      {R"({"w":)", 0, "invalid JSON at byte 13"},
      {"[]", 0, "the header is an array, not a JSON object"},
      {R"({"w":3})", 0, "tensor 'w': its header entry is an integer"},
      {R"({"__metadata__":[]})", 0, R"("__metadata__" is an array)"},
      {R"({"__metadata__":{"k":1}})", 0, R"("__metadata__" entry "k" is an integer, not a string)"},
      {R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, R"(tensor 'w': "dtype" is missing)"},
      {R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, R"(tensor 'w': "shape" is missing)"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", 4, R"(tensor 'w': "data_offsets" is missing)"},
      {w("4", "[1]", "[0,4]"), 4, R"(tensor 'w': "dtype" is an integer, not a string)"},
      {w(R"("F8_E4M3")", "[1]", "[0,1]"), 1, R"(tensor 'w': unknown dtype "F8_E4M3")"},
      {w(R"("f32")", "[1]", "[0,4]"), 4, R"(unknown dtype "f32")"},
      {w(R"("F32")", "{}", "[0,4]"), 4, R"(tensor 'w': "shape" is an object, not an array)"},
      {w(R"("F32")", "[-1]", "[0,4]"), 4, "tensor 'w': shape (-1,) of F32 has a negative dimension"},
      {w(R"("F32")", "[2.5]", "[0,4]"), 4,
       "tensor 'w': its shape holds a non-integer number, not an integer"},
      {w(R"("U8")", "[4294967296,4294967296,2]", "[0,4]"), 4, "more bytes than 64 bits count"},
      {w(R"("F64")", "[2305843009213693952]", "[0,8]"), 8, "more bytes than 64 bits count"},
      {w(R"("F32")", "[1]", "[4,0]"), 4, "tensor 'w': data_offsets [4, 0] decrease"},
      {w(R"("F32")", "[1]", "[0]"), 4, "tensor 'w': data_offsets must be two non-negative integers"},
      {w(R"("F32")", "[1]", "[0,4,8]"), 8, "data_offsets must be two"},
      {w(R"("F32")", "[1]", "[-4,0]"), 4, "data_offsets must be two"},
      {w(R"("F32")", "[1]", R"([0,"4"])"), 4, "data_offsets must be two"},
      {w(R"("F32")", "[1]", "[0,4.0]"), 4, "data_offsets must be two"},
      {w(R"("F32")", "[1]", "[0,18446744073709551615]"), 4, "data_offsets must be two"},
      {w(R"("F32")", "[1]", "[0,1000]"), 4,
       "tensor 'w': data_offsets [0, 1000] run past the end of the data section, which has 4 bytes"},
      {w(R"("F32")", "[3]", "[0,8]"), 8,
       "tensor 'w': wrong dtype size: shape (3,) of F32 needs 12 bytes, but there are 8 (data_offsets [0, "
       "8])"},
      {w(R"("BF16")", "[2,2]", "[0,16]"), 16, "wrong dtype size"},
      {a_then_b, 12, "tensor 'b': its bytes [4, 12) overlap those of tensor 'a' [0, 8)"},
      {b_in_a, 16, "tensor 'a': its bytes [4, 8) overlap those of tensor 'b' [0, 16)"},
      {twice, 1, R"(duplicate key "a")"},
  };
  for (const auto& c : cases) {
    const std::string message = parse_error(safetensors_bytes(c.header, zeros(c.data_bytes)));
    INFO(c.header << "\n -> " << message);
    CHECK(contains(message, "shardgraph: bad.safetensors"));
    CHECK(contains(message, c.phrase));
  }

  const auto with_header_length = [](std::uint64_t n) {
    std::vector<std::byte> bytes = safetensors_bytes("{}");
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
    return bytes;
  };
  CHECK(contains(parse_error(with_header_length(std::uint64_t{1} << 63)),
            "the header length is 9223372036854775808 bytes, over the format's limit of 100000000"));
  CHECK(contains(parse_error(with_header_length(100'000'001)), "over the format's limit"));
  CHECK(contains(parse_error(with_header_length(3)), "the header length 3 runs past the end of the file"));
  CHECK(contains(parse_error(with_header_length(0)),
            "invalid JSON at byte 8: expected a value, found end of input"));
  CHECK(contains(parse_error(safetensors_bytes(std::string(100, ' ') + "{} x")),
            "invalid JSON at byte 111: unexpected 'x'"));
}

TEST_CASE("safetensors accepts holes, trailing bytes, empty tensors and an empty header", "[io]") {
  const std::string header = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[2,2]},)"
                             R"("b":{"dtype":"I8","shape":[2],"data_offsets":[8,10]}}   )";
  std::vector<std::byte> data = zeros(12);
  data[8] = std::byte{0xff};
  const auto file = io::safetensors_file::from_bytes(safetensors_bytes(header, data), "holes.safetensors");
  CHECK(file.read_as<std::int32_t>("b") == std::vector<std::int32_t>{-1, 0});
  CHECK(file.read_as<float>("z").empty());
  CHECK(io::safetensors_file::from_bytes(safetensors_bytes("{}"), "empty").tensors().empty());
}

TEST_CASE("safetensors names the file, the tensor and similar names when a tensor is missing", "[io]") {
  const std::vector<float> w(4);
  const std::string path = temp_path("names.safetensors");
  io::write_safetensors(path, {io::make_tensor_to_write("h.0.attn.c_attn.weight", {2, 2}, w),
                               io::make_tensor_to_write("h.0.attn.c_proj.weight", {2, 2}, w),
                               io::make_tensor_to_write("h.0.mlp.c_fc.weight", {2, 2}, w),
                               io::make_tensor_to_write("wte.weight", {2, 2}, w)});
  const io::safetensors_file file(path);
  const std::string message = error_of([&] { file.info("h.0.attn.c_atn.weight"); });
  CHECK(contains(message, "shardgraph: " + path + ": tensor 'h.0.attn.c_atn.weight': no such tensor among the 4"));
  CHECK(contains(message, "similar names: 'h.0.attn.c_attn.weight', 'h.0.attn.c_proj.weight'"));
  CHECK(contains(error_of([&] { file.bytes("nope"); }), "tensor 'nope'"));
  CHECK(contains(error_of([&] { file.read_as<float>("nope"); }), "tensor 'nope'"));
  CHECK(contains(error_of([] { io::safetensors_file missing(temp_path("missing.safetensors")); }),
            "missing.safetensors: cannot read the file"));
  CHECK(contains(error_of([] { io::safetensors_file directory(std::filesystem::temp_directory_path().string()); }),
            "not a regular file"));
}

TEST_CASE("write_safetensors refuses bad tensors before creating anything", "[io]") {
  const std::vector<float> six(6);
  const auto bytes = std::as_bytes(std::span(six));
  const std::string path = temp_path("refused.safetensors");
  struct bad_case {
    std::vector<io::tensor_to_write> tensors;
    std::string_view phrase;
  };
  const bad_case cases[] = {
      {{{"w", st_dtype::f32, {2, 2}, bytes}},
       "tensor 'w': wrong dtype size: shape (2, 2) of F32 needs 16 bytes, but there are 24"},
      {{{"w", st_dtype::f64, {2, 3}, bytes}}, "tensor 'w': wrong dtype size"},
      {{{"w", st_dtype::f32, {-2, -3}, bytes}}, "tensor 'w': shape (-2, -3) of F32 has a negative dimension"},
      {{{"w", st_dtype::f32, {6}, bytes}, {"w", st_dtype::f32, {6}, bytes}},
       "tensor 'w': two tensors have this name"},
      {{{"__metadata__", st_dtype::f32, {6}, bytes}}, "the name is empty, \"__metadata__\" or not UTF-8"},
      {{{"", st_dtype::f32, {6}, bytes}}, "the name is empty"},
      {{{"\xff", st_dtype::f32, {6}, bytes}}, "not UTF-8"},
  };
  for (const auto& c : cases) {
    const std::string message = error_of([&] { io::write_safetensors(path, c.tensors); });
    INFO(message);
    CHECK(contains(message, "shardgraph: " + path));
    CHECK(contains(message, c.phrase));
    CHECK_FALSE(std::filesystem::exists(path));
  }
  const std::string message =
      error_of([&] { io::write_safetensors(temp_path("no/such/dir/x.safetensors"), {}); });
  CHECK(contains(message, "cannot create"));
}

TEST_CASE("read_elements_as reads a run of a tensor and refuses one past its end", "[io][safetensors]") {
  const std::vector<float> w{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // (3, 4)
  const std::string path = temp_path("runs.safetensors");
  io::write_safetensors(path, {io::make_tensor_to_write("w", {3, 4}, w)});
  const io::safetensors_file file(path);
  std::vector<double> row(4);
  file.read_elements_as<double>("w", 4, 4, row.data());  // row 1
  CHECK(row == std::vector<double>{4, 5, 6, 7});
  std::vector<float> tail(3);
  file.read_elements_as<float>("w", 9, 3, tail.data());
  CHECK(tail == std::vector<float>{9, 10, 11});
  file.read_elements_as<float>("w", 12, 0, tail.data());  // an empty run at the end is fine
  const std::string error = error_of([&] { file.read_elements_as<float>("w", 10, 3, tail.data()); });
  CHECK(contains(error, "tensor 'w'"));
  CHECK(contains(error, "elements [10, 13) were asked for; the tensor has 12"));
}
