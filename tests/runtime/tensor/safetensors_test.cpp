#include "runtime/tensor/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "sim/error.h"

namespace ranksim::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Each test gets its own scratch directory (ctest may run tests in parallel processes).
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(RANKSIM_BINARY_DIR) / "scratch" /
           (std::string("safetensors_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  static void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  static std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
    in.seekg(0);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  }
  // A file laid out by hand from the format description: length, header, data.
  static std::string make_file(const std::string& header, const std::string& data, std::uint64_t length_field) {
    std::string out(8, '\0');
    std::memcpy(out.data(), &length_field, 8);  // little-endian host
    return out + header + data;
  }
  static std::string make_file(const std::string& header, const std::string& data) {
    return make_file(header, data, header.size());
  }
  std::vector<std::string> dir_entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

TEST_F(Safetensors, RoundTripsEveryDtypeBitExactly) {
  const float nan_payload = std::bit_cast<float>(0x7fc01234u);
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", Tensor::from_vector(std::vector<float>{1.5f, -0.0f, std::numeric_limits<float>::infinity(), nan_payload,
                                                     std::numeric_limits<float>::denorm_min(), 3e38f},
                                  {2, 3})},
      {"f64", Tensor::from_vector(std::vector<double>{0.1, -1e308, std::numeric_limits<double>::denorm_min()}, {3})},
      {"bf16", Tensor::from_vector(std::vector<BFloat16>{{0x3F80}, {0x7FC1}, {0x8001}, {0xFF80}}, {2, 2})},
      {"f16", Tensor::from_vector(std::vector<Half>{{0x3C00}, {0x7E01}, {0x0001}, {0x7BFF}}, {4, 1})},
      {"i64", Tensor::from_vector(std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), -1,
                                                            std::numeric_limits<std::int64_t>::max()},
                                  {3})},
      {"i32", Tensor::from_vector(std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 7}, {1, 2})},
      {"scalar", Tensor::full({}, 2.5, DType::bf16)},
      {"empty", Tensor::zeros({0, 4}, DType::f16)},
      {"strided", Tensor::arange(12, DType::i32).view({3, 4}).transpose(0, 1)},
      {"randn", Tensor::randn({17, 33}, 9, 0, 1, DType::bf16)},
  };
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"quote\"back\\slash", "line\nbreak\ttab\x01"}, {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"}};
  const std::string path = file("all.safetensors");
  save_safetensors(path, tensors, metadata);
  const SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.path, path);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(f.tensors[i].first, tensors[i].first);  // order kept
    EXPECT_TRUE(bitwise_equal(f.tensors[i].second, tensors[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(f.metadata, metadata);
  EXPECT_TRUE(f.contains("bf16"));
  EXPECT_EQ(f.at("i64").dtype(), DType::i64);
  EXPECT_THAT(dir_entries(), ::testing::ElementsAre("all.safetensors"));  // no temporary left
  try {
    (void)f.at("missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("no tensor 'missing'"));
  }
}

TEST_F(Safetensors, WritesTheDocumentedLayout) {
  const std::string path = file("layout.safetensors");
  save_safetensors(path,
                   {{"w", Tensor::from_vector(std::vector<float>{1, 2}, {2})},
                    {"b", Tensor::from_vector(std::vector<std::int32_t>{3}, {1})}},
                   {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ((8 + n) % 8, 0u);  // data 8-byte aligned
  ASSERT_EQ(bytes.size(), 8 + n + 12);
  std::string header = bytes.substr(8, n);
  header.erase(header.find_last_not_of(' ') + 1);
  EXPECT_EQ(header,
            "{\"__metadata__\":{\"k\":\"v\"},"
            "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]}}");
  float w[2];
  std::memcpy(w, bytes.data() + 8 + n, 8);
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[1], 2.0f);
}

TEST_F(Safetensors, ReadsHandWrittenFiles) {
  // Fields in another order, whitespace and escapes, tensors listed out of data order, a shape
  // with a zero, and a 0-d tensor: what other writers produce.
  const std::string header =
      "{ \"b\\u00e9\" : {\"data_offsets\": [4, 6], \"shape\": [], \"dtype\": \"BF16\"},\n"
      "  \"__metadata__\": {\"format\": \"pt\"},\n"
      "  \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},\n"
      "  \"z\": {\"dtype\": \"I64\", \"shape\": [0, 3], \"data_offsets\": [6, 6]} }   ";
  std::string data(6, '\0');
  const float one = 1.0f;
  std::memcpy(data.data(), &one, 4);
  data[4] = '\x80';  // bf16 0x3F80 little-endian
  data[5] = '\x3F';
  const std::string path = file("hand.safetensors");
  write_bytes(path, make_file(header, data));
  const SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.tensors[0].first, "a");  // data order
  EXPECT_EQ(f.tensors[1].first, "b\xc3\xa9");
  EXPECT_EQ(f.tensors[2].first, "z");
  EXPECT_EQ(f.at("a").item(), 1.0);
  EXPECT_EQ(f.at("b\xc3\xa9").dim(), 0);
  EXPECT_EQ(f.at("b\xc3\xa9").item(), 1.0);
  EXPECT_EQ(f.at("z").shape(), (Shape{0, 3}));
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

struct Corruption {
  const char* label;
  std::string bytes;
  const char* message;  // a phrase the error must contain
};

TEST_F(Safetensors, CorruptFilesAreClearErrors) {
  const std::string ok_entry = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  const std::string data8(8, '\x01');
  const std::vector<Corruption> cases = {
      {"empty file", "", "shorter than the 8-byte header length"},
      {"five bytes", std::string("\x10\0\0\0\0", 5), "shorter than the 8-byte header length"},
      {"header longer than file", make_file("{" + ok_entry + "}", data8, 1000), "header length 1000 exceeds"},
      {"absurd header length", make_file("{}", "", 0xffffffffffffffffull), "exceeds"},
      {"header not an object", make_file("[1, 2]", ""), "does not start with '{'"},
      {"truncated JSON", make_file("{\"t\":{\"dtype\":", ""), "bad JSON header"},
      {"trailing garbage", make_file("{} x", ""), "unexpected text after the JSON object"},
      {"bad escape", make_file("{\"a\\q\":1}", ""), "bad escape"},
      {"control char in string", make_file("{\"a\nb\":1}", ""), "control character"},
      {"lone surrogate", make_file("{\"\\ud800\":1}", ""), "unpaired surrogate"},
      {"deep nesting", make_file("{\"a\":" + std::string(100000, '['), ""), "nested more than 64"},
      {"unknown dtype", make_file("{\"t\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", data8),
       "dtype 'U8'"},
      {"missing offsets", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", data8), "lacks \"data_offsets\""},
      {"unknown field", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", data8),
       "unknown field 'x'"},
      {"negative shape", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data8),
       "non-negative integer"},
      {"fractional shape", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", data8),
       "non-negative integer"},
      {"huge shape",
       make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", data8),
       "too large"},
      {"shape/size mismatch", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data8),
       "needs 12 bytes"},
      {"begin after end", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", data8),
       "begin after end"},
      {"offsets past the data", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data8),
       "run past the 8 data bytes"},
      {"truncated data", make_file("{" + ok_entry + "}", "\x01\x02\x03"), "run past the 3 data bytes"},
      {"overlap",
       make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 data8),
       "overlap"},
      {"gap",
       make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[6,6]}}",
                 data8),
       "belong to no tensor"},
      {"uncovered tail", make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data8),
       "the last 4 data bytes belong to no tensor"},
      {"duplicate names", make_file("{" + ok_entry + "," + ok_entry + "}", data8 + data8),
       "names the tensor 't' twice"},
      {"metadata not strings", make_file("{\"__metadata__\":{\"k\":1}}", ""), "must be a string"},
      {"entry not an object", make_file("{\"t\":[1]}", ""), "must be an object"},
  };
  for (const Corruption& c : cases) {
    const std::string path = file("corrupt.safetensors");
    write_bytes(path, c.bytes);
    try {
      (void)load_safetensors(path);
      ADD_FAILURE() << c.label << ": loaded without an error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("safetensors file '" + path + "': ")) << c.label;
      EXPECT_THAT(e.what(), HasSubstr(c.message)) << c.label;
    }
  }
  EXPECT_THROW(load_safetensors(file("does-not-exist.safetensors")), Error);
  EXPECT_THROW(load_safetensors(dir_.string()), Error);  // a directory
}

