// The operator benchmark (see ops_bench.h for what it measures and why).
//
// Layout of this file: host-side helpers (random buffers, the double-precision references of the checks),
// the workloads (fc, conv, pool), each with its operator body, its sgemm anchor and its checks, and the report
// (JSON file, table on stdout). The measuring harness is bench/common/measure.h.
#include "bench/ops/ops_bench.h"

#include <cblas.h>
#include <unistd.h>
#if TROUPE_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/config.h"
#include "base/context.h"
#include "actors/runtime.h"
#include "bench/common/bench_util.h"
#include "bench/common/cpu_kernels.h"
#include "bench/common/measure.h"
#include "engine/engine.h"
#include "op/imperative.h"
#include "tensor/ndarray.h"
#include "op/operator.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

constexpr double kQuickMinTime = 0.005;
// The in-run checks: the operator's results against the anchor's (same inputs, same library) and sampled
// entries against double-precision sums (relative to the sum of the terms' magnitudes, the scale of float
// rounding errors).
constexpr double kTolerance = 1e-4;
constexpr int kSpotChecks = 16;
// The targets of the acceptance text.
constexpr double kFcTargetRatio = 0.9;
constexpr double kConvTargetRatio = 0.7;
constexpr double kConvTargetDnnlRatio = 0.95;
constexpr int kMaxResNetBatch = 256;

// ---------------------------------------------------------------------------------------------------
// Host-side helpers

std::vector<float> RandomFloats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// /proc/loadavg's first three fields ("0.12 0.30 0.41": 1, 5, 15 minutes), or "unknown". Recorded at the start
// and the end of a run: on a shared 2-core machine another process's load is the first suspect of an odd
// figure.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

// CPU time (seconds) spent by the whole machine and by this process so far, from /proc/stat and
// /proc/self/stat (-1 when unreadable). Their growth over a run, one minus the other, is the CPU time other
// processes took from the cores the benchmark measures on.
struct CpuTimes {
  double machine = -1, self = -1;
  static CpuTimes Now() {
    CpuTimes t;
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    std::ifstream stat("/proc/stat");
    std::string cpu;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu") {
      t.machine = (user + nice + system + irq + softirq + steal) / tick;
    }
    std::ifstream self("/proc/self/stat");
    std::string line;
    if (std::getline(self, line)) {
      // Fields after the command name (which may hold spaces, so start after its closing parenthesis):
      // state is field 3, utime and stime are fields 14 and 15.
      std::istringstream rest(line.substr(line.rfind(')') + 2));
      std::string field;
      double utime = 0, stime = 0;
      for (int i = 3; i <= 13 && rest >> field; ++i) {
      }
      if (rest >> utime >> stime) t.self = (utime + stime) / tick;
    }
    return t;
  }
};

// An array on `ctx` holding `values` (copied synchronously).
NDArray ArrayOf(const std::vector<float>& values, const TShape& shape, Context ctx) {
  NDArray a(shape, ctx, DType::kFloat32);
  a.SyncCopyFromCPU(values.data(), values.size() * sizeof(float));
  return a;
}

// Picks sampled indices in [0, n) from a fixed sequence (the same entries in every run).
class Sampler {
 public:
  explicit Sampler(std::uint64_t seed) : x_(0x9e3779b97f4a7c15ULL ^ seed) {}
  std::int64_t Next(std::int64_t n) {
    x_ = x_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>((x_ >> 17) % static_cast<std::uint64_t>(n));
  }

 private:
  std::uint64_t x_;
};

// A double-precision sum and the sum of its terms' magnitudes.
struct RefSum {
  double sum = 0, scale = 0;
  void Add(double t) {
    sum += t;
    scale += std::fabs(t);
  }
  // |got - sum| relative to the scale of the terms.
  double ErrorOf(double got) const { return std::fabs(got - sum) / (scale > 0 ? scale : 1.0); }
};

// sum over l < len of a[l * sa] * b[l * sb] in double.
RefSum StridedDot(const float* a, std::int64_t sa, const float* b, std::int64_t sb, std::int64_t len) {
  RefSum r;
  for (std::int64_t l = 0; l < len; ++l) r.Add(static_cast<double>(a[l * sa]) * b[l * sb]);
  return r;
}

// Column sums of an rows x cols matrix in double, with the sums of magnitudes: the bias gradient's reference.
std::vector<RefSum> ColumnSums(const std::vector<float>& m, std::int64_t rows, std::int64_t cols) {
  std::vector<RefSum> s(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) s[static_cast<std::size_t>(c)].Add(m[static_cast<std::size_t>(r * cols + c)]);
  }
  return s;
}

double WorstError(const std::vector<RefSum>& ref, const std::vector<float>& got) {
  if (ref.size() != got.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, ref[i].ErrorOf(got[i]));
  return worst;
}

// Records a failed check: `error` is not below the tolerance (NaN fails too).
void Check(std::vector<std::string>* errors, const std::string& what, double error) {
  if (!(error < kTolerance)) {
    errors->push_back(what + ": error " + Fmt("%.3g", error) + " (must be < " + Fmt("%g", kTolerance) + ")");
  }
}

std::shared_ptr<OperatorProperty> MakeProp(const std::string& op, const Kwargs& kwargs) {
  std::shared_ptr<OperatorProperty> p = OperatorProperty::Create(op);
  p->Init(kwargs);
  return p;
}

const std::vector<int> kFloat32x3(3, static_cast<int>(DType::kFloat32));
const std::vector<OpReqType> kWriteTo3(3, kWriteTo);

// ---------------------------------------------------------------------------------------------------
// fc

struct FcShape {
  int batch = 0, in = 0, out = 0;
  std::string Name() const { return std::to_string(batch) + "x" + std::to_string(in) + "x" + std::to_string(out); }
};

struct FcReport {
  FcShape shape;
  bool has_anchor = true;
  int blas_threads = 0;
  Series op, anchor;
  // Relative errors of the checks (-1: not measured).
  double error_out = -1, error_dx = -1, error_dw = -1, error_db = -1, spot_error = -1;
  std::vector<std::string> errors;

  double Flops() const { return 6.0 * shape.batch * static_cast<double>(shape.in) * shape.out; }
  bool ok() const { return errors.empty() && op.ok() && anchor.ok(); }
  // anchor time / operator time (medians): 1 = the operator costs what its products cost. Null when a check
  // failed (a wrong result leaves nothing to compare) or there is no anchor.
  std::optional<double> Ratio() const {
    if (!op.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Median() / op.Median();
  }
  std::optional<double> RatioBest() const {
    if (!op.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Best() / op.Best();
  }
};

// The anchor's three products: Y = X W^T (M x N), dX = dY W (M x K), dW = dY^T X (N x K), row-major.
struct FcBuffers {
  int m = 0, k = 0, n = 0;
  std::vector<float> x, w, b, dy, y, dx, dw;

  void Products() {
    Sgemm(false, true, m, n, k, x.data(), k, w.data(), k, 0.0f, y.data(), n);
    Sgemm(false, false, m, k, n, dy.data(), n, w.data(), k, 0.0f, dx.data(),
                k);
    Sgemm(true, false, n, k, m, dy.data(), n, x.data(), k, 0.0f, dw.data(), k);
    KeepAlive(y.data());
    KeepAlive(dx.data());
    KeepAlive(dw.data());
  }
};

void RunFc(FcReport* r, Context ctx, int repeat, double min_time) {
  const int m = r->shape.batch, k = r->shape.in, n = r->shape.out;
  r->has_anchor = !ctx.is_gpu();
  r->op = MakeSeries("operator",
                     "FullyConnected through OperatorRunner on " + ctx.ToString() +
                         ": Forward (is_train) + Backward (kWriteTo for data, weight and bias gradients), then "
                         "WaitToRead on the output and the gradients");
  r->anchor = MakeSeries("sgemm",
                         std::string("the three sgemm calls (Y = X W^T; dX = dY W; dW = dY^T X; row-major; ") +
                             SgemmLibrary() + ", the library of the operator's products) on std::vector<float>, "
                             "called on the benchmark's thread");

  FcBuffers h;
  h.m = m, h.k = k, h.n = n;
  const auto sz = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  h.x = RandomFloats(sz(m, k), 1);
  h.w = RandomFloats(sz(n, k), 2);
  h.b = RandomFloats(sz(1, n), 3);
  h.dy = RandomFloats(sz(m, n), 4);
  h.y.assign(sz(m, n), 0.0f);
  h.dx.assign(sz(m, k), 0.0f);
  h.dw.assign(sz(n, k), 0.0f);

  OperatorRunner runner(MakeProp("FullyConnected", {{"num_hidden", std::to_string(n)}}), ctx,
                        {TShape({m, k}), TShape({n, k}), TShape({n})}, kFloat32x3);
  const NDArray x = ArrayOf(h.x, TShape({m, k}), ctx), w = ArrayOf(h.w, TShape({n, k}), ctx),
                b = ArrayOf(h.b, TShape({n}), ctx), dy = ArrayOf(h.dy, TShape({m, n}), ctx);
  const NDArray y(TShape({m, n}), ctx), dx(TShape({m, k}), ctx), dw(TShape({n, k}), ctx), db(TShape({n}), ctx);
  const std::vector<NDArray> in = {x, w, b};

  const Body op = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      runner.Forward(true, in, {y}, {});
      runner.Backward({dy}, in, {y}, {}, {dx, dw, db}, kWriteTo3);
      y.WaitToRead();
      dx.WaitToRead();
      dw.WaitToRead();
      db.WaitToRead();
    });
  };
  const AnchorVar anchor_var;
  const Body anchor = OnWorker(ctx, anchor_var.get(), [&] { h.Products(); });

  r->blas_threads = openblas_get_num_threads();
  if (r->has_anchor) {
    MeasureInterleaved({{&r->op, op}, {&r->anchor, anchor}}, repeat, min_time);
  } else {
    MeasureInterleaved({{&r->op, op}}, repeat, min_time);
    h.Products();  // the reference of the checks
  }
  if (openblas_get_num_threads() != r->blas_threads) {
    r->errors.push_back("the OpenBLAS thread count changed while measuring (" + std::to_string(r->blas_threads) +
                        " -> " + std::to_string(openblas_get_num_threads()) + "): the comparison is not fair");
  }
  if (!r->op.measured()) return;

  // Checks: the operator's results are the anchor's (plus the bias), and the anchor is right.
  std::vector<float> y_ref = h.y;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) y_ref[sz(i, n) + static_cast<std::size_t>(j)] += h.b[static_cast<std::size_t>(j)];
  }
  r->error_out = MaxRelativeError(y.ToVector<float>(), y_ref);
  r->error_dx = MaxRelativeError(dx.ToVector<float>(), h.dx);
  r->error_dw = MaxRelativeError(dw.ToVector<float>(), h.dw);
  r->error_db = WorstError(ColumnSums(h.dy, m, n), db.ToVector<float>());
  Check(&r->errors, "output differs from X W^T + b (anchor)", r->error_out);
  Check(&r->errors, "data gradient differs from dY W (anchor)", r->error_dx);
  Check(&r->errors, "weight gradient differs from dY^T X (anchor)", r->error_dw);
  Check(&r->errors, "bias gradient differs from the column sums of dY", r->error_db);
  Sampler s(static_cast<std::uint64_t>(m) * 131 + static_cast<std::uint64_t>(n));
  double worst = 0;
  for (int t = 0; t < kSpotChecks; ++t) {
    const std::int64_t i = s.Next(m), j = s.Next(n), l = s.Next(k);
    // Y[i, j] = X[i, :] . W[j, :];  dX[i, l] = dY[i, :] . W[:, l];  dW[j, l] = dY[:, j] . X[:, l]
    worst = std::max(worst, StridedDot(&h.x[sz(i, k)], 1, &h.w[sz(j, k)], 1, k).ErrorOf(h.y[sz(i, n) + j]));
    worst = std::max(worst, StridedDot(&h.dy[sz(i, n)], 1, &h.w[l], k, n).ErrorOf(h.dx[sz(i, k) + l]));
    worst = std::max(worst, StridedDot(&h.dy[j], n, &h.x[l], k, m).ErrorOf(h.dw[sz(j, k) + l]));
  }
  r->spot_error = worst;
  Check(&r->errors, "the anchor's products differ from double-precision sums at sampled entries", worst);
}

