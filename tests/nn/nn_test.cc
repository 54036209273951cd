// The module API (nn/): against MXNet 1.9.1's Gluon on the same inputs (tests/nn/data/make_nn.py): every loss,
// single layers (1-D, 2-D and 3-D convolution and pooling among them), a small network's training-mode outputs,
// loss and parameter gradients (imperative and hybridized), two Trainer steps, loading Gluon's save_parameters
// file and importing Gluon's export; plus deferred shapes, names, save/load and export round trips, stale
// gradients, Sequential of imperative blocks, and the DataLoader's batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "nn/basic_layers.h"
#include "nn/block.h"
#include "nn/conv_layers.h"
#include "nn/data_loader.h"
#include "nn/loss.h"
#include "nn/trainer.h"
#include "op/autograd.h"
#include "op/imperative.h"
#include "tensor/resource.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectCloseArrays;
using test::ExpectError;

std::string Data(const std::string& f) { return std::string(TROUPE_TEST_DATA_DIR) + "/" + f; }

std::map<std::string, NDArray> Fixture() { return test::LoadNamed(Data("nn.params")); }

class NNTest : public ::testing::Test {
 protected:
  std::map<std::string, NDArray> f_ = Fixture();
};

TEST_F(NNTest, LossesMatchGluon) {
  const NDArray pred = f_.at("loss:in:pred"), label = f_.at("loss:in:label");
  const NDArray p01 = f_.at("loss:in:pred01"), l01 = f_.at("loss:in:label01");
  ExpectCloseArrays(nn::SoftmaxCrossEntropyLoss()(pred, label), f_.at("loss:softmax_ce"), "softmax_ce");
  ExpectCloseArrays(nn::SoftmaxCrossEntropyLoss(-1, false)(pred, f_.at("loss:in:dist")), f_.at("loss:softmax_ce_dense"),
              "softmax_ce dense labels");
  ExpectCloseArrays(nn::SoftmaxCrossEntropyLoss(-1, true, false, 0.5f)(pred, label), f_.at("loss:softmax_ce_weighted"),
              "softmax_ce weight 0.5");
  ExpectCloseArrays(nn::L2Loss()(p01, l01), f_.at("loss:l2"), "l2");
  ExpectCloseArrays(nn::L1Loss()(p01, l01), f_.at("loss:l1"), "l1");
  ExpectCloseArrays(nn::HuberLoss(0.5f)(p01, l01), f_.at("loss:huber"), "huber");
  ExpectCloseArrays(nn::SigmoidBinaryCrossEntropyLoss()(p01, l01), f_.at("loss:sigmoid_bce"), "sigmoid_bce");
  ExpectCloseArrays(nn::SigmoidBinaryCrossEntropyLoss(true)(Invoke("sigmoid", {p01})[0], l01), f_.at("loss:sigmoid_bce_prob"),
              "sigmoid_bce from probabilities");
  ExpectError([&] { nn::L2Loss()(std::vector<NDArray>{p01}); }, {"L2Loss", "two inputs"});
}

