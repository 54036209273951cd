// RNN and _rnn_param_concat on the CPU. A GPU context is an error naming the operator.
//
// Semantics, as MXNet 1.9's (src/operator/rnn-inl.h, rnn_impl.h, and cuDNN's for sequence lengths):
//   data (T, N, I) in TNC layout; state and state_cell (L*D, N, H), row l*D + d for layer l, direction d;
//   parameters: one vector in the packed layout of RnnDims (rnn.h).
//   Each layer and direction first projects every step's input at once, Ax = X Wx^T (one product of
//   (T*N, I_l) by (I_l, G*H)), then runs the steps in order (the reverse direction from T-1 down to 0), with
//   Ah = h Wh^T per step and a = Ax + bx + Ah + bh per gate:
//     rnn_relu/rnn_tanh: h' = act(a)
//     lstm: i = sigm(a_i), f = sigm(a_f), g = tanh(a_g), o = sigm(a_o); c' = f c + i g; h' = o tanh(c')
//     gru:  r = sigm(a_r), z = sigm(a_z), n = tanh(Ax_n + bx_n + r (Ah_n + bh_n)); h' = (1 - z) n + z h
//   The output of a layer is (T, N, D*H), the forward direction in [0, H), the reverse one in [H, 2H); it is
//   the next layer's input, after dropout with rate p in training (not after the last layer). 'output' is the
//   last layer's; with state_outputs, 'state_output' (and for lstm 'statecell_output') are the final states
//   (before dropout). With use_sequence_length, element n of the batch runs only its first
//   sequence_length[n] steps (in [1, T]), as cuDNN does: the reverse direction starts at step length - 1, the
//   output of the later steps is 0 and the final states are those after the last step run.
// Backward runs the steps backwards from the hidden output 'reserve', which Forward fills with what the
// gradients need: each layer's output (and, with dropout, its mask and the masked output), the activated
// gates, lstm's cells and gru's h2h candidate term Ah_n + bh_n. Every product goes through CpuGemm: per layer
// and direction, the weight gradients and the input gradient are one product each over all steps; only the
// recurrence dh = dAh Wh is a product per step.
//
// Dropout (p > 0, between layers) draws from the device's kRandom generator as the Dropout operator does
// (Philox words of the blocks Reserve()d for the call), so it is reproducible under a seed but not MXNet's
// numbers. Not supported, each a troupe::Error at creation: projection_size, lstm_state_clip_min/max (MXNet
// 1.9 has both with cuDNN only, except LSTMP inference).
#include "op/nn/rnn/rnn.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/common/device_math.h"
#include "op/nn/concat/concat.h"
#include "tensor/detail/kernels.h"
#include "tensor/resource.h"