Json FcJson(const FcReport& r) {
  const double flops = r.Flops();
  const auto gflops = [flops](double s) { return s > 0 ? flops / s / 1e9 : 0.0; };
  Json j;
  j["shape"] = r.shape.Name();
  j["batch"] = r.shape.batch;
  j["in"] = r.shape.in;
  j["out"] = r.shape.out;
  j["layer"] = "FullyConnected(num_hidden=" + std::to_string(r.shape.out) + "), data (" + std::to_string(r.shape.batch) +
               ", " + std::to_string(r.shape.in) + "), float32, with bias";
  j["flops_per_call"] = flops;
  j["flops_meaning"] = "6 x batch x in x out: three products of 2 x batch x in x out each";
  j["blas_threads"] = r.blas_threads;
  j["operator"] = SeriesJson(r.op, "gflops", gflops);
  if (r.has_anchor) {
    j["anchor"] = SeriesJson(r.anchor, "gflops", gflops);
    j["ratio"] = OptNum(r.Ratio());
    j["ratio_best"] = OptNum(r.RatioBest());
    j["ratio_meaning"] =
        "anchor time / operator time (medians; ratio_best: the best runs), i.e. operator GFLOP/s / anchor GFLOP/s. "
        "1 = the operator costs exactly its three products; < 1 means it is slower. Null when a check failed.";
  } else {
    j["anchor"] = nullptr;
  }
  j["check"] = {{"output_relative_error", r.error_out},
                {"data_grad_relative_error", r.error_dx},
                {"weight_grad_relative_error", r.error_dw},
                {"bias_grad_error", r.error_db},
                {"anchor_spot_check_error", r.spot_error},
                {"tolerance", kTolerance},
                {"meaning",
                 "*_relative_error: max |operator - anchor| / max |anchor| over all entries (the output against "
                 "the anchor's X W^T plus the bias); bias_grad_error: max over outputs of |db - sum of dY's column| / "
                 "sum of its magnitudes (double); anchor_spot_check_error: the anchor's three products at " +
                     std::to_string(kSpotChecks) +
                     " sampled entries each against double-precision sums, relative to the sum of the terms' "
                     "magnitudes. -1: not measured"},
                {"ok", r.errors.empty()},
                {"errors", r.errors}};
  j["ok"] = r.ok();
  return j;
}

// ---------------------------------------------------------------------------------------------------
// conv

struct ConvShape {
  std::string name;
  int batch = 0, channels = 0, height = 0, width = 0, filters = 0, kernel = 0, pad = 0;

  int OutH() const { return height + 2 * pad - kernel + 1; }
  int OutW() const { return width + 2 * pad - kernel + 1; }
  std::int64_t Ckk() const { return static_cast<std::int64_t>(channels) * kernel * kernel; }
  std::int64_t Hw() const { return static_cast<std::int64_t>(OutH()) * OutW(); }
  std::string Describe() const {
    return "Convolution(kernel=(" + std::to_string(kernel) + "," + std::to_string(kernel) + "), pad=(" +
           std::to_string(pad) + "," + std::to_string(pad) + "), num_filter=" + std::to_string(filters) +
           "), data (" + std::to_string(batch) + ", " + std::to_string(channels) + ", " + std::to_string(height) +
           ", " + std::to_string(width) + "), float32, with bias, stride 1, 1 group";
  }
};

struct ConvReport {
  ConvShape shape;
  bool has_anchor = true;
  bool batch_reduced = false;  // the ResNet-sized layer runs with a smaller batch than the default
  int blas_threads = 0;
  Series op, anchor;
  // The raw oneDNN primitives (CPU, in a build with oneDNN and TROUPE_DNNL not 0): on the NCHW buffers with
  // the reorders their layouts need, and on blocked buffers alone.
  bool has_dnnl = false;
  std::string dnnl_impl;
  Series dnnl, dnnl_blocked;
  double error_out = -1, error_dx = -1, error_dw = -1, error_db = -1;
  std::vector<std::string> errors;

