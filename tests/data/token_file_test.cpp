#include "shardgraph/data/token_file.hpp"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.hpp"

namespace data = shardgraph::data;
using shardgraph::testing::ContainsSubstring;
using shardgraph::testing::error_of;

namespace {

// A fresh directory per process, so that concurrent test runs do not meet; removed at exit.
std::string temp_path(const std::string& file) {
  static const struct scratch_directory {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 ("shardgraph-data-token-file-test-" + std::to_string(::getpid()));
    scratch_directory() { std::filesystem::create_directories(path); }
    ~scratch_directory() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } directory;
  return (directory.path / file).string();
}

// A token file as the format describes it, byte by byte: 256 little-endian int32, then the tokens.
std::vector<std::byte> token_file_bytes(std::int32_t magic, std::int32_t version, std::int32_t count,
                                        const std::vector<std::uint32_t>& tokens, int width) {
  std::vector<std::byte> out;
  auto put = [&](std::uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  };
  put(static_cast<std::uint32_t>(magic), 4);
  put(static_cast<std::uint32_t>(version), 4);
  put(static_cast<std::uint32_t>(count), 4);
  out.resize(1024);
  for (auto t : tokens) put(t, width);
  return out;
}

void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) out[i] = static_cast<std::byte>(chars[i]);
  return out;
}

// The message of opening `bytes` written to a file called `name`, and that file's path.
struct open_result {
  std::string path, message;
};
open_result open_bytes(const std::string& name, const std::vector<std::byte>& bytes,
                       std::int64_t vocab = 50257) {
  const std::string path = temp_path(name);
  write_bytes(path, bytes);
  return {path, error_of([&] { data::token_file file(path, vocab); })};
}

}  // namespace

TEST_CASE("token_file writes and reads version 1 (uint16) as llm.c lays it out", "[data]") {
  const std::vector<std::int64_t> tokens = {0, 1, 50256, 65535, 258, 7};
  const std::string path = temp_path("v1.bin");
  data::write_token_file(path, tokens, 1);

  std::vector<std::uint32_t> as_u32(tokens.begin(), tokens.end());
  CHECK(read_bytes(path) == token_file_bytes(20240520, 1, 6, as_u32, 2));

  const data::token_file file(path, 65536);
  CHECK(file.version() == 1);
  CHECK(file.vocab_size() == 65536);
  CHECK(file.path() == path);
  REQUIRE(file.size() == 6);
  for (std::int64_t i = 0; i < file.size(); ++i) CHECK(file.token(i) == tokens[static_cast<std::size_t>(i)]);
}

TEST_CASE("token_file writes and reads version 2 (uint32), for vocabularies above 65535", "[data]") {
  const std::vector<std::int64_t> tokens = {65536, 0, 151935, 4294967295ll, 3};
  const std::string path = temp_path("v2.bin");
  data::write_token_file(path, tokens, 2);

  std::vector<std::uint32_t> as_u32(tokens.begin(), tokens.end());
  CHECK(read_bytes(path) == token_file_bytes(20240520, 2, 5, as_u32, 4));

  const data::token_file file(path, 4294967296ll);
  CHECK(file.version() == 2);
  REQUIRE(file.size() == 5);
  for (std::int64_t i = 0; i < file.size(); ++i) CHECK(file.token(i) == tokens[static_cast<std::size_t>(i)]);
}

TEST_CASE("token_file holds zero tokens, and a moved file still reads", "[data]") {
  const std::string empty = temp_path("empty.bin");
  data::write_token_file(empty, {}, 1);
  CHECK(data::token_file(empty, 10).size() == 0);

  const std::string path = temp_path("moved.bin");
  data::write_token_file(path, std::vector<std::int64_t>{4, 5, 6}, 1);
  data::token_file first(path, 10);
  data::token_file moved(std::move(first));
  CHECK(moved.token(2) == 6);
}

