// params_test — MXNet 1.x NDArray list files (.params): NDArray::Save/Load/SaveToBytes/LoadFromBytes.
//
// What is checked:
//   - round trips through a file and through bytes (every dtype, named and unnamed lists, 0-d, zero-size,
//     none, large arrays, views), and that a failed save leaves no file behind;
//   - files assembled byte by byte here from the documented layout (formats.md §1), with
//     V2, V3, V1 and legacy 0.x records, independently of troupe's writer;
//   - files written by real MXNet 1.9.1 (tests/tensor/data, made by make_reference.py): their content, and that
//     troupe writes the very same bytes for the same arrays;
//   - damaged input: every header field made bad in turn, truncation at every offset, trailing bytes and
//     random mutations. Each must throw troupe::Error naming the source and the byte offset, allocate no
//     tensor memory, and never crash or hang.
// Runs on the default engine (Engine::Get()); one test loads onto a naive engine of its own.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "actors/runtime.h"
#include "tensor/ndarray.h"
#include "tensor/storage.h"
#include "tests/common/test_params.h"

#ifndef TROUPE_TEST_DATA_DIR
#define TROUPE_TEST_DATA_DIR "tests/tensor/data"
#endif

namespace troupe {
namespace {

// ---- helpers -----------------------------------------------------------------------------------------

// Builds little-endian bytes by hand (independent of troupe's writer) and remembers where named fields
// start, so corruption tests know the offsets.
class Bytes {
 public:
  Bytes& U32(std::uint32_t v) { return Le(v, 4); }
  Bytes& I32(std::int32_t v) { return Le(static_cast<std::uint32_t>(v), 4); }
  Bytes& U64(std::uint64_t v) { return Le(v, 8); }
  Bytes& I64(std::int64_t v) { return Le(static_cast<std::uint64_t>(v), 8); }
  Bytes& F32(float v) {
    std::uint32_t x;
    std::memcpy(&x, &v, 4);
    return U32(x);
  }
  Bytes& F64(double v) {
    std::uint64_t x;
    std::memcpy(&x, &v, 8);
    return U64(x);
  }
  Bytes& U8(std::uint8_t v) { return Le(v, 1); }
  Bytes& Str(const std::string& s) {
    U64(s.size());
    out_ += s;
    return *this;
  }
  // Records the offset of the field written next under `name`.
  Bytes& At(const std::string& name) {
    fields_.emplace_back(name, out_.size());
    return *this;
  }
  std::size_t Offset(const std::string& name) const {
    for (const auto& [n, at] : fields_) {
      if (n == name) return at;
    }
    ADD_FAILURE() << "no field " << name;
    return 0;
  }
  const std::string& str() const { return out_; }

 private:
  Bytes& Le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
  std::vector<std::pair<std::string, std::size_t>> fields_;
};

constexpr std::uint32_t kV1 = 0xF993FAC8, kV2 = 0xF993FAC9, kV3 = 0xF993FACA;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// The raw bytes of an array, read back through the public API.
std::string HostBytes(const NDArray& a) {
  std::string out(a.Bytes(), '\0');
  if (!out.empty()) a.SyncCopyToCPU(out.data(), out.size());
  return out;
}

std::string DataPath(const std::string& name) { return std::string(TROUPE_TEST_DATA_DIR) + "/" + name; }

std::uint64_t CpuAllocs() { return Storage::Get()->Stats(Context::CPU()).allocs; }

// A fresh directory for one test, removed with its files afterwards.
class ParamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "troupe_params_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl << ": " << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : ListDir()) ::unlink((dir_ + "/" + f).c_str());
    ::rmdir(dir_.c_str());
  }
  std::vector<std::string> ListDir() const {
    std::vector<std::string> files;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) files.emplace_back(e->d_name);
      }
      ::closedir(d);
    }
    return files;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// Loads `bytes` and expects a troupe::Error whose message names the source and a byte offset (and
