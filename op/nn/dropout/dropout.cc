// Dropout: property and CPU implementation (the CUDA version is dropout.cu).
//
// In training (or with mode='always') each mask element is 1 / (1 - p) with probability 1 - p and 0
// otherwise; out = data * mask, with the mask shared along `axes`. The mask is the hidden output 'mask'
// and Backward is out_grad * mask. Otherwise (or with p = 0) the output is the input and the mask is all
// ones, so Backward is right whichever forward ran last. Random numbers come from the device's kRandom
// generator: element j of the mask uses Philox word j of the blocks Reserve()d for the call (the same
// numbers the NDArray sampling kernels would give), so a seeded run is reproducible.
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/dropout/dropout.h"
#include "tensor/resource.h"

namespace troupe {

BroadcastIndex MakeBroadcastIndex(const TShape& data, const TShape& mask) {
  BroadcastIndex b;
  b.ndim = data.ndim();
  b.identity = data == mask;
  std::int64_t ds = 1, ms = 1;
  for (int d = data.ndim() - 1; d >= 0; --d) {
    b.data_stride[d] = ds;
    b.mask_stride[d] = (mask[d] == 1 && data[d] != 1) ? 0 : ms;
    ds *= data[d];
    ms *= mask[d];
  }
  return b;
}

namespace {

using internal::FloatSwitch;

class DropoutCpuOp : public Operator {
 public:
  explicit DropoutCpuOp(const DropoutParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    const TBlob& x = in_data[0];
    const TShape mshape = MaskShape(x.shape);
    const std::int64_t mn = mshape.Size(), n = x.Size();
    const bool drop = p_.p > 0 && (ctx.is_train || p_.mode == "always");
    FloatSwitch(x.dtype, "Dropout", [&](auto tag) {
      using T = decltype(tag);
      // The mask goes into the hidden output when it is there, else into a local buffer.
      std::vector<T> local;
      T* mask = (req.size() > 1 && req[1] != kNullOp && out_data[1].dptr != nullptr) ? out_data[1].dptr_as<T>() : nullptr;
      if (mask == nullptr) {
        local.resize(static_cast<std::size_t>(mn));
        mask = local.data();
      }
      if (drop) {
        RandomGenerator* gen = ctx.requested.at(0).get_random();
        const std::uint64_t key = gen->key(), base = gen->Reserve(act_norm::RandomBlocks(mn));
        const float keep = 1.0f - p_.p;
        const T scale = keep > 0 ? T(1) / T(keep) : T(0);
        for (std::int64_t j = 0; j < mn; ++j) {
          mask[j] = act_norm::UniformAt(key, base, static_cast<std::uint64_t>(j)) < keep ? scale : T(0);
        }
      } else {
        for (std::int64_t j = 0; j < mn; ++j) mask[j] = T(1);
      }
      if (req[0] == kNullOp) return;
      const T* px = x.dptr_as<T>();
      T* y = out_data[0].dptr_as<T>();
      const BroadcastIndex b = MakeBroadcastIndex(x.shape, mshape);
      for (std::int64_t i = 0; i < n; ++i) Assign(y + i, req[0], px[i] * mask[b(i)]);
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& og = out_grad[0];
    const BroadcastIndex b = MakeBroadcastIndex(og.shape, out_data[1].shape);
    FloatSwitch(og.dtype, "Dropout", [&](auto tag) {
      using T = decltype(tag);
      const T* pg = og.dptr_as<T>();
      const T* mask = out_data[1].dptr_as<T>();
      T* g = in_grad[0].dptr_as<T>();
      const std::int64_t n = og.Size();
      for (std::int64_t i = 0; i < n; ++i) Assign(g + i, req[0], pg[i] * mask[b(i)]);
    });
  }

 private:
  TShape MaskShape(const TShape& data) const {
    TShape m = data;
    for (auto a : p_.axes) m[static_cast<int>(a)] = 1;
    return m;
  }

  DropoutParam p_;
};

}  // namespace

bool DropoutProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                             std::vector<TShape>*) const {
  if (in_shape->empty() || !(*in_shape)[0].known()) return false;
  const TShape dshape = (*in_shape)[0];
  TShape mshape = dshape;
  for (auto a : param_.axes) {
    if (a >= dshape.ndim()) {
      throw Error("Dropout: parameter 'axes' names axis " + std::to_string(a) + " but 'data' has shape " +
                  dshape.ToString() + "; use axes below " + std::to_string(dshape.ndim()));
    }
    mshape[static_cast<int>(a)] = 1;
  }
  *out_shape = {dshape, mshape};
  return true;
}

std::vector<int> DropoutProp::DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                                        const std::vector<int>& out_data) const {
  return {out_grad[0], out_data[1]};
}

std::vector<std::pair<int, void*>> DropoutProp::ForwardInplaceOption(const std::vector<int>& in_data,
                                                                     const std::vector<void*>& out_data) const {
  return {{in_data[0], out_data[0]}};
}

std::vector<std::pair<int, void*>> DropoutProp::BackwardInplaceOption(const std::vector<int>& out_grad,
                                                                      const std::vector<int>&,
                                                                      const std::vector<int>&,
                                                                      const std::vector<void*>& in_grad) const {
  return {{out_grad[0], in_grad[0]}};
}

std::unique_ptr<Operator> DropoutProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<DropoutCpuOp>(param_);
}

TROUPE_REGISTER_OP_PROPERTY(Dropout, DropoutProp)
    .describe("Applies dropout: zeroes a fraction p of the input in training and scales the rest by 1/(1-p).")
    .add_argument("data", "NDArray-or-Symbol", "Input array to which dropout will be applied.")
    .add_arguments(DropoutParam::Docs());

}  // namespace troupe