// Every truncation and many single-byte corruptions of a valid file: an Error or a load, never a
// crash (the asan preset runs this too).
TEST_F(Safetensors, MutatedFilesNeverCrash) {
  const std::string good_path = file("good.safetensors");
  save_safetensors(good_path,
                   {{"a", Tensor::randn({3, 5}, 1, 0, 1, DType::bf16)}, {"b", Tensor::arange(4, DType::i64)}},
                   {{"m", "x"}});
  const std::string good = read_bytes(good_path);
  const std::string path = file("mutated.safetensors");
  int errors = 0, loads = 0;
  auto attempt = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    try {
      (void)load_safetensors(path);
      ++loads;
    } catch (const Error&) {
      ++errors;
    }
  };
  for (std::size_t n = 0; n < good.size(); ++n) attempt(good.substr(0, n));
  std::uint64_t state = 77;
  for (int i = 0; i < 3000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::string bytes = good;
    const std::size_t at = (state >> 33) % good.size();
    bytes[at] = static_cast<char>(state >> 25);
    attempt(bytes);
  }
  EXPECT_EQ(errors + loads, static_cast<int>(good.size()) + 3000);
  EXPECT_GE(errors, static_cast<int>(good.size()));  // every truncation is an error
}

TEST_F(Safetensors, WritingIsAtomic) {
  const std::string path = file("model.safetensors");
  save_safetensors(path, {{"x", Tensor::ones({2})}});
  const std::string before = read_bytes(path);
  // A failure before any byte is written leaves the old file as it was and no temporary.
  EXPECT_THROW(save_safetensors(path, {{"x", Tensor::ones({2})}, {"x", Tensor::ones({3})}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"s", Tensor::shape_only({2})}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", Tensor::ones({2})}}), Error);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_THAT(dir_entries(), ::testing::ElementsAre("model.safetensors"));
  // An unwritable location is an Error naming the path.
  try {
    save_safetensors(file("no/such/dir/x.safetensors"), {{"x", Tensor::ones({2})}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no/such/dir/x.safetensors"));
  }
  // A successful save replaces the file whole.
  save_safetensors(path, {{"y", Tensor::zeros({5}, DType::f64)}});
  const SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].first, "y");
  EXPECT_THAT(dir_entries(), ::testing::ElementsAre("model.safetensors"));
}

}  // namespace
}  // namespace ranksim::runtime
