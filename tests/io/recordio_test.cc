// RecordIO (.rec), .idx and image-record header: round trips, byte-exact agreement with dmlc-core / MXNet 1.9.1,
// and the errors for bad inputs (each naming the file and the byte offset or line).
#include "io/recordio.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;

const std::string kM("\x0a\x23\xd7\xce", 4);  // the magic as it lies on disk

// tests/io/data, found next to this source file (the io suites get no data-dir definition from CMake).
fs::path DataDir() {
#ifdef TROUPE_TEST_DATA_DIR
  return fs::path(TROUPE_TEST_DATA_DIR);
#else
  return fs::path(__FILE__).parent_path() / "data";
#endif
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `fn`, expects a troupe::Error whose message contains every one of `parts`.
void ExpectError(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected troupe::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected troupe::Error, nothing thrown";
}

class RecordIOTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("troupe_recordio_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes `records` to `name`, returning the offsets Write reported.
  std::vector<std::uint64_t> WriteAll(const std::string& name, const std::vector<std::string>& records) {
    RecordIOWriter w(Path(name));
    std::vector<std::uint64_t> offsets;
    for (const auto& r : records) offsets.push_back(w.Write(r));
    w.Close();
    return offsets;
  }

  fs::path dir_;
};

std::vector<std::string> ReadAll(const std::string& path) {
  RecordIOReader r(path);
  std::vector<std::string> out;
  std::string rec;
  while (r.Next(&rec)) out.push_back(rec);
  return out;
}

// Payloads with every splitting case, plus random bytes and a 1 MB record.
std::vector<std::string> TrickyRecords(std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xff);
    return s;
  };
  std::vector<std::string> r = {
      "",
      "a",
      "ab",
      "abc",
      "abcd",
      kM,
      kM + kM,
      kM + kM + kM + "z",
      "abcd" + kM,
      "abcdefgh" + kM + kM,
      "x" + kM + "yyy",           // unaligned: stays in one chunk
      "xy" + kM + "zz" + kM,      // unaligned twice
      "abcde" + kM.substr(0, 3),  // magic prefix at the tail
      "abcd" + kM.substr(0, 3),   // partial magic in the trailing bytes
      "1234" + kM + "5" + kM,     // aligned, then one in the trailing bytes (not split)
      std::string(4, '\0'),
      "",
  };
  // Random payloads of every length mod 4, with magics planted at random aligned and unaligned positions.
  for (int i = 0; i < 300; ++i) {
    std::string s = random_bytes(rng() % 200);
    const int plants = static_cast<int>(rng() % 4);
    for (int k = 0; k < plants && s.size() >= 4; ++k) {
      std::size_t pos = rng() % (s.size() - 3);
      if (rng() % 2 == 0) pos &= ~std::size_t{3};
      s.replace(pos, 4, kM);
    }
    r.push_back(s);
  }
  std::string big = random_bytes(1 << 20);
  for (std::size_t pos = 0; pos + 4 <= big.size(); pos += 4096 * 3 + 4) big.replace(pos, 4, kM);
  big.replace(big.size() - 4, 4, kM);
  r.push_back(big);
  r.push_back("after the big one");
  return r;
}

TEST_F(RecordIOTest, RoundTripTrickyRecords) {
  const std::uint32_t seed = 20261123;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto records = TrickyRecords(seed);
  const auto offsets = WriteAll("t.rec", records);
  ASSERT_EQ(offsets.size(), records.size());
  EXPECT_EQ(offsets[0], 0u);

  RecordIOReader r(Path("t.rec"));
  EXPECT_EQ(r.path(), Path("t.rec"));
  std::string rec;
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(r.Tell(), offsets[i]) << "record " << i;
    ASSERT_TRUE(r.Next(&rec)) << "record " << i;
    EXPECT_EQ(rec, records[i]) << "record " << i << " of " << records[i].size() << " bytes";
  }
  EXPECT_EQ(r.Tell(), fs::file_size(Path("t.rec")));
  EXPECT_FALSE(r.Next(&rec));
  EXPECT_FALSE(r.Next(&rec));  // EOF is sticky, not an error
  // Every record starts on a 4-byte boundary and the file is a whole number of words.
  for (auto o : offsets) EXPECT_EQ(o % 4, 0u);
  EXPECT_EQ(fs::file_size(Path("t.rec")) % 4, 0u);
}

