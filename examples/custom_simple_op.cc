// custom_simple_op — the seed's worked example: smooth L1 loss written once as a SimpleOp, then used both
// on NDArrays and inside a network.
//
// Shown, in the order of the seed's "SimpleOp" section: a shape function, a forward function (UnaryFunction
// on TBlobs), a gradient that reads the input (UnaryGradT2, so backward keeps the input alive), the
// registration with TROUPE_REGISTER_SIMPLE_OP and a "scalar" parameter (sigma). The operator is registered
// under its own name, my_smooth_l1, next to troupe's builtin smooth_l1, and the program checks that the
// two agree: the NDArray function (Invoke), and forward and gradient through a bound Symbol. Then it fits
// a linear model to data with outliers, FullyConnected -> elemwise_sub(label) -> my_smooth_l1, with the
// Executor and plain SGD, printing the loss as it goes down (smooth L1 is the robust choice here: the
// outliers pull the fit much less than a squared loss would).
//
// Usage: custom_simple_op [--steps N] [--sigma S (default 2)] [--lr X (default 0.2)]
//   The loss is quadratic for residuals under 1/S^2: with S below 1 it is close to a squared loss and the
//   outliers pull the slopes off; SGD is stable while X * S^2 stays under about 2.
// Exit status 0 when my_smooth_l1 matches smooth_l1 and the fit converged (its loss is no higher than the
// loss at the true weights, and its slopes are within 0.1 of the true ones); 1 otherwise (the failing check
// is printed); 2 on bad arguments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "graph/symbol.h"
#include "op/imperative.h"
#include "tensor/ndarray.h"
#include "op/simple_op.h"

using troupe::Context;
using troupe::NDArray;
using troupe::Symbol;
using troupe::TShape;

// ---- the operator (the seed's code, with loops where the seed has mshadow expressions) ----

// f(x) = 0.5 (sigma x)^2 for |x| < 1/sigma^2, |x| - 0.5/sigma^2 beyond: quadratic near 0, linear far out.
float SmoothL1Loss(float x, float sigma2) {
  if (x > 1.0f / sigma2) return x - 0.5f / sigma2;
  if (x < -1.0f / sigma2) return -x - 0.5f / sigma2;
  return 0.5f * x * x * sigma2;
}
float SmoothL1Gradient(float x, float sigma2) {
  if (x > 1.0f / sigma2) return 1.0f;
  if (x < -1.0f / sigma2) return -1.0f;
  return x * sigma2;
}

// The output has the input's shape (what SimpleOp does without a shape function; written out as the seed does).
TShape MySmoothL1Shape(const TShape& src, const troupe::EnvArguments&) { return src; }

// Forward: ret = f(src). float32 only: dptr_as<float> throws troupe::Error for another dtype, and the engine
// turns that into an error on the output array.
void MySmoothL1Forward(const troupe::TBlob& src, const troupe::EnvArguments& env, troupe::TBlob* ret,
                       troupe::OpReqType req, troupe::RunContext) {
  const float sigma2 = static_cast<float>(env.scalar * env.scalar);
  const float* in = src.dptr_as<float>();
  float* out = ret->dptr_as<float>();
  for (std::int64_t i = 0; i < ret->Size(); ++i) troupe::Assign(&out[i], req, SmoothL1Loss(in[i], sigma2));
}

// Backward: in_grad = out_grad * f'(x). It reads the input x, hence the UnaryGradT2 signature (Input0).
void MySmoothL1BackwardUseIn(const troupe::OutputGrad& out_grad, const troupe::Input0& in_data0,
                             const troupe::EnvArguments& env, troupe::TBlob* in_grad, troupe::OpReqType req,
                             troupe::RunContext) {
  const float sigma2 = static_cast<float>(env.scalar * env.scalar);
  const float* x = in_data0.data.dptr_as<float>();
  const float* ograd = out_grad.data.dptr_as<float>();
  float* igrad = in_grad->dptr_as<float>();
  for (std::int64_t i = 0; i < in_grad->Size(); ++i) {
    troupe::Assign(&igrad[i], req, ograd[i] * SmoothL1Gradient(x[i], sigma2));
  }
}

// Registration: the forward may not run in place (the gradient reads the input); the gradient may overwrite
// out_grad, which nothing needs afterwards. From here on "my_smooth_l1" is an NDArray function and an operator.
TROUPE_REGISTER_SIMPLE_OP(my_smooth_l1)
    .set_shape_function(MySmoothL1Shape)
    .set_function(troupe::DeviceType::kCPU, MySmoothL1Forward, troupe::kNoInplace)
    .set_gradient(troupe::DeviceType::kCPU, troupe::UnaryGradT2(MySmoothL1BackwardUseIn), troupe::kInplaceOutIn)
    .set_enable_scalar(true, "sigma")
    .describe("Smooth L1 loss(x, scalar = sigma), the example's own copy of smooth_l1");

