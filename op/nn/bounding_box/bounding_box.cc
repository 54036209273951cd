// Bounding-box operators of MXNet 1.9's contrib (src/operator/contrib/bounding_box-inl.h) on the CPU:
// _contrib_box_nms (alias _contrib_box_non_maximum_suppression), _contrib_box_decode and _contrib_box_encode.
// float32 and float64. box_decode and box_encode also run on the GPU (bounding_box.cu); box_nms on a GPU
// context is an error naming the operator.
//
// box_nms sees its input (..., n, width) as batches of n boxes (every dimension before the last two is batch).
// Per batch it keeps the boxes whose score is > valid_thresh (and, with id_index >= 0, whose class is not
// background_id), orders them by score, descending (equal scores keep their input order: MXNet's CPU sort is
// stable), looks only at the first topk of them, and drops every box whose IoU with a higher-ranked kept
// box (of the same class unless force_suppress or id_index < 0) is > overlap_thresh. The kept rows come first
// in that order, the other rows are all -1; with in_format != out_format the coordinates of every row whose
// first coordinate is >= 0 are converted (MXNet skips a row with a negative first coordinate, -1 rows and
// real boxes alike). A hidden second output records, per output row, the flat index of the input row it came
// from (-1 for none), as MXNet's does; backward copies each output row's gradient to that input row (0
// elsewhere). topk = 0 copies the input unchanged (no conversion either), as MXNet does.
//
// box_decode turns (B, N, 4) offsets against (1, N, 4) anchors ('corner' or 'center') into corner boxes;
// box_encode the reverse for training targets. Both pass zero gradients to every input, as MXNet's do. Their
// element code is bounding_box.h, shared with their GPU operators (bounding_box.cu); box_nms is CPU only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/bounding_box/bounding_box.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

struct BoxNMSParam : Params<BoxNMSParam> {
  float overlap_thresh = 0.5f;
  float valid_thresh = 0.0f;
  int topk = -1;
  int coord_start = 2;
  int score_index = 1;
  int id_index = -1;
  int background_id = -1;
  bool force_suppress = false;
  std::string in_format = "corner";
  std::string out_format = "corner";
  static void Declare(ParamSchema<BoxNMSParam>& s) {
    s.Field("overlap_thresh", &BoxNMSParam::overlap_thresh)
        .Default(0.5f)
        .Describe("Overlapping (IoU) threshold to suppress object with smaller score.");
    s.Field("valid_thresh", &BoxNMSParam::valid_thresh)
        .Default(0.0f)
        .Describe("Filter input boxes to those whose scores greater than valid_thresh.");
    s.Field("topk", &BoxNMSParam::topk)
        .Default(-1)
        .Describe("Apply nms to topk boxes with descending scores, -1 to no restriction.");
    s.Field("coord_start", &BoxNMSParam::coord_start)
        .Default(2)
        .Describe("Start index of the consecutive 4 coordinates.");
    s.Field("score_index", &BoxNMSParam::score_index).Default(1).Describe("Index of the scores/confidence of boxes.");
    s.Field("id_index", &BoxNMSParam::id_index)
        .Default(-1)
        .Describe("Optional, index of the class categories, -1 to disable.");
    s.Field("background_id", &BoxNMSParam::background_id)
        .Default(-1)
        .Describe("Optional, id of the background class which will be ignored in nms.");
    s.Field("force_suppress", &BoxNMSParam::force_suppress)
        .Default(false)
        .Describe(
            "Optional, if set false and id_index is provided, nms will only apply to boxes belongs to the same "
            "category");
    s.Field("in_format", &BoxNMSParam::in_format)
        .Default("corner")
        .Choices({"center", "corner"})
        .Describe("The input box encoding type: 'corner' [xmin, ymin, xmax, ymax] or 'center' [x, y, width, height].");
    s.Field("out_format", &BoxNMSParam::out_format)
        .Default("corner")
        .Choices({"center", "corner"})
        .Describe("The output box encoding type: 'corner' [xmin, ymin, xmax, ymax] or 'center' [x, y, width, height].");
  }
};

constexpr const char* kNms = "_contrib_box_nms";