TEST_F(RecordIOTest, EmptyFileHasNoRecords) {
  EXPECT_TRUE(WriteAll("e.rec", {}).empty());
  EXPECT_EQ(fs::file_size(Path("e.rec")), 0u);
  EXPECT_TRUE(ReadAll(Path("e.rec")).empty());
}

// The worked example of formats.md §3.4, produced by dmlc-core's writer: our writer must match it byte for byte.
TEST_F(RecordIOTest, MatchesDmlcWorkedExample) {
  const std::vector<std::string> records = {
      "abc", "", "abcd", kM + "XYZW12", "1234" + kM + kM + "tail5", "x" + kM + "yyy", "abcd" + kM};
  const auto offsets = WriteAll("w.rec", records);
  EXPECT_EQ(offsets, (std::vector<std::uint64_t>{0, 12, 20, 32, 56, 92, 108}));
  const unsigned char expected[] = {
      0x0a, 0x23, 0xd7, 0xce, 0x03, 0x00, 0x00, 0x00, 0x61, 0x62, 0x63, 0x00, 0x0a, 0x23, 0xd7, 0xce, 0x00, 0x00, 0x00,
      0x00, 0x0a, 0x23, 0xd7, 0xce, 0x04, 0x00, 0x00, 0x00, 0x61, 0x62, 0x63, 0x64, 0x0a, 0x23, 0xd7, 0xce, 0x00, 0x00,
      0x00, 0x20, 0x0a, 0x23, 0xd7, 0xce, 0x06, 0x00, 0x00, 0x60, 0x58, 0x59, 0x5a, 0x57, 0x31, 0x32, 0x00, 0x00, 0x0a,
      0x23, 0xd7, 0xce, 0x04, 0x00, 0x00, 0x20, 0x31, 0x32, 0x33, 0x34, 0x0a, 0x23, 0xd7, 0xce, 0x00, 0x00, 0x00, 0x40,
      0x0a, 0x23, 0xd7, 0xce, 0x05, 0x00, 0x00, 0x60, 0x74, 0x61, 0x69, 0x6c, 0x35, 0x00, 0x00, 0x00, 0x0a, 0x23, 0xd7,
      0xce, 0x08, 0x00, 0x00, 0x00, 0x78, 0x0a, 0x23, 0xd7, 0xce, 0x79, 0x79, 0x79, 0x0a, 0x23, 0xd7, 0xce, 0x04, 0x00,
      0x00, 0x20, 0x61, 0x62, 0x63, 0x64, 0x0a, 0x23, 0xd7, 0xce, 0x00, 0x00, 0x00, 0x60};
  EXPECT_EQ(ReadFile(Path("w.rec")), std::string(reinterpret_cast<const char*>(expected), sizeof(expected)));
  EXPECT_EQ(ReadAll(Path("w.rec")), records);
}

