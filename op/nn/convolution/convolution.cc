// Convolution: the parameter struct's schema, the geometry with defaults applied, the property (checks,
// shape inference, resources) and the registration. The CPU operator is convolution_cpu.cc, the CUDA one
// convolution.cu.
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/common/lift_1d.h"
#include "op/nn/convolution/convolution.h"
#include "op/detail/fusion.h"
#include "tensor/detail/kernels.h"  // DnnlEnabled

namespace troupe {

void ConvolutionParam::Declare(ParamSchema<ConvolutionParam>& s) {
  s.Field("kernel", &ConvolutionParam::kernel).Describe("Convolution kernel size: (h, w).");
  s.Field("stride", &ConvolutionParam::stride)
      .Default(TShape::Scalar())
      .Describe("Convolution stride: (h, w). Defaults to 1 for each dimension.");
  s.Field("dilate", &ConvolutionParam::dilate)
      .Default(TShape::Scalar())
      .Describe("Convolution dilate: (h, w). Defaults to 1 for each dimension.");
  s.Field("pad", &ConvolutionParam::pad)
      .Default(TShape::Scalar())
      .Describe("Zero pad for convolution: (h, w). Defaults to no padding.");
  s.Field("num_filter", &ConvolutionParam::num_filter)
      .Range(1, 100000)
      .Describe("Convolution filter(channel) number.");
  s.Field("num_group", &ConvolutionParam::num_group)
      .Default(1)
      .LowerBound(1)
      .Describe("Number of group partitions.");
  s.Field("workspace", &ConvolutionParam::workspace)
      .Default(1024)
      .LowerBound(0)
      .Describe("Maximum temporary workspace allowed (MB) in convolution.");
  s.Field("no_bias", &ConvolutionParam::no_bias).Default(false).Describe("Whether to disable bias parameter.");
  s.Field("cudnn_tune", &ConvolutionParam::cudnn_tune)
      .Default("None")
      .Choices({"None", "off", "limited_workspace", "fastest"})
      .Describe("Whether to pick convolution algorithm by running performance test.");
  s.Field("cudnn_off", &ConvolutionParam::cudnn_off).Default(false).Describe("Turn off cudnn for this layer.");
  s.Field("layout", &ConvolutionParam::layout)
      .Default("None")
      .Choices({"None", "NCDHW", "NCHW", "NCW", "NDHWC", "NHWC", "NWC"})
      .Describe("Set layout for input, output and weight. Only NCHW (the default) is supported.");
}

ConvGeometry MakeConvGeometry(const ConvolutionParam& p) {
  ConvGeometry g;
  g.kh = p.kernel[0];
  g.kw = p.kernel[1];
  if (p.stride.ndim() == 2) g.sh = p.stride[0], g.sw = p.stride[1];
  if (p.dilate.ndim() == 2) g.dh = p.dilate[0], g.dw = p.dilate[1];
  if (p.pad.ndim() == 2) g.ph = p.pad[0], g.pw = p.pad[1];
  return g;
}

namespace {
constexpr const char* kOp = "Convolution";
}  // namespace

void ConvolutionProp::Init(const Kwargs& kwargs) {
  one_d_ = IsOneDimensionalKernel(kwargs);
  if (!one_d_) return Init2d(kwargs);
  param_1d_.Init(kwargs, kOp);
  if (param_1d_.layout != "None" && param_1d_.layout != "NCW") {
    throw Error("Convolution: parameter 'layout' is '" + param_1d_.layout + "'; 1-D convolution supports NCW only");
  }
  Init2d(LiftKwargsTo2d(kwargs));
}

void ConvolutionProp::Init2d(const Kwargs& kwargs) {
  param_.Init(kwargs, kOp);
  if (param_.kernel.ndim() != 2) {
    throw Error("Convolution: parameter 'kernel' is " + param_.kernel.ToString() +
                "; 1-D and 2-D convolution are supported, give 1 value (w) or 2 values (h, w)");
  }
  CheckGeometryTuple(param_.kernel, kOp, "kernel", 1, false);
  CheckGeometryTuple(param_.stride, kOp, "stride", 1, true);
  CheckGeometryTuple(param_.dilate, kOp, "dilate", 1, true);
  CheckGeometryTuple(param_.pad, kOp, "pad", 0, true);
  if (param_.layout != "None" && param_.layout != "NCHW") {
    throw Error("Convolution: parameter 'layout' is '" + param_.layout +
                "'; only NCHW (or None) is supported for 2-D convolution");
  }
  if (param_.num_filter % param_.num_group != 0) {
    throw Error("Convolution: parameter 'num_filter' (" + std::to_string(param_.num_filter) +
                ") must be divisible by 'num_group' (" + std::to_string(param_.num_group) + ")");
  }
}

std::vector<std::string> ConvolutionProp::ListArguments() const {
  if (param_.no_bias) return {"data", "weight"};
  return {"data", "weight", "bias"};
}

bool ConvolutionProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                 std::vector<TShape>* aux_shape) const {
  aux_shape->clear();
  if (!one_d_) return InferShape2d(in_shape, out_shape);
  if ((*in_shape)[0].ndim() >= 0 && (*in_shape)[0].ndim() != 3) {
    throw Error("Convolution: argument 'data' has shape " + (*in_shape)[0].ToString() +
                "; 1-D convolution needs 3 dimensions (batch, channel, width)");
  }
  for (auto& s : *in_shape) s = LiftShapeTo2d(s);
  const bool known = InferShape2d(in_shape, out_shape);
  for (auto& s : *in_shape) s = DropLiftedAxis(s);
  for (auto& s : *out_shape) s = DropLiftedAxis(s);
  return known;
}