// The batches of boxes: (batch, n, width) over the input's dimensions.
struct BoxView {
  std::int64_t batch, n, width;
};
BoxView ViewBoxes(const TShape& s) {
  const int nd = s.ndim();
  return {nd <= 2 ? 1 : s.ProdDims(0, nd - 2), s[nd - 2], s[nd - 1]};
}

// The length of the overlap of [a0, a2] and [b0, b2] (one axis of two boxes; a[2] is the far edge in corner
// format and the extent in center format), or 0.
template <typename T>
T Intersect(const T* a, const T* b, bool corner) {
  T w;
  if (corner) {
    const T left = a[0] > b[0] ? a[0] : b[0];
    const T right = a[2] < b[2] ? a[2] : b[2];
    w = right - left;
  } else {
    const T aw = a[2] / 2, bw = b[2] / 2;
    const T al = a[0] - aw, ar = a[0] + aw, bl = b[0] - bw, br = b[0] + bw;
    const T left = bl > al ? bl : al;
    const T right = br < ar ? br : ar;
    w = right - left;
  }
  return w > 0 ? w : T(0);
}

template <typename T>
T BoxArea(const T* box, bool corner) {
  const T width = corner ? box[2] - box[0] : box[2];
  const T height = corner ? box[3] - box[1] : box[3];
  return width < 0 || height < 0 ? T(0) : width * height;
}

class BoxNMSOp final : public Operator {
 public:
  explicit BoxNMSOp(const BoxNMSParam& p) : p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    FloatSwitch(in[0].dtype, kNms, [&](auto tag) {
      using T = decltype(tag);
      const BoxView v = ViewBoxes(in[0].shape);
      const std::int64_t total = v.batch * v.n, w = v.width;
      // The input is read whole before anything is written, so an output sharing its memory is fine.
      const std::vector<T> x(in[0].dptr_as<T>(), in[0].dptr_as<T>() + total * w);
      std::vector<T> y(static_cast<std::size_t>(total * w), T(-1));
      std::vector<std::int64_t> record(static_cast<std::size_t>(total), -1);
      const std::int64_t topk = p_.topk < 0 ? v.n : std::min<std::int64_t>(v.n, p_.topk);
      if (topk < 1) {
        y = x;
        std::iota(record.begin(), record.end(), 0);
      } else {
        Suppress(x.data(), v, topk, y.data(), record.data());
      }
      internal::AssignEach(out[0].dptr_as<T>(), total * w, req[0], [&](std::int64_t i) { return y[i]; });
      // The record is MXNet's hidden output: the backward reads it.
      internal::AssignEach(out[1].dptr_as<T>(), total, req[1],
                           [&](std::int64_t i) { return static_cast<T>(record[i]); });
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in_grad[0].dtype, kNms, [&](auto tag) {
      using T = decltype(tag);
      const BoxView v = ViewBoxes(in_grad[0].shape);
      const std::int64_t total = v.batch * v.n, w = v.width;
      const T* og = out_grad[0].dptr_as<T>();
      const T* record = out_data[1].dptr_as<T>();
      std::vector<T> g(static_cast<std::size_t>(total * w), T(0));
      for (std::int64_t i = 0; i < total; ++i) {
        const auto from = static_cast<std::int64_t>(record[i]);
        if (from < 0) continue;
        std::copy(og + i * w, og + (i + 1) * w, g.begin() + from * w);
      }
      internal::AssignEach(in_grad[0].dptr_as<T>(), total * w, req[0], [&](std::int64_t i) { return g[i]; });
    });
  }

