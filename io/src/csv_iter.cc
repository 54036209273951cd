// CSVIter (MXNet 1.9's mx.io.CSVIter): batches of rows of comma-separated numbers.
//
// Every row of data_csv is one sample of data_shape (its field count must equal the shape's size); every
// row of label_csv the sample's label of label_shape. Without label_csv the labels are 0. Batches are
// (batch_size,) + data_shape and (batch_size,) + label_shape, float32 on the CPU.
//
// The files are parsed whole at construction, so every malformed row is reported before the first batch:
// a missing file, a row with the wrong number of fields or a field that is not a number is a
// troupe::Error naming the file and the 1-based line. Empty lines are skipped (as dmlc's CSV parser does).
//
// The last batch follows MXNet 1.9's BatchLoader:
//   round_batch=True   the batch is completed with rows from the start of the part, num_batch_padd counts
//                      them, and the next epoch starts after those rows (MXNet's round robin: BeforeFirst
//                      after such a batch does not rewind). A BeforeFirst in the middle of an epoch rewinds
//                      to the first row.
//   round_batch=False  the batch keeps batch_size rows; num_batch_padd counts the rows past the data, which
//                      (as in MXNet, which reuses its buffer) repeat the previous batch's rows at the same
//                      positions (zeros when there was no previous batch). The next epoch starts at row 0.
//
// Sharding: num_parts / part_index select a contiguous run of rows (ShardRange), so num_parts workers
// together read every row once per epoch. index holds the row's 0-based position in the file (skipped
// empty lines not counted).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/io.h"

namespace troupe {
namespace {

struct CSVIterParam : Params<CSVIterParam> {
  std::string data_csv;
  TShape data_shape;
  std::string label_csv = "NULL";
  TShape label_shape = TShape{1};
  int batch_size = 0;
  bool round_batch = true;
  std::string dtype = "None";
  int num_parts = 1;
  int part_index = 0;
  static void Declare(ParamSchema<CSVIterParam>& s) {
    s.Field("data_csv", &CSVIterParam::data_csv).Describe("The input CSV file.");
    s.Field("data_shape", &CSVIterParam::data_shape).Describe("The shape of one example (one row).");
    s.Field("label_csv", &CSVIterParam::label_csv)
        .Default("NULL")
        .Describe("The input CSV file of labels; \"NULL\": every label is 0.");
    s.Field("label_shape", &CSVIterParam::label_shape).Default(TShape{1}).Describe("The shape of one label.");
    s.Field("batch_size", &CSVIterParam::batch_size).LowerBound(1).Describe("Batch size.");
    s.Field("round_batch", &CSVIterParam::round_batch)
        .Default(true)
        .Describe("Whether to use round robin to handle overflow batch or not.");
    s.Field("dtype", &CSVIterParam::dtype)
        .Default("None")
        .Choices({"None", "float32"})
        .Describe("Output data type; only float32 (None means float32).");
    s.Field("num_parts", &CSVIterParam::num_parts).Default(1).LowerBound(1).Describe("Partitions of the rows.");
    s.Field("part_index", &CSVIterParam::part_index)
        .Default(0)
        .LowerBound(0)
        .Describe("The partition this iterator reads, in [0, num_parts).");
  }
};

std::string Trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Reads `path`: one row of `width` floats per non-empty line, appended to *values. Returns the rows read.
// `what` ("data_csv", "label_csv") and `shape_name` ("data_shape (2, 2)") name them in errors.
std::int64_t ReadCsv(const std::string& path, std::int64_t width, const char* what, const std::string& shape_name,
                     std::vector<float>* values) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("CSVIter: cannot open " + std::string(what) + " '" + path + "': " + std::strerror(errno) +
                " (check the path)");
  }
  std::string line;
  std::int64_t line_no = 0, rows = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string row = Trim(line);
    if (row.empty()) continue;
    std::int64_t fields = 0;
    std::size_t pos = 0;
    while (true) {
      const std::size_t comma = row.find(',', pos);
      const std::string field = Trim(row.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      ++fields;
      if (fields <= width) {
        float v = 0;
        const char* first = field.data();
        const char* last = first + field.size();
        // from_chars rejects a leading '+', which C's strtof (and hence dmlc) accepts.
        if (first != last && *first == '+') ++first;
        auto [ptr, ec] = std::from_chars(first, last, v);
        if (field.empty() || ec != std::errc() || ptr != last) {
          throw Error("CSVIter: " + path + ":" + std::to_string(line_no) + ": field " + std::to_string(fields) + " ('" +
                      field + "') is not a number");
        }
        values->push_back(v);
      }
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    if (fields != width) {
      throw Error("CSVIter: " + path + ":" + std::to_string(line_no) + ": expected " + std::to_string(width) +
                  " comma-separated values (one sample of " + shape_name + "), got " + std::to_string(fields));
    }
    ++rows;
  }
  if (in.bad()) throw Error("CSVIter: error reading " + std::string(what) + " '" + path + "'");
  return rows;
}

class CSVIter : public DataIter {
 public:
  explicit CSVIter(const Kwargs& kwargs) {
    param_.Init(kwargs, "CSVIter");
    if (param_.data_shape.ndim() < 1 || param_.data_shape.Size() < 1) {
      throw Error("CSVIter: data_shape must have at least one dimension and a non-zero size, got " +
                  param_.data_shape.ToString());
    }
    if (param_.label_shape.ndim() < 1 || param_.label_shape.Size() < 1) {
      throw Error("CSVIter: label_shape must have at least one dimension and a non-zero size, got " +
                  param_.label_shape.ToString());
    }
    data_width_ = param_.data_shape.Size();
    label_width_ = param_.label_shape.Size();
    std::vector<float> data, label;
    const std::int64_t n = ReadCsv(param_.data_csv, data_width_, "data_csv",
                                   "data_shape " + param_detail::PrintTuple(param_.data_shape.ToVector()), &data);
    if (param_.label_csv != "NULL") {
      const std::int64_t m = ReadCsv(param_.label_csv, label_width_, "label_csv",
                                     "label_shape " + param_detail::PrintTuple(param_.label_shape.ToVector()), &label);
      if (m != n) {
        throw Error("CSVIter: label_csv '" + param_.label_csv + "' has " + std::to_string(m) + " rows but data_csv '" +
                    param_.data_csv + "' has " + std::to_string(n) + "; they need one label row per data row");
      }
    } else {
      label.assign(static_cast<std::size_t>(n * label_width_), 0.0f);
    }
    const auto [begin, end] = ShardRange(static_cast<std::uint64_t>(n), param_.num_parts, param_.part_index, "CSVIter");
    begin_ = static_cast<std::int64_t>(begin);
    rows_ = static_cast<std::int64_t>(end - begin);
    if (rows_ == 0) {
      throw Error("CSVIter: part " + std::to_string(param_.part_index) + " of " + std::to_string(param_.num_parts) +
                  " of '" + param_.data_csv + "' (" + std::to_string(n) + (n == 1 ? " row" : " rows") +
                  ") is empty; use fewer parts or more rows");
    }
    // Keep only this part's rows.
    data_.assign(data.begin() + begin_ * data_width_, data.begin() + (begin_ + rows_) * data_width_);
    label_.assign(label.begin() + begin_ * label_width_, label.begin() + (begin_ + rows_) * label_width_);
    data_shape_ = WithBatch(param_.data_shape);
    label_shape_ = WithBatch(param_.label_shape);
    prev_data_.assign(static_cast<std::size_t>(param_.batch_size * data_width_), 0.0f);
    prev_label_.assign(static_cast<std::size_t>(param_.batch_size * label_width_), 0.0f);
    prev_index_.assign(static_cast<std::size_t>(param_.batch_size), 0);
  }

