// A user's symbol file as the model of `troupe train --symbol`, `troupe score` and `troupe predict`: the
// symbol with a loss head, its data and label inputs, the parameters of a .params file sorted into
// arguments and auxiliary states, and the check of the symbol's inputs against a data iterator's shapes.
//
// Loss head: when the symbol's output comes from SoftmaxOutput (alias Softmax), LinearRegressionOutput,
// LogisticRegressionOutput, MAERegressionOutput, SVMOutput or MakeLoss, it is used as it is and the label
// input is that operator's "label" argument. Otherwise (a Gluon export ends in the logits) SoftmaxOutput
// named "softmax" is put on top, with the label input "softmax_label", as MXNet's Module expects.
//
// Data input: the symbol's first argument that is neither the label nor a parameter of the .params file
// (MXNet's convention puts "data" first).
//
// Parameters: a .params file of MXNet's checkpoints ("arg:NAME", "aux:NAME") or with plain names (Gluon's
// collect_params().save, some exports): a plain name goes to the arguments or the auxiliary states by the
// symbol's lists. Names the symbol does not have are set aside (reported, not used).
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "tensor/ndarray.h"

namespace troupe::tools {

struct SymbolNet {
  Symbol symbol;            // with the loss head
  std::string data_name;    // fed from DataBatch::data[0]
  std::string label_name;   // fed from DataBatch::label[0]
  std::string head_op;      // the loss head's operator ("SoftmaxOutput", ...)
  bool added_head = false;  // SoftmaxOutput was added on top of the file's output
  // The parameters of the file the symbol has (the matching ones) and the names it does not have.
  std::map<std::string, NDArray> arg_params, aux_params;
  std::vector<std::string> unused_params;
  // Parameters of the symbol (arguments other than data and label, then the auxiliary states): all of them
  // and how many the file gave.
  std::vector<std::string> param_names;
  std::size_t loaded = 0;
};

// Loads the symbol file and, unless params_path is empty, the .params file. Throws troupe::Error naming the
// file for a missing or malformed file, unknown operators (the loader lists them), a symbol with several
// outputs, or one with no input left for the data.
SymbolNet LoadSymbolNet(const std::string& symbol_path, const std::string& params_path);

// Checks that the net takes data of `data_shape` and labels of `label_shape` (from `source`, the --data
// text): shape inference must succeed, and every parameter from the file must have the shape the symbol
// needs for that data. Throws troupe::Error naming the input or the parameter and both shapes.
void CheckInputs(const SymbolNet& net, const TShape& data_shape, const TShape& label_shape, const std::string& source);

}  // namespace troupe::tools
