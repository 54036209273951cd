// all_finite / multi_all_finite on the CPU (see all_finite.h).
#include "op/nn/amp/all_finite.h"

#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "op/internal/op_util.h"
#include "op/operator.h"

namespace troupe {

namespace {

// Whether every element is finite: the float types by value (half types through float), any other type
// trivially.
bool Finite(const TBlob& b) {
  bool ok = true;
  DTypeSwitch(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || internal::kIsHalf<T>) {
      const T* p = static_cast<const T*>(b.dptr);
      const std::int64_t n = b.Size();
      // An infinity or NaN makes x - x NaN: one comparison per element, no early exit (vectorises).
      bool all = true;
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(p[i]);
        all &= (v - v) == 0.0f;
      }
      ok = all;
    }
  });
  return ok;
}

class AllFiniteOp final : public Operator {
 public:
  explicit AllFiniteOp(bool init_output) : init_output_(init_output) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    float* flag = static_cast<float*>(out[0].dptr);
    if (init_output_) *flag = 1.0f;
    for (const TBlob& b : in) {
      if (!Finite(b)) {
        *flag = 0.0f;
        return;
      }
    }
  }

 private:
  bool init_output_;
};

// Both operators' property (kMulti: multi_all_finite): n inputs of any shape and float type, one float32
// output of shape (1,), no gradient.
template <bool kMulti>
class AllFiniteProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    if (multi_) {
      multi_param_.Init(kwargs, TypeString());
    } else {
      param_.Init(kwargs, TypeString());
    }
  }
  Kwargs GetParams() const override { return multi_ ? multi_param_.GetParams() : param_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    if (!multi_) return {"data"};
    std::vector<std::string> args;
    for (int i = 0; i < multi_param_.num_arrays; ++i) args.push_back("array_" + std::to_string(i));
    return args;
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    *out = {TShape{1}};
    for (const TShape& s : *in) {
      if (!s.known()) return false;
    }
    return true;
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    *out = {static_cast<int>(DType::kFloat32)};
    for (int t : *in) {
      if (t == kTypeUnknown) return false;
    }
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<AllFiniteProp>(*this); }
  std::string TypeString() const override { return multi_ ? "multi_all_finite" : "all_finite"; }
  bool HasBackward() const override { return false; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) internal::ThrowNoImplementation(TypeString(), ctx);
    return std::make_unique<AllFiniteOp>(multi_ ? multi_param_.init_output : param_.init_output);
  }

 private:
  static constexpr bool multi_ = kMulti;
  AllFiniteParam param_;
  MultiAllFiniteParam multi_param_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(all_finite, AllFiniteProp<false>)
    .describe("Check if all the float numbers in the array are finite (used for AMP): a float32 array of one "
              "element, 1 or 0.")
    .add_argument("data", "NDArray", "Array")
    .add_arguments(AllFiniteParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(multi_all_finite, AllFiniteProp<true>)
    .describe("Check if all the float numbers in all the arrays are finite (used for AMP): a float32 array of "
              "one element, 1 or 0.")
    .add_argument("data", "NDArray-or-Symbol[]", "Arrays")
    .add_arguments(MultiAllFiniteParam::Docs());

}  // namespace troupe
