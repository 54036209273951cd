// FullyConnected, Convolution and Pooling on the CPU: forward against cases worked out by hand, backward
// against central differences (float64; kWriteTo, kAddTo and kNullOp), shape inference over a table of
// cases, and the errors for inconsistent shapes, bad parameters and unsupported dtypes; 3-D (NCDHW)
// Convolution and Pooling also against MXNet 1.9.1 (data/spatial3d/make_spatial3d.py) in float32 and float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include <string>
#include <vector>

#include "base/error.h"
#include "op/autograd.h"
#include "op/imperative.h"
#include "op/nn/convolution/convolution.h"
#include "op/nn/fully_connected/fully_connected.h"
#include "op/nn/pooling/pooling.h"
#include "op/operator.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::CheckGradient;
using test::ExpectError;
using test::ExpectInitError;
using test::FwdBwd;
using test::RunForwardBackward;
using test::GradCheckOptions;
using test::HostTensor;
using test::InferOutShapes;
using test::Near;
using test::OpCase;
using test::RunForward;

// Backward with one head (every operator here has one visible output); the arguments' gradients.
std::vector<HostTensor> RunBackward(const OpCase& c, const std::vector<HostTensor>& inputs, const HostTensor& head) {
  return test::RunForwardBackward(c, inputs, {head}).grad;
}

const HostTensor kOneToNine = {1, 2, 3, 4, 5, 6, 7, 8, 9};
const HostTensor kOneToSixteen = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

// ---------------------------------------------------------------------------------------- FullyConnected

// X = [[1,2,3],[4,5,6]], W = [[1,0,-1],[.5,.5,.5]], b = [1,-1]:
// X W^T = [[-2, 3], [-2, 7.5]], plus b = [[-1, 2], [-1, 6.5]].
const HostTensor kFcX = {1, 2, 3, 4, 5, 6}, kFcW = {1, 0, -1, 0.5, 0.5, 0.5}, kFcB = {1, -1};

TEST(FullyConnected, ForwardByHand) {
  OpCase c{"FullyConnected", {{"num_hidden", "2"}}, {TShape{2, 3}, TShape{2, 3}, TShape{2}}};
  EXPECT_TRUE(Near(RunForward(c, {kFcX, kFcW, kFcB})[0], {-1, 2, -1, 6.5}, 0, 1e-12, "fc"));
  c.dtype = DType::kFloat32;
  EXPECT_TRUE(Near(RunForward(c, {kFcX, kFcW, kFcB})[0], {-1, 2, -1, 6.5}, 0, 1e-6, "fc float32"));

  OpCase nb{"FullyConnected", {{"num_hidden", "2"}, {"no_bias", "True"}}, {TShape{2, 3}, TShape{2, 3}}};
  EXPECT_TRUE(Near(RunForward(nb, {kFcX, kFcW})[0], {-2, 3, -2, 7.5}, 0, 1e-12, "fc no_bias"));

  // flatten=True collapses (2, 1, 3) to (2, 3); flatten=False maps the last axis of (1, 2, 3).
  OpCase fl{"FullyConnected", {{"num_hidden", "2"}}, {TShape{2, 1, 3}, TShape{2, 3}, TShape{2}}};
  EXPECT_TRUE(Near(RunForward(fl, {kFcX, kFcW, kFcB})[0], {-1, 2, -1, 6.5}, 0, 1e-12, "fc flatten"));
  OpCase nf{"FullyConnected", {{"num_hidden", "2"}, {"flatten", "False"}}, {TShape{1, 2, 3}, TShape{2, 3}, TShape{2}}};
  EXPECT_EQ(InferOutShapes(nf)[0], (TShape{1, 2, 2}));
  EXPECT_TRUE(Near(RunForward(nf, {kFcX, kFcW, kFcB})[0], {-1, 2, -1, 6.5}, 0, 1e-12, "fc flatten=False"));
}

TEST(FullyConnected, BackwardByHand) {
  // dY = [[1, 0], [0, 2]]: dX = dY W = [[1,0,-1],[1,1,1]], dW = dY^T X = [[1,2,3],[8,10,12]], db = [1, 2].
  OpCase c{"FullyConnected", {{"num_hidden", "2"}}, {TShape{2, 3}, TShape{2, 3}, TShape{2}}};
  const auto g = RunBackward(c, {kFcX, kFcW, kFcB}, {1, 0, 0, 2});
  EXPECT_TRUE(Near(g[0], {1, 0, -1, 1, 1, 1}, 0, 1e-12, "dX"));
  EXPECT_TRUE(Near(g[1], {1, 2, 3, 8, 10, 12}, 0, 1e-12, "dW"));
  EXPECT_TRUE(Near(g[2], {1, 2}, 0, 1e-12, "db"));
}

TEST(FullyConnected, InvokeAsAnNDArrayFunction) {
  NDArray x = NDArray::FromVector<double>(kFcX, TShape{2, 3}, Context::CPU()).AsType(DType::kFloat32);
  NDArray w = NDArray::FromVector<double>(kFcW, TShape{2, 3}, Context::CPU()).AsType(DType::kFloat32);
  NDArray b = NDArray::FromVector<double>(kFcB, TShape{2}, Context::CPU()).AsType(DType::kFloat32);
  auto out = Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "2"}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (TShape{2, 2}));
  EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{-1, 2, -1, 6.5}));
  Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "2"}}, {out[0]}, kAddTo);
  EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{-2, 4, -2, 13}));
}

TEST(FullyConnected, GradientMatchesCentralDifferences) {
  CheckGradient({"FullyConnected", {{"num_hidden", "5"}}, {TShape{3, 4}, TShape{5, 4}, TShape{5}}});
  CheckGradient({"FullyConnected", {{"num_hidden", "3"}}, {TShape{2, 2, 3}, TShape{3, 6}, TShape{3}}});
  CheckGradient({"FullyConnected", {{"num_hidden", "3"}, {"flatten", "False"}}, {TShape{2, 3, 4}, TShape{3, 4}, TShape{3}}});
  CheckGradient({"FullyConnected", {{"num_hidden", "4"}, {"no_bias", "True"}}, {TShape{3, 5}, TShape{4, 5}}});
  CheckGradient({"FullyConnected", {{"num_hidden", "1"}}, {TShape{1, 7}, TShape{1, 7}, TShape{1}}});
  // Only the data gradient requested: weight and bias are kNullOp and must stay untouched (zero).
  GradCheckOptions only_data;
  only_data.check = {0};
  CheckGradient({"FullyConnected", {{"num_hidden", "3"}}, {TShape{2, 4}, TShape{3, 4}, TShape{3}}}, only_data);
}

TEST(FullyConnected, ShapeInference) {
  struct Row {
    Kwargs kw;
    TShape data, weight, out;
  };
  const std::vector<Row> rows = {
      {{{"num_hidden", "10"}}, TShape{64, 784}, TShape{10, 784}, TShape{64, 10}},
      {{{"num_hidden", "10"}}, TShape{64, 1, 28, 28}, TShape{10, 784}, TShape{64, 10}},
      {{{"num_hidden", "7"}, {"flatten", "False"}}, TShape{4, 5, 6}, TShape{7, 6}, TShape{4, 5, 7}},
      {{{"num_hidden", "3"}}, TShape{5}, TShape{3, 1}, TShape{5, 3}},
      {{{"num_hidden", "2"}, {"no_bias", "True"}}, TShape{8, 3}, TShape{2, 3}, TShape{8, 2}},
  };
  for (const auto& row : rows) {
    auto p = OperatorProperty::Create("FullyConnected");
    p->Init(row.kw);
    std::vector<TShape> in(p->ListArguments().size()), out, aux;
    in[0] = row.data;
    ASSERT_TRUE(p->InferShape(&in, &out, &aux)) << row.data.ToString();
    EXPECT_EQ(in[1], row.weight) << row.data.ToString();
    if (in.size() == 3) {
      EXPECT_EQ(in[2], TShape{row.weight[0]});
    }
    EXPECT_EQ(out[0], row.out) << row.data.ToString();
  }
  // Unknown data: not enough information yet.
  auto p = OperatorProperty::Create("FullyConnected");
  p->Init({{"num_hidden", "3"}});
  std::vector<TShape> in(3), out, aux;
  EXPECT_FALSE(p->InferShape(&in, &out, &aux));
  EXPECT_EQ(p->ListArguments(), (std::vector<std::string>{"data", "weight", "bias"}));
}