  double Flops() const {
    return 6.0 * shape.batch * static_cast<double>(shape.filters) * static_cast<double>(shape.Ckk()) *
           static_cast<double>(shape.Hw());
  }
  bool ok() const { return errors.empty() && op.ok() && anchor.ok(); }
  std::optional<double> Ratio() const {
    if (!op.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Median() / op.Median();
  }
  std::optional<double> RatioBest() const {
    if (!op.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Best() / op.Best();
  }
  // Operator speed / the raw primitives' speed (medians).
  std::optional<double> RatioDnnl(const Series& raw) const {
    if (!has_dnnl || !op.measured() || !raw.measured() || !ok()) return std::nullopt;
    return raw.Median() / op.Median();
  }
};

#if TROUPE_HAVE_DNNL
// oneDNN's convolution primitives for one layer, as Convolution's CPU operator sets them up (the same
// algorithm rule: Winograd where oneDNN has it for a 3x3 layer unless TROUPE_DNNL_WINOGRAD=0, else direct;
// the layouts oneDNN picks), called directly: no engine, no operator, no temp-space resource.
class DnnlConvAnchor {
 public:
  DnnlConvAnchor(const ConvShape& s, const float* x, const float* w, const float* b, const float* dy, float* y,
                 float* dx, float* dw, float* db)
      : eng_(dnnl::engine::kind::cpu, 0), st_(eng_) {
    // The engine workers' kernel-thread budget, before the primitives are created (as the operator does).
    omp_set_num_threads(openblas_get_num_threads());
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims xd{s.batch, s.channels, s.height, s.width}, wd{s.filters, s.channels, s.kernel, s.kernel},
        bd{s.filters}, yd{s.batch, s.filters, s.OutH(), s.OutW()}, st{1, 1}, pad{s.pad, s.pad};
    const auto any = [](const dnnl::memory::dims& d) { return dnnl::memory::desc(d, dt::f32, tag::any); };
    const dnnl::memory::desc b_md(bd, dt::f32, tag::a);
    const char* wino = std::getenv("TROUPE_DNNL_WINOGRAD");
    std::vector<dnnl::algorithm> algos = {dnnl::algorithm::convolution_direct};
    if (s.kernel == 3 && (wino == nullptr || std::strcmp(wino, "0") != 0)) {
      algos.insert(algos.begin(), dnnl::algorithm::convolution_winograd);
    }
    // Scratchpads of its own (as the operator's, in temp space): oneDNN 2.6's Winograd primitives with the
    // library's scratchpad crash when run on a thread other than the one that created them.
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    for (dnnl::algorithm a : algos) {
      try {
        fwd_pd_ = dnnl::convolution_forward::primitive_desc(
            {dnnl::prop_kind::forward_training, a, any(xd), any(wd), b_md, any(yd), st, pad, pad}, attr, eng_);
        bd_pd_ = dnnl::convolution_backward_data::primitive_desc({a, any(xd), any(wd), any(yd), st, pad, pad}, attr,
                                                                 eng_, fwd_pd_);
        bw_pd_ = dnnl::convolution_backward_weights::primitive_desc(
            {a, any(xd), any(wd), b_md, any(yd), st, pad, pad}, attr, eng_, fwd_pd_);
        break;
      } catch (const dnnl::error&) {
        if (a == dnnl::algorithm::convolution_direct) throw;
      }
    }
    fwd_scratch_ = dnnl::memory(fwd_pd_.scratchpad_desc(), eng_);
    bd_scratch_ = dnnl::memory(bd_pd_.scratchpad_desc(), eng_);
    bw_scratch_ = dnnl::memory(bw_pd_.scratchpad_desc(), eng_);
    impl_ = std::string(fwd_pd_.impl_info_str()) + " / " + bd_pd_.impl_info_str() + " / " + bw_pd_.impl_info_str();
    fwd_ = dnnl::convolution_forward(fwd_pd_);
    bwd_data_ = dnnl::convolution_backward_data(bd_pd_);
    bwd_weights_ = dnnl::convolution_backward_weights(bw_pd_);
    const auto user = [&](const dnnl::memory::dims& d, tag t, const float* p) {
      return dnnl::memory({d, dt::f32, t}, eng_, const_cast<float*>(p));
    };
    ux_ = user(xd, tag::nchw, x), uw_ = user(wd, tag::oihw, w), ub_ = user(bd, tag::a, b);
    udy_ = user(yd, tag::nchw, dy), uy_ = user(yd, tag::nchw, y), udx_ = user(xd, tag::nchw, dx);
    udw_ = user(wd, tag::oihw, dw), udb_ = user(bd, tag::a, db);
    // Blocked buffers, filled once from the user's (the blocked run uses them as they are).
    x_ = In(ux_, fwd_pd_.src_desc()), w_ = In(uw_, fwd_pd_.weights_desc()), y_ = Out(uy_, fwd_pd_.dst_desc());
    bdy_ = In(udy_, bd_pd_.diff_dst_desc()), bw_ = In(uw_, bd_pd_.weights_desc()), bdx_ = Out(udx_, bd_pd_.diff_src_desc());
    wdy_ = In(udy_, bw_pd_.diff_dst_desc()), wx_ = In(ux_, bw_pd_.src_desc()), wdw_ = Out(udw_, bw_pd_.diff_weights_desc());
    st_.wait();
  }

  const std::string& impl() const { return impl_; }

  // One call: forward, backward data, backward weights and bias. with_reorders: from and to the NCHW
  // buffers, every reorder the layouts need (what the operator must do); otherwise the primitives alone.
  void Call(bool with_reorders) {
    // The engine workers' kernel-thread budget (the operator's oneDNN calls use the same).
    if (omp_get_max_threads() != openblas_get_num_threads()) omp_set_num_threads(openblas_get_num_threads());
    if (with_reorders) {
      for (Pair* p : {&x_, &w_, &bdy_, &bw_, &wdy_, &wx_}) Reorder(p->user, p->mem, p->differs);
    }
    fwd_.execute(st_, {{DNNL_ARG_SRC, x_.mem},
                       {DNNL_ARG_WEIGHTS, w_.mem},
                       {DNNL_ARG_BIAS, ub_},
                       {DNNL_ARG_DST, y_.mem},
                       {DNNL_ARG_SCRATCHPAD, fwd_scratch_}});
    bwd_data_.execute(st_, {{DNNL_ARG_DIFF_DST, bdy_.mem},
                            {DNNL_ARG_WEIGHTS, bw_.mem},
                            {DNNL_ARG_DIFF_SRC, bdx_.mem},
                            {DNNL_ARG_SCRATCHPAD, bd_scratch_}});
    bwd_weights_.execute(st_, {{DNNL_ARG_DIFF_DST, wdy_.mem},
                               {DNNL_ARG_SRC, wx_.mem},
                               {DNNL_ARG_DIFF_WEIGHTS, wdw_.mem},
                               {DNNL_ARG_DIFF_BIAS, udb_},
                               {DNNL_ARG_SCRATCHPAD, bw_scratch_}});
    if (with_reorders) {
      for (Pair* p : {&y_, &bdx_, &wdw_}) Reorder(p->mem, p->user, p->differs);
    }
    st_.wait();
  }

 private:
  // A user buffer and the primitive's view of it (the same memory when the layouts agree).
  struct Pair {
    dnnl::memory user, mem;
    bool differs = false;
  };
  Pair In(const dnnl::memory& user, const dnnl::memory::desc& want) {
    Pair p{user, user, user.get_desc() != want};
    if (p.differs) {
      p.mem = dnnl::memory(want, eng_);
      Reorder(p.user, p.mem, true);
    }
    return p;
  }
  Pair Out(const dnnl::memory& user, const dnnl::memory::desc& want) {
    Pair p{user, user, user.get_desc() != want};
    if (p.differs) p.mem = dnnl::memory(want, eng_);
    return p;
  }
  void Reorder(dnnl::memory& from, dnnl::memory& to, bool differs) {
    if (differs) dnnl::reorder(from, to).execute(st_, from, to);
  }

  dnnl::engine eng_;
  dnnl::stream st_;
  dnnl::convolution_forward::primitive_desc fwd_pd_;
  dnnl::convolution_backward_data::primitive_desc bd_pd_;
  dnnl::convolution_backward_weights::primitive_desc bw_pd_;
  dnnl::convolution_forward fwd_;
  dnnl::convolution_backward_data bwd_data_;
  dnnl::convolution_backward_weights bwd_weights_;
  dnnl::memory ux_, uw_, ub_, udy_, uy_, udx_, udw_, udb_, fwd_scratch_, bd_scratch_, bw_scratch_;
  Pair x_, w_, y_, bdy_, bw_, bdx_, wdy_, wx_, wdw_;
  std::string impl_;
};
#endif  // TROUPE_HAVE_DNNL

// The direct convolution in double at one entry of each result (stride 1, no dilation, one group).
class ConvReference {
 public:
  ConvReference(const ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>& b, const std::vector<float>& dy)
      : s_(s), x_(x), w_(w), b_(b), dy_(dy) {}

  // y[n, f, oh, ow] = b[f] + sum_{c, i, j} x[n, c, oh - pad + i, ow - pad + j] w[f, c, i, j]
  RefSum Out(std::int64_t n, std::int64_t f, std::int64_t oh, std::int64_t ow) const {
    RefSum r;
    r.Add(b_[static_cast<std::size_t>(f)]);
    for (std::int64_t c = 0; c < s_.channels; ++c) {
      for (std::int64_t i = 0; i < s_.kernel; ++i) {
        for (std::int64_t j = 0; j < s_.kernel; ++j) {
          const std::int64_t ih = oh - s_.pad + i, iw = ow - s_.pad + j;
          if (ih < 0 || ih >= s_.height || iw < 0 || iw >= s_.width) continue;
          r.Add(static_cast<double>(X(n, c, ih, iw)) * W(f, c, i, j));
        }
      }
    }
    return r;
  }
  // dx[n, c, ih, iw] = sum_{f, i, j} dy[n, f, ih + pad - i, iw + pad - j] w[f, c, i, j]
  RefSum DataGrad(std::int64_t n, std::int64_t c, std::int64_t ih, std::int64_t iw) const {
    RefSum r;
    for (std::int64_t f = 0; f < s_.filters; ++f) {
      for (std::int64_t i = 0; i < s_.kernel; ++i) {
        for (std::int64_t j = 0; j < s_.kernel; ++j) {
          const std::int64_t oh = ih + s_.pad - i, ow = iw + s_.pad - j;
          if (oh < 0 || oh >= s_.OutH() || ow < 0 || ow >= s_.OutW()) continue;
          r.Add(static_cast<double>(Dy(n, f, oh, ow)) * W(f, c, i, j));
        }
      }
    }
    return r;
  }
  // dw[f, c, i, j] = sum_{n, oh, ow} dy[n, f, oh, ow] x[n, c, oh - pad + i, ow - pad + j]
  RefSum WeightGrad(std::int64_t f, std::int64_t c, std::int64_t i, std::int64_t j) const {
    RefSum r;
    for (std::int64_t n = 0; n < s_.batch; ++n) {
      for (std::int64_t oh = 0; oh < s_.OutH(); ++oh) {
        for (std::int64_t ow = 0; ow < s_.OutW(); ++ow) {
          const std::int64_t ih = oh - s_.pad + i, iw = ow - s_.pad + j;
          if (ih < 0 || ih >= s_.height || iw < 0 || iw >= s_.width) continue;
          r.Add(static_cast<double>(Dy(n, f, oh, ow)) * X(n, c, ih, iw));
        }
      }
    }
    return r;
  }

 private:
  float X(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const {
    return x_[static_cast<std::size_t>(((n * s_.channels + c) * s_.height + h) * s_.width + w)];
  }
  float W(std::int64_t f, std::int64_t c, std::int64_t i, std::int64_t j) const {
    return w_[static_cast<std::size_t>(((f * s_.channels + c) * s_.kernel + i) * s_.kernel + j)];
  }
  float Dy(std::int64_t n, std::int64_t f, std::int64_t oh, std::int64_t ow) const {
    return dy_[static_cast<std::size_t>(((n * s_.filters + f) * s_.OutH() + oh) * s_.OutW() + ow)];
  }

  const ConvShape& s_;
  const std::vector<float>& x_;
  const std::vector<float>& w_;
  const std::vector<float>& b_;
  const std::vector<float>& dy_;
};

void RunConv(ConvReport* r, Context ctx, int repeat, double min_time) {
  const ConvShape& s = r->shape;
  r->has_anchor = !ctx.is_gpu();
  r->op = MakeSeries("operator",
                     "Convolution through OperatorRunner on " + ctx.ToString() +
                         ": Forward (is_train) + Backward (kWriteTo for data, weight and bias gradients), then "
                         "WaitToRead on the output and the gradients");
  r->anchor = MakeSeries(
      "sgemm_bound",
      std::string("the sgemm calls (") + SgemmLibrary() +
          ") of the im2col shapes alone, per image: forward (F x CKK)(CKK x HW), backward-data "
          "(CKK x F)(F x HW), backward-weight (F x HW)(HW x CKK) accumulated over the batch; row-major, "
          "std::vector<float>, the benchmark's thread; no im2col, col2im, bias or engine");

  const int f = s.filters, ckk = static_cast<int>(s.Ckk()), hw = static_cast<int>(s.Hw());
  const TShape x_shape({s.batch, s.channels, s.height, s.width});
  const TShape w_shape({s.filters, s.channels, s.kernel, s.kernel});
  const TShape y_shape({s.batch, s.filters, s.OutH(), s.OutW()});
  const std::vector<float> hx = RandomFloats(static_cast<std::size_t>(x_shape.Size()), 11);
  const std::vector<float> hw_ = RandomFloats(static_cast<std::size_t>(w_shape.Size()), 12);
  const std::vector<float> hb = RandomFloats(static_cast<std::size_t>(s.filters), 13);
  const std::vector<float> hdy = RandomFloats(static_cast<std::size_t>(y_shape.Size()), 14);

  const std::string k = "(" + std::to_string(s.kernel) + "," + std::to_string(s.kernel) + ")";
  const std::string p = "(" + std::to_string(s.pad) + "," + std::to_string(s.pad) + ")";
  OperatorRunner runner(
      MakeProp("Convolution", {{"kernel", k}, {"pad", p}, {"num_filter", std::to_string(s.filters)}}), ctx,
      {x_shape, w_shape, TShape({s.filters})}, kFloat32x3);
  if (runner.out_shapes().at(0) != y_shape) {
    throw Error("Convolution inferred the output shape " + runner.out_shapes().at(0).ToString() + ", expected " +
                y_shape.ToString());
  }
  const NDArray x = ArrayOf(hx, x_shape, ctx), w = ArrayOf(hw_, w_shape, ctx),
                b = ArrayOf(hb, TShape({s.filters}), ctx), dy = ArrayOf(hdy, y_shape, ctx);
  const NDArray y(y_shape, ctx), dx(x_shape, ctx), dw(w_shape, ctx), db(TShape({s.filters}), ctx);
  const std::vector<NDArray> in = {x, w, b};

  const Body op = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      runner.Forward(true, in, {y}, {});
      runner.Backward({dy}, in, {y}, {}, {dx, dw, db}, kWriteTo3);
      y.WaitToRead();
      dx.WaitToRead();
      dw.WaitToRead();
      db.WaitToRead();
    });
  };

