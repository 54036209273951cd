// Test harness for operators: run a registered operator on host vectors through OperatorRunner (the real
// engine path), and check its Backward against central differences.
//
//   OpCase c{"FullyConnected", {{"num_hidden", "3"}}, {TShape{2, 4}, TShape{3, 4}, TShape{3}}};
//   auto out = RunForward(c, {x, w, b});            // outputs as double vectors
//   CheckGradient(c);                               // random inputs, kWriteTo + kAddTo + in-place
//
// The gradient check treats the scalar loss L = sum_i sum_j out_i[j] * head_i[j] over the visible outputs,
// with random heads, and compares dL/dinput from Backward with (L(x+eps) - L(x-eps)) / (2 eps) for every
// element of every checked input. It then repeats Backward with kAddTo into random initial gradients
// (result must be initial + gradient), and, where the property offers in-place options, forward with the
// output on the input's memory (kWriteInplace) and backward with in_grad on out_grad's memory, both compared
// with the out-of-place results. Backward only sees what DeclareBackwardDependency named: OperatorRunner
// passes empty blobs for the rest, so an undeclared read fails (null data) instead of passing by luck.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/imperative.h"
#include "tensor/ndarray.h"
#include "op/operator.h"

namespace troupe::test {

using HostTensor = std::vector<double>;

struct OpCase {
  std::string op;
  Kwargs kwargs;
  std::vector<TShape> in_shapes;  // one per argument
  DType dtype = DType::kFloat64;
  Context ctx = Context::CPU();
  bool is_train = true;
};

inline std::shared_ptr<OperatorProperty> MakeProp(const OpCase& c) {
  std::shared_ptr<OperatorProperty> p = OperatorProperty::Create(c.op);
  p->Init(c.kwargs);
  return p;
}

inline std::unique_ptr<OperatorRunner> MakeRunner(const OpCase& c) {
  std::vector<int> types(c.in_shapes.size(), static_cast<int>(c.dtype));
  return std::make_unique<OperatorRunner>(MakeProp(c), c.ctx, c.in_shapes, types);
}

inline NDArray ToArray(const HostTensor& v, const TShape& shape, DType dtype, Context ctx) {
  NDArray d = NDArray::FromVector<double>(v, shape, Context::CPU());
  NDArray t = dtype == DType::kFloat64 ? d : d.AsType(dtype);
  return ctx == Context::CPU() ? t : t.CopyTo(ctx);
}

inline HostTensor ToHost(const NDArray& a) {
  NDArray c = a.ctx() == Context::CPU() ? a : a.CopyTo(Context::CPU());
  NDArray d = c.dtype() == DType::kFloat64 ? c : c.AsType(DType::kFloat64);
  return d.ToVector<double>();
}

inline HostTensor RandomTensor(const TShape& s, std::mt19937_64* rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  HostTensor v(static_cast<std::size_t>(s.Size()));
  for (auto& x : v) x = u(*rng);
  return v;
}

// The arrays of one forward call.
struct OpArrays {
  std::vector<NDArray> in, out, aux;
};

inline OpArrays MakeArrays(const OperatorRunner& r, const OpCase& c, const std::vector<HostTensor>& inputs,
                           const std::vector<HostTensor>& aux) {
  OpArrays a;
  for (std::size_t i = 0; i < r.in_shapes().size(); ++i) a.in.push_back(ToArray(inputs.at(i), r.in_shapes()[i], c.dtype, c.ctx));
  for (const auto& s : r.out_shapes()) a.out.push_back(NDArray::Zeros(s, c.ctx, c.dtype));
  for (std::size_t i = 0; i < r.aux_shapes().size(); ++i) {
    HostTensor v = i < aux.size() ? aux[i] : HostTensor(static_cast<std::size_t>(r.aux_shapes()[i].Size()), 0.0);
    a.aux.push_back(ToArray(v, r.aux_shapes()[i], c.dtype, c.ctx));
  }
  return a;
}

// Runs Forward once; returns every output (hidden ones too). aux: initial auxiliary states (default
// zeros); *aux_after receives them after the call when given.
inline std::vector<HostTensor> RunForward(const OpCase& c, const std::vector<HostTensor>& inputs,
                                          const std::vector<HostTensor>& aux = {},
                                          std::vector<HostTensor>* aux_after = nullptr) {
  auto r = MakeRunner(c);
  OpArrays a = MakeArrays(*r, c, inputs, aux);
  r->Forward(c.is_train, a.in, a.out, a.aux);
  std::vector<HostTensor> out;
  for (auto& o : a.out) out.push_back(ToHost(o));
  if (aux_after != nullptr) {
    aux_after->clear();
    for (auto& x : a.aux) aux_after->push_back(ToHost(x));
  }
  return out;
}

// Expects `fn` to throw troupe::Error whose message contains every one of `parts`.
template <typename F>
void ExpectError(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no troupe::Error thrown; expected one mentioning '" << (parts.empty() ? "" : parts.front()) << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// The arrays of an MXNet .params file by name (fixtures written by MXNet's scripts).
inline std::map<std::string, NDArray> LoadNamed(const std::string& path) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(path, &arrays, &names);
  std::map<std::string, NDArray> out;
  for (std::size_t i = 0; i < arrays.size() && i < names.size(); ++i) out[names[i]] = arrays[i];
  return out;
}