TEST_F(RecordIOTest, OffsetsMatchIndexAndSeekReadsThatRecord) {
  const auto records = TrickyRecords(7);
  const auto offsets = WriteAll("s.rec", records);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> index;
  for (std::size_t i = 0; i < offsets.size(); ++i) index.emplace_back(1000 + i * 3, offsets[i]);
  WriteRecordIndex(Path("s.idx"), index);
  EXPECT_EQ(ReadRecordIndex(Path("s.idx")), index);
  EXPECT_EQ(ReadFile(Path("s.idx")).substr(0, 7), "1000\t0\n");

  // Random-order access through the index, as an indexed iterator with shuffle would do.
  std::vector<std::size_t> order(records.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  RecordIOReader r(Path("s.rec"));
  std::string rec;
  for (std::size_t i : order) {
    r.Seek(index[i].second);
    EXPECT_EQ(r.Tell(), offsets[i]);
    ASSERT_TRUE(r.Next(&rec)) << "record " << i;
    EXPECT_EQ(rec, records[i]) << "record " << i;
    EXPECT_EQ(r.Tell(), i + 1 < offsets.size() ? offsets[i + 1] : fs::file_size(Path("s.rec")));
  }
  // Seeking to the end is allowed and reads a clean EOF; seeking back restarts.
  r.Seek(fs::file_size(Path("s.rec")));
  EXPECT_FALSE(r.Next(&rec));
  r.Seek(0);
  ASSERT_TRUE(r.Next(&rec));
  EXPECT_EQ(rec, records[0]);
}

TEST_F(RecordIOTest, IndexToleratesCrLfAndBlankLines) {
  WriteFile(Path("a.idx"), "5\t0\r\n7\t16\r\n\n9\t32");
  EXPECT_EQ(ReadRecordIndex(Path("a.idx")),
            (std::vector<std::pair<std::uint64_t, std::uint64_t>>{{5, 0}, {7, 16}, {9, 32}}));
  WriteFile(Path("empty.idx"), "");
  EXPECT_TRUE(ReadRecordIndex(Path("empty.idx")).empty());
}

// ---------------------------------------------------------------------------------------- MXNet 1.9.1 reference

// Must match payloads() in tests/io/data/make_reference.py, which wrote reference.rec with MXNet 1.9.1.
std::vector<std::string> ReferencePayloads() {
  std::string big(20000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7 + 3) % 251);
  big.replace(10000, 4, kM);
  big.replace(15001, 4, kM);
  ImageRecordHeader one;
  one.label = 3.5f;
  one.id = 42;
  ImageRecordHeader two;
  two.flag = 2;
  two.labels = {1.5f, -2.0f};
  two.id = 7;
  return {"hello",
          "",
          "abcd",
          kM + "XYZW12",
          "1234" + kM + "5678",
          "12345678" + kM + "tail5",
          "x" + kM + "yyy",
          "1234" + kM + kM + "end",
          "abcd" + kM,
          big,
          PackImageRecord(one, std::string("\xff\xd8jpeg-ish")),
          PackImageRecord(two, "two-label payload")};
}

TEST_F(RecordIOTest, ReadsMXNetReferenceFile) {
  const std::string rec_path = (DataDir() / "reference.rec").string();
  const std::string idx_path = (DataDir() / "reference.idx").string();
  ASSERT_TRUE(fs::exists(rec_path)) << rec_path << " missing; run tests/io/data/make_reference.py";
  const auto expected = ReferencePayloads();

  // Sequentially, recording where each record starts.
  RecordIOReader r(rec_path);
  std::vector<std::uint64_t> starts;
  std::string rec;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    starts.push_back(r.Tell());
    ASSERT_TRUE(r.Next(&rec)) << "record " << i;
    EXPECT_EQ(rec, expected[i]) << "record " << i;
  }
  EXPECT_FALSE(r.Next(&rec));

  // Through MXNet's .idx (keys 100.. in write order), backwards.
  const auto index = ReadRecordIndex(idx_path);
  ASSERT_EQ(index.size(), expected.size());
  for (std::size_t i = 0; i < index.size(); ++i) {
    EXPECT_EQ(index[i].first, 100 + i);
    EXPECT_EQ(index[i].second, starts[i]);
  }
  for (std::size_t i = index.size(); i-- > 0;) {
    r.Seek(index[i].second);
    ASSERT_TRUE(r.Next(&rec));
    EXPECT_EQ(rec, expected[i]) << "record " << i << " via .idx";
  }

  // MXNet's image records: flag 0 (single label) and flag 2 (two packed labels; pack() zeroes `label`).
  std::string payload;
  r.Seek(index[10].second);
  ASSERT_TRUE(r.Next(&rec));
  ImageRecordHeader h = UnpackImageRecord(rec, &payload, "reference.rec@" + std::to_string(index[10].second));
  EXPECT_EQ(h.flag, 0u);
  EXPECT_EQ(h.label, 3.5f);
  EXPECT_EQ(h.id, 42u);
  EXPECT_EQ(h.id2, 0u);
  EXPECT_TRUE(h.labels.empty());
  EXPECT_EQ(payload, std::string("\xff\xd8jpeg-ish"));
  ASSERT_TRUE(r.Next(&rec));
  h = UnpackImageRecord(rec, &payload, "reference.rec@" + std::to_string(index[11].second));
  EXPECT_EQ(h.flag, 2u);
  EXPECT_EQ(h.label, 0.0f);
  EXPECT_EQ(h.id, 7u);
  EXPECT_EQ(h.labels, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(payload, "two-label payload");

  // Our writer produces the same bytes as MXNet's, and the same .idx text.
  const auto offsets = WriteAll("ours.rec", expected);
  EXPECT_EQ(offsets, starts);
  EXPECT_EQ(ReadFile(Path("ours.rec")), ReadFile(rec_path));
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ours_index;
  for (std::size_t i = 0; i < offsets.size(); ++i) ours_index.emplace_back(100 + i, offsets[i]);
  WriteRecordIndex(Path("ours.idx"), ours_index);
  EXPECT_EQ(ReadFile(Path("ours.idx")), ReadFile(idx_path));
}

