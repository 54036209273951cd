// The operators that make arrays rather than transform them (MXNet 1.9's init_op and its contrib
// arange_like, shape_array, size_array): _zeros, _ones, _full, _arange, _contrib_arange_like, shape_array
// and size_array, on the CPU (init.cu runs init.h's element code on the GPU). A 0 in _zeros/_ones/_full's shape is MXNet 1.x's unknown dimension: shape
// inference fills it from the consumer (an RNN's begin state written as _zeros(shape=(2, 0, 100))).
// Their inputs, where they have one, lend only a shape: the gradient to it is zero.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "op/nn/init/init.h"

#include "op/internal/op_util.h"
#include "op/param.h"

namespace troupe {

namespace {

const std::vector<std::string> kDTypes = {"bfloat16", "bool",  "float16", "float32", "float64",
                                          "int32",    "int64", "int8",    "uint8"};

struct InitParam : Params<InitParam> {
  std::vector<std::int64_t> shape;
  std::string ctx;
  std::string dtype = "float32";
  double value = 0;
  static void Declare(ParamSchema<InitParam>& s) {
    s.Field("shape", &InitParam::shape).Default({}).Describe("The shape of the output; 0 is a dimension to infer.");
    s.Field("ctx", &InitParam::ctx).Default("").Describe("Context of output (ignored: the executor's context).");
    s.Field("dtype", &InitParam::dtype).Default("float32").Choices(kDTypes).Describe("Target data type.");
    s.Field("value", &InitParam::value).Default(0.0).Describe("Value with which to fill (_full only).");
  }
};

struct RangeParam : Params<RangeParam> {
  double start = 0;
  std::optional<double> stop;
  double step = 1;
  int repeat = 1;
  bool infer_range = false;
  std::string ctx;
  std::string dtype = "float32";
  static void Declare(ParamSchema<RangeParam>& s) {
    s.Field("start", &RangeParam::start).Describe("Start of interval.");
    s.Field("stop", &RangeParam::stop).Default(std::nullopt).Describe("End of interval (None: start is the end, 0 the start).");
    s.Field("step", &RangeParam::step).Default(1.0).Describe("Spacing between values.");
    s.Field("repeat", &RangeParam::repeat).Default(1).LowerBound(1).Describe("Times each value repeats.");
    s.Field("infer_range", &RangeParam::infer_range).Default(false).Describe("Infer the stop from the consumer (not supported).");
    s.Field("ctx", &RangeParam::ctx).Default("").Describe("Context of output (ignored).");
    s.Field("dtype", &RangeParam::dtype).Default("float32").Choices(kDTypes).Describe("Target data type.");
  }
};

struct RangeLikeParam : Params<RangeLikeParam> {
  double start = 0;
  double step = 1;
  int repeat = 1;
  std::string ctx;
  std::optional<int> axis;
  static void Declare(ParamSchema<RangeLikeParam>& s) {
    s.Field("start", &RangeLikeParam::start).Default(0.0).Describe("Start of interval.");
    s.Field("step", &RangeLikeParam::step).Default(1.0).Describe("Spacing between values.");
    s.Field("repeat", &RangeLikeParam::repeat).Default(1).LowerBound(1).Describe("Times each value repeats.");
    s.Field("ctx", &RangeLikeParam::ctx).Default("").Describe("Context of output (ignored).");
    s.Field("axis", &RangeLikeParam::axis).Default(std::nullopt).Describe("Arange along this axis of the input (None: the whole shape).");
  }
};

using init::Fill;
using init::FillSpec;

// The settings of a fill (what FillSpec holds but the input's shape).
struct FillSettings {
  Fill fill;
  double value, start, step;
  int repeat;
};

class FillOp final : public Operator {
 public:
  FillOp(FillSettings settings, init::FillFn fill, init::ZeroFn zero) : s_(settings), fill_(fill), zero_(zero) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FillSpec spec;
    spec.fill = s_.fill;
    spec.value = s_.value;
    spec.start = s_.start;
    spec.step = s_.step;
    spec.repeat = s_.repeat;
    if (!in.empty()) {
      for (int d = 0; d < in[0].shape.ndim(); ++d) spec.dims[d] = in[0].shape[d];
      spec.size = in[0].Size();
    }
    fill_(spec, out[0], req[0], ctx.run_ctx);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    for (std::size_t k = 0; k < in_grad.size(); ++k) {
      if (req[k] == kWriteTo || req[k] == kWriteInplace) zero_(in_grad[k], ctx.run_ctx);
    }
  }