// The largest |got - want| / max(1, |want|) over the elements (compared as float64).
inline double ScaledError(const NDArray& got, const NDArray& want) {
  const auto g = got.AsType(DType::kFloat64).ToVector<double>(), w = want.AsType(DType::kFloat64).ToVector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - w[i]) / std::max(1.0, std::abs(w[i])));
  }
  return worst;
}

// |got - want| <= tol * max(1, |want|) element by element, compared as float64 (exact for float32 arrays, full
// precision for float64 ones); a reference of all zeros is a failure (nothing would be compared).
inline void ExpectCloseArrays(const NDArray& got, const NDArray& want, const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.AsType(DType::kFloat64).ToVector<double>(), w = want.AsType(DType::kFloat64).ToVector<double>();
  double biggest = 0;
  for (double v : w) biggest = std::max(biggest, std::abs(v));
  ASSERT_GT(biggest, 0.0) << what << ": the reference is all zero, nothing compared";
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " [" << i << "]";
  }
}

// Expects creating and initialising operator `op` with kwargs to fail with a message containing `parts`.
inline void ExpectInitError(const std::string& op, const Kwargs& kwargs, const std::vector<std::string>& parts) {
  SCOPED_TRACE(op);
  ExpectError([&] { OperatorProperty::Create(op)->Init(kwargs); }, parts);
}

// What one Forward (c.is_train) and its Backward pass(es) return: every output, the arguments' gradients,
// the gradients of the optional second pass with kAddTo (grad_add), and the auxiliary states.
struct FwdBwd {
  std::vector<HostTensor> out, grad, grad_add, aux;
};

// Forward, then Backward with the given heads (one per visible output). reqs: per argument (default
// kWriteTo); init: the gradients' initial contents (default zeros); aux: initial auxiliary states; add_to:
// when given, a second Backward after the same Forward adds every argument's gradient to these values
// (kAddTo), into grad_add. c.ctx and c.dtype choose the device and type (GPU suites use the same function).
inline FwdBwd RunForwardBackward(const OpCase& c, const std::vector<HostTensor>& inputs,
                                 const std::vector<HostTensor>& heads, std::vector<OpReqType> reqs = {},
                                 const std::vector<HostTensor>& init = {}, const std::vector<HostTensor>& aux = {},
                                 const std::vector<HostTensor>& add_to = {}) {
  auto r = MakeRunner(c);
  OpArrays a = MakeArrays(*r, c, inputs, aux);
  r->Forward(c.is_train, a.in, a.out, a.aux);
  std::vector<NDArray> hs;
  for (std::size_t i = 0; i < heads.size(); ++i) hs.push_back(ToArray(heads[i], r->out_shapes()[i], c.dtype, c.ctx));
  const std::size_t nargs = r->in_shapes().size();
  auto backward = [&](const std::vector<OpReqType>& rq, const std::vector<HostTensor>& start) {
    std::vector<NDArray> grads;
    for (std::size_t i = 0; i < nargs; ++i) {
      const HostTensor z(static_cast<std::size_t>(r->in_shapes()[i].Size()), 0.0);
      grads.push_back(ToArray(start.empty() ? z : start[i], r->in_shapes()[i], c.dtype, c.ctx));
    }
    r->Backward(hs, a.in, a.out, a.aux, grads, rq);
    std::vector<HostTensor> out;
    for (auto& g : grads) out.push_back(ToHost(g));
    return out;
  };
  if (reqs.empty()) reqs.assign(nargs, kWriteTo);
  FwdBwd res;
  res.grad = backward(reqs, init);
  if (!add_to.empty()) res.grad_add = backward(std::vector<OpReqType>(nargs, kAddTo), add_to);
  for (auto& o : a.out) res.out.push_back(ToHost(o));
  for (auto& x : a.aux) res.aux.push_back(ToHost(x));
  return res;
}