// `offset` exactly, and `needle`, when given), without allocating any tensor memory.
void ExpectLoadError(const std::string& bytes, const std::string& what, std::optional<std::size_t> offset = {},
                     const std::string& needle = "") {
  SCOPED_TRACE(what);
  const std::string source = "damaged<" + what + ">";
  std::vector<NDArray> arrays = {NDArray::FromVector<float>({1.f}, {1})};
  std::vector<std::string> names = {"kept"};
  const std::uint64_t allocs = CpuAllocs();
  try {
    NDArray::LoadFromBytes(bytes.data(), bytes.size(), source, &arrays, &names);
    ADD_FAILURE() << "loaded without an error";
    return;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(source), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
    if (offset) {
      EXPECT_NE(msg.find("byte offset " + std::to_string(*offset)), std::string::npos) << msg;
    }
    if (!needle.empty()) {
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(CpuAllocs(), allocs) << "a rejected file allocated tensor memory";
  // Outputs are untouched on failure.
  ASSERT_EQ(arrays.size(), 1u);
  EXPECT_EQ(arrays[0].shape(), TShape({1}));
  EXPECT_EQ(names, std::vector<std::string>{"kept"});
}

// ---- expected content of the MXNet reference files -------------------------------------------------

struct ExpectedArray {
  std::string name;
  DType dtype;
  TShape shape;
  std::vector<std::string> values;
};

struct ExpectedFile {
  bool named = false;
  std::vector<ExpectedArray> arrays;
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    if (named) {
      for (const auto& a : arrays) n.push_back(a.name);
    }
    return n;
  }
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// Parses make_reference.py's <name>.expected.txt.
ExpectedFile ReadExpected(const std::string& name) {
  ExpectedFile f;
  std::istringstream in(ReadFile(DataPath(name)));
  std::string line;
  bool header = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      EXPECT_TRUE(line == "dict" || line == "list") << line;
      f.named = line == "dict";
      header = true;
      continue;
    }
    const std::vector<std::string> cols = Split(line, '\t');
    EXPECT_EQ(cols.size(), 4u) << line;
    if (cols.size() != 4) continue;
    ExpectedArray a;
    a.name = cols[0];
    a.dtype = DTypeFromName(cols[1]);
    std::vector<std::int64_t> dims;
    for (const std::string& d : Split(cols[2], ',')) {
      if (!d.empty()) dims.push_back(std::stoll(d));
    }
    a.shape = TShape(dims);
    std::istringstream vs(cols[3]);
    for (std::string v; vs >> v;) a.values.push_back(v);
    EXPECT_EQ(static_cast<std::int64_t>(a.values.size()), a.shape.Size()) << line;
    f.arrays.push_back(std::move(a));
  }
  EXPECT_TRUE(header) << name << " has no dict/list line";
  return f;
}

// The raw bytes the expected values make in `dtype` (decimal text to the element type, exactly).
std::string ExpectedBytes(const ExpectedArray& a) {
  std::string out;
  DTypeSwitch(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (const std::string& s : a.values) {
      T v;
      if constexpr (std::is_same_v<T, bool>) {
        v = std::stoi(s) != 0;
      } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
        v = static_cast<T>(std::strtoll(s.c_str(), nullptr, 10));
      } else if constexpr (std::is_integral_v<T>) {
        v = static_cast<T>(std::strtoull(s.c_str(), nullptr, 10));
      } else if constexpr (std::is_same_v<T, double>) {
        v = std::strtod(s.c_str(), nullptr);
      } else {
        v = T(static_cast<float>(std::strtod(s.c_str(), nullptr)));
      }
      out.append(reinterpret_cast<const char*>(&v), sizeof(T));
    }
  });
  return out;
}

NDArray MakeArray(const ExpectedArray& a) {
  NDArray arr(a.shape, Context::CPU(), a.dtype);
  const std::string bytes = ExpectedBytes(a);
  if (!bytes.empty()) arr.SyncCopyFromCPU(bytes.data(), bytes.size());
  return arr;
}

void ExpectMatches(const ExpectedFile& expected, const std::vector<NDArray>& arrays,
                   const std::vector<std::string>& names) {
  ASSERT_EQ(arrays.size(), expected.arrays.size());
  EXPECT_EQ(names, expected.names());
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const ExpectedArray& e = expected.arrays[i];
    SCOPED_TRACE("array " + std::to_string(i) + " " + e.name);
    ASSERT_FALSE(arrays[i].is_none());
    EXPECT_EQ(arrays[i].shape(), e.shape) << arrays[i].shape().ToString();
    EXPECT_EQ(arrays[i].dtype(), e.dtype) << DTypeName(arrays[i].dtype());
    EXPECT_EQ(arrays[i].ctx(), Context::CPU());
    EXPECT_EQ(HostBytes(arrays[i]), ExpectedBytes(e));
  }
}

// ---- round trips -----------------------------------------------------------------------------------

// FromVector needs data(), which std::vector<bool> lacks.
NDArray BoolArray(std::initializer_list<bool> values, const TShape& shape) {
  NDArray a(shape, Context::CPU(), DType::kBool);
  const std::vector<std::uint8_t> bytes(values.begin(), values.end());
  a.SyncCopyFromCPU(bytes.data(), bytes.size());
  return a;
}

// One array of every dtype troupe supports, with values that exercise the type's range.
std::vector<NDArray> AllDTypes() {
  return {
      NDArray::FromVector<float>({1.5f, -2.25f, 0.f, std::numeric_limits<float>::infinity(), 1e-38f, 3e38f}, {2, 3}),
      NDArray::FromVector<double>({1.0 / 3.0, -1e300, 5e-324}, {3}),
      NDArray::FromVector<half_t>({half_t(1.f), half_t(-0.5f), half_t(65504.f), half_t(6e-8f)}, {2, 1, 2}),
      NDArray::FromVector<std::uint8_t>({0, 1, 128, 255}, {4}),
      NDArray::FromVector<std::int32_t>(
          {std::numeric_limits<std::int32_t>::min(), -1, 7, std::numeric_limits<std::int32_t>::max()}, {1, 4}),
      NDArray::FromVector<std::int8_t>({-128, 0, 127}, {3, 1}),
      NDArray::FromVector<std::int64_t>({std::numeric_limits<std::int64_t>::min(), (std::int64_t{1} << 62) + 1}, {2}),
      BoolArray({true, false, true, true}, {2, 2}),
      NDArray::FromVector<bf16_t>({bf16_t(1.5f), bf16_t(-2.f), bf16_t(3.25f)}, {3}),
      NDArray::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 1, 2, 1, 2, 1}),  // kMaxDims dims
  };
}

