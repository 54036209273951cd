// SequenceMask (alias _npx_sequence_mask), SequenceLast and SequenceReverse, as MXNet 1.9's
// (src/operator/sequence_*), on the CPU; SequenceMask also on the GPU (sequence.cu, with sequence.h's view and
// masking rule), the other two are CPU-only.
//
// The data is (max_sequence_length, batch, ...) with axis=0 or (batch, max_sequence_length, ...) with axis=1
// (SequenceReverse takes axis 0 only). With use_sequence_length=True a second argument 'sequence_length' of
// shape (batch,) gives each sequence's length, in any number type (read as an integer, truncating as MXNet's
// cast does); without it every sequence has the full length and the argument does not exist. The length gets
// no gradient (zeros under kWriteTo, as the labels of the loss heads).
//   SequenceMask:    steps at or after the length become `value`; the gradient passes elsewhere (0 there).
//   SequenceLast:    the step length - 1 of every sequence, shape (batch, ...); the gradient goes back to it.
//   SequenceReverse: the first `length` steps reversed, the rest unchanged; the gradient is reversed alike.
// SequenceLast and SequenceReverse need lengths in [1, max] and [0, max] (MXNet reads out of bounds
// otherwise); SequenceMask masks nothing for a length >= max and everything for a length <= 0.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "op/nn/sequence/sequence.h"

#include "base/error.h"
#include "op/internal/op_util.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

using sequence::SequenceParam;
using sequence::SeqView;
using sequence::ViewOf;

enum class SeqKind { kMask, kLast, kReverse };

// SequenceLast and SequenceReverse have no 'value'.
struct SequenceNoValueParam : Params<SequenceNoValueParam> {
  bool use_sequence_length = false;
  int axis = 0;
  static void Declare(ParamSchema<SequenceNoValueParam>& s) {
    s.Field("use_sequence_length", &SequenceNoValueParam::use_sequence_length)
        .Default(false)
        .Describe("Take an extra input 'sequence_length' with the length of each sequence.");
    s.Field("axis", &SequenceNoValueParam::axis).Default(0).Describe("The sequence axis.");
  }
};

const char* NameOf(SeqKind k) {
  switch (k) {
    case SeqKind::kMask:
      return "SequenceMask";
    case SeqKind::kLast:
      return "SequenceLast";
    default:
      return "SequenceReverse";
  }
}

// Every sequence's length: the input's values truncated to integers, or the full length without the input.
std::vector<std::int64_t> Lengths(const std::vector<TBlob>& in, bool use, const SeqView& v, SeqKind kind) {
  std::vector<std::int64_t> len(static_cast<std::size_t>(v.batch), v.steps);
  if (!use) return len;
  const std::string op = NameOf(kind);
  internal::NumberSwitch(in[1].dtype, op, [&](auto tag) {
    using I = decltype(tag);
    const I* p = static_cast<const I*>(in[1].dptr);
    for (std::int64_t b = 0; b < v.batch; ++b) len[b] = static_cast<std::int64_t>(p[b]);
  });
  if (kind == SeqKind::kMask) return len;
  const std::int64_t lo = kind == SeqKind::kLast ? 1 : 0;
  for (std::int64_t b = 0; b < v.batch; ++b) {
    if (len[b] < lo || len[b] > v.steps) {
      throw Error(op + ": sequence_length[" + std::to_string(b) + "] is " + std::to_string(len[b]) +
                  " but must be in [" + std::to_string(lo) + ", " + std::to_string(v.steps) +
                  "] (the size of the sequence axis)");
    }
  }
  return len;
}