// Each layer of the fixture's single-layer cases, with Gluon's parameter values: outputs, the input's gradient
// and every parameter's gradient under a head gradient, imperatively and hybridized.
TEST_F(NNTest, LayersMatchGluon) {
  using V = std::vector<int>;
  const std::vector<std::pair<std::string, std::function<std::shared_ptr<nn::HybridBlock>()>>> cases = {
      {"conv1d", [] { return std::make_shared<nn::Conv1D>(3, V{3}, V{2}, V{1}); }},
      {"conv2d_transpose", [] { return std::make_shared<nn::Conv2DTranspose>(3, V{3, 3}, V{2, 2}, V{1, 1}, V{1, 1}); }},
      {"conv2d_groups", [] { return std::make_shared<nn::Conv2D>(4, V{3, 3}, V{}, V{1, 1}, V{2, 2}, 2); }},
      {"avgpool2d", [] { return std::make_shared<nn::AvgPool2D>(V{3, 3}, V{2, 2}, V{1, 1}, false, false); }},
      {"maxpool1d_ceil", [] { return std::make_shared<nn::MaxPool1D>(V{2}, V{}, V{}, true); }},
      {"global_avg2d", [] { return std::make_shared<nn::GlobalAvgPool2D>(); }},
      {"global_max1d", [] { return std::make_shared<nn::GlobalMaxPool1D>(); }},
      {"embedding", [] { return std::make_shared<nn::Embedding>(10, 4); }},
      {"layernorm", [] { return std::make_shared<nn::LayerNorm>(); }},
      {"leakyrelu", [] { return std::make_shared<nn::LeakyReLU>(0.1f); }},
      {"dense_noflatten", [] { return std::make_shared<nn::Dense>(5, "sigmoid", true, false); }},
      {"softrelu", [] { return std::make_shared<nn::Activation>("softrelu"); }},
      {"batchnorm_last_axis", [] { return std::make_shared<nn::BatchNorm>(-1, 0.5f); }},
      // 3-D (NCDHW).
      {"conv3d", [] { return std::make_shared<nn::Conv3D>(2, V{2, 2, 2}, V{}, V{}, V{}, 1, "relu"); }},
      {"conv3d_strided", [] { return std::make_shared<nn::Conv3D>(4, V{3, 2, 3}, V{2, 1, 1}, V{1, 1, 0}, V{1, 2, 1}, 2); }},
      {"conv3d_nobias",
       [] { return std::make_shared<nn::Conv3D>(3, V{2, 2, 2}, V{2, 2, 2}, V{}, V{}, 1, "tanh", false); }},
      {"maxpool3d", [] { return std::make_shared<nn::MaxPool3D>(V{2, 2, 2}, V{2, 1, 2}, V{1, 0, 1}); }},
      {"maxpool3d_ceil", [] { return std::make_shared<nn::MaxPool3D>(V{2, 2, 2}, V{}, V{}, true); }},
      {"avgpool3d", [] { return std::make_shared<nn::AvgPool3D>(V{3, 3, 3}, V{2, 2, 2}, V{1, 1, 1}, false, false); }},
      {"avgpool3d_ceil", [] { return std::make_shared<nn::AvgPool3D>(V{2, 3, 2}, V{1, 2, 2}, V{1, 1, 0}, true); }},
      {"global_avg3d", [] { return std::make_shared<nn::GlobalAvgPool3D>(); }},
      {"global_max3d", [] { return std::make_shared<nn::GlobalMaxPool3D>(); }},
  };
  for (bool hybrid : {false, true}) {
    for (const auto& [c, make] : cases) {
      SCOPED_TRACE(c + (hybrid ? " hybridized" : " imperative"));
      const std::string k = "layer:" + c + ":";
      auto layer = make();
      for (const auto& [n, p] : layer->params()) p->SetData(f_.at(k + "param:" + n));
      if (hybrid) layer->Hybridize();
      NDArray x = f_.at(k + "in").CopyTo(Context::CPU());
      const bool integer = !f_.count(k + "grad:in");
      if (!integer) autograd::AttachGrad(&x);
      NDArray y;
      {
        autograd::RecordScope record;
        y = (*layer)(x);
      }
      autograd::Backward({y}, {f_.at(k + "head")});
      ExpectCloseArrays(y, f_.at(k + "out"), "output");
      if (!integer) ExpectCloseArrays(autograd::GradOf(x), f_.at(k + "grad:in"), "input gradient");
      for (const auto& [n, p] : layer->params()) {
        if (p->grad_req() != kNullOp) ExpectCloseArrays(p->Grad(), f_.at(k + "pgrad:" + n), "d/d" + n);
      }
    }
  }
}

