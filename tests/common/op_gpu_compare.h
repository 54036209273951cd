// The GPU operator suites' check: one operator case run on Context::GPU(0) and on the CPU with the same
// inputs, comparing forward outputs and input gradients with kWriteTo and with kAddTo onto random initial
// gradients. Used by tests/gpu/op_*_gpu_test.cc (which skip without a CUDA device).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/op_test_util.h"

namespace troupe::test {

inline HostTensor Uniform(const TShape& s, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  return RandomTensor(s, &rng, lo, hi);
}

// Compares GPU with CPU for one case: forward (every output, hidden ones too), backward kWriteTo, backward
// kAddTo (a random head per visible output). inputs: one per argument
// (default: uniform in [-1, 1]); arg_reqs: per argument (default kWriteTo, kNullOp stays kNullOp under
// kAddTo); tol: relative and absolute (default 1e-5 for float32, 1e-12 otherwise).
inline void CompareGpuWithCpu(const OpCase& c, std::vector<HostTensor> inputs = {},
                              const std::vector<OpReqType>& arg_reqs = {}, double tol = 0) {
  std::ostringstream label;
  label << c.op << " {";
  for (const auto& [k, v] : c.kwargs) label << k << "=" << v << " ";
  label << "} " << DTypeName(c.dtype);
  SCOPED_TRACE(label.str());
  auto cpu_runner = MakeRunner(c);
  std::uint64_t seed = 1;
  if (inputs.empty()) {
    for (const auto& s : cpu_runner->in_shapes()) inputs.push_back(Uniform(s, seed++, -1, 1));
  }
  std::vector<HostTensor> heads, zeros, init;
  for (int i = 0; i < cpu_runner->prop().NumVisibleOutputs(); ++i) {
    heads.push_back(Uniform(cpu_runner->out_shapes()[i], seed++, -1, 1));
  }
  for (const auto& s : cpu_runner->in_shapes()) {
    zeros.emplace_back(static_cast<std::size_t>(s.Size()), 0.0);
    init.push_back(Uniform(s, seed++, -1, 1));
  }
  if (tol == 0) tol = c.dtype == DType::kFloat32 ? 1e-5 : 1e-12;
  for (OpReqType req : {kWriteTo, kAddTo}) {
    const auto& start = req == kAddTo ? init : zeros;
    std::vector<OpReqType> reqs = arg_reqs.empty() ? std::vector<OpReqType>(inputs.size(), req) : arg_reqs;
    if (req == kAddTo) {
      for (auto& r : reqs) r = r == kNullOp ? kNullOp : kAddTo;
    }
    auto run = [&](Context ctx) {
      OpCase on = c;
      on.ctx = ctx;
      return RunForwardBackward(on, inputs, heads, reqs, start);
    };
    const FwdBwd cpu = run(Context::CPU());
    const FwdBwd gpu = run(Context::GPU(0));
    for (std::size_t i = 0; i < cpu.out.size(); ++i) {
      EXPECT_TRUE(Near(gpu.out[i], cpu.out[i], tol, tol, "output " + std::to_string(i)));
    }
    for (std::size_t i = 0; i < cpu.grad.size(); ++i) {
      EXPECT_TRUE(Near(gpu.grad[i], cpu.grad[i], tol, tol,
                       std::string(req == kAddTo ? "kAddTo" : "kWriteTo") + " gradient " + std::to_string(i)));
    }
  }
}

// Forward under kAddTo onto random initial outputs: every output of the GPU equals the CPU's. inputs: per
// argument, an empty one (or none) for the default, uniform in [-1, 1].
inline void CompareForwardAddToGpuWithCpu(const OpCase& c, std::vector<HostTensor> inputs = {}, double tol = 0) {
  SCOPED_TRACE(c.op + " forward kAddTo " + DTypeName(c.dtype));
  std::vector<std::vector<HostTensor>> results;
  for (Context ctx : {Context::CPU(), Context::GPU(0)}) {
    OpCase on = c;
    on.ctx = ctx;
    auto r = MakeRunner(on);
    std::uint64_t seed = 1;
    std::vector<NDArray> in, out;
    for (std::size_t i = 0; i < r->in_shapes().size(); ++i) {
      const TShape& s = r->in_shapes()[i];
      const bool given = i < inputs.size() && !inputs[i].empty();
      in.push_back(ToArray(given ? inputs[i] : Uniform(s, seed, -1, 1), s, c.dtype, ctx));
      ++seed;
    }
    for (const auto& s : r->out_shapes()) out.push_back(ToArray(Uniform(s, seed++, -1, 1), s, c.dtype, ctx));
    r->Forward(true, in, out, {}, std::vector<OpReqType>(out.size(), kAddTo));
    std::vector<HostTensor> host;
    for (auto& o : out) host.push_back(ToHost(o));
    results.push_back(host);
  }
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    EXPECT_TRUE(Near(results[1][i], results[0][i], tol, tol, "output " + std::to_string(i)));
  }
}

// Forward only (integer types, operators without a gradient): every output of the GPU equals the CPU's.
inline void CompareForwardGpuWithCpu(const OpCase& c, const std::vector<HostTensor>& inputs, double tol = 0) {
  SCOPED_TRACE(c.op + " forward " + DTypeName(c.dtype));
  OpCase on = c;
  on.ctx = Context::CPU();
  const auto cpu = RunForward(on, inputs);
  on.ctx = Context::GPU(0);
  const auto gpu = RunForward(on, inputs);
  for (std::size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(Near(gpu[i], cpu[i], tol, tol, "output " + std::to_string(i)));
}

}  // namespace troupe::test
