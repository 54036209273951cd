// troupe._core: the native half of the Python package. Arrays (troupe::NDArray handles), operator calls through
// the registry (Invoke), autograd's scopes and passes, the engine's waits, and the registry's descriptions from
// which troupe.ndarray generates one function per operator. The Python modules in python/troupe wrap it in MXNet
// 1.x's API.
//
// The GIL: every call that may wait for the engine (reading an array, waitall, Backward's checks) releases it, so
// engine threads and other Python threads run meanwhile. Nothing here calls back into Python from an engine
// thread. troupe::Error becomes troupe.base.MXNetError (a RuntimeError, as MXNet's).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/trampoline.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "engine/engine.h"
#include "op/autograd.h"
#include "op/imperative.h"
#include "op/operator.h"
#include "python/src/bindings.h"
#include "tensor/ndarray.h"
#include "tensor/resource.h"

namespace nb = nanobind;
using namespace troupe;

namespace {

nb::dlpack::dtype DlpackOf(DType t) {
  switch (t) {
    case DType::kFloat32: return nb::dtype<float>();
    case DType::kFloat64: return nb::dtype<double>();
    case DType::kFloat16: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::kUint8: return nb::dtype<uint8_t>();
    case DType::kInt32: return nb::dtype<int32_t>();
    case DType::kInt8: return nb::dtype<int8_t>();
    case DType::kInt64: return nb::dtype<int64_t>();
    case DType::kBool: return nb::dtype<bool>();
    case DType::kBfloat16: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
  throw Error(std::string("no NumPy type for ") + DTypeName(t));
}

DType FromDlpack(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  const auto code = static_cast<C>(d.code);
  if (d.lanes != 1) throw Error("vector element types are not supported");
  if (code == C::Float && d.bits == 32) return DType::kFloat32;
  if (code == C::Float && d.bits == 64) return DType::kFloat64;
  if (code == C::Float && d.bits == 16) return DType::kFloat16;
  if (code == C::Bfloat && d.bits == 16) return DType::kBfloat16;
  if (code == C::UInt && d.bits == 8) return DType::kUint8;
  if (code == C::Int && d.bits == 8) return DType::kInt8;
  if (code == C::Int && d.bits == 32) return DType::kInt32;
  if (code == C::Int && d.bits == 64) return DType::kInt64;
  if (code == C::Bool) return DType::kBool;
  throw Error("an element type troupe has no NDArray of (code " + std::to_string(d.code) + ", " +
              std::to_string(d.bits) + " bits)");
}

TShape ShapeOf(const std::vector<std::int64_t>& dims) { return TShape(dims); }
std::vector<std::int64_t> DimsOf(const TShape& s) { return s.ndim() < 0 ? std::vector<std::int64_t>{} : s.ToVector(); }

// A host array (C-contiguous, any supported type) copied into a new NDArray on ctx.
NDArray FromHost(nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> a, const std::string& ctx) {
  std::vector<std::int64_t> dims(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) dims[i] = static_cast<std::int64_t>(a.shape(i));
  NDArray out(ShapeOf(dims), Context::Parse(ctx), FromDlpack(a.dtype()));
  const std::size_t bytes = a.nbytes();
  if (bytes != out.Bytes()) throw Error("array of " + std::to_string(bytes) + " bytes for " + std::to_string(out.Bytes()));
  {
    nb::gil_scoped_release release;
    out.SyncCopyFromCPU(a.data(), bytes);
  }
  return out;
}

// Runs `wait` (a blocking wait for the engine: waitall, a wait for writing) on a helper thread while the caller,
// without the GIL, checks for Python's signals every 50 ms: Ctrl-C raises KeyboardInterrupt in the caller at once
// (the engine's work goes on, and the helper thread ends when it does). The wait's own error is rethrown.
void InterruptibleWait(std::function<void()> wait) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  std::thread([state, wait = std::move(wait)] {
    try {
      wait();
    } catch (...) {
      state->error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(state->mu);
    state->done = true;
    state->cv.notify_all();
  }).detach();
  for (;;) {
    {
      nb::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(state->mu);
      if (state->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return state->done; })) break;
    }
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
  if (state->error) std::rethrow_exception(state->error);
}

// Waits until what writes `a` has run, checking for Python's signals every 50 ms, and rethrows the array's error.
// A function pushed to read `a` (never skipped, even after an error) says when: no thread is made per wait.
void WaitToReadInterruptibly(const NDArray& a) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto state = std::make_shared<State>();
  a.engine()->PushSync(
      [state](RunContext) {
        std::lock_guard<std::mutex> lock(state->mu);
        state->done = true;
        state->cv.notify_all();
      },
      Context::CPU(), {a.var()}, {}, FnProperty::kNoSkip, 0, "python:wait_to_read");
  for (;;) {
    {
      nb::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(state->mu);
      if (state->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return state->done; })) break;
    }
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
  nb::gil_scoped_release release;
  a.WaitToRead();  // at once now; rethrows what the array's writer threw
}

