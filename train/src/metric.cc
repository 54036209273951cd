// Evaluation metrics, as MXNet's python/mxnet/metric.py (Accuracy, TopKAccuracy, CrossEntropy), computed on
// the host: Update waits for the predictions (the caller's metric update is where training synchronises).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "train/train.h"

namespace troupe {
namespace {

// The values of an array as doubles on the host (waits for it).
std::vector<double> HostValues(const NDArray& a) {
  NDArray c = a.ctx().dev_type == DeviceType::kGPU ? a.CopyTo(Context::CPU()) : a;
  if (c.dtype() == DType::kFloat64) return c.ToVector<double>();
  if (c.dtype() == DType::kFloat32) {
    std::vector<float> f = c.ToVector<float>();
    return std::vector<double>(f.begin(), f.end());
  }
  return c.AsType(DType::kFloat64).ToVector<double>();
}

// Shared checks of one (label, pred) pair of a classifier: pred (batch, classes), label (batch,) or
// (batch, 1). Returns the number of rows to count (batch - num_pad).
std::int64_t CheckPair(const std::string& metric, const NDArray& label, const NDArray& pred, int num_pad,
                       std::int64_t* classes) {
  if (pred.shape().ndim() < 1 || label.shape().ndim() < 1) {
    throw Error("metric " + metric + ": labels and predictions need a batch dimension (got label " +
                label.shape().ToString() + ", prediction " + pred.shape().ToString() + ")");
  }
  const std::int64_t batch = pred.shape()[0];
  if (label.shape()[0] != batch || label.Size() != batch) {
    throw Error("metric " + metric + ": label shape " + label.shape().ToString() + " does not match prediction shape " +
                pred.shape().ToString() + " (expected one label per row of the prediction)");
  }
  *classes = batch == 0 ? 0 : pred.Size() / batch;
  if (num_pad < 0 || num_pad > batch) {
    throw Error("metric " + metric + ": num_pad " + std::to_string(num_pad) + " outside [0, batch size " +
                std::to_string(batch) + "]");
  }
  return batch - num_pad;
}

void CheckCounts(const std::string& metric, const std::vector<NDArray>& labels, const std::vector<NDArray>& preds) {
  if (labels.size() != preds.size()) {
    throw Error("metric " + metric + ": " + std::to_string(labels.size()) + " label arrays but " +
                std::to_string(preds.size()) + " predictions (expected one prediction per label)");
  }
}

std::int64_t LabelClass(double v, std::int64_t classes, const std::string& metric) {
  const auto k = static_cast<std::int64_t>(v);
  if (k < 0 || k >= classes) {
    throw Error("metric " + metric + ": label " + std::to_string(v) + " outside [0, " + std::to_string(classes) +
                ") (the number of classes the prediction has)");
  }
  return k;
}

// Calls row_fn(predictions of the row, label value, classes) for every row of every (label, prediction)
// pair that is not padding, and counts the rows in *num_inst.
template <typename RowFn>
void ForEachRow(const std::string& name, const std::vector<NDArray>& labels, const std::vector<NDArray>& preds,
                int num_pad, std::int64_t* num_inst, RowFn&& row_fn) {
  CheckCounts(name, labels, preds);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    std::int64_t classes = 0;
    const std::int64_t rows = CheckPair(name, labels[i], preds[i], num_pad, &classes);
    const std::vector<double> p = HostValues(preds[i]);
    const std::vector<double> l = HostValues(labels[i]);
    for (std::int64_t r = 0; r < rows; ++r) row_fn(p.data() + r * classes, l[r], classes);
    *num_inst += rows;
  }
}

class Accuracy : public EvalMetric {
 public:
  Accuracy() : EvalMetric("accuracy") {}
  void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad) override {
    ForEachRow(name_, labels, preds, num_pad, &num_inst_, [&](const double* row, double label, std::int64_t classes) {
      // classes == 1: a prediction already given as a class index (MXNet compares directly when shapes
      // match); otherwise argmax, the first maximum on ties (numpy's argmax).
      const std::int64_t predicted =
          classes == 1 ? static_cast<std::int64_t>(row[0]) : std::max_element(row, row + classes) - row;
      if (predicted == static_cast<std::int64_t>(label)) sum_metric_ += 1;
    });
  }
};

class TopKAccuracy : public EvalMetric {
 public:
  explicit TopKAccuracy(int k) : EvalMetric("top_k_accuracy_" + std::to_string(k)), k_(k) {}
  void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad) override {
    ForEachRow(name_, labels, preds, num_pad, &num_inst_, [&](const double* row, double label, std::int64_t classes) {
      const std::int64_t k = LabelClass(label, classes, name_);
      // The label is among the top k when fewer than k classes score strictly higher.
      std::int64_t higher = 0;
      for (std::int64_t c = 0; c < classes; ++c) higher += row[c] > row[k] ? 1 : 0;
      if (higher < k_) sum_metric_ += 1;
    });
  }

 private:
  int k_;
};

class CrossEntropy : public EvalMetric {
 public:
  explicit CrossEntropy(double eps) : EvalMetric("cross-entropy"), eps_(eps) {}
  void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad) override {
    ForEachRow(name_, labels, preds, num_pad, &num_inst_, [&](const double* row, double label, std::int64_t classes) {
      sum_metric_ += -std::log(row[LabelClass(label, classes, name_)] + eps_);
    });
  }

 private:
  double eps_;
};

struct TopKParam : Params<TopKParam> {
  int top_k = 1;
  static void Declare(ParamSchema<TopKParam>& s) {
    s.Field("top_k", &TopKParam::top_k).Default(1).LowerBound(1).Describe("Classes counted as a hit.");
  }
};

struct CrossEntropyParam : Params<CrossEntropyParam> {
  double eps = 1e-12;
  static void Declare(ParamSchema<CrossEntropyParam>& s) {
    s.Field("eps", &CrossEntropyParam::eps)
        .Default(1e-12)
        .LowerBound(0)
        .Describe("Added to the probability before the logarithm (MXNet's default 1e-12).");
  }
};

struct NoParam : Params<NoParam> {
  static void Declare(ParamSchema<NoParam>&) {}
};

}  // namespace

std::unique_ptr<EvalMetric> EvalMetric::Create(const std::string& name, const Kwargs& params) {
  if (name == "acc" || name == "accuracy") {
    NoParam p;
    p.Init(params, "metric " + name);
    return std::make_unique<Accuracy>();
  }
  if (name == "top_k_accuracy" || name == "top_k_acc") {
    TopKParam p;
    p.Init(params, "metric " + name);
    return std::make_unique<TopKAccuracy>(p.top_k);
  }
  if (name == "ce" || name == "cross-entropy") {
    CrossEntropyParam p;
    p.Init(params, "metric " + name);
    return std::make_unique<CrossEntropy>(p.eps);
  }
  throw Error("unknown metric '" + name +
              "': known metrics are acc (accuracy), top_k_accuracy (top_k_acc; parameter top_k), "
              "ce (cross-entropy; parameter eps)");
}

void EvalMetric::Reset() {
  sum_metric_ = 0;
  num_inst_ = 0;
}

double EvalMetric::Get() const {
  if (num_inst_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return sum_metric_ / static_cast<double>(num_inst_);
}

}  // namespace troupe