  // The bound's buffers: one column matrix (random: its values do not change a product's time) and one
  // column gradient, reused for every image as the operator reuses its workspace; Y and dY per image.
  std::vector<float> col, dcol, ay, adw;
  if (r->has_anchor) {
    col = RandomFloats(static_cast<std::size_t>(ckk) * static_cast<std::size_t>(hw), 15);
    dcol.assign(col.size(), 0.0f);
    ay.assign(hdy.size(), 0.0f);
    adw.assign(hw_.size(), 0.0f);
  }
  const AnchorVar anchor_var;
  const Body anchor = OnWorker(ctx, anchor_var.get(), [&] {
    const std::size_t y_stride = static_cast<std::size_t>(f) * static_cast<std::size_t>(hw);
    for (int n = 0; n < s.batch; ++n) {
      float* yn = ay.data() + n * y_stride;
      const float* dyn = hdy.data() + n * y_stride;
      Sgemm(false, false, f, hw, ckk, hw_.data(), ckk, col.data(), hw, 0.0f, yn, hw);
      Sgemm(true, false, ckk, hw, f, hw_.data(), ckk, dyn, hw, 0.0f, dcol.data(), hw);
      Sgemm(false, true, f, ckk, hw, dyn, hw, col.data(), hw, n == 0 ? 0.0f : 1.0f, adw.data(), ckk);
    }
    KeepAlive(ay.data());
    KeepAlive(dcol.data());
    KeepAlive(adw.data());
  });

  r->blas_threads = openblas_get_num_threads();
  std::vector<Measured> items = {{&r->op, op}};
  if (r->has_anchor) items.push_back({&r->anchor, anchor});
#if TROUPE_HAVE_DNNL
  // Its own outputs, so that the checks below see only the operator's.
  std::vector<float> ry(hdy.size()), rdx(hx.size()), rdw(hw_.size()), rdb(hb.size());
  std::unique_ptr<DnnlConvAnchor> raw;
  if (r->has_anchor && DnnlInUse()) {
    // Built on the worker too: its constructor reorders (bench/common/cpu_kernels.h says why).
    RunOnWorker(ctx, anchor_var.get(), [&] {
      raw = std::make_unique<DnnlConvAnchor>(s, hx.data(), hw_.data(), hb.data(), hdy.data(), ry.data(), rdx.data(),
                                             rdw.data(), rdb.data());
    });
    r->has_dnnl = true;
    r->dnnl_impl = raw->impl();
    r->dnnl = MakeSeries("dnnl_raw",
                         "oneDNN's convolution primitives (forward, backward data, backward weights + bias) as the "
                         "operator sets them up, called directly on the NCHW buffers with every reorder their "
                         "layouts need, in one engine function (PushSync + WaitForVar per call) on the CPU worker, "
                         "OpenMP threads = the engine's kernel threads");
    r->dnnl_blocked = MakeSeries("dnnl_blocked",
                                 "the same three primitives on buffers already in their layouts: no reorders");
    items.push_back({&r->dnnl, OnWorker(ctx, anchor_var.get(), [&] { raw->Call(true); })});
    items.push_back({&r->dnnl_blocked, OnWorker(ctx, anchor_var.get(), [&] { raw->Call(false); })});
  }
#endif
  MeasureInterleaved(items, repeat, min_time);
  if (openblas_get_num_threads() != r->blas_threads) {
    r->errors.push_back("the OpenBLAS thread count changed while measuring (" + std::to_string(r->blas_threads) +
                        " -> " + std::to_string(openblas_get_num_threads()) + "): the comparison is not fair");
  }
  if (!r->op.measured()) return;

  // Checks: sampled entries against the direct convolution in double. The output is sampled in the first and
  // the last image, every sample a different position (the borders, where the padding is, included by chance).
  const ConvReference ref(s, hx, hw_, hb, hdy);
  const std::vector<float> gy = y.ToVector<float>(), gdx = dx.ToVector<float>(), gdw = dw.ToVector<float>();
  const std::vector<float> gdb = db.ToVector<float>();
  Sampler smp(static_cast<std::uint64_t>(s.Ckk()) * 7919 + static_cast<std::uint64_t>(s.Hw()));
  double e_out = 0, e_dx = 0, e_dw = 0;
  for (int t = 0; t < kSpotChecks; ++t) {
    const std::int64_t n = t % 2 == 0 ? 0 : s.batch - 1;
    const std::int64_t fo = smp.Next(s.filters), oh = smp.Next(s.OutH()), ow = smp.Next(s.OutW());
    const std::size_t yi = static_cast<std::size_t>(((n * s.filters + fo) * s.OutH() + oh) * s.OutW() + ow);
    e_out = std::max(e_out, ref.Out(n, fo, oh, ow).ErrorOf(gy[yi]));
    const std::int64_t c = smp.Next(s.channels), ih = smp.Next(s.height), iw = smp.Next(s.width);
    const std::size_t xi = static_cast<std::size_t>(((n * s.channels + c) * s.height + ih) * s.width + iw);
    e_dx = std::max(e_dx, ref.DataGrad(n, c, ih, iw).ErrorOf(gdx[xi]));
    const std::int64_t i = smp.Next(s.kernel), j = smp.Next(s.kernel);
    const std::size_t wi = static_cast<std::size_t>(((fo * s.channels + c) * s.kernel + i) * s.kernel + j);
    e_dw = std::max(e_dw, ref.WeightGrad(fo, c, i, j).ErrorOf(gdw[wi]));
  }
  r->error_out = e_out;
  r->error_dx = e_dx;
  r->error_dw = e_dw;
  // db[f] = sum over the batch and the positions of dY[n, f, :, :]: dY seen as (batch x F) rows of HW.
  std::vector<RefSum> db_ref(static_cast<std::size_t>(s.filters));
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t fo = 0; fo < s.filters; ++fo) {
      const float* plane = &hdy[static_cast<std::size_t>((n * s.filters + fo) * s.Hw())];
      for (std::int64_t q = 0; q < s.Hw(); ++q) db_ref[static_cast<std::size_t>(fo)].Add(plane[q]);
    }
  }
  r->error_db = WorstError(db_ref, gdb);
  Check(&r->errors, "output differs from the direct convolution at sampled entries", e_out);
  Check(&r->errors, "data gradient differs from the direct convolution at sampled entries", e_dx);
  Check(&r->errors, "weight gradient differs from the direct convolution at sampled entries", e_dw);
  Check(&r->errors, "bias gradient differs from the sums of dY", r->error_db);
}

