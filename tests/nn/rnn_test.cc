// The recurrent layers (nn/rnn_layers.h) against MXNet 1.9.1's Gluon (tests/nn/data/make_rnn.py): for LSTM,
// GRU and RNN (tanh, relu), stacked, bidirectional, in both layouts, with and without begin states, the
// parameters loaded from Gluon's save_parameters files, the outputs, final states and the gradients of every
// parameter, of the input and of the begin states, imperatively and hybridized. Plus deferred input sizes
// (alone and inside a HybridSequential), names and save/load round trips, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/basic_layers.h"
#include "nn/block.h"
#include "nn/rnn_layers.h"
#include "op/autograd.h"
#include "op/imperative.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectCloseArrays;
using test::ExpectError;

std::string Data(const std::string& f) { return std::string(TROUPE_TEST_DATA_DIR) + "/" + f; }

std::map<std::string, NDArray> Fixture() { return test::LoadNamed(Data("rnn.params")); }

NDArray Copy(const NDArray& a) { return a.CopyTo(Context::CPU()); }

// The fixture's cases (make_rnn.py's CASES): the same layers, input sizes deferred.
struct Case {
  std::string name;
  std::function<std::shared_ptr<nn::RecurrentLayer>()> make;
  bool with_states;
};

std::vector<Case> Cases() {
  return {
      {"lstm", [] { return std::make_shared<nn::LSTM>(4); }, false},
      {"lstm_2bi", [] { return std::make_shared<nn::LSTM>(3, 2, "TNC", 0.0f, true); }, false},
      {"lstm_states", [] { return std::make_shared<nn::LSTM>(3, 1, "TNC", 0.0f, true); }, true},
      {"gru_ntc", [] { return std::make_shared<nn::GRU>(4, 1, "NTC"); }, false},
      {"gru_states", [] { return std::make_shared<nn::GRU>(3, 2); }, true},
      {"rnn_tanh", [] { return std::make_shared<nn::RNN>(4, 1, "tanh"); }, true},
      {"rnn_relu", [] { return std::make_shared<nn::RNN>(3, 2, "relu", "NTC", 0.0f, true); }, false},
  };
}

// Gluon's save_parameters name of a parameter of a recurrent layer, from its short name ("r1_h2h_bias").
std::string Structural(const std::string& short_name, bool bidirectional) {
  const std::string dir = short_name.substr(0, 1), layer = short_name.substr(1, short_name.find('_') - 1);
  const std::string rest = short_name.substr(short_name.find('_') + 1);
  return "_unfused." + layer + "." + (bidirectional ? dir + "_cell." : "") + rest;
}

std::vector<std::string> ShortNames(const nn::RecurrentLayer& layer) {
  std::vector<std::string> names;
  for (int l = 0; l < layer.num_layers(); ++l) {
    for (const char* d : {"l", "r"}) {
      if (d[0] == 'r' && !layer.bidirectional()) continue;
      for (const char* n : {"i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"}) {
        names.push_back(d + std::to_string(l) + "_" + n);
      }
    }
  }
  return names;
}

class RnnLayersTest : public ::testing::Test {
 protected:
  std::map<std::string, NDArray> f_ = Fixture();
};