TEST(FullyConnected, Errors) {
  ExpectError([] { InferOutShapes({"FullyConnected", {{"num_hidden", "3"}}, {TShape{2, 4}, TShape{3, 5}, TShape{3}}}); },
              {"FullyConnected", "weight", "(3,4)"});
  ExpectError([] { InferOutShapes({"FullyConnected", {{"num_hidden", "3"}}, {TShape{2, 4}, TShape{3, 4}, TShape{4}}}); },
              {"FullyConnected", "bias"});
  ExpectInitError("FullyConnected", {{"num_hidden", "3"}, {"num_hiden", "3"}}, {"FullyConnected", "num_hiden"});
  ExpectInitError("FullyConnected", {{"num_hidden", "abc"}}, {"FullyConnected", "num_hidden"});
  ExpectInitError("FullyConnected", {{"num_hidden", "0"}}, {"FullyConnected", "num_hidden", ">= 1"});
  ExpectInitError("FullyConnected", {{"num_hidden", "2"}, {"no_bias", "maybe"}}, {"FullyConnected", "no_bias"});
  ExpectInitError("FullyConnected", {}, {"FullyConnected", "num_hidden", "missing"});
  // Integer data has no BLAS product: the error surfaces when the output is read.
  OpCase c{"FullyConnected", {{"num_hidden", "2"}}, {TShape{2, 3}, TShape{2, 3}, TShape{2}}, DType::kInt32};
  ExpectError([&] { RunForward(c, {kFcX, kFcW, kFcB}); }, {"FullyConnected", "int32"});
}

// ---------------------------------------------------------------------------------------------- Convolution

TEST(Convolution, ForwardByHand) {
  // x = [[1,2,3],[4,5,6],[7,8,9]], w = [[1,2],[3,4]], b = 0.5:
  // (0,0) = 1 + 4 + 12 + 20 = 37, (0,1) = 2 + 6 + 15 + 24 = 47, (1,0) = 67, (1,1) = 77.
  OpCase c{"Convolution", {{"kernel", "(2, 2)"}, {"num_filter", "1"}}, {TShape{1, 1, 3, 3}, TShape{1, 1, 2, 2}, TShape{1}}};
  EXPECT_TRUE(Near(RunForward(c, {kOneToNine, {1, 2, 3, 4}, {0.5}})[0], {37.5, 47.5, 67.5, 77.5}, 0, 1e-12, "k2"));
  c.dtype = DType::kFloat32;
  EXPECT_TRUE(Near(RunForward(c, {kOneToNine, {1, 2, 3, 4}, {0.5}})[0], {37.5, 47.5, 67.5, 77.5}, 0, 1e-5, "k2 f32"));

  // Stride 2, pad 1: the windows start at -1 and 1; (0,0) sees only x00 under w11 = 4 -> 4;
  // (0,1) x01*w10 + x02*w11 = 6 + 12; (1,0) x10*w01 + x20*w11 = 8 + 28; (1,1) = 5 + 12 + 24 + 36.
  OpCase sp{"Convolution",
            {{"kernel", "(2,2)"}, {"num_filter", "1"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"no_bias", "True"}},
            {TShape{1, 1, 3, 3}, TShape{1, 1, 2, 2}}};
  EXPECT_TRUE(Near(RunForward(sp, {kOneToNine, {1, 2, 3, 4}})[0], {4, 18, 36, 77}, 0, 1e-12, "stride+pad"));

  // Dilate 2: the taps are the four corners: 1*1 + 3*2 + 7*3 + 9*4 = 64.
  OpCase dl{"Convolution", {{"kernel", "(2,2)"}, {"num_filter", "1"}, {"dilate", "(2,2)"}, {"no_bias", "True"}},
            {TShape{1, 1, 3, 3}, TShape{1, 1, 2, 2}}};
  EXPECT_TRUE(Near(RunForward(dl, {kOneToNine, {1, 2, 3, 4}})[0], {64}, 0, 1e-12, "dilate"));

  // Two channels [[1,2],[3,4]] and [[5,6],[7,8]].
  const HostTensor two = {1, 2, 3, 4, 5, 6, 7, 8};
  // 1x1 kernel mixing the channels: ch0 + 10 ch1.
  OpCase mix{"Convolution", {{"kernel", "(1,1)"}, {"num_filter", "1"}, {"no_bias", "True"}},
             {TShape{1, 2, 2, 2}, TShape{1, 2, 1, 1}}};
  EXPECT_TRUE(Near(RunForward(mix, {two, {1, 10}})[0], {51, 62, 73, 84}, 0, 1e-12, "1x1"));
  // Groups keep the channels apart: filter 0 sees only ch0 (x2), filter 1 only ch1 (x-1), bias (1, 2).
  OpCase grp{"Convolution", {{"kernel", "(1,1)"}, {"num_filter", "2"}, {"num_group", "2"}},
             {TShape{1, 2, 2, 2}, TShape{2, 1, 1, 1}, TShape{2}}};
  EXPECT_TRUE(Near(RunForward(grp, {two, {2, -1}, {1, 2}})[0], {3, 5, 7, 9, -3, -4, -5, -6}, 0, 1e-12, "groups 1x1"));
  OpCase grp2{"Convolution", {{"kernel", "(2,2)"}, {"num_filter", "2"}, {"num_group", "2"}, {"no_bias", "True"}},
              {TShape{1, 2, 2, 2}, TShape{2, 1, 2, 2}}};
  EXPECT_TRUE(Near(RunForward(grp2, {two, {1, 1, 1, 1, 1, 0, 0, 0}})[0], {10, 5}, 0, 1e-12, "groups 2x2"));
  // Two images: the second is the first plus 1 everywhere, so each output grows by sum(w) = 10.
  HostTensor batch = kOneToNine;
  for (double v : kOneToNine) batch.push_back(v + 1);
  OpCase bt{"Convolution", {{"kernel", "(2,2)"}, {"num_filter", "1"}, {"no_bias", "True"}},
            {TShape{2, 1, 3, 3}, TShape{1, 1, 2, 2}}};
  EXPECT_TRUE(Near(RunForward(bt, {batch, {1, 2, 3, 4}})[0], {37, 47, 67, 77, 47, 57, 77, 87}, 0, 1e-12, "batch"));

  // 3-D: 1..8 in a 2x2x2 cube under a 2x2x2 kernel of ones and bias 0.5: 36.5 in both types. With pad 1 and
  // stride 2 on every axis the 8 windows each see one corner of the cube under the opposite tap of w = 1..8:
  // output (z, y, x) = cube[z][y][x] * w[1 - z][1 - y][1 - x].
  const HostTensor cube(kOneToNine.begin(), kOneToNine.begin() + 8);
  OpCase c3{"Convolution", {{"kernel", "(2,2,2)"}, {"num_filter", "1"}}, {TShape{1, 1, 2, 2, 2}, TShape{1, 1, 2, 2, 2}, TShape{1}}};
  EXPECT_TRUE(Near(RunForward(c3, {cube, HostTensor(8, 1.0), {0.5}})[0], {36.5}, 0, 1e-12, "3-D"));
  c3.dtype = DType::kFloat32;
  EXPECT_TRUE(Near(RunForward(c3, {cube, HostTensor(8, 1.0), {0.5}})[0], {36.5}, 0, 1e-5, "3-D f32"));
  OpCase corners{"Convolution",
                 {{"kernel", "(2,2,2)"}, {"num_filter", "1"}, {"stride", "(2,2,2)"}, {"pad", "(1,1,1)"}, {"no_bias", "True"}},
                 {TShape{1, 1, 2, 2, 2}, TShape{1, 1, 2, 2, 2}}};
  EXPECT_TRUE(Near(RunForward(corners, {cube, cube})[0], {8, 14, 18, 20, 20, 18, 14, 8}, 0, 1e-12, "3-D corners"));
}

