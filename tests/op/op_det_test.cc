// The detection, indexing and attention operators (op/nn/bounding_box, roi_align, indexing, transformer) on
// the CPU, beside their MXNet cases in tests/graph/data/ops/cases_det.py: what those cannot show.
// Central-difference gradients with kAddTo (float64), forward under kAddTo, MXNet's documented box_nms
// example, aliases, and the errors for bad indices, parameters, shapes and a GPU context.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "op/operator.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::CheckGradient;
using test::ExpectError;
using test::ExpectInitError;
using test::GradCheckOptions;
using test::HostTensor;
using test::InferOutShapes;
using test::MakeArrays;
using test::MakeRunner;
using test::Near;
using test::OpCase;
using test::RunForward;
using test::RunForwardBackward;

// Two ROIs [batch, x1, y1, x2, y2] inside a 2-image batch of 5x6 maps (spatial_scale 1).
const HostTensor kRois = {0, 0.5, 0.7, 3.9, 4.2, 1, 1.3, 0.2, 5.1, 3.3};

TEST(OpDet, Gradients) {
  std::mt19937_64 rng(3);
  auto random = [&](const TShape& s) { return test::RandomTensor(s, &rng); };
  {
    // ROIAlign: the data's gradient (the rois get zero, which is not their derivative).
    for (const Kwargs& kw :
         {Kwargs{{"pooled_size", "(2, 3)"}, {"spatial_scale", "1"}},
          Kwargs{{"pooled_size", "(2, 2)"}, {"spatial_scale", "1"}, {"sample_ratio", "2"}, {"aligned", "True"}},
          Kwargs{{"pooled_size", "(1, 2)"}, {"spatial_scale", "1"}, {"position_sensitive", "True"}}}) {
      OpCase c{"_contrib_ROIAlign", kw, {TShape{2, 4, 5, 6}, TShape{2, 5}}};
      GradCheckOptions o;
      o.inputs = {random(TShape{2, 4, 5, 6}), kRois};
      o.check = {0};
      CheckGradient(c, o);
    }
  }
  {
    // take and gather_nd: the data's gradient; the indices are fixed values.
    GradCheckOptions o;
    o.inputs = {random(TShape{3, 4, 2}), HostTensor{3, -1, 0, 3, 7, 1}};
    o.check = {0};
    CheckGradient({"take", {{"axis", "1"}, {"mode", "wrap"}}, {TShape{3, 4, 2}, TShape{2, 3}}}, o);
    o.inputs[1] = {3, -1, 0, 3, 7, 1};
    CheckGradient({"take", {{"axis", "-1"}}, {TShape{3, 4, 2}, TShape{6}}}, o);
    o.inputs = {random(TShape{3, 4, 2}), HostTensor{2, 0, 2, 1, 3, 1}};
    CheckGradient({"gather_nd", {}, {TShape{3, 4, 2}, TShape{2, 3}}}, o);
  }
  // The attention products are (bi)linear: every argument's gradient.
  CheckGradient({"_contrib_interleaved_matmul_selfatt_qk", {{"heads", "2"}}, {TShape{3, 2, 12}}});
  CheckGradient({"_contrib_interleaved_matmul_selfatt_valatt", {{"heads", "2"}}, {TShape{3, 2, 12}, TShape{4, 3, 3}}});
  CheckGradient({"_contrib_interleaved_matmul_encdec_qk", {{"heads", "2"}}, {TShape{3, 2, 4}, TShape{5, 2, 8}}});
  CheckGradient({"_contrib_interleaved_matmul_encdec_valatt", {{"heads", "2"}}, {TShape{5, 2, 8}, TShape{4, 3, 5}}});
  // box_nms moves rows: away from ties and thresholds its derivative is that permutation.
  CheckGradient({"_contrib_box_nms", {{"overlap_thresh", "0.1"}, {"id_index", "0"}}, {TShape{2, 6, 6}}});
}