 private:
  template <typename T>
  void Suppress(const T* x, const BoxView& v, std::int64_t topk, T* y, std::int64_t* record) const {
    const std::int64_t w = v.width;
    const bool corner_in = p_.in_format == "corner";
    const bool class_exist = p_.id_index >= 0;
    const T valid_thresh = static_cast<T>(p_.valid_thresh);
    const T background = static_cast<T>(p_.background_id);
    std::vector<std::int64_t> order;
    for (std::int64_t b = 0; b < v.batch; ++b) {
      // The valid boxes of the batch by score, descending; equal scores in input order.
      order.clear();
      for (std::int64_t i = b * v.n; i < (b + 1) * v.n; ++i) {
        const T* row = x + i * w;
        if (!(row[p_.score_index] > valid_thresh)) continue;
        if (class_exist && !(row[p_.id_index] != background)) continue;
        order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t c) {
        return x[a * w + p_.score_index] > x[c * w + p_.score_index];
      });
      const std::int64_t k = std::min<std::int64_t>(topk, static_cast<std::int64_t>(order.size()));
      std::vector<T> area(static_cast<std::size_t>(k));
      for (std::int64_t r = 0; r < k; ++r) area[r] = BoxArea(x + order[r] * w + p_.coord_start, corner_in);
      std::vector<char> suppressed(static_cast<std::size_t>(k), 0);
      for (std::int64_t r = 0; r < k; ++r) {
        if (suppressed[r]) continue;
        const T* ref = x + order[r] * w;
        for (std::int64_t q = r + 1; q < k; ++q) {
          if (suppressed[q]) continue;
          const T* pos = x + order[q] * w;
          if (!p_.force_suppress && class_exist &&
              static_cast<int>(ref[p_.id_index]) != static_cast<int>(pos[p_.id_index])) {
            continue;
          }
          const T* rb = ref + p_.coord_start;
          const T* pb = pos + p_.coord_start;
          T inter = Intersect(rb, pb, corner_in);
          inter *= Intersect(rb + 1, pb + 1, corner_in);
          const T iou = inter / (area[r] + area[q] - inter);
          if (iou > p_.overlap_thresh) suppressed[q] = 1;
        }
      }
      std::int64_t count = 0;
      for (std::int64_t r = 0; r < k; ++r) {
        if (suppressed[r]) continue;
        const std::int64_t o = b * v.n + count++;
        std::copy(x + order[r] * w, x + (order[r] + 1) * w, y + o * w);
        record[o] = order[r];
      }
    }
    if (p_.in_format == p_.out_format) return;
    // MXNet converts every output row, skipping one whose first coordinate is negative.
    for (std::int64_t i = 0; i < v.batch * v.n; ++i) {
      T* c = y + i * w + p_.coord_start;
      if (c[0] < 0) continue;
      if (p_.out_format == "center") {
        const T left = c[0], top = c[1], right = c[2], bot = c[3];
        c[0] = (left + right) / 2;
        c[1] = (top + bot) / 2;
        c[2] = right - left;
        c[3] = bot - top;
      } else {
        const T cx = c[0], cy = c[1], half_w = c[2] / 2, half_h = c[3] / 2;
        c[0] = cx - half_w;
        c[1] = cy - half_h;
        c[2] = cx + half_w;
        c[3] = cy + half_h;
      }
    }
  }

  BoxNMSParam p_;
};

class BoxNMSProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kNms); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListOutputs() const override { return {"output", "record"}; }
  int NumVisibleOutputs() const override { return 1; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(2);
    const TShape d = (*in)[0];
    if (!d.known()) return false;
    const std::string op = kNms;
    if (d.ndim() < 2) {
      throw Error(op +
                  ": the input must have at least 2 dimensions (the last two are the boxes and each box's "
                  "values), got " +
                  d.ToString());
    }
    const std::int64_t width = d[d.ndim() - 1];
    const std::int64_t expected = p_.id_index >= 0 ? 6 : 5;
    if (width < expected) {
      throw Error(op + ": the last dimension must have at least " + std::to_string(expected) +
                  " elements (score, 4 coordinates" + (p_.id_index >= 0 ? ", class id" : "") + "), got " +
                  std::to_string(width));
    }
    const int cs = p_.coord_start, ce = p_.coord_start + 3;
    if (p_.score_index < 0 || p_.score_index >= width) {
      throw Error(op + ": score_index " + std::to_string(p_.score_index) + " is out of range [0, " +
                  std::to_string(width) + ")");
    }
    if (p_.score_index >= cs && p_.score_index <= ce) {
      throw Error(op + ": score_index " + std::to_string(p_.score_index) + " falls in the coordinates [" +
                  std::to_string(cs) + ", " + std::to_string(ce) + "]");
    }
    if (cs < 0 || ce >= width) {
      throw Error(op + ": the coordinates [" + std::to_string(cs) + ", " + std::to_string(ce) +
                  "] are out of range [0, " + std::to_string(width) + ")");
    }
    if (p_.id_index >= 0) {
      if (p_.id_index >= width) {
        throw Error(op + ": id_index " + std::to_string(p_.id_index) + " is out of range [0, " + std::to_string(width) +
                    ")");
      }
      if (p_.id_index >= cs && p_.id_index <= ce) {
        throw Error(op + ": id_index " + std::to_string(p_.id_index) + " falls in the coordinates [" +
                    std::to_string(cs) + ", " + std::to_string(ce) + "]");
      }
      if (p_.id_index == p_.score_index) {
        throw Error(op + ": id_index and score_index are both " + std::to_string(p_.id_index));
      }
    }
    TShape rec = d;
    rec[d.ndim() - 1] = 1;
    AssignShape(out, 0, d, op, "output");
    AssignShape(out, 1, rec, op, "record");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<BoxNMSProp>(*this); }
  std::string TypeString() const override { return kNms; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0], out_data[1]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) internal::ThrowNoImplementation(kNms, ctx);
    return std::make_unique<BoxNMSOp>(p_);
  }

 private:
  BoxNMSParam p_;
};