TEST(Convolution, BackwardByHand) {
  // One output of a 2x2 kernel over a 2x2 image with head 2: dX = 2 w, dW = 2 x, db = 2.
  OpCase c{"Convolution", {{"kernel", "(2,2)"}, {"num_filter", "1"}}, {TShape{1, 1, 2, 2}, TShape{1, 1, 2, 2}, TShape{1}}};
  const auto g = RunBackward(c, {{1, 2, 3, 4}, {5, 6, 7, 8}, {0}}, {2});
  EXPECT_TRUE(Near(g[0], {10, 12, 14, 16}, 0, 1e-12, "dX"));
  EXPECT_TRUE(Near(g[1], {2, 4, 6, 8}, 0, 1e-12, "dW"));
  EXPECT_TRUE(Near(g[2], {2}, 0, 1e-12, "db"));
  // Overlapping windows add up: a 1x2 kernel [1, 1] over a 1x3 row with heads [1, 1]: dX = [1, 2, 1].
  OpCase o{"Convolution", {{"kernel", "(1,2)"}, {"num_filter", "1"}, {"no_bias", "True"}},
           {TShape{1, 1, 1, 3}, TShape{1, 1, 1, 2}}};
  EXPECT_TRUE(Near(RunBackward(o, {{1, 2, 3}, {1, 1}}, {1, 1})[0], {1, 2, 1}, 0, 1e-12, "overlap"));
}

TEST(Convolution, GradientMatchesCentralDifferences) {
  const TShape w3{3, 2, 3, 3};
  CheckGradient({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "3"}}, {TShape{2, 2, 5, 5}, w3, TShape{3}}});
  CheckGradient({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "3"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}},
                 {TShape{2, 2, 5, 5}, w3, TShape{3}}});
  CheckGradient({"Convolution", {{"kernel", "(2,2)"}, {"num_filter", "2"}, {"dilate", "(2,2)"}, {"pad", "(1,1)"}},
                 {TShape{1, 2, 5, 5}, TShape{2, 2, 2, 2}, TShape{2}}});
  CheckGradient({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"num_group", "2"}, {"pad", "(1,1)"}},
                 {TShape{2, 4, 4, 4}, TShape{4, 2, 3, 3}, TShape{4}}});
  CheckGradient({"Convolution", {{"kernel", "(2,3)"}, {"num_filter", "2"}, {"stride", "(1,2)"}, {"pad", "(0,1)"},
                                 {"no_bias", "True"}},
                 {TShape{2, 1, 4, 6}, TShape{2, 1, 2, 3}}});
  // 1x1 kernels: the direct path (no columns) and, with stride 2, the column path.
  CheckGradient({"Convolution", {{"kernel", "(1,1)"}, {"num_filter", "3"}}, {TShape{2, 4, 3, 3}, TShape{3, 4, 1, 1}, TShape{3}}});
  CheckGradient({"Convolution", {{"kernel", "(1,1)"}, {"num_filter", "2"}, {"num_group", "2"}, {"stride", "(2,2)"}},
                 {TShape{2, 2, 5, 5}, TShape{2, 1, 1, 1}, TShape{2}}});
  // Only the data gradient, and only the weight gradient (the others are kNullOp).
  GradCheckOptions only_data, only_weight;
  only_data.check = {0};
  only_weight.check = {1};
  const OpCase c{"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"pad", "(1,1)"}},
                 {TShape{2, 2, 4, 4}, TShape{2, 2, 3, 3}, TShape{2}}};
  CheckGradient(c, only_data);
  CheckGradient(c, only_weight);
  // 3-D: stride, padding and dilation per axis; groups; a 1x1x1 kernel (the direct path).
  CheckGradient({"Convolution",
                 {{"kernel", "(2,2,2)"}, {"num_filter", "2"}, {"stride", "(2,1,1)"}, {"pad", "(1,0,1)"}, {"dilate", "(1,2,1)"}},
                 {TShape{2, 2, 4, 5, 4}, TShape{2, 2, 2, 2, 2}, TShape{2}}});
  CheckGradient({"Convolution", {{"kernel", "(1,2,2)"}, {"num_filter", "4"}, {"num_group", "2"}, {"no_bias", "True"}},
                 {TShape{1, 4, 3, 3, 3}, TShape{4, 2, 1, 2, 2}}});
  CheckGradient({"Convolution", {{"kernel", "(1,1,1)"}, {"num_filter", "2"}}, {TShape{2, 3, 2, 2, 2}, TShape{2, 3, 1, 1, 1}, TShape{2}}});
}

// float32 runs oneDNN's convolution (where the build has it, for more than one input channel per group),
// float64 troupe's own im2col kernel: on odd shapes (padding, strides, dilation, groups, a 1x1 stride-2 kernel
// whose last input row no window reaches, asymmetric kernels, no bias, Winograd's shapes) the two must agree
// to float32 rounding, forward and backward, written (kWriteTo) and accumulated (kAddTo: oneDNN's summing reorder).
TEST(Convolution, Float32AgreesWithTheFloat64ReferenceKernel) {
  struct Case {
    Kwargs kw;
    TShape x, w;
  };
  const std::vector<Case> cases = {
      {{{"kernel", "(3,3)"}, {"num_filter", "5"}, {"pad", "(1,1)"}}, {3, 4, 7, 6}, {5, 4, 3, 3}},
      {{{"kernel", "(3,3)"}, {"num_filter", "4"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}}, {2, 3, 9, 8}, {4, 3, 3, 3}},
      {{{"kernel", "(1,1)"}, {"num_filter", "6"}, {"stride", "(2,2)"}}, {2, 4, 8, 8}, {6, 4, 1, 1}},
      {{{"kernel", "(3,2)"}, {"num_filter", "3"}, {"dilate", "(2,3)"}, {"pad", "(2,1)"}}, {2, 2, 8, 9}, {3, 2, 3, 2}},
      {{{"kernel", "(3,3)"}, {"num_filter", "6"}, {"num_group", "3"}, {"pad", "(1,1)"}, {"no_bias", "True"}},
       {2, 6, 5, 5}, {6, 2, 3, 3}},
      {{{"kernel", "(5,5)"}, {"num_filter", "7"}, {"stride", "(3,2)"}, {"pad", "(2,0)"}}, {1, 17, 11, 10}, {7, 17, 5, 5}},
      // Wide enough for oneDNN's Winograd kernel (3x3, stride 1, channels in multiples of 16).
      {{{"kernel", "(3,3)"}, {"num_filter", "32"}, {"pad", "(1,1)"}}, {2, 32, 9, 7}, {32, 32, 3, 3}},
      {{{"kernel", "(3,3)"}, {"num_filter", "16"}, {"pad", "(1,1)"}, {"no_bias", "True"}}, {3, 48, 6, 6}, {16, 48, 3, 3}},
      // One input channel: troupe's kernel on both types (checked all the same).
      {{{"kernel", "(3,3)"}, {"num_filter", "4"}}, {2, 1, 6, 6}, {4, 1, 3, 3}},
      // 3-D (oneDNN's 5-D primitives against troupe's loops), with groups, dilation, and channels for the blocked
      // kernels.
      {{{"kernel", "(3,3,3)"}, {"num_filter", "5"}, {"stride", "(1,2,1)"}, {"pad", "(1,1,1)"}}, {2, 4, 5, 6, 5},
       {5, 4, 3, 3, 3}},
      {{{"kernel", "(2,2,2)"}, {"num_filter", "6"}, {"num_group", "3"}, {"dilate", "(2,1,1)"}, {"no_bias", "True"}},
       {2, 6, 5, 4, 4}, {6, 2, 2, 2, 2}},
      {{{"kernel", "(3,3,3)"}, {"num_filter", "16"}, {"pad", "(1,1,1)"}}, {1, 16, 4, 4, 4}, {16, 16, 3, 3, 3}},
  };
  std::mt19937_64 rng(23);
  for (const Case& k : cases) {
    bool bias = true;
    for (const auto& [key, value] : k.kw) bias = bias && key != "no_bias";
    OpCase c{"Convolution", k.kw, {k.x, k.w}};
    if (bias) c.in_shapes.push_back(TShape{k.w[0]});
    const TShape y = InferOutShapes(c)[0];
    std::vector<HostTensor> in;
    for (const TShape& s : c.in_shapes) in.push_back(test::RandomTensor(s, &rng));
    std::vector<HostTensor> start;
    for (const TShape& s : c.in_shapes) start.push_back(test::RandomTensor(s, &rng));
    const HostTensor head = test::RandomTensor(y, &rng);
    const test::FwdBwd ref = test::RunForwardBackward(c, in, {head}, {}, {}, {}, start);
    c.dtype = DType::kFloat32;
    const test::FwdBwd got = test::RunForwardBackward(c, in, {head}, {}, {}, {}, start);
    const std::string what = "Convolution case " + std::to_string(&k - cases.data());
    EXPECT_TRUE(Near(got.out[0], ref.out[0], 1e-4, 1e-4, what + " output"));
    for (std::size_t i = 0; i < ref.grad.size(); ++i) {
      EXPECT_TRUE(Near(got.grad[i], ref.grad[i], 1e-4, 1e-4, what + " gradient " + std::to_string(i)));
      EXPECT_TRUE(Near(got.grad_add[i], ref.grad_add[i], 1e-4, 1e-4, what + " kAddTo gradient " + std::to_string(i)));
    }
  }
}

