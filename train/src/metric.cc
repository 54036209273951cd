// Evaluation metrics, as MXNet 1.9's python/mxnet/metric.py (Accuracy, TopKAccuracy, CrossEntropy, MSE, MAE,
// RMSE, F1, Perplexity, CompositeEvalMetric), computed on the host: Update waits for the predictions (the caller's metric update is where training synchronises).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
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

// num_pad (the batch's last rows that are padding) within [0, batch].
void CheckPad(const std::string& metric, int num_pad, std::int64_t batch) {
  if (num_pad < 0 || num_pad > batch) {
    throw Error("metric " + metric + ": num_pad " + std::to_string(num_pad) + " outside [0, batch size " +
                std::to_string(batch) + "]");
  }
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
  CheckPad(metric, num_pad, batch);
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

// MSE, MAE and RMSE (MXNet's regression metrics): per (label, prediction) pair, both as host matrices with the
// batch as rows (a one-dimensional array becomes one column, as MXNet's reshape(shape[0], 1)), broadcast
// against each other as numpy does, the mean of err(label - pred) over every element, added once per pair.
class RegressionMetric : public EvalMetric {
 public:
  enum class Kind { kMse, kMae, kRmse };
  RegressionMetric(std::string name, Kind kind) : EvalMetric(std::move(name)), kind_(kind) {}
  void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad) override {
    CheckCounts(name_, labels, preds);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const NDArray& label = labels[i];
      const NDArray& pred = preds[i];
      if (pred.shape().ndim() < 1 || label.shape().ndim() < 1 || label.shape()[0] != pred.shape()[0]) {
        throw Error("metric " + name_ + ": label shape " + label.shape().ToString() + " and prediction shape " +
                    pred.shape().ToString() + " differ in the batch (first) dimension");
      }
      const std::int64_t batch = pred.shape()[0];
      CheckPad(name_, num_pad, batch);
      const std::int64_t rows = batch - num_pad;
      const std::int64_t lc = batch == 0 ? 1 : label.Size() / batch;
      const std::int64_t pc = batch == 0 ? 1 : pred.Size() / batch;
      if (lc != pc && lc != 1 && pc != 1) {
        throw Error("metric " + name_ + ": label shape " + label.shape().ToString() + " and prediction shape " +
                    pred.shape().ToString() + " do not broadcast (want the same number of values per row, or one)");
      }
      if (rows == 0) continue;
      const std::vector<double> l = HostValues(label);
      const std::vector<double> p = HostValues(pred);
      const std::int64_t cols = std::max(lc, pc);
      double sum = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          const double d = l[r * lc + (lc == 1 ? 0 : c)] - p[r * pc + (pc == 1 ? 0 : c)];
          sum += kind_ == Kind::kMae ? std::abs(d) : d * d;
        }
      }
      const double mean = sum / static_cast<double>(rows * cols);
      sum_metric_ += kind_ == Kind::kRmse ? std::sqrt(mean) : mean;
      num_inst_ += 1;  // MXNet counts batches here, not samples
    }
  }

 private:
  Kind kind_;
};

// MXNet's F1 (binary: class 1 is the positive one). "macro": every Update adds the F1 of its own counts and
// the metric is their mean; "micro": the F1 of all counts since Reset.
class F1 : public EvalMetric {
 public:
  explicit F1(bool micro) : EvalMetric("f1"), micro_(micro) {}
  void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad) override {
    std::int64_t tp = 0, fp = 0, fn = 0, n = 0;
    CheckCounts(name_, labels, preds);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      std::int64_t classes = 0;
      const std::int64_t rows = CheckPair(name_, labels[i], preds[i], num_pad, &classes);
      const std::vector<double> p = HostValues(preds[i]);
      const std::vector<double> l = HostValues(labels[i]);
      std::set<std::int64_t> distinct;
      for (std::int64_t r = 0; r < rows; ++r) distinct.insert(static_cast<std::int64_t>(l[r]));
      if (distinct.size() > 2) {
        throw Error("metric f1 is binary (two classes), but the labels have " + std::to_string(distinct.size()) +
                    " distinct values; use acc or another metric for more classes");
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const double* row = p.data() + r * classes;
        const bool predicted = (std::max_element(row, row + classes) - row) == 1;
        const bool actual = static_cast<std::int64_t>(l[r]) == 1;
        tp += predicted && actual;
        fp += predicted && !actual;
        fn += !predicted && actual;
      }
      n += rows;
    }
    if (micro_) {
      tp_ += tp;
      fp_ += fp;
      fn_ += fn;
      total_ += n;
      sum_metric_ = Score(tp_, fp_, fn_) * static_cast<double>(total_);
      num_inst_ = total_;
    } else {
      sum_metric_ += Score(tp, fp, fn);
      num_inst_ += 1;
    }
  }
  void Reset() override {
    EvalMetric::Reset();
    tp_ = fp_ = fn_ = total_ = 0;
  }

 private:
  static double Score(std::int64_t tp, std::int64_t fp, std::int64_t fn) {
    const double precision = tp + fp > 0 ? static_cast<double>(tp) / static_cast<double>(tp + fp) : 0.0;
    const double recall = tp + fn > 0 ? static_cast<double>(tp) / static_cast<double>(tp + fn) : 0.0;
    return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
  }
  bool micro_;
  std::int64_t tp_ = 0, fp_ = 0, fn_ = 0, total_ = 0;
};

