// CSVIter: values, labels, data_shape reshaping, MXNet 1.9's last-batch handling (round_batch True and
// False, the examples of MXNet's CSVIter documentation), sharding (num_parts workers read every row once)
// and bad input (a missing file, a wrong field count, a field that is not a number: the message names the
// file and the line). Files are written into a fresh temporary directory, removed afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.h"
#include "io/io.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;
using Idx = std::vector<std::uint64_t>;

class CSVIterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ =
        fs::temp_directory_path() / ("troupe_csv_iter_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  // Rows r = 0..n-1 of `width` fields: 10 * r + c.
  std::string WriteRows(const std::string& name, int n, int width) {
    std::string text;
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < width; ++c) {
        if (c != 0) text += ',';
        text += std::to_string(10 * r + c);
      }
      text += "\n";
    }
    return Write(name, text);
  }
  void ExpectError(const Kwargs& kwargs, const std::vector<std::string>& parts) {
    try {
      CreateDataIter("CSVIter", kwargs);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  fs::path dir_;
};

std::vector<float> Data(const DataIter& it) { return it.Value().data[0].ToVector<float>(); }
std::vector<float> Label(const DataIter& it) { return it.Value().label[0].ToVector<float>(); }

// MXNet's documentation example: data.csv holds 1,2,3 / 2,3,4 / 3,4,5 / 4,5,6.
constexpr char kDocCsv[] = "1,2,3\n2,3,4\n3,4,5\n4,5,6\n";

TEST_F(CSVIterTest, RoundBatchPadsFromTheStartAndContinuesThere) {
  const std::string data = Write("data.csv", kDocCsv);
  for (const char* prefetch : {"0", "4"}) {
    auto it = CreateDataIter(
        "CSVIter", {{"data_csv", data}, {"data_shape", "(3,)"}, {"batch_size", "3"}, {"prefetch_buffer", prefetch}});
    EXPECT_EQ(it->DataShapes(), (std::vector<TShape>{TShape{3, 3}}));
    EXPECT_EQ(it->LabelShapes(), (std::vector<TShape>{TShape{3, 1}}));
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(Data(*it), (std::vector<float>{1, 2, 3, 2, 3, 4, 3, 4, 5}));
    EXPECT_EQ(Label(*it), (std::vector<float>{0, 0, 0}));
    EXPECT_EQ(it->Value().label[0].shape(), (TShape{3, 1}));
    EXPECT_EQ(it->Value().num_batch_padd, 0);
    EXPECT_EQ(it->Value().index, (Idx{0, 1, 2}));
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(Data(*it), (std::vector<float>{4, 5, 6, 1, 2, 3, 2, 3, 4}));
    EXPECT_EQ(it->Value().num_batch_padd, 2);
    EXPECT_EQ(it->Value().index, (Idx{3, 0, 1}));
    EXPECT_FALSE(it->Next());
    EXPECT_FALSE(it->Next());
    // The second pass starts after the rows used as padding (MXNet's round robin).
    it->BeforeFirst();
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(Data(*it), (std::vector<float>{3, 4, 5, 4, 5, 6, 1, 2, 3}));
    EXPECT_EQ(it->Value().num_batch_padd, 1);
    EXPECT_FALSE(it->Next());
    // Rows 1..3 fill the third pass exactly; with no padding, the next pass starts at the first row.
    it->BeforeFirst();
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(it->Value().index, (Idx{1, 2, 3}));
    EXPECT_EQ(it->Value().num_batch_padd, 0);
    EXPECT_FALSE(it->Next());
    it->BeforeFirst();
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(it->Value().index, (Idx{0, 1, 2}));
  }
}

TEST_F(CSVIterTest, WithoutRoundBatchThePaddingRepeatsThePreviousBatch) {
  const std::string data = Write("data.csv", kDocCsv);
  auto it = CreateDataIter("CSVIter",
                           {{"data_csv", data}, {"data_shape", "(3,)"}, {"batch_size", "3"}, {"round_batch", "False"}});
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(Data(*it), (std::vector<float>{1, 2, 3, 2, 3, 4, 3, 4, 5}));
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(Data(*it), (std::vector<float>{4, 5, 6, 2, 3, 4, 3, 4, 5}));
    EXPECT_EQ(it->Value().num_batch_padd, 2);
    EXPECT_FALSE(it->Next());
    it->BeforeFirst();
  }
}