// oneDNN's convolution keeps its weights reordered (for Winograd: transformed) while the weight array's state
// (variable id, write count) is unchanged. One operator object, inference forward passes: a changed weight
// array, a different weight array, and a new array in a deleted array's memory and variable must each give
// the result of a fresh operator, never the kept weights' result.
TEST(Convolution, KeptWeightsFollowTheWeightArray) {
  OpCase c{"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "32"}, {"pad", "(1,1)"}},
           {TShape{2, 32, 6, 6}, TShape{32, 32, 3, 3}, TShape{32}}};
  c.dtype = DType::kFloat32;
  c.is_train = false;
  std::mt19937_64 rng(41);
  const HostTensor x = test::RandomTensor(c.in_shapes[0], &rng), b = test::RandomTensor(c.in_shapes[2], &rng);
  auto runner = test::MakeRunner(c);
  const auto forward = [&](const NDArray& w) {
    NDArray y = NDArray::Zeros(runner->out_shapes()[0], Context::CPU(), c.dtype);
    runner->Forward(false, {test::ToArray(x, c.in_shapes[0], c.dtype, c.ctx), w,
                            test::ToArray(b, c.in_shapes[2], c.dtype, c.ctx)}, {y}, {});
    return test::ToHost(y);
  };
  const auto fresh = [&](const HostTensor& w) { return RunForward(c, {x, w, b})[0]; };
  const HostTensor w1 = test::RandomTensor(c.in_shapes[1], &rng);
  NDArray w = test::ToArray(w1, c.in_shapes[1], c.dtype, c.ctx);
  EXPECT_TRUE(Near(forward(w), fresh(w1), 1e-6, 1e-6, "first call"));
  EXPECT_TRUE(Near(forward(w), fresh(w1), 1e-6, 1e-6, "same weights again"));
  w *= 2.0;  // written through the engine: a new state of the same array
  HostTensor w2 = w1;
  for (double& v : w2) v *= 2.0;
  EXPECT_TRUE(Near(forward(w), fresh(w2), 1e-6, 1e-6, "after the weights changed"));
  const HostTensor w3 = test::RandomTensor(c.in_shapes[1], &rng);
  EXPECT_TRUE(Near(forward(test::ToArray(w3, c.in_shapes[1], c.dtype, c.ctx)), fresh(w3), 1e-6, 1e-6,
                   "another weight array"));
  for (int i = 0; i < 3; ++i) {
    // Each array is dropped after its call: the next may get its memory and its (recycled) variable.
    const HostTensor wi = test::RandomTensor(c.in_shapes[1], &rng);
    EXPECT_TRUE(Near(forward(test::ToArray(wi, c.in_shapes[1], c.dtype, c.ctx)), fresh(wi), 1e-6, 1e-6,
                     "a new array " + std::to_string(i)));
  }
}

TEST(Convolution, ShapeInference) {
  struct Row {
    Kwargs kw;
    TShape data, weight, out;
  };
  const std::vector<Row> rows = {
      {{{"kernel", "(5,5)"}, {"num_filter", "20"}}, TShape{64, 1, 28, 28}, TShape{20, 1, 5, 5}, TShape{64, 20, 24, 24}},
      {{{"kernel", "(3,3)"}, {"num_filter", "64"}, {"pad", "(1,1)"}}, TShape{32, 64, 56, 56}, TShape{64, 64, 3, 3},
       TShape{32, 64, 56, 56}},
      {{{"kernel", "(7,7)"}, {"num_filter", "64"}, {"stride", "(2,2)"}, {"pad", "(3,3)"}}, TShape{1, 3, 224, 224},
       TShape{64, 3, 7, 7}, TShape{1, 64, 112, 112}},
      {{{"kernel", "(3,3)"}, {"num_filter", "8"}, {"dilate", "(2,2)"}}, TShape{2, 4, 10, 10}, TShape{8, 4, 3, 3},
       TShape{2, 8, 6, 6}},
      {{{"kernel", "(3,3)"}, {"num_filter", "8"}, {"num_group", "4"}, {"stride", "(2,2)"}}, TShape{2, 4, 9, 8},
       TShape{8, 1, 3, 3}, TShape{2, 8, 4, 3}},
      {{{"kernel", "(1,3)"}, {"num_filter", "2"}, {"stride", "(1,2)"}, {"pad", "(0,1)"}}, TShape{1, 1, 1, 5},
       TShape{2, 1, 1, 3}, TShape{1, 2, 1, 3}},
      {{{"kernel", "(3,3,3)"}, {"num_filter", "8"}, {"stride", "(1,2,2)"}, {"pad", "(1,1,1)"}}, TShape{2, 4, 8, 16, 16},
       TShape{8, 4, 3, 3, 3}, TShape{2, 8, 8, 8, 8}},
      {{{"kernel", "(2,3,3)"}, {"num_filter", "6"}, {"num_group", "2"}, {"dilate", "(2,1,1)"}, {"layout", "NCDHW"}},
       TShape{1, 4, 5, 7, 7}, TShape{6, 2, 2, 3, 3}, TShape{1, 6, 3, 5, 5}},
  };
  for (const auto& row : rows) {
    auto p = OperatorProperty::Create("Convolution");
    p->Init(row.kw);
    std::vector<TShape> in(3), out, aux;
    in[0] = row.data;
    ASSERT_TRUE(p->InferShape(&in, &out, &aux)) << row.data.ToString();
    EXPECT_EQ(in[1], row.weight) << row.data.ToString();
    EXPECT_EQ(in[2], TShape{row.weight[0]});
    EXPECT_EQ(out[0], row.out) << row.data.ToString();
  }
}

