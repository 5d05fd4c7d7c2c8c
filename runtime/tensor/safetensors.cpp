#include "runtime/tensor/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "runtime/tensor/cost.h"
#include "sim/error.h"
#include "sim/io.h"

namespace ranksim::runtime {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

namespace {

// --- A small JSON reader, enough for safetensors headers ------------------------------------

struct JsonMember;

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  std::size_t offset = 0;  // where the value starts in the header, for messages
  bool boolean = false;
  std::string text;  // a string's decoded value, or a number's literal
  std::vector<Json> items;
  std::vector<JsonMember> members;  // in header order
};

// A member of an object (a struct rather than a std::pair: Json is incomplete where Json names
// its members, and a vector of an incomplete struct is allowed where a pair of one is not).
struct JsonMember {
  std::string key;
  Json value;
};

const char* kind_name(Json::Kind k) {
  switch (k) {
    case Json::Kind::kNull:
      return "null";
    case Json::Kind::kBool:
      return "a boolean";
    case Json::Kind::kNumber:
      return "a number";
    case Json::Kind::kString:
      return "a string";
    case Json::Kind::kArray:
      return "an array";
    case Json::Kind::kObject:
      return "an object";
  }
  return "?";
}

struct JsonError {
  std::string what;
};

// Recursive descent over the header text. Throws JsonError (turned into an Error that names the
// file by the caller). Depth is bounded so a hostile header cannot exhaust the stack.
class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}

  Json parse_document() {
    skip_ws();
    Json v = value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected text after the JSON object");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void error(const std::string& what) const {
    throw JsonError{"bad JSON header at byte " + std::to_string(pos_ + 8) + " of the file: " + what};
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void expect(char c) {
    if (pos_ >= s_.size()) error(std::string("unexpected end, expected '") + c + "'");
    if (s_[pos_] != c) error(std::string("expected '") + c + "'");
    ++pos_;
  }
  void literal(const char* word) {
    const std::size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) != 0) error("unexpected character");
    pos_ += n;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) error("nested more than 64 levels deep");
    Json v;
    v.offset = pos_;
    if (pos_ >= s_.size()) error("unexpected end of header");
    const char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::Kind::kObject;
      ++pos_;
      skip_ws();
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_ws();
        if (peek() != '"') error("expected a string key");
        std::string key = string_body();
        skip_ws();
        expect(':');
        skip_ws();
        v.members.push_back(JsonMember{std::move(key), value(depth + 1)});
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::kArray;
      ++pos_;
      skip_ws();
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_ws();
        v.items.push_back(value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::kString;
      v.text = string_body();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Kind::kNumber;
      v.text = number();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.kind = Json::Kind::kBool;
      v.boolean = c == 't';
      literal(v.boolean ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    error("unexpected character");
  }

  std::string number() {
    const std::size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (!std::isdigit(static_cast<unsigned char>(peek()))) error("malformed number");
    if (peek() == '0') {
      ++pos_;
    } else {
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    if (peek() == '.') {
      ++pos_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) error("malformed number");
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) error("malformed number");
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      unsigned d = 0;
      if (c >= '0' && c <= '9') {
        d = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<unsigned>(c - 'A' + 10);
      } else {
        error("bad \\u escape");
      }
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string_body() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) error("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) error("control character inside a string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate must pair with a low one
            if (peek() != '\\') error("unpaired surrogate in \\u escape");
            ++pos_;
            if (peek() != 'u') error("unpaired surrogate in \\u escape");
            ++pos_;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) error("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            error("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          error("bad escape in string");
      }
    }
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

// --- JSON writing -----------------------------------------------------------------------------

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 0xF];
    } else {
      out += c;  // UTF-8 bytes pass through
    }
  }
  out += '"';
}

// --- File helpers -----------------------------------------------------------------------------

std::string prefix(const std::string& path) { return "safetensors file '" + path + "': "; }

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw Error(prefix(path) + what); }

std::string errno_text() { return std::strerror(errno); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void read_exact(const std::string& path, int fd, void* dst, std::size_t n, std::uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, "read failed: " + errno_text());
    if (got == 0) fail(path, "the file ended early (truncated while being read)");
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

bool write_all(int fd, const void* src, std::size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// --- Header interpretation --------------------------------------------------------------------

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;
  std::size_t order;  // position in the header
};

std::uint64_t as_uint(const std::string& path, const Json& v, const std::string& what) {
  if (v.kind != Json::Kind::kNumber) {
    fail(path, what + " must be a non-negative integer, not " + kind_name(v.kind));
  }
  const std::string& t = v.text;
  if (t.empty() || t[0] == '-' || t.find_first_of(".eE") != std::string::npos) {
    fail(path, what + " must be a non-negative integer, not " + t);
  }
  std::uint64_t x = 0;
  for (const char c : t) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (x > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
      fail(path, what + " " + t + " is too large");
    }
    x = x * 10 + d;
  }
  return x;
}

