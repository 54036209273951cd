// The user's symbol and parameters for train --symbol, score and predict: see tools/symbol_net.h.
#include "tools/symbol_net.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/operator.h"

namespace troupe::tools {
namespace {

// Operators whose output is a loss head: Module feeds their "label" argument (if any) from the labels.
bool IsLossHead(const std::string& op) {
  static const std::set<std::string> kHeads = {"SoftmaxOutput",          "LinearRegressionOutput",
                                               "LogisticRegressionOutput", "MAERegressionOutput",
                                               "SVMOutput",              "MakeLoss"};
  return kHeads.count(op) > 0;
}

std::string Join(const std::vector<std::string>& names, std::size_t limit = 8) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

}  // namespace

SymbolNet LoadSymbolNet(const std::string& symbol_path, const std::string& params_path) {
  if (::access(symbol_path.c_str(), R_OK) != 0) throw Error("cannot read the symbol file " + symbol_path);
  if (!params_path.empty() && ::access(params_path.c_str(), R_OK) != 0) {
    throw Error("cannot read the parameter file " + params_path);
  }
  SymbolNet net;
  Symbol sym = Symbol::Load(symbol_path);
  if (sym.NumOutputs() != 1) {
    throw Error(symbol_path + " has " + std::to_string(sym.NumOutputs()) + " outputs (" + Join(sym.ListOutputs()) +
                "); a classifier here needs one (pick one output and save that symbol)");
  }
  // The head node's operator and inputs, from the symbol's JSON (MXNet's layout: nodes with "op", "name" and
  // "inputs" as [node, output, version], and "heads").
  const nlohmann::json graph = nlohmann::json::parse(sym.ToJSON());
  const nlohmann::json& head = graph["nodes"][graph["heads"][0][0].get<std::size_t>()];
  const std::string head_op = head["op"].get<std::string>();
  if (head_op != "null" && IsLossHead(head_op)) {
    net.head_op = head_op;
    const std::vector<std::string> args = OperatorProperty::Create(head_op)->ListArguments();
    const auto at = std::find(args.begin(), args.end(), "label");
    if (at != args.end()) {
      const auto i = static_cast<std::size_t>(at - args.begin());
      const nlohmann::json& inputs = head["inputs"];
      const nlohmann::json* label = i < inputs.size() ? &graph["nodes"][inputs[i][0].get<std::size_t>()] : nullptr;
      if (label == nullptr || (*label)["op"].get<std::string>() != "null") {
        throw Error(symbol_path + ": the label input of " + net.head_op + " '" + head["name"].get<std::string>() +
                    "' is computed, not an input of the symbol; it cannot be fed from the data's labels");
      }
      net.label_name = (*label)["name"].get<std::string>();
    }
  } else {
    sym = Symbol::Create("SoftmaxOutput", {}, {sym}, "softmax");
    net.head_op = "SoftmaxOutput";
    net.added_head = true;
    net.label_name = "softmax_label";
  }
  net.symbol = sym;

  const std::vector<std::string> args = sym.ListArguments();
  const std::vector<std::string> aux = sym.ListAuxiliaryStates();
  const std::set<std::string> arg_set(args.begin(), args.end()), aux_set(aux.begin(), aux.end());
  if (!params_path.empty()) {
    std::vector<NDArray> arrays;
    std::vector<std::string> names;
    const Context cpu = Context::CPU();
    NDArray::Load(params_path, &arrays, &names, &cpu);
    if (names.size() != arrays.size()) {
      throw Error(params_path + " holds " + std::to_string(arrays.size()) +
                  " unnamed arrays; parameters need names (\"arg:NAME\", \"aux:NAME\" or the plain NAME)");
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::string name = names[i];
      std::string kind;
      if (name.rfind("arg:", 0) == 0 || name.rfind("aux:", 0) == 0) {
        kind = name.substr(0, 3);
        name = name.substr(4);
      } else {
        kind = arg_set.count(name) ? "arg" : aux_set.count(name) ? "aux" : "";
      }
      if (kind == "arg" && arg_set.count(name) && name != net.label_name) {
        net.arg_params[name] = arrays[i];
      } else if (kind == "aux" && aux_set.count(name)) {
        net.aux_params[name] = arrays[i];
      } else {
        net.unused_params.push_back(names[i]);
      }
    }
  }
  for (const auto& a : args) {
    if (a != net.label_name && !net.arg_params.count(a)) {
      net.data_name = a;
      break;
    }
  }
  if (net.data_name.empty()) {
    throw Error(symbol_path + ": every argument of the symbol is a parameter in " + params_path +
                " or the label; there is no input left for the data");
  }
  for (const auto& a : args) {
    if (a != net.data_name && a != net.label_name) net.param_names.push_back(a);
  }
  net.param_names.insert(net.param_names.end(), aux.begin(), aux.end());
  net.loaded = net.arg_params.size() + net.aux_params.size();
  return net;
}

void CheckInputs(const SymbolNet& net, const TShape& data_shape, const TShape& label_shape, const std::string& source) {
  std::map<std::string, TShape> known{{net.data_name, data_shape}};
  if (!net.label_name.empty()) known[net.label_name] = label_shape;
  std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
  std::string why;
  bool complete = false;
  try {
    complete = net.symbol.InferShape(known, &arg_shapes, &out_shapes, &aux_shapes, &why);
  } catch (const Error& e) {
    throw Error("the symbol's input '" + net.data_name + "' does not take the data of " + source + " (shape " +
                data_shape.ToString() + ", labels " + label_shape.ToString() + "): " + e.what());
  }
  if (!complete) {
    throw Error("with data '" + net.data_name + "' of shape " + data_shape.ToString() + " from " + source +
                " the symbol's shapes are not all known: " + why +
                " (does the symbol have inputs other than the data, the label and parameters?)");
  }
  const std::vector<std::string> args = net.symbol.ListArguments();
  const std::vector<std::string> aux = net.symbol.ListAuxiliaryStates();
  auto check = [&](const std::vector<std::string>& names, const std::vector<TShape>& shapes,
                   const std::map<std::string, NDArray>& given) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto it = given.find(names[i]);
      if (it != given.end() && !(it->second.shape() == shapes[i])) {
        throw Error("parameter '" + names[i] + "' has shape " + it->second.shape().ToString() +
                    " in the parameter file, but with data '" + net.data_name + "' of shape " +
                    data_shape.ToString() + " (from " + source + ") the symbol needs " + shapes[i].ToString());
      }
    }
  };
  check(args, arg_shapes, net.arg_params);
  check(aux, aux_shapes, net.aux_params);
}

}  // namespace troupe::tools