// MXNet's Perplexity: the probability of the label picked along the last axis of the prediction (one label
// per row of it), -log(max(1e-10, p)) summed; labels equal to ignore_label are not counted. Get: exp of the
// mean.
class Perplexity : public EvalMetric {
 public:
  explicit Perplexity(std::optional<double> ignore_label) : EvalMetric("perplexity"), ignore_(ignore_label) {}
  void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad) override {
    CheckCounts(name_, labels, preds);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const NDArray& label = labels[i];
      const NDArray& pred = preds[i];
      if (pred.shape().ndim() < 1 || label.shape().ndim() < 1) {
        throw Error("metric perplexity: labels and predictions need a batch dimension");
      }
      const std::int64_t classes = pred.shape()[pred.shape().ndim() - 1];
      if (classes == 0 || label.Size() * classes != pred.Size()) {
        throw Error("metric perplexity: label shape " + label.shape().ToString() + " does not match prediction shape " +
                    pred.shape().ToString() + " (want one label per row of the last axis)");
      }
      // Rows of the batch's padding: the label count per batch row times num_pad, at the end.
      const std::int64_t batch = pred.shape()[0];
      CheckPad(name_, num_pad, batch);
      const std::int64_t per_row = batch == 0 ? 0 : label.Size() / batch;
      const std::int64_t count = label.Size() - per_row * num_pad;
      const std::vector<double> l = HostValues(label);
      const std::vector<double> p = HostValues(pred);
      for (std::int64_t j = 0; j < count; ++j) {
        if (ignore_ && l[j] == *ignore_) continue;
        sum_metric_ -= std::log(std::max(1e-10, p[j * classes + LabelClass(l[j], classes, name_)]));
        num_inst_ += 1;
      }
    }
  }
  double Get() const override {
    if (num_inst_ == 0) return std::numeric_limits<double>::quiet_NaN();
    return std::exp(sum_metric_ / static_cast<double>(num_inst_));
  }

 private:
  std::optional<double> ignore_;
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

struct F1Param : Params<F1Param> {
  std::string average = "macro";
  static void Declare(ParamSchema<F1Param>& s) {
    s.Field("average", &F1Param::average)
        .Default("macro")
        .Choices({"macro", "micro"})
        .Describe("macro: the mean of every update's F1; micro: the F1 of all counts.");
  }
};

struct PerplexityParam : Params<PerplexityParam> {
  std::optional<double> ignore_label;
  static void Declare(ParamSchema<PerplexityParam>& s) {
    s.Field("ignore_label", &PerplexityParam::ignore_label)
        .Default(std::optional<double>())
        .Describe("Labels of this value are not counted (None: every label counts).");
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
  if (name == "mse" || name == "mae" || name == "rmse") {
    NoParam p;
    p.Init(params, "metric " + name);
    return std::make_unique<RegressionMetric>(name, name == "mse"   ? RegressionMetric::Kind::kMse
                                                    : name == "mae" ? RegressionMetric::Kind::kMae
                                                                    : RegressionMetric::Kind::kRmse);
  }
  if (name == "f1") {
    F1Param p;
    p.Init(params, "metric f1");
    return std::make_unique<F1>(p.average == "micro");
  }
  if (name == "perplexity") {
    PerplexityParam p;
    p.Init(params, "metric perplexity");
    return std::make_unique<Perplexity>(p.ignore_label);
  }
  throw Error("unknown metric '" + name +
              "': known metrics are acc (accuracy), top_k_acc (top_k_accuracy; parameter top_k), "
              "ce (cross-entropy; parameter eps), mse, mae, rmse, f1 (parameter average), "
              "perplexity (parameter ignore_label)");
}

std::vector<std::string> EvalMetric::ListNames() {
  return {"acc", "accuracy", "top_k_acc", "top_k_accuracy", "ce", "cross-entropy", "mse", "mae", "rmse", "f1",
          "perplexity"};
}

void CompositeEvalMetric::Add(std::unique_ptr<EvalMetric> metric) {
  if (!metric) throw Error("CompositeEvalMetric::Add: null metric");
  metrics_.push_back(std::move(metric));
}

void CompositeEvalMetric::Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad) {
  for (auto& m : metrics_) m->Update(labels, preds, num_pad);
  num_inst_ = metrics_.empty() ? 0 : metrics_.front()->num_samples();
}

void CompositeEvalMetric::Reset() {
  EvalMetric::Reset();
  for (auto& m : metrics_) m->Reset();
}

double CompositeEvalMetric::Get() const {
  return metrics_.empty() ? std::numeric_limits<double>::quiet_NaN() : metrics_.front()->Get();
}

std::vector<std::pair<std::string, double>> CompositeEvalMetric::GetNameValue() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& m : metrics_) {
    for (auto& nv : m->GetNameValue()) out.push_back(std::move(nv));
  }
  return out;
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