// Output shapes inferred for a case (throws what InferShape throws).
inline std::vector<TShape> InferOutShapes(const OpCase& c) {
  auto p = MakeProp(c);
  std::vector<TShape> in = c.in_shapes, out, aux;
  if (!p->InferShape(&in, &out, &aux)) return {};
  return out;
}

struct GradCheckOptions {
  double eps = 1e-6;
  double rtol = 1e-5;
  double atol = 1e-7;
  std::uint64_t seed = 1;
  // Inputs to use (default: uniform in [-1, 1] per argument); checked arguments (default: all).
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> aux;
  std::vector<int> check;           // argument indices whose gradient is checked
  std::vector<HostTensor> heads;    // out_grad per visible output (default random)
  bool check_add_to = true;
  bool check_inplace = true;
};

inline ::testing::AssertionResult Near(const HostTensor& got, const HostTensor& want, double rtol, double atol,
                                       const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::max(std::fabs(got[i]), std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << got[i] << ", expected " << want[i]
                                           << " (tolerance " << tol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs the checks described at the top of this file; failures are reported with the operator, its
// parameters and the argument.
inline void CheckGradient(const OpCase& c, GradCheckOptions o = {}) {
  std::ostringstream label;
  label << c.op << " {";
  for (const auto& [k, v] : c.kwargs) label << k << "=" << v << " ";
  label << "} shapes";
  for (const auto& s : c.in_shapes) label << " " << s.ToString();
  SCOPED_TRACE(label.str());

  auto prop = MakeProp(c);
  auto r = MakeRunner(c);
  const auto args = prop->ListArguments();
  const int nvis = prop->NumVisibleOutputs();
  std::mt19937_64 rng(o.seed);
  if (o.inputs.empty()) {
    for (const auto& s : r->in_shapes()) o.inputs.push_back(RandomTensor(s, &rng));
  }
  if (o.check.empty()) {
    for (int i = 0; i < static_cast<int>(args.size()); ++i) o.check.push_back(i);
  }
  if (o.heads.empty()) {
    for (int i = 0; i < nvis; ++i) o.heads.push_back(RandomTensor(r->out_shapes()[i], &rng));
  }

  // L(inputs) for the numeric side. Auxiliary states start from o.aux every time.
  auto loss = [&](const std::vector<HostTensor>& in) {
    OpArrays a = MakeArrays(*r, c, in, o.aux);
    r->Forward(c.is_train, a.in, a.out, a.aux);
    double l = 0;
    for (int i = 0; i < nvis; ++i) {
      HostTensor v = ToHost(a.out[i]);
      for (std::size_t j = 0; j < v.size(); ++j) l += v[j] * o.heads[i][j];
    }
    return l;
  };

  // Analytic gradient (kWriteTo), with fresh forward arrays.
  auto backward = [&](OpReqType req, const std::vector<HostTensor>& init, bool inplace_grad) {
    OpArrays a = MakeArrays(*r, c, o.inputs, o.aux);
    r->Forward(c.is_train, a.in, a.out, a.aux);
    std::vector<NDArray> heads;
    for (int i = 0; i < nvis; ++i) heads.push_back(ToArray(o.heads[i], r->out_shapes()[i], c.dtype, c.ctx));
    std::vector<NDArray> grads;
    std::vector<OpReqType> reqs;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const bool checked = std::find(o.check.begin(), o.check.end(), static_cast<int>(i)) != o.check.end();
      reqs.push_back(checked ? req : kNullOp);
      grads.push_back(ToArray(init.empty() ? HostTensor(static_cast<std::size_t>(r->in_shapes()[i].Size()), 0.0) : init[i],
                              r->in_shapes()[i], c.dtype, c.ctx));
    }
    if (inplace_grad) {
      // in_grad shares out_grad's memory where the property allows it.
      std::vector<int> og(nvis), id(args.size()), od(prop->NumOutputs());
      std::vector<void*> ig(args.size());
      for (int i = 0; i < nvis; ++i) og[i] = i;
      for (std::size_t i = 0; i < args.size(); ++i) id[i] = 100 + static_cast<int>(i), ig[i] = &grads[i];
      for (int i = 0; i < prop->NumOutputs(); ++i) od[i] = 200 + i;
      for (auto [src, dst] : prop->BackwardInplaceOption(og, id, od, ig)) {
        if (src >= 0 && src < nvis) {
          const auto gi = static_cast<std::size_t>(static_cast<NDArray*>(dst) - grads.data());
          if (reqs[gi] == kWriteTo) {
            // A view with the gradient's shape (Flatten/Reshape change shapes in place).
            grads[gi] = heads[src].Reshape(r->in_shapes()[gi]);
            reqs[gi] = kWriteInplace;
          }
        }
      }
    }
    r->Backward(heads, a.in, a.out, a.aux, grads, reqs);
    std::vector<HostTensor> out;
    for (auto& g : grads) out.push_back(ToHost(g));
    return out;
  };

  const std::vector<HostTensor> analytic = backward(kWriteTo, {}, false);
  for (int ci : o.check) {
    HostTensor numeric(o.inputs[ci].size());
    for (std::size_t j = 0; j < numeric.size(); ++j) {
      auto plus = o.inputs, minus = o.inputs;
      plus[ci][j] += o.eps;
      minus[ci][j] -= o.eps;
      numeric[j] = (loss(plus) - loss(minus)) / (2 * o.eps);
    }
    EXPECT_TRUE(Near(analytic[ci], numeric, o.rtol, o.atol, "gradient of '" + args[ci] + "' vs central differences"));
  }

  if (o.check_add_to) {
    std::vector<HostTensor> init;
    for (const auto& s : r->in_shapes()) init.push_back(RandomTensor(s, &rng));
    const auto added = backward(kAddTo, init, false);
    for (int ci : o.check) {
      HostTensor want = init[ci];
      for (std::size_t j = 0; j < want.size(); ++j) want[j] += analytic[ci][j];
      EXPECT_TRUE(Near(added[ci], want, 1e-12, 1e-12, "kAddTo gradient of '" + args[ci] + "'"));
    }
  }

  if (o.check_inplace) {
    // Forward in place where allowed: the output written over a copy of the input.
    std::vector<int> id(args.size());
    std::vector<void*> od(prop->NumOutputs());
    OpArrays ref = MakeArrays(*r, c, o.inputs, o.aux);
    r->Forward(c.is_train, ref.in, ref.out, ref.aux);
    for (std::size_t i = 0; i < args.size(); ++i) id[i] = static_cast<int>(i);
    for (int i = 0; i < prop->NumOutputs(); ++i) od[i] = &ref.out[i];
    for (auto [in_idx, out_ptr] : prop->ForwardInplaceOption(id, od)) {
      const auto oi = static_cast<std::size_t>(static_cast<NDArray*>(out_ptr) - ref.out.data());
      OpArrays a = MakeArrays(*r, c, o.inputs, o.aux);
      std::vector<OpReqType> req(a.out.size(), kWriteTo);
      a.out[oi] = a.in[in_idx].Reshape(r->out_shapes()[oi]);  // a view: same memory, the output's shape
      req[oi] = kWriteInplace;
      r->Forward(c.is_train, a.in, a.out, a.aux, req);
      EXPECT_TRUE(Near(ToHost(a.out[oi]), ToHost(ref.out[oi]), 1e-12, 1e-12,
                       "in-place forward (output " + std::to_string(oi) + " over '" + args[in_idx] + "')"));
    }
    const auto inplace = backward(kWriteTo, {}, true);
    for (int ci : o.check) {
      EXPECT_TRUE(Near(inplace[ci], analytic[ci], 1e-12, 1e-12, "in-place gradient of '" + args[ci] + "'"));
    }
  }
}

}  // namespace troupe::test
