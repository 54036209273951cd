// custom_autograd_function — a differentiable function written in C++ (autograd::Function, MXNet's
// autograd.Function), checked against central differences, then trained through as any operator.
//
// Shown: a Function subclass whose Forward computes y = x / (1 + |x|) ("softsign") with NDArray code and keeps
// what Backward needs, whose Backward returns dy/dx * dL/dy = dL/dy / (1 + |x|)^2; AttachGrad, RecordScope,
// Backward and GradOf; and the function inside a small model fitted with a Trainer.
//
// Usage: custom_autograd_function [--steps N]
// Exit status 0 when the gradient matches central differences and the fit converges.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "nn/parameter.h"
#include "nn/trainer.h"
#include "op/autograd.h"
#include "op/imperative.h"

namespace {

using troupe::Invoke;
using troupe::NDArray;
namespace autograd = troupe::autograd;

class Softsign : public autograd::Function {
 public:
  std::vector<NDArray> Forward(const std::vector<NDArray>& in) override {
    denom_ = Invoke("abs", {in[0]})[0] + 1.0;  // 1 + |x|, kept for Backward
    return {Invoke("elemwise_div", {in[0], denom_})[0]};
  }
  std::vector<NDArray> Backward(const std::vector<NDArray>& dy) override {
    const NDArray sq = Invoke("square", {denom_})[0];
    return {Invoke("elemwise_div", {dy[0], sq})[0]};
  }

 private:
  NDArray denom_;
};

NDArray Apply(const NDArray& x) { return autograd::Function::Apply(std::make_shared<Softsign>(), {x})[0]; }

}  // namespace

int main(int argc, char** argv) {
  int steps = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::puts(
          "usage: custom_autograd_function [--steps N]\n"
          "Checks a C++ autograd::Function's gradient against central differences, then fits a*softsign(x)+b\n"
          "to samples of 3*softsign(x)-1 with N sgd steps (default 200).");
      return arg == "--help" ? 0 : 2;
    }
  }
  try {
    // 1. The gradient against central differences (float64, so the difference quotient is exact enough).
    const std::vector<double> xs = {-3.0, -0.5, 0.25, 2.0};
    NDArray x = NDArray::FromVector(xs, {4});
    autograd::AttachGrad(&x);
    NDArray y;
    {
      autograd::RecordScope record;
      y = Apply(x);
    }
    autograd::Backward({y});
    const auto grad = autograd::GradOf(x).ToVector<double>();
    double worst = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double h = 1e-6, f = [&](double v) { return v / (1 + std::abs(v)); }(xs[i] + h),
                   g = [&](double v) { return v / (1 + std::abs(v)); }(xs[i] - h);
      const double numeric = (f - g) / (2 * h);
      worst = std::max(worst, std::abs(numeric - grad[i]));
      std::printf("x=%+.2f  dy/dx: Function %.8f, central difference %.8f\n", xs[i], grad[i], numeric);
    }
    if (worst > 1e-6) {
      std::printf("gradient mismatch %.3g\n", worst);
      return 1;
    }

    // 2. Fit a * softsign(x) + b to 3 * softsign(x) - 1 through the Function.
    auto a = std::make_shared<troupe::nn::Parameter>("a", troupe::TShape{1});
    auto b = std::make_shared<troupe::nn::Parameter>("b", troupe::TShape{1});
    a->Initialize("zeros");
    b->Initialize("zeros");
    troupe::nn::ParameterDict params;
    params.Add(a);
    params.Add(b);
    troupe::nn::Trainer trainer(params, {"sgd", {{"learning_rate", "0.5"}}});
    std::vector<float> in, target;
    for (int i = 0; i < 32; ++i) {
      const float v = -4.0f + 8.0f * static_cast<float>(i) / 31.0f;
      in.push_back(v);
      target.push_back(3.0f * v / (1 + std::abs(v)) - 1.0f);
    }
    const NDArray data = NDArray::FromVector(in, {32}), want = NDArray::FromVector(target, {32});
    double loss_value = 0;
    for (int step = 0; step < steps; ++step) {
      NDArray loss;
      {
        autograd::RecordScope record;
        const NDArray pred = Invoke("broadcast_add", {Invoke("broadcast_mul", {Apply(data), a->Data()})[0], b->Data()})[0];
        const NDArray d = pred - want;
        loss = d * d * 0.5;
      }
      autograd::Backward({loss});
      trainer.Step(32);
      if (step % 50 == 0 || step == steps - 1) {
        const auto l = loss.ToVector<float>();
        loss_value = 0;
        for (float v : l) loss_value += v / static_cast<double>(l.size());
        std::printf("step %3d  loss %.6f  a %.4f  b %.4f\n", step, loss_value, a->Data().ToVector<float>()[0],
                    b->Data().ToVector<float>()[0]);
      }
    }
    const float fa = a->Data().ToVector<float>()[0], fb = b->Data().ToVector<float>()[0];
    if (std::abs(fa - 3.0f) > 0.05f || std::abs(fb + 1.0f) > 0.05f) {
      std::printf("did not converge to a=3, b=-1\n");
      return 1;
    }
    std::printf("fitted a=%.4f b=%.4f (want 3, -1)\n", fa, fb);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_autograd_function: %s\n", e.what());
    return 1;
  }
}