 private:
  FillSettings s_;
  init::FillFn fill_;
  init::ZeroFn zero_;
};

void FillCpu(const FillSpec& spec, const TBlob& out, OpReqType req, const RunContext&) {
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.dptr);
    for (std::int64_t i = 0; i < out.Size(); ++i) init::FillElement(spec, o, i, req);
  });
}

void ZeroCpu(const TBlob& b, const RunContext&) {
  DTypeSwitch(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* z = static_cast<T*>(b.dptr);
    std::fill(z, z + b.Size(), internal::ConvertTo<T>(0.0));
  });
}

// What the fill operators' properties share: their settings, read by MakeFillOperator.
class FillPropBase : public OperatorProperty {
 public:
  virtual FillSettings Settings() const = 0;
};

template <Fill kFill>
class FillProp final : public FillPropBase {
 public:
  void Init(const Kwargs& kwargs) override {
    if constexpr (kFill == Fill::kRange) {
      range_.Init(kwargs, TypeString());
      if (range_.infer_range) {
        throw Error(TypeString() + ": infer_range=True is not supported; give stop (or use _contrib_arange_like)");
      }
    } else if constexpr (kFill == Fill::kRangeLike) {
      like_.Init(kwargs, TypeString());
    } else if constexpr (kFill == Fill::kShape || kFill == Fill::kSize) {
      if (!kwargs.empty()) throw Error(TypeString() + ": unknown parameter '" + kwargs.front().first + "'");
    } else {
      init_.Init(kwargs, TypeString());
      if (kFill != Fill::kFull && init_.value != 0) {
        throw Error(TypeString() + ": unknown parameter 'value' (only _full takes one)");
      }
    }
  }
  Kwargs GetParams() const override {
    if constexpr (kFill == Fill::kRange) return range_.GetParams();
    if constexpr (kFill == Fill::kRangeLike) return like_.GetParams();
    if constexpr (kFill == Fill::kShape || kFill == Fill::kSize) return {};
    Kwargs p = init_.GetParams();
    if (kFill != Fill::kFull) std::erase_if(p, [](const auto& kv) { return kv.first == "value"; });
    return p;
  }
  std::vector<std::string> ListArguments() const override {
    if constexpr (kFill == Fill::kRangeLike || kFill == Fill::kShape || kFill == Fill::kSize) return {"data"};
    return {};
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const std::string op = TypeString();
    if constexpr (kFill == Fill::kRange) {
      AssignShape(out, 0, TShape{RangeSize()}, op, "output");
      return true;
    } else if constexpr (kFill == Fill::kRangeLike || kFill == Fill::kShape || kFill == Fill::kSize) {
      const TShape& x = (*in)[0];
      if (kFill == Fill::kRangeLike && like_.axis.has_value()) {
        if (x.ndim() < 0 || x[internal::NormalizeAxis(*like_.axis, x.ndim(), op, "axis")] < 0) return false;
        AssignShape(out, 0, TShape{x[internal::NormalizeAxis(*like_.axis, x.ndim(), op, "axis")]}, op, "output");
        return true;
      }
      if (kFill == Fill::kShape) {
        if (x.ndim() < 0) return false;
        AssignShape(out, 0, TShape{static_cast<std::int64_t>(x.ndim())}, op, "output");
        return true;
      }
      if (kFill == Fill::kSize) {
        AssignShape(out, 0, TShape{1}, op, "output");
        return x.known();
      }
      if (!x.known()) return false;
      AssignShape(out, 0, x, op, "output");
      return true;
    } else {
      std::vector<std::int64_t> dims(init_.shape.begin(), init_.shape.end());
      for (auto& d : dims) {
        if (d == 0) d = -1;  // MXNet 1.x: unknown, filled by inference
      }
      AssignShape(out, 0, TShape(dims), op, "output");
      return (*out)[0].known();
    }
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    if constexpr (kFill == Fill::kShape || kFill == Fill::kSize) {
      out->assign(1, static_cast<int>(DType::kInt64));
      return true;
    } else if constexpr (kFill == Fill::kRangeLike) {
      out->assign(1, (*in)[0]);
      return (*in)[0] != kTypeUnknown;
    } else {
      const std::string& d = kFill == Fill::kRange ? range_.dtype : init_.dtype;
      out->assign(1, static_cast<int>(DTypeFromName(d)));
      return true;
    }
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<FillProp>(*this); }
  std::string TypeString() const override {
    switch (kFill) {
      case Fill::kZeros: return "_zeros";
      case Fill::kOnes: return "_ones";
      case Fill::kFull: return "_full";
      case Fill::kRange: return "_arange";
      case Fill::kRangeLike: return "_contrib_arange_like";
      case Fill::kShape: return "shape_array";
      case Fill::kSize: return "size_array";
    }
    return "?";
  }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>&, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // init.cu
    return init::MakeFillOperator(*this, FillCpu, ZeroCpu);
  }
  FillSettings Settings() const override {
    if constexpr (kFill == Fill::kRange) {
      return {kFill, 0, RangeStart(), range_.step, range_.repeat};
    } else if constexpr (kFill == Fill::kRangeLike) {
      return {kFill, 0, like_.start, like_.step, like_.repeat};
    } else {
      return {kFill, init_.value, 0, 1, 1};
    }
  }

 private:
  double RangeStart() const { return range_.stop.has_value() ? range_.start : 0.0; }
  std::int64_t RangeSize() const {
    const double start = RangeStart();
    const double stop = range_.stop.has_value() ? *range_.stop : range_.start;
    if (range_.step == 0) throw Error("_arange: step must not be 0");
    const double n = std::ceil((stop - start) / range_.step);
    if (n <= 0) throw Error("_arange: the range [" + std::to_string(start) + ", " + std::to_string(stop) + ") with step " +
                            std::to_string(range_.step) + " is empty");
    return static_cast<std::int64_t>(n) * range_.repeat;
  }

  InitParam init_;
  RangeParam range_;
  RangeLikeParam like_;
};

}  // namespace

