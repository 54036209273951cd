// Embedding on the CPU: a row lookup (forward) and a scatter-add of out_grad rows into the weight gradient
// (backward). Indices are whatever type data has (floats by MXNet's convention), truncated to integers and
// clamped into [0, input_dim - 1] like MXNet's take(mode='clip'); data itself gets no gradient.
#include <cstring>

#include "op/nn/embedding/embedding.h"

namespace troupe {

void EmbeddingProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, "Embedding");
  if (param_.sparse_grad) {
    throw Error("Embedding: parameter 'sparse_grad' is True, but row_sparse gradients are not supported here; use "
                "sparse_grad=False (a dense weight gradient)");
  }
}

bool EmbeddingProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                               std::vector<TShape>*) const {
  if (in_shape->size() != 2) {
    throw Error("Embedding: expected 2 inputs (data, weight), got " + std::to_string(in_shape->size()));
  }
  out_shape->resize(1);
  AssignShape(in_shape, 1, TShape{param_.input_dim, param_.output_dim}, "Embedding", "weight");
  const TShape& d = (*in_shape)[0];
  if (!d.known()) return false;
  if (d.ndim() + 1 > TShape::kMaxDims) {
    throw Error("Embedding: argument 'data' has shape " + d.ToString() + "; the output would have more than " +
                std::to_string(TShape::kMaxDims) + " dimensions");
  }
  std::vector<std::int64_t> out = d.ToVector();
  out.push_back(param_.output_dim);
  AssignShape(out_shape, 0, TShape(out), "Embedding", "output");
  return true;
}

// As MXNet's EmbeddingOpType: weight and output share a float type (the known one, else `dtype`); data
// keeps its own type, which must be known.
bool EmbeddingProp::InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>*) const {
  if (in_type->size() != 2) {
    throw Error("Embedding: expected 2 input types (data, weight), got " + std::to_string(in_type->size()));
  }
  out_type->resize(1, kTypeUnknown);
  const int w = (*in_type)[1], o = (*out_type)[0];
  int dtype = static_cast<int>(DTypeFromName(param_.dtype));
  if (w != kTypeUnknown && o != kTypeUnknown && w != o) {
    throw Error(std::string("Embedding: argument 'weight' has type ") + DTypeName(static_cast<DType>(w)) +
                " but the output has " + DTypeName(static_cast<DType>(o)) + "; they must agree");
  }
  if (w != kTypeUnknown) {
    dtype = w;
  } else if (o != kTypeUnknown) {
    dtype = o;
  }
  (*in_type)[1] = dtype;
  (*out_type)[0] = dtype;
  return (*in_type)[0] != kTypeUnknown;
}

namespace {

class EmbeddingCpuOp : public Operator {
 public:
  explicit EmbeddingCpuOp(const EmbeddingParam& p) : param_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& data = in_data[0];
    const TBlob& weight = in_data[1];
    const TBlob& out = out_data[0];
    const std::int64_t n = data.Size(), dim = param_.output_dim, rows = param_.input_dim;
    internal::FloatSwitch(weight.dtype, "Embedding", [&](auto wtag) {
      using W = decltype(wtag);
      const W* w = static_cast<const W*>(weight.dptr);
      W* o = static_cast<W*>(out.dptr);
      DTypeSwitch(data.dtype, [&](auto itag) {
        using I = decltype(itag);
        const I* idx = static_cast<const I*>(data.dptr);
        for (std::int64_t i = 0; i < n; ++i) {
          const W* row = w + tensor_ops::ClipIndex(idx[i], rows) * dim;
          W* dst = o + i * dim;
          for (std::int64_t j = 0; j < dim; ++j) Assign(dst + j, req[0], row[j]);
        }
      });
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    // data: the lookup is piecewise constant in the index, so its gradient is zero.
    if (req[0] == kWriteTo || req[0] == kWriteInplace) std::memset(in_grad[0].dptr, 0, in_grad[0].Bytes());
    if (req[1] == kNullOp) return;
    const TBlob& data = in_data[0];
    const TBlob& og = out_grad[0];
    const TBlob& wg = in_grad[1];
    const std::int64_t n = data.Size(), dim = param_.output_dim, rows = param_.input_dim;
    internal::FloatSwitch(wg.dtype, "Embedding", [&](auto wtag) {
      using W = decltype(wtag);
      const W* g = static_cast<const W*>(og.dptr);
      W* o = static_cast<W*>(wg.dptr);
      if (req[1] != kAddTo) std::memset(o, 0, wg.Bytes());
      DTypeSwitch(data.dtype, [&](auto itag) {
        using I = decltype(itag);
        const I* idx = static_cast<const I*>(data.dptr);
        for (std::int64_t i = 0; i < n; ++i) {
          W* row = o + tensor_ops::ClipIndex(idx[i], rows) * dim;
          const W* src = g + i * dim;
          for (std::int64_t j = 0; j < dim; ++j) row[j] += src[j];
        }
      });
    });
  }

 private:
  EmbeddingParam param_;
};

}  // namespace

std::unique_ptr<Operator> EmbeddingProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<EmbeddingCpuOp>(param_);
}

TROUPE_REGISTER_OP_PROPERTY(Embedding, EmbeddingProp)
    .describe("Maps integer indices to vector representations (embeddings): out[i, :] = weight[data[i], :].")
    .add_argument("data", "NDArray-or-Symbol", "The input array to the embedding operator (indices).")
    .add_argument("weight", "NDArray-or-Symbol", "The embedding weight matrix (input_dim, output_dim).")
    .add_arguments(EmbeddingParam::Docs());

}  // namespace troupe