void ExpectSameArrays(const std::vector<NDArray>& got, const std::vector<NDArray>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("array " + std::to_string(i));
    ASSERT_EQ(got[i].is_none(), want[i].is_none());
    if (want[i].is_none()) continue;
    EXPECT_EQ(got[i].shape(), want[i].shape()) << got[i].shape().ToString();
    EXPECT_EQ(got[i].dtype(), want[i].dtype());
    EXPECT_EQ(got[i].ctx(), Context::CPU());
    EXPECT_EQ(HostBytes(got[i]), HostBytes(want[i]));
  }
}

TEST_F(ParamsTest, RoundTripNamedAllDTypesThroughFileAndBytes) {
  const std::vector<NDArray> arrays = AllDTypes();
  const std::vector<std::string> names = {"arg:f32", "f64", "f16",  "u8",   "i32",
                                          "i8",      "i64", "bool", "bf16", "aux:eight dims \xc3\xbc"};
  ASSERT_EQ(names.size(), arrays.size());
  const std::string path = Path("all.params");
  NDArray::Save(path, arrays, names);
  const std::string bytes = NDArray::SaveToBytes(arrays, names);
  EXPECT_EQ(ReadFile(path), bytes) << "Save and SaveToBytes must write the same bytes";

  std::vector<NDArray> loaded;
  std::vector<std::string> loaded_names;
  NDArray::Load(path, &loaded, &loaded_names);
  EXPECT_EQ(loaded_names, names);
  ExpectSameArrays(loaded, arrays);

  NDArray::LoadFromBytes(bytes.data(), bytes.size(), "bytes", &loaded, &loaded_names);
  EXPECT_EQ(loaded_names, names);
  ExpectSameArrays(loaded, arrays);
  // And saving what was loaded gives the same bytes again.
  EXPECT_EQ(NDArray::SaveToBytes(loaded, loaded_names), bytes);
  EXPECT_EQ(ListDir(), std::vector<std::string>{"all.params"}) << "no temporary file may stay behind";
}

TEST_F(ParamsTest, RoundTripUnnamedList) {
  const std::vector<NDArray> arrays = {NDArray::FromVector<float>({1, 2, 3}, {3}),
                                       NDArray::FromVector<std::int32_t>({4, 5}, {1, 2})};
  NDArray::Save(Path("list.params"), arrays);
  std::vector<NDArray> loaded;
  std::vector<std::string> names = {"stale"};
  NDArray::Load(Path("list.params"), &loaded, &names);
  EXPECT_TRUE(names.empty()) << "a list has no names";
  ExpectSameArrays(loaded, arrays);
  // names may be null: they are read and discarded.
  loaded.clear();
  NDArray::Load(Path("list.params"), &loaded, nullptr);
  ExpectSameArrays(loaded, arrays);
  // The name count is 0: the last 8 bytes.
  const std::string bytes = ReadFile(Path("list.params"));
  EXPECT_EQ(bytes.substr(bytes.size() - 8), std::string(8, '\0'));
  // An empty list is a valid file too.
  NDArray::Save(Path("empty.params"), {});
  EXPECT_EQ(ReadFile(Path("empty.params")), Bytes().U64(0x112).U64(0).U64(0).U64(0).str());
  NDArray::Load(Path("empty.params"), &loaded, &names);
  EXPECT_TRUE(loaded.empty());
}

TEST_F(ParamsTest, ScalarZeroSizeAndNoneArrays) {
  NDArray scalar = NDArray::FromVector<float>({42.5f}, TShape::Scalar());
  NDArray empty(TShape({0, 3}), Context::CPU());
  const std::vector<NDArray> arrays = {scalar, empty, NDArray()};
  const std::string bytes = NDArray::SaveToBytes(arrays, {"s", "e", "n"});

  // The exact layout: the list needs NumPy shape semantics, so every record is V3 (as MXNet writes in its
  // numpy-shape mode): the scalar, the zero-size array, and the none array with ndim -1, which stops there.
  Bytes want;
  want.U64(0x112).U64(0).U64(3);
  want.U32(kV3).I32(0).I32(0).I32(1).I32(0).I32(0).F32(42.5f);
  want.U32(kV3).I32(0).I32(2).I64(0).I64(3).I32(1).I32(0).I32(0);
  want.U32(kV3).I32(0).I32(-1);
  want.U64(3).Str("s").Str("e").Str("n");
  EXPECT_EQ(bytes, want.str());

  std::vector<NDArray> loaded;
  std::vector<std::string> names;
  NDArray::LoadFromBytes(bytes.data(), bytes.size(), "scalars", &loaded, &names);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].shape().ndim(), 0);
  EXPECT_EQ(loaded[0].ToVector<float>(), std::vector<float>{42.5f});
  EXPECT_EQ(loaded[1].shape(), TShape({0, 3}));
  EXPECT_EQ(loaded[1].Size(), 0);
  EXPECT_TRUE(loaded[2].is_none());
  EXPECT_EQ(names, (std::vector<std::string>{"s", "e", "n"}));
}