// A Conv3D without in_channels: the weight's shape is deferred until the first forward pass completes it from
// the data's channels (and the groups); with Gluon's parameter values the layer then gives Gluon's output,
// imperatively and hybridized. A 3-D layer on 4-D data is an error naming the operator.
TEST_F(NNTest, Conv3DCompletesItsInputChannelsAtTheFirstForwardPass) {
  const std::string k = "layer:conv3d_strided:";
  const NDArray x = f_.at(k + "in");
  for (bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "hybridized" : "imperative");
    nn::Conv3D conv(4, {3, 2, 3}, {2, 1, 1}, {1, 1, 0}, {1, 2, 1}, 2);
    EXPECT_EQ(conv.weight()->shape(), (TShape{4, 0, 3, 2, 3}));
    conv.Initialize("xavier");
    EXPECT_TRUE(conv.weight()->deferred());
    if (hybrid) conv.Hybridize();
    const NDArray first = conv(x);
    EXPECT_FALSE(conv.weight()->deferred());
    EXPECT_EQ(conv.weight()->shape(), (TShape{4, 2, 3, 2, 3}));
    EXPECT_EQ(first.shape(), f_.at(k + "out").shape());
    conv.weight()->SetData(f_.at(k + "param:weight"));
    conv.bias()->SetData(f_.at(k + "param:bias"));
    ExpectCloseArrays(conv(x), f_.at(k + "out"), "output with Gluon's parameters");
  }
  nn::Conv3D conv(2, {2, 2, 2});
  conv.Initialize();
  ExpectError([&] { conv(NDArray::Ones({1, 2, 4, 4}, Context::CPU())); }, {"Convolution", "5 dimensions"});
}

// Gluon's network of the fixture, loaded from its save_parameters file (structural names).
std::shared_ptr<nn::HybridSequential> FixtureNet() {
  auto net = std::make_shared<nn::HybridSequential>();
  net->Add(std::make_shared<nn::Conv2D>(4, std::vector<int>{3, 3}, std::vector<int>{}, std::vector<int>{1, 1}));
  net->Add(std::make_shared<nn::BatchNorm>());
  net->Add(std::make_shared<nn::Activation>("relu"));
  net->Add(std::make_shared<nn::MaxPool2D>());
  net->Add(std::make_shared<nn::Flatten>());
  net->Add(std::make_shared<nn::Dense>(5));
  net->LoadParameters(Data("nn_net_init.params"));
  return net;
}

// One training step of the fixture: outputs, loss and gradients equal Gluon's, imperative and hybridized;
// then a second step, and the parameters after two Trainer steps equal Gluon's.
TEST_F(NNTest, NetworkTrainsAsGluonDoes) {
  for (bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "hybridized" : "imperative");
    auto net = FixtureNet();
    if (hybrid) net->Hybridize();
    nn::SoftmaxCrossEntropyLoss loss_fn;
    nn::Trainer trainer(net->CollectParams(), {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "1e-3"}}});
    const NDArray x = f_.at("net:in:x"), y = f_.at("net:in:y");
    NDArray out, loss;
    {
      autograd::RecordScope record;
      out = (*net)(x);
      loss = loss_fn(out, y);
    }
    autograd::Backward({loss});
    ExpectCloseArrays(out, f_.at("net:out"), "output");
    ExpectCloseArrays(loss, f_.at("net:loss"), "loss");
    std::vector<std::pair<std::string, std::shared_ptr<nn::Parameter>>> named;
    for (std::size_t c = 0; c < net->children().size(); ++c) {
      for (const auto& [n, p] : net->children()[c].second->params()) named.emplace_back(std::to_string(c) + "." + n, p);
    }
    ASSERT_EQ(named.size(), 8u);
    for (const auto& [n, p] : named) {
      if (p->grad_req() != kNullOp) ExpectCloseArrays(p->Grad(), f_.at("net:grad:" + n), "d/d" + n);
    }
    trainer.Step(2);
    {
      autograd::RecordScope record;
      loss = loss_fn((*net)(x), y);
    }
    autograd::Backward({loss});
    trainer.Step(2);
    for (const auto& [n, p] : named) ExpectCloseArrays(p->Data(), f_.at("net:after:" + n), n + " after two steps");
  }
}