namespace {

void Usage() {
  std::puts("usage: custom_simple_op [--steps N] [--sigma S (default 2)] [--lr X (default 0.2)]\n"
            "Registers smooth L1 loss as the SimpleOp my_smooth_l1, checks it against the builtin smooth_l1\n"
            "(value and gradient), then fits a linear model to data with outliers using it as the loss.\n"
            "Exits 1 when a check fails.");
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? m : INFINITY;
}

// Forward and backward of `op` applied to x through a bound Symbol; head: the gradient arriving at the output.
void ForwardBackward(const std::string& op, const std::string& sigma, const NDArray& x, const NDArray& head,
                     std::vector<float>* value, std::vector<float>* grad) {
  Symbol net = Symbol::Create(op, {{"scalar", sigma}}, {Symbol::Variable("x")});
  auto exec = troupe::Executor::SimpleBind(net, Context::CPU(), {{"x", x.shape()}});
  NDArray arg = exec->arg_dict().at("x");
  arg.SyncCopyFromCPU(x.ToVector<float>().data(), x.Bytes());
  exec->Forward(true);
  exec->Backward({head});
  *value = exec->outputs()[0].ToVector<float>();
  *grad = exec->grad_dict().at("x").ToVector<float>();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 100;
  double sigma = 2.0, lr = 0.2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--sigma" && i + 1 < argc) {
      sigma = std::atof(argv[++i]);
    } else if (arg == "--lr" && i + 1 < argc) {
      lr = std::atof(argv[++i]);
    } else {
      Usage();
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  if (steps < 1 || !(sigma > 0) || !(lr > 0)) {
    std::fprintf(stderr, "custom_simple_op: --steps must be >= 1, --sigma and --lr > 0\n");
    return 2;
  }
  const std::string sigma_text = std::to_string(sigma);
  bool ok = true;
  auto check = [&ok](bool held, const char* what, double value) {
    std::printf("  %-52s %-10.3g %s\n", what, value, held ? "ok" : "FAILED");
    ok = ok && held;
  };
  try {
    const Context cpu = Context::CPU();

    // 1. The NDArray function: my_smooth_l1 and smooth_l1 on points in both regions (|x| < 1/sigma^2 and beyond).
    std::vector<float> xs;
    for (int i = -20; i <= 20; ++i) xs.push_back(0.15f * static_cast<float>(i) / static_cast<float>(sigma));
    const TShape shape({static_cast<std::int64_t>(xs.size())});
    NDArray x = NDArray::FromVector(xs, shape, cpu);
    const std::vector<float> mine = troupe::Invoke("my_smooth_l1", {x}, {{"scalar", sigma_text}})[0].ToVector<float>();
    const std::vector<float> builtin = troupe::Invoke("smooth_l1", {x}, {{"scalar", sigma_text}})[0].ToVector<float>();
    std::printf("my_smooth_l1 against smooth_l1, sigma %g, x in [%g, %g]:\n", sigma, xs.front(), xs.back());
    check(MaxAbsDiff(mine, builtin) < 1e-6f, "NDArray function: max |difference|", MaxAbsDiff(mine, builtin));

    // 2. Forward and gradient through the symbolic executor, with a gradient arriving from above.
    std::vector<float> heads(xs.size());
    for (std::size_t i = 0; i < heads.size(); ++i) heads[i] = 0.5f + 0.1f * static_cast<float>(i % 7);
    NDArray head = NDArray::FromVector(heads, shape, cpu);
    std::vector<float> my_value, my_grad, bi_value, bi_grad;
    ForwardBackward("my_smooth_l1", sigma_text, x, head, &my_value, &my_grad);
    ForwardBackward("smooth_l1", sigma_text, x, head, &bi_value, &bi_grad);
    check(MaxAbsDiff(my_value, bi_value) < 1e-6f, "Symbol forward: max |difference|", MaxAbsDiff(my_value, bi_value));
    check(MaxAbsDiff(my_grad, bi_grad) < 1e-6f, "Symbol gradient: max |difference|", MaxAbsDiff(my_grad, bi_grad));
    // And the gradient is the derivative: central differences of the forward values.
    std::vector<float> numeric(xs.size()), analytic(xs.size());
    const float h = 1e-3f, s2 = static_cast<float>(sigma * sigma);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      numeric[i] = heads[i] * (SmoothL1Loss(xs[i] + h, s2) - SmoothL1Loss(xs[i] - h, s2)) / (2 * h);
      analytic[i] = my_grad[i];
    }
    check(MaxAbsDiff(numeric, analytic) < 2e-2f, "gradient against central differences", MaxAbsDiff(numeric, analytic));

    // 3. A network with the operator as its loss: y = x w + b with 10 % gross outliers, fitted by
    //    FullyConnected(num_hidden=1) -> elemwise_sub(label) -> my_smooth_l1, mean over the batch.
    const int n = 256, d = 4;
    const std::vector<float> w_true = {1.0f, -2.0f, 0.5f, 3.0f};
    const float b_true = 0.5f;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> data(n * d), label(n);
    for (int r = 0; r < n; ++r) {
      float y = b_true;
      for (int c = 0; c < d; ++c) {
        data[r * d + c] = normal(rng);
        y += w_true[c] * data[r * d + c];
      }
      label[r] = y + 0.05f * normal(rng) + (r % 10 == 0 ? 20.0f : 0.0f);  // every tenth label is far off
    }
    Symbol pred = Symbol::Create("FullyConnected", {{"num_hidden", "1"}}, {Symbol::Variable("data")}, "fc");
    Symbol diff = Symbol::Create("elemwise_sub", {}, {pred, Symbol::Variable("label")}, "diff");
    Symbol loss = Symbol::Create("my_smooth_l1", {{"scalar", sigma_text}}, {diff}, "loss");
    auto exec = troupe::Executor::SimpleBind(loss, cpu, {{"data", TShape({n, d})}, {"label", TShape({n, 1})}},
                                             troupe::kWriteTo, {{"data", troupe::kNullOp}, {"label", troupe::kNullOp}});
    auto args = exec->arg_dict();
    auto grads = exec->grad_dict();
    args.at("data").SyncCopyFromCPU(data.data(), data.size() * sizeof(float));
    args.at("label").SyncCopyFromCPU(label.data(), label.size() * sizeof(float));
    // Weights and bias start at zero (SimpleBind's arrays). The loss is the mean over the batch, so the
    // gradient arriving at each row's loss is 1/n.
    const NDArray mean_head = NDArray::Full(TShape({n, 1}), 1.0 / n, cpu);
    auto mean_loss = [&] {
      const std::vector<float> l = exec->outputs()[0].ToVector<float>();  // waits for the forward pass
      double s = 0;
      for (float v : l) s += v;
      return s / n;
    };
    std::printf("fitting y = x w + b (w = [1, -2, 0.5, 3], b = 0.5, every tenth label +20) with my_smooth_l1:\n");
    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < steps; ++step) {
      exec->Forward(true);
      exec->Backward({mean_head});
      if (step == 0) first_loss = mean_loss();
      for (const char* p : {"fc_weight", "fc_bias"}) args.at(p) -= grads.at(p) * lr;
      if (step % std::max(1, steps / 5) == 0) std::printf("  step %4d  loss %.4f\n", step, mean_loss());
    }
    exec->Forward(false);
    last_loss = mean_loss();
    const std::vector<float> w = args.at("fc_weight").ToVector<float>();
    const float b = args.at("fc_bias").ToVector<float>()[0];
    std::printf("  final      loss %.4f   w = [%.3f, %.3f, %.3f, %.3f]  b = %.3f\n", last_loss, w[0], w[1], w[2], w[3], b);
    // The fit must be as good as the truth: the mean loss at the true w and b (computed here on the host).
    double truth_loss = 0;
    for (int r = 0; r < n; ++r) {
      float y = b_true;
      for (int c = 0; c < d; ++c) y += w_true[c] * data[r * d + c];
      truth_loss += SmoothL1Loss(y - label[r], s2) / n;
    }
    std::printf("  loss at step 0 %.4f, after training %.4f, at the true w and b %.4f\n", first_loss, last_loss,
                truth_loss);
    check(last_loss <= truth_loss * 1.001, "loss after training / loss at the true w and b", last_loss / truth_loss);
    // The outliers shift labels by a constant, which the loss partly absorbs in b (the more, the smaller sigma:
    // their pull is as strong as that of inliers 1/sigma^2 off); the slopes must come out right.
    check(MaxAbsDiff(w, w_true) < 0.1f, "max |fitted w - true w|", MaxAbsDiff(w, w_true));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_simple_op: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", ok ? "custom_simple_op: OK" : "custom_simple_op: a check FAILED");
  return ok ? 0 : 1;
}
