// The nn operators whose GPU code sits beside their CPU code in op/nn: Deconvolution (deconvolution.cu, on the
// cuDNN convolution), the interleaved attention products (interleaved_matmul.cu, cuBLAS strided-batched
// GEMMs), UpSampling, Pad, L2Normalization, _contrib_AdaptiveAvgPooling2D, _contrib_BilinearResize2D,
// _contrib_ROIAlign, _contrib_box_decode and _contrib_box_encode against the CPU operators through
// OperatorRunner on Context::GPU(0): every output (hidden ones too) and the input gradients with kWriteTo and
// with kAddTo onto random initial gradients, on odd shapes, float32 and float64; gradients of one argument
// only; forward under kAddTo; the cases the GPU refuses. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/runtime.h"
#include "engine/engine.h"
#include "tensor/resource.h"
#include "tests/common/op_gpu_compare.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::CompareForwardAddToGpuWithCpu;
using test::CompareGpuWithCpu;
using test::HostTensor;
using test::OpCase;
using test::Uniform;

class OpNnGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

// Products (cuDNN, cuBLAS) sum in another order than the CPU's oneDNN / OpenBLAS: float32 to 1e-4.
constexpr double kProductTol32 = 1e-4, kProductTol64 = 1e-10;

// Runs c in float32 and float64 with the given tolerances (0: CompareGpuWithCpu's defaults).
void BothTypes(OpCase c, double tol32 = 0, double tol64 = 0, const std::vector<OpReqType>& reqs = {}) {
  c.dtype = DType::kFloat32;
  CompareGpuWithCpu(c, {}, reqs, tol32);
  c.dtype = DType::kFloat64;
  CompareGpuWithCpu(c, {}, reqs, tol64);
}

std::vector<OpCase> DeconvolutionCases() {
  return {
      {"Deconvolution", {{"kernel", "(3,3)"}, {"num_filter", "5"}}, {TShape{2, 3, 5, 7}, TShape{}}},
      {"Deconvolution",
       {{"kernel", "(3,3)"},
        {"num_filter", "6"},
        {"stride", "(2,2)"},
        {"pad", "(1,1)"},
        {"adj", "(1,1)"},
        {"no_bias", "False"}},
       {TShape{2, 4, 5, 6}, TShape{}, TShape{}}},
      {"Deconvolution",
       {{"kernel", "(3,2)"},
        {"num_filter", "4"},
        {"num_group", "2"},
        {"stride", "(2,1)"},
        {"dilate", "(2,1)"},
        {"no_bias", "False"}},
       {TShape{1, 4, 6, 5}, TShape{}, TShape{}}},
      {"Deconvolution",
       {{"kernel", "(4,4)"}, {"num_filter", "3"}, {"stride", "(2,2)"}, {"target_shape", "(12,11)"}},
       {TShape{2, 2, 6, 5}, TShape{}}},
      {"Deconvolution",
       {{"kernel", "(1,1)"}, {"num_filter", "7"}, {"stride", "(3,2)"}, {"no_bias", "False"}},
       {TShape{3, 5, 4, 3}, TShape{}, TShape{}}},
      {"Deconvolution",
       {{"kernel", "(5,3)"}, {"num_filter", "6"}, {"num_group", "3"}, {"pad", "(2,1)"}},
       {TShape{2, 3, 7, 4}, TShape{}}},
  };
}

TEST_F(OpNnGpuTest, DeconvolutionMatchesCpu) {
  for (const OpCase& c : DeconvolutionCases()) BothTypes(c, kProductTol32, kProductTol64);
}

// A refused call held the device's temporary space when it threw: the space's variable is scratch, never
// poisoned (engine/engine.h), so later functions that use it run.
void ExpectTempSpaceUsable(Context ctx) {
  ResourceManager* rm = ResourceManager::Get();
  for (int i = 0; i < 8; ++i) {  // Request cycles through the device's copies (fewer than 8)
    const Resource r = rm->Request(ctx, ResourceRequest::kTempSpace);
    EXPECT_NO_THROW(Engine::Get()->WaitForVar(r.var())) << "a failure poisoned the temporary space";
  }
}