TEST_F(NNTest, GluonExportImportsAsASymbolBlock) {
  auto block = nn::SymbolBlock::Imports(Data("nn_export-symbol.json"), {"data"}, Data("nn_export-0000.params"));
  EXPECT_EQ(block->CollectParams().size(), 8u);
  ExpectCloseArrays((*block)(f_.at("net:in:x")), f_.at("net:export_out"), "imported output (imperative)");
  block->Hybridize();
  ExpectCloseArrays((*block)(f_.at("net:in:x")), f_.at("net:export_out"), "imported output (hybridized)");
  // Fine-tuning: gradients flow to the imported parameters.
  NDArray loss;
  {
    autograd::RecordScope record;
    loss = nn::SoftmaxCrossEntropyLoss()((*block)(f_.at("net:in:x")), f_.at("net:in:y"));
  }
  autograd::Backward({loss});
  const auto g = block->CollectParams().Get("conv0_weight")->Grad().ToVector<float>();
  EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float v) { return v != 0; }));
  ExpectError([&] { nn::SymbolBlock::Imports(Data("nn_export-symbol.json"), {"input"}); }, {"'input'", "data"});
}

TEST_F(NNTest, ExportedBlockReadsBackWithTheSameOutputs) {
  auto net = FixtureNet();
  const NDArray x = f_.at("net:in:x");
  const NDArray want = (*net)(x);
  const std::string prefix = (std::filesystem::temp_directory_path() / "troupe_nn_test_export").string();
  net->Hybridize();
  net->Export(prefix, 3);
  auto back = nn::SymbolBlock::Imports(prefix + "-symbol.json", {"data"}, prefix + "-0003.params");
  ExpectCloseArrays((*back)(x), want, "re-imported");
  // Structural save / load round trip into a fresh network of the same shape.
  net->SaveParameters(prefix + ".params");
  auto again = FixtureNet();
  for (const auto& p : again->CollectParams()) p->SetData(NDArray::Zeros(p->shape(), Context::CPU()));
  again->LoadParameters(prefix + ".params");
  ExpectCloseArrays((*again)(x), want, "loaded");
  for (const char* f : {"-symbol.json", "-0003.params", ".params"}) std::filesystem::remove(prefix + f);
}