TEST_F(CSVIterTest, LabelsAndDataShape) {
  // Blank lines and spaces around fields are accepted; the label file ends without a newline.
  const std::string data = Write("d.csv", "1, 2,3,4\n\n5,6,7,8\r\n9,10,11,12\n-1.5,2e3,+3,0.25\n");
  const std::string label = Write("l.csv", "0.5,1\n1.5,2\n2.5,3\n3.5,4");
  auto it = CreateDataIter("CSVIter", {{"data_csv", data},
                                       {"data_shape", "(2,2)"},
                                       {"label_csv", label},
                                       {"label_shape", "(2,)"},
                                       {"batch_size", "2"},
                                       {"dtype", "float32"}});
  EXPECT_EQ(it->DataShapes(), (std::vector<TShape>{TShape{2, 2, 2}}));
  EXPECT_EQ(it->LabelShapes(), (std::vector<TShape>{TShape{2, 2}}));
  ASSERT_TRUE(it->Next());
  EXPECT_EQ(it->Value().data[0].shape(), (TShape{2, 2, 2}));
  EXPECT_EQ(Data(*it), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(Label(*it), (std::vector<float>{0.5, 1, 1.5, 2}));
  ASSERT_TRUE(it->Next());
  EXPECT_EQ(Data(*it), (std::vector<float>{9, 10, 11, 12, -1.5, 2000, 3, 0.25}));
  EXPECT_EQ(Label(*it), (std::vector<float>{2.5, 3, 3.5, 4}));
  EXPECT_EQ(it->Value().num_batch_padd, 0);
  EXPECT_FALSE(it->Next());
}

TEST_F(CSVIterTest, ShardsCoverEveryRowOnce) {
  constexpr int kRows = 13;
  const std::string data = WriteRows("d.csv", kRows, 2);
  for (int batch : {1, 2, 4}) {
    for (int k = 1; k <= 5; ++k) {
      std::vector<int> seen(kRows, 0);
      for (int p = 0; p < k; ++p) {
        auto it = CreateDataIter("CSVIter", {{"data_csv", data},
                                             {"data_shape", "(2,)"},
                                             {"batch_size", std::to_string(batch)},
                                             {"num_parts", std::to_string(k)},
                                             {"part_index", std::to_string(p)}});
        const auto [begin, end] = ShardRange(kRows, k, p, "test");
        while (it->Next()) {
          const DataBatch& b = it->Value();
          const auto d = b.data[0].ToVector<float>();
          ASSERT_EQ(b.index.size(), static_cast<std::size_t>(batch));
          for (std::size_t i = 0; i < b.index.size(); ++i) {
            const std::uint64_t row = b.index[i];
            ASSERT_GE(row, begin);
            ASSERT_LT(row, end);  // padding comes from this part too
            EXPECT_EQ(d[2 * i], 10.0f * row);
            EXPECT_EQ(d[2 * i + 1], 10.0f * row + 1);
            if (i < b.index.size() - b.num_batch_padd) ++seen[row];
          }
        }
      }
      for (int r = 0; r < kRows; ++r) EXPECT_EQ(seen[r], 1) << "row " << r << " batch " << batch << " k " << k;
    }
  }
  ExpectError(
      {{"data_csv", data}, {"data_shape", "(2,)"}, {"batch_size", "2"}, {"num_parts", "3"}, {"part_index", "3"}},
      {"CSVIter", "part_index"});
  ExpectError({{"data_csv", data}, {"data_shape", "(2,)"}, {"batch_size", "2"}, {"num_parts", "0"}},
              {"CSVIter", "num_parts"});
}

TEST_F(CSVIterTest, PartSmallerThanABatchWraps) {
  const std::string data = WriteRows("d.csv", 2, 1);
  auto it = CreateDataIter("CSVIter", {{"data_csv", data}, {"data_shape", "(1,)"}, {"batch_size", "5"}});
  ASSERT_TRUE(it->Next());
  EXPECT_EQ(it->Value().index, (Idx{0, 1, 0, 1, 0}));
  EXPECT_EQ(it->Value().num_batch_padd, 3);
  EXPECT_FALSE(it->Next());
}

TEST_F(CSVIterTest, BadInputNamesFileAndLine) {
  const std::string good = WriteRows("good.csv", 4, 3);
  const std::string missing = (dir_ / "missing.csv").string();
  ExpectError({{"data_csv", missing}, {"data_shape", "(3,)"}, {"batch_size", "2"}}, {"CSVIter", missing});
  ExpectError({{"data_csv", good}, {"label_csv", missing}, {"data_shape", "(3,)"}, {"batch_size", "2"}},
              {"label_csv", missing});

  const std::string short_row = Write("short.csv", "1,2,3\n\n4,5,6\n7,8\n");
  ExpectError({{"data_csv", short_row}, {"data_shape", "(3,)"}, {"batch_size", "2"}},
              {short_row + ":4:", "expected 3", "got 2"});
  const std::string long_row = Write("long.csv", "1,2,3,4\n");
  ExpectError({{"data_csv", long_row}, {"data_shape", "(3,)"}, {"batch_size", "2"}},
              {long_row + ":1:", "expected 3", "got 4"});
  const std::string nan_row = Write("word.csv", "1,2,3\n4,abc,6\n");
  ExpectError({{"data_csv", nan_row}, {"data_shape", "(3,)"}, {"batch_size", "2"}},
              {nan_row + ":2:", "field 2", "'abc'", "not a number"});
  const std::string empty_field = Write("empty_field.csv", "1,,3\n");
  ExpectError({{"data_csv", empty_field}, {"data_shape", "(3,)"}, {"batch_size", "2"}},
              {empty_field + ":1:", "field 2", "not a number"});
  const std::string bad_label = Write("bad_label.csv", "1\n2\nx\n4\n");
  ExpectError({{"data_csv", good}, {"label_csv", bad_label}, {"data_shape", "(3,)"}, {"batch_size", "2"}},
              {bad_label + ":3:", "not a number"});
  const std::string few_labels = Write("few_labels.csv", "1\n2\n");
  ExpectError({{"data_csv", good}, {"label_csv", few_labels}, {"data_shape", "(3,)"}, {"batch_size", "2"}},
              {few_labels, "2 rows", "4"});

  // Parameters.
  ExpectError({{"data_shape", "(3,)"}, {"batch_size", "2"}}, {"CSVIter", "data_csv"});
  ExpectError({{"data_csv", good}, {"batch_size", "2"}}, {"CSVIter", "data_shape"});
  ExpectError({{"data_csv", good}, {"data_shape", "(3,)"}}, {"CSVIter", "batch_size"});
  ExpectError({{"data_csv", good}, {"data_shape", "(3,)"}, {"batch_size", "0"}}, {"CSVIter", "batch_size"});
  ExpectError({{"data_csv", good}, {"data_shape", "(3,)"}, {"batch_size", "2"}, {"dtype", "int32"}},
              {"CSVIter", "dtype"});
  ExpectError({{"data_csv", good}, {"data_shape", "(3,)"}, {"batch_size", "2"}, {"shuffle", "True"}},
              {"CSVIter", "shuffle"});
}

}  // namespace
}  // namespace troupe