// ---- box_decode / box_encode

struct NoParam : Params<NoParam> {
  static void Declare(ParamSchema<NoParam>&) {}
};

constexpr const char* kDecode = "_contrib_box_decode";
constexpr const char* kEncode = "_contrib_box_encode";

// Zero gradients to every input under kWriteTo/kWriteInplace (MXNet's MakeZeroGradNodes).
void ZeroGrads(const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad) {
  for (std::size_t i = 0; i < in_grad.size(); ++i) {
    if (req[i] == kWriteTo || req[i] == kWriteInplace) std::memset(in_grad[i].dptr, 0, in_grad[i].Bytes());
  }
}

class BoxDecodeOp final : public Operator {
 public:
  explicit BoxDecodeOp(const BoxDecodeParam& p) : p_(p) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in[0].dtype, kDecode, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t b = in[0].shape[0], n = in[0].shape[1];
      const T* x = in[0].dptr_as<T>();
      const T* anchors = in[1].dptr_as<T>();
      const bounding_box::DecodeConfig<T> cfg = bounding_box::DecodeConfigOf<T>(p_);
      std::vector<T> y(static_cast<std::size_t>(b * n * 4));
      for (std::int64_t i = 0; i < b * n; ++i) {
        bounding_box::DecodeBox(x + i * 4, anchors + (i % n) * 4, cfg, y.data() + i * 4);
      }
      internal::AssignEach(out[0].dptr_as<T>(), b * n * 4, req[0], [&](std::int64_t i) { return y[i]; });
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    ZeroGrads(req, in_grad);
  }

 private:
  BoxDecodeParam p_;
};

class BoxDecodeProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kDecode); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "anchors"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const TShape d = (*in)[0], a = (*in)[1];
    if (!d.known() || !a.known()) return false;
    const std::string op = kDecode;
    if (d.ndim() != 3 || d[2] != 4) throw Error(op + ": 'data' must have shape (B, N, 4), got " + d.ToString());
    if (a.ndim() < 3 || a[a.ndim() - 1] != 4 || a.Size() != d[1] * 4) {
      throw Error(op + ": 'anchors' must have shape (1, N, 4) with N = " + std::to_string(d[1]) +
                  " (the boxes of 'data'), got " + a.ToString());
    }
    AssignShape(out, 0, d, op, "output");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<BoxDecodeProp>(*this); }
  std::string TypeString() const override { return kDecode; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>&, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // bounding_box.cu
    return std::make_unique<BoxDecodeOp>(p_);
  }

 private:
  BoxDecodeParam p_;
};

