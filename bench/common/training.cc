#include "bench/common/training.h"

#include <cmath>
#include <cstdint>

#include "base/error.h"
#include "bench/common/measure.h"

namespace troupe::bench {

std::vector<DataBatch> LoadMnistBatches(const std::string& dir, int batch, int count, const std::string& who) {
  auto it = CreateDataIter("MNISTIter", {{"image", dir + "/t10k-images-idx3-ubyte.gz"},
                                         {"label", dir + "/t10k-labels-idx1-ubyte.gz"},
                                         {"batch_size", std::to_string(batch)},
                                         {"flat", "False"},
                                         {"shuffle", "False"}});
  std::vector<DataBatch> out;
  for (it->BeforeFirst(); static_cast<int>(out.size()) < count && it->Next();) {
    DataBatch copy;
    for (const NDArray& a : it->Value().data) copy.data.push_back(a.CopyTo(Context::CPU()));
    for (const NDArray& a : it->Value().label) copy.label.push_back(a.CopyTo(Context::CPU()));
    copy.num_batch_padd = it->Value().num_batch_padd;
    out.push_back(std::move(copy));
  }
  if (static_cast<int>(out.size()) < count) {
    throw Error(who + ": " + dir + " holds fewer than " + std::to_string(count) + " batches of " +
                std::to_string(batch) + " (give the Fashion-MNIST folder with --mnist-dir)");
  }
  for (const DataBatch& b : out) {
    for (const NDArray& a : b.data) a.WaitToRead();
    for (const NDArray& a : b.label) a.WaitToRead();
  }
  return out;
}

double BatchesAccuracy(Module* module, const std::vector<DataBatch>& batches, std::vector<std::string>* problems,
                       bool is_train) {
  std::int64_t right = 0, rows_seen = 0;
  for (const DataBatch& b : batches) {
    module->Forward(b, is_train);
    const NDArray& out = module->GetOutputs().at(0);
    const std::vector<float> p = out.ToVector<float>();
    const std::vector<float> labels = b.label.at(0).ToVector<float>();
    const std::int64_t rows = out.shape()[0], classes = out.shape()[1];
    if (rows != static_cast<std::int64_t>(labels.size())) {
      problems->push_back("the outputs have " + std::to_string(rows) + " rows for a batch of " +
                          std::to_string(labels.size()));
      return 0;
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      std::int64_t best = 0;
      for (std::int64_t c = 0; c < classes; ++c) {
        const float v = p[static_cast<std::size_t>(r * classes + c)];
        if (!std::isfinite(v) && problems->size() < 3) problems->push_back("a non-finite probability");
        sum += v;
        if (v > p[static_cast<std::size_t>(r * classes + best)]) best = c;
      }
      if (std::abs(sum - 1.0) > 1e-3 && problems->size() < 3) {
        problems->push_back("a row of probabilities sums to " + Fmt("%.6f", sum));
      }
      right += best == static_cast<std::int64_t>(labels[static_cast<std::size_t>(r)]);
    }
    rows_seen += rows;
  }
  return rows_seen > 0 ? static_cast<double>(right) / static_cast<double>(rows_seen) : 0.0;
}

}  // namespace troupe::bench