TEST_F(ParamsTest, LargeArrayRoundTrip) {
  constexpr std::size_t kN = 3'000'000;
  std::vector<float> values(kN);
  for (std::size_t i = 0; i < kN; ++i) values[i] = static_cast<float>(i % 100003) * 0.25f - static_cast<float>(i);
  const NDArray big = NDArray::FromVector(values, {1000, 3000});
  NDArray::Save(Path("big.params"), {big}, {"big"});
  EXPECT_EQ(ReadFile(Path("big.params")).size(), 24 + (4 + 4 + 4 + 16 + 12 + kN * 4) + 8 + 8 + 3);
  std::vector<NDArray> loaded;
  std::vector<std::string> names;
  NDArray::Load(Path("big.params"), &loaded, &names);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].shape(), TShape({1000, 3000}));
  EXPECT_TRUE(loaded[0].ToVector<float>() == values) << "values differ after the round trip";
}

TEST_F(ParamsTest, ViewSavesOnlyItsElements) {
  std::vector<std::int32_t> values(5 * 4);
  for (int i = 0; i < 20; ++i) values[i] = i * 3 - 7;
  const NDArray whole = NDArray::FromVector(values, {5, 4});
  const NDArray rows = whole.Slice(1, 3);
  const NDArray row = whole.At(4);
  const std::string bytes = NDArray::SaveToBytes({rows, row});
  std::vector<NDArray> loaded;
  NDArray::LoadFromBytes(bytes.data(), bytes.size(), "views", &loaded, nullptr);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].shape(), TShape({2, 4}));
  EXPECT_EQ(loaded[0].ToVector<std::int32_t>(), std::vector<std::int32_t>(values.begin() + 4, values.begin() + 12));
  EXPECT_EQ(loaded[1].shape(), TShape({4}));
  EXPECT_EQ(loaded[1].ToVector<std::int32_t>(), std::vector<std::int32_t>(values.begin() + 16, values.end()));
  EXPECT_EQ(bytes.size(), 24u + (28 + 12 + 8 * 4) + (20 + 12 + 4 * 4) + 8);
}

TEST_F(ParamsTest, WriterMatchesTheWorkedExampleOfTheSpec) {
  // formats.md §1.11: mx.nd.save(f, {'arg:w': nd.array([[1,2],[3,4]])}), 101 bytes.
  // clang-format off
  const unsigned char kExample[] = {
      0x12, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0xc9, 0xfa, 0x93, 0xf9, 0, 0,
      0, 0, 0x02, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x05, 0,
      0, 0, 0, 0, 0, 0, 'a', 'r', 'g', ':', 'w'};
  // clang-format on
  const std::string want(reinterpret_cast<const char*>(kExample), sizeof(kExample));
  ASSERT_EQ(want.size(), 101u);
  EXPECT_EQ(NDArray::SaveToBytes({NDArray::FromVector<float>({1, 2, 3, 4}, {2, 2})}, {"arg:w"}), want);
}

TEST_F(ParamsTest, SaveRejectsBadNamesAndLeavesNoFile) {
  const std::vector<NDArray> arrays = {NDArray::FromVector<float>({1}, {1}), NDArray::FromVector<float>({2}, {1})};
  EXPECT_THROW(NDArray::Save(Path("x.params"), arrays, {"only one"}), Error);
  EXPECT_THROW(NDArray::SaveToBytes(arrays, {"a", "b", "c"}), Error);
  EXPECT_TRUE(ListDir().empty());
}

TEST_F(ParamsTest, SaveIntoAMissingDirectoryNamesThePathAndErrno) {
  const std::string path = Path("no/such/dir/x.params");
  try {
    NDArray::Save(path, {NDArray::FromVector<float>({1}, {1})});
    FAIL() << "saved into a missing directory";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
  }
}

