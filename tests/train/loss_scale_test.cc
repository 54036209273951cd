// Dynamic loss scaling (train/loss_scaler.h): the scaler's rules, and a Module training a float16 network that
// overflows. A step whose gradients hold an infinity is skipped (no parameter moves, the scale halves); once
// the scale is low enough the step is taken with the gradients divided by the scale, so that it moves the
// parameters as the float32 network's step does; clean steps in a row double the scale again.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/amp.h"
#include "graph/symbol.h"
#include "op/initializer.h"
#include "tensor/ndarray.h"
#include "tests/common/error_text.h"
#include "train/loss_scaler.h"
#include "train/train.h"

namespace troupe {
namespace {

TEST(LossScalerTest, HalvesOnOverflowDoublesAfterTheWindowWithinItsBounds) {
  LossScaler::Options o;
  o.init_scale = 8;
  o.max_scale = 16;
  o.window = 2;
  o.min_scale = 1;
  LossScaler s(o);
  EXPECT_EQ(s.scale(), 8);
  EXPECT_TRUE(s.Step(true));  // overflow: skipped, halved
  EXPECT_EQ(s.scale(), 4);
  EXPECT_FALSE(s.Step(false));
  EXPECT_EQ(s.scale(), 4);     // one clean step: not yet
  EXPECT_FALSE(s.Step(false));
  EXPECT_EQ(s.scale(), 8);     // two in a row: doubled
  EXPECT_FALSE(s.Step(false));
  EXPECT_TRUE(s.Step(true));   // an overflow restarts the count
  EXPECT_EQ(s.scale(), 4);
  for (int i = 0; i < 6; ++i) s.Step(false);
  EXPECT_EQ(s.scale(), 16);    // capped at max_scale
  EXPECT_EQ(s.skipped(), 2);
  EXPECT_EQ(s.steps(), 11);
  // Overflowing at every scale is the model's own infinity or NaN: an error, not a scale that halves forever.
  for (int i = 0; i < 4; ++i) s.Step(true);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_NE(ErrorText([&] { s.Step(true); }).find("not finite even at loss scale"), std::string::npos);
  o.window = 0;
  EXPECT_NE(ErrorText([&] { LossScaler bad(o); }).find("window"), std::string::npos);
  EXPECT_EQ(LossScaler().scale(), 65536);  // MXNet's 2^16
}

// data (1 x 4) -> FullyConnected(2) -> SoftmaxOutput; in float16 with float32 parameters (amp::ConvertSymbol).
Symbol TinyNet() {
  const Symbol fc = Symbol::Create("FullyConnected", {{"num_hidden", "2"}}, {Symbol::Variable("data")}, "fc");
  return Symbol::Create("SoftmaxOutput", {}, {fc}, "softmax");
}

struct Trained {
  std::map<std::string, std::vector<float>> before, after;
};

// One Forward / Backward / Update of `net` on a batch whose inputs are `x`, from fixed parameters, SGD lr 0.1.
Trained OneStep(Module* mod, float x) {
  mod->Bind({TShape{1, 4}}, {TShape{1}});
  mod->InitParams(*Initializer::Create("zero"),
                  {{"fc_weight", NDArray::FromVector<float>({0.1f, -0.2f, 0.3f, 0.0f, 0.2f, 0.1f, -0.1f, 0.4f}, TShape{2, 4})},
                   {"fc_bias", NDArray::FromVector<float>({0.0f, 0.0f}, TShape{2})}});
  mod->InitOptimizer({"sgd", {{"learning_rate", "0.1"}}});
  DataBatch batch;
  batch.data = {NDArray::FromVector<float>({x, -x, x / 2, x / 4}, TShape{1, 4})};
  batch.label = {NDArray::FromVector<float>({1.0f}, TShape{1})};
  Trained t;
  std::map<std::string, NDArray> args, aux;
  mod->GetParams(&args, &aux);
  for (const auto& [k, v] : args) t.before[k] = v.ToVector<float>();
  mod->Forward(batch, true);
  mod->Backward();
  mod->Update();
  mod->GetParams(&args, &aux);
  for (const auto& [k, v] : args) t.after[k] = v.ToVector<float>();
  return t;
}

TEST(LossScaleModuleTest, AnOverflowingStepIsSkippedAndTheScaleHalved) {
  amp::ConvertOptions o;
  o.target_dtype = DType::kFloat16;
  const Symbol net = amp::ConvertSymbol(TinyNet(), o);
  // Inputs of 1000: the weight gradient is about 1000 x the scale, past float16's 65504 until the scale is at
  // most 64 (65536 -> 64: ten halvings).
  LossScaler::Options lo;
  lo.window = 3;
  auto scaler = std::make_shared<LossScaler>(lo);
  Module mod(net);
  mod.SetLossScaler(scaler);
  const Trained first = OneStep(&mod, 1000.0f);
  EXPECT_EQ(scaler->skipped(), 1);
  EXPECT_EQ(scaler->scale(), 32768);
  EXPECT_EQ(first.after, first.before) << "a skipped step moved the parameters";
  // Steps go on being skipped, halving, until one is taken.
  DataBatch batch;
  batch.data = {NDArray::FromVector<float>({1000.0f, -1000.0f, 500.0f, 250.0f}, TShape{1, 4})};
  batch.label = {NDArray::FromVector<float>({1.0f}, TShape{1})};
  std::map<std::string, NDArray> args, aux;
  int steps = 1;
  while (scaler->skipped() == steps && steps < 20) {
    mod.Forward(batch, true);
    mod.Backward();
    mod.Update();
    ++steps;
  }
  EXPECT_EQ(scaler->skipped(), 10);
  EXPECT_EQ(scaler->scale(), 64);
  mod.GetParams(&args, &aux);
  EXPECT_NE(args.at("fc_weight").ToVector<float>(), first.before.at("fc_weight")) << "the clean step did not update";
  // Clean steps (small inputs) three in a row double the scale (window 3); an input past float16's range
  // (1e6 casts to infinity) overflows whatever the scale and halves it again.
  const auto step = [&](float x) {
    DataBatch b;
    b.data = {NDArray::FromVector<float>({x, -x, x / 2, x / 4}, TShape{1, 4})};
    b.label = {NDArray::FromVector<float>({1.0f}, TShape{1})};
    mod.Forward(b, true);
    mod.Backward();
    mod.Update();
  };
  for (int i = 0; i < 3; ++i) step(0.5f);
  EXPECT_EQ(scaler->scale(), 128);
  EXPECT_EQ(scaler->skipped(), 10);
  mod.GetParams(&args, &aux);
  const std::vector<float> kept = args.at("fc_weight").ToVector<float>();
  step(1e6f);
  EXPECT_EQ(scaler->scale(), 64);
  EXPECT_EQ(scaler->skipped(), 11);
  mod.GetParams(&args, &aux);
  EXPECT_EQ(args.at("fc_weight").ToVector<float>(), kept) << "a skipped step moved the parameters";
}

TEST(LossScaleModuleTest, ATakenStepMovesTheParametersAsFloat32Does) {
  // Small inputs: no overflow at 2^16; the float16 step, unscaled, is the float32 step within float16's rounding.
  amp::ConvertOptions o;
  o.target_dtype = DType::kFloat16;
  Module half(amp::ConvertSymbol(TinyNet(), o));
  auto scaler = std::make_shared<LossScaler>();
  half.SetLossScaler(scaler);
  Module full(TinyNet());
  const Trained h = OneStep(&half, 0.5f), f = OneStep(&full, 0.5f);
  EXPECT_EQ(scaler->skipped(), 0);
  for (const auto& [name, after] : f.after) {
    const auto& got = h.after.at(name);
    ASSERT_EQ(got.size(), after.size());
    double moved = 0;
    for (std::size_t i = 0; i < after.size(); ++i) {
      const double step = after[i] - f.before.at(name)[i];
      moved = std::max(moved, std::abs(step));
      // The change of each parameter within 2^-10 of the float32 change (float16 rounding of the gradient).
      EXPECT_NEAR(got[i] - h.before.at(name)[i], step, std::abs(step) / 1024 + 1e-7) << name << "[" << i << "]";
    }
    EXPECT_GT(moved, 1e-4) << name << " did not move: nothing compared";
  }
}

}  // namespace
}  // namespace troupe