// target_shape with stride 1: an even difference from the full output is a symmetric padding, which cuDNN
// computes; an odd one needs adj 1 with stride 1, an asymmetric padding cuDNN's descriptors cannot express,
// and the GPU operator refuses it by name (the CPU computes it).
TEST_F(OpNnGpuTest, DeconvolutionTargetShapeStrideOne) {
  BothTypes({"Deconvolution",
             {{"kernel", "(3,3)"}, {"num_filter", "3"}, {"target_shape", "(4,7)"}, {"no_bias", "False"}},
             {TShape{2, 2, 4, 5}, TShape{}, TShape{}}},
            kProductTol32, kProductTol64);
  const OpCase odd{"Deconvolution",
                   {{"kernel", "(3,3)"}, {"num_filter", "3"}, {"target_shape", "(5,6)"}},
                   {TShape{2, 2, 4, 5}, TShape{}},
                   DType::kFloat32,
                   Context::GPU(0)};
  test::ExpectError(
      [&] {
        test::RunForward(odd, {Uniform(TShape{2, 2, 4, 5}, 1, -1, 1), Uniform(TShape{2, 3, 3, 3}, 2, -1, 1)});
      },
      {"Deconvolution", "target_shape", "asymmetric padding"});
  ExpectTempSpaceUsable(Context::GPU(0));
}

TEST_F(OpNnGpuTest, DeconvolutionGradientOfOneArgumentOnly) {
  OpCase c{"Deconvolution",
           {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"stride", "(2,2)"}, {"no_bias", "False"}},
           {TShape{2, 3, 4, 5}, TShape{}, TShape{}},
           DType::kFloat32};
  CompareGpuWithCpu(c, {}, {kWriteTo, kNullOp, kNullOp}, kProductTol32);
  CompareGpuWithCpu(c, {}, {kNullOp, kWriteTo, kNullOp}, kProductTol32);
  CompareGpuWithCpu(c, {}, {kNullOp, kNullOp, kWriteTo}, kProductTol32);
}

// heads 3 with head size 3 (self), heads 2 with head size 5 (encoder-decoder), query and key lengths differ.
std::vector<OpCase> InterleavedCases() {
  return {
      {"_contrib_interleaved_matmul_selfatt_qk", {{"heads", "3"}}, {TShape{5, 2, 27}}},
      {"_contrib_interleaved_matmul_selfatt_valatt", {{"heads", "3"}}, {TShape{5, 2, 27}, TShape{6, 5, 5}}},
      {"_contrib_interleaved_matmul_encdec_qk", {{"heads", "2"}}, {TShape{4, 3, 10}, TShape{7, 3, 20}}},
      {"_contrib_interleaved_matmul_encdec_valatt", {{"heads", "2"}}, {TShape{7, 3, 20}, TShape{6, 4, 7}}},
      {"_contrib_interleaved_matmul_selfatt_qk", {{"heads", "1"}}, {TShape{3, 1, 6}}},
      {"_contrib_interleaved_matmul_encdec_qk", {{"heads", "4"}}, {TShape{1, 2, 8}, TShape{9, 2, 16}}},
  };
}

TEST_F(OpNnGpuTest, InterleavedMatMulMatchesCpu) {
  for (const OpCase& c : InterleavedCases()) BothTypes(c, kProductTol32, kProductTol64);
}

TEST_F(OpNnGpuTest, InterleavedMatMulGradientOfOneArgumentOnly) {
  for (const char* op : {"_contrib_interleaved_matmul_selfatt_valatt", "_contrib_interleaved_matmul_encdec_qk",
                         "_contrib_interleaved_matmul_encdec_valatt"}) {
    for (const OpCase& c : InterleavedCases()) {
      if (c.op != op) continue;
      OpCase one = c;
      one.dtype = DType::kFloat32;
      CompareGpuWithCpu(one, {}, {kWriteTo, kNullOp}, kProductTol32);
      CompareGpuWithCpu(one, {}, {kNullOp, kWriteTo}, kProductTol32);
    }
  }
}