Json ConvJson(const ConvReport& r) {
  const double flops = r.Flops();
  const auto gflops = [flops](double s) { return s > 0 ? flops / s / 1e9 : 0.0; };
  const ConvShape& s = r.shape;
  Json j;
  j["name"] = s.name;
  j["layer"] = s.Describe();
  j["batch"] = s.batch;
  j["channels"] = s.channels;
  j["height"] = s.height;
  j["width"] = s.width;
  j["filters"] = s.filters;
  j["kernel"] = s.kernel;
  j["pad"] = s.pad;
  j["output"] = {s.batch, s.filters, s.OutH(), s.OutW()};
  j["batch_reduced"] = r.batch_reduced;
  j["gemm_shapes_per_image"] = {
      {"forward", std::to_string(s.filters) + "x" + std::to_string(s.Ckk()) + " times " + std::to_string(s.Ckk()) +
                      "x" + std::to_string(s.Hw())},
      {"backward_data", std::to_string(s.Ckk()) + "x" + std::to_string(s.filters) + " times " +
                            std::to_string(s.filters) + "x" + std::to_string(s.Hw())},
      {"backward_weight", std::to_string(s.filters) + "x" + std::to_string(s.Hw()) + " times " +
                              std::to_string(s.Hw()) + "x" + std::to_string(s.Ckk())}};
  j["flops_per_call"] = flops;
  j["flops_meaning"] = "6 x batch x F x CKK x HW: the three products per image, 2 x F x CKK x HW each";
  j["blas_threads"] = r.blas_threads;
  j["operator"] = SeriesJson(r.op, "gflops", gflops);
  if (r.has_anchor) {
    j["anchor"] = SeriesJson(r.anchor, "gflops", gflops);
    j["ratio"] = OptNum(r.Ratio());
    j["ratio_best"] = OptNum(r.RatioBest());
    j["ratio_meaning"] =
        "sgemm-bound time / operator time (medians; ratio_best: the best runs), i.e. operator GFLOP/s / bound "
        "GFLOP/s. 1 = the layer costs only its products; the rest is im2col, col2im, the bias, zeroing the data "
        "gradient and the engine. Null when a check failed.";
  } else {
    j["anchor"] = nullptr;
  }
  if (r.has_dnnl) {
    j["dnnl_impl"] = r.dnnl_impl;
    j["dnnl_raw"] = SeriesJson(r.dnnl, "gflops", gflops);
    j["dnnl_blocked"] = SeriesJson(r.dnnl_blocked, "gflops", gflops);
    j["ratio_dnnl_raw"] = OptNum(r.RatioDnnl(r.dnnl));
    j["ratio_dnnl_blocked"] = OptNum(r.RatioDnnl(r.dnnl_blocked));
    j["ratio_dnnl_meaning"] =
        "raw primitives' time / operator time (medians): dnnl_raw with the reorders from and to NCHW that the "
        "operator's arrays need, dnnl_blocked without them (the most oneDNN gives when a whole network stays "
        "blocked)";
  } else {
    j["dnnl_raw"] = nullptr;
  }
  j["check"] = {{"output_error", r.error_out},
                {"data_grad_error", r.error_dx},
                {"weight_grad_error", r.error_dw},
                {"bias_grad_error", r.error_db},
                {"tolerance", kTolerance},
                {"meaning",
                 "max over " + std::to_string(kSpotChecks) +
                     " sampled entries (output and data gradient: half in the first image, half in the last) of "
                     "|operator - direct convolution in double| / sum of the terms' magnitudes; bias_grad_error: "
                     "every filter against the double sum of dY. -1: not measured"},
                {"ok", r.errors.empty()},
                {"errors", r.errors}};
  j["ok"] = r.ok();
  return j;
}

// ---------------------------------------------------------------------------------------------------
// pool

struct PoolShape {
  std::string name;
  int batch = 0, channels = 0, height = 0, width = 0, kernel = 0, stride = 0, pad = 0;
  bool max = true;  // else avg (count_include_pad)
  bool global = false;

  int OutH() const { return global ? 1 : (height + 2 * pad - kernel) / stride + 1; }
  int OutW() const { return global ? 1 : (width + 2 * pad - kernel) / stride + 1; }
  // Bytes a call reads and writes (the input once, the output once).
  double Bytes() const {
    return 4.0 * batch * channels * (static_cast<double>(height) * width + static_cast<double>(OutH()) * OutW());
  }
  std::string Geometry() const {
    return std::to_string(batch) + "," + std::to_string(channels) + "," + std::to_string(height) + "x" +
           std::to_string(width) + (global ? ",global" : ",k" + std::to_string(kernel) + ",s" + std::to_string(stride) +
                                                             ",p" + std::to_string(pad));
  }
};

struct PoolReport {
  PoolShape shape;
  Series op;
  bool has_dnnl = false;
  Series dnnl;
  double error_out = -1;
  std::vector<std::string> errors;
  bool ok() const { return errors.empty() && op.ok() && (!has_dnnl || dnnl.ok()); }
  std::optional<double> RatioDnnl() const {
    if (!has_dnnl || !op.measured() || !dnnl.measured() || !ok()) return std::nullopt;
    return dnnl.Median() / op.Median();
  }
};

#if TROUPE_HAVE_DNNL
// oneDNN's pooling forward as Pooling's CPU operator sets it up (forward_inference on the NCHW buffers),
// called directly: no engine, no operator.
class DnnlPoolAnchor {
 public:
  DnnlPoolAnchor(const PoolShape& s, const float* x, float* y) : eng_(dnnl::engine::kind::cpu, 0), st_(eng_) {
    omp_set_num_threads(openblas_get_num_threads());
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc xd({s.batch, s.channels, s.height, s.width}, dt::f32, tag::nchw);
    const dnnl::memory::desc yd({s.batch, s.channels, s.OutH(), s.OutW()}, dt::f32, tag::nchw);
    const dnnl::memory::dim k = s.global ? s.height : s.kernel, kw = s.global ? s.width : s.kernel;
    const dnnl::memory::dim st = s.global ? 1 : s.stride, p = s.global ? 0 : s.pad;
    // The right padding that gives the floor convention's output size (as the operator computes it).
    const dnnl::memory::dim rh = (s.OutH() - 1) * st + k - s.height - p, rw = (s.OutW() - 1) * st + kw - s.width - p;
    const dnnl::pooling_v2_forward::primitive_desc pd(
        {dnnl::prop_kind::forward_inference,
         s.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding, xd, yd, {st, st},
         {k, kw}, {0, 0}, {p, p}, {rh, rw}},
        eng_);
    impl_ = pd.impl_info_str();
    fwd_ = dnnl::pooling_v2_forward(pd);
    x_ = dnnl::memory(xd, eng_, const_cast<float*>(x));
    y_ = dnnl::memory(yd, eng_, y);
  }
  const std::string& impl() const { return impl_; }
  void Call() {
    if (omp_get_max_threads() != openblas_get_num_threads()) omp_set_num_threads(openblas_get_num_threads());
    fwd_.execute(st_, {{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_}});
    st_.wait();
  }

 private:
  dnnl::engine eng_;
  dnnl::stream st_;
  dnnl::pooling_v2_forward fwd_;
  dnnl::memory x_, y_;
  std::string impl_;
};
#endif  // TROUPE_HAVE_DNNL

void RunPool(PoolReport* r, Context ctx, int repeat, double min_time) {
  const PoolShape& s = r->shape;
  r->op = MakeSeries("operator", "Pooling forward through OperatorRunner on " + ctx.ToString() +
                                     " (is_train), then WaitToRead on the output");
  const TShape x_shape({s.batch, s.channels, s.height, s.width}), y_shape({s.batch, s.channels, s.OutH(), s.OutW()});
  const std::vector<float> hx = RandomFloats(static_cast<std::size_t>(x_shape.Size()), 21);
  Kwargs kw = {{"pool_type", s.max ? "max" : "avg"}};
  if (s.global) {
    kw.push_back({"global_pool", "True"});
    kw.push_back({"kernel", "(1,1)"});
  } else {
    const auto pair = [](int v) { return "(" + std::to_string(v) + "," + std::to_string(v) + ")"; };
    kw.push_back({"kernel", pair(s.kernel)});
    kw.push_back({"stride", pair(s.stride)});
    kw.push_back({"pad", pair(s.pad)});
  }
  OperatorRunner runner(MakeProp("Pooling", kw), ctx, {x_shape}, {static_cast<int>(DType::kFloat32)});
  if (runner.out_shapes().at(0) != y_shape) {
    throw Error("Pooling inferred the output shape " + runner.out_shapes().at(0).ToString() + ", expected " +
                y_shape.ToString());
  }
  const NDArray x = ArrayOf(hx, x_shape, ctx), y(y_shape, ctx);
  const Body op = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      runner.Forward(true, {x}, {y}, {});
      y.WaitToRead();
    });
  };
  std::vector<Measured> items = {{&r->op, op}};
  const AnchorVar anchor_var;
  std::vector<float> ry(static_cast<std::size_t>(y_shape.Size()));
#if TROUPE_HAVE_DNNL
  std::unique_ptr<DnnlPoolAnchor> raw;
  if (!ctx.is_gpu() && DnnlInUse()) {
    RunOnWorker(ctx, anchor_var.get(), [&] { raw = std::make_unique<DnnlPoolAnchor>(s, hx.data(), ry.data()); });
    r->has_dnnl = true;
    r->dnnl = MakeSeries("dnnl_raw",
                         "oneDNN's pooling forward primitive (" + raw->impl() +
                             ") as the operator sets it up, on the NCHW buffers, in one engine function per call on "
                             "the CPU worker, OpenMP threads = the engine's kernel threads");
    items.push_back({&r->dnnl, OnWorker(ctx, anchor_var.get(), [&] { raw->Call(); })});
  }
#endif
  MeasureInterleaved(items, repeat, min_time);
  if (!r->op.measured()) return;
  // Checks: every output against the window in double (max: exact; avg: relative to the sum of magnitudes),
  // and the operator's output equal to the raw primitive's.
  const std::vector<float> gy = y.ToVector<float>();
  const int kh = s.global ? s.height : s.kernel, kwid = s.global ? s.width : s.kernel;
  const int st = s.global ? 1 : s.stride, p = s.global ? 0 : s.pad;
  double err = 0, raw_diff = 0;
  for (std::int64_t nc = 0; nc < static_cast<std::int64_t>(s.batch) * s.channels; ++nc) {
    const float* plane = &hx[static_cast<std::size_t>(nc * s.height * s.width)];
    for (int oh = 0; oh < s.OutH(); ++oh) {
      for (int ow = 0; ow < s.OutW(); ++ow) {
        double best = -INFINITY;
        RefSum sum;
        for (int i = 0; i < kh; ++i) {
          for (int j = 0; j < kwid; ++j) {
            const int ih = oh * st - p + i, iw = ow * st - p + j;
            if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
            best = std::max(best, static_cast<double>(plane[ih * s.width + iw]));
            sum.Add(plane[ih * s.width + iw]);
          }
        }
        const std::size_t yi = static_cast<std::size_t>((nc * s.OutH() + oh) * s.OutW() + ow);
        if (s.max) {
          err = std::max(err, std::fabs(best - gy[yi]));
        } else {
          RefSum avg;
          avg.sum = sum.sum / (kh * kwid);
          avg.scale = sum.scale / (kh * kwid);
          err = std::max(err, avg.ErrorOf(gy[yi]));
        }
        if (r->has_dnnl) raw_diff = std::max(raw_diff, static_cast<double>(std::fabs(ry[yi] - gy[yi])));
      }
    }
  }
  r->error_out = err;
  Check(&r->errors, "output differs from the pooling windows computed in double", err);
  if (r->has_dnnl && raw_diff != 0) {
    r->errors.push_back("output differs from the raw oneDNN primitive's by up to " + Fmt("%g", raw_diff));
  }
}