// ---------------------------------------------------------------------------------------------- bad inputs

TEST_F(RecordIOTest, MissingFiles) {
  const std::string missing = Path("nope.rec");
  ExpectError([&] { RecordIOReader r(missing); }, {missing});
  ExpectError([&] { ReadRecordIndex(Path("nope.idx")); }, {Path("nope.idx")});
  const std::string bad_dir = Path("no/such/dir/x.rec");
  ExpectError([&] { RecordIOWriter w(bad_dir); }, {bad_dir});
  ExpectError([&] { WriteRecordIndex(Path("no/such/dir/x.idx"), {{0, 0}}); }, {Path("no/such/dir/x.idx")});
}

TEST_F(RecordIOTest, WrongMagicNamesFileAndOffset) {
  const auto offsets = WriteAll("m.rec", {"first", "second", "third"});
  std::string bytes = ReadFile(Path("m.rec"));
  bytes[offsets[2] + 1] = 'Q';  // corrupt the third record's magic
  WriteFile(Path("m.rec"), bytes);
  RecordIOReader r(Path("m.rec"));
  std::string rec;
  ASSERT_TRUE(r.Next(&rec));
  ASSERT_TRUE(r.Next(&rec));
  EXPECT_EQ(rec, "second");
  ExpectError([&] { r.Next(&rec); }, {Path("m.rec"), "wrong magic", "byte offset " + std::to_string(offsets[2])});
  EXPECT_EQ(r.Tell(), offsets[2]);  // left at the bad record

  // An .idx offset that points into the middle of a record hits payload bytes instead of a magic.
  r.Seek(offsets[1] + 8);
  ExpectError([&] { r.Next(&rec); }, {Path("m.rec"), "byte offset " + std::to_string(offsets[1] + 8)});
  ExpectError([&] { r.Seek(offsets[1] + 2); }, {Path("m.rec"), "byte offset " + std::to_string(offsets[1] + 2)});
  ExpectError([&] { r.Seek(1 << 20); }, {Path("m.rec"), "byte offset 1048576"});
}