TEST(Convolution, Errors) {
  const Kwargs k3{{"kernel", "(3,3)"}, {"num_filter", "4"}};
  ExpectError([&] { InferOutShapes({"Convolution", k3, {TShape{1, 2, 5, 5}, TShape{4, 3, 3, 3}, TShape{4}}}); },
              {"Convolution", "weight"});
  ExpectError([&] { InferOutShapes({"Convolution", k3, {TShape{2, 5, 5}, TShape{}, TShape{}}}); },
              {"Convolution", "data", "4 dimensions"});
  ExpectError([&] { InferOutShapes({"Convolution", k3, {TShape{1, 2, 2, 5}, TShape{}, TShape{}}}); },
              {"Convolution", "data", "exceeds"});
  ExpectError(
      [] {
        InferOutShapes({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"num_group", "2"}},
                        {TShape{1, 3, 5, 5}, TShape{}, TShape{}}});
      },
      {"Convolution", "data", "num_group"});
  ExpectInitError("Convolution", {{"kernel", "(3,3)"}}, {"Convolution", "num_filter", "missing"});
  ExpectInitError("Convolution", {{"kernel", "(3,3,3,3)"}, {"num_filter", "1"}}, {"Convolution", "kernel", "3-D"});
  // 3-D: the data's dimensions and the parameters' values follow the kernel.
  const Kwargs k333{{"kernel", "(3,3,3)"}, {"num_filter", "4"}};
  ExpectError([&] { InferOutShapes({"Convolution", k333, {TShape{1, 2, 5, 5}, TShape{}, TShape{}}}); },
              {"Convolution", "data", "3-D convolution", "5 dimensions"});
  ExpectError([&] { InferOutShapes({"Convolution", k3, {TShape{1, 2, 5, 5, 5}, TShape{}, TShape{}}}); },
              {"Convolution", "data", "2-D convolution", "4 dimensions"});
  ExpectError([&] { InferOutShapes({"Convolution", k333, {TShape{1, 2, 5, 2, 5}, TShape{}, TShape{}}}); },
              {"Convolution", "data", "exceeds", "dimension 3"});
  const std::vector<std::pair<Kwargs, std::vector<std::string>>> bad_3d = {
      {{{"kernel", "(3,3,3)"}, {"stride", "(1,1)"}}, {"stride", "3 values"}},
      {{{"kernel", "(3,3,3)"}, {"dilate", "(1,0,1)"}}, {"dilate", ">= 1"}},
      {{{"kernel", "(3,3,3)"}, {"layout", "NCHW"}}, {"layout", "NCDHW"}},
      {{{"kernel", "(3,3)"}, {"layout", "NCDHW"}}, {"layout", "NCHW"}},
  };
  for (auto [kw, parts] : bad_3d) {
    kw.emplace_back("num_filter", "2");
    parts.insert(parts.begin(), "Convolution");
    ExpectInitError("Convolution", kw, parts);
  }
  ExpectInitError("Convolution", {{"kernel", "(3,x)"}, {"num_filter", "1"}}, {"Convolution", "kernel"});
  ExpectInitError("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "0"}}, {"Convolution", "num_filter"});
  ExpectInitError("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"stride", "(0,1)"}},
                  {"Convolution", "stride"});
  ExpectInitError("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"layout", "NHWC"}},
                  {"Convolution", "layout", "NCHW"});
  ExpectInitError("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "3"}, {"num_group", "2"}},
                  {"Convolution", "num_filter", "num_group"});
  ExpectInitError("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"cudnn_tune", "slow"}},
                  {"Convolution", "cudnn_tune"});
  ExpectInitError("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"padding", "(1,1)"}},
                  {"Convolution", "padding"});
  // The column buffer of one image must fit the workspace cap (MB).
  OpCase ws{"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "1"}, {"workspace", "0"}},
            {TShape{1, 1, 4, 4}, TShape{1, 1, 3, 3}, TShape{1}}};
  ExpectError([&] { RunForward(ws, {HostTensor(16, 1.0), HostTensor(9, 1.0), {0}}); }, {"Convolution", "workspace"});
  // MXNet's compatibility parameters are accepted.
  auto p = OperatorProperty::Create("Convolution");
  EXPECT_NO_THROW(p->Init({{"kernel", "(3,3)"}, {"num_filter", "2"}, {"cudnn_tune", "fastest"}, {"cudnn_off", "True"},
                           {"workspace", "512"}, {"layout", "NCHW"}, {"__lr_mult__", "2"}}));
}

// -------------------------------------------------------------------------------------------------- Pooling

OpCase Pool(Kwargs kw, TShape data) { return OpCase{"Pooling", std::move(kw), {data}}; }