namespace troupe {

int RnnGates(const std::string& mode) {
  if (mode == "lstm") return 4;
  if (mode == "gru") return 3;
  return 1;
}

namespace {

using internal::FloatSwitch;

constexpr const char* kName = "RNN";

enum class Mode { kRelu, kTanh, kLstm, kGru };

Mode ModeOf(const std::string& m) {
  if (m == "rnn_relu") return Mode::kRelu;
  if (m == "rnn_tanh") return Mode::kTanh;
  if (m == "lstm") return Mode::kLstm;
  return Mode::kGru;
}

bool HasDropoutSlots(const RNNParam& p) { return p.p > 0 && p.num_layers > 1; }

RnnDims DimsOf(const RNNParam& p, const TShape& data) {
  RnnDims g;
  g.T = data[0], g.N = data[1], g.I = data[2], g.H = p.state_size;
  g.L = p.num_layers, g.D = p.bidirectional ? 2 : 1, g.G = RnnGates(p.mode);
  return g;
}

// Offsets (in elements) of the parts of the hidden output 'reserve'.
struct ReserveLayout {
  std::vector<std::int64_t> y;      // per layer: its output (T, N, D*H), before dropout
  std::vector<std::int64_t> mask;   // per layer below the last, with dropout: the mask (T, N, D*H)
  std::vector<std::int64_t> xnext;  // ... and the masked output, the next layer's input
  std::vector<std::int64_t> gates;  // per layer*D + direction: the activated gates (T, N, G*H)
  std::vector<std::int64_t> extra;  // ... lstm: the cell c (T, N, H); gru: Ah_n + bh_n (T, N, H)
  std::int64_t total = 0;
};

ReserveLayout MakeLayout(const RnnDims& g, const RNNParam& p) {
  ReserveLayout r;
  const std::int64_t out = g.T * g.N * g.D * g.H;
  const bool extra = g.G > 1;
  for (int l = 0; l < g.L; ++l) {
    r.y.push_back(r.total);
    r.total += out;
    if (HasDropoutSlots(p) && l + 1 < g.L) {
      r.mask.push_back(r.total);
      r.xnext.push_back(r.total + out);
      r.total += 2 * out;
    } else {
      r.mask.push_back(-1);
      r.xnext.push_back(-1);
    }
    for (int d = 0; d < g.D; ++d) {
      r.gates.push_back(r.total);
      r.total += g.T * g.N * g.GH();
      r.extra.push_back(r.total);
      if (extra) r.total += g.T * g.N * g.H;
    }
  }
  return r;
}

template <typename T>
inline T Sigmoid(T x) {
  return T(1) / (T(1) + act_norm::Exp(-x));
}

// Row-major C (m x n) = op(A) op(B) + beta C on contiguous matrices.
template <typename T>
void Gemm(const T* a, const T* b, T* c, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
          double beta) {
  const DType dt = DTypeOf<T>();
  const Context cpu = Context::CPU();
  internal::CpuGemm(TBlob(const_cast<T*>(a), ta ? TShape{k, m} : TShape{m, k}, dt, cpu),
                    TBlob(const_cast<T*>(b), tb ? TShape{n, k} : TShape{k, n}, dt, cpu), TBlob(c, TShape{m, n}, dt, cpu),
                    ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0, beta);
}

class RnnCpuOp final : public Operator {
 public:
  explicit RnnCpuOp(const RNNParam& p) : p_(p), mode_(ModeOf(p.mode)) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    FloatSwitch(in[0].dtype, kName, [&](auto tag) { ForwardT<decltype(tag)>(ctx, in, req, out); });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    FloatSwitch(in[0].dtype, kName, [&](auto tag) { BackwardT<decltype(tag)>(out_grad, in, out, req, in_grad); });
  }

 private:
  bool lstm() const { return mode_ == Mode::kLstm; }
  std::size_t SeqIndex() const { return lstm() ? 4 : 3; }

  // Each batch element's number of steps: T, or sequence_length (checked to lie in [1, T]).
  std::vector<std::int64_t> Lengths(const std::vector<TBlob>& in, const RnnDims& g) const {
    std::vector<std::int64_t> len(static_cast<std::size_t>(g.N), g.T);
    if (!p_.use_sequence_length) return len;
    const TBlob& s = in[SeqIndex()];
    internal::NumberSwitch(s.dtype, kName, [&](auto tag) {
      using I = decltype(tag);
      const I* v = static_cast<const I*>(s.dptr);
      for (std::int64_t n = 0; n < g.N; ++n) len[n] = static_cast<std::int64_t>(v[n]);
    });
    for (std::int64_t n = 0; n < g.N; ++n) {
      if (len[n] < 1 || len[n] > g.T) {
        throw Error(std::string(kName) + ": sequence_length[" + std::to_string(n) + "] is " + std::to_string(len[n]) +
                    " but it must lie in [1, " + std::to_string(g.T) + "] (the data's sequence length)");
      }
    }
    return len;
  }