TEST_F(RecordIOTest, TruncatedFilesNameFileAndOffset) {
  const std::string long_rec(100, 'x');
  const auto offsets = WriteAll("t.rec", {"head", long_rec, "1234" + kM + "tail"});
  const std::string full = ReadFile(Path("t.rec"));
  std::string rec;

  // Cut inside the second record's data.
  WriteFile(Path("cut_data.rec"), full.substr(0, offsets[1] + 8 + 50));
  {
    RecordIOReader r(Path("cut_data.rec"));
    ASSERT_TRUE(r.Next(&rec));
    ExpectError([&] { r.Next(&rec); },
                {Path("cut_data.rec"), "truncated", "byte offset " + std::to_string(offsets[1])});
  }
  // Cut inside the second record's header.
  WriteFile(Path("cut_head.rec"), full.substr(0, offsets[1] + 5));
  {
    RecordIOReader r(Path("cut_head.rec"));
    ASSERT_TRUE(r.Next(&rec));
    ExpectError([&] { r.Next(&rec); },
                {Path("cut_head.rec"), "truncated chunk header", "byte offset " + std::to_string(offsets[1])});
  }
  // Cut a two-chunk record after its first chunk: a clean chunk boundary, but the record is incomplete.
  const std::uint64_t second_chunk = offsets[2] + 8 + 4;
  ASSERT_EQ(full.substr(second_chunk, 4), kM);
  WriteFile(Path("cut_multi.rec"), full.substr(0, second_chunk));
  {
    RecordIOReader r(Path("cut_multi.rec"));
    ASSERT_TRUE(r.Next(&rec));
    ASSERT_TRUE(r.Next(&rec));
    ExpectError([&] { r.Next(&rec); },
                {Path("cut_multi.rec"), "without its last chunk", "byte offset " + std::to_string(second_chunk)});
  }
  // Cut the padding of the last record away.
  WriteFile(Path("cut_pad.rec"), full.substr(0, offsets[1]) + full.substr(0, 8 + 3));  // "head" record w/o data
  {
    RecordIOReader r(Path("cut_pad.rec"));
    ASSERT_TRUE(r.Next(&rec));
    ExpectError([&] { r.Next(&rec); }, {Path("cut_pad.rec"), "byte offset " + std::to_string(offsets[1])});
  }
}

std::string Chunk(std::uint32_t cflag, const std::string& data) {
  std::string out = kM;
  const std::uint32_t lrec = (cflag << 29) | static_cast<std::uint32_t>(data.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((lrec >> (8 * i)) & 0xff));
  out += data;
  out.append((4 - data.size() % 4) % 4, '\0');
  return out;
}

TEST_F(RecordIOTest, BadContinuationSequences) {
  struct Case {
    std::string name;
    std::string bytes;
    std::uint64_t bad_offset;
    std::string says;
  };
  const std::string ok = Chunk(0, "okok");  // 12 bytes
  const std::vector<Case> cases = {
      {"starts_with_middle", ok + Chunk(2, "abcd"), 12, "cannot start a record"},
      {"starts_with_last", ok + Chunk(3, "abcd"), 12, "cannot start a record"},
      {"first_then_whole", ok + Chunk(1, "abcd") + Chunk(0, "efgh"), 24, "cannot follow flag 1"},
      {"first_then_first", Chunk(1, "") + Chunk(1, "abcd"), 8, "cannot follow flag 1"},
      {"flag_out_of_range", ok + Chunk(5, "abcd"), 12, "invalid continuation flag 5"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Path(c.name + ".rec");
    WriteFile(path, c.bytes);
    RecordIOReader r(path);
    std::string rec;
    if (c.bad_offset > 8) {
      ASSERT_TRUE(r.Next(&rec));
      EXPECT_EQ(rec, "okok");
    }
    ExpectError([&] { r.Next(&rec); }, {path, c.says, "byte offset " + std::to_string(c.bad_offset)});
  }
  // The good sequence 1 2 2 3 reassembles with the magic between chunks.
  WriteFile(Path("good.rec"), Chunk(1, "ab") + Chunk(2, "") + Chunk(2, "cd") + Chunk(3, "e"));
  EXPECT_EQ(ReadAll(Path("good.rec")), (std::vector<std::string>{"ab" + kM + kM + "cd" + kM + "e"}));
}

TEST_F(RecordIOTest, MalformedIndexLinesNameFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0\t0\n1\t16\nabc\t32\n", "line 3"},
      {"0\t0\n1 16\n", "line 2"},                  // space instead of tab
      {"0\t0\n\n1\t-16\n", "line 3"},              // negative offset (blank line still counts)
      {"0\t0x10\n", "line 1"},                     // trailing garbage
      {"0\t\n", "line 1"},                         // missing offset
      {"1\t2\t3\n", "line 1"},                     // three fields
      {"0\t0\n1\t18\n", "line 2"},                 // not a multiple of 4
      {"0\t99999999999999999999999\n", "line 1"},  // overflows uint64
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    const std::string path = Path("bad" + std::to_string(i) + ".idx");
    WriteFile(path, cases[i].first);
    ExpectError([&] { ReadRecordIndex(path); }, {path, cases[i].second});
  }
}