// The values as a new NumPy array (waits for the array, interruptibly: rethrows the error of what computed it).
nb::object ToHost(const NDArray& a) {
  if (a.is_none()) throw Error("the array is empty (a none array)");
  WaitToReadInterruptibly(a);
  auto* buf = new std::vector<std::uint8_t>(a.Bytes());
  try {
    nb::gil_scoped_release release;
    a.SyncCopyToCPU(buf->data(), buf->size());
  } catch (...) {
    delete buf;
    throw;
  }
  nb::capsule owner(buf, [](void* p) noexcept { delete static_cast<std::vector<std::uint8_t>*>(p); });
  std::vector<std::size_t> shape;
  for (auto d : DimsOf(a.shape())) shape.push_back(static_cast<std::size_t>(d));
  nb::ndarray<nb::numpy> out(buf->data(), shape.size(), shape.data(), owner, nullptr, DlpackOf(a.dtype()));
  return out.cast();
}

// The array's memory as a DLPack-capable array (no copy), once what writes it has run (write: once everything that
// reads it has run too, for a consumer that writes). The result keeps the memory alive; the engine does not know
// about the consumer, so nothing pushed afterwards may touch the array while it is in use.
nb::ndarray<> ToDlpack(const NDArray& a, bool write) {
  if (a.is_none()) throw Error("the array is empty (a none array)");
  if (write) {
    InterruptibleWait([a] { a.WaitToWrite(); });
  } else {
    WaitToReadInterruptibly(a);
  }
  const TBlob blob = a.data();
  std::vector<std::size_t> shape;
  for (auto d : DimsOf(a.shape())) shape.push_back(static_cast<std::size_t>(d));
  auto* keep = new NDArray(a);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<NDArray*>(p); });
  const int device = a.ctx().is_gpu() ? nb::device::cuda::value : nb::device::cpu::value;
  return nb::ndarray<>(blob.dptr, shape.size(), shape.data(), owner, nullptr, DlpackOf(a.dtype()), device,
                       a.ctx().dev_id);
}

OpReqType ReqOf(const std::string& r) {
  if (r == "write") return kWriteTo;
  if (r == "add") return kAddTo;
  if (r == "null") return kNullOp;
  throw Error("grad_req must be 'write', 'add' or 'null', got '" + r + "'");
}

// An operator call: positional inputs, then inputs by argument or auxiliary-state name, and string parameters.
std::vector<NDArray> Call(const std::string& op, const std::vector<NDArray>& args,
                          const std::map<std::string, NDArray>& named, const Kwargs& params,
                          const std::vector<NDArray>& out) {
  std::shared_ptr<OperatorProperty> prop = OperatorProperty::Create(op);
  prop->Init(params);
  std::vector<NDArray> inputs = args;
  if (!named.empty()) {
    std::vector<std::string> names = prop->ListArguments();
    const auto aux = prop->ListAuxiliaryStates();
    names.insert(names.end(), aux.begin(), aux.end());
    inputs.resize(std::max(inputs.size(), names.size()));
    for (const auto& [k, v] : named) {
      auto it = std::find(names.begin(), names.end(), k);
      if (it == names.end()) {
        std::string all;
        for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
        throw Error(op + ": no input named '" + k + "' (its inputs: " + all + ")");
      }
      const auto i = static_cast<std::size_t>(it - names.begin());
      if (!inputs[i].is_none()) throw Error(op + ": input '" + k + "' given twice");
      inputs[i] = v;
    }
    while (!inputs.empty() && inputs.back().is_none()) inputs.pop_back();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].is_none()) throw Error(op + ": input '" + names[i] + "' is missing");
    }
  }
  if (!out.empty()) {
    Invoke(op, inputs, params, out);
    return out;
  }
  return Invoke(std::shared_ptr<const OperatorProperty>(std::move(prop)), inputs);
}