TEST(Pooling, ForwardByHand) {
  const TShape s4{1, 1, 4, 4};
  // 1..16 in a 4x4 image.
  EXPECT_TRUE(Near(RunForward(Pool({{"kernel", "(2,2)"}, {"stride", "(2,2)"}}, s4), {kOneToSixteen})[0],
                   {6, 8, 14, 16}, 0, 1e-12, "max"));
  EXPECT_TRUE(Near(RunForward(Pool({{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}}, s4), {kOneToSixteen})[0],
                   {3.5, 5.5, 11.5, 13.5}, 0, 1e-12, "avg"));
  EXPECT_TRUE(Near(RunForward(Pool({{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "sum"}}, s4), {kOneToSixteen})[0],
                   {14, 22, 46, 54}, 0, 1e-12, "sum"));
  // Kernel 3, stride 2: 'valid' fits one window; 'full' ceils to 2x2, the last windows clipped at the edge.
  EXPECT_TRUE(Near(RunForward(Pool({{"kernel", "(3,3)"}, {"stride", "(2,2)"}}, s4), {kOneToSixteen})[0], {11}, 0, 1e-12,
                   "max valid"));
  EXPECT_TRUE(Near(RunForward(Pool({{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pooling_convention", "full"}}, s4),
                              {kOneToSixteen})[0],
                   {11, 12, 15, 16}, 0, 1e-12, "max full"));
  // avg 'full': windows of 9, 6 (3+4, 7+8, 11+12 = 45), 6 (72) and 4 (54) elements.
  EXPECT_TRUE(Near(RunForward(Pool({{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pooling_convention", "full"},
                                    {"pool_type", "avg"}},
                                   s4),
                              {kOneToSixteen})[0],
                   {6, 7.5, 12, 13.5}, 0, 1e-12, "avg full"));

  // Padding 1 around 1..9, kernel 2, stride 2: windows {1}, {2,3}, {4,7}, {5,6,8,9}.
  const TShape s3{1, 1, 3, 3};
  const Kwargs padded{{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}};
  EXPECT_TRUE(Near(RunForward(Pool(padded, s3), {kOneToNine})[0], {1, 3, 7, 9}, 0, 1e-12, "max pad"));
  Kwargs avg = padded;
  avg.emplace_back("pool_type", "avg");
  EXPECT_TRUE(Near(RunForward(Pool(avg, s3), {kOneToNine})[0], {0.25, 1.25, 2.75, 7}, 0, 1e-12, "avg pad incl"));
  avg.emplace_back("count_include_pad", "False");
  EXPECT_TRUE(Near(RunForward(Pool(avg, s3), {kOneToNine})[0], {1, 2.5, 5.5, 7}, 0, 1e-12, "avg pad excl"));

  // Global pooling over two channels [1..4] and [5..8]; the kernel is ignored.
  const TShape s2{1, 2, 2, 2};
  const HostTensor two = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(Near(RunForward(Pool({{"global_pool", "True"}}, s2), {two})[0], {4, 8}, 0, 1e-12, "global max"));
  EXPECT_TRUE(Near(RunForward(Pool({{"global_pool", "True"}, {"pool_type", "avg"}, {"kernel", "(1,1)"}}, s2), {two})[0],
                   {2.5, 6.5}, 0, 1e-12, "global avg"));
  EXPECT_TRUE(Near(RunForward(Pool({{"global_pool", "True"}, {"pool_type", "sum"}}, s2), {two})[0], {10, 26}, 0, 1e-12,
                   "global sum"));
  OpCase f32 = Pool({{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}}, s4);
  f32.dtype = DType::kFloat32;
  EXPECT_TRUE(Near(RunForward(f32, {kOneToSixteen})[0], {3.5, 5.5, 11.5, 13.5}, 0, 1e-6, "avg float32"));

  // 3-D: 1..16 in a 2x2x4 volume (depth 2, height 2, width 4), kernel (2,2,2) stride 2: the windows hold
  // {1,2,5,6,9,10,13,14} and {3,4,7,8,11,12,15,16}.
  const TShape v{1, 1, 2, 2, 4};
  const Kwargs k222{{"kernel", "(2,2,2)"}, {"stride", "(2,2,2)"}};
  EXPECT_TRUE(Near(RunForward(Pool(k222, v), {kOneToSixteen})[0], {14, 16}, 0, 1e-12, "3-D max"));
  Kwargs avg3 = k222;
  avg3.emplace_back("pool_type", "avg");
  EXPECT_TRUE(Near(RunForward(Pool(avg3, v), {kOneToSixteen})[0], {7.5, 9.5}, 0, 1e-12, "3-D avg"));
  // Padding 1 in depth only: windows of 2 slices, one of them padding; the count with it is 8, without 4.
  Kwargs pad3 = {{"kernel", "(2,2,2)"}, {"stride", "(2,2,2)"}, {"pad", "(1,0,0)"}, {"pool_type", "avg"}};
  EXPECT_TRUE(Near(RunForward(Pool(pad3, v), {kOneToSixteen})[0], {1.75, 2.75, 5.75, 6.75}, 0, 1e-12, "3-D avg pad"));
  pad3.emplace_back("count_include_pad", "False");
  EXPECT_TRUE(Near(RunForward(Pool(pad3, v), {kOneToSixteen})[0], {3.5, 5.5, 11.5, 13.5}, 0, 1e-12, "3-D avg excl"));
  OpCase f32v = Pool(avg3, v);
  f32v.dtype = DType::kFloat32;
  EXPECT_TRUE(Near(RunForward(f32v, {kOneToSixteen})[0], {7.5, 9.5}, 0, 1e-6, "3-D avg float32"));
  EXPECT_TRUE(Near(RunForward(Pool({{"global_pool", "True"}, {"pool_type", "sum"}}, v), {kOneToSixteen})[0], {136}, 0,
                   1e-12, "3-D global sum"));
}

TEST(Pooling, BackwardByHand) {
  // Ties: the first maximum (row-major) takes the gradient.
  const auto tie = RunBackward(Pool({{"kernel", "(2,2)"}}, TShape{1, 1, 2, 2}), {{1, 1, 1, 1}}, {3});
  EXPECT_TRUE(Near(tie[0], {3, 0, 0, 0}, 0, 0, "max tie"));
  // Overlapping max windows (kernel 2, stride 1) over [[1,2,3],[4,9,5],[6,7,8]]: 9 wins all four windows.
  const auto over = RunBackward(Pool({{"kernel", "(2,2)"}}, TShape{1, 1, 3, 3}), {{1, 2, 3, 4, 9, 5, 6, 7, 8}}, {1, 2, 3, 4});
  EXPECT_TRUE(Near(over[0], {0, 0, 0, 0, 10, 0, 0, 0, 0}, 0, 0, "max overlap"));
  // avg with padding (count_include_pad): each output spreads head / 4 over its in-image part.
  const auto avg = RunBackward(Pool({{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}},
                                    TShape{1, 1, 3, 3}),
                               {kOneToNine}, {4, 8, 12, 16});
  EXPECT_TRUE(Near(avg[0], {1, 2, 2, 3, 4, 4, 3, 4, 4}, 0, 1e-12, "avg pad"));
  const auto sum = RunBackward(Pool({{"kernel", "(2,2)"}, {"pool_type", "sum"}}, TShape{1, 1, 2, 3}), {{1, 2, 3, 4, 5, 6}},
                               {1, 10});
  EXPECT_TRUE(Near(sum[0], {1, 11, 10, 1, 11, 10}, 0, 1e-12, "sum overlap"));
}

// Backward runs planes in ranges on the kernel threads (CpuParallelFor): a batch of many planes must give every
// plane what the same plane alone (one range) gives, under kWriteTo and kAddTo, for the 2x2 loop and the
// general one (max with ties, avg with padding).
TEST(Pooling, BackwardOverManyPlanesMatchesEachPlaneAlone) {
  const TShape s{3, 7, 9, 8};
  const std::int64_t plane = 9 * 8;
  std::mt19937 rng(11);
  HostTensor x(static_cast<std::size_t>(s.Size()));
  for (double& v : x) v = static_cast<double>(rng() % 5);
  for (const Kwargs& kw : {Kwargs{{"kernel", "(2,2)"}, {"stride", "(2,2)"}},
                           Kwargs{{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}},
                           Kwargs{{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}}}) {
    const std::string what = kw[0].second + (kw.size() > 3 ? " avg" : kw.size() > 2 ? " max pad" : " max");
    const TShape out = InferOutShapes(Pool(kw, s))[0];
    const std::int64_t out_plane = out[2] * out[3];
    HostTensor head(static_cast<std::size_t>(out.Size()));
    for (std::size_t i = 0; i < head.size(); ++i) head[i] = static_cast<double>(i % 13) - 6;
    const HostTensor init(x.size(), 0.5);
    const FwdBwd all = RunForwardBackward(Pool(kw, s), {x}, {head}, {}, {}, {}, {init});
    for (std::int64_t p = 0; p < s[0] * s[1]; ++p) {
      const HostTensor xp(x.begin() + p * plane, x.begin() + (p + 1) * plane);
      const HostTensor hp(head.begin() + p * out_plane, head.begin() + (p + 1) * out_plane);
      const FwdBwd one =
          RunForwardBackward(Pool(kw, TShape{1, 1, 9, 8}), {xp}, {hp}, {}, {}, {}, {HostTensor(xp.size(), 0.5)});
      const HostTensor got(all.grad[0].begin() + p * plane, all.grad[0].begin() + (p + 1) * plane);
      const HostTensor got_add(all.grad_add[0].begin() + p * plane, all.grad_add[0].begin() + (p + 1) * plane);
      ASSERT_TRUE(Near(got, one.grad[0], 0, 0, what + " plane " + std::to_string(p)));
      ASSERT_TRUE(Near(got_add, one.grad_add[0], 0, 0, what + " kAddTo plane " + std::to_string(p)));
    }
  }
}

// 2x2 max pooling with stride 2 whose windows lie inside the image has a loop of its own: it must agree
// with the general loops, ties included (values drawn from 0..3, so most windows hold a tie). Width 5 under
// 'valid' takes the 2x2 loop (2 output columns); under 'full' the general one (3 columns, the first 2 the same
// windows).
TEST(Pooling, MaxTwoByTwoMatchesTheGeneralLoops) {
  const TShape s{2, 3, 6, 5};
  std::mt19937 rng(7);
  HostTensor x(static_cast<std::size_t>(s.Size()));
  for (double& v : x) v = static_cast<double>(rng() % 4);
  const Kwargs two{{"kernel", "(2,2)"}, {"stride", "(2,2)"}};
  Kwargs full = two;
  full.emplace_back("pooling_convention", "full");
  const HostTensor fast = RunForward(Pool(two, s), {x})[0];
  const HostTensor general = RunForward(Pool(full, s), {x})[0];
  ASSERT_EQ(fast.size(), static_cast<std::size_t>(2 * 3 * 3 * 2));
  ASSERT_EQ(general.size(), static_cast<std::size_t>(2 * 3 * 3 * 3));
  HostTensor head_fast(fast.size()), head_general(general.size(), 0.0);
  for (std::size_t i = 0; i < fast.size(); ++i) {
    const std::size_t row = i / 2, col = i % 2;
    EXPECT_EQ(fast[i], general[row * 3 + col]) << "output " << i;
    head_fast[i] = static_cast<double>(i + 1);
    head_general[row * 3 + col] = static_cast<double>(i + 1);
  }
  const auto dx_fast = RunBackward(Pool(two, s), {x}, head_fast);
  const auto dx_general = RunBackward(Pool(full, s), {x}, head_general);
  EXPECT_TRUE(Near(dx_fast[0], dx_general[0], 0, 0, "2x2 max gradient"));
}

// float32's forward pass is oneDNN's where oneDNN computes MXNet's windows, float64's troupe's loops: on
// max and avg (with and without the padding in the count), the global pool, both conventions and odd sizes,
// in 2-D and 3-D (with a 2x2 kernel of depth 1: the 2x2 loop on every depth slice), the outputs and (troupe's,
// from oneDNN's outputs) gradients, written and accumulated, agree to float32 rounding.
TEST(Pooling, Float32AgreesWithTheFloat64Loops) {
  struct Case {
    Kwargs kw;
    TShape shape;
  };
  const TShape s2{2, 17, 9, 7}, s3{2, 5, 7, 6, 5};
  const std::vector<Case> cases = {
      {{{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}}, s2},
      {{{"kernel", "(3,3)"}, {"stride", "(2,2)"}}, s2},
      {{{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pooling_convention", "full"}}, s2},
      {{{"kernel", "(3,3)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}}, s2},
      {{{"kernel", "(3,3)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}, {"count_include_pad", "False"}}, s2},
      {{{"kernel", "(3,2)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}, {"pooling_convention", "full"}}, s2},
      {{{"global_pool", "True"}, {"pool_type", "avg"}}, s2},
      {{{"global_pool", "True"}, {"kernel", "(1,1)"}}, s2},
      {{{"kernel", "(2,2)"}, {"stride", "(1,1)"}, {"pool_type", "sum"}}, s2},
      {{{"kernel", "(3,3,3)"}, {"stride", "(2,2,2)"}, {"pad", "(1,1,1)"}}, s3},
      {{{"kernel", "(2,2,2)"}, {"stride", "(2,2,2)"}, {"pooling_convention", "full"}}, s3},
      {{{"kernel", "(3,2,3)"}, {"pad", "(1,1,1)"}, {"pool_type", "avg"}}, s3},
      {{{"kernel", "(3,2,3)"}, {"pad", "(1,1,1)"}, {"pool_type", "avg"}, {"count_include_pad", "False"}}, s3},
      {{{"kernel", "(2,3,2)"}, {"stride", "(2,2,1)"}, {"pool_type", "avg"}, {"pooling_convention", "full"}}, s3},
      {{{"kernel", "(1,2,2)"}, {"stride", "(1,2,2)"}}, s3},
      {{{"global_pool", "True"}, {"pool_type", "avg"}}, s3},
  };
  std::mt19937_64 rng(29);
  for (const Case& k : cases) {
    OpCase c = Pool(k.kw, k.shape);
    const HostTensor x = test::RandomTensor(k.shape, &rng);
    const TShape y = InferOutShapes(c)[0];
    const HostTensor head = test::RandomTensor(y, &rng);
    const HostTensor start = test::RandomTensor(k.shape, &rng);  // kAddTo's initial gradient
    const test::FwdBwd ref = test::RunForwardBackward(c, {x}, {head}, {}, {}, {}, {start});
    c.dtype = DType::kFloat32;
    const test::FwdBwd got = test::RunForwardBackward(c, {x}, {head}, {}, {}, {}, {start});
    const std::string what = "Pooling case " + std::to_string(&k - cases.data());
    EXPECT_TRUE(Near(got.out[0], ref.out[0], 1e-6, 1e-6, what + " output"));
    EXPECT_TRUE(Near(got.grad[0], ref.grad[0], 1e-6, 1e-6, what + " gradient"));
    EXPECT_TRUE(Near(got.grad_add[0], ref.grad_add[0], 1e-6, 1e-6, what + " kAddTo gradient"));
  }
}

TEST(Pooling, GradientMatchesCentralDifferences) {
  const TShape s{2, 2, 5, 5};
  for (const char* type : {"max", "avg", "sum"}) {
    for (const char* conv : {"valid", "full"}) {
      CheckGradient(Pool({{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", type}, {"pooling_convention", conv}}, s));
      CheckGradient(Pool({{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", type},
                          {"pooling_convention", conv}},
                         s));
    }
    CheckGradient(Pool({{"kernel", "(3,2)"}, {"pool_type", type}}, TShape{1, 2, 4, 5}));
    CheckGradient(Pool({{"global_pool", "True"}, {"pool_type", type}}, TShape{2, 3, 3, 4}));
  }
  CheckGradient(Pool({{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "avg"},
                      {"count_include_pad", "False"}, {"pooling_convention", "full"}},
                     s));
  // 3-D (sizes where no 'full' window lies wholly in the padding).
  const TShape s3{1, 2, 4, 3, 4};
  for (const char* type : {"max", "avg", "sum"}) {
    for (const char* conv : {"valid", "full"}) {
      CheckGradient(Pool({{"kernel", "(2,2,2)"}, {"stride", "(2,1,2)"}, {"pad", "(1,0,1)"}, {"pool_type", type},
                          {"pooling_convention", conv}},
                         s3));
    }
    CheckGradient(Pool({{"global_pool", "True"}, {"pool_type", type}}, TShape{1, 2, 2, 3, 3}));
  }
  CheckGradient(Pool({{"kernel", "(2,3,2)"}, {"pad", "(1,1,0)"}, {"pool_type", "avg"}, {"count_include_pad", "False"}},
                     s3));
}

TEST(Pooling, ShapeInference) {
  struct Row {
    Kwargs kw;
    TShape data, out;
  };
  const std::vector<Row> rows = {
      {{{"kernel", "(2,2)"}, {"stride", "(2,2)"}}, TShape{64, 20, 24, 24}, TShape{64, 20, 12, 12}},
      {{{"kernel", "(3,3)"}, {"stride", "(2,2)"}}, TShape{1, 3, 8, 8}, TShape{1, 3, 3, 3}},
      {{{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pooling_convention", "full"}}, TShape{1, 3, 8, 8}, TShape{1, 3, 4, 4}},
      {{{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}}, TShape{2, 64, 112, 112}, TShape{2, 64, 56, 56}},
      {{{"kernel", "(2,3)"}}, TShape{1, 1, 4, 5}, TShape{1, 1, 3, 3}},
      {{{"global_pool", "True"}}, TShape{8, 512, 7, 7}, TShape{8, 512, 1, 1}},
      {{{"global_pool", "True"}, {"kernel", "(3,3)"}, {"stride", "(2,2)"}}, TShape{8, 16, 5, 9}, TShape{8, 16, 1, 1}},
      {{{"kernel", "(2,2,2)"}, {"stride", "(2,2,2)"}}, TShape{2, 3, 8, 8, 8}, TShape{2, 3, 4, 4, 4}},
      {{{"kernel", "(3,3,3)"}, {"stride", "(2,2,2)"}, {"pooling_convention", "full"}}, TShape{1, 2, 8, 7, 6},
       TShape{1, 2, 4, 3, 3}},
      {{{"kernel", "(3,1,3)"}, {"stride", "(1,1,2)"}, {"pad", "(1,0,1)"}, {"layout", "NCDHW"}}, TShape{1, 2, 4, 5, 6},
       TShape{1, 2, 4, 5, 3}},
      {{{"global_pool", "True"}}, TShape{2, 3, 4, 5, 6}, TShape{2, 3, 1, 1, 1}},
      // Gluon's GlobalAvgPool3D passes kernel, stride and pad of ones and zeros; a 2-D kernel is ignored too.
      {{{"global_pool", "True"}, {"kernel", "(1,1,1)"}, {"stride", "(1,1,1)"}, {"pad", "(0,0,0)"}}, TShape{2, 3, 4, 5, 6},
       TShape{2, 3, 1, 1, 1}},
      {{{"global_pool", "True"}, {"kernel", "(2,2)"}}, TShape{2, 3, 4, 5, 6}, TShape{2, 3, 1, 1, 1}},
  };
  for (const auto& row : rows) EXPECT_EQ(InferOutShapes(Pool(row.kw, row.data))[0], row.out) << row.data.ToString();
}

TEST(Pooling, Errors) {
  ExpectError([] { InferOutShapes(Pool({{"kernel", "(5,5)"}}, TShape{1, 1, 4, 4})); }, {"Pooling", "data", "kernel"});
  ExpectError([] { InferOutShapes(Pool({{"kernel", "(2,2)"}}, TShape{4, 4})); }, {"Pooling", "data", "4 dimensions"});
  ExpectInitError("Pooling", {{"kernel", "(2,2)"}, {"pool_type", "median"}}, {"Pooling", "pool_type", "'max'"});
  ExpectInitError("Pooling", {{"kernel", "(2,2)"}, {"pool_type", "lp"}}, {"Pooling", "pool_type", "not supported"});
  ExpectInitError("Pooling", {{"kernel", "(2,2)"}, {"pooling_convention", "same"}}, {"Pooling", "pooling_convention"});
  ExpectInitError("Pooling", {{"pool_type", "max"}}, {"Pooling", "kernel", "global_pool"});
  ExpectInitError("Pooling", {{"kernel", "(2,2)"}, {"stride", "(2,2,2)"}}, {"Pooling", "stride"});
  ExpectInitError("Pooling", {{"kernel", "(2,2)"}, {"global_pool", "yes"}}, {"Pooling", "global_pool"});
  ExpectInitError("Pooling", {{"kernel", "(2,2)"}, {"size", "2"}}, {"Pooling", "size"});
  ExpectInitError("Pooling", {{"kernel", "(2,2)"}, {"layout", "NHWC"}}, {"Pooling", "layout"});
  // 3-D.
  ExpectError([] { InferOutShapes(Pool({{"kernel", "(2,2,2)"}}, TShape{1, 1, 4, 4})); },
              {"Pooling", "data", "3-D pooling", "5 dimensions"});
  ExpectError([] { InferOutShapes(Pool({{"kernel", "(2,2)"}}, TShape{1, 1, 4, 4, 4})); },
              {"Pooling", "data", "2-D pooling", "4 dimensions"});
  ExpectError([] { InferOutShapes(Pool({{"kernel", "(2,5,2)"}}, TShape{1, 1, 4, 4, 4})); },
              {"Pooling", "data", "kernel", "dimension 3"});
  ExpectError([] { InferOutShapes(Pool({{"global_pool", "True"}, {"layout", "NCHW"}}, TShape{1, 1, 4, 4, 4})); },
              {"Pooling", "data", "layout"});
  ExpectError([] { InferOutShapes(Pool({{"global_pool", "True"}}, TShape{1, 1, 2, 2, 2, 2})); },
              {"Pooling", "data", "global pooling"});
  const std::vector<std::pair<Kwargs, std::vector<std::string>>> bad_3d = {
      {{{"kernel", "(2,2,2,2)"}}, {"Pooling", "kernel", "3-D"}},
      {{{"kernel", "(2,2,2)"}, {"pad", "(1,1)"}}, {"Pooling", "pad", "3 values"}},
      {{{"kernel", "(2,2,2)"}, {"stride", "(1,0,1)"}}, {"Pooling", "stride", ">= 1"}},
      {{{"kernel", "(2,2,2)"}, {"layout", "NCHW"}}, {"Pooling", "layout", "NCDHW"}},
  };
  for (const auto& [kw, parts] : bad_3d) ExpectInitError("Pooling", kw, parts);
  OpCase c = Pool({{"kernel", "(2,2)"}}, TShape{1, 1, 2, 2});
  c.dtype = DType::kInt32;
  ExpectError([&] { RunForward(c, {{1, 2, 3, 4}}); }, {"Pooling", "int32"});
}

// ------------------------------------------------------------------------------------------ 3-D against MXNet

// Each case of data/spatial3d (3-D Convolution and Pooling, MXNet 1.9.1 through mx.autograd): the output and
// every input's gradient under MXNet's head gradient, through Invoke under autograd (the imperative path), to
// 1e-5 (float32: oneDNN where it runs) and 1e-10 (float64: troupe's loops) of max(1, |MXNet's value|).
TEST(Spatial3d, ConvolutionAndPoolingMatchMXNet) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/spatial3d/";
  std::ifstream file(dir + "spatial3d.json");
  ASSERT_TRUE(file) << dir << "spatial3d.json";
  const nlohmann::json index = nlohmann::json::parse(file);
  const std::map<std::string, NDArray> f = test::LoadNamed(dir + "spatial3d.params");
  std::map<std::string, double> worst;  // by element type
  int cases = 0;
  for (const auto& c : index.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const std::string dtype = c.at("dtype");
    const double tol = dtype == "float64" ? 1e-10 : 1e-5;
    Kwargs kwargs;
    for (const auto& [k, v] : c.at("kwargs").items()) kwargs.emplace_back(k, v.get<std::string>());
    std::vector<NDArray> in;
    for (const auto& arg : c.at("inputs")) {
      NDArray a = f.at(name + ":in:" + arg.get<std::string>()).CopyTo(Context::CPU());
      ASSERT_EQ(DTypeName(a.dtype()), dtype);
      autograd::AttachGrad(&a);
      in.push_back(a);
    }
    std::vector<NDArray> out;
    {
      autograd::RecordScope record;
      out = Invoke(c.at("op").get<std::string>(), in, kwargs);
    }
    ASSERT_EQ(out.size(), 1u);
    autograd::Backward({out[0]}, {f.at(name + ":head")});
    const NDArray& want = f.at(name + ":out");
    test::ExpectCloseArrays(out[0], want, "output", tol);
    double& w = worst[dtype];
    w = std::max(w, test::ScaledError(out[0], want));
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::string arg = c.at("inputs")[i];
      const NDArray& g = f.at(name + ":grad:" + arg);
      test::ExpectCloseArrays(autograd::GradOf(in[i]), g, "d/d" + arg, tol);
      w = std::max(w, test::ScaledError(autograd::GradOf(in[i]), g));
    }
    ++cases;
  }
  EXPECT_EQ(cases, 36);
  for (const auto& [dtype, err] : worst) {
    std::cout << "3-D against MXNet, " << dtype << ": worst |troupe - MXNet| / max(1, |MXNet|) = " << err << "\n";
  }
}

// float16 and bfloat16 3-D Convolution (bfloat16: oneDNN's kernels where the CPU has them; else float32 copies)
// and Pooling (float32 copies): outputs and gradients within the half types' rounding of float64's.
TEST(Spatial3d, HalfTypesAgreeWithFloat64WithinTheirRounding) {
  const std::vector<OpCase> cases = {
      {"Convolution", {{"kernel", "(2,3,2)"}, {"num_filter", "4"}, {"pad", "(1,1,0)"}, {"num_group", "2"}},
       {TShape{2, 4, 4, 5, 4}, TShape{4, 2, 2, 3, 2}, TShape{4}}},
      {"Pooling", {{"kernel", "(2,2,2)"}, {"stride", "(2,1,2)"}, {"pool_type", "avg"}}, {TShape{2, 3, 4, 5, 6}}},
      {"Pooling", {{"kernel", "(3,3,3)"}, {"pad", "(1,1,1)"}, {"stride", "(2,2,2)"}}, {TShape{1, 3, 5, 5, 5}}},
  };
  std::mt19937_64 rng(43);
  for (const OpCase& base : cases) {
    std::vector<HostTensor> in;
    for (const TShape& s : base.in_shapes) {
      HostTensor v = test::RandomTensor(s, &rng);
      for (double& x : v) x = static_cast<float>(bf16_t(static_cast<float>(x)));  // exact in both half types
      in.push_back(v);
    }
    const HostTensor head = test::RandomTensor(InferOutShapes(base)[0], &rng);
    const test::FwdBwd ref = test::RunForwardBackward(base, in, {head});
    for (DType t : {DType::kFloat16, DType::kBfloat16}) {
      const std::string what = base.op + " in " + DTypeName(t);
      OpCase c = base;
      c.dtype = t;
      const test::FwdBwd got = test::RunForwardBackward(c, in, {head});
      const double tol = t == DType::kBfloat16 ? 3e-2 : 4e-3;
      EXPECT_TRUE(Near(got.out[0], ref.out[0], tol, tol, what + " output"));
      for (std::size_t i = 0; i < ref.grad.size(); ++i) {
        EXPECT_TRUE(Near(got.grad[i], ref.grad[i], tol, tol, what + " gradient " + std::to_string(i)));
      }
    }
  }
}

TEST(DenseOps, RegisteredWithDocs) {
  for (const char* name : {"FullyConnected", "Convolution", "Pooling"}) {
    const OperatorInfo* info = OperatorRegistry::Get().Find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_FALSE(info->description.empty()) << name;
    EXPECT_FALSE(info->params.empty()) << name;
    for (const auto& p : info->params) EXPECT_FALSE(p.description.empty()) << name << "." << p.name;
  }
  // GetParams round-trips through Init.
  auto p = OperatorProperty::Create("Convolution");
  p->Init({{"kernel", "(3,3)"}, {"num_filter", "8"}, {"pad", "(1,1)"}});
  auto q = OperatorProperty::Create("Convolution");
  q->Init(p->GetParams());
  EXPECT_EQ(q->GetParams(), p->GetParams());
}

}  // namespace
}  // namespace troupe