TEST_CASE("token_file names the file and the byte offset of every malformed part", "[data]") {
  const std::vector<std::uint32_t> five = {1, 2, 3, 4, 5};

  SECTION("a header cut short") {
    auto whole = token_file_bytes(20240520, 1, 5, five, 2);
    whole.resize(10);
    const auto r = open_bytes("short_header.bin", whole);
    CHECK_THAT(r.message, ContainsSubstring("shardgraph: " + r.path +
                                            ": byte 10: the file ends inside the 1024-byte header"));
  }
  SECTION("an empty file") {
    const auto r = open_bytes("zero_bytes.bin", {});
    CHECK_THAT(r.message, ContainsSubstring(r.path + ": byte 0: the file ends inside the 1024-byte header"));
  }
  SECTION("a body cut short") {
    auto whole = token_file_bytes(20240520, 1, 5, five, 2);
    whole.resize(whole.size() - 2);
    const auto r = open_bytes("short_body.bin", whole);
    CHECK_THAT(r.message, ContainsSubstring(r.path + ": byte 1032: the file ends early"));
    CHECK_THAT(r.message, ContainsSubstring("promises 5 tokens of 2 bytes, 1034 bytes in all"));
    CHECK_THAT(r.message, ContainsSubstring("truncated"));
  }
  SECTION("trailing bytes") {
    auto whole = token_file_bytes(20240520, 2, 5, five, 4);
    whole.resize(whole.size() + 3);
    const auto r = open_bytes("trailing.bin", whole);
    CHECK_THAT(r.message, ContainsSubstring(r.path + ": byte 1044: 3 trailing bytes after the last token"));
  }
  SECTION("a wrong magic number, such as a headerless nanoGPT file") {
    std::vector<std::byte> raw(2048, std::byte{1});
    const auto r = open_bytes("raw_uint16.bin", raw);
    CHECK_THAT(r.message, ContainsSubstring(r.path + ": byte 0: the magic number is 16843009, not 20240520"));
    CHECK_THAT(r.message, ContainsSubstring("write_token_file"));
  }
  SECTION("an unknown version") {
    const auto r = open_bytes("version3.bin", token_file_bytes(20240520, 3, 5, five, 2));
    CHECK_THAT(r.message,
               ContainsSubstring(r.path + ": byte 4: the version is 3, not 1 (uint16 tokens) or 2"));
  }
  SECTION("a negative token count") {
    const auto r = open_bytes("negative.bin", token_file_bytes(20240520, 1, -1, {}, 2));
    CHECK_THAT(r.message, ContainsSubstring(r.path + ": byte 8: the token count is -1"));
  }
  SECTION("a token id outside the vocabulary: the first one is reported") {
    const auto r =
        open_bytes("big_id.bin", token_file_bytes(20240520, 1, 5, {1, 2, 60000, 9, 61000}, 2), 50257);
    CHECK_THAT(r.message, ContainsSubstring(
                              r.path + ": byte 1028: token 2 is 60000, not below the vocabulary size 50257"));
    CHECK_THAT(r.message, ContainsSubstring("vocab size of the model"));
    CHECK_THAT(r.message, ContainsSubstring("tokenizer"));
  }
  SECTION("a version 2 id outside the vocabulary") {
    const auto r =
        open_bytes("big_id2.bin", token_file_bytes(20240520, 2, 5, {1, 2, 3, 4, 4000000000u}, 4), 100000);
    CHECK_THAT(r.message, ContainsSubstring(r.path + ": byte 1040: token 4 is 4000000000"));
  }
  SECTION("the same file opens with a vocabulary that covers it") {
    const auto r =
        open_bytes("fits.bin", token_file_bytes(20240520, 1, 5, {1, 2, 60000, 9, 61000}, 2), 61001);
    CHECK(r.message == "(no error)");
  }
}

TEST_CASE("token_file rejects a missing file, a bad vocab size and reads out of range", "[data]") {
  const std::string missing = temp_path("missing.bin");
  CHECK_THAT(error_of([&] { data::token_file file(missing, 10); }),
             ContainsSubstring(missing + ": cannot read the file"));

  const std::string path = temp_path("three.bin");
  data::write_token_file(path, std::vector<std::int64_t>{1, 2, 3}, 1);
  CHECK_THAT(error_of([&] { data::token_file file(path, 0); }),
             ContainsSubstring("vocab_size is 0, not positive"));
  const data::token_file file(path, 10);
  CHECK_THAT(error_of([&] { (void)file.token(3); }),
             ContainsSubstring("token 3 is out of range: the file holds 3 tokens"));
  CHECK_THAT(error_of([&] { (void)file.token(-1); }), ContainsSubstring("token -1 is out of range"));
}

TEST_CASE("write_token_file checks before it creates the file", "[data]") {
  const std::string path = temp_path("never.bin");
  CHECK_THAT(error_of([&] { data::write_token_file(path, std::vector<std::int64_t>{1}, 3); }),
             ContainsSubstring(path + ": token file version 3 is unknown"));
  CHECK_THAT(error_of([&] {
               data::write_token_file(path, std::vector<std::int64_t>{1, 65536}, 1);
             }),
             ContainsSubstring(path + ": token 1 is 65536, outside [0, 65535] of version 1. Use version 2"));
  CHECK_THAT(error_of([&] { data::write_token_file(path, std::vector<std::int64_t>{-1}, 2); }),
             ContainsSubstring("token 0 is -1, outside [0, 4294967295]"));
  CHECK_THAT(error_of([&] { data::write_token_file(path, std::vector<std::int64_t>{4294967296ll}, 2); }),
             ContainsSubstring("token 0 is 4294967296"));
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    CHECK(entry.path().filename().string().rfind("never.bin", 0) == std::string::npos);  // nor a temporary
}
