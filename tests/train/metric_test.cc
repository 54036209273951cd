// Metrics (train/train.h): accuracy, top-k accuracy, cross-entropy, mse / mae / rmse, f1 and perplexity
// against values computed by hand (and checked with MXNet 1.9.1's mx.metric), the composite metric,
// MXNet's metric names, padding left out, accumulation over batches, Reset, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "train/train.h"

namespace troupe {
namespace {

NDArray Arr(const std::vector<float>& v, const TShape& s) { return NDArray::FromVector<float>(v, s); }

// 4 samples, 3 classes. Row argmax: 1, 0, 2, 2. Labels 1, 2, 2, 0 -> rows 0 and 2 correct.
const std::vector<float> kPred = {0.2f, 0.7f,  0.1f,    // argmax 1
                                  0.5f, 0.2f,  0.3f,    // argmax 0 (label 2 second)
                                  0.1f, 0.3f,  0.6f,    // argmax 2
                                  0.3f, 0.25f, 0.45f};  // argmax 2 (label 0 second)
const std::vector<float> kLabel = {1, 2, 2, 0};

TEST(MetricTest, NamesAreMXNets) {
  EXPECT_EQ(EvalMetric::Create("acc")->name(), "accuracy");
  EXPECT_EQ(EvalMetric::Create("accuracy")->name(), "accuracy");
  EXPECT_EQ(EvalMetric::Create("top_k_accuracy", {{"top_k", "5"}})->name(), "top_k_accuracy_5");
  EXPECT_EQ(EvalMetric::Create("ce")->name(), "cross-entropy");
  EXPECT_EQ(EvalMetric::Create("cross-entropy")->name(), "cross-entropy");
}

TEST(MetricTest, AccuracyByHand) {
  auto m = EvalMetric::Create("acc");
  EXPECT_TRUE(std::isnan(m->Get()));
  m->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})});
  EXPECT_EQ(m->num_samples(), 4);
  EXPECT_DOUBLE_EQ(m->Get(), 0.5);
  // A second batch accumulates: labels 1, 0 with the first two rows -> 1 more correct of 2. 3 / 6.
  m->Update({Arr({1, 0}, {2})}, {Arr({0.2f, 0.7f, 0.1f, 0.1f, 0.8f, 0.1f}, {2, 3})});
  EXPECT_EQ(m->num_samples(), 6);
  EXPECT_DOUBLE_EQ(m->Get(), 3.0 / 6.0);
  m->Reset();
  EXPECT_EQ(m->num_samples(), 0);
  EXPECT_TRUE(std::isnan(m->Get()));
}

TEST(MetricTest, AccuracyLabelsAsColumn) {
  auto m = EvalMetric::Create("acc");
  m->Update({Arr(kLabel, {4, 1})}, {Arr(kPred, {4, 3})});
  EXPECT_DOUBLE_EQ(m->Get(), 0.5);
}

TEST(MetricTest, PaddingIsLeftOut) {
  // The last two rows are padding: only rows 0 (correct) and 1 (wrong) count.
  auto acc = EvalMetric::Create("acc");
  acc->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})}, 2);
  EXPECT_EQ(acc->num_samples(), 2);
  EXPECT_DOUBLE_EQ(acc->Get(), 0.5);
  // Padding rows that are all wrong must not lower the figure: labels 1, 0 then two wrong padded rows.
  auto acc2 = EvalMetric::Create("acc");
  acc2->Update({Arr({1, 0, 0, 1}, {4})}, {Arr({0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1}, {4, 3})}, 2);
  EXPECT_DOUBLE_EQ(acc2->Get(), 1.0);

  auto ce = EvalMetric::Create("ce");
  ce->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})}, 3);
  EXPECT_EQ(ce->num_samples(), 1);
  EXPECT_NEAR(ce->Get(), -std::log(0.7), 1e-6);
}

TEST(MetricTest, TopKByHand) {
  // top 2: row 0 label 1 (rank 1) hit; row 1 label 2 (0.3, rank 2) hit; row 2 label 2 hit; row 3 label 0
  // (0.3, rank 2) hit -> 4/4. top 1 would be 2/4.
  auto top2 = EvalMetric::Create("top_k_accuracy", {{"top_k", "2"}});
  top2->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})});
  EXPECT_DOUBLE_EQ(top2->Get(), 1.0);
  auto top1 = EvalMetric::Create("top_k_accuracy", {{"top_k", "1"}});
  top1->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})});
  EXPECT_DOUBLE_EQ(top1->Get(), 0.5);
  // Labels at the lowest score: only top 3 finds them.
  const std::vector<float> worst = {2, 1, 0, 1};
  auto top2b = EvalMetric::Create("top_k_accuracy", {{"top_k", "2"}});
  top2b->Update({Arr(worst, {4})}, {Arr(kPred, {4, 3})});
  EXPECT_DOUBLE_EQ(top2b->Get(), 0.0);
  auto top3 = EvalMetric::Create("top_k_accuracy", {{"top_k", "3"}});
  top3->Update({Arr(worst, {4})}, {Arr(kPred, {4, 3})});
  EXPECT_DOUBLE_EQ(top3->Get(), 1.0);
}