  template <typename T>
  void ForwardT(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& out) {
    const RnnDims g = DimsOf(p_, in[0].shape);
    const ReserveLayout lay = MakeLayout(g, p_);
    const std::vector<std::int64_t> len = Lengths(in, g);
    const std::int64_t TN = g.T * g.N, H = g.H, GH = g.GH(), DH = g.D * g.H;
    const T* w = in[1].dptr_as<T>();
    const T* hx = in[2].dptr_as<T>();
    const T* cx = lstm() ? in[3].dptr_as<T>() : nullptr;

    // What Backward needs goes into the hidden output when it is there, else into a local buffer.
    const std::size_t hidden = out.size() - 1;
    std::vector<T> local;
    T* res = (req[hidden] != kNullOp && out[hidden].dptr != nullptr) ? out[hidden].dptr_as<T>() : nullptr;
    if (res == nullptr) {
      local.resize(static_cast<std::size_t>(lay.total));
      res = local.data();
    }
    T* hy = p_.state_outputs && req[1] != kNullOp ? out[1].dptr_as<T>() : nullptr;
    T* cy = p_.state_outputs && lstm() && req[2] != kNullOp ? out[2].dptr_as<T>() : nullptr;

    std::vector<T> h(static_cast<std::size_t>(g.N * H)), c(static_cast<std::size_t>(g.N * H)),
        ah(static_cast<std::size_t>(g.N * GH));
    for (int l = 0; l < g.L; ++l) {
      const std::int64_t Il = g.InputSize(l);
      const T* x = l == 0 ? in[0].dptr_as<T>() : res + (lay.xnext[l - 1] >= 0 ? lay.xnext[l - 1] : lay.y[l - 1]);
      T* y = res + lay.y[l];
      for (int d = 0; d < g.D; ++d) {
        const int ld = l * g.D + d;
        const T* wx = w + g.WeightOffset(l, d);
        const T* wh = wx + GH * Il;
        const T* bx = w + g.BiasOffset(l, d);
        const T* bh = bx + GH;
        T* gates = res + lay.gates[ld];
        T* extra = res + lay.extra[ld];
        // Every step's input projection at once.
        Gemm(x, wx, gates, false, true, TN, GH, Il, 0.0);
        std::copy(hx + ld * g.N * H, hx + (ld + 1) * g.N * H, h.begin());
        if (lstm()) std::copy(cx + ld * g.N * H, cx + (ld + 1) * g.N * H, c.begin());
        for (std::int64_t s = 0; s < g.T; ++s) {
          const std::int64_t t = d ? g.T - 1 - s : s;
          Gemm(h.data(), wh, ah.data(), false, true, g.N, GH, H, 0.0);
          T* gt = gates + t * g.N * GH;
          T* et = extra + t * g.N * H;
          for (std::int64_t n = 0; n < g.N; ++n) {
            T* yrow = y + (t * g.N + n) * DH + d * H;
            T* gr = gt + n * GH;
            const T* ar = ah.data() + n * GH;
            T* hr = h.data() + n * H;
            T* cr = c.data() + n * H;
            if (t >= len[n]) {
              // Past this sequence's end: no step, output 0, the state carried unchanged.
              std::fill(yrow, yrow + H, T(0));
              std::fill(gr, gr + GH, T(0));
              if (g.G > 1) std::fill(et + n * H, et + (n + 1) * H, T(0));
              continue;
            }
            switch (mode_) {
              case Mode::kRelu:
              case Mode::kTanh:
                for (std::int64_t k = 0; k < H; ++k) {
                  const T a = gr[k] + ar[k] + bx[k] + bh[k];
                  const T hn = mode_ == Mode::kTanh ? act_norm::Tanh(a) : (a > T(0) ? a : T(0));
                  gr[k] = hn;
                  hr[k] = hn;
                  yrow[k] = hn;
                }
                break;
              case Mode::kLstm:
                for (std::int64_t k = 0; k < H; ++k) {
                  const T i = Sigmoid(gr[k] + ar[k] + bx[k] + bh[k]);
                  const T f = Sigmoid(gr[H + k] + ar[H + k] + bx[H + k] + bh[H + k]);
                  const T gg = act_norm::Tanh(gr[2 * H + k] + ar[2 * H + k] + bx[2 * H + k] + bh[2 * H + k]);
                  const T o = Sigmoid(gr[3 * H + k] + ar[3 * H + k] + bx[3 * H + k] + bh[3 * H + k]);
                  const T cn = f * cr[k] + i * gg;
                  const T hn = o * act_norm::Tanh(cn);
                  gr[k] = i, gr[H + k] = f, gr[2 * H + k] = gg, gr[3 * H + k] = o;
                  et[n * H + k] = cn;
                  cr[k] = cn;
                  hr[k] = hn;
                  yrow[k] = hn;
                }
                break;
              case Mode::kGru:
                for (std::int64_t k = 0; k < H; ++k) {
                  const T r = Sigmoid(gr[k] + ar[k] + bx[k] + bh[k]);
                  const T z = Sigmoid(gr[H + k] + ar[H + k] + bx[H + k] + bh[H + k]);
                  const T m = ar[2 * H + k] + bh[2 * H + k];
                  const T nn = act_norm::Tanh(gr[2 * H + k] + bx[2 * H + k] + r * m);
                  const T hn = (T(1) - z) * nn + z * hr[k];
                  gr[k] = r, gr[H + k] = z, gr[2 * H + k] = nn;
                  et[n * H + k] = m;
                  hr[k] = hn;
                  yrow[k] = hn;
                }
                break;
            }
          }
        }
        if (hy != nullptr) {
          internal::AssignEach(hy + ld * g.N * H, g.N * H, req[1], [&](std::int64_t i) { return h[i]; });
        }
        if (cy != nullptr) {
          internal::AssignEach(cy + ld * g.N * H, g.N * H, req[2], [&](std::int64_t i) { return c[i]; });
        }
      }
      if (lay.mask[l] >= 0) Dropout<T>(ctx, y, res + lay.mask[l], res + lay.xnext[l], TN * DH);
    }
    const T* last = res + lay.y[g.L - 1];
    internal::AssignEach(out[0].dptr_as<T>(), TN * DH, req[0], [&](std::int64_t i) { return last[i]; });
  }

