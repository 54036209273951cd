// `troupe im2rec` end to end: the built command packs generated files; the test reads the .rec and .idx back
// with RecordIOReader / ReadRecordIndex and checks every header field and payload byte, then checks that bad
// input fails with a message naming the list file and line or the image path, and leaves no output behind.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "io/recordio.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int status = -1;
  std::string err;
};

// Runs `troupe im2rec ARGS`, returning the exit status and stderr.
Result RunIm2Rec(const std::string& args, const fs::path& dir) {
  const fs::path err_file = dir / "stderr.txt";
  const std::string cmd = std::string(TROUPE_CLI_PATH) + " im2rec " + args + " 2> '" + err_file.string() + "'";
  const int raw = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// Bytes that exercise the framing: arbitrary binary, lengths that are not multiples of 4, and the RecordIO
// magic at an aligned offset (the writer must split the record there and the reader restore it).
std::string Payload(int i) {
  std::string s;
  for (int k = 0; k < 37 + 13 * i; ++k) s.push_back(static_cast<char>((k * 31 + i * 7) & 0xff));
  if (i == 2) {
    const std::uint32_t m = troupe::kRecordIOMagic;
    s.replace(0, 4, reinterpret_cast<const char*>(&m), 4);  // header is 24 bytes: offset 24 stays aligned
  }
  return s;
}

class Im2RecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(TROUPE_IM2REC_TEST_DIR) / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "root");
  }
  fs::path dir_;
};

TEST_F(Im2RecTest, PacksEveryImageAndLabelAsIs) {
  const std::vector<std::string> paths = {"a/0.jpg", "b/one two.png", "c/2.jpg", "3.bin"};
  for (int i = 0; i < 4; ++i) WriteFile(dir_ / "root" / paths[i], Payload(i));
  // Indices out of order, one label / three labels / one label / two labels; a Windows line ending.
  WriteFile(dir_ / "list.lst",
            "10\t3.000000\ta/0.jpg\n"
            "4\t1\t2.5\t-7\tb/one two.png\r\n"
            "\n"
            "7\t0\tc/2.jpg\n"
            "99\t0.25\t8\t3.bin\n");
  const Result r = RunIm2Rec("--progress 2 '" + (dir_ / "list.lst").string() + "' '" + (dir_ / "root").string() +
                                 "' '" + (dir_ / "out").string() + "'",
                             dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("2/4 images packed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4/4 images packed"), std::string::npos) << r.err;

  const std::vector<std::uint64_t> ids = {10, 4, 7, 99};
  const std::vector<std::vector<float>> labels = {{3}, {1, 2.5f, -7}, {0}, {0.25f, 8}};
  const auto index = troupe::ReadRecordIndex((dir_ / "out.idx").string());
  ASSERT_EQ(index.size(), 4u);
  troupe::RecordIOReader reader((dir_ / "out.rec").string());
  std::string record, payload;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(index[i].first, ids[i]);
    EXPECT_EQ(reader.Tell(), index[i].second) << "record " << i;
    ASSERT_TRUE(reader.Next(&record)) << "record " << i;
    const troupe::ImageRecordHeader h = troupe::UnpackImageRecord(record, &payload, "record " + std::to_string(i));
    EXPECT_EQ(h.id, ids[i]);
    EXPECT_EQ(h.id2, 0u);
    if (labels[i].size() == 1) {
      EXPECT_EQ(h.flag, 0u);
      EXPECT_EQ(h.label, labels[i][0]);
    } else {
      EXPECT_EQ(h.flag, labels[i].size());
      EXPECT_EQ(h.labels, labels[i]);
    }
    EXPECT_EQ(payload, Payload(i)) << "record " << i;
  }
  EXPECT_FALSE(reader.Next(&record));
  // Random access by the .idx: the third record from its offset.
  reader.Seek(index[2].second);
  ASSERT_TRUE(reader.Next(&record));
  EXPECT_EQ(troupe::UnpackImageRecord(record, &payload, "seek").id, 7u);
  EXPECT_EQ(payload, Payload(2));
}

TEST_F(Im2RecTest, MalformedLineNamesListAndLine) {
  WriteFile(dir_ / "root" / "x.jpg", "xx");
  const std::string list = (dir_ / "bad.lst").string();
  const std::string args = "'" + list + "' '" + (dir_ / "root").string() + "' '" + (dir_ / "out").string() + "'";
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {"0\t1\tx.jpg\n1 1 x.jpg\n", "line 2: expected index<TAB>label"},
      {"0\t1\tx.jpg\n\nabc\t1\tx.jpg\n", "line 3: the index 'abc'"},
      {"-1\t1\tx.jpg\n", "line 1: the index '-1'"},
      {"0\t1\tx.jpg\n1\tcat\tx.jpg\n", "line 2: label 1 'cat'"},
      {"5\t1\tx.jpg\n5\t2\tx.jpg\n", "line 2: index 5 was already used on line 1"},
  };
  for (const Case& c : cases) {
    WriteFile(list, c.text);
    const Result r = RunIm2Rec(args, dir_);
    EXPECT_EQ(r.status, 1) << c.text;
    EXPECT_NE(r.err.find("list file '" + list + "' " + c.expect), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "out.rec")) << c.text;
    EXPECT_FALSE(fs::exists(dir_ / "out.idx")) << c.text;
  }
}