TEST_F(ParamsTest, FailedSaveKeepsTheOldFileIntact) {
  // An array whose producer failed: SyncCopyToCPU rethrows its error in the middle of the save.
  const std::string path = Path("model.params");
  NDArray::Save(path, {NDArray::FromVector<float>({1, 2}, {2})}, {"old"});
  const std::string old_bytes = ReadFile(path);
  NDArray poisoned(TShape({4}), Context::CPU());
  Engine::Get()->PushSync([](RunContext) { throw Error("injected failure in the producer"); }, Context::CPU(), {},
                          {poisoned.var()});
  try {
    NDArray::Save(path, {NDArray::FromVector<float>({3}, {1}), poisoned}, {"new", "bad"});
    FAIL() << "saving an array whose producer failed succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ReadFile(path), old_bytes) << "a failed save changed the target file";
  EXPECT_EQ(ListDir(), std::vector<std::string>{"model.params"}) << "a failed save left a temporary file";
}

TEST_F(ParamsTest, LoadOfAMissingFileNamesThePath) {
  std::vector<NDArray> arrays;
  const std::string path = Path("missing.params");
  try {
    NDArray::Load(path, &arrays, nullptr);
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(NDArray::Load(dir_, &arrays, nullptr), Error) << "a directory is not a file";
  EXPECT_THROW(NDArray::LoadFromBytes("", 0, "null out", nullptr, nullptr), Error);
}

TEST_F(ParamsTest, DamagedFileOnDiskNamesThePath) {
  const std::string path = Path("short.params");
  const std::string good = NDArray::SaveToBytes({NDArray::FromVector<float>({1, 2}, {2})}, {"w"});
  WriteFile(path, good.substr(0, good.size() - 1));
  std::vector<NDArray> arrays;
  try {
    NDArray::Load(path, &arrays, nullptr);
    FAIL() << "loaded a truncated file";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
  }
}

TEST_F(ParamsTest, ContextOverrideAndDeviceFallback) {
  // Records saved from gpu(7), cpu_pinned(0) and cpu_shared(2): without that GPU they load on cpu(0).
  Bytes b;
  b.U64(0x112).U64(0).U64(3);
  b.U32(kV2).I32(0).I32(1).I64(1).I32(2).I32(7).I32(0).F32(1.f);
  b.U32(kV2).I32(0).I32(1).I64(1).I32(3).I32(0).I32(0).F32(2.f);
  b.U32(kV2).I32(0).I32(1).I64(1).I32(5).I32(2).I32(0).F32(3.f);
  b.U64(0);
  std::vector<NDArray> loaded;
  NDArray::LoadFromBytes(b.str().data(), b.str().size(), "devices", &loaded, nullptr);
  ASSERT_EQ(loaded.size(), 3u);
  if (Runtime::GpuCount() <= 7) {
    EXPECT_EQ(loaded[0].ctx(), Context::CPU());
  }
  EXPECT_EQ(loaded[1].ctx(), Context::CPU());
  EXPECT_EQ(loaded[2].ctx(), Context::CPU());
  EXPECT_EQ(loaded[2].ToVector<float>(), std::vector<float>{3.f});
  // `ctx` overrides the saved device for every array.
  const Context cpu1 = Context::CPU(1);
  NDArray::LoadFromBytes(b.str().data(), b.str().size(), "devices", &loaded, nullptr, &cpu1);
  ASSERT_EQ(loaded.size(), 3u);
  for (const NDArray& a : loaded) EXPECT_EQ(a.ctx(), Context::CPU(1));
  EXPECT_EQ(loaded[0].ToVector<float>(), std::vector<float>{1.f});
}

TEST_F(ParamsTest, LoadsOntoTheGivenEngine) {
  const std::unique_ptr<Engine> engine = test::MakeEngine({EngineType::kNaive, 1, 0});
  ASSERT_NE(engine, nullptr);
  const std::string bytes = NDArray::SaveToBytes({NDArray::FromVector<double>({0.25, 8}, {2})});
  {
    std::vector<NDArray> loaded;
    NDArray::LoadFromBytes(bytes.data(), bytes.size(), "engine", &loaded, nullptr, nullptr, engine.get());
    ASSERT_EQ(loaded.size(), 1u);
    EXPECT_EQ(loaded[0].engine(), engine.get());
    EXPECT_EQ(loaded[0].ToVector<double>(), (std::vector<double>{0.25, 8}));
    // Saving from another engine works the same.
    EXPECT_EQ(NDArray::SaveToBytes(loaded), bytes);
  }  // the arrays go before their engine
  engine->WaitForAll();
}

TEST_F(ParamsTest, GpuArraysGoBackToTheirGpu) {
  if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no GPU";
  const NDArray on_gpu = NDArray::FromVector<float>({1, 2, 3}, {3}, Context::GPU(0));
  const std::string bytes = NDArray::SaveToBytes({on_gpu});
  // The record says gpu(0): dev_type 2, dev_id 0 after magic, stype and the 1-d shape.
  EXPECT_EQ(bytes.substr(24 + 4 + 4 + 12, 8), Bytes().I32(2).I32(0).str());
  std::vector<NDArray> loaded;
  NDArray::LoadFromBytes(bytes.data(), bytes.size(), "gpu", &loaded, nullptr);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].ctx(), Context::GPU(0));
  EXPECT_EQ(loaded[0].CopyTo(Context::CPU()).ToVector<float>(), (std::vector<float>{1, 2, 3}));
  const Context cpu = Context::CPU();
  NDArray::LoadFromBytes(bytes.data(), bytes.size(), "gpu", &loaded, nullptr, &cpu);
  EXPECT_EQ(loaded[0].ctx(), Context::CPU());
  EXPECT_EQ(loaded[0].ToVector<float>(), (std::vector<float>{1, 2, 3}));
}

// ---- files assembled byte by byte ------------------------------------------------------------------

