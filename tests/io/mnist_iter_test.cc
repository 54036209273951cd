// MNISTIter (io/src/mnist_iter.cc): Fashion-MNIST from the Debian package dataset-fashion-mnist, pixel
// scaling (1/256, as MXNet's MNISTIter), shapes, shuffling, sharding, the dropped last batch, and every bad
// input the reader promises to name (missing file, wrong magic, truncation, count mismatch), plain and gzip.
//
// The test reads the raw bytes itself through the gzip command (gzip is an essential Debian package; the suite
// does not link zlib), so the expected values never come from the code under test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/io.h"

namespace troupe {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kDir = "/usr/share/datasets/fashion-mnist/";
const std::string kTrainImages = kDir + "train-images-idx3-ubyte.gz";
const std::string kTrainLabels = kDir + "train-labels-idx1-ubyte.gz";
const std::string kTestImages = kDir + "t10k-images-idx3-ubyte.gz";
const std::string kTestLabels = kDir + "t10k-labels-idx1-ubyte.gz";
constexpr int kPixels = 28 * 28;

std::string RunCapture(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  std::array<char, 1 << 16> buf;
  for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), p.get())) > 0;) out.append(buf.data(), n);
  return out;
}

// The decompressed bytes of a .gz file, read by gzip itself.
std::string Gunzip(const std::string& path) { return RunCapture("gzip -dc '" + path + "'"); }

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  const std::string plain = path + ".tmp";
  WriteFile(plain, bytes);
  ASSERT_EQ(std::system(("gzip -nc '" + plain + "' > '" + path + "'").c_str()), 0);
  fs::remove(plain);
}

std::string BigEndian(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// An idx file: magic, big-endian dims, then `count * per_item` bytes where byte i is (i * 7 + 3) % 256.
std::string MakeIdx(std::uint32_t magic, const std::vector<std::uint32_t>& dims) {
  std::string s = BigEndian(magic);
  std::size_t n = 1;
  for (auto d : dims) {
    s += BigEndian(d);
    n *= d;
  }
  for (std::size_t i = 0; i < n; ++i) s += static_cast<char>((i * 7 + 3) % 256);
  return s;
}

std::unique_ptr<DataIter> Mnist(const std::string& images, const std::string& labels, Kwargs extra = {}) {
  Kwargs kw = {{"image", images}, {"label", labels}};
  bool has_prefetch = false;
  for (const auto& kv : extra) has_prefetch |= kv.first == "prefetch_buffer";
  if (!has_prefetch) kw.emplace_back("prefetch_buffer", "0");
  kw.insert(kw.end(), extra.begin(), extra.end());
  return CreateDataIter("MNISTIter", kw);
}

// The error message of creating an iterator, or "" when it did not throw troupe::Error.
std::string CreateError(const std::string& images, const std::string& labels, Kwargs extra = {}) {
  try {
    Mnist(images, labels, std::move(extra));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class FashionMnist : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& f : {kTrainImages, kTrainLabels, kTestImages, kTestLabels}) {
      ASSERT_TRUE(fs::exists(f)) << f << " is missing: install the Debian package dataset-fashion-mnist";
    }
  }
};

TEST_F(FashionMnist, TrainHas60000SamplesAnd6000PerClass) {
  // Through the default prefetcher, as users get it.
  auto it = Mnist(kTrainImages, kTrainLabels, {{"batch_size", "1000"}, {"shuffle", "False"}, {"prefetch_buffer", "4"}});
  std::map<int, int> per_class;
  std::uint64_t next_index = 0;
  int batches = 0;
  for (it->BeforeFirst(); it->Next(); ++batches) {
    const DataBatch& b = it->Value();
    ASSERT_EQ(b.label.size(), 1u);
    ASSERT_EQ(b.index.size(), 1000u);
    EXPECT_EQ(b.num_batch_padd, 0);
    for (float l : b.label[0].ToVector<float>()) ++per_class[static_cast<int>(l)];
    for (auto i : b.index) ASSERT_EQ(i, next_index++);
  }
  EXPECT_EQ(batches, 60);
  ASSERT_EQ(per_class.size(), 10u);
  for (const auto& [label, n] : per_class) {
    EXPECT_GE(label, 0);
    EXPECT_LE(label, 9);
    EXPECT_EQ(n, 6000) << "label " << label;
  }
}