bool ConvolutionProp::InferShape2d(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape) const {
  const std::size_t nargs = param_.no_bias ? 2 : 3;
  if (in_shape->size() != nargs) {
    throw Error(std::string("Convolution: expected ") + std::to_string(nargs) + " inputs (data, weight" +
                (param_.no_bias ? "" : ", bias") + "), got " + std::to_string(in_shape->size()));
  }
  const ConvGeometry g = MakeConvGeometry(param_);
  if (!param_.no_bias) AssignShape(in_shape, 2, TShape{param_.num_filter}, kOp, "bias");
  out_shape->assign(1, TShape());
  const TShape data = (*in_shape)[0];
  if (data.ndim() < 0) return false;
  if (data.ndim() != 4) {
    throw Error("Convolution: argument 'data' has shape " + data.ToString() +
                "; 2-D convolution needs 4 dimensions (batch, channel, height, width)");
  }
  const std::int64_t c = data[1];
  if (c >= 0) {
    if (c % param_.num_group != 0) {
      throw Error("Convolution: argument 'data' has " + std::to_string(c) + " channels, which is not divisible by " +
                  "num_group " + std::to_string(param_.num_group));
    }
    AssignShape(in_shape, 1, TShape{param_.num_filter, c / param_.num_group, g.kh, g.kw}, kOp, "weight");
  }
  TShape out{data[0], param_.num_filter, -1, -1};
  const std::int64_t size[2] = {data[2], data[3]};
  const std::int64_t k[2] = {g.kh, g.kw}, s[2] = {g.sh, g.sw}, dl[2] = {g.dh, g.dw}, p[2] = {g.ph, g.pw};
  for (int i = 0; i < 2; ++i) {
    if (size[i] < 0) continue;
    const std::int64_t extent = dl[i] * (k[i] - 1) + 1;
    if (extent > size[i] + 2 * p[i]) {
      throw Error("Convolution: argument 'data' has shape " + data.ToString() + "; the dilated kernel extent " +
                  std::to_string(extent) + " exceeds the padded input size " + std::to_string(size[i] + 2 * p[i]) +
                  " in dimension " + std::to_string(i + 2));
    }
    out[2 + i] = (size[i] + 2 * p[i] - extent) / s[i] + 1;
  }
  (*out_shape)[0] = out;
  for (const auto& sh : *in_shape) {
    if (!sh.known()) return false;
  }
  return out.known();
}

std::vector<ResourceRequest> ConvolutionProp::ForwardResource(const std::vector<TShape>&) const {
  return {ResourceRequest::kTempSpace};
}

std::vector<ResourceRequest> ConvolutionProp::BackwardResource(const std::vector<TShape>&) const {
  return {ResourceRequest::kTempSpace};
}