// GluonCV's cifar_resnet20_v1 as GluonCV exports it (tests/graph/data/models): imported whole, and as a feature
// extractor (its pooled features) under a new 5-class Dense head in a HybridSequential, fine-tuned on one batch
// until it fits it, imperatively and hybridized.
TEST(NNFineTuneTest, GluonCVExportImportsAndFineTunes) {
#if defined(__SANITIZE_THREAD__)
  // Its activations take the OpenMP-parallel kernel loops, which ThreadSanitizer cannot follow (libgomp is not
  // instrumented: it reports the team's writes as races) and runs for many minutes; the Release suite runs it.
  GTEST_SKIP() << "not under ThreadSanitizer (OpenMP kernel loops)";
#endif
  const std::string file = std::string(TROUPE_MODELS_DIR) + "/cifar_resnet20_v1-symbol.json";
  auto whole = nn::SymbolBlock::Imports(file, {"data"});
  whole->Initialize("xavier");
  NDArray x(TShape{8, 1, 28, 28}, Context::CPU());
  x.SampleUniform(0, 1);
  EXPECT_EQ((*whole)(x).shape(), (TShape{8, 10}));
  const std::vector<float> labels = {0, 1, 2, 3, 4, 0, 1, 2};
  const NDArray y = NDArray::FromVector(labels, {8});
  for (bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "hybridized" : "imperative");
    const Symbol all = Symbol::Load(file).GetInternals();
    const auto names = all.ListOutputs();
    const auto pool = std::find(names.begin(), names.end(), "cifarresnetv10_pool0_fwd_output");
    ASSERT_NE(pool, names.end());
    auto features = std::make_shared<nn::SymbolBlock>(all[static_cast<std::size_t>(pool - names.begin())],
                                                      std::vector<std::string>{"data"});
    auto net = std::make_shared<nn::HybridSequential>();
    net->Add(features);
    net->Add(std::make_shared<nn::Flatten>());
    net->Add(std::make_shared<nn::Dense>(5));
    net->Initialize("xavier");
    if (hybrid) net->Hybridize();
    EXPECT_EQ(net->CollectParams().size(), features->CollectParams().size() + 2);
    nn::SoftmaxCrossEntropyLoss loss_fn;
    nn::Trainer trainer(net->CollectParams(), {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}});
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      NDArray loss;
      {
        autograd::RecordScope record;
        loss = loss_fn((*net)(x), y);
      }
      autograd::Backward({loss});
      trainer.Step(8);
      double mean = 0;
      for (float v : loss.ToVector<float>()) mean += v / 8;
      (step == 0 ? first : last) = mean;
    }
    EXPECT_LT(last, 0.25 * first) << "loss " << first << " -> " << last;
  }
}

TEST(NNBlockTest, DeferredShapesNamesAndErrors) {
  nn::Dense fc(3, "relu", true, true, 0, {}, "zeros", "fc_");
  EXPECT_EQ(fc.weight()->name(), "fc_weight");
  EXPECT_EQ(fc.weight()->shape(), (TShape{3, 0}));
  fc.Initialize("xavier");
  EXPECT_TRUE(fc.weight()->deferred());
  ExpectError([&] { fc.weight()->Data(); }, {"fc_weight", "forward pass"});
  NDArray x(TShape{2, 4, 5}, Context::CPU());
  x.SampleUniform(-1, 1);
  const NDArray y = fc(x);  // flattens to (2, 20)
  EXPECT_EQ(fc.weight()->shape(), (TShape{3, 20}));
  EXPECT_EQ(y.shape(), (TShape{2, 3}));
  const NDArray want = Invoke("Activation",
                              {Invoke("FullyConnected", {x, fc.weight()->Data(), fc.bias()->Data()},
                                      {{"num_hidden", "3"}})[0]},
                              {{"act_type", "relu"}})[0];
  EXPECT_EQ(y.ToVector<float>(), want.ToVector<float>());
  // Automatic prefixes count per kind.
  nn::Dense a(2), b(2);
  EXPECT_NE(a.prefix(), b.prefix());
  EXPECT_EQ(a.prefix().rfind("dense", 0), 0u);
  // An uninitialised block, a bad initializer, a Dropout rate.
  nn::Dense c(2, {}, true, true, 4);
  ExpectError([&] { c(NDArray::Ones({1, 4}, Context::CPU())); }, {"weight", "Initialize"});
  ExpectError([&] { c.Initialize("xavierr"); }, {"xavierr"});
  ExpectError([] { nn::Dropout(1.5f); }, {"rate"});
  ExpectError([] { nn::Conv2D(4, {3}); }, {"kernel", "2"});
  // A shape the layer cannot take.
  c.Initialize();
  ExpectError([&] { c(NDArray::Ones({1, 5}, Context::CPU())); }, {"FullyConnected"});
}

// A block written with NDArray code (not hybrid), in a Sequential with hybrid layers.
class Scale : public nn::Block {
 public:
  Scale() : Block("", "scale") { w_ = AddParameter("w", TShape{1}, "ones"); }
  std::vector<NDArray> Forward(const std::vector<NDArray>& x) override {
    return {Invoke("broadcast_mul", {x[0], w_->Data()})[0] * 2.0};
  }

