// Convolution: the parameter struct's schema, the geometry with defaults applied, the property (checks,
// shape inference, resources) and the registration. The CPU operator is convolution_cpu.cc, the CUDA one
// convolution.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/batch_norm/batch_norm.h"
#include "op/nn/common/lift_1d.h"
#include "op/nn/convolution/convolution.h"
#include "op/detail/fusion.h"
#include "tensor/detail/kernels.h"  // DnnlEnabled
#if TROUPE_HAVE_DNNL
#include "op/internal/dnnl_common.h"  // BlockedLayoutFits, ReorderLayout
#endif

namespace troupe {

void ConvolutionParam::Declare(ParamSchema<ConvolutionParam>& s) {
  s.Field("kernel", &ConvolutionParam::kernel)
      .Describe("Convolution kernel size: (w), (h, w) or (d, h, w).");
  s.Field("stride", &ConvolutionParam::stride)
      .Default(TShape::Scalar())
      .Describe("Convolution stride: (w), (h, w) or (d, h, w). Defaults to 1 for each dimension.");
  s.Field("dilate", &ConvolutionParam::dilate)
      .Default(TShape::Scalar())
      .Describe("Convolution dilate: (w), (h, w) or (d, h, w). Defaults to 1 for each dimension.");
  s.Field("pad", &ConvolutionParam::pad)
      .Default(TShape::Scalar())
      .Describe("Zero pad for convolution: (w), (h, w) or (d, h, w). Defaults to no padding.");
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
      .Describe("Set layout for input, output and weight. Only NCW, NCHW and NCDHW (the default for the kernel's "
                "dimensions) are supported.");
}

ConvGeometry MakeConvGeometry(const ConvolutionParam& p) {
  ConvGeometry g;
  g.spatial = p.kernel.ndim();
  SpatialValues(p.kernel, g.spatial, &g.kd, &g.kh, &g.kw);
  SpatialValues(p.stride, g.spatial, &g.sd, &g.sh, &g.sw);
  SpatialValues(p.dilate, g.spatial, &g.dd, &g.dh, &g.dw);
  SpatialValues(p.pad, g.spatial, &g.pd, &g.ph, &g.pw);
  return g;
}

namespace {
constexpr const char* kOp = "Convolution";
}  // namespace

void ConvolutionProp::Init(const Kwargs& kwargs) {
  one_d_ = IsOneDimensionalKernel(kwargs);
  if (!one_d_) return InitNd(kwargs);
  param_1d_.Init(kwargs, kOp);
  if (param_1d_.layout != "None" && param_1d_.layout != "NCW") {
    throw Error("Convolution: parameter 'layout' is '" + param_1d_.layout + "'; 1-D convolution supports NCW only");
  }
  InitNd(LiftKwargsTo2d(kwargs));
}

void ConvolutionProp::InitNd(const Kwargs& kwargs) {
  param_.Init(kwargs, kOp);
  const int n = param_.kernel.ndim();
  if (n != 2 && n != 3) {
    throw Error("Convolution: parameter 'kernel' is " + param_.kernel.ToString() +
                "; 1-D, 2-D and 3-D convolution are supported, give 1 value (w), 2 values (h, w) or 3 values "
                "(d, h, w)");
  }
  CheckGeometryTuple(param_.kernel, n, kOp, "kernel", 1, false);
  CheckGeometryTuple(param_.stride, n, kOp, "stride", 1, true);
  CheckGeometryTuple(param_.dilate, n, kOp, "dilate", 1, true);
  CheckGeometryTuple(param_.pad, n, kOp, "pad", 0, true);
  const char* layout = n == 3 ? "NCDHW" : "NCHW";
  if (param_.layout != "None" && param_.layout != layout) {
    throw Error("Convolution: parameter 'layout' is '" + param_.layout + "'; only " + layout +
                " (or None) is supported for " + std::to_string(n) + "-D convolution");
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
  if (!one_d_) return InferShapeNd(in_shape, out_shape);
  if ((*in_shape)[0].ndim() >= 0 && (*in_shape)[0].ndim() != 3) {
    throw Error("Convolution: argument 'data' has shape " + (*in_shape)[0].ToString() +
                "; 1-D convolution needs 3 dimensions (batch, channel, width)");
  }
  for (auto& s : *in_shape) s = LiftShapeTo2d(s);
  const bool known = InferShapeNd(in_shape, out_shape);
  for (auto& s : *in_shape) s = DropLiftedAxis(s);
  for (auto& s : *out_shape) s = DropLiftedAxis(s);
  return known;
}

bool ConvolutionProp::InferShapeNd(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape) const {
  const std::size_t nargs = param_.no_bias ? 2 : 3;
  if (in_shape->size() != nargs) {
    throw Error(std::string("Convolution: expected ") + std::to_string(nargs) + " inputs (data, weight" +
                (param_.no_bias ? "" : ", bias") + "), got " + std::to_string(in_shape->size()));
  }
  const ConvGeometry g = MakeConvGeometry(param_);
  const int n = g.spatial;
  if (!param_.no_bias) AssignShape(in_shape, 2, TShape{param_.num_filter}, kOp, "bias");
  out_shape->assign(1, TShape());
  const TShape data = (*in_shape)[0];
  if (data.ndim() < 0) return false;
  if (data.ndim() != n + 2) {
    throw Error("Convolution: argument 'data' has shape " + data.ToString() + "; " + std::to_string(n) +
                "-D convolution needs " + SpatialDataDims(n));
  }
  const std::int64_t c = data[1];
  if (c >= 0) {
    if (c % param_.num_group != 0) {
      throw Error("Convolution: argument 'data' has " + std::to_string(c) + " channels, which is not divisible by " +
                  "num_group " + std::to_string(param_.num_group));
    }
    TShape weight = data;  // (num_filter, channels / num_group, kernel...)
    weight[0] = param_.num_filter;
    weight[1] = c / param_.num_group;
    for (int i = 0; i < n; ++i) weight[2 + i] = param_.kernel[i];
    AssignShape(in_shape, 1, weight, kOp, "weight");
  }
  TShape out = data;
  out[1] = param_.num_filter;
  const std::vector<std::int64_t> k = SpatialDims(n, g.kd, g.kh, g.kw), s = SpatialDims(n, g.sd, g.sh, g.sw),
                                  dl = SpatialDims(n, g.dd, g.dh, g.dw), p = SpatialDims(n, g.pd, g.ph, g.pw);
  for (int i = 0; i < n; ++i) {
    const std::int64_t size = data[2 + i];
    out[2 + i] = -1;
    if (size < 0) continue;
    const std::int64_t extent = dl[i] * (k[i] - 1) + 1;
    if (extent > size + 2 * p[i]) {
      throw Error("Convolution: argument 'data' has shape " + data.ToString() + "; the dilated kernel extent " +
                  std::to_string(extent) + " exceeds the padded input size " + std::to_string(size + 2 * p[i]) +
                  " in dimension " + std::to_string(i + 2));
    }
    out[2 + i] = (size + 2 * p[i] - extent) / s[i] + 1;
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
    .describe("Computes 1-D convolution on 3-D input (NCW), 2-D convolution on 4-D input (NCHW) or 3-D "
              "convolution on 5-D input (NCDHW).")
    .add_argument("data", "NDArray-or-Symbol", "Input data to the ConvolutionOp.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight matrix (num_filter, channels / num_group, kernel...).")
    .add_argument("bias", "NDArray-or-Symbol", "Bias parameter (num_filter,).")
    .add_arguments(ConvolutionParam::Docs());

// ------------------------------------------------------------------------------------------------ fused
// op/detail/fusion.h: Convolution [+ BatchNorm] with oneDNN post-ops, made by the executor's inference pass (never
// registered: a symbol never names it, and it has no backward pass).
namespace {

constexpr const char* kFusedOp = "_sg_onednn_conv";

// A BatchNorm folded into the convolution before it (MXNet's _sg_mkldnn_conv with_bn): with the moving
// statistics, BatchNorm(conv(x, w) + b) = conv(x, w * s) + (b - mean) * s + beta, s = gamma / sqrt(var + eps) per
// output channel. The folded weights and bias are kept while the weight's and bias's states and the four
// per-channel vectors (compared by value: the moving statistics are auxiliary states, whose engine version moves
// with every forward call) stay the same, so the convolution's own weight cache (the reordered or
// Winograd-transformed weights) is reused too. A training forward pass (is_train without use_global_stats)
// needs the batch's statistics: then the convolution, the BatchNorm and the post-ops run one after the other,
// exactly as the unfused nodes would, the moving statistics updated as BatchNorm updates them.
class ConvBatchNormCpuOp : public Operator {
 public:
  ConvBatchNormCpuOp(const ConvolutionParam& conv, const BatchNormProp& bn, ConvPostOps post)
      : conv_(conv), bn_param_(bn.param()), post_(post), plain_(CreateConvolutionCpuOp(conv)),
        bn_(bn.CreateOperator(Context::CPU())) {
    ConvolutionParam with_bias = conv;
    with_bias.no_bias = false;
    folded_ = CreateConvolutionCpuOp(with_bias, post);
  }

  // in_data: data, weight[, bias], gamma, beta[, sum]; aux: moving_mean, moving_var.
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux) override {
    if (req[0] == kNullOp) return;
    if (req[0] == kAddTo) {
      throw Error(std::string(kFusedOp) + ": kAddTo is not supported (the executor writes its output)");
    }
    const std::size_t nconv = conv_.no_bias ? 2 : 3;
    if (in_data[0].dtype != DType::kFloat32) throw Error(std::string(kFusedOp) + ": float32 only");
    if (ctx.is_train && !bn_param_.use_global_stats) return TrainingForward(ctx, in_data, out_data[0], aux);
    Fold(ctx, in_data, aux);
    std::vector<TBlob> in{in_data[0], TBlob(w_.data(), in_data[1].shape, DType::kFloat32, Context::CPU()),
                          TBlob(b_.data(), TShape{conv_.num_filter}, DType::kFloat32, Context::CPU())};
    if (post_.sum) in.push_back(in_data[nconv + 2]);
    OpContext fctx{ctx.is_train, ctx.run_ctx, ctx.requested, {}};
    // The folded weights' state: the convolution keeps what it derives from them until the next fold.
    if (!ctx.in_states.empty()) fctx.in_states = {ctx.in_states[0], {kFoldedVar, folds_}, {kFoldedVar, folds_}};
    folded_->Forward(fctx, in, req, out_data, {});
  }

 private:
  static constexpr std::uint64_t kFoldedVar = ~std::uint64_t{0};

  void Fold(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<TBlob>& aux) {
    const std::size_t nconv = conv_.no_bias ? 2 : 3;
    const auto C = static_cast<std::size_t>(conv_.num_filter);
    const float* w = in_data[1].dptr_as<float>();
    const float* bias = conv_.no_bias ? nullptr : in_data[2].dptr_as<float>();
    const float* stats[4] = {in_data[nconv].dptr_as<float>(), in_data[nconv + 1].dptr_as<float>(),
                             aux[0].dptr_as<float>(), aux[1].dptr_as<float>()};  // gamma, beta, mean, var
    // Known states of the weight (and bias) arrays; without them (a caller that does not track states) every
    // call folds.
    std::vector<OpContext::InputState> states;
    if (ctx.in_states.size() >= nconv) states.assign(ctx.in_states.begin() + 1, ctx.in_states.begin() + nconv);
    bool same = !states.empty() && states == states_ && w == w_ptr_ && bias == b_ptr_ && stats_.size() == 4 * C;
    for (int k = 0; same && k < 4; ++k) same = std::equal(stats[k], stats[k] + C, stats_.begin() + k * C);
    if (same) return;
    const std::size_t per = static_cast<std::size_t>(in_data[1].shape.Size()) / std::max<std::size_t>(C, 1);
    w_.resize(per * C);
    b_.resize(C);
    for (std::size_t c = 0; c < C; ++c) {
      const double gamma = bn_param_.fix_gamma ? 1.0 : stats[0][c];
      const double s = gamma / std::sqrt(static_cast<double>(stats[3][c]) + bn_param_.eps);
      for (std::size_t i = 0; i < per; ++i) w_[c * per + i] = static_cast<float>(w[c * per + i] * s);
      b_[c] = static_cast<float>(((bias != nullptr ? bias[c] : 0.0) - stats[2][c]) * s + stats[1][c]);
    }
    stats_.resize(4 * C);
    for (int k = 0; k < 4; ++k) std::copy(stats[k], stats[k] + C, stats_.begin() + k * C);
    states_ = std::move(states);
    w_ptr_ = w;
    b_ptr_ = bias;
    ++folds_;
  }

  // Arrays the executor keeps blocked (post_.blocked_in / blocked_out) are reordered to NCHW and back around it.
  // The output is written (kWriteTo) or written onto the addend (kWriteInplace): each element of the addend is
  // read before the same element of the output is written.
  void TrainingForward(const OpContext& ctx, const std::vector<TBlob>& in_data, const TBlob& out,
                       const std::vector<TBlob>& aux) {
    const std::size_t nconv = conv_.no_bias ? 2 : 3;
    const auto n = static_cast<std::size_t>(out.shape.Size());
    const auto C = static_cast<std::int64_t>(conv_.num_filter);
    const auto nx = static_cast<std::size_t>(in_data[0].shape.Size());
    const bool sum_in = post_.sum;
    y_.resize(2 * n + 2 * static_cast<std::size_t>(C) + (post_.blocked_in ? nx : 0) +
              (sum_in && post_.blocked_sum ? n : 0) + (post_.blocked_out ? n : 0));
    float* extra = y_.data() + 2 * n + 2 * C;
    std::vector<TBlob> conv_in(in_data.begin(), in_data.begin() + static_cast<std::ptrdiff_t>(nconv));
    const float* sum = sum_in ? in_data[nconv + 2].dptr_as<float>() : nullptr;
    float* o = out.dptr_as<float>();
#if TROUPE_HAVE_DNNL
    if (post_.blocked_in) {
      internal::ReorderLayout(in_data[0].dptr, true, extra, false, in_data[0].shape);
      conv_in[0].dptr = extra;
      extra += nx;
    }
    if (sum_in && post_.blocked_sum) {
      internal::ReorderLayout(sum, true, extra, false, out.shape);
      sum = extra;
      extra += n;
    }
    if (post_.blocked_out) o = extra;  // reordered into `out` at the end
#endif
    const TBlob y(y_.data(), out.shape, DType::kFloat32, Context::CPU());
    const TBlob z(y_.data() + n, out.shape, DType::kFloat32, Context::CPU());
    const TBlob mean(y_.data() + 2 * n, TShape{C}, DType::kFloat32, Context::CPU()),
        var(y_.data() + 2 * n + C, TShape{C}, DType::kFloat32, Context::CPU());
    OpContext cctx{ctx.is_train, ctx.run_ctx, ctx.requested, {}};
    plain_->Forward(cctx, conv_in, {kWriteTo}, {y}, {});
    bn_->Forward(cctx, {y, in_data[nconv], in_data[nconv + 1]}, {kWriteTo, kNullOp, kNullOp}, {z, mean, var}, aux);
    const float* zp = z.dptr_as<float>();
    for (std::size_t i = 0; i < n; ++i) {
      float v = zp[i] + (sum != nullptr ? sum[i] : 0.0f);
      o[i] = ApplyFusedActivation(post_.act, v);
    }
#if TROUPE_HAVE_DNNL
    if (post_.blocked_out) internal::ReorderLayout(o, false, out.dptr, true, out.shape);
#endif
  }

  ConvolutionParam conv_;
  BatchNormParam bn_param_;
  ConvPostOps post_;
  std::unique_ptr<Operator> plain_;   // the convolution as given (training forward)
  std::unique_ptr<Operator> bn_;      // BatchNorm's CPU operator (training forward)
  std::unique_ptr<Operator> folded_;  // the convolution with the folded bias and the post-ops
  std::vector<float> w_, b_;          // the folded weights and bias
  std::vector<OpContext::InputState> states_;
  std::vector<float> stats_;          // gamma, beta, mean, var as folded
  const void* w_ptr_ = nullptr;
  const void* b_ptr_ = nullptr;
  std::uint64_t folds_ = 0;
  std::vector<float> y_;              // training forward: the convolution, BatchNorm's output, its statistics
};

class FusedConvolutionProp : public OperatorProperty {
 public:
  FusedConvolutionProp(const ConvolutionProp& conv, ConvPostOps post, std::optional<BatchNormProp> bn)
      : conv_(conv), post_(post), bn_(std::move(bn)) {}
  void Init(const Kwargs&) override {
    throw Error(std::string(kFusedOp) + ": made by the executor's inference pass, not from parameters");
  }
  Kwargs GetParams() const override {
    Kwargs k = conv_.GetParams();
    k.emplace_back("with_bn", bn_ ? "True" : "False");
    k.emplace_back("with_sum", post_.sum ? "True" : "False");
    k.emplace_back("with_act", post_.act != FusedActivation::kNone ? "True" : "False");
    if (post_.blocked_in) k.emplace_back("data_layout", "blocked");
    if (post_.blocked_out) k.emplace_back("out_layout", "blocked");
    if (post_.blocked_sum) k.emplace_back("sum_layout", "blocked");
    return k;
  }
  std::vector<std::string> ListArguments() const override {
    std::vector<std::string> a = conv_.ListArguments();
    if (bn_) a.insert(a.end(), {"gamma", "beta"});
    if (post_.sum) a.push_back("sum");
    return a;
  }
  std::vector<std::string> ListAuxiliaryStates() const override {
    if (bn_) return {"moving_mean", "moving_var"};
    return {};
  }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override {
    const std::size_t n = conv_.ListArguments().size();
    const std::size_t nbn = bn_ ? 2 : 0;
    if (in_shape->size() != n + nbn + (post_.sum ? 1 : 0)) {
      throw Error(std::string(kFusedOp) + ": expected " + std::to_string(n + nbn + (post_.sum ? 1 : 0)) +
                  " inputs, got " + std::to_string(in_shape->size()));
    }
    std::vector<TShape> conv_in(in_shape->begin(), in_shape->begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<TShape> conv_aux;
    bool known = conv_.InferShape(&conv_in, out_shape, &conv_aux);
    std::copy(conv_in.begin(), conv_in.end(), in_shape->begin());
    if (bn_) {
      const TShape channels{conv_.param().num_filter};
      AssignShape(in_shape, n, channels, kFusedOp, "gamma");
      AssignShape(in_shape, n + 1, channels, kFusedOp, "beta");
      aux_shape->assign(2, channels);
    } else {
      aux_shape->clear();
    }
    if (post_.sum) {
      if ((*out_shape)[0].ndim() >= 0) AssignShape(in_shape, n + nbn, (*out_shape)[0], kFusedOp, "sum");
      known = known && (*in_shape)[n + nbn].known();
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
    if (!post_.sum || post_.blocked_sum != post_.blocked_out) return {};
    return {{in_data[conv_.ListArguments().size() + (bn_ ? 2 : 0)], out_data[0]}};
  }
  bool HasBackward() const override { return false; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) {
      throw Error(std::string(kFusedOp) + ": runs on the CPU only (the executor fuses CPU graphs only)");
    }
    if (bn_) return std::make_unique<ConvBatchNormCpuOp>(conv_.param(), *bn_, post_);
    return CreateConvolutionCpuOp(conv_.param(), post_);
  }

 private:
  ConvolutionProp conv_;
  ConvPostOps post_;
  std::optional<BatchNormProp> bn_;
};

}  // namespace

FusedActivation FusedActivationOf(const std::string& act_type) {
  if (act_type == "relu") return FusedActivation::kRelu;
  if (act_type == "sigmoid") return FusedActivation::kSigmoid;
  if (act_type == "tanh") return FusedActivation::kTanh;
  if (act_type == "softrelu") return FusedActivation::kSoftrelu;
  return FusedActivation::kNone;
}

bool FusedConvolutionKeepsBlocked(const TShape& shape) {
#if TROUPE_HAVE_DNNL
  return internal::DnnlEnabled() && internal::BlockedLayoutFits(shape);
#else
  (void)shape;
  return false;
#endif
}

std::shared_ptr<const OperatorProperty> FuseConvolution(const OperatorProperty& conv, const ConvFusion& f) {
  const auto* c = dynamic_cast<const ConvolutionProp*>(&conv);
  // Plain 2-D convolutions only: the blocked layout and the fusion pass are NCHW's.
  if (c == nullptr || c->one_d() || c->param().kernel.ndim() != 2 ||
      (f.batch_norm == nullptr && !f.sum && f.act == FusedActivation::kNone && !f.blocked_in && !f.blocked_out &&
       !f.blocked_sum)) {
    return nullptr;
  }
  std::optional<BatchNormProp> bn;
  if (f.batch_norm != nullptr) {
    const auto* b = dynamic_cast<const BatchNormProp*>(f.batch_norm);
    // The channel axis of the convolution's NCHW output only; BatchNorm's statistics outputs are not produced.
    if (b == nullptr || (b->param().axis != 1 && b->param().axis != -3)) return nullptr;
    bn = *b;
  }
#if TROUPE_HAVE_DNNL
  if (!internal::DnnlEnabled()) return nullptr;
  return std::make_shared<FusedConvolutionProp>(
      *c, ConvPostOps{f.sum, f.act, f.blocked_in, f.blocked_out, f.sum && f.blocked_sum}, std::move(bn));
#else
  return nullptr;
#endif
}

}  // namespace troupe