TEST_F(RecordIOTest, WriterRejectsOversizedRecordAndWriteAfterClose) {
  RecordIOWriter w(Path("big.rec"));
  const char byte = 0;
  // The size is checked before any byte is read, so a tiny buffer is enough to provoke the error.
  ExpectError([&] { w.Write(&byte, std::size_t{1} << 29); }, {Path("big.rec"), "536870912"});
  EXPECT_EQ(w.Write("still fine"), 0u);  // the refused record left the file valid
  w.Close();
  w.Close();  // idempotent
  ExpectError([&] { w.Write("late"); }, {Path("big.rec"), "Close"});
  EXPECT_EQ(ReadAll(Path("big.rec")), (std::vector<std::string>{"still fine"}));
}

// ------------------------------------------------------------------------------------------- image records

TEST(ImageRecordHeaderTest, PackLayoutAndRoundTrip) {
  ImageRecordHeader h;
  h.label = 2.0f;
  h.id = 0x0102030405060708ULL;
  h.id2 = 9;
  const std::string packed = PackImageRecord(h, "JPEG");
  ASSERT_EQ(packed.size(), 24u + 4u);
  // flag 0 | label 2.0f (0x40000000) | id | id2, little endian.
  EXPECT_EQ(packed.substr(0, 8), std::string("\x00\x00\x00\x00\x00\x00\x00\x40", 8));
  EXPECT_EQ(packed.substr(8, 8), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(packed.substr(16, 8), std::string("\x09\x00\x00\x00\x00\x00\x00\x00", 8));
  std::string payload;
  const ImageRecordHeader back = UnpackImageRecord(packed, &payload, "mem");
  EXPECT_EQ(back.flag, 0u);
  EXPECT_EQ(back.label, 2.0f);
  EXPECT_EQ(back.id, h.id);
  EXPECT_EQ(back.id2, 9u);
  EXPECT_TRUE(back.labels.empty());
  EXPECT_EQ(payload, "JPEG");
}

TEST(ImageRecordHeaderTest, ExtraLabels) {
  ImageRecordHeader h;
  h.flag = 3;
  h.labels = {0.5f, -1.0f, 7.25f};
  h.id = 11;
  const std::string packed = PackImageRecord(h, "");
  ASSERT_EQ(packed.size(), 24u + 12u);
  EXPECT_EQ(packed.substr(0, 4), std::string("\x03\x00\x00\x00", 4));
  EXPECT_EQ(packed.substr(24, 4), std::string("\x00\x00\x00\x3f", 4));  // 0.5f
  std::string payload = "stale";
  const ImageRecordHeader back = UnpackImageRecord(packed, &payload, "mem");
  EXPECT_EQ(back.flag, 3u);
  EXPECT_EQ(back.labels, h.labels);
  EXPECT_EQ(back.id, 11u);
  EXPECT_EQ(payload, "");
  // A null payload pointer is allowed when only the header matters.
  EXPECT_EQ(UnpackImageRecord(packed + "img", nullptr, "mem").labels, h.labels);
  // flag must agree with the labels.
  h.flag = 2;
  ExpectError([&] { PackImageRecord(h, "x"); }, {"flag", "labels"});
}

TEST(ImageRecordHeaderTest, TooShortRecordsNameWhere) {
  ExpectError([] { UnpackImageRecord(std::string(23, '\0'), nullptr, "train.rec@1234"); },
              {"train.rec@1234", "23 bytes"});
  ExpectError([] { UnpackImageRecord("", nullptr, "train.rec@0"); }, {"train.rec@0", "0 bytes"});
  // flag says 5 labels but only 2 follow the header.
  std::string rec(24 + 8, '\0');
  rec[0] = 5;
  ExpectError([&] { UnpackImageRecord(rec, nullptr, "val.rec@88"); }, {"val.rec@88", "flag 5", "44 bytes"});
  // A huge flag must not overflow the length check.
  std::string huge(24, '\0');
  huge[0] = huge[1] = huge[2] = huge[3] = '\xff';
  ExpectError([&] { UnpackImageRecord(huge, nullptr, "val.rec@92"); }, {"val.rec@92", "flag 4294967295"});
}

}  // namespace
}  // namespace troupe
