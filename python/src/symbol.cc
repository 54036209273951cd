// troupe._core's Symbol, Executor and CachedOp: graph/symbol.h, graph/executor.h and graph/cached_op.h as the
// Python modules troupe.symbol, troupe.executor and troupe.gluon use them.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "graph/cached_op.h"
#include "graph/executor.h"
#include "graph/symbol.h"
#include "op/operator.h"
#include "python/src/bindings.h"

namespace nb = nanobind;

namespace troupe::python {

namespace {

using Shapes = std::vector<std::optional<std::vector<std::int64_t>>>;

// Inferred shapes as Python lists: None where unknown.
Shapes ToLists(const std::vector<TShape>& shapes) {
  Shapes out;
  for (const auto& s : shapes) {
    if (s.ndim() < 0) {
      out.emplace_back(std::nullopt);
    } else {
      out.emplace_back(s.ToVector());
    }
  }
  return out;
}

// An operator node from positional and named inputs (named: by argument or auxiliary-state name).
Symbol CreateNode(const std::string& op, const std::vector<Symbol>& args, const std::map<std::string, Symbol>& named,
                  const Kwargs& params, const std::string& name, const SymbolAttrs& attrs) {
  if (named.empty()) return Symbol::Create(op, params, args, name, attrs);
  std::map<std::string, Symbol> all = named;
  if (!args.empty()) {
    std::unique_ptr<OperatorProperty> prop = OperatorProperty::Create(op);
    Kwargs p = params;
    prop->Init(p);
    const auto names = prop->ListArguments();
    if (args.size() > names.size()) {
      throw Error(op + ": " + std::to_string(args.size()) + " positional inputs for " + std::to_string(names.size()) +
                  " arguments");
    }
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (all.count(names[i]) != 0) throw Error(op + ": input '" + names[i] + "' given twice");
      all[names[i]] = args[i];
    }
  }
  return Symbol::Create(op, params, all, name, attrs);
}

std::vector<OpReqType> Reqs(const std::vector<std::string>& names) {
  std::vector<OpReqType> r;
  for (const auto& n : names) {
    if (n == "write") {
      r.push_back(kWriteTo);
    } else if (n == "add") {
      r.push_back(kAddTo);
    } else if (n == "null") {
      r.push_back(kNullOp);
    } else {
      throw Error("grad_req must be 'write', 'add' or 'null', got '" + n + "'");
    }
  }
  return r;
}

}  // namespace

void BindSymbol(nb::module_& m) {
  nb::class_<Symbol>(m, "Symbol")
      .def_static("variable", &Symbol::Variable, nb::arg("name"), nb::arg("attrs") = SymbolAttrs{})
      .def_static("create", &CreateNode)
      .def_static("group", &Symbol::Group)
      .def_static("from_json", &Symbol::FromJSON)
      .def_static("load", &Symbol::Load)
      .def("save", &Symbol::Save)
      .def("to_json", &Symbol::ToJSON)
      .def("num_outputs", &Symbol::NumOutputs)
      .def("output", [](const Symbol& s, std::size_t i) { return s[i]; })
      .def("list_arguments", &Symbol::ListArguments)
      .def("list_outputs", &Symbol::ListOutputs)
      .def("list_auxiliary_states", &Symbol::ListAuxiliaryStates)
      .def("get_internals", &Symbol::GetInternals)
      .def("name", &Symbol::name)
      .def("attr", &Symbol::GetAttr)
      .def("set_attr", &Symbol::SetAttr)
      .def("list_attr", &Symbol::ListAttrs)
      .def("substitute", &Symbol::Substitute)
      .def("infer_shape", [](const Symbol& s, const std::map<std::string, std::vector<std::int64_t>>& known) {
        std::map<std::string, TShape> k;
        for (const auto& [n, d] : known) k[n] = TShape(d);
        std::vector<TShape> a, o, x;
        const bool complete = s.InferShape(k, &a, &o, &x);
        return std::make_tuple(complete, ToLists(a), ToLists(o), ToLists(x));
      })
      .def("infer_type", [](const Symbol& s, const std::map<std::string, int>& known) {
        std::vector<int> a, o, x;
        const bool complete = s.InferType(known, &a, &o, &x);
        return std::make_tuple(complete, a, o, x);
      });

  nb::class_<Executor>(m, "Executor")
      .def_static("bind", [](const Symbol& s, const std::string& ctx, const std::vector<NDArray>& args,
                             const std::vector<NDArray>& grads, const std::vector<std::string>& reqs,
                             const std::vector<NDArray>& aux) {
        return Executor::Bind(s, Context::Parse(ctx), args, grads, Reqs(reqs), aux);
      })
      .def("forward", &Executor::Forward, nb::call_guard<nb::gil_scoped_release>())
      .def("backward", [](Executor& e, const std::vector<NDArray>& heads) { e.Backward(heads); },
           nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("outputs", &Executor::outputs)
      .def_prop_ro("arg_arrays", &Executor::arg_arrays)
      .def_prop_ro("grad_arrays", &Executor::grad_arrays)
      .def_prop_ro("aux_arrays", &Executor::aux_arrays)
      .def("set_arg", &Executor::SetArgArray)
      .def("set_aux", &Executor::SetAuxArray);

  nb::class_<CachedOp>(m, "CachedOp")
      .def("__init__", [](CachedOp* self, const Symbol& s, bool static_alloc, bool static_shape) {
        CachedOpOptions o;
        o.static_alloc = static_alloc;
        o.static_shape = static_shape;
        new (self) CachedOp(s, o);
      })
      .def("inputs", &CachedOp::ListInputs)
      .def("__call__", [](CachedOp& op, const std::vector<NDArray>& in) { return op(in); });
}

}  // namespace troupe::python