// One recorded forward and backward pass of each case equals Gluon's: outputs, final states, and the
// gradients of the input, the begin states and every parameter; imperatively and hybridized.
TEST_F(RnnLayersTest, LayersMatchGluon) {
  for (const Case& c : Cases()) {
    for (bool hybrid : {false, true}) {
      SCOPED_TRACE(c.name + (hybrid ? " hybridized" : " imperative"));
      auto layer = c.make();
      layer->LoadParameters(Data("rnn_" + c.name + ".params"));
      if (hybrid) layer->Hybridize();
      std::vector<NDArray> inputs{Copy(f_.at(c.name + ":in:x"))};
      for (std::size_t i = 0; c.with_states && i < layer->num_states(); ++i) {
        inputs.push_back(Copy(f_.at(c.name + ":in:state" + std::to_string(i))));
      }
      for (auto& a : inputs) autograd::AttachGrad(&a);
      std::vector<NDArray> out;
      {
        autograd::RecordScope record;
        out = layer->Forward(inputs);
      }
      ASSERT_EQ(out.size(), inputs.size());
      std::vector<NDArray> heads{f_.at(c.name + ":head:out")};
      for (std::size_t i = 1; i < out.size(); ++i)
        heads.push_back(f_.at(c.name + ":head:state" + std::to_string(i - 1)));
      autograd::Backward(out, heads);
      ExpectCloseArrays(out[0], f_.at(c.name + ":out"), "output");
      for (std::size_t i = 1; i < out.size(); ++i) {
        ExpectCloseArrays(out[i], f_.at(c.name + ":state" + std::to_string(i - 1)), "final state " + std::to_string(i - 1));
      }
      ExpectCloseArrays(autograd::GradOf(inputs[0]), f_.at(c.name + ":grad:x"), "d/dx");
      for (std::size_t i = 1; i < inputs.size(); ++i) {
        ExpectCloseArrays(autograd::GradOf(inputs[i]), f_.at(c.name + ":grad:state" + std::to_string(i - 1)),
                    "d/dstate" + std::to_string(i - 1));
      }
      std::size_t grads = 0;
      for (const auto& [n, a] : f_) grads += n.rfind(c.name + ":grad:_unfused.", 0) == 0;
      const auto names = ShortNames(*layer);
      EXPECT_EQ(names.size(), grads);
      for (const auto& n : names) {
        ExpectCloseArrays(layer->param(n)->Grad(), f_.at(c.name + ":grad:" + Structural(n, layer->bidirectional())),
                    "d/d" + n);
      }
    }
  }
}

// Names and shapes as Gluon's; SaveParameters writes Gluon's structural names, which load back.
TEST_F(RnnLayersTest, NamesShapesAndSaveLoad) {
  nn::LSTM lstm(5, 2, "TNC", 0.0f, true, 3, {}, {}, "zeros", "zeros", "enc_");
  EXPECT_EQ(lstm.param("l0_i2h_weight")->name(), "enc_l0_i2h_weight");
  EXPECT_EQ(lstm.param("l0_i2h_weight")->shape(), (TShape{20, 3}));
  EXPECT_EQ(lstm.param("r1_i2h_weight")->shape(), (TShape{20, 10}));
  EXPECT_EQ(lstm.param("r1_h2h_weight")->shape(), (TShape{20, 5}));
  EXPECT_EQ(lstm.param("l1_h2h_bias")->shape(), (TShape{20}));
  EXPECT_EQ(lstm.CollectParams().size(), 16u);
  ExpectError([&] { lstm.param("l2_i2h_weight"); }, {"l2_i2h_weight", "l0_i2h_weight"});
  EXPECT_EQ(nn::GRU(4).param("l0_h2h_weight")->shape(), (TShape{12, 4}));
  EXPECT_EQ(nn::RNN(4).param("l0_i2h_weight")->shape(), (TShape{4, 0}));
  EXPECT_EQ(nn::RNN(4).prefix().rfind("rnn", 0), 0u);
  EXPECT_EQ(nn::GRU(4).prefix().rfind("gru", 0), 0u);

  // Gluon's file for the same kind of layer loads into ours; ours saves the same names, back again.
  auto a = Cases()[1].make();
  a->LoadParameters(Data("rnn_lstm_2bi.params"));
  const std::string path = ::testing::TempDir() + "rnn_roundtrip.params";
  a->SaveParameters(path);
  std::vector<NDArray> arrays, gluon_arrays;
  std::vector<std::string> names, gluon_names;
  NDArray::Load(path, &arrays, &names);
  NDArray::Load(Data("rnn_lstm_2bi.params"), &gluon_arrays, &gluon_names);
  EXPECT_EQ(names, gluon_names);
  auto b = Cases()[1].make();
  b->LoadParameters(path);
  const NDArray x = f_.at("lstm_2bi:in:x");
  EXPECT_EQ((*b)(x).ToVector<float>(), (*a)(x).ToVector<float>());
  std::remove(path.c_str());
  // A holder of the parameters is not callable.
  ExpectError([&] { (*a->children()[0].second)(x); }, {"not callable"});
}