 private:
  std::shared_ptr<nn::Parameter> w_;
};

TEST(NNBlockTest, SequentialOfImperativeBlocksTrainsAndRefusesStaleGradients) {
  nn::Sequential seq;
  auto fc = seq.Add(std::make_shared<nn::Dense>(1, "", false, true, 2, "ones"));
  auto scale = seq.Add(std::make_shared<Scale>());
  seq.Initialize();
  const NDArray x = NDArray::FromVector<float>({1, 2, 3, 4}, {2, 2});
  NDArray y;
  {
    autograd::RecordScope record;
    y = seq(x);  // 2 * w * (x0 + x1) = (6, 14)
  }
  EXPECT_EQ(y.ToVector<float>(), (std::vector<float>{6, 14}));
  autograd::Backward({y});
  // d/dw = sum 2 (x0 + x1) = 20; d/dweight_j = sum 2 w x_j = (8, 12).
  EXPECT_EQ(scale->params()[0].second->Grad().ToVector<float>(), std::vector<float>{20});
  EXPECT_EQ(fc->weight()->Grad().ToVector<float>(), (std::vector<float>{8, 12}));
  nn::Trainer trainer(seq.CollectParams(), {"sgd", {{"learning_rate", "0.5"}}});
  trainer.Step(2);  // w = 1 - 0.5 * 20 / 2 = -4
  EXPECT_EQ(scale->params()[0].second->Data().ToVector<float>(), std::vector<float>{-4});
  // No backward since: every gradient is stale.
  ExpectError([&] { trainer.Step(2); }, {"was not written by a backward pass", "ignore_stale_grad"});
  trainer.Step(2, /*ignore_stale_grad=*/true);
  EXPECT_EQ(scale->params()[0].second->Data().ToVector<float>(), std::vector<float>{-4});
}

// Data parallel over two CPU devices: each device runs half the batch on its copy of the parameters, the
// Trainer sums the gradients through the store and updates both copies: the same parameters as one device on
// the whole batch.
TEST(NNBlockTest, TrainerOverTwoDevicesEqualsOneDevice) {
  NDArray x(TShape{8, 6}, Context::CPU());
  x.SampleUniform(-1, 1);
  const NDArray y = NDArray::FromVector<float>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
  auto make = [](const std::vector<Context>& ctx) {
    auto net = std::make_shared<nn::HybridSequential>();
    net->Add(std::make_shared<nn::Dense>(5, "tanh", true, true, 6, "", "zeros", "a_"));
    net->Add(std::make_shared<nn::Dense>(3, "", true, true, 5, "", "zeros", "b_"));
    ResourceManager::Get()->SeedRandom(3);
    net->Initialize("xavier", ctx);
    return net;
  };
  const std::vector<Context> two = {Context::CPU(0), Context::CPU(1)};
  auto one_net = make({Context::CPU()}), two_net = make(two);
  nn::SoftmaxCrossEntropyLoss loss_fn;
  const OptimizerConfig sgd{"sgd", {{"learning_rate", "0.3"}, {"momentum", "0.9"}}};
  nn::Trainer one(one_net->CollectParams(), sgd), both(two_net->CollectParams(), sgd, "device");
  for (int step = 0; step < 3; ++step) {
    NDArray l1;
    {
      autograd::RecordScope record;
      l1 = loss_fn((*one_net)(x), y);
    }
    autograd::Backward({l1});
    one.Step(8);
    std::vector<NDArray> losses;
    {
      autograd::RecordScope record;
      for (std::size_t d = 0; d < 2; ++d) {
        const auto lo = static_cast<std::int64_t>(4 * d);
        losses.push_back(loss_fn((*two_net)(x.Slice(lo, lo + 4).CopyTo(two[d])), y.Slice(lo, lo + 4).CopyTo(two[d])));
      }
    }
    autograd::Backward(losses);
    both.Step(8);
  }
  ASSERT_NE(both.kvstore(), nullptr);
  const auto p1 = one_net->CollectParams(), p2 = two_net->CollectParams();
  for (std::size_t i = 0; i < p1.size(); ++i) {
    for (const Context& c : two) ExpectCloseArrays(p2.list()[i]->Data(c), p1.list()[i]->Data(), p1.list()[i]->name() + " on " + c.ToString());
  }
}