TEST(MetricTest, CrossEntropyByHand) {
  auto m = EvalMetric::Create("ce");
  m->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})});
  // -log of the probability at the label, averaged (eps 1e-12 is far below float precision here).
  const double expected = -(std::log(0.7) + std::log(0.3) + std::log(0.6) + std::log(0.3)) / 4.0;
  EXPECT_NEAR(m->Get(), expected, 1e-6);
  // eps keeps a zero probability finite: -log(0 + 1e-12) = 27.631...
  auto z = EvalMetric::Create("ce");
  z->Update({Arr({0}, {1})}, {Arr({0.0f, 1.0f}, {1, 2})});
  EXPECT_NEAR(z->Get(), 12 * std::log(10.0), 1e-6);
}

TEST(MetricTest, Float64PredictionsWork) {
  auto m = EvalMetric::Create("acc");
  std::vector<double> p(kPred.begin(), kPred.end());
  m->Update({Arr(kLabel, {4})}, {NDArray::FromVector<double>(p, {4, 3})});
  EXPECT_DOUBLE_EQ(m->Get(), 0.5);
}

template <typename F>
void ExpectErrorWith(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no troupe::Error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// MXNet's regression metrics: per batch the mean over its elements, the metric the mean of the batches.
// Batch 1: label (1, 2), prediction (1.5, 1): squared errors 0.25, 1 (mean 0.625), absolute 0.5, 1 (0.75);
// batch 2: label 0, prediction 2: 4 and 2. mse (0.625 + 4) / 2, mae (0.75 + 2) / 2, rmse (sqrt(0.625) + 2) / 2
// (MXNet 1.9.1: 2.3125, 1.375, 1.3952847).
TEST(MetricTest, RegressionMetricsByHand) {
  const std::vector<std::pair<std::string, double>> want = {
      {"mse", 2.3125}, {"mae", 1.375}, {"rmse", (std::sqrt(0.625) + 2) / 2}};
  for (const auto& [name, value] : want) {
    SCOPED_TRACE(name);
    auto m = EvalMetric::Create(name);
    EXPECT_EQ(m->name(), name);
    m->Update({Arr({1, 2}, {2})}, {Arr({1.5f, 1}, {2})});
    m->Update({Arr({0}, {1})}, {Arr({2}, {1})});
    EXPECT_EQ(m->num_samples(), 2);  // batches, as MXNet's num_inst
    EXPECT_NEAR(m->Get(), value, 1e-12);
  }
  // A (batch,) label against (batch, 2) scores broadcasts as numpy: (1 - 0.5)^2, (1 - 1)^2, 0^2, (0 - 2)^2 -> 4.25 / 4.
  auto mse = EvalMetric::Create("mse");
  mse->Update({Arr({1, 0}, {2})}, {Arr({0.5f, 1, 0, 2}, {2, 2})});
  EXPECT_NEAR(mse->Get(), 1.0625, 1e-12);
  // Padding rows are left out: only row 0, (1 - 1.5)^2.
  auto padded = EvalMetric::Create("mse");
  padded->Update({Arr({1, 2}, {2})}, {Arr({1.5f, 1}, {2})}, 1);
  EXPECT_NEAR(padded->Get(), 0.25, 1e-12);
}

// Binary F1 of class 1. Batch 1: predicted 1, 1, 0, 0 against labels 1, 0, 1, 0: tp 1, fp 1, fn 1 -> 0.5.
// Batch 2: predicted 1, 0 against 1, 1: tp 1, fn 1 -> precision 1, recall 0.5, F1 2/3. macro: the mean of
// the batches' (0.5 + 2/3) / 2; micro: tp 2, fp 1, fn 2 -> 4/7 (MXNet 1.9.1: 0.583333, 0.571429).
TEST(MetricTest, F1ByHand) {
  for (const std::string average : {"macro", "micro"}) {
    SCOPED_TRACE(average);
    auto m = EvalMetric::Create("f1", {{"average", average}});
    EXPECT_EQ(m->name(), "f1");
    m->Update({Arr({1, 0, 1, 0}, {4})}, {Arr({0, 1, 0.2f, 0.8f, 0.9f, 0.1f, 0.6f, 0.4f}, {4, 2})});
    EXPECT_NEAR(m->Get(), 0.5, 1e-12);
    m->Update({Arr({1, 1}, {2})}, {Arr({0.3f, 0.7f, 0.9f, 0.1f}, {2, 2})});
    EXPECT_NEAR(m->Get(), average == "macro" ? (0.5 + 2.0 / 3.0) / 2 : 4.0 / 7.0, 1e-12);
    m->Reset();
    EXPECT_TRUE(std::isnan(m->Get()));
  }
  ExpectErrorWith([] { EvalMetric::Create("f1", {{"average", "weighted"}}); }, "average");
  auto f1 = EvalMetric::Create("f1");
  ExpectErrorWith([&] { f1->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})}); }, "binary");
}