Json PoolJson(const PoolReport& r) {
  const double bytes = r.shape.Bytes();
  const auto gbps = [bytes](double s) { return s > 0 ? bytes / s / 1e9 : 0.0; };
  Json j;
  j["name"] = r.shape.name;
  j["layer"] = std::string("Pooling ") + (r.shape.max ? "max" : "avg") + " " + r.shape.Geometry() + ", float32, NCHW";
  j["operator"] = SeriesJson(r.op, "gb_per_s", gbps);
  if (r.has_dnnl) {
    j["dnnl_raw"] = SeriesJson(r.dnnl, "gb_per_s", gbps);
    j["ratio_dnnl_raw"] = OptNum(r.RatioDnnl());
    j["ratio_dnnl_meaning"] = "raw primitive's time / operator time (medians); GB/s counts the input read and the output written once";
  } else {
    j["dnnl_raw"] = nullptr;
  }
  j["check"] = {{"output_error", r.error_out},
                {"tolerance", kTolerance},
                {"meaning", "max over every output of |operator - the window's max or average in double| (max: "
                            "absolute; avg: relative to the sum of magnitudes); the output must also equal the raw "
                            "primitive's"},
                {"ok", r.errors.empty()},
                {"errors", r.errors}};
  j["ok"] = r.ok();
  return j;
}

// ---------------------------------------------------------------------------------------------------
// The benchmark: options, the workloads in order, the report.

class OpsBench {
 public:
  explicit OpsBench(const OpsBenchOptions& options) : opt_(options) {}
  int Run();

 private:
  bool Selected(const std::string& w) const {
    return std::find(opt_.workloads.begin(), opt_.workloads.end(), w) != opt_.workloads.end();
  }
  void Log(const std::string& line) const {
    std::fprintf(stderr, "[bench ops %6.1f s] %s\n", Seconds(t0_, Clock::now()), line.c_str());
  }
  bool gpu() const { return opt_.ctx == "gpu"; }
  Json OtherCpuSeconds() const {
    const CpuTimes now = CpuTimes::Now();
    if (now.machine < 0 || now.self < 0 || cpu_at_start_.machine < 0 || cpu_at_start_.self < 0) return nullptr;
    return std::max(0.0, (now.machine - cpu_at_start_.machine) - (now.self - cpu_at_start_.self));
  }
  Context ctx() const { return gpu() ? Context::GPU(0) : Context::CPU(0); }
  std::vector<FcShape> FcShapes() const;
  std::vector<ConvShape> ConvShapes() const;
  std::vector<PoolShape> PoolShapes() const;
  void CollectFailures();
  Json Targets() const;
  Json BuildJson() const;
  bool WriteJson() const;
  void PrintTable() const;

  OpsBenchOptions opt_;
  Clock::time_point t0_ = Clock::now();
  std::string started_;
  std::string load_at_start_;
  CpuTimes cpu_at_start_;
  Clock::time_point wall_at_start_;
  std::string runtime_config_;
  std::string engine_type_;
  int blas_threads_ = 0;
  std::vector<FcReport> fcs_;
  std::vector<ConvReport> convs_;
  std::vector<PoolReport> pools_;
  std::vector<std::string> failures_;
};

std::vector<FcShape> OpsBench::FcShapes() const {
  if (opt_.quick) return {{8, 32, 16}, {16, 64, 32}};
  return {{64, 784, 128}, {128, 1024, 1024}, {256, 4096, 1024}};
}

std::vector<ConvShape> OpsBench::ConvShapes() const {
  const int rb = opt_.resnet_batch;
  if (opt_.quick) {
    return {{"lenet", 2, 1, 12, 12, 4, 5, 0}, {"resnet", rb, 8, 10, 10, 8, 3, 1}};
  }
  // ResNet-18's 3x3 stride-1 layers, one per stage (ImageNet input).
  return {{"lenet", 64, 1, 28, 28, 20, 5, 0},
          {"resnet", rb, 64, 56, 56, 64, 3, 1},
          {"resnet128", rb, 128, 28, 28, 128, 3, 1},
          {"resnet256", rb, 256, 14, 14, 256, 3, 1},
          {"resnet512", rb, 512, 7, 7, 512, 3, 1}};
}

std::vector<PoolShape> OpsBench::PoolShapes() const {
  const int rb = opt_.resnet_batch;
  if (opt_.quick) return {{"lenet_max", 2, 3, 8, 8, 2, 2, 0, true, false}, {"resnet_avg", rb, 4, 3, 3, 0, 0, 0, false, true}};
  // LeNet's 2x2 max pooling, ResNet-18's stem (3x3 stride 2 pad 1 max) and its global average.
  return {{"lenet_max", 64, 20, 24, 24, 2, 2, 0, true, false},
          {"resnet_max", rb, 64, 112, 112, 3, 2, 1, true, false},
          {"resnet_avg", rb, 512, 7, 7, 0, 0, 0, false, true}};
}

void OpsBench::CollectFailures() {
  auto add = [this](const std::string& where, const Series& s) {
    for (const std::string& e : s.errors) failures_.push_back(where + " " + s.name + ": " + e);
  };
  for (const FcReport& r : fcs_) {
    const std::string where = "fc " + r.shape.Name();
    add(where, r.op);
    add(where, r.anchor);
    for (const std::string& e : r.errors) failures_.push_back(where + ": " + e);
  }
  for (const ConvReport& r : convs_) {
    const std::string where = "conv " + r.shape.name;
    add(where, r.op);
    add(where, r.anchor);
    for (const std::string& e : r.errors) failures_.push_back(where + ": " + e);
  }
  for (const PoolReport& r : pools_) {
    const std::string where = "pool " + r.shape.name;
    add(where, r.op);
    if (r.has_dnnl) add(where, r.dnnl);
    for (const std::string& e : r.errors) failures_.push_back(where + ": " + e);
  }
}

Json OpsBench::Targets() const {
  Json targets = Json::array();
  if (gpu()) return targets;  // no anchor, no ratio
  const auto add = [&targets](const std::string& name, const std::string& description, double threshold,
                               std::optional<double> ratio) {
    targets.push_back({{"name", name},
                       {"description", description},
                       {"threshold", threshold},
                       {"ratio", OptNum(ratio)},
                       {"met", ratio.has_value() && *ratio >= threshold}});
  };
  for (const FcReport& r : fcs_) {
    add("fc " + r.shape.Name() + " ratio >= 0.9",
        "FullyConnected forward + backward >= 0.9 x the speed of its three raw sgemm calls (medians)", kFcTargetRatio,
        r.Ratio());
  }
  for (const ConvReport& r : convs_) {
    add("conv " + r.shape.name + " ratio >= 0.7",
        "Convolution forward + backward >= 0.7 x the speed of the sgemm calls of its im2col shapes (medians)",
        kConvTargetRatio, r.Ratio());
    if (r.has_dnnl) {
      add("conv " + r.shape.name + " vs oneDNN >= 0.95",
          "Convolution forward + backward >= 0.95 x the speed of its raw oneDNN primitives on the same NCHW "
          "buffers, reorders included (medians)",
          kConvTargetDnnlRatio, r.RatioDnnl(r.dnnl));
    }
  }
  for (const PoolReport& r : pools_) {
    if (!r.has_dnnl) continue;
    add("pool " + r.shape.name + " vs oneDNN >= 0.95",
        "Pooling forward >= 0.95 x the speed of its raw oneDNN primitive on the same NCHW buffers (medians)",
        kConvTargetDnnlRatio, r.RatioDnnl());
  }
  return targets;
}