// Every record kind the reader accepts, built from formats.md §1.2-1.7.
Bytes HandBuiltFile() {
  Bytes b;
  b.U64(0x112).U64(0xdeadbeef).U64(10);  // the reserved field is ignored, whatever it holds
  // 0: V2 (2,3) float32 on cpu(0).
  b.U32(kV2).I32(0).I32(2).I64(2).I64(3).I32(1).I32(0).I32(0);
  for (int i = 0; i < 6; ++i) b.F32(0.5f * static_cast<float>(i) - 1.f);
  // 1: V3 0-d int32 scalar.
  b.U32(kV3).I32(0).I32(0).I32(1).I32(0).I32(4).I32(-17);
  // 2: V1 (2,) float64: no storage type.
  b.U32(kV1).I32(1).I64(2).I32(1).I32(0).I32(1).F64(2.5).F64(-1e200);
  // 3: legacy 0.x (3,) uint8: the first u32 is ndim, dims are u32.
  b.U32(1).U32(3).I32(1).I32(0).I32(3).U8(9).U8(0).U8(255);
  // 4: legacy 2-d (2,1) int64.
  b.U32(2).U32(2).U32(1).I32(1).I32(0).I32(6).I64(-5).I64(std::numeric_limits<std::int64_t>::max());
  // 5: legacy none (ndim 0): nothing after it.
  b.U32(0);
  // 6: V1 none (ndim 0).
  b.U32(kV1).I32(0);
  // 7: V2 none (ndim 0).
  b.U32(kV2).I32(0).I32(0);
  // 8: V3 none: ndim -1; 9: V3 none: a dim of -1 (the dims are still written).
  b.U32(kV3).I32(0).I32(-1);
  b.U32(kV3).I32(0).I32(2).I64(4).I64(-1);
  b.U64(10);
  for (const char* n : {"v2", "v3 scalar", "v1", "legacy", "legacy2d", "legacy none", "v1 none", "v2 none", "v3 none",
                        "v3 unknown dim"}) {
    b.Str(n);
  }
  return b;
}

TEST_F(ParamsTest, LoadsAFileAssembledByteByByte) {
  const std::string bytes = HandBuiltFile().str();
  WriteFile(Path("hand.params"), bytes);
  std::vector<NDArray> a;
  std::vector<std::string> names;
  NDArray::Load(Path("hand.params"), &a, &names);
  ASSERT_EQ(a.size(), 10u);
  EXPECT_EQ(names, (std::vector<std::string>{"v2", "v3 scalar", "v1", "legacy", "legacy2d", "legacy none", "v1 none",
                                             "v2 none", "v3 none", "v3 unknown dim"}));
  EXPECT_EQ(a[0].shape(), TShape({2, 3}));
  EXPECT_EQ(a[0].dtype(), DType::kFloat32);
  EXPECT_EQ(a[0].ToVector<float>(), (std::vector<float>{-1.f, -0.5f, 0.f, 0.5f, 1.f, 1.5f}));
  EXPECT_EQ(a[1].shape(), TShape::Scalar());
  EXPECT_EQ(a[1].ToVector<std::int32_t>(), std::vector<std::int32_t>{-17});
  EXPECT_EQ(a[2].shape(), TShape({2}));
  EXPECT_EQ(a[2].ToVector<double>(), (std::vector<double>{2.5, -1e200}));
  EXPECT_EQ(a[3].shape(), TShape({3}));
  EXPECT_EQ(a[3].ToVector<std::uint8_t>(), (std::vector<std::uint8_t>{9, 0, 255}));
  EXPECT_EQ(a[4].shape(), TShape({2, 1}));
  EXPECT_EQ(a[4].ToVector<std::int64_t>(), (std::vector<std::int64_t>{-5, std::numeric_limits<std::int64_t>::max()}));
  for (int i = 5; i < 10; ++i) EXPECT_TRUE(a[i].is_none()) << "array " << i;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a[i].ctx(), Context::CPU());

  // Saved again, troupe writes V2/V3 records with the same content.
  const std::string again = NDArray::SaveToBytes(a, names);
  std::vector<NDArray> b;
  std::vector<std::string> names_b;
  NDArray::LoadFromBytes(again.data(), again.size(), "again", &b, &names_b);
  EXPECT_EQ(names_b, names);
  ExpectSameArrays(b, a);
}

TEST_F(ParamsTest, RealLegacyFileLayout) {
  // The layout of MXNet's own tests/python/unittest/legacy_ndarray.v0 (formats.md §1.11): six legacy
  // float32 (128,) records, no names, 3224 bytes.
  Bytes b;
  b.U64(0x112).U64(0).U64(6);
  for (int k = 0; k < 6; ++k) {
    b.U32(1).U32(128).I32(1).I32(0).I32(0);
    for (int i = 0; i < 128; ++i) b.F32(static_cast<float>(i + k));
  }
  b.U64(0);
  ASSERT_EQ(b.str().size(), 3224u);
  std::vector<NDArray> a;
  std::vector<std::string> names;
  NDArray::LoadFromBytes(b.str().data(), b.str().size(), "legacy_ndarray.v0", &a, &names);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_TRUE(names.empty());
  EXPECT_EQ(a[5].shape(), TShape({128}));
  EXPECT_EQ(a[5].ToVector<float>()[127], 132.f);
}

// ---- files written by MXNet 1.9.1 -------------------------------------------------------------------

void CheckMxnetFile(const std::string& params, const std::string& expected_txt, bool same_bytes) {
  SCOPED_TRACE(params);
  const ExpectedFile expected = ReadExpected(expected_txt);
  ASSERT_FALSE(expected.arrays.empty());
  std::vector<NDArray> loaded;
  std::vector<std::string> names;
  NDArray::Load(DataPath(params), &loaded, &names);
  ExpectMatches(expected, loaded, names);
  if (!same_bytes) return;
  // troupe writes exactly MXNet's bytes: for the loaded arrays, and for arrays built from the text alone.
  const std::string file = ReadFile(DataPath(params));
  EXPECT_EQ(NDArray::SaveToBytes(loaded, names), file);
  std::vector<NDArray> built;
  for (const ExpectedArray& e : expected.arrays) built.push_back(MakeArray(e));
  EXPECT_EQ(NDArray::SaveToBytes(built, expected.names()), file);
}