TEST_F(FashionMnist, T10kMatchesRawBytesScaledBy256) {
  const std::string raw_images = Gunzip(kTestImages);
  const std::string raw_labels = Gunzip(kTestLabels);
  ASSERT_EQ(raw_images.size(), 16u + 10000u * kPixels);
  ASSERT_EQ(raw_labels.size(), 8u + 10000u);
  auto it = Mnist(kTestImages, kTestLabels, {{"batch_size", "100"}, {"shuffle", "False"}});
  std::map<int, int> per_class;
  std::size_t sample = 0;
  float lo = 1, hi = 0;
  for (it->BeforeFirst(); it->Next();) {
    const DataBatch& b = it->Value();
    const auto data = b.data[0].ToVector<float>();
    const auto label = b.label[0].ToVector<float>();
    ASSERT_EQ(data.size(), 100u * kPixels);
    for (std::size_t i = 0; i < 100; ++i, ++sample) {
      ASSERT_EQ(b.index[i], sample);
      const auto want_label = static_cast<unsigned char>(raw_labels[8 + sample]);
      ASSERT_EQ(label[i], static_cast<float>(want_label)) << "sample " << sample;
      ++per_class[want_label];
      for (int k = 0; k < kPixels; ++k) {
        const auto byte = static_cast<unsigned char>(raw_images[16 + sample * kPixels + k]);
        const float v = data[i * kPixels + k];
        ASSERT_EQ(v, static_cast<float>(byte) / 256.0f) << "sample " << sample << " pixel " << k;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  }
  EXPECT_EQ(sample, 10000u);
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 255.0f / 256.0f);  // Fashion-MNIST has full-white pixels; MXNet's scale never reaches 1
  ASSERT_EQ(per_class.size(), 10u);
  for (const auto& [label, n] : per_class) EXPECT_EQ(n, 1000) << "label " << label;
}

TEST_F(FashionMnist, ShapesFlatAndNot) {
  auto img = Mnist(kTestImages, kTestLabels, {{"batch_size", "32"}, {"shuffle", "False"}});
  auto flat = Mnist(kTestImages, kTestLabels, {{"batch_size", "32"}, {"shuffle", "False"}, {"flat", "True"}});
  ASSERT_EQ(img->DataShapes().size(), 1u);
  EXPECT_EQ(img->DataShapes()[0], (TShape{32, 1, 28, 28}));
  EXPECT_EQ(flat->DataShapes()[0], (TShape{32, 784}));
  EXPECT_EQ(img->LabelShapes()[0], (TShape{32}));
  EXPECT_EQ(flat->LabelShapes()[0], (TShape{32}));
  ASSERT_TRUE(img->Next());
  ASSERT_TRUE(flat->Next());
  EXPECT_EQ(img->Value().data[0].shape(), (TShape{32, 1, 28, 28}));
  EXPECT_EQ(flat->Value().data[0].shape(), (TShape{32, 784}));
  EXPECT_EQ(img->Value().label[0].shape(), (TShape{32}));
  EXPECT_EQ(img->Value().data[0].dtype(), DType::kFloat32);
  EXPECT_EQ(img->Value().label[0].dtype(), DType::kFloat32);
  EXPECT_EQ(img->Value().data[0].ToVector<float>(), flat->Value().data[0].ToVector<float>());
}

TEST_F(FashionMnist, DefaultsAreMxnets) {
  const DataIterInfo* info = DataIterRegistry::Get().Find("MNISTIter");
  ASSERT_NE(info, nullptr);
  std::map<std::string, std::string> defaults;
  for (const auto& p : info->params) defaults[p.name] = p.default_value;
  EXPECT_EQ(defaults["image"], "./train-images-idx3-ubyte");
  EXPECT_EQ(defaults["label"], "./train-labels-idx1-ubyte");
  EXPECT_EQ(defaults["batch_size"], "128");
  EXPECT_EQ(defaults["shuffle"], "True");
  EXPECT_EQ(defaults["flat"], "False");
  EXPECT_EQ(defaults["seed"], "0");
  EXPECT_EQ(defaults["silent"], "False");
  EXPECT_EQ(defaults["num_parts"], "1");
  EXPECT_EQ(defaults["part_index"], "0");
  // Default batch 128 and shuffle on: 10000 / 128 = 78 full batches, the last 16 samples dropped.
  auto it = CreateDataIter("MNISTIter", {{"image", kTestImages}, {"label", kTestLabels}, {"silent", "True"}});
  EXPECT_EQ(it->DataShapes()[0], (TShape{128, 1, 28, 28}));
  int batches = 0;
  while (it->Next()) ++batches;
  EXPECT_EQ(batches, 78);
}

TEST_F(FashionMnist, IncompleteLastBatchIsDroppedAsInMxnet) {
  auto it = Mnist(kTestImages, kTestLabels, {{"batch_size", "3000"}, {"shuffle", "False"}});
  for (int epoch = 0; epoch < 2; ++epoch) {
    it->BeforeFirst();
    std::uint64_t samples = 0;
    while (it->Next()) {
      EXPECT_EQ(it->Value().num_batch_padd, 0);
      samples += it->Value().index.size();
    }
    EXPECT_EQ(samples, 9000u);
    EXPECT_EQ(it->Value().index.back(), 8999u);
  }
}

std::vector<std::uint64_t> EpochIndices(DataIter& it) {
  std::vector<std::uint64_t> out;
  for (it.BeforeFirst(); it.Next();) {
    const auto& idx = it.Value().index;
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}

TEST_F(FashionMnist, ShuffleIsADeterministicPermutation) {
  const std::string raw_labels = Gunzip(kTestLabels);
  const std::string raw_images = Gunzip(kTestImages);
  auto a = Mnist(kTestImages, kTestLabels, {{"batch_size", "100"}, {"seed", "7"}});
  auto b = Mnist(kTestImages, kTestLabels, {{"batch_size", "100"}, {"seed", "7"}});
  auto c = Mnist(kTestImages, kTestLabels, {{"batch_size", "100"}, {"seed", "8"}});
  const auto ia = EpochIndices(*a);
  ASSERT_EQ(ia.size(), 10000u);
  EXPECT_EQ(std::set<std::uint64_t>(ia.begin(), ia.end()).size(), 10000u);
  EXPECT_EQ(*std::max_element(ia.begin(), ia.end()), 9999u);
  EXPECT_EQ(ia, EpochIndices(*b));
  EXPECT_NE(ia, EpochIndices(*c));
  std::vector<std::uint64_t> identity(10000);
  for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  EXPECT_NE(ia, identity);
  // MXNet shuffles once, at creation: every epoch has the same order.
  EXPECT_EQ(ia, EpochIndices(*a));
  // Samples travel with their labels and pixels.
  a->BeforeFirst();
  ASSERT_TRUE(a->Next());
  const auto labels = a->Value().label[0].ToVector<float>();
  const auto data = a->Value().data[0].ToVector<float>();
  for (std::size_t i = 0; i < 100; ++i) {
    const std::uint64_t s = a->Value().index[i];
    EXPECT_EQ(labels[i], static_cast<float>(static_cast<unsigned char>(raw_labels[8 + s])));
    for (int k = 0; k < kPixels; k += 97) {
      EXPECT_EQ(data[i * kPixels + k], static_cast<unsigned char>(raw_images[16 + s * kPixels + k]) / 256.0f);
    }
  }
}

TEST_F(FashionMnist, ShardsTogetherYieldEverySampleOnce) {
  for (const char* shuffle : {"False", "True"}) {
    for (int k = 1; k <= 5; ++k) {
      std::vector<int> seen(10000, 0);
      for (int p = 0; p < k; ++p) {
        auto it = Mnist(kTestImages, kTestLabels,
                        {{"batch_size", "1"},
                         {"shuffle", shuffle},
                         {"num_parts", std::to_string(k)},
                         {"part_index", std::to_string(p)}});
        const auto idx = EpochIndices(*it);
        // Each part is the contiguous range ShardRange gives (shuffled within the part when asked).
        const auto [begin, end] = ShardRange(10000, k, p, "test");
        ASSERT_EQ(idx.size(), end - begin) << "k=" << k << " part " << p;
        for (auto i : idx) {
          ASSERT_GE(i, begin);
          ASSERT_LT(i, end);
          ++seen[i];
        }
      }
      for (int i = 0; i < 10000; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i << " k=" << k << " shuffle=" << shuffle;
    }
  }
}

// ------------------------------------------------------------------------------------- bad input
class MnistBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("troupe_mnist_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `bytes` plain (name) and gzipped (name + ".gz"); returns both paths.
  std::array<std::string, 2> WriteBoth(const std::string& name, const std::string& bytes) {
    WriteFile(Path(name), bytes);
    WriteGz(Path(name + ".gz"), bytes);
    return {Path(name), Path(name + ".gz")};
  }
  fs::path dir_;
};

TEST_F(MnistBadInput, SmallValidFilesPlainAndGzip) {
  const auto images = WriteBoth("img", MakeIdx(0x803, {5, 2, 3}));
  const auto labels = WriteBoth("lbl", MakeIdx(0x801, {5}));
  for (int gz = 0; gz < 2; ++gz) {
    auto it = Mnist(images[gz], labels[1 - gz], {{"batch_size", "5"}, {"shuffle", "False"}});
    EXPECT_EQ(it->DataShapes()[0], (TShape{5, 1, 2, 3}));
    ASSERT_TRUE(it->Next());
    const auto data = it->Value().data[0].ToVector<float>();
    for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], ((i * 7 + 3) % 256) / 256.0f) << i;
    const auto label = it->Value().label[0].ToVector<float>();
    for (std::size_t i = 0; i < label.size(); ++i) EXPECT_EQ(label[i], static_cast<float>((i * 7 + 3) % 256));
    EXPECT_FALSE(it->Next());
  }
  // Two concatenated gzip members (what `cat a.gz b.gz` makes) read as one file, as gzip -d reads them.
  const std::string whole = MakeIdx(0x803, {5, 2, 3});
  WriteGz(Path("a.gz"), whole.substr(0, 20));
  WriteGz(Path("b.gz"), whole.substr(20));
  std::string two;
  for (const char* part : {"a.gz", "b.gz"}) {
    std::ifstream in(Path(part), std::ios::binary);
    two.append(std::istreambuf_iterator<char>(in), {});
  }
  WriteFile(Path("two.gz"), two);
  auto a = Mnist(Path("two.gz"), labels[0], {{"batch_size", "5"}, {"shuffle", "False"}});
  auto b = Mnist(images[0], labels[0], {{"batch_size", "5"}, {"shuffle", "False"}});
  ASSERT_TRUE(a->Next());
  ASSERT_TRUE(b->Next());
  EXPECT_EQ(a->Value().data[0].ToVector<float>(), b->Value().data[0].ToVector<float>());
}

TEST_F(MnistBadInput, MissingFileNamesIt) {
  const auto labels = WriteBoth("lbl", MakeIdx(0x801, {5}));
  const std::string missing = Path("no-such-images-idx3-ubyte");
  std::string msg = CreateError(missing, labels[0]);
  EXPECT_THAT(msg, HasSubstr("MNISTIter"));
  EXPECT_THAT(msg, HasSubstr("'" + missing + "'"));
  EXPECT_THAT(msg, HasSubstr("cannot be opened"));
  // MXNet's default paths are relative to the working directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  try {
    CreateDataIter("MNISTIter", {{"prefetch_buffer", "0"}});
    ADD_FAILURE() << "no error for the missing default file";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("'./train-images-idx3-ubyte'"));
  }
  fs::current_path(cwd);
}