  // The mask of the dropout after a layer (1 / (1 - p) kept, 0 dropped; all 1 outside training) and the
  // masked output.
  template <typename T>
  void Dropout(const OpContext& ctx, const T* y, T* mask, T* xnext, std::int64_t n) const {
    if (ctx.is_train) {
      RandomGenerator* gen = ctx.requested.at(0).get_random();
      const std::uint64_t key = gen->key(), base = gen->Reserve(act_norm::RandomBlocks(n));
      const float keep = 1.0f - p_.p;
      const T scale = keep > 0 ? T(1) / T(keep) : T(0);
      for (std::int64_t j = 0; j < n; ++j) {
        mask[j] = act_norm::UniformAt(key, base, static_cast<std::uint64_t>(j)) < keep ? scale : T(0);
      }
    } else {
      std::fill(mask, mask + n, T(1));
    }
    for (std::int64_t j = 0; j < n; ++j) xnext[j] = y[j] * mask[j];
  }

  template <typename T>
  void BackwardT(const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in, const std::vector<TBlob>& out,
                 const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad) {
    const RnnDims g = DimsOf(p_, in[0].shape);
    const ReserveLayout lay = MakeLayout(g, p_);
    const std::vector<std::int64_t> len = Lengths(in, g);
    const std::int64_t TN = g.T * g.N, H = g.H, GH = g.GH(), DH = g.D * g.H, NH = g.N * H;
    const T* w = in[1].dptr_as<T>();
    const T* hx = in[2].dptr_as<T>();
    const T* cx = lstm() ? in[3].dptr_as<T>() : nullptr;
    const T* res = out.back().dptr_as<T>();
    // Missing head gradients count as zeros.
    auto head = [&](std::size_t i) -> const T* {
      return i < out_grad.size() && out_grad[i].dptr != nullptr ? out_grad[i].dptr_as<T>() : nullptr;
    };
    const T* dhy = p_.state_outputs ? head(1) : nullptr;
    const T* dcy = p_.state_outputs && lstm() ? head(2) : nullptr;
    const bool want_w = req[1] != kNullOp;

    std::vector<T> dy(static_cast<std::size_t>(TN * DH), T(0));
    if (const T* dout = head(0)) std::copy(dout, dout + TN * DH, dy.begin());
    std::vector<T> dw(want_w ? static_cast<std::size_t>(g.ParamSize()) : 0, T(0));
    std::vector<T> dhx(static_cast<std::size_t>(g.L * g.D * NH)), dcx(lstm() ? dhx.size() : 0);
    std::vector<T> dax(static_cast<std::size_t>(TN * GH)), dah(mode_ == Mode::kGru ? dax.size() : 0);
    std::vector<T> hprev(static_cast<std::size_t>(TN * H));
    std::vector<T> dh(static_cast<std::size_t>(NH)), dc(static_cast<std::size_t>(NH)), dh_direct(dh.size()),
        dh_rec(dh.size());
    std::vector<T> dx;
    for (int l = g.L - 1; l >= 0; --l) {
      const std::int64_t Il = g.InputSize(l);
      const T* x = l == 0 ? in[0].dptr_as<T>() : res + (lay.xnext[l - 1] >= 0 ? lay.xnext[l - 1] : lay.y[l - 1]);
      const T* y = res + lay.y[l];
      const bool want_x = l > 0 || req[0] != kNullOp;
      dx.assign(static_cast<std::size_t>(TN * Il), T(0));
      for (int d = 0; d < g.D; ++d) {
        const int ld = l * g.D + d;
        const T* wx = w + g.WeightOffset(l, d);
        const T* wh = wx + GH * Il;
        const T* gates = res + lay.gates[ld];
        const T* extra = res + lay.extra[ld];
        T* da_x = dax.data();
        T* da_h = mode_ == Mode::kGru ? dah.data() : dax.data();  // the same but for gru
        for (std::int64_t i = 0; i < NH; ++i) {
          dh[i] = dhy != nullptr ? dhy[ld * NH + i] : T(0);
          if (lstm()) dc[i] = dcy != nullptr ? dcy[ld * NH + i] : T(0);
        }
        for (std::int64_t s = g.T - 1; s >= 0; --s) {
          const std::int64_t t = d ? g.T - 1 - s : s;
          const std::int64_t tp = s == 0 ? -1 : (d ? t + 1 : t - 1);  // the step run before t, if any
          for (std::int64_t n = 0; n < g.N; ++n) {
            // The state step t started from: the previous step's, or the initial one (also where the previous
            // step lay past the sequence's end: the reverse direction starts late).
            const bool from_prev = tp >= 0 && tp < len[n];
            const T* hp = from_prev ? y + (tp * g.N + n) * DH + d * H : hx + ld * NH + n * H;
            std::copy(hp, hp + H, hprev.begin() + (t * g.N + n) * H);
            T* ax = da_x + (t * g.N + n) * GH;
            T* ahr = da_h + (t * g.N + n) * GH;
            if (t >= len[n]) {
              // No step ran: no gate gradient; dh and dc pass through unchanged.
              std::fill(ax, ax + GH, T(0));
              if (mode_ == Mode::kGru) std::fill(ahr, ahr + GH, T(0));
              continue;
            }
            const T* gr = gates + (t * g.N + n) * GH;
            const T* dyr = dy.data() + (t * g.N + n) * DH + d * H;
            T* dhr = dh.data() + n * H;
            switch (mode_) {
              case Mode::kRelu:
              case Mode::kTanh:
                for (std::int64_t k = 0; k < H; ++k) {
                  const T dht = dhr[k] + dyr[k];
                  const T hv = gr[k];
                  ax[k] = mode_ == Mode::kTanh ? dht * (T(1) - hv * hv) : (hv > T(0) ? dht : T(0));
                }
                break;
              case Mode::kLstm: {
                const T* cp = from_prev ? extra + (tp * g.N + n) * H : cx + ld * NH + n * H;
                const T* cc = extra + (t * g.N + n) * H;
                T* dcr = dc.data() + n * H;
                for (std::int64_t k = 0; k < H; ++k) {
                  const T dht = dhr[k] + dyr[k];
                  const T i = gr[k], f = gr[H + k], gg = gr[2 * H + k], o = gr[3 * H + k];
                  const T tc = act_norm::Tanh(cc[k]);
                  const T dct = dcr[k] + dht * o * (T(1) - tc * tc);
                  ax[k] = dct * gg * i * (T(1) - i);
                  ax[H + k] = dct * cp[k] * f * (T(1) - f);
                  ax[2 * H + k] = dct * i * (T(1) - gg * gg);
                  ax[3 * H + k] = dht * tc * o * (T(1) - o);
                  dcr[k] = dct * f;
                }
                break;
              }
              case Mode::kGru: {
                const T* m = extra + (t * g.N + n) * H;
                const T* hpr = hprev.data() + (t * g.N + n) * H;
                T* ddr = dh_direct.data() + n * H;
                for (std::int64_t k = 0; k < H; ++k) {
                  const T dht = dhr[k] + dyr[k];
                  const T r = gr[k], z = gr[H + k], nn = gr[2 * H + k];
                  const T dan = dht * (T(1) - z) * (T(1) - nn * nn);
                  const T dar = dan * m[k] * r * (T(1) - r);
                  const T daz = dht * (hpr[k] - nn) * z * (T(1) - z);
                  ax[k] = dar, ax[H + k] = daz, ax[2 * H + k] = dan;
                  ahr[k] = dar, ahr[H + k] = daz, ahr[2 * H + k] = dan * r;
                  ddr[k] = dht * z;
                }
                break;
              }
            }
          }
          // The recurrence: dh (into the state step t started from) = dAh Wh where the step ran.
          Gemm(da_h + t * g.N * GH, wh, dh_rec.data(), false, false, g.N, H, GH, 0.0);
          for (std::int64_t n = 0; n < g.N; ++n) {
            if (t >= len[n]) continue;
            for (std::int64_t k = 0; k < H; ++k) {
              const std::int64_t i = n * H + k;
              dh[i] = dh_rec[i] + (mode_ == Mode::kGru ? dh_direct[i] : T(0));
            }
          }
        }
        std::copy(dh.begin(), dh.end(), dhx.begin() + ld * NH);
        if (lstm()) std::copy(dc.begin(), dc.end(), dcx.begin() + ld * NH);
        if (want_w) {
          T* dwx = dw.data() + g.WeightOffset(l, d);
          T* dwh = dwx + GH * Il;
          T* dbx = dw.data() + g.BiasOffset(l, d);
          T* dbh = dbx + GH;
          Gemm(da_x, x, dwx, true, false, GH, Il, TN, 0.0);
          Gemm(da_h, hprev.data(), dwh, true, false, GH, H, TN, 0.0);
          for (std::int64_t r = 0; r < TN; ++r) {
            for (std::int64_t j = 0; j < GH; ++j) {
              dbx[j] += da_x[r * GH + j];
              dbh[j] += da_h[r * GH + j];
            }
          }
        }
        if (want_x) Gemm(da_x, wx, dx.data(), false, false, TN, Il, GH, d == 0 ? 0.0 : 1.0);
      }
      if (l > 0) {
        // The gradient of the layer below's output: through the dropout mask when there is one.
        const T* mask = lay.mask[l - 1] >= 0 ? res + lay.mask[l - 1] : nullptr;
        for (std::int64_t i = 0; i < TN * DH; ++i) dy[i] = mask != nullptr ? dx[i] * mask[i] : dx[i];
      } else if (req[0] != kNullOp) {
        internal::AssignEach(in_grad[0].dptr_as<T>(), TN * g.I, req[0], [&](std::int64_t i) { return dx[i]; });
      }
    }
    if (want_w) internal::AssignEach(in_grad[1].dptr_as<T>(), g.ParamSize(), req[1], [&](std::int64_t i) { return dw[i]; });
    if (req[2] != kNullOp) {
      internal::AssignEach(in_grad[2].dptr_as<T>(), g.L * g.D * NH, req[2], [&](std::int64_t i) { return dhx[i]; });
    }
    if (lstm() && req[3] != kNullOp) {
      internal::AssignEach(in_grad[3].dptr_as<T>(), g.L * g.D * NH, req[3], [&](std::int64_t i) { return dcx[i]; });
    }
    // The lengths get no gradient (zeros, as the labels of the loss heads).
    if (p_.use_sequence_length) {
      const std::size_t si = SeqIndex();
      if (req[si] == kWriteTo || req[si] == kWriteInplace) {
        std::memset(in_grad[si].dptr, 0, static_cast<std::size_t>(in_grad[si].shape.Size()) * DTypeSize(in_grad[si].dtype));
      }
    }
  }