TEST_F(Im2RecTest, MissingImageNamesPathAndRemovesOutput) {
  WriteFile(dir_ / "root" / "x.jpg", "xx");
  WriteFile(dir_ / "list.lst", "0\t1\tx.jpg\n1\t1\tmissing/y.jpg\n");
  const Result r = RunIm2Rec(
      "'" + (dir_ / "list.lst").string() + "' '" + (dir_ / "root").string() + "' '" + (dir_ / "out").string() + "'",
      dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'" + (dir_ / "root" / "missing" / "y.jpg").string() + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "out.rec"));
  EXPECT_FALSE(fs::exists(dir_ / "out.idx"));
}

TEST_F(Im2RecTest, MissingListAndUsage) {
  Result r = RunIm2Rec("'" + (dir_ / "nope.lst").string() + "' '" + (dir_ / "root").string() + "' out", dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("nope.lst"), std::string::npos) << r.err;
  r = RunIm2Rec("only_one_arg", dir_);
  EXPECT_EQ(r.status, 2) << r.err;
  r = RunIm2Rec("--list only_a_prefix", dir_);
  EXPECT_EQ(r.status, 2) << r.err;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `im2rec --list` against MXNet 1.9.1's tools/im2rec.py --list on the same folder (its output pasted below):
// the walk's order, the class labels, the shuffle (Python's random.seed(100)), the chunks and the
// train/val/test split.
TEST_F(Im2RecTest, ListsAFolderAsMXNetDoes) {
  const fs::path root = dir_ / "root";
  for (const char* f : {"a.jpg", "notes.txt", "cat/001.jpg", "cat/002.JPG", "cat/003.png", "cat/004.gif",
                        "dog/010.jpeg", "dog/011.jpg", "dog/puppy/020.jpg", "zebra/1.jpg", "zebra/2.jpg",
                        "zebra/3.jpg", "zebra/4.jpg", "zebra/5.jpg"}) {
    WriteFile(root / f, "x");
  }
  fs::create_directories(root / "empty");
  const std::string in = " '" + (dir_ / "out" / "r").string() + "' '" + root.string() + "'";
  fs::create_directories(dir_ / "out");
  // python im2rec.py --list --recursive --train-ratio 0.5 --test-ratio 0.25 out/r root
  Result r = RunIm2Rec("--list --recursive --train-ratio 0.5 --test-ratio 0.25" + in, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Slurp(dir_ / "out" / "r_test.lst"), "1\t1.000000\tcat/001.jpg\n4\t2.000000\tdog/010.jpeg\n9\t4.000000\tzebra/3.jpg\n");
  EXPECT_EQ(Slurp(dir_ / "out" / "r_train.lst"),
            "0\t0.000000\ta.jpg\n3\t1.000000\tcat/003.png\n8\t4.000000\tzebra/2.jpg\n5\t2.000000\tdog/011.jpg\n"
            "6\t3.000000\tdog/puppy/020.jpg\n11\t4.000000\tzebra/5.jpg\n");
  EXPECT_EQ(Slurp(dir_ / "out" / "r_val.lst"), "10\t4.000000\tzebra/4.jpg\n7\t4.000000\tzebra/1.jpg\n2\t1.000000\tcat/002.JPG\n");

  // python im2rec.py --list out/flat root: the root's own images only, label 0.
  r = RunIm2Rec("--list '" + (dir_ / "out" / "flat").string() + "' '" + root.string() + "'", dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Slurp(dir_ / "out" / "flat.lst"), "0\t0.000000\ta.jpg\n");

  // python im2rec.py --list --recursive --no-shuffle --chunks 2 out/c root
  r = RunIm2Rec("--list --recursive --no-shuffle --chunks 2 '" + (dir_ / "out" / "c").string() + "' '" + root.string() + "'", dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Slurp(dir_ / "out" / "c_0.lst"),
            "0\t0.000000\ta.jpg\n1\t1.000000\tcat/001.jpg\n2\t1.000000\tcat/002.JPG\n3\t1.000000\tcat/003.png\n"
            "4\t2.000000\tdog/010.jpeg\n5\t2.000000\tdog/011.jpg\n");
  EXPECT_EQ(Slurp(dir_ / "out" / "c_1.lst"),
            "6\t3.000000\tdog/puppy/020.jpg\n7\t4.000000\tzebra/1.jpg\n8\t4.000000\tzebra/2.jpg\n"
            "9\t4.000000\tzebra/3.jpg\n10\t4.000000\tzebra/4.jpg\n11\t4.000000\tzebra/5.jpg\n");

  // 50 images: a longer shuffle, where Python's rejection sampling (_randbelow) comes into play.
  const fs::path many = dir_ / "many";
  for (int i = 0; i < 50; ++i) WriteFile(many / ((i < 10 ? "img_0" : "img_") + std::to_string(i) + ".jpg"), "x");
  r = RunIm2Rec("--list '" + (dir_ / "out" / "many").string() + "' '" + many.string() + "'", dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string order;
  std::istringstream lines(Slurp(dir_ / "out" / "many.lst"));
  for (std::string line; std::getline(lines, line);) order += line.substr(0, line.find('\t')) + ",";
  EXPECT_EQ(order, "39,30,35,36,38,44,43,19,0,17,1,15,10,41,2,18,8,31,12,28,33,20,23,46,42,4,37,6,24,26,49,14,21,13,3,"
                   "16,47,5,40,34,7,32,27,22,25,45,11,48,29,9,");

  // The lists pack: the train list of the first run goes through im2rec as any list does.
  r = RunIm2Rec("'" + (dir_ / "out" / "r_train.lst").string() + "' '" + root.string() + "' '" + (dir_ / "out" / "r").string() + "'", dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "r.rec"));

  r = RunIm2Rec("--list --train-ratio 0.8 --test-ratio 0.5" + in, dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("add up to at most 1"), std::string::npos) << r.err;
}

}  // namespace
