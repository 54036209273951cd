// UpSampling with sample_type 'nearest': each of num_args (N, C, H, W) inputs repeated `s` times along H and
// W, where the first input's s is `scale` and the others' is whatever brings them to the first's output size;
// the results are concatenated along the channels (multi_input_mode 'concat') or added ('sum', equal
// channels). Arguments arg0, arg1, ... as in MXNet 1.9 (src/operator/nn/upsampling*). Backward: each input
// position gets the sum of the head gradient over its s x s block.
//
// sample_type 'bilinear' is MXNet's Deconvolution with a 'weight' input under another name; troupe rejects it
// when the operator is created, naming it. The GPU operator is upsampling.cu.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/upsampling/upsampling.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using internal::FloatSwitch;
using upsampling::ForEachInput;

constexpr const char* kName = "UpSampling";

class UpSamplingOp final : public Operator {
 public:
  explicit UpSamplingOp(const UpSamplingParam& p) : sum_(p.multi_input_mode == "sum") {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TShape& os = out[0].shape;
    FloatSwitch(out[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      T* y = out[0].dptr_as<T>();
      // With 'sum', the first input is assigned with the request and the others added (MXNet's order).
      ForEachInput(Shapes(in), os, sum_, [&](std::size_t a, std::int64_t s, std::int64_t c0) {
        const TShape& is = in[a].shape;
        const T* x = in[a].dptr_as<T>();
        const OpReqType r = sum_ && a > 0 ? kAddTo : req[0];
        for (std::int64_t n = 0; n < is[0]; ++n) {
          for (std::int64_t c = 0; c < is[1]; ++c) {
            const T* xs = x + (n * is[1] + c) * is[2] * is[3];
            T* ys = y + (n * os[1] + c0 + c) * os[2] * os[3];
            for (std::int64_t h = 0; h < os[2]; ++h) {
              const T* row = xs + (h / s) * is[3];
              internal::AssignEach(ys + h * os[3], os[3], r, [&](std::int64_t w) { return row[w / s]; });
            }
          }
        }
      });
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const TShape& os = out_grad[0].shape;
    FloatSwitch(out_grad[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      ForEachInput(Shapes(in_grad), os, sum_, [&](std::size_t a, std::int64_t s, std::int64_t c0) {
        if (req[a] == kNullOp) return;
        const TShape& is = in_grad[a].shape;
        T* gx = in_grad[a].dptr_as<T>();
        for (std::int64_t n = 0; n < is[0]; ++n) {
          for (std::int64_t c = 0; c < is[1]; ++c) {
            const T* gs = og + (n * os[1] + c0 + c) * os[2] * os[3];
            T* xs = gx + (n * is[1] + c) * is[2] * is[3];
            for (std::int64_t h = 0; h < is[2]; ++h) {
              internal::AssignEach(xs + h * is[3], is[3], req[a], [&](std::int64_t w) {
                T acc = T(0);
                for (std::int64_t dh = 0; dh < s; ++dh) {
                  const T* row = gs + (h * s + dh) * os[3] + w * s;
                  for (std::int64_t dw = 0; dw < s; ++dw) acc += row[dw];
                }
                return acc;
              });
            }
          }
        }
      });
    });
  }

 private:
  static std::vector<TShape> Shapes(const std::vector<TBlob>& blobs) {
    std::vector<TShape> s;
    for (const TBlob& b : blobs) s.push_back(b.shape);
    return s;
  }
  bool sum_;
};

class UpSamplingProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, kName);
    if (p_.sample_type == "bilinear") {
      throw Error(std::string(kName) +
                  ": sample_type 'bilinear' is not supported by troupe (MXNet computes it as a grouped "
                  "Deconvolution of 'data' with a 'weight' input); use sample_type 'nearest', or "
                  "_contrib_BilinearResize2D for bilinear interpolation");
    }
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    std::vector<std::string> args;
    for (int i = 0; i < p_.num_args; ++i) args.push_back("arg" + std::to_string(i));
    return args;
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    const std::string op = kName;
    if (in->size() != static_cast<std::size_t>(p_.num_args)) {
      throw Error(op + ": num_args is " + std::to_string(p_.num_args) + " but " + std::to_string(in->size()) +
                  " inputs were given");
    }
    aux->clear();
    for (const TShape& s : *in) {
      if (!s.known()) return false;
    }
    const TShape& d = (*in)[0];
    const std::int64_t oh = d.ndim() == 4 ? d[2] * p_.scale : 0, ow = d.ndim() == 4 ? d[3] * p_.scale : 0;
    TShape o = d;
    o[1] = 0;
    for (std::size_t i = 0; i < in->size(); ++i) {
      const TShape& s = (*in)[i];
      const std::string arg = "'arg" + std::to_string(i) + "'";
      if (s.ndim() != 4) throw Error(op + ": " + arg + " must be 4-D (batch, channel, y, x), got " + s.ToString());
      if (s[0] != d[0]) {
        throw Error(op + ": " + arg + " has batch size " + std::to_string(s[0]) + " but 'arg0' has " +
                    std::to_string(d[0]));
      }
      if (s[2] == 0 || s[3] == 0 || oh % s[2] != 0 || ow % s[3] != 0 || ow / s[3] != oh / s[2]) {
        throw Error(op + ": " + arg + " of shape " + s.ToString() + " cannot be upsampled by a whole factor to " +
                    std::to_string(oh) + "x" + std::to_string(ow) + " (the first input's size times scale)");
      }
      if (p_.multi_input_mode == "sum") {
        if (o[1] != 0 && o[1] != s[1]) {
          throw Error(op + ": multi_input_mode 'sum' needs equal channels, but " + arg + " has " +
                      std::to_string(s[1]) + " and 'arg0' " + std::to_string(o[1]));
        }
        o[1] = s[1];
      } else {
        o[1] += s[1];
      }
    }
    o[2] = oh;
    o[3] = ow;
    *out = {o};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<UpSamplingProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // upsampling.cu
    return std::make_unique<UpSamplingOp>(p_);
  }

 private:
  UpSamplingParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(UpSampling, UpSamplingProp)
    .describe(
        "Upsamples 4-D (NCHW) inputs by repeating each pixel (nearest neighbour); several inputs are "
        "concatenated along the channels or summed.")
    .add_argument("data", "NDArray-or-Symbol[]", "Array of tensors to upsample.")
    .add_arguments(UpSamplingParam::Docs());

}  // namespace troupe