TEST_F(ParamsTest, MxnetDictOfEveryDType) { CheckMxnetFile("mxnet_dict.params", "mxnet_dict.expected.txt", true); }

TEST_F(ParamsTest, MxnetList) { CheckMxnetFile("mxnet_list.params", "mxnet_list.expected.txt", true); }

TEST_F(ParamsTest, MxnetCheckpoint) {
  CheckMxnetFile("tiny-0003.params", "tiny-0003.expected.txt", true);
  std::vector<NDArray> loaded;
  std::vector<std::string> names;
  NDArray::Load(DataPath("tiny-0003.params"), &loaded, &names);
  for (const std::string& n : names) {
    EXPECT_TRUE(n.rfind("arg:", 0) == 0 || n.rfind("aux:", 0) == 0) << n;
  }
}

TEST_F(ParamsTest, MxnetNumpySemanticsV3) {
  // npx.save writes V3 records for every array of a list that holds a 0-d or zero-size array; so does troupe:
  // saving what it loaded gives MXNet's file byte for byte.
  CheckMxnetFile("mxnet_np.params", "mxnet_np.expected.txt", false);
  const std::string file = ReadFile(DataPath("mxnet_np.params"));
  ASSERT_GE(file.size(), 28u);
  EXPECT_EQ(file.substr(24, 4), Bytes().U32(kV3).str()) << "the reference is expected to hold V3 records";
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(DataPath("mxnet_np.params"), &arrays, &names);
  EXPECT_EQ(NDArray::SaveToBytes(arrays, names), file);
}

// ---- damaged input ---------------------------------------------------------------------------------

// A small valid file: three named arrays (V2 2-d float32, V2 1-d uint8, V3 scalar int32), with the
// offset of every field recorded.
Bytes BaseFile() {
  Bytes b;
  b.At("magic").U64(0x112).U64(0).At("count").U64(3);
  b.At("r0.magic").U32(kV2).At("r0.stype").I32(0).At("r0.ndim").I32(2).At("r0.dim0").I64(2).At("r0.dim1").I64(2);
  b.At("r0.dev_type").I32(1).At("r0.dev_id").I32(0).At("r0.dtype").I32(0).At("r0.data");
  b.F32(1).F32(2).F32(3).F32(4);
  b.At("r1.magic").U32(kV2).At("r1.stype").I32(0).At("r1.ndim").I32(1).At("r1.dim0").I64(3);
  b.At("r1.dev_type").I32(1).At("r1.dev_id").I32(0).At("r1.dtype").I32(3).At("r1.data").U8(5).U8(6).U8(7);
  b.At("r2.magic").U32(kV3).At("r2.stype").I32(0).At("r2.ndim").I32(0);
  b.At("r2.dev_type").I32(1).At("r2.dev_id").I32(0).At("r2.dtype").I32(4).At("r2.data").I32(-9);
  b.At("names").U64(3).At("name0").Str("a").At("name1").Str("bb").At("name2").Str("scalar");
  return b;
}

std::string Patch(std::string bytes, std::size_t at, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

TEST_F(ParamsTest, BaseFileIsValidAndIsWhatTroupeWrites) {
  const Bytes b = BaseFile();
  const std::string base = b.str();
  std::vector<NDArray> a;
  std::vector<std::string> names;
  NDArray::LoadFromBytes(base.data(), base.size(), "base", &a, &names);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[1].ToVector<std::uint8_t>(), (std::vector<std::uint8_t>{5, 6, 7}));
  EXPECT_EQ(a[2].ToVector<std::int32_t>(), std::vector<std::int32_t>{-9});
  // Mixed V2 and V3 records read; troupe writes the list (it holds a scalar) all in V3.
  std::string all_v3 = Patch(base, b.Offset("r0.magic"), kV3, 4);
  all_v3 = Patch(all_v3, b.Offset("r1.magic"), kV3, 4);
  EXPECT_EQ(NDArray::SaveToBytes(a, names), all_v3);
}