Entry parse_entry(const std::string& path, const std::string& name, const Json& v, std::size_t order) {
  const std::string who = "tensor '" + name + "'";
  if (v.kind != Json::Kind::kObject) fail(path, who + " must be an object, not " + kind_name(v.kind));
  const Json* dtype = nullptr;
  const Json* shape = nullptr;
  const Json* offsets = nullptr;
  for (const auto& [key, field] : v.members) {
    const Json** slot = key == "dtype" ? &dtype : key == "shape" ? &shape : key == "data_offsets" ? &offsets : nullptr;
    if (slot == nullptr) fail(path, who + " has an unknown field '" + key + "'");
    if (*slot != nullptr) fail(path, who + " has the field '" + key + "' twice");
    *slot = &field;
  }
  if (!dtype || !shape || !offsets) {
    fail(path, who + " lacks " + std::string(!dtype ? "\"dtype\"" : !shape ? "\"shape\"" : "\"data_offsets\""));
  }
  Entry e{name, DType::f32, {}, 0, 0, order};
  if (dtype->kind != Json::Kind::kString) fail(path, who + ": dtype must be a string");
  const auto d = dtype_from_safetensors_name(dtype->text);
  if (!d) {
    fail(path, who + " has dtype '" + dtype->text +
                   "', which ranksim does not read (it reads F32, F64, BF16, F16, I64, I32)");
  }
  e.dtype = *d;
  if (shape->kind != Json::Kind::kArray) fail(path, who + ": shape must be an array");
  // extent: the product of the sizes other than 0, which a tensor's strides reach even when it is
  // empty ([0, 2^62, 2^62] has no element but a stride of 2^124); numel <= extent.
  std::uint64_t numel = 1, extent = 1;
  for (const Json& s : shape->items) {
    const std::uint64_t n = as_uint(path, s, who + ": a shape entry");
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        (n != 0 && extent > (std::uint64_t{1} << 60) / n)) {
      fail(path, who + " has a shape too large to allocate (its sizes other than 0 multiply past 2^60)");
    }
    if (n != 0) extent *= n;
    numel *= n;
    e.shape.push_back(static_cast<std::int64_t>(n));
  }
  if (offsets->kind != Json::Kind::kArray || offsets->items.size() != 2) {
    fail(path, who + ": data_offsets must be an array [begin, end]");
  }
  e.begin = as_uint(path, offsets->items[0], who + ": data_offsets begin");
  e.end = as_uint(path, offsets->items[1], who + ": data_offsets end");
  if (e.begin > e.end) {
    fail(path, who + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   "] with begin after end");
  }
  const std::uint64_t want = numel * dtype_size(e.dtype);
  if (e.end - e.begin != want) {
    fail(path, who + " is " + std::string(safetensors_name(e.dtype)) + shape_str(e.shape) + ", which needs " +
                   std::to_string(want) + " bytes, but its data_offsets [" + std::to_string(e.begin) + ", " +
                   std::to_string(e.end) + "] span " + std::to_string(e.end - e.begin));
  }
  return e;
}

}  // namespace

// --- Public API -------------------------------------------------------------------------------

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& nt) { return nt.first == name; });
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  fail(path, "has no tensor '" + name + "'");
}

