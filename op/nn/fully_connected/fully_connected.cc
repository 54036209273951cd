// FullyConnected: out = X W^T + b, with X the data seen as a matrix (batch x features when flatten=True,
// every leading axis x the last axis when flatten=False). The CPU operator is three OpenBLAS calls and two
// plain loops (bias add, bias-gradient row sums): it is benchmarked against the raw sgemm calls of the same
// shapes, so nothing else may be copied or converted on the way.
#include <climits>
#include <string>

#include "tensor/detail/kernels.h"
#include "op/internal/float_staging.h"
#include "op/nn/fully_connected/fully_connected.h"

namespace troupe {

void FullyConnectedParam::Declare(ParamSchema<FullyConnectedParam>& s) {
  s.Field("num_hidden", &FullyConnectedParam::num_hidden).LowerBound(1).Describe("Number of hidden nodes of the output.");
  s.Field("no_bias", &FullyConnectedParam::no_bias).Default(false).Describe("Whether to disable bias parameter.");
  s.Field("flatten", &FullyConnectedParam::flatten)
      .Default(true)
      .Describe("Whether to collapse all but the first axis of the input data tensor.");
}

FcDims FullyConnectedDims(const TShape& data, bool flatten) {
  FcDims d;
  if (data.ndim() < 1) return d;
  if (flatten) {
    d.rows = data[0];
    d.cols = data.ProdDims(1, data.ndim());
  } else {
    d.rows = data.ProdDims(0, data.ndim() - 1);
    d.cols = data[data.ndim() - 1];
  }
  return d;
}

namespace {

constexpr const char* kOp = "FullyConnected";

int GemmDim(std::int64_t v, const char* what) {
  if (v > INT_MAX) {
    throw Error(std::string("FullyConnected: ") + what + " " + std::to_string(v) +
                " exceeds the BLAS limit of 2^31-1; split the batch");
  }
  return static_cast<int>(v);
}

class FullyConnectedCpuOp : public Operator {
 public:
  explicit FullyConnectedCpuOp(const FullyConnectedParam& p) : param_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux) override {
    if (req[0] == kNullOp) return;
    // Half-precision arrays: the float32 products on converted copies.
    if (internal::AnyHalf({&in_data, &out_data})) return staging_.Forward(*this, ctx, in_data, req, out_data, aux);
    const FcDims d = FullyConnectedDims(in_data[0].shape, param_.flatten);
    const int m = GemmDim(d.rows, "batch"), k = GemmDim(d.cols, "input size"), n = param_.num_hidden;
    internal::FloatSwitch(in_data[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      T* out = static_cast<T*>(out_data[0].dptr);
      internal::CpuGemm(in_data[0], in_data[1], out_data[0], false, true, m, n, k, 1.0, req[0] == kAddTo ? 1.0 : 0.0);
      if (!param_.no_bias) {
        const T* b = static_cast<const T*>(in_data[2].dptr);
        for (int r = 0; r < m; ++r) {
          T* row = out + static_cast<std::int64_t>(r) * n;
          for (int j = 0; j < n; ++j) row[j] += b[j];
        }
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux) override {
    if (internal::AnyHalf({&out_grad, &in_data, &in_grad})) {
      return staging_.Backward(*this, ctx, out_grad, in_data, out_data, req, in_grad, aux);
    }
    const FcDims d = FullyConnectedDims(in_data[0].shape, param_.flatten);
    const int m = GemmDim(d.rows, "batch"), k = GemmDim(d.cols, "input size"), n = param_.num_hidden;
    internal::FloatSwitch(out_grad[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const TBlob& dy = out_grad[0];
      // dX = dY W  (m x n times n x k)
      if (req[0] != kNullOp) {
        internal::CpuGemm(dy, in_data[1], in_grad[0], false, false, m, k, n, 1.0, req[0] == kAddTo ? 1.0 : 0.0);
      }
      // dW = dY^T X  (n x m times m x k)
      if (req[1] != kNullOp) {
        internal::CpuGemm(dy, in_data[0], in_grad[1], true, false, n, k, m, 1.0, req[1] == kAddTo ? 1.0 : 0.0);
      }
      // db = column sums of dY, accumulated row by row so the inner loop is contiguous.
      if (!param_.no_bias && req[2] != kNullOp) {
        T* db = static_cast<T*>(in_grad[2].dptr);
        const T* g = static_cast<const T*>(dy.dptr);
        if (req[2] != kAddTo) {
          for (int j = 0; j < n; ++j) db[j] = T(0);
        }
        for (int r = 0; r < m; ++r) {
          const T* row = g + static_cast<std::int64_t>(r) * n;
          for (int j = 0; j < n; ++j) db[j] += row[j];
        }
      }
    });
  }

 private:
  FullyConnectedParam param_;
  internal::FloatStaging staging_;
};

}  // namespace

void FullyConnectedProp::Init(const Kwargs& kwargs) { param_.Init(kwargs, kOp); }

std::vector<std::string> FullyConnectedProp::ListArguments() const {
  if (param_.no_bias) return {"data", "weight"};
  return {"data", "weight", "bias"};
}

bool FullyConnectedProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                    std::vector<TShape>*) const {
  const std::size_t nargs = param_.no_bias ? 2 : 3;
  if (in_shape->size() != nargs) {
    throw Error(std::string("FullyConnected: expected ") + std::to_string(nargs) + " inputs (data, weight" +
                (param_.no_bias ? "" : ", bias") + "), got " + std::to_string(in_shape->size()));
  }
  const TShape& data = (*in_shape)[0];
  if (!param_.no_bias) AssignShape(in_shape, 2, TShape{param_.num_hidden}, kOp, "bias");
  out_shape->assign(1, TShape());
  if (data.ndim() < 0) return false;
  if (data.ndim() == 0) {
    throw Error("FullyConnected: argument 'data' is a scalar; it needs at least one dimension (batch, ...)");
  }
  // The feature count is known when the axes it is made of are (with flatten, (batch,) is a batch of
  // one-feature rows, as in MXNet).
  bool cols_known = true;
  std::int64_t cols = 1;
  const int first = param_.flatten ? 1 : data.ndim() - 1;
  for (int i = first; i < data.ndim(); ++i) {
    cols_known = cols_known && data[i] >= 0;
    cols *= data[i];
  }
  if (cols_known) AssignShape(in_shape, 1, TShape{param_.num_hidden, cols}, kOp, "weight");
  TShape out;
  if (param_.flatten) {
    out = TShape{data[0], param_.num_hidden};
  } else {
    out = data;
    out[data.ndim() - 1] = param_.num_hidden;
  }
  (*out_shape)[0] = out;
  for (const auto& s : *in_shape) {
    if (!s.known()) return false;
  }
  return out.known();
}

std::vector<int> FullyConnectedProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                               const std::vector<int>& in_data,
                                                               const std::vector<int>&) const {
  // dX needs W, dW needs X; the bias and the output are never read.
  return {out_grad[0], in_data[0], in_data[1]};
}

std::unique_ptr<Operator> FullyConnectedProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<FullyConnectedCpuOp>(param_);
}

TROUPE_REGISTER_OP_PROPERTY(FullyConnected, FullyConnectedProp)
    .describe("Applies a linear transformation: Y = X W^T + b.")
    .add_argument("data", "NDArray-or-Symbol", "Input data.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight matrix (num_hidden, input features).")
    .add_argument("bias", "NDArray-or-Symbol", "Bias parameter (num_hidden,).")
    .add_arguments(FullyConnectedParam::Docs());

}  // namespace troupe