TEST(OpDet, ForwardAddTo) {
  std::mt19937_64 rng(5);
  const std::vector<std::pair<OpCase, std::vector<HostTensor>>> cases = {
      {{"_contrib_ROIAlign", {{"pooled_size", "(2, 2)"}, {"spatial_scale", "1"}}, {TShape{2, 4, 5, 6}, TShape{2, 5}}},
       {test::RandomTensor(TShape{2, 4, 5, 6}, &rng), kRois}},
      {{"take", {{"axis", "1"}}, {TShape{2, 3}, TShape{4}}}, {{1, 2, 3, 4, 5, 6}, {2, 0, 1, 2}}},
      {{"one_hot", {{"depth", "3"}, {"dtype", "float64"}}, {TShape{2}}}, {{2, 0}}},
      {{"_contrib_box_decode", {}, {TShape{1, 2, 4}, TShape{1, 2, 4}}},
       {{0.1, -0.2, 0.3, 0.1, 0.0, 0.2, -0.1, 0.4}, {0.5, 0.5, 0.2, 0.3, 0.3, 0.6, 0.4, 0.2}}},
      {{"_contrib_interleaved_matmul_encdec_valatt", {{"heads", "1"}}, {TShape{2, 1, 4}, TShape{1, 3, 2}}},
       {test::RandomTensor(TShape{2, 1, 4}, &rng), test::RandomTensor(TShape{1, 3, 2}, &rng)}},
  };
  for (const auto& [c, in] : cases) {
    SCOPED_TRACE(c.op);
    const std::vector<HostTensor> want = RunForward(c, in);
    auto r = MakeRunner(c);
    test::OpArrays a = MakeArrays(*r, c, in, {});
    a.out[0] = test::ToArray(HostTensor(static_cast<std::size_t>(a.out[0].shape().Size()), 10.0), a.out[0].shape(),
                             c.dtype, c.ctx);
    r->Forward(true, a.in, a.out, a.aux, std::vector<OpReqType>(a.out.size(), kAddTo));
    HostTensor w = want[0];
    for (auto& v : w) v += 10;
    EXPECT_TRUE(Near(test::ToHost(a.out[0]), w, 1e-12, 1e-12, "output"));
  }
}

// The example of MXNet's box_nms documentation, forward and backward.
TEST(OpDet, BoxNmsDocumentedExample) {
  const OpCase c{"_contrib_box_nms",
                 {{"overlap_thresh", "0.1"},
                  {"coord_start", "2"},
                  {"score_index", "1"},
                  {"id_index", "0"},
                  {"force_suppress", "True"},
                  {"in_format", "corner"},
                  {"out_format", "corner"}},
                 {TShape{4, 6}}};
  const HostTensor x = {0, 0.5, 0.1, 0.1, 0.2,  0.2,  1, 0.4, 0.1, 0.1, 0.2, 0.2,
                        0, 0.3, 0.1, 0.1, 0.14, 0.14, 2, 0.6, 0.5, 0.5, 0.7, 0.8};
  HostTensor head;
  for (double g : {0.1, 0.2, 0.3, 0.4}) head.insert(head.end(), 6, g);
  const test::FwdBwd r = RunForwardBackward(c, {x}, {head});
  const HostTensor want = {2,  0.6, 0.5, 0.5, 0.7, 0.8, 0,  0.5, 0.1, 0.1, 0.2, 0.2,
                           -1, -1,  -1,  -1,  -1,  -1,  -1, -1,  -1,  -1,  -1,  -1};
  EXPECT_TRUE(Near(r.out[0], want, 0, 0, "output"));
  HostTensor grad(24, 0.0);
  for (int j = 0; j < 6; ++j) {
    grad[j] = 0.2;
    grad[18 + j] = 0.1;
  }
  EXPECT_TRUE(Near(r.grad[0], grad, 0, 0, "gradient"));
  // The hidden record: the input row of each output row.
  EXPECT_TRUE(Near(r.out[1], {3, 0, -1, -1}, 0, 0, "record"));
}

TEST(OpDet, OneHotAndTakeByHand) {
  EXPECT_TRUE(
      Near(RunForward(
               {"one_hot", {{"depth", "3"}, {"on_value", "5"}, {"off_value", "-1"}, {"dtype", "float64"}}, {TShape{3}}},
               {{2, 3, -1}})[0],
           {-1, -1, 5, -1, -1, -1, -1, -1, -1}, 0, 0, "one_hot"));
  EXPECT_TRUE(Near(RunForward({"take", {{"mode", "wrap"}}, {TShape{3}, TShape{4}}}, {{10, 20, 30}, {-1, 3, 4, -4}})[0],
                   {30, 10, 20, 30}, 0, 0, "take wrap"));
  EXPECT_TRUE(Near(RunForward({"gather_nd", {}, {TShape{2, 3}, TShape{2, 2}}}, {{1, 2, 3, 4, 5, 6}, {1, -2, -1, 0}})[0],
                   {6, 1}, 0, 0, "gather_nd"));
}