class SequenceOp final : public Operator {
 public:
  SequenceOp(SeqKind kind, bool use, int axis, float value) : kind_(kind), use_(use), axis_(axis), value_(value) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const SeqView v = ViewOf(in[0].shape, axis_);
    const std::vector<std::int64_t> len = Lengths(in, use_, v, kind_);
    FloatSwitch(in[0].dtype, NameOf(kind_), [&](auto tag) {
      using T = decltype(tag);
      const T* x = in[0].dptr_as<T>();
      T* y = out[0].dptr_as<T>();
      const T value = static_cast<T>(value_);
      for (std::int64_t b = 0; b < v.batch; ++b) {
        if (kind_ == SeqKind::kLast) {
          const T* src = x + v.At(len[b] - 1, b);
          internal::AssignEach(y + b * v.rest, v.rest, req[0], [&](std::int64_t r) { return src[r]; });
          continue;
        }
        for (std::int64_t t = 0; t < v.steps; ++t) {
          T* dst = y + v.At(t, b);
          if (kind_ == SeqKind::kMask) {
            const T* src = x + v.At(t, b);
            // y may be x's memory: each element is read before it is written.
            internal::AssignEach(dst, v.rest, req[0],
                                 [&](std::int64_t r) { return sequence::Masked(src[r], value, t, len[b]); });
          } else {
            const T* src = x + v.At(t < len[b] ? len[b] - 1 - t : t, b);
            internal::AssignEach(dst, v.rest, req[0], [&](std::int64_t r) { return src[r]; });
          }
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (use_ && req[1] != kNullOp && req[1] != kAddTo) {
      std::fill_n(static_cast<char*>(in_grad[1].dptr), in_grad[1].Bytes(), 0);
    }
    if (req[0] == kNullOp) return;
    const SeqView v = ViewOf(in_grad[0].shape, axis_);
    const std::vector<std::int64_t> len = Lengths(in, use_, v, kind_);
    FloatSwitch(in_grad[0].dtype, NameOf(kind_), [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      if (kind_ == SeqKind::kLast) {
        if (req[0] != kAddTo) std::fill(gx, gx + in_grad[0].Size(), T(0));
        for (std::int64_t b = 0; b < v.batch; ++b) {
          T* dst = gx + v.At(len[b] - 1, b);
          for (std::int64_t r = 0; r < v.rest; ++r) dst[r] += og[b * v.rest + r];
        }
        return;
      }
      for (std::int64_t b = 0; b < v.batch; ++b) {
        for (std::int64_t t = 0; t < v.steps; ++t) {
          T* dst = gx + v.At(t, b);
          if (kind_ == SeqKind::kMask) {
            const T* src = og + v.At(t, b);  // gx may be og's memory
            internal::AssignEach(dst, v.rest, req[0],
                                 [&](std::int64_t r) { return sequence::Masked(src[r], T(0), t, len[b]); });
          } else {
            const T* src = og + v.At(t < len[b] ? len[b] - 1 - t : t, b);
            internal::AssignEach(dst, v.rest, req[0], [&](std::int64_t r) { return src[r]; });
          }
        }
      }
    });
  }

 private:
  SeqKind kind_;
  bool use_;
  int axis_;
  float value_;
};

template <SeqKind kKind>
class SequenceProp final : public OperatorProperty {
  using P = std::conditional_t<kKind == SeqKind::kMask, SequenceParam, SequenceNoValueParam>;

 public:
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, NameOf(kKind));
    const std::string op = NameOf(kKind);
    if (kKind == SeqKind::kReverse && p_.axis != 0) {
      throw Error(op + ": parameter 'axis' is " + std::to_string(p_.axis) + " but only 0 is supported (as in MXNet)");
    }
    if (p_.axis != 0 && p_.axis != 1) {
      throw Error(op + ": parameter 'axis' is " + std::to_string(p_.axis) +
                  " but only 0 and 1 are supported (as in MXNet)");
    }
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    if (p_.use_sequence_length) return {"data", "sequence_length"};
    return {"data"};
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    in->resize(p_.use_sequence_length ? 2 : 1);
    aux->clear();
    const TShape d = (*in)[0];
    if (!d.known()) return false;
    const std::string op = NameOf(kKind);
    if (d.ndim() < 2) throw Error(op + ": 'data' must have at least 2 dimensions, got " + d.ToString());
    const std::int64_t batch = p_.axis == 0 ? d[1] : d[0];
    if (p_.use_sequence_length) AssignShape(in, 1, TShape{batch}, op, "sequence_length");
    if (kKind == SeqKind::kLast) {
      std::vector<std::int64_t> o{batch};
      for (int i = 2; i < d.ndim(); ++i) o.push_back(d[i]);
      *out = {TShape(o)};
    } else {
      *out = {d};
    }
    return true;
  }
  // The data's type for the output; the length may have any number type (the data's when unknown).
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    in->resize(p_.use_sequence_length ? 2 : 1, kTypeUnknown);
    aux->clear();
    const int t = (*in)[0];
    if (t == kTypeUnknown) return false;
    if (p_.use_sequence_length && (*in)[1] == kTypeUnknown) (*in)[1] = t;
    *out = {t};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SequenceProp>(*this); }
  std::string TypeString() const override { return NameOf(kKind); }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    if (p_.use_sequence_length) return {out_grad[0], in_data[1]};
    return {out_grad[0]};
  }
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    if (kKind == SeqKind::kMask) return {{in_data[0], out_data[0]}};
    return {};
  }
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad, const std::vector<int>&,
                                                           const std::vector<int>&,
                                                           const std::vector<void*>& in_grad) const override {
    if (kKind == SeqKind::kMask) return {{out_grad[0], in_grad[0]}};
    return {};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // sequence.cu: SequenceMask only
    float value = 0.0f;
    if constexpr (kKind == SeqKind::kMask) value = p_.value;
    return std::make_unique<SequenceOp>(kKind, p_.use_sequence_length, p_.axis, value);
  }

 private:
  P p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(SequenceMask, SequenceProp<SeqKind::kMask>)
    .describe("Sets the steps of each sequence at or after its length to a constant value.")
    .add_argument("data", "NDArray-or-Symbol",
                  "n-dimensional input array of the form [max_sequence_length, batch, ...]")
    .add_argument("sequence_length", "NDArray-or-Symbol", "vector of sequence lengths of the form [batch]")
    .add_arguments(SequenceParam::Docs())
    .add_alias("_npx_sequence_mask");

TROUPE_REGISTER_OP_PROPERTY(SequenceLast, SequenceProp<SeqKind::kLast>)
    .describe("The last step of each sequence (the step length - 1).")
    .add_argument("data", "NDArray-or-Symbol",
                  "n-dimensional input array of the form [max_sequence_length, batch, ...]")
    .add_argument("sequence_length", "NDArray-or-Symbol", "vector of sequence lengths of the form [batch]")
    .add_arguments(SequenceNoValueParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(SequenceReverse, SequenceProp<SeqKind::kReverse>)
    .describe("Reverses the first `length` steps of each sequence; the steps after it stay in place.")
    .add_argument("data", "NDArray-or-Symbol",
                  "n-dimensional input array of the form [max_sequence_length, batch, ...]")
    .add_argument("sequence_length", "NDArray-or-Symbol", "vector of sequence lengths of the form [batch]")
    .add_arguments(SequenceNoValueParam::Docs());

}  // namespace troupe