  RNNParam p_;
  Mode mode_;
};

}  // namespace

void RNNProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, kName);
  if (param_.projection_size) {
    throw Error(std::string(kName) + ": projection_size is " + std::to_string(*param_.projection_size) +
                " but LSTM with projection is not supported; leave projection_size None");
  }
  if (param_.lstm_state_clip_min || param_.lstm_state_clip_max) {
    throw Error(std::string(kName) +
                ": lstm_state_clip_min/lstm_state_clip_max are not supported (MXNet 1.9 clips LSTM states with "
                "cuDNN only); leave them None");
  }
}

std::vector<std::string> RNNProp::ListArguments() const {
  std::vector<std::string> args{"data", "parameters", "state"};
  if (param_.mode == "lstm") args.emplace_back("state_cell");
  if (param_.use_sequence_length) args.emplace_back("sequence_length");
  return args;
}

std::vector<std::string> RNNProp::ListOutputs() const {
  std::vector<std::string> outs{"output"};
  if (param_.state_outputs) {
    outs.emplace_back("state_output");
    if (param_.mode == "lstm") outs.emplace_back("statecell_output");
  }
  outs.emplace_back("reserve");
  return outs;
}

int RNNProp::NumVisibleOutputs() const { return static_cast<int>(ListOutputs().size()) - 1; }