TEST_F(ParamsTest, EveryDamagedHeaderFieldIsRejected) {
  const Bytes b = BaseFile();
  const std::string base = b.str();
  struct Damage {
    std::string field;
    std::uint64_t value;
    int width;
    bool exact_offset;  // the error names this field's offset
    std::string needle;
  };
  const std::uint64_t kNeg1 = 0xffffffffu, kNeg2 = 0xfffffffeu;
  std::vector<Damage> damages = {
      {"magic", 0x113, 8, true, "0x112"},
      {"magic", 0, 8, true, "0x112"},
      {"count", 4, 8, false, ""},
      {"count", 2, 8, false, ""},
      {"count", 0, 8, false, ""},
      {"count", std::uint64_t{1} << 62, 8, true, "array count"},
      {"names", 1, 8, true, "name count"},
      {"names", 2, 8, true, "name count"},
      {"names", 4, 8, true, "name count"},
      {"names", std::uint64_t{1} << 63, 8, true, "name count"},
      {"name0", std::uint64_t{1} << 40, 8, true, "name 0"},
      {"name2", 7, 8, true, "name 2"},
      {"name1", 0, 8, false, ""},  // the rest no longer parses as names: trailing or misread bytes
  };
  for (const char* r : {"r0", "r1", "r2"}) {
    const std::string p = r;
    damages.push_back({p + ".magic", 0xF993FACB, 4, true, "at most 8 dimensions"});
    damages.push_back({p + ".magic", 9, 4, true, "at most 8 dimensions"});
    damages.push_back({p + ".stype", 1, 4, true, "sparse storage is not supported by troupe"});
    damages.push_back({p + ".stype", 2, 4, true, "sparse storage is not supported by troupe"});
    damages.push_back({p + ".stype", 5, 4, true, "storage type"});
    damages.push_back({p + ".stype", kNeg1, 4, true, "storage type"});
    damages.push_back({p + ".ndim", 9, 4, true, "at most 8 dimensions"});
    damages.push_back({p + ".ndim", 0x7fffffff, 4, true, "at most 8 dimensions"});
    damages.push_back({p + ".ndim", kNeg2, 4, true, "ndim"});
    damages.push_back({p + ".dev_type", 4, 4, true, "dev_type"});
    damages.push_back({p + ".dev_type", 0, 4, true, "dev_type"});
    damages.push_back({p + ".dev_type", kNeg1, 4, true, "dev_type"});
    damages.push_back({p + ".dev_id", kNeg1, 4, true, "dev_id"});
    damages.push_back({p + ".dtype", 8, 4, true, "type flag"});
    damages.push_back({p + ".dtype", 13, 4, true, "type flag"});
    damages.push_back({p + ".dtype", kNeg1, 4, true, "type flag"});
  }
  for (const char* r : {"r0", "r1"}) {
    const std::string p = r;
    damages.push_back({p + ".dim0", static_cast<std::uint64_t>(-5), 8, true, "dimension 0"});
    // Absurd sizes must fail before anything is allocated (ExpectLoadError checks the allocation count).
    damages.push_back({p + ".dim0", std::uint64_t{1} << 40, 8, false, "are left"});
    damages.push_back({p + ".dim0", std::uint64_t{1} << 62, 8, false, "are left"});
    damages.push_back({p + ".dim0", 4, 8, false, ""});
  }
  damages.push_back({"r0.dim1", std::uint64_t{1} << 62, 8, false, "more than 2^63"});
  damages.push_back({"r0.dim1", (std::uint64_t{1} << 63) - 1, 8, false, "more than 2^63"});
  damages.push_back({"r2.ndim", 1, 4, false, ""});  // a V3 record that now has a dim: sizes no longer add up
  for (const Damage& d : damages) {
    const std::size_t at = b.Offset(d.field);
    const std::string what = d.field + "=" + std::to_string(d.value);
    std::optional<std::size_t> offset;
    if (d.exact_offset) offset = at;
    ExpectLoadError(Patch(base, at, d.value, d.width), what, offset, d.needle);
  }
  // The sparse error names the array.
  ExpectLoadError(Patch(base, b.Offset("r1.stype"), 1, 4), "row_sparse", b.Offset("r1.stype"), "(array 1)");
  ExpectLoadError(Patch(base, b.Offset("r2.stype"), 2, 4), "csr", b.Offset("r2.stype"), "(array 2)");
}

TEST_F(ParamsTest, TrailingBytesAreRejected) {
  const std::string base = BaseFile().str();
  ExpectLoadError(base + std::string(1, '\0'), "one trailing byte", base.size(), "trailing");
  ExpectLoadError(base + std::string(8, '\x7f'), "eight trailing bytes", base.size(), "trailing");
}

TEST_F(ParamsTest, TruncationAtEveryOffsetIsRejected) {
  for (const std::string& file : {BaseFile().str(), HandBuiltFile().str()}) {
    for (std::size_t n = 0; n < file.size(); ++n) {
      ExpectLoadError(file.substr(0, n), "truncated to " + std::to_string(n) + " of " + std::to_string(file.size()));
    }
  }
}

TEST_F(ParamsTest, RandomMutationsLoadOrThrowTroupeError) {
  // Random byte changes to a valid file must either load (the damage hit data or a still-valid value) or
  // throw troupe::Error; never crash, hang or throw anything else. Replay with TROUPE_TEST_SEED.
  const std::uint64_t seed = test::TestSeed();
  std::mt19937_64 rng(seed);
  const std::string base = HandBuiltFile().str();
  int rejected = 0;
  constexpr int kRuns = 3000;
  for (int run = 0; run < kRuns; ++run) {
    std::string bytes = base;
    const int changes = 1 + static_cast<int>(rng() % 4);
    for (int c = 0; c < changes; ++c) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    std::vector<NDArray> arrays;
    try {
      NDArray::LoadFromBytes(bytes.data(), bytes.size(), "mutated", &arrays, nullptr);
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
    } catch (...) {
      ADD_FAILURE() << "run " << run << " threw something other than troupe::Error";
    }
  }
  EXPECT_GT(rejected, 0) << "no mutation was detected: the reader checks nothing";
}

}  // namespace
}  // namespace troupe