Json OpsBench::BuildJson() const {
  Json root;
  root["benchmark"] = "ops";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started_;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()},
                     {"hardware_concurrency", std::thread::hardware_concurrency()},
                     {"cpu_model", CpuModel()},
                     {"compiler", __VERSION__},
                     {"openblas_config", openblas_get_config()},
                     {"openblas_corename", openblas_get_corename()},
                     {"openblas_threads", blas_threads_},
                     {"gpus", Runtime::GpuCount()},
                     {"load_average_at_start", load_at_start_},
                     {"load_average_at_end", LoadAverage()},
                     {"load_average_meaning",
                      "/proc/loadavg over 1, 5 and 15 minutes: this run adds up to its OpenBLAS thread count; "
                      "more means another process competed for the cores"},
                     {"other_processes_cpu_seconds", OtherCpuSeconds()},
                     {"run_wall_seconds", Seconds(wall_at_start_, Clock::now())},
                     {"other_processes_meaning",
                      "CPU seconds every other process used over the run (/proc/stat minus /proc/self/stat); next "
                      "to run_wall_seconds x cores it says how much of the machine the benchmark did not have"}};
  root["engine"] = {{"type", engine_type_},
                    {"runtime", runtime_config_},
                    {"storage_policy", PoolPolicyName(Storage::Get()->config().cpu_policy)}};
  root["config"] = {
      {"quick", opt_.quick},
      {"repeat", opt_.repeat},
      {"min_time_s", opt_.min_time_s},
      {"min_calls", kMinCalls},
      {"max_seconds_per_run", "min_time_s x " + Fmt("%g", kRunOverrun) +
                                  " (a run sized by a much faster warm-up is cut short, never below min_calls)"},
      {"ctx", ctx().ToString()},
      {"workloads", opt_.workloads},
      {"resnet_batch", opt_.resnet_batch},
      {"resnet_batch_default", kOpsDefaultResNetBatch},
      {"warmup",
       "per series: one untimed call, then untimed runs of growing length that size a timed run to min_time_s "
       "(at least min_calls calls)"},
      {"order", "in each of the repeat rounds every series of a comparison runs once (operator and anchor alternate)"},
      {"value", "median of the timed runs (seconds per call, and the derived figure of each run); best = fastest run"},
      {"fairness",
       "the engine is started before anything is timed, so OpenBLAS already runs with the thread count the runtime "
       "set (RuntimeConfig::blas_threads); the sgemm anchors call the library of the operators' products "
       "(sgemm_library) on the benchmark's thread with that same thread count, while the operators run on an "
       "engine worker; the raw oneDNN anchors run in engine functions on that worker"}};
  root["config"]["sgemm_library"] = SgemmLibrary();
  Json fcs = Json::array();
  for (const FcReport& r : fcs_) fcs.push_back(FcJson(r));
  Json convs = Json::array();
  for (const ConvReport& r : convs_) convs.push_back(ConvJson(r));
  root["fc"] = fcs;
  root["conv"] = convs;
  Json pools = Json::array();
  for (const PoolReport& r : pools_) pools.push_back(PoolJson(r));
  root["pool"] = pools;
  Json notes = Json::array();
  notes.push_back(
      "fc: the operator's time includes two pushes (Forward, Backward), the hand-off to an engine worker, the "
      "bias add and the bias gradient (a pass over Y and one over dY), and the wake-up of the waiting thread; "
      "the products are the same sgemm calls.");
  notes.push_back(
      "conv: the sgemm bound leaves out everything but the products: im2col in the forward pass and again in the "
      "backward pass (the weight gradient needs the columns), col2im and the zeroing of the data gradient, the "
      "bias add and the bias gradient, and the engine.");
  if (opt_.quick) notes.push_back("quick: tiny shapes; the figures and the targets say nothing about speed.");
  if (gpu()) {
    notes.push_back("gpu: the operators run on GPU 0 (cuBLAS / cuDNN); there is no anchor, so no ratio and no target.");
  }
  root["notes"] = notes;
  root["targets"] = Targets();
  root["failures"] = failures_;
  root["ok"] = failures_.empty();
  return root;
}

bool OpsBench::WriteJson() const { return WriteJsonFile(opt_.json_path, BuildJson(), "troupe bench ops"); }

void OpsBench::PrintTable() const {
  const auto cell = [](std::optional<double> v, const char* format) { return v ? Fmt(format, *v) : std::string("-"); };
  const auto ok = [](bool good) { return good ? "ok" : "FAILED"; };
  std::printf("troupe bench ops on %s: %d timed runs per figure (medians), machine: %d cores, OpenBLAS threads %d\n",
              ctx().ToString().c_str(), opt_.repeat, AvailableCores(), blas_threads_);
  const char* anchor_name = gpu() ? "-" : "sgemm";
  if (!fcs_.empty()) {
    std::printf("\nfc  FullyConnected forward + backward [GFLOP/s, higher is better%s]\n",
                gpu() ? "" : "; ratio = operator / 3 x sgemm");
    std::printf("  %-18s %10s %10s %8s %8s %10s  %s\n", "batch x in x out", "operator", anchor_name, "ratio", "best",
                "max_error", "check");
    for (const FcReport& r : fcs_) {
      const auto g = [&r](const Series& s) {
        return s.measured() ? std::optional<double>(r.Flops() / s.Median() / 1e9) : std::nullopt;
      };
      const double err = std::max({r.error_out, r.error_dx, r.error_dw, r.error_db});
      std::printf("  %-18s %10s %10s %8s %8s %10s  %s\n", r.shape.Name().c_str(), cell(g(r.op), "%.2f").c_str(),
                  cell(g(r.anchor), "%.2f").c_str(), cell(r.Ratio(), "%.3f").c_str(),
                  cell(r.RatioBest(), "%.3f").c_str(), Fmt("%.2g", err).c_str(), ok(r.ok()));
    }
  }
  if (!convs_.empty()) {
    std::printf("\nconv  Convolution forward + backward [GFLOP/s, higher is better%s]\n",
                gpu() ? "" : "; ratio = operator / sgemm bound, then operator / raw oneDNN primitives with reorders; "
                             "blocked: the primitives without reorders");
    std::printf("  %-9s %-26s %10s %10s %8s %8s %10s %8s %10s  %s\n", "layer", "N,C->F,HxW,k,pad", "operator",
                gpu() ? "-" : "bound", "ratio", "best", "oneDNN", "ratio", "blocked", "check");
    for (const ConvReport& r : convs_) {
      const auto g = [&r](const Series& s) {
        return s.measured() ? std::optional<double>(r.Flops() / s.Median() / 1e9) : std::nullopt;
      };
      const ConvShape& s = r.shape;
      const std::string geo = std::to_string(s.batch) + "," + std::to_string(s.channels) + "->" +
                              std::to_string(s.filters) + "," + std::to_string(s.height) + "x" +
                              std::to_string(s.width) + ",k" + std::to_string(s.kernel) + ",p" + std::to_string(s.pad);
      std::printf("  %-9s %-26s %10s %10s %8s %8s %10s %8s %10s  %s\n", s.name.c_str(), geo.c_str(),
                  cell(g(r.op), "%.2f").c_str(), cell(g(r.anchor), "%.2f").c_str(), cell(r.Ratio(), "%.3f").c_str(),
                  cell(r.RatioBest(), "%.3f").c_str(), cell(r.has_dnnl ? g(r.dnnl) : std::nullopt, "%.2f").c_str(),
                  cell(r.RatioDnnl(r.dnnl), "%.3f").c_str(),
                  cell(r.has_dnnl ? g(r.dnnl_blocked) : std::nullopt, "%.2f").c_str(), ok(r.ok()));
    }
  }
  if (!pools_.empty()) {
    std::printf("\npool  Pooling forward [GB/s of input read and output written, higher is better%s]\n",
                gpu() ? "" : "; ratio = operator / raw oneDNN primitive");
    std::printf("  %-11s %-4s %-22s %10s %10s %8s  %s\n", "layer", "type", "N,C,HxW,k,s,p", "operator", "oneDNN",
                "ratio", "check");
    for (const PoolReport& r : pools_) {
      const auto g = [&r](const Series& s) {
        return s.measured() ? std::optional<double>(r.shape.Bytes() / s.Median() / 1e9) : std::nullopt;
      };
      std::printf("  %-11s %-4s %-22s %10s %10s %8s  %s\n", r.shape.name.c_str(), r.shape.max ? "max" : "avg",
                  r.shape.Geometry().c_str(), cell(g(r.op), "%.2f").c_str(),
                  cell(r.has_dnnl ? g(r.dnnl) : std::nullopt, "%.2f").c_str(), cell(r.RatioDnnl(), "%.3f").c_str(),
                  ok(r.ok()));
    }
  }
  const Json targets = Targets();
  if (!targets.empty()) {
    std::printf("\ntargets:\n");
    for (const Json& t : targets) {
      const std::string figure = t["ratio"].is_null() ? "ratio n/a" : "ratio " + Fmt("%.3f", t["ratio"].get<double>());
      std::printf("  %-32s %-16s %s\n", t["name"].get<std::string>().c_str(), figure.c_str(),
                  t["met"].get<bool>() ? "met" : "NOT met");
    }
  }
  std::printf("\nin-run checks: %s\n", failures_.empty() ? "all passed" : "FAILED (see stderr and the JSON)");
  std::fflush(stdout);
}