bool RNNProp::InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const {
  const auto args = ListArguments();
  in->resize(args.size());
  aux->clear();
  const TShape data = (*in)[0];
  if (!data.known()) return false;
  if (data.ndim() != 3) {
    throw Error(std::string(kName) + ": shape of argument 'data' is " + data.ToString() +
                " but it must be (sequence length, batch size, input size)");
  }
  const RnnDims g = DimsOf(param_, data);
  const bool lstm = param_.mode == "lstm";
  AssignShape(in, 1, TShape{g.ParamSize()}, kName, "parameters");
  const TShape state{static_cast<std::int64_t>(g.L) * g.D, g.N, g.H};
  AssignShape(in, 2, state, kName, "state");
  if (lstm) AssignShape(in, 3, state, kName, "state_cell");
  if (param_.use_sequence_length) AssignShape(in, args.size() - 1, TShape{g.N}, kName, "sequence_length");
  out->clear();
  out->push_back(TShape{g.T, g.N, g.D * g.H});
  if (param_.state_outputs) {
    out->push_back(state);
    if (lstm) out->push_back(state);
  }
  out->push_back(TShape{MakeLayout(g, param_).total});
  return true;
}

bool RNNProp::InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const {
  const auto args = ListArguments();
  in->resize(args.size(), kTypeUnknown);
  aux->clear();
  // Every argument has the data's type but sequence_length, which may be any number type.
  const std::size_t n_float = param_.use_sequence_length ? args.size() - 1 : args.size();
  int t = kTypeUnknown;
  for (std::size_t i = 0; i < n_float && t == kTypeUnknown; ++i) t = (*in)[i];
  if (t == kTypeUnknown) return false;
  for (std::size_t i = 0; i < n_float; ++i) AssignType(in, i, t, kName, args[i]);
  if (param_.use_sequence_length && (*in)[n_float] == kTypeUnknown) (*in)[n_float] = t;
  out->assign(static_cast<std::size_t>(NumOutputs()), t);
  return true;
}