// autograd::Function implemented in Python (troupe.autograd.Function): forward and backward are Python methods,
// called with the GIL taken (the backward pass runs on the thread that called backward, which released it).
struct PyFunction : autograd::Function {
  NB_TRAMPOLINE(autograd::Function, 2);
  std::vector<NDArray> Forward(const std::vector<NDArray>& inputs) override { NB_OVERRIDE_PURE_NAME("forward", Forward, inputs); }
  std::vector<NDArray> Backward(const std::vector<NDArray>& out_grads) override {
    NB_OVERRIDE_PURE_NAME("backward", Backward, out_grads);
  }
};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "troupe's native core (arrays, operators, autograd); use the troupe package";
  nb::exception<Error>(m, "TroupeError", PyExc_RuntimeError);
  // Arrays and Python Functions held by an autograd graph that was never differentiated live until the engine's
  // objects go, after the interpreter has ended: that is expected, not a reference-counting bug to report.
  nb::set_leak_warnings(false);
  troupe::python::BindSymbol(m);
  troupe::python::BindIO(m);
  troupe::python::BindKVStore(m);

  nb::class_<NDArray>(m, "Array")
      .def_prop_ro("shape", [](const NDArray& a) { return DimsOf(a.shape()); })
      .def_prop_ro("dtype", [](const NDArray& a) { return std::string(DTypeName(a.dtype())); })  // NumPy's names
      .def_prop_ro("context", [](const NDArray& a) { return a.ctx().ToString(); })
      .def_prop_ro("size", &NDArray::Size)
      .def_prop_ro("is_none", &NDArray::is_none)
      .def("asnumpy", &ToHost)
      .def("wait_to_read", &WaitToReadInterruptibly)
      .def("to_dlpack", &ToDlpack, nb::arg("write") = false)
      .def("copyto", [](const NDArray& a, const std::string& ctx) { return a.CopyTo(Context::Parse(ctx)); })
      .def("copy_into", [](const NDArray& a, const NDArray& dst) { CopyFromTo(a, dst); })
      .def("astype", [](const NDArray& a, const std::string& t) { return a.AsType(DTypeFromName(t)); })
      .def("reshape", [](const NDArray& a, const std::vector<std::int64_t>& s) { return a.Reshape(ShapeOf(s)); })
      .def("slice", &NDArray::Slice)
      .def("at", &NDArray::At)
      .def("fill", [](NDArray& a, double v) { a = v; })
      .def("sample_uniform", &NDArray::SampleUniform)
      .def("sample_normal", &NDArray::SampleNormal)
      .def("same_chunk", &NDArray::SharesChunkWith)
      .def("attach_grad", [](NDArray& a, const std::string& req) { autograd::AttachGrad(&a, ReqOf(req)); })
      .def_prop_ro("grad", [](const NDArray& a) -> std::optional<NDArray> {
        NDArray g = autograd::GradOf(a);
        if (g.is_none()) return std::nullopt;
        return g;
      })
      .def("in_graph", [](const NDArray& a) { return autograd::InGraph(a); });

  m.def("none_array", [] { return NDArray(); });
  // This build's features, under MXNet's names where they mean the same (mx.runtime).
  m.def("features", [] {
    std::vector<std::pair<std::string, bool>> f = {
        {"CPU_DNNL", TROUPE_PYTHON_HAS_DNNL != 0}, {"MKLDNN", TROUPE_PYTHON_HAS_DNNL != 0},
        {"CUDA", TROUPE_PYTHON_HAS_CUDA != 0}, {"CUDNN", TROUPE_PYTHON_HAS_CUDA != 0},
        {"NCCL", TROUPE_PYTHON_HAS_CUDA != 0}, {"BLAS_OPEN", true}, {"DIST_KVSTORE", true},
        {"INT64_TENSOR_SIZE", true}, {"SIGNAL_HANDLER", true}, {"OPENMP", true}, {"SSE", true},
        {"F16C", true}, {"DEBUG", false}, {"TENSORRT", false}, {"OPENCV", false}, {"LAPACK", false}};
    return f;
  });
  m.def("from_numpy", &FromHost, nb::arg("array"), nb::arg("ctx"));
  m.def("empty", [](const std::vector<std::int64_t>& s, const std::string& ctx, const std::string& dtype) {
    return NDArray(ShapeOf(s), Context::Parse(ctx), DTypeFromName(dtype));
  });
  m.def("invoke", &Call, nb::arg("op"), nb::arg("args"), nb::arg("named"), nb::arg("params"), nb::arg("out"));
  m.def("seed", [](std::uint64_t seed) { ResourceManager::Get()->SeedRandom(seed); });
  m.def("waitall", [] { InterruptibleWait([] { Engine::Get()->WaitForAll(); }); });
  m.def("save", [](const std::string& path, const std::vector<NDArray>& arrays, const std::vector<std::string>& names) {
    NDArray::Save(path, arrays, names);
  }, nb::call_guard<nb::gil_scoped_release>());
  m.def("load", [](const std::string& path) {
    std::vector<NDArray> arrays;
    std::vector<std::string> names;
    {
      nb::gil_scoped_release release;
      NDArray::Load(path, &arrays, &names);
    }
    return std::make_pair(arrays, names);
  });

  // The registry: (name, description, [(argument, type, description)], [(param, type, default, required, doc)],
  // aliases) per operator.
  m.def("operators", [] {
    nb::list out;
    const auto& reg = OperatorRegistry::Get();
    for (const auto& name : reg.ListNames()) {
      const OperatorInfo* info = reg.Find(name);
      nb::list args, params;
      for (const auto& a : info->arguments) args.append(nb::make_tuple(a.name, a.type, a.description));
      for (const auto& p : info->params) {
        params.append(nb::make_tuple(p.name, p.type, p.default_value, p.required, p.description));
      }
      out.append(nb::make_tuple(info->name, info->description, args, params, info->aliases));
    }
    return out;
  });

  // autograd
  nb::class_<autograd::Function, PyFunction>(m, "FunctionBase").def(nb::init<>());
  m.def("apply_function", [](std::shared_ptr<autograd::Function> f, const std::vector<NDArray>& inputs) {
    return autograd::Function::Apply(std::move(f), inputs);
  });
  m.def("set_recording", &autograd::SetRecording);
  m.def("set_training", &autograd::SetTraining);
  m.def("is_recording", &autograd::IsRecording);
  m.def("is_training", &autograd::IsTraining);
  m.def("backward", [](const std::vector<NDArray>& heads, const std::vector<NDArray>& head_grads, bool retain_graph,
                       bool train_mode) { autograd::Backward(heads, head_grads, retain_graph, train_mode); },
        nb::call_guard<nb::gil_scoped_release>());
  m.def("grad", [](const std::vector<NDArray>& heads, const std::vector<NDArray>& variables,
                   const std::vector<NDArray>& head_grads, bool retain_graph, bool create_graph, bool train_mode) {
    return autograd::Grad(heads, variables, head_grads, retain_graph, create_graph, train_mode);
  }, nb::call_guard<nb::gil_scoped_release>());
  m.def("mark_variables", [](std::vector<NDArray> vars, const std::vector<NDArray>& grads,
                             const std::vector<std::string>& reqs) {
    std::vector<NDArray*> ptrs;
    std::vector<OpReqType> r;
    for (auto& v : vars) ptrs.push_back(&v);
    for (const auto& s : reqs) r.push_back(ReqOf(s));
    autograd::MarkVariables(ptrs, grads, r);
    return vars;
  });
}