std::unique_ptr<Operator> init::MakeFillOperator(const OperatorProperty& prop, FillFn fill, ZeroFn zero) {
  return std::make_unique<FillOp>(static_cast<const FillPropBase&>(prop).Settings(), fill, zero);
}

TROUPE_REGISTER_OP_PROPERTY(_zeros, FillProp<Fill::kZeros>)
    .describe("An array of zeros.")
    .add_arguments(InitParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_ones, FillProp<Fill::kOnes>)
    .describe("An array of ones.")
    .add_arguments(InitParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_full, FillProp<Fill::kFull>)
    .describe("An array filled with one value.")
    .add_arguments(InitParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_arange, FillProp<Fill::kRange>)
    .describe("Evenly spaced values within [start, stop), each repeated `repeat` times.")
    .add_arguments(RangeParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_contrib_arange_like, FillProp<Fill::kRangeLike>)
    .describe("Evenly spaced values shaped like the input (or its `axis`).")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(RangeLikeParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(shape_array, FillProp<Fill::kShape>)
    .describe("The input's shape as a 1-D int64 array.")
    .add_argument("data", "NDArray-or-Symbol", "Input Array.");
TROUPE_REGISTER_OP_PROPERTY(size_array, FillProp<Fill::kSize>)
    .describe("The input's number of elements as a (1,) int64 array.")
    .add_argument("data", "NDArray-or-Symbol", "Input Array.");

}  // namespace troupe