std::vector<OpCase> UpSamplingCases() {
  return {
      {"UpSampling", {{"scale", "2"}, {"sample_type", "nearest"}, {"num_args", "1"}}, {TShape{2, 3, 4, 5}}},
      {"UpSampling", {{"scale", "3"}, {"sample_type", "nearest"}, {"num_args", "1"}}, {TShape{1, 2, 3, 1}}},
      {"UpSampling",
       {{"scale", "2"}, {"sample_type", "nearest"}, {"num_args", "3"}},
       {TShape{2, 2, 3, 4}, TShape{2, 3, 6, 8}, TShape{2, 1, 3, 4}}},
      {"UpSampling",
       {{"scale", "2"}, {"sample_type", "nearest"}, {"num_args", "3"}, {"multi_input_mode", "sum"}},
       {TShape{1, 3, 2, 3}, TShape{1, 3, 4, 6}, TShape{1, 3, 2, 3}}},
  };
}

TEST_F(OpNnGpuTest, UpSamplingMatchesCpu) {
  for (const OpCase& c : UpSamplingCases()) BothTypes(c);
  OpCase c = UpSamplingCases()[2];
  c.dtype = DType::kFloat32;
  CompareGpuWithCpu(c, {}, {kNullOp, kWriteTo, kNullOp});
}

std::vector<OpCase> PadCases() {
  std::vector<OpCase> cases;
  for (const char* mode : {"constant", "edge", "reflect"}) {
    cases.push_back(
        {"Pad", {{"mode", mode}, {"pad_width", "(0,0,0,0,1,2,3,1)"}, {"constant_value", "0.5"}}, {TShape{2, 3, 4, 5}}});
    cases.push_back({"Pad", {{"mode", mode}, {"pad_width", "(0,0,0,0,3,2,0,4)"}}, {TShape{1, 2, 4, 5}}});
    cases.push_back({"Pad", {{"mode", mode}, {"pad_width", "(0,0,0,0,1,2,2,1,1,3)"}}, {TShape{1, 2, 3, 4, 5}}});
  }
  cases.push_back({"Pad", {{"mode", "edge"}, {"pad_width", "(0,0,0,0,2,2,1,1)"}}, {TShape{1, 1, 1, 4}}});
  cases.push_back({"pad", {{"mode", "constant"}, {"pad_width", "(0,0,0,0,0,0,0,0)"}}, {TShape{2, 2, 3, 3}}});
  return cases;
}

TEST_F(OpNnGpuTest, PadMatchesCpu) {
  for (const OpCase& c : PadCases()) BothTypes(c);
}

std::vector<OpCase> L2NormalizationCases() {
  return {
      {"L2Normalization", {}, {TShape{3, 4, 5}}},
      {"L2Normalization", {{"mode", "channel"}}, {TShape{2, 5, 3, 4}}},
      {"L2Normalization", {{"mode", "spatial"}}, {TShape{2, 3, 4, 5}}},
      {"L2Normalization", {{"mode", "instance"}, {"eps", "0.01"}}, {TShape{7}}},
      {"L2Normalization", {{"mode", "instance"}}, {TShape{3, 1000}}},
      {"L2Normalization", {{"mode", "channel"}}, {TShape{2, 3, 7}}},
  };
}

TEST_F(OpNnGpuTest, L2NormalizationMatchesCpu) {
  for (const OpCase& c : L2NormalizationCases()) BothTypes(c);
}