// exp of the mean negative log-probability of the labels: -log 0.5 - log 0.8 over 2 -> 1 / sqrt(0.4);
// ignore_label 1 leaves label 0 alone: exp(-log 0.5) = 2.
TEST(MetricTest, PerplexityByHand) {
  const auto pred = Arr({0.5f, 0.25f, 0.25f, 0.1f, 0.8f, 0.1f}, {2, 3});
  auto m = EvalMetric::Create("perplexity");
  EXPECT_EQ(m->name(), "perplexity");
  m->Update({Arr({0, 1}, {2})}, {pred});
  EXPECT_EQ(m->num_samples(), 2);
  EXPECT_NEAR(m->Get(), 1 / std::sqrt(0.4), 1e-6);
  auto ignoring = EvalMetric::Create("perplexity", {{"ignore_label", "1"}});
  ignoring->Update({Arr({0, 1}, {2})}, {pred});
  EXPECT_EQ(ignoring->num_samples(), 1);
  EXPECT_NEAR(ignoring->Get(), 2.0, 1e-6);
  // A zero probability counts as 1e-10 (MXNet's floor), not as infinity.
  auto floor = EvalMetric::Create("perplexity");
  floor->Update({Arr({2}, {1})}, {Arr({1, 0, 0}, {1, 3})});
  EXPECT_NEAR(std::log(floor->Get()), -std::log(1e-10), 1e-6);
}

// Several metrics together: each keeps its own figures; Get is the first one's.
TEST(MetricTest, CompositeHoldsEveryMetric) {
  CompositeEvalMetric all;
  all.Add(EvalMetric::Create("acc"));
  all.Add(EvalMetric::Create("top_k_acc", {{"top_k", "2"}}));
  all.Add(EvalMetric::Create("ce"));
  all.Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})});
  const auto nv = all.GetNameValue();
  ASSERT_EQ(nv.size(), 3u);
  EXPECT_EQ(nv[0].first, "accuracy");
  EXPECT_DOUBLE_EQ(nv[0].second, 0.5);
  EXPECT_EQ(nv[1].first, "top_k_accuracy_2");
  EXPECT_DOUBLE_EQ(nv[1].second, 1.0);  // every label is first or second in its row
  EXPECT_EQ(nv[2].first, "cross-entropy");
  EXPECT_NEAR(nv[2].second,
              -(std::log(0.7 + 1e-12) + std::log(0.3 + 1e-12) + std::log(0.6 + 1e-12) + std::log(0.3 + 1e-12)) / 4,
              1e-6);
  EXPECT_DOUBLE_EQ(all.Get(), 0.5);
  all.Reset();
  EXPECT_TRUE(std::isnan(all.GetNameValue()[1].second));
}

TEST(MetricTest, Errors) {
  ExpectErrorWith([] { EvalMetric::Create("f1-ish"); }, "top_k_accuracy");
  ExpectErrorWith([] { EvalMetric::Create("top_k_accuracy", {{"top_k", "0"}}); }, "top_k");
  ExpectErrorWith([] { EvalMetric::Create("acc", {{"bogus", "1"}}); }, "bogus");
  ExpectErrorWith([] { EvalMetric::Create("mse", {{"bogus", "1"}}); }, "bogus");
  auto mse = EvalMetric::Create("mse");
  ExpectErrorWith([&] { mse->Update({Arr({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3})}, {Arr({1, 2, 3, 4, 5, 6}, {3, 2})}); },
                  "broadcast");
  auto m = EvalMetric::Create("acc");
  ExpectErrorWith([&] { m->Update({Arr(kLabel, {4})}, {}); }, "label");
  ExpectErrorWith([&] { m->Update({Arr({1, 2, 0}, {3})}, {Arr(kPred, {4, 3})}); }, "(4,3)");
  ExpectErrorWith([&] { m->Update({Arr(kLabel, {4})}, {Arr(kPred, {4, 3})}, 5); }, "num_pad");
  auto ce = EvalMetric::Create("ce");
  ExpectErrorWith([&] { ce->Update({Arr({3, 0, 0, 0}, {4})}, {Arr(kPred, {4, 3})}); }, "label 3");
}

}  // namespace
}  // namespace troupe