TEST(DataLoaderTest, BatchesInOrderShuffledAndWithWorkers) {
  const std::int64_t n = 10;
  std::vector<float> xs, ys;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) xs.push_back(static_cast<float>(10 * i + j));
    ys.push_back(static_cast<float>(i));
  }
  auto ds = std::make_shared<nn::ArrayDataset>(
      std::vector<NDArray>{NDArray::FromVector(xs, {n, 3}), NDArray::FromVector(ys, {n})});
  auto labels_of = [](nn::DataLoader& dl) {
    std::vector<std::vector<float>> out;
    std::vector<NDArray> b;
    for (dl.Reset(); dl.Next(&b);) {
      EXPECT_EQ(b.size(), 2u);
      const auto l = b[1].ToVector<float>(), x = b[0].ToVector<float>();
      for (std::size_t k = 0; k < l.size(); ++k) EXPECT_EQ(x[3 * k + 1], 10 * l[k] + 1);  // rows stay together
      out.push_back(l);
    }
    return out;
  };
  nn::DataLoader keep(ds, 4);
  EXPECT_EQ(labels_of(keep), (std::vector<std::vector<float>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  nn::DataLoader discard(ds, 4, false, "discard");
  EXPECT_EQ(labels_of(discard).size(), 2u);
  nn::DataLoader roll(ds, 4, false, "rollover");
  EXPECT_EQ(labels_of(roll), (std::vector<std::vector<float>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(labels_of(roll), (std::vector<std::vector<float>>{{8, 9, 0, 1}, {2, 3, 4, 5}, {6, 7, 8, 9}}));
  // Shuffled: every sample once, another order per epoch; workers give the same batches as none.
  nn::DataLoader shuffled(ds, 3, true, "keep", 0, 7), workers(ds, 3, true, "keep", 3, 7, 2);
  const auto e1 = labels_of(shuffled), w1 = labels_of(workers);
  EXPECT_EQ(e1, w1);
  std::multiset<float> seen;
  for (const auto& b : e1) seen.insert(b.begin(), b.end());
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(n));
  EXPECT_EQ(std::set<float>(seen.begin(), seen.end()).size(), static_cast<std::size_t>(n));
  const auto e2 = labels_of(shuffled), w2 = labels_of(workers);
  EXPECT_NE(e2, e1);
  EXPECT_EQ(w2, e2);
  ExpectError([&] { nn::DataLoader(ds, 0); }, {"batch_size"});
  ExpectError([&] { nn::DataLoader(ds, 2, false, "pad"); }, {"last_batch"});
}

// A dataset whose sample 5 fails: the error reaches Next, from a worker too.
class Failing : public nn::Dataset {
 public:
  std::size_t size() const override { return 8; }
  std::vector<NDArray> Get(std::size_t i) const override {
    if (i == 5) throw Error("sample 5 is unreadable");
    return {NDArray::Full({2}, static_cast<double>(i), Context::CPU())};
  }
};

TEST(DataLoaderTest, ErrorsOfTheDatasetSurfaceAtNext) {
  for (int workers : {0, 2}) {
    nn::DataLoader dl(std::make_shared<Failing>(), 2, false, "keep", workers);
    std::vector<NDArray> b;
    ASSERT_TRUE(dl.Next(&b));
    ASSERT_TRUE(dl.Next(&b));
    ExpectError([&] { dl.Next(&b); }, {"sample 5 is unreadable"});
  }
}

}  // namespace
}  // namespace troupe