std::vector<OpCase> ImageResizeCases() {
  return {
      {"_contrib_AdaptiveAvgPooling2D", {{"output_size", "(3,)"}}, {TShape{2, 3, 7, 9}}},
      {"_contrib_AdaptiveAvgPooling2D", {{"output_size", "(4, 5)"}}, {TShape{1, 2, 10, 7}}},
      {"_contrib_AdaptiveAvgPooling2D", {}, {TShape{2, 2, 5, 5}}},
      {"_contrib_AdaptiveAvgPooling2D", {{"output_size", "(9, 11)"}}, {TShape{1, 2, 4, 5}}},
      {"_contrib_BilinearResize2D", {{"height", "7"}, {"width", "9"}}, {TShape{2, 3, 4, 5}}},
      {"_contrib_BilinearResize2D",
       {{"height", "7"}, {"width", "9"}, {"align_corners", "False"}},
       {TShape{2, 3, 4, 5}}},
      {"_contrib_BilinearResize2D",
       {{"scale_height", "0.6"}, {"scale_width", "0.5"}, {"align_corners", "False"}},
       {TShape{1, 2, 9, 11}}},
      {"_contrib_BilinearResize2D", {{"mode", "like"}}, {TShape{2, 3, 4, 5}, TShape{2, 3, 6, 8}}},
      {"_contrib_BilinearResize2D", {{"mode", "to_even_up"}}, {TShape{1, 2, 5, 7}}},
      {"_contrib_BilinearResize2D", {{"height", "4"}, {"width", "5"}}, {TShape{1, 2, 4, 5}}},
      {"_contrib_BilinearResize2D", {{"height", "4"}, {"width", "7"}}, {TShape{1, 1, 1, 5}}},
  };
}

TEST_F(OpNnGpuTest, ImageResizeMatchesCpu) {
  // The GPU gradients add with atomicAdd (another order than the CPU's loop).
  for (const OpCase& c : ImageResizeCases()) BothTypes(c, 1e-5, 1e-12);
}

// ROIs [batch, x1, y1, x2, y2] in image coordinates: ordinary, whole-image, negative batch index (zeros), one
// smaller than a pixel.
HostTensor Rois() { return {0, 1.3, 2.1, 10.7, 12.2, 1, 0, 0, 15.5, 13, -1, 2, 2, 6, 6, 1, 5.5, 3.3, 6.0, 4.0}; }

std::vector<OpCase> ROIAlignCases() {
  return {
      {"_contrib_ROIAlign", {{"pooled_size", "(2, 2)"}, {"spatial_scale", "0.5"}}, {TShape{2, 3, 8, 9}, TShape{4, 5}}},
      {"_contrib_ROIAlign",
       {{"pooled_size", "(3, 2)"}, {"spatial_scale", "0.5"}, {"sample_ratio", "2"}},
       {TShape{2, 3, 8, 9}, TShape{4, 5}}},
      {"_contrib_ROIAlign",
       {{"pooled_size", "(2, 2)"}, {"spatial_scale", "0.5"}, {"position_sensitive", "True"}},
       {TShape{2, 8, 6, 7}, TShape{4, 5}}},
      {"_contrib_ROIAlign",
       {{"pooled_size", "(2, 3)"}, {"spatial_scale", "0.5"}, {"aligned", "True"}},
       {TShape{2, 3, 8, 9}, TShape{4, 5}}},
  };
}

TEST_F(OpNnGpuTest, ROIAlignMatchesCpu) {
  for (OpCase c : ROIAlignCases()) {
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      c.dtype = t;
      // The GPU gradient adds with atomicAdd (another order than the CPU's loop).
      CompareGpuWithCpu(c, {Uniform(c.in_shapes[0], 3, -1, 1), Rois()}, {}, t == DType::kFloat32 ? 1e-5 : 1e-12);
    }
  }
  OpCase c = ROIAlignCases()[0];
  c.dtype = DType::kFloat32;
  CompareGpuWithCpu(c, {Uniform(c.in_shapes[0], 3, -1, 1), Rois()}, {kWriteTo, kNullOp});
}

// A ROI naming an image the data does not have is an error on the GPU too (the ROIs are checked on the host).
TEST_F(OpNnGpuTest, ROIAlignBatchIndexOutOfRangeIsAnError) {
  const OpCase c{"_contrib_ROIAlign",
                 {{"pooled_size", "(2, 2)"}, {"spatial_scale", "1"}},
                 {TShape{2, 1, 4, 4}, TShape{1, 5}},
                 DType::kFloat32,
                 Context::GPU(0)};
  test::ExpectError(
      [&] {
        test::RunForward(c, {Uniform(TShape{2, 1, 4, 4}, 1, -1, 1), {5, 0, 0, 2, 2}});
      },
      {"_contrib_ROIAlign", "batch index 5"});
}