  void BeforeFirst() override {
    // After a batch padded in round-robin mode the rows after the padding start the next epoch.
    if (!param_.round_batch || overflow_ == 0) pos_ = 0;
    overflow_ = 0;
  }

  bool Next() override {
    if (overflow_ != 0) return false;  // the padded batch ended the epoch; until BeforeFirst()
    if (pos_ >= rows_) return false;
    const std::int64_t bs = param_.batch_size;
    std::vector<float> data(prev_data_), label(prev_label_);
    std::vector<std::uint64_t> index(prev_index_);
    std::int64_t top = 0;
    auto take = [&](std::int64_t row) {
      std::copy_n(data_.begin() + row * data_width_, data_width_, data.begin() + top * data_width_);
      std::copy_n(label_.begin() + row * label_width_, label_width_, label.begin() + top * label_width_);
      index[static_cast<std::size_t>(top)] = static_cast<std::uint64_t>(begin_ + row);
      ++top;
    };
    while (top < bs && pos_ < rows_) take(pos_++);
    int pad = 0;
    if (top < bs) {
      if (param_.round_batch) {
        // Wrap around to the start of the part, as often as needed for a part smaller than a batch.
        pos_ = 0;
        while (top < bs) {
          take(pos_);
          pos_ = (pos_ + 1) % rows_;
          ++overflow_;
        }
        pad = static_cast<int>(overflow_);
      } else {
        pad = static_cast<int>(bs - top);  // those rows keep the previous batch's contents
      }
    }
    batch_.data = {NDArray(data_shape_, Context::CPU())};
    batch_.data[0].SyncCopyFromCPU(data.data(), data.size() * sizeof(float));
    batch_.label = {NDArray(label_shape_, Context::CPU())};
    batch_.label[0].SyncCopyFromCPU(label.data(), label.size() * sizeof(float));
    batch_.num_batch_padd = pad;
    batch_.index = index;
    prev_data_ = std::move(data);
    prev_label_ = std::move(label);
    prev_index_ = std::move(index);
    return true;
  }

  const DataBatch& Value() const override { return batch_; }
  std::vector<TShape> DataShapes() const override { return {data_shape_}; }
  std::vector<TShape> LabelShapes() const override { return {label_shape_}; }

 private:
  TShape WithBatch(const TShape& s) const {
    std::vector<std::int64_t> dims{param_.batch_size};
    dims.insert(dims.end(), s.begin(), s.end());
    return TShape(dims);
  }

  CSVIterParam param_;
  std::int64_t data_width_ = 0, label_width_ = 0;
  std::int64_t begin_ = 0, rows_ = 0;          // this part: file rows [begin_, begin_ + rows_)
  std::vector<float> data_, label_;            // this part's rows
  TShape data_shape_, label_shape_;            // with the batch dimension
  std::int64_t pos_ = 0;                       // next row of the part
  std::int64_t overflow_ = 0;                  // rows of the part used to pad the last batch (round_batch)
  std::vector<float> prev_data_, prev_label_;  // the last batch's rows (round_batch=False padding)
  std::vector<std::uint64_t> prev_index_;
  DataBatch batch_;
};

}  // namespace

TROUPE_REGISTER_DATA_ITER(CSVIter,
                          [](const Kwargs& kwargs) -> std::unique_ptr<DataIter> {
                            return std::make_unique<CSVIter>(kwargs);
                          })
    .describe("Iterates over comma-separated values files, one sample per row (MXNet's CSVIter).")
    .add_arguments(CSVIterParam::Docs());

}  // namespace troupe