TEST(OpDet, Aliases) {
  const std::vector<std::pair<std::string, std::string>> aliases = {
      {"_contrib_box_non_maximum_suppression", "_contrib_box_nms"},
      {"_npi_take", "take"},
      {"_npi_gather_nd", "gather_nd"},
      {"_npx_gather_nd", "gather_nd"},
      {"_npx_one_hot", "one_hot"}};
  for (const auto& [alias, name] : aliases) EXPECT_EQ(OperatorProperty::Create(alias)->TypeString(), name);
  auto nms = OperatorProperty::Create("_contrib_box_nms");
  nms->Init({});
  EXPECT_EQ(nms->NumVisibleOutputs(), 1);
  EXPECT_EQ(nms->NumOutputs(), 2);
}

TEST(OpDet, Errors) {
  ExpectError(
      [] {
        RunForward({"take", {{"mode", "raise"}}, {TShape{3}, TShape{2}}}, {{1, 2, 3}, {0, 3}});
      },
      {"take", "out of bounds", "'raise'"});
  ExpectError(
      [] {
        RunForward({"take", {{"mode", "raise"}}, {TShape{3}, TShape{1}}}, {{1, 2, 3}, {-1}});
      },
      {"take", "out of bounds"});
  ExpectError([] { InferOutShapes({"take", {{"axis", "2"}}, {TShape{3, 2}, TShape{2}}}); }, {"take", "'axis'"});
  ExpectError(
      [] {
        RunForward({"gather_nd", {}, {TShape{3, 2}, TShape{2, 1}}}, {{1, 2, 3, 4, 5, 6}, {3, 0}});
      },
      {"gather_nd", "index 3 is out of bounds for axis 0 with size 3"});
  ExpectError([] { InferOutShapes({"gather_nd", {}, {TShape{3, 2}, TShape{3, 1}}}); }, {"gather_nd", "3 dimensions"});
  ExpectError(
      [] {
        InferOutShapes({"_contrib_box_nms", {{"score_index", "3"}}, {TShape{4, 6}}});
      },
      {"_contrib_box_nms", "score_index 3"});
  ExpectError(
      [] {
        InferOutShapes({"_contrib_box_nms", {{"id_index", "0"}}, {TShape{4, 5}}});
      },
      {"_contrib_box_nms", "at least 6"});
  ExpectInitError("_contrib_box_nms", {{"in_format", "xywh"}}, {"_contrib_box_nms", "in_format"});
  ExpectInitError("_contrib_ROIAlign", {{"pooled_size", "(2,)"}, {"spatial_scale", "1"}},
                  {"_contrib_ROIAlign", "pooled_size"});
  ExpectInitError("_contrib_ROIAlign", {{"pooled_size", "(2, 2)"}}, {"_contrib_ROIAlign", "spatial_scale"});
  ExpectError(
      [] {
        RunForward({"_contrib_ROIAlign",
                    {{"pooled_size", "(2, 2)"}, {"spatial_scale", "1"}, {"aligned", "True"}},
                    {TShape{1, 1, 4, 4}, TShape{1, 5}}},
                   {HostTensor(16, 1.0), {0, 2, 2, 1, 3}});
      },
      {"_contrib_ROIAlign", "positive width"});
  ExpectError(
      [] {
        RunForward({"_contrib_ROIAlign",
                    {{"pooled_size", "(2, 2)"}, {"spatial_scale", "1"}},
                    {TShape{1, 1, 4, 4}, TShape{1, 5}}},
                   {HostTensor(16, 1.0), {1, 0, 0, 2, 2}});
      },
      {"_contrib_ROIAlign", "batch index 1"});
  ExpectError(
      [] {
        InferOutShapes({"_contrib_interleaved_matmul_selfatt_qk", {{"heads", "2"}}, {TShape{3, 2, 9}}});
      },
      {"_contrib_interleaved_matmul_selfatt_qk", "not a multiple"});
  ExpectError(
      [] {
        InferOutShapes({"_contrib_interleaved_matmul_encdec_qk", {{"heads", "2"}}, {TShape{3, 2, 4}, TShape{5, 2, 6}}});
      },
      {"_contrib_interleaved_matmul_encdec_qk", "'keys_values'"});
  ExpectInitError("_contrib_interleaved_matmul_selfatt_qk", {}, {"heads"});
}

// No GPU kernel for box_nms yet: a GPU context is a troupe::Error naming the operator and the device.
TEST(OpDet, GpuContextIsAnError) {
  const std::vector<std::pair<std::string, Kwargs>> ops = {
      {"_contrib_box_nms", {}}};
  for (const auto& [op, kw] : ops) {
    auto p = OperatorProperty::Create(op);
    p->Init(kw);
    ExpectError([&] { p->CreateOperator(Context::GPU(0)); }, {op, "no implementation for gpu(0)"});
  }
}

}  // namespace
}  // namespace troupe