// count boxes [x1, y1, x2, y2] (corner) or [x, y, w, h] (center) with extents in [0.5, 2].
HostTensor Boxes(std::int64_t count, std::uint64_t seed, bool corner) {
  const HostTensor u = Uniform(TShape{count, 4}, seed, -1, 1), e = Uniform(TShape{count, 2}, seed + 1, 0.5, 2);
  HostTensor b;
  for (std::int64_t i = 0; i < count; ++i) {
    const double x = u[i * 4], y = u[i * 4 + 1], w = e[i * 2], h = e[i * 2 + 1];
    for (double v : {x, y, corner ? x + w : w, corner ? y + h : h}) b.push_back(v);
  }
  return b;
}

TEST_F(OpNnGpuTest, BoxDecodeAndEncodeMatchCpu) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    const HostTensor offsets = Uniform(TShape{2, 5, 4}, 1, -1, 1);
    CompareGpuWithCpu({"_contrib_box_decode", {}, {TShape{2, 5, 4}, TShape{1, 5, 4}}, t},
                      {offsets, Boxes(5, 2, false)});
    CompareGpuWithCpu(
        {"_contrib_box_decode",
         {{"format", "corner"}, {"std0", "0.1"}, {"std1", "0.1"}, {"std2", "0.2"}, {"std3", "0.3"}, {"clip", "0.15"}},
         {TShape{2, 5, 4}, TShape{1, 5, 4}},
         t},
        {offsets, Boxes(5, 3, true)});
    // samples -1 / 0 / +1, matches in [0, 3).
    const HostTensor samples{1, -1, 0, 1, 1, 0, 1, -1, 1, 1}, matches{0, 2, 1, 1, 0, 2, 2, 0, 1, 2};
    CompareGpuWithCpu(
        {"_contrib_box_encode",
         {},
         {TShape{2, 5}, TShape{2, 5}, TShape{2, 5, 4}, TShape{2, 3, 4}, TShape{4}, TShape{4}},
         t},
        {samples, matches, Boxes(10, 4, true), Boxes(6, 5, true), {0.1, -0.1, 0.05, 0}, {0.1, 0.2, 0.3, 0.4}});
  }
}

// A match outside the references is an error on the GPU too (the matches are checked on the host).
TEST_F(OpNnGpuTest, BoxEncodeMatchOutOfRangeIsAnError) {
  const OpCase c{"_contrib_box_encode",
                 {},
                 {TShape{1, 2}, TShape{1, 2}, TShape{1, 2, 4}, TShape{1, 3, 4}, TShape{4}, TShape{4}},
                 DType::kFloat32,
                 Context::GPU(0)};
  test::ExpectError(
      [&] {
        test::RunForward(c, {{1, 1}, {0, 3}, Boxes(2, 1, true), Boxes(3, 2, true), {0, 0, 0, 0}, {1, 1, 1, 1}});
      },
      {"_contrib_box_encode", "matches[1] is 3"});
}

// Forward under kAddTo on both devices, float64, every case above.
TEST_F(OpNnGpuTest, ForwardAddTo) {
  std::vector<OpCase> all;
  for (auto* cases : {DeconvolutionCases, InterleavedCases, UpSamplingCases, PadCases, L2NormalizationCases,
                      ImageResizeCases, ROIAlignCases}) {
    for (const OpCase& c : cases()) all.push_back(c);
  }
  for (OpCase c : all) {
    c.dtype = DType::kFloat64;
    std::vector<HostTensor> inputs;
    if (c.op == "_contrib_ROIAlign") inputs = {{}, Rois()};  // valid boxes; the data stays uniform
    CompareForwardAddToGpuWithCpu(c, inputs, 1e-10);
  }
}

}  // namespace
}  // namespace troupe