std::vector<ResourceRequest> RNNProp::ForwardResource(const std::vector<TShape>&) const {
  if (HasDropoutSlots(param_)) return {ResourceRequest::kRandom};
  return {};
}

std::vector<int> RNNProp::DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                                    const std::vector<int>& out_data) const {
  std::vector<int> deps = out_grad;
  deps.insert(deps.end(), in_data.begin(), in_data.end());
  deps.push_back(out_data.back());
  return deps;
}

std::unique_ptr<Operator> RNNProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) internal::ThrowNoImplementation(kName, ctx);
  return std::make_unique<RnnCpuOp>(param_);
}

namespace {

// _rnn_param_concat: Concat with MXNet's RNNParamConcatShape. Gluon's rnn layers flatten each weight and bias
// and concatenate them into RNN's 'parameters', whose size RNN's shape inference knows before the first
// layer's i2h weight is known (its input size is deferred): with the output's size along dim known, the one
// or two inputs of unknown size there share what the others leave, equally.
class RnnParamConcatProp final : public ConcatProp {
 public:
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    const std::string op = TypeString();
    const auto n = static_cast<std::size_t>(param().num_args);
    if (in->size() != n) {
      throw Error(op + ": num_args is " + std::to_string(n) + " but " + std::to_string(in->size()) +
                  " inputs were given");
    }
    aux->clear();
    out->resize(1);
    const auto args = ListArguments();
    // The common shape (unknown along dim) of every input and the output, and the known sizes along dim.
    TShape common;
    int axis = -1;
    std::int64_t size = 0;
    std::vector<std::size_t> unknown;
    auto merge = [&](const TShape& s, const std::string& name) {
      TShape m = s;
      m[axis] = -1;
      std::vector<TShape> tmp{common};
      AssignShape(&tmp, 0, m, op, name);
      common = tmp[0];
    };
    for (std::size_t i = 0; i < n; ++i) {
      const TShape& s = (*in)[i];
      if (s.ndim() <= 0) continue;
      axis = internal::NormalizeAxis(param().dim, s.ndim(), op, "dim");
      if (s[axis] < 0) {
        unknown.push_back(i);
      } else {
        size += s[axis];
      }
      merge(s, args[i]);
    }
    const TShape given_out = (*out)[0];
    if (given_out.ndim() > 0) {
      axis = internal::NormalizeAxis(param().dim, given_out.ndim(), op, "dim");
      merge(given_out, "output");
    }
    if (common.ndim() < 0) return false;
    for (std::size_t i = 0; i < n; ++i) {
      TShape s = common;
      if ((*in)[i].ndim() > 0) s[axis] = (*in)[i][axis];
      AssignShape(in, i, s, op, args[i]);
    }
    TShape o = common;
    if (unknown.empty()) o[axis] = size;
    AssignShape(out, 0, o, op, "output");
    if ((*out)[0][axis] >= 0 && !unknown.empty()) {
      const std::int64_t residual = (*out)[0][axis] - size;
      if (residual < 0) {
        throw Error(op + ": the inputs add up to " + std::to_string(size) + " along dim " + std::to_string(axis) +
                    " but the output has " + std::to_string((*out)[0][axis]));
      }
      if (unknown.size() > 2) {
        throw Error(op + ": " + std::to_string(unknown.size()) + " inputs have an unknown size along dim " +
                    std::to_string(axis) + "; at most 2 can be inferred from the output");
      }
      for (std::size_t i : unknown) (*in)[i][axis] = residual / static_cast<std::int64_t>(unknown.size());
    }
    if (!(*out)[0].known()) return false;
    for (const auto& s : *in) {
      if (!s.known()) return false;
    }
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<RnnParamConcatProp>(*this); }
  std::string TypeString() const override { return "_rnn_param_concat"; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) internal::ThrowNoImplementation(TypeString(), ctx);
    return ConcatProp::CreateOperator(ctx);
  }
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(RNN, RNNProp)
    .describe("Applies recurrent layers (rnn_relu, rnn_tanh, lstm, gru; stacked, optionally bidirectional) to "
              "the input, with all weights and biases in one packed vector.")
    .add_argument("data", "NDArray-or-Symbol", "Input data to RNN")
    .add_argument("parameters", "NDArray-or-Symbol", "Vector of all RNN trainable parameters concatenated")
    .add_argument("state", "NDArray-or-Symbol", "initial hidden state of the RNN")
    .add_argument("state_cell", "NDArray-or-Symbol", "initial cell state for LSTM networks (only for LSTM)")
    .add_argument("sequence_length", "NDArray-or-Symbol",
                  "Vector of valid sequence lengths for each element in batch. (Only used if use_sequence_length "
                  "kwarg is True)")
    .add_arguments(RNNParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_rnn_param_concat, RnnParamConcatProp)
    .describe("Concat for the packed parameters of the rnn layers: one or two inputs of unknown size along dim "
              "take what the output's known size leaves.")
    .add_argument("data", "NDArray-or-Symbol[]", "List of arrays to concatenate (arg0, arg1, ...).")
    .add_arguments(ConcatParam::Docs())
    .add_alias("_npi_rnn_param_concat");

}  // namespace troupe
