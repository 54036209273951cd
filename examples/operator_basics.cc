// operator_basics — the operator layer in one small program: a two-layer perceptron trained by hand.
//
// Shown: registered operators looked up by name with MXNet's parameter names (FullyConnected, Activation,
// SoftmaxOutput), OperatorRunner pushing Forward/Backward to the engine (shapes inferred from the data,
// weights' shapes filled in by the operators), gradients written into arrays and applied with NDArray
// arithmetic, a SimpleOp of the program's own (registered with the chained API, then called on NDArrays like
// any operator), and the registry's documentation of an operator. Nothing waits until a value is printed.
//
// The task: two interleaved spirals of points in the plane, 3 classes; the network must separate them.
//
// Usage: operator_basics [--engine actor|naive] [--iters N]
// Exit status 0 when the training accuracy reaches 90 %.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op/imperative.h"
#include "tensor/ndarray.h"
#include "op/operator.h"
#include "op/simple_op.h"

using troupe::Context;
using troupe::DType;
using troupe::NDArray;
using troupe::OperatorRunner;
using troupe::TShape;

// A SimpleOp of our own: y = x^2 * scalar, written once; usable on NDArrays and in graphs.
void ScaledSquare(const troupe::TBlob& src, const troupe::EnvArguments& env, troupe::TBlob* ret,
                  troupe::OpReqType req, troupe::RunContext) {
  const float* x = src.dptr_as<float>();
  float* y = ret->dptr_as<float>();
  for (std::int64_t i = 0; i < src.Size(); ++i) troupe::Assign(&y[i], req, static_cast<float>(env.scalar) * x[i] * x[i]);
}
void ScaledSquareGrad(const troupe::OutputGrad& g, const troupe::Input0& in, const troupe::EnvArguments& env,
                      troupe::TBlob* in_grad, troupe::OpReqType req, troupe::RunContext) {
  const float* x = in.data.dptr_as<float>();
  const float* dy = g.data.dptr_as<float>();
  float* dx = in_grad->dptr_as<float>();
  for (std::int64_t i = 0; i < in.data.Size(); ++i) {
    troupe::Assign(&dx[i], req, dy[i] * 2 * static_cast<float>(env.scalar) * x[i]);
  }
}
TROUPE_REGISTER_SIMPLE_OP(scaled_square)
    .set_function(troupe::DeviceType::kCPU, ScaledSquare, troupe::kInplaceInOut)
    .set_gradient(troupe::DeviceType::kCPU, ScaledSquareGrad)
    .set_enable_scalar(true, "the factor")
    .describe("scalar * x^2, elementwise (the example's own operator)");