TEST_F(MnistBadInput, WrongMagicNamesFileOffsetAndExpected) {
  const auto images = WriteBoth("img", MakeIdx(0x803, {4, 2, 2}));
  const auto labels = WriteBoth("lbl", MakeIdx(0x801, {4}));
  for (int gz = 0; gz < 2; ++gz) {
    // Image and label files swapped: the first check to fail is the image file's magic.
    std::string msg = CreateError(labels[gz], images[gz]);
    EXPECT_THAT(msg, HasSubstr("image file '" + labels[gz] + "'"));
    EXPECT_THAT(msg, HasSubstr("magic 0x00000801 at byte offset 0"));
    EXPECT_THAT(msg, HasSubstr("expected 0x00000803"));
    if (gz) {
      EXPECT_THAT(msg, HasSubstr("decompressed"));
    }
    msg = CreateError(images[gz], images[gz]);
    EXPECT_THAT(msg, HasSubstr("label file '" + images[gz] + "'"));
    EXPECT_THAT(msg, HasSubstr("expected 0x00000801"));
  }
}

TEST_F(MnistBadInput, TruncatedDataNamesTheByteOffset) {
  std::string img = MakeIdx(0x803, {4, 2, 2});  // 16 + 16 bytes
  img.resize(16 + 9);                           // sample 2 is cut
  const auto images = WriteBoth("img", img);
  const auto labels = WriteBoth("lbl", MakeIdx(0x801, {4}));
  for (int gz = 0; gz < 2; ++gz) {
    const std::string msg = CreateError(images[gz], labels[gz]);
    EXPECT_THAT(msg, HasSubstr("image file '" + images[gz] + "' is truncated"));
    EXPECT_THAT(msg, HasSubstr("need 32 bytes"));
    EXPECT_THAT(msg, HasSubstr("ends at byte offset 25"));
    EXPECT_THAT(msg, HasSubstr("image 2 is incomplete"));
  }
  // A header cut short, and a label file with fewer labels than its count says.
  const auto short_header = WriteBoth("short", MakeIdx(0x803, {4, 2, 2}).substr(0, 10));
  EXPECT_THAT(CreateError(short_header[0], labels[0]), HasSubstr("header needs 16 bytes"));
  EXPECT_THAT(CreateError(short_header[0], labels[0]), HasSubstr("ends at byte offset 10"));
  std::string lbl = MakeIdx(0x801, {4});
  lbl.pop_back();
  const auto short_labels = WriteBoth("lbl_short", lbl);
  const auto good_images = WriteBoth("img_good", MakeIdx(0x803, {4, 2, 2}));
  const std::string msg = CreateError(good_images[1], short_labels[1]);
  EXPECT_THAT(msg, HasSubstr("label file '" + short_labels[1] + "' is truncated"));
  EXPECT_THAT(msg, HasSubstr("ends at byte offset 11"));
  // Trailing bytes are as wrong as missing ones.
  const auto long_labels = WriteBoth("lbl_long", MakeIdx(0x801, {4}) + "xy");
  EXPECT_THAT(CreateError(good_images[0], long_labels[0]), HasSubstr("2 extra bytes after byte offset 12"));
}

