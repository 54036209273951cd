// The float32 fallback for half-precision arrays (see float_staging.h).
#include "op/internal/float_staging.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "tensor/detail/vector_math.h"

namespace troupe::internal {

bool AnyHalf(std::initializer_list<const std::vector<TBlob>*> lists) {
  for (const auto* list : lists) {
    for (const TBlob& b : *list) {
      if (b.dptr != nullptr && IsHalfType(b.dtype)) return true;
    }
  }
  return false;
}

void FloatToHalf(const float* from, void* to, DType to_type, std::size_t n) {
  if (to_type == DType::kBfloat16) {
    VecFloatToBf16(from, static_cast<std::uint16_t*>(to), static_cast<std::int64_t>(n));
  } else if (to_type == DType::kFloat16) {
    auto* o = static_cast<half_t*>(to);
    for (std::size_t i = 0; i < n; ++i) o[i] = half_t(from[i]);
  } else {
    throw Error(std::string("FloatToHalf: ") + DTypeName(to_type) + " is not a half type");
  }
}

void HalfToFloat(const void* from, DType from_type, float* to, std::size_t n) {
  if (from_type == DType::kBfloat16) {
    VecBf16ToFloat(static_cast<const std::uint16_t*>(from), to, static_cast<std::int64_t>(n));
  } else if (from_type == DType::kFloat16) {
    const auto* x = static_cast<const half_t*>(from);
    for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<float>(x[i]);
  } else {
    throw Error(std::string("HalfToFloat: ") + DTypeName(from_type) + " is not a half type");
  }
}

TBlob FloatStaging::Stage(const TBlob& b, bool fill) {
  if (b.dptr == nullptr || !IsHalfType(b.dtype)) return b;
  if (used_ == buffers_.size()) buffers_.emplace_back();
  std::vector<float>& buf = buffers_[used_++];
  const auto n = static_cast<std::size_t>(b.shape.Size());
  buf.resize(std::max<std::size_t>(n, 1));
  if (fill) HalfToFloat(b.dptr, b.dtype, buf.data(), n);
  return TBlob(buf.data(), b.shape, DType::kFloat32, b.ctx);
}

std::vector<TBlob> FloatStaging::StageAll(const std::vector<TBlob>& blobs, bool fill) {
  std::vector<TBlob> out;
  out.reserve(blobs.size());
  for (const TBlob& b : blobs) out.push_back(Stage(b, fill));
  return out;
}

std::vector<TBlob> FloatStaging::StageOutputs(const std::vector<TBlob>& blobs, const std::vector<OpReqType>& req) {
  std::vector<TBlob> out;
  out.reserve(blobs.size());
  for (std::size_t i = 0; i < blobs.size(); ++i) out.push_back(Stage(blobs[i], i < req.size() && req[i] == kAddTo));
  return out;
}

namespace {

// The copies never share memory, so an in-place request becomes a plain write.
std::vector<OpReqType> Unaliased(const std::vector<OpReqType>& req) {
  std::vector<OpReqType> r = req;
  for (OpReqType& q : r) {
    if (q == kWriteInplace) q = kWriteTo;
  }
  return r;
}

// The staged outputs back into the user's half arrays (the staged buffer already holds the sum under kAddTo).
void Unstage(const std::vector<TBlob>& staged, const std::vector<TBlob>& user, const std::vector<OpReqType>* req) {
  for (std::size_t i = 0; i < user.size(); ++i) {
    if (staged[i].dptr == user[i].dptr) continue;
    if (req != nullptr && i < req->size() && (*req)[i] == kNullOp) continue;
    FloatToHalf(static_cast<const float*>(staged[i].dptr), user[i].dptr, user[i].dtype,
                static_cast<std::size_t>(user[i].shape.Size()));
  }
}

}  // namespace

void FloatStaging::Forward(Operator& op, const OpContext& ctx, const std::vector<TBlob>& in_data,
                           const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
                           const std::vector<TBlob>& aux_states) {
  used_ = 0;
  const std::vector<TBlob> in = StageAll(in_data, true), aux = StageAll(aux_states, true);
  const std::vector<TBlob> out = StageOutputs(out_data, req);
  op.Forward(ctx, in, Unaliased(req), out, aux);
  Unstage(out, out_data, &req);
  Unstage(aux, aux_states, nullptr);
}

void FloatStaging::Backward(Operator& op, const OpContext& ctx, const std::vector<TBlob>& out_grad,
                            const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                            const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                            const std::vector<TBlob>& aux_states) {
  used_ = 0;
  const std::vector<TBlob> og = StageAll(out_grad, true), in = StageAll(in_data, true);
  const std::vector<TBlob> out = StageAll(out_data, true), aux = StageAll(aux_states, true);
  const std::vector<TBlob> ig = StageOutputs(in_grad, req);
  op.Backward(ctx, og, in, out, Unaliased(req), ig, aux);
  Unstage(ig, in_grad, &req);
}

}  // namespace troupe::internal