int OpsBench::Run() {
  // Validate (the CLI checks these too; a library caller may not).
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "troupe bench ops: %s\n", what.c_str());
    return 2;
  };
  if (opt_.json_path.empty()) return bad("--json FILE is required");
  if (opt_.repeat < 0 || opt_.repeat > 1000) return bad("--repeat must be in 1..1000");
  if (!(opt_.min_time_s >= 0 && opt_.min_time_s <= 60)) return bad("--min-time must be in (0, 60] seconds");
  if (opt_.workloads.empty()) return bad("--workloads needs one or more of fc, conv, pool");
  for (const std::string& w : opt_.workloads) {
    const auto& known = OpsBenchWorkloads();
    if (std::find(known.begin(), known.end(), w) == known.end()) {
      return bad("unknown workload '" + w + "' (known: fc, conv, pool)");
    }
  }
  if (opt_.ctx != "cpu" && opt_.ctx != "gpu") return bad("--ctx must be cpu or gpu, not '" + opt_.ctx + "'");
  if (opt_.resnet_batch < 0 || opt_.resnet_batch > kMaxResNetBatch) {
    return bad("--resnet-batch must be in 1.." + std::to_string(kMaxResNetBatch));
  }
  if (gpu() && Runtime::GpuCount() == 0) {
    return bad(
        "--ctx gpu needs a CUDA device, and this machine has none (no driver, no device, or a build without "
        "CUDA); run without --ctx gpu to measure the CPU operators");
  }
  if (opt_.repeat == 0) opt_.repeat = opt_.quick ? 1 : kOpsDefaultRepeat;
  if (opt_.min_time_s == 0) opt_.min_time_s = opt_.quick ? kQuickMinTime : kOpsDefaultMinTime;
  if (opt_.resnet_batch == 0) opt_.resnet_batch = opt_.quick ? 2 : kOpsDefaultResNetBatch;
  for (const char* op : {"FullyConnected", "Convolution", "Pooling"}) {
    if (OperatorRegistry::Get().Find(op) == nullptr) {
      std::fprintf(stderr, "troupe bench ops: the operator %s is not registered in this build\n", op);
      return 1;
    }
  }
  {
    // Fail before minutes of measuring if the file can not be written.
    std::ofstream probe(opt_.json_path, std::ios::trunc);
    if (!probe) return bad("can not write " + opt_.json_path);
  }
  started_ = UtcNow();
  load_at_start_ = LoadAverage();
  cpu_at_start_ = CpuTimes::Now();
  wall_at_start_ = Clock::now();

  // Start the engine before anything is timed: the runtime sets OpenBLAS's thread count when it starts,
  // and the anchors must run with the count the engine's workers use.
  try {
    const EngineConfig config = EngineConfig::FromEnv();
    runtime_config_ = config.runtime.Resolved().ToString();
    engine_type_ = EngineTypeName(config.type);
    NDArray probe = NDArray::Full(TShape({4}), 1.0, Context::CPU(0));
    probe += 1.0;
    probe.WaitToRead();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe bench ops: could not start the engine: %s\n", e.what());
    return 1;
  }
  blas_threads_ = openblas_get_num_threads();
  Log("warm-up + " + std::to_string(opt_.repeat) + " timed runs of >= " + Fmt("%g", opt_.min_time_s) +
      " s per figure on " + ctx().ToString() + "; " + std::to_string(AvailableCores()) + " cores (" + CpuModel() +
      "), OpenBLAS threads " + std::to_string(blas_threads_) + ", engine " + engine_type_ + " (" + runtime_config_ +
      ")");

  // Runs one item, turning an exception into a failure of that item (and draining the engine, so that no
  // pushed function outlives the arrays of the item).
  auto guarded = [this](const std::string& what, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      failures_.push_back(what + ": threw: " + e.what());
      Log(what + ": FAILED: " + e.what());
      Drain();
    }
  };
  const auto gflops = [](double flops, const Series& s) {
    return s.measured() ? Fmt("%.2f", flops / s.Median() / 1e9) : std::string("-");
  };

  if (Selected("fc")) {
    for (const FcShape& shape : FcShapes()) {
      FcReport& r = fcs_.emplace_back();
      r.shape = shape;
      guarded("fc " + shape.Name(), [&] { RunFc(&r, ctx(), opt_.repeat, opt_.min_time_s); });
      Log("fc " + shape.Name() + ": operator " + gflops(r.Flops(), r.op) + " GFLOP/s" +
          (gpu() ? std::string()
                 : ", 3 x sgemm " + gflops(r.Flops(), r.anchor) + " (ratio " +
                       (r.Ratio() ? Fmt("%.3f", *r.Ratio()) : "-") + ")") +
          (r.ok() ? "" : "  FAILED"));
    }
  }
  if (Selected("conv")) {
    for (const ConvShape& shape : ConvShapes()) {
      ConvReport& r = convs_.emplace_back();
      r.shape = shape;
      r.batch_reduced = !opt_.quick && shape.name.starts_with("resnet") && shape.batch < kOpsDefaultResNetBatch;
      guarded("conv " + shape.name, [&] { RunConv(&r, ctx(), opt_.repeat, opt_.min_time_s); });
      Log("conv " + shape.name + ": operator " + gflops(r.Flops(), r.op) + " GFLOP/s" +
          (gpu() ? std::string()
                 : ", sgemm bound " + gflops(r.Flops(), r.anchor) + " (ratio " +
                       (r.Ratio() ? Fmt("%.3f", *r.Ratio()) : "-") + ")") +
          (r.ok() ? "" : "  FAILED"));
    }
  }
  if (Selected("pool")) {
    for (const PoolShape& shape : PoolShapes()) {
      PoolReport& r = pools_.emplace_back();
      r.shape = shape;
      guarded("pool " + shape.name, [&] { RunPool(&r, ctx(), opt_.repeat, opt_.min_time_s); });
      Log("pool " + shape.name + ": operator " +
          (r.op.measured() ? Fmt("%.2f", shape.Bytes() / r.op.Median() / 1e9) : std::string("-")) + " GB/s" +
          (r.RatioDnnl() ? ", raw oneDNN ratio " + Fmt("%.3f", *r.RatioDnnl()) : std::string()) +
          (r.ok() ? "" : "  FAILED"));
    }
  }
  Drain();

  CollectFailures();
  for (const std::string& f : failures_) Log("check failed: " + f);
  const bool written = WriteJson();
  PrintTable();
  Log("wrote " + opt_.json_path);
  return (failures_.empty() && written) ? 0 : 1;
}

}  // namespace

const std::vector<std::string>& OpsBenchWorkloads() {
  static const std::vector<std::string> kWorkloads = {"fc", "conv", "pool"};
  return kWorkloads;
}

int RunOpsBench(const OpsBenchOptions& options) {
  OpsBench bench(options);
  return bench.Run();
}

// --- `troupe bench ops`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kOpsBenchmarkDescription =
    "Measure the dense-layer operators, run as the executor runs them (OperatorRunner: Forward and Backward "
    "pushed to the engine, then WaitToRead on the output and the gradients), against the BLAS products they "
    "are made of, each anchor measured in the same run and alternated with its figure. Every figure runs once "
    "untimed (warm-up, which also sizes a run to --min-time seconds or at least 3 calls) and then --repeat "
    "times; the median and the best run are reported. (a) fc: FullyConnected forward + backward (data, weight "
    "and bias gradients) on float32 CPU arrays, batch x in x out = 64x784x128, 128x1024x1024 and "
    "256x4096x1024, against its three raw sgemm calls (Y = X W^T, dX = dY W, dW = dY^T X; oneDNN's dnnl_sgemm, "
    "or OpenBLAS with TROUPE_DNNL=0: the library of the operator's products) on plain buffers with the "
    "engine's kernel-thread count, in GFLOP/s (6 x batch x in x out per call); check: the "
    "output and the gradients equal the anchor's (relative error < 1e-4). (b) conv: Convolution forward + "
    "backward for a LeNet-sized layer (batch 64, 1 -> 20 channels, 28x28, kernel 5) and ResNet-18's 3x3 "
    "layers (batch 32; 64 channels at 56x56, 128 at 28x28, 256 at 14x14, 512 at 7x7; pad 1) against its sgemm "
    "bound: the sgemm calls of its im2col shapes alone (per image: forward, backward-data, backward-weight; no "
    "im2col), and, in a build with oneDNN, against the raw oneDNN primitives the operator uses (with the "
    "reorders from and to NCHW, and without: 'blocked'), in GFLOP/s; "
    "check: sampled entries of the output and the gradients against a direct convolution in double. The "
    "ratio is anchor time / operator time; the JSON holds every figure, the anchors, the ratios and the "
    "targets (fc >= 0.9, conv >= 0.7, conv >= 0.95 x raw oneDNN). (c) pool: Pooling forward (the part that "
    "runs through oneDNN) for LeNet's 2x2 max pooling (batch 64, 20 channels, 24x24), ResNet-18's stem (3x3 "
    "stride 2 pad 1 max, batch 32, 64 channels, 112x112) and its global average (batch 32, 512 channels, 7x7), "
    "against the raw oneDNN primitive on the same NCHW buffers, in GB/s (input read and output written once); "
    "checks: every output against its window in double and equal to the primitive's; target >= 0.95. With --ctx gpu the same layers run on GPU 0 and only their GFLOP/s is "
    "reported. Progress goes to stderr, a table to stdout. Exit status: 0 when every check passed (targets are "
    "reported, not enforced), 1 when one failed (the JSON says which, with \"ok\": false), 2 on bad usage "
    "(and for --ctx gpu without a CUDA device).";

constexpr const char* kOpsBenchmarkExamples =
    "Examples:\n"
    "  troupe bench ops --json ops.json\n"
    "      the full run (about 40-60 s on 2 cores)\n"
    "  troupe bench ops --quick --json /tmp/smoke.json\n"
    "      tiny layers: checks that the harness and the in-run checks pass\n"
    "  troupe bench ops --workloads conv --resnet-batch 8 --repeat 3 --json conv.json\n"
    "      only Convolution, with a smaller batch for the ResNet-sized layer\n"
    "  troupe bench ops --ctx gpu --json gpu.json\n"
    "      the same layers on GPU 0 (GFLOP/s only; fails with a message on a machine without a GPU)\n"
    "  TROUPE_BLAS_THREADS=1 troupe bench ops --workloads fc --json fc1.json\n"
    "      TROUPE_* settings apply to the engine and its OpenBLAS thread count (both are in the JSON)";

void DeclareOpsBenchmarkOptions(OpsBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").Required().TypeName("FILE");
  options->Add("--quick", &o->quick, "Tiny layers, one repetition, short runs: a smoke run for CTest");
  options
      ->Add("--repeat", &o->repeat,
            "Timed runs per figure; the median and the best are reported (default " +
                std::to_string(kOpsDefaultRepeat) + ", 1 with --quick)")
      .Range(1, 1000)
      .TypeName("R");
  options->Add("--workloads", &o->workloads, "Which workloads: any of fc, conv, pool")
      .Delimiter(',')
      .Choices(OpsBenchWorkloads())
      .TypeName("LIST")
      .ShowDefault();
  options
      ->Add("--min-time", &o->min_time_s,
            "Seconds a timed run lasts at least (it also makes at least 3 calls; default " +
                FormatNumber(kOpsDefaultMinTime) + ", 0.005 with --quick)")
      .Range(0.0001, 60.0)
      .TypeName("SEC");
  options
      ->Add("--ctx", &o->ctx, "Device of the operators: cpu (against the sgemm anchors) or gpu (GPU 0, GFLOP/s only)")
      .Choices({"cpu", "gpu"})
      .TypeName("DEV")
      .ShowDefault();
  options
      ->Add("--resnet-batch", &o->resnet_batch,
            "conv: batch of the ResNet-sized layer (default " + std::to_string(kOpsDefaultResNetBatch) +
                ", 2 with --quick); the JSON says when it is below the default")
      .Range(1, 256)
      .TypeName("N");
}

}  // namespace

Benchmark OpsBenchmark() {
  return MakeBenchmark<OpsBenchOptions>(
      "ops", "FullyConnected, Convolution and Pooling against their sgemm products and oneDNN's primitives",
      std::string(kOpsBenchmarkDescription) + "\n\n" + kOpsBenchmarkExamples + "\n", &DeclareOpsBenchmarkOptions,
      &RunOpsBench);
}

}  // namespace troupe::bench