// A deferred input size is completed by the layer's first forward pass, imperative and hybridized (a
// bidirectional layer has two unknown i2h weights); inside a hybridized HybridSequential with its input size
// given, the layers after it are completed.
TEST_F(RnnLayersTest, DeferredInputSize) {
  NDArray x(TShape{4, 2, 3}, Context::CPU());
  x.SampleUniform(-1, 1);
  for (bool hybrid : {false, true}) {
    nn::LSTM lstm(5, 2, "TNC", 0.0f, true);
    lstm.Initialize("xavier");
    if (hybrid) lstm.Hybridize();
    EXPECT_TRUE(lstm.param("l0_i2h_weight")->deferred());
    const NDArray y = lstm(x);
    EXPECT_EQ(y.shape(), (TShape{4, 2, 10}));
    EXPECT_EQ(lstm.param("l0_i2h_weight")->shape(), (TShape{20, 3}));
    EXPECT_EQ(lstm.param("r0_i2h_weight")->shape(), (TShape{20, 3}));
    const auto zero = lstm.BeginState(2);
    const auto with = lstm.Forward({x, zero[0], zero[1]});
    ASSERT_EQ(with.size(), 3u);
    EXPECT_EQ(with[0].ToVector<float>(), y.ToVector<float>()) << "zero begin states given = none given";
    EXPECT_EQ(with[1].shape(), (TShape{4, 2, 5}));
  }
  auto net = std::make_shared<nn::HybridSequential>();
  auto gru = net->Add(std::make_shared<nn::GRU>(6, 1, "NTC", 0.0f, false, 3));
  auto fc = net->Add(std::make_shared<nn::Dense>(2));
  net->Initialize();
  net->Hybridize();
  const NDArray y = (*net)(x);
  EXPECT_EQ(y.shape(), (TShape{4, 2}));
  // Read it: the pass must not still run when the process exits (oneDNN's kernels are gone by then).
  EXPECT_EQ(y.ToVector<float>().size(), 8u);
  EXPECT_EQ(fc->weight()->shape(), (TShape{2, 12}));
  EXPECT_EQ(gru->param("l0_i2h_weight")->shape(), (TShape{18, 3}));
}

TEST(RnnLayersErrorTest, BadArgumentsAndInputs) {
  ExpectError([] { nn::RNN(4, 1, "sigmoid"); }, {"RNN", "activation", "sigmoid"});
  ExpectError([] { nn::LSTM(4, 1, "TCN"); }, {"LSTM", "layout", "TCN"});
  ExpectError([] { nn::GRU(0); }, {"GRU", "hidden_size"});
  ExpectError([] { nn::GRU(4, 0); }, {"GRU", "num_layers"});
  ExpectError([] { nn::LSTM(4, 2, "TNC", 1.5f); }, {"LSTM", "dropout"});
  nn::LSTM lstm(4, 1, "TNC", 0.0f, false, 3);
  lstm.Initialize();
  const NDArray x = NDArray::Ones({5, 2, 3}, Context::CPU());
  const auto s = lstm.BeginState(2);
  ExpectError([&] { lstm(NDArray::Ones({5, 3}, Context::CPU())); }, {"LSTM", "3 dimensions", "(5,3)"});
  ExpectError([&] { lstm(NDArray::Ones({5, 2, 4}, Context::CPU())); }, {"LSTM", "4 features", "input size is 3"});
  ExpectError([&] { lstm.Forward({x, s[0]}); }, {"LSTM", "2 begin states", "got 2 inputs"});
  ExpectError([&] { lstm.Forward({x, s[0], s[1], s[1]}); }, {"LSTM", "got 4 inputs"});
  ExpectError(
      [&] {
        lstm.Forward({x, s[0], NDArray::Zeros({1, 3, 4}, Context::CPU())});
      },
      {"begin state 1", "(1,3,4)", "(1,2,4)"});
  nn::GRU gru(4, 1, "NTC");
  gru.Initialize();
  ExpectError([&] { gru.Forward({x, s[0], s[1]}); }, {"GRU", "begin state (h)", "got 3 inputs"});
  ExpectError([&] { gru(NDArray::Ones({2, 3, 4, 5}, Context::CPU())); }, {"GRU", "batch size, sequence length"});
  // NTC: the batch is the first axis.
  ExpectError([&] { gru.Forward({x, NDArray::Zeros({1, 2, 4}, Context::CPU())}); }, {"(1,5,4)"});
}

}  // namespace
}  // namespace troupe