std::vector<int> ConvolutionProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                            const std::vector<int>& in_data,
                                                            const std::vector<int>&) const {
  return {out_grad[0], in_data[0], in_data[1]};
}

std::unique_ptr<Operator> ConvolutionProp::CreateOperator(Context ctx) const {
  std::unique_ptr<Operator> op = ctx.is_gpu() ? CreateGpuOperator(*this, ctx) : CreateConvolutionCpuOp(param_);
  return one_d_ ? LiftOperatorTo2d(std::move(op)) : std::move(op);
}

TROUPE_REGISTER_OP_PROPERTY(Convolution, ConvolutionProp)
    .describe("Computes 1-D convolution on 3-D input (NCW) or 2-D convolution on 4-D input (NCHW).")
    .add_argument("data", "NDArray-or-Symbol", "Input data to the ConvolutionOp.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight matrix (num_filter, channels / num_group, kh, kw).")
    .add_argument("bias", "NDArray-or-Symbol", "Bias parameter (num_filter,).")
    .add_arguments(ConvolutionParam::Docs());

// ------------------------------------------------------------------------------------------------ fused
// op/detail/fusion.h: Convolution with oneDNN post-ops, made by the executor's inference pass (never registered: a
// symbol never names it, and it has no backward pass).
namespace {

constexpr const char* kFusedOp = "_sg_onednn_conv";

class FusedConvolutionProp : public OperatorProperty {
 public:
  FusedConvolutionProp(const ConvolutionProp& conv, ConvPostOps post) : conv_(conv), post_(post) {}
  void Init(const Kwargs&) override {
    throw Error(std::string(kFusedOp) + ": made by the executor's inference pass, not from parameters");
  }
  Kwargs GetParams() const override {
    Kwargs k = conv_.GetParams();
    k.emplace_back("with_sum", post_.sum ? "True" : "False");
    k.emplace_back("with_act", post_.relu ? "True" : "False");
    return k;
  }
  std::vector<std::string> ListArguments() const override {
    std::vector<std::string> a = conv_.ListArguments();
    if (post_.sum) a.push_back("sum");
    return a;
  }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override {
    const std::size_t n = conv_.ListArguments().size();
    if (in_shape->size() != n + (post_.sum ? 1 : 0)) {
      throw Error(std::string(kFusedOp) + ": expected " + std::to_string(n + (post_.sum ? 1 : 0)) + " inputs, got " +
                  std::to_string(in_shape->size()));
    }
    std::vector<TShape> conv_in(in_shape->begin(), in_shape->begin() + static_cast<std::ptrdiff_t>(n));
    bool known = conv_.InferShape(&conv_in, out_shape, aux_shape);
    std::copy(conv_in.begin(), conv_in.end(), in_shape->begin());
    if (post_.sum) {
      if ((*out_shape)[0].ndim() >= 0) AssignShape(in_shape, n, (*out_shape)[0], kFusedOp, "sum");
      known = known && (*in_shape)[n].known();
    }
    return known;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<FusedConvolutionProp>(*this); }
  std::string TypeString() const override { return kFusedOp; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>& in_shape) const override {
    return conv_.ForwardResource(in_shape);
  }
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    // The sum post-op writes the convolution onto the addend: the output may be the addend's buffer.
    if (!post_.sum) return {};
    return {{in_data[conv_.ListArguments().size()], out_data[0]}};
  }
  bool HasBackward() const override { return false; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) {
      throw Error(std::string(kFusedOp) + ": runs on the CPU only (the executor fuses CPU graphs only)");
    }
    return CreateConvolutionCpuOp(conv_.param(), post_);
  }

 private:
  ConvolutionProp conv_;
  ConvPostOps post_;
};

}  // namespace

std::shared_ptr<const OperatorProperty> FuseConvolution(const OperatorProperty& conv, bool with_sum, bool with_relu) {
  const auto* c = dynamic_cast<const ConvolutionProp*>(&conv);
  if (c == nullptr || c->one_d() || (!with_sum && !with_relu)) return nullptr;
#if TROUPE_HAVE_DNNL
  if (!internal::DnnlEnabled()) return nullptr;
  return std::make_shared<FusedConvolutionProp>(*c, ConvPostOps{with_sum, with_relu});
#else
  return nullptr;
#endif
}

}  // namespace troupe