SafetensorsFile load_safetensors(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8) {
    fail(path, "is truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  }
  std::uint64_t header_len = 0;
  read_exact(path, fd.get(), &header_len, 8, 0);
  if (header_len > file_size - 8) {
    fail(path, "header length " + std::to_string(header_len) + " exceeds the " + std::to_string(file_size - 8) +
                   " bytes after it (truncated, or not a safetensors file)");
  }
  std::string header(static_cast<std::size_t>(header_len), '\0');
  read_exact(path, fd.get(), header.data(), header.size(), 8);
  if (header.empty() || header[0] != '{') fail(path, "header does not start with '{'");

  Json root;
  try {
    root = JsonParser(header).parse_document();
  } catch (const JsonError& e) {
    fail(path, e.what);
  }
  if (root.kind != Json::Kind::kObject) fail(path, "header is not a JSON object");

  SafetensorsFile file;
  file.path = path;
  std::vector<Entry> entries;
  std::set<std::string> names;
  for (const auto& [name, v] : root.members) {
    if (!names.insert(name).second) fail(path, "names the tensor '" + name + "' twice");
    if (name == "__metadata__") {
      if (v.kind != Json::Kind::kObject) fail(path, "__metadata__ must be an object of strings");
      for (const auto& [k, mv] : v.members) {
        if (mv.kind != Json::Kind::kString) {
          fail(path, "__metadata__ entry '" + k + "' must be a string, not " + kind_name(mv.kind));
        }
        if (!file.metadata.emplace(k, mv.text).second) {
          fail(path, "__metadata__ has the key '" + k + "' twice");
        }
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, v, entries.size()));
  }

  // The byte ranges must tile the data section exactly: sorted by begin, each starting where the
  // previous ended, the last ending at the end of the file.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = file_size - data_start;
  std::uint64_t cursor = 0;
  for (const Entry& e : entries) {
    const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin < cursor) {
      fail(path, "tensor '" + e.name + "' data_offsets " + range + " overlap the previous tensor, which ends at " +
                     std::to_string(cursor));
    }
    if (e.begin > cursor) {
      fail(path, "bytes [" + std::to_string(cursor) + ", " + std::to_string(e.begin) +
                     ") of the data belong to no tensor (before tensor '" + e.name + "')");
    }
    if (e.end > data_size) {
      fail(path, "tensor '" + e.name + "' data_offsets " + range + " run past the " + std::to_string(data_size) +
                     " data bytes in the file (truncated?)");
    }
    cursor = e.end;
  }
  if (cursor != data_size) {
    fail(path, "the last " + std::to_string(data_size - cursor) + " data bytes belong to no tensor");
  }

  for (const Entry& e : entries) {
    Tensor t = Tensor::zeros(e.shape, e.dtype);
    read_exact(path, fd.get(), t.raw_data(), static_cast<std::size_t>(e.end - e.begin), data_start + e.begin);
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> data;
  data.reserve(tensors.size());
  std::set<std::string> names;
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      append_json_string(header, k);
      header += ':';
      append_json_string(header, v);
    }
    header += '}';
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") fail(path, "'__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(name).second) fail(path, "cannot save two tensors named '" + name + "'");
    if (!t.has_data()) {
      fail(path, "cannot save tensor '" + name + "' (" + t.str() + "): it has no data");
    }
    {
      ScopedCostSink quiet(nullptr);  // file I/O is not a device op
      data.push_back(t.contiguous());
    }
    if (header.size() > 1) header += ',';
    append_json_string(header, name);
    header += ":{\"dtype\":\"";
    header += safetensors_name(t.dtype());
    header += "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape().size(); ++i) {
      if (i) header += ',';
      header += std::to_string(t.shape()[i]);
    }
    const std::uint64_t end = offset + t.nbytes();
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += '}';
  // Pad with spaces (valid JSON whitespace) so that the data starts 8-byte aligned.
  while ((8 + header.size()) % 8 != 0) header += ' ';

  // Written whole or not at all (sim/io.h): a temporary beside the target, renamed over it when
  // complete, removed on failure and on SIGINT/SIGTERM; links are written through, and a device
  // such as /dev/null is written directly.
  std::optional<sim::AtomicOutput> file;
  try {
    file.emplace(path);
  } catch (const Error& e) {
    fail(path, e.what());
  }
  const int raw_fd = ::open(file->write_path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (raw_fd < 0) fail(path, "cannot open it for writing: " + errno_text());
  Fd fd(raw_fd);
  auto abandon = [&](const std::string& what) {
    const std::string reason = what + ": " + errno_text();
    ::close(fd.release());
    fail(path, reason + " (nothing was written)");
  };
  const std::uint64_t header_len = header.size();
  if (!write_all(fd.get(), &header_len, 8) || !write_all(fd.get(), header.data(), header.size())) {
    abandon("write failed");
  }
  for (const Tensor& t : data) {
    if (t.nbytes() && !write_all(fd.get(), t.raw_data(), t.nbytes())) abandon("write failed");
  }
  if (!file->direct() && ::fsync(fd.get()) != 0) abandon("fsync failed");
  if (::close(fd.release()) != 0) fail(path, "close failed: " + errno_text() + " (nothing was written)");
  try {
    file->commit();
  } catch (const Error& e) {
    fail(path, e.what());
  }
}

}  // namespace ranksim::runtime