class BoxEncodeOp final : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    FloatSwitch(in[2].dtype, kEncode, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t b = in[2].shape[0], n = in[2].shape[1], m = in[3].shape[1];
      const T* samples = in[0].dptr_as<T>();
      const T* matches = in[1].dptr_as<T>();
      const T* anchors = in[2].dptr_as<T>();
      const T* refs = in[3].dptr_as<T>();
      const T* means = in[4].dptr_as<T>();
      const T* stds = in[5].dptr_as<T>();
      std::vector<T> targets(static_cast<std::size_t>(b * n * 4)), masks(targets.size());
      for (std::int64_t i = 0; i < b * n; ++i) {
        const std::int64_t j = i / n;
        const auto match = static_cast<std::int64_t>(matches[i]);
        if (match < 0 || match >= m) {
          throw Error(std::string(kEncode) + ": matches[" + std::to_string(i) + "] is " + std::to_string(match) +
                      " but refs has " + std::to_string(m) + " boxes per batch");
        }
        bounding_box::EncodeBox(samples[i], refs + (j * m + match) * 4, anchors + i * 4, means, stds,
                                targets.data() + i * 4, masks.data() + i * 4);
      }
      const std::int64_t size = b * n * 4;
      internal::AssignEach(out[0].dptr_as<T>(), size, req[0], [&](std::int64_t i) { return targets[i]; });
      internal::AssignEach(out[1].dptr_as<T>(), size, req[1], [&](std::int64_t i) { return masks[i]; });
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    ZeroGrads(req, in_grad);
  }
};

class BoxEncodeProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kEncode); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    return {"samples", "matches", "anchors", "refs", "means", "stds"};
  }
  std::vector<std::string> ListOutputs() const override { return {"output0", "output1"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(2);
    const std::string op = kEncode;
    AssignShape(in, 4, TShape{4}, op, "means");
    AssignShape(in, 5, TShape{4}, op, "stds");
    const TShape s = (*in)[0], m = (*in)[1], a = (*in)[2], r = (*in)[3];
    if (!s.known() || !m.known() || !a.known() || !r.known()) return false;
    if (a.ndim() != 3 || a[2] != 4) throw Error(op + ": 'anchors' must have shape (B, N, 4), got " + a.ToString());
    if (r.ndim() != 3 || r[2] != 4 || r[0] != a[0]) {
      throw Error(op + ": 'refs' must have shape (B, M, 4) with B = " + std::to_string(a[0]) + ", got " + r.ToString());
    }
    AssignShape(in, 0, TShape{a[0], a[1]}, op, "samples");
    AssignShape(in, 1, TShape{a[0], a[1]}, op, "matches");
    AssignShape(out, 0, a, op, "output0");
    AssignShape(out, 1, a, op, "output1");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<BoxEncodeProp>(*this); }
  std::string TypeString() const override { return kEncode; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>&, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // bounding_box.cu
    return std::make_unique<BoxEncodeOp>();
  }

 private:
  NoParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(_contrib_box_nms, BoxNMSProp)
    .describe(
        "Non-maximum suppression: the boxes by descending score, overlapping lower-scored ones removed, the "
        "rest of the rows -1.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(BoxNMSParam::Docs())
    .add_alias("_contrib_box_non_maximum_suppression");

TROUPE_REGISTER_OP_PROPERTY(_contrib_box_decode, BoxDecodeProp)
    .describe("Decodes bounding-box offsets against anchors into corner boxes [xmin, ymin, xmax, ymax].")
    .add_argument("data", "NDArray-or-Symbol", "(B, N, 4) predicted bbox offset")
    .add_argument("anchors", "NDArray-or-Symbol", "(1, N, 4) encoded in corner or center")
    .add_arguments(BoxDecodeParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(_contrib_box_encode, BoxEncodeProp)
    .describe("Encodes training targets of bounding boxes as normalized center offsets (boxes in corner format).")
    .add_argument("samples", "NDArray-or-Symbol", "(B, N) value +1 (positive), -1 (negative), 0 (ignore)")
    .add_argument("matches", "NDArray-or-Symbol", "(B, N) value range [0, M)")
    .add_argument("anchors", "NDArray-or-Symbol", "(B, N, 4) encoded in corner")
    .add_argument("refs", "NDArray-or-Symbol", "(B, M, 4) encoded in corner")
    .add_argument("means", "NDArray-or-Symbol", "(4,) Mean value to be subtracted from encoded values")
    .add_argument("stds", "NDArray-or-Symbol", "(4,) Std value to be divided from encoded values");

}  // namespace troupe