TEST_F(MnistBadInput, TruncatedGzipStreamNamesCompressedOffset) {
  const std::string gz = Path("img.gz");
  WriteGz(gz, MakeIdx(0x803, {50, 28, 28}));
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 40u);
  const std::size_t cut = bytes.size() / 2;
  WriteFile(gz, bytes.substr(0, cut));
  const auto labels = WriteBoth("lbl", MakeIdx(0x801, {50}));
  std::string msg = CreateError(gz, labels[0]);
  EXPECT_THAT(msg, HasSubstr("image file '" + gz + "' is truncated"));
  EXPECT_THAT(msg, HasSubstr("compressed byte offset " + std::to_string(cut)));
  // Corrupt deflate data (the gzip header intact, the compressed bytes garbage).
  std::string corrupt = bytes;
  for (std::size_t i = 12; i < corrupt.size() - 8; ++i) corrupt[i] = static_cast<char>(0xff);
  WriteFile(gz, corrupt);
  msg = CreateError(gz, labels[0]);
  EXPECT_THAT(msg, HasSubstr("image file '" + gz + "'"));
  EXPECT_THAT(msg, HasSubstr("compressed byte offset"));
}

TEST_F(MnistBadInput, CountMismatchNamesBothFiles) {
  const auto images = WriteBoth("img", MakeIdx(0x803, {6, 2, 2}));
  const auto labels = WriteBoth("lbl", MakeIdx(0x801, {5}));
  for (int gz = 0; gz < 2; ++gz) {
    const std::string msg = CreateError(images[gz], labels[gz]);
    EXPECT_THAT(msg, HasSubstr("image file '" + images[gz] + "' holds 6 images"));
    EXPECT_THAT(msg, HasSubstr("label file '" + labels[gz] + "' holds 5 labels"));
    EXPECT_THAT(msg, HasSubstr("byte offset 4"));
  }
}

TEST_F(MnistBadInput, BadParametersNameTheParameter) {
  const auto images = WriteBoth("img", MakeIdx(0x803, {6, 2, 2}));
  const auto labels = WriteBoth("lbl", MakeIdx(0x801, {6}));
  EXPECT_THAT(CreateError(images[0], labels[0], {{"batch_size", "0"}}), HasSubstr("batch_size"));
  EXPECT_THAT(CreateError(images[0], labels[0], {{"batch_sise", "4"}}), HasSubstr("batch_sise"));
  EXPECT_THAT(CreateError(images[0], labels[0], {{"num_parts", "2"}, {"part_index", "2"}}), HasSubstr("part_index"));
  EXPECT_THAT(CreateError(images[0], labels[0], {{"num_parts", "0"}}), HasSubstr("num_parts"));
  EXPECT_THAT(CreateError(images[0], labels[0], {{"flat", "maybe"}}), HasSubstr("flat"));
}

}  // namespace
}  // namespace troupe