namespace {

std::shared_ptr<troupe::OperatorProperty> Prop(const std::string& name, const troupe::Kwargs& kwargs) {
  std::shared_ptr<troupe::OperatorProperty> p = troupe::OperatorProperty::Create(name);
  p->Init(kwargs);
  return p;
}

// One layer: its runner and the arrays it reads and writes.
struct Layer {
  std::unique_ptr<OperatorRunner> runner;
  std::vector<NDArray> in, out, grad;  // arguments, outputs, gradients of the arguments
};

Layer MakeLayer(const std::string& op, const troupe::Kwargs& kwargs, const NDArray& data, troupe::Engine* e,
                std::mt19937* rng) {
  Layer l;
  const int f32 = static_cast<int>(DType::kFloat32);
  auto prop = Prop(op, kwargs);
  const auto args = prop->ListArguments();
  std::vector<TShape> shapes(args.size());
  shapes[0] = data.shape();
  l.runner = std::make_unique<OperatorRunner>(prop, data.ctx(), shapes, std::vector<int>(args.size(), f32), e);
  l.in.push_back(data);
  for (std::size_t i = 1; i < args.size(); ++i) {
    const TShape& s = l.runner->in_shapes()[i];
    // Weights: uniform in +-sqrt(6 / (fan_in + fan_out)) (Xavier); biases and labels start at zero.
    std::vector<float> v(static_cast<std::size_t>(s.Size()), 0.0f);
    if (args[i] == "weight") {
      const float r = std::sqrt(6.0f / static_cast<float>(s[0] + s[1]));
      std::uniform_real_distribution<float> u(-r, r);
      for (auto& x : v) x = u(*rng);
    }
    l.in.push_back(NDArray::FromVector(v, s, data.ctx(), e));
  }
  for (const auto& s : l.runner->out_shapes()) l.out.emplace_back(s, data.ctx(), DType::kFloat32, e);
  for (const auto& s : l.runner->in_shapes()) l.grad.emplace_back(s, data.ctx(), DType::kFloat32, e);
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::EngineConfig config = troupe::EngineConfig::FromEnv();
  int iters = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--engine" && i + 1 < argc) {
      config.type = std::strcmp(argv[++i], "naive") == 0 ? troupe::EngineType::kNaive : troupe::EngineType::kActor;
    } else if (arg == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::puts("usage: operator_basics [--engine actor|naive] [--iters N]\n"
                "Trains a two-layer perceptron on three spirals with FullyConnected, Activation and\n"
                "SoftmaxOutput run through OperatorRunner; exits 0 at >= 90 % training accuracy.");
      return arg == "--help" ? 0 : 2;
    }
  }
  try {
    auto engine = troupe::Engine::Create(config);
    troupe::Engine* e = engine.get();
    const Context cpu = Context::CPU(0);

    // Data: 3 spirals of 100 points each.
    const int per_class = 100, classes = 3, n = per_class * classes;
    std::mt19937 rng(7);
    std::normal_distribution<float> noise(0.0f, 0.2f);
    std::vector<float> xs, labels;
    for (int c = 0; c < classes; ++c) {
      for (int i = 0; i < per_class; ++i) {
        const float r = static_cast<float>(i) / per_class;
        const float t = static_cast<float>(c) * 4.0f + 4.0f * r + noise(rng);
        xs.push_back(r * std::sin(t));
        xs.push_back(r * std::cos(t));
        labels.push_back(static_cast<float>(c));
      }
    }
    NDArray x = NDArray::FromVector(xs, TShape({n, 2}), cpu, e);

    // The network: FullyConnected(64) -> relu -> FullyConnected(3) -> SoftmaxOutput.
    Layer fc1 = MakeLayer("FullyConnected", {{"num_hidden", "64"}}, x, e, &rng);
    Layer act = MakeLayer("Activation", {{"act_type", "relu"}}, fc1.out[0], e, &rng);
    Layer fc2 = MakeLayer("FullyConnected", {{"num_hidden", "3"}}, act.out[0], e, &rng);
    Layer loss = MakeLayer("SoftmaxOutput", {{"normalization", "batch"}}, fc2.out[0], e, &rng);
    loss.in[1] = NDArray::FromVector(labels, TShape({n}), cpu, e);
    std::vector<Layer*> layers = {&fc1, &act, &fc2, &loss};

    const float lr = 1.0f;
    const std::vector<troupe::OpReqType> write2 = {troupe::kWriteTo, troupe::kWriteTo};
    for (int it = 0; it <= iters; ++it) {
      for (Layer* l : layers) l->runner->Forward(true, l->in, l->out, {});
      if (it == iters) break;
      // Backward, last layer first; each layer's input gradient is the previous layer's output gradient.
      loss.runner->Backward({NDArray()}, loss.in, loss.out, {}, loss.grad, {troupe::kWriteTo, troupe::kNullOp});
      fc2.runner->Backward({loss.grad[0]}, fc2.in, fc2.out, {}, fc2.grad, {troupe::kWriteTo, troupe::kWriteTo, troupe::kWriteTo});
      act.runner->Backward({fc2.grad[0]}, act.in, act.out, {}, act.grad, {troupe::kWriteTo});
      fc1.runner->Backward({act.grad[0]}, fc1.in, fc1.out, {}, fc1.grad, {troupe::kNullOp, troupe::kWriteTo, troupe::kWriteTo});
      for (Layer* l : {&fc1, &fc2}) {
        for (std::size_t i = 1; i < l->in.size(); ++i) l->in[i] -= l->grad[i] * lr;
      }
    }

    // Accuracy from the softmax output (the first time the program waits).
    const std::vector<float> prob = loss.out[0].ToVector<float>();
    int correct = 0;
    for (int i = 0; i < n; ++i) {
      int best = 0;
      for (int c = 1; c < classes; ++c) best = prob[i * classes + c] > prob[i * classes + best] ? c : best;
      correct += best == static_cast<int>(labels[i]);
    }
    const double acc = static_cast<double>(correct) / n;
    std::printf("engine %s: %d iterations, training accuracy %.1f %%\n", troupe::EngineTypeName(config.type), iters,
                100 * acc);

    // The program's own SimpleOp on NDArrays, and its entry in the registry.
    NDArray sq = troupe::Invoke("scaled_square", {NDArray::FromVector<float>({1, -2, 3}, TShape({3}), cpu, e)},
                                {{"scalar", "0.5"}})[0];
    const std::vector<float> v = sq.ToVector<float>();
    std::printf("scaled_square([1, -2, 3], scalar=0.5) = [%g, %g, %g]\n", v[0], v[1], v[2]);
    const troupe::OperatorInfo* info = troupe::OperatorRegistry::Get().Find("FullyConnected");
    std::printf("FullyConnected: %s\n", info->description.c_str());
    for (const auto& p : info->params) {
      std::printf("  %-12s %-14s %s%s\n", p.name.c_str(), p.type.c_str(), p.description.c_str(),
                  p.required ? " (required)" : (" (default " + p.default_value + ")").c_str());
    }
    return acc >= 0.9 ? 0 : 1;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "operator_basics: %s\n", ex.what());
    return 1;
  }
}
