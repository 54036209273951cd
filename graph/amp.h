// Automatic mixed precision for symbols, as MXNet 1.9's mx.contrib.amp.convert_symbol: a float32 network
// becomes one that computes chosen operators in float16 or bfloat16, with amp_cast / amp_multicast nodes where
// an array changes type, so the converted graph is an ordinary symbol (inspectable, saved as MXNet's JSON,
// loadable by MXNet) and the executor needs nothing special for it.
//
// The rules, per operator node in topological order (MXNet's ReducePrecision pass):
//   - target list (Convolution, FullyConnected, ...): every input not already in the target type is cast to it
//     (parameters too, so the weights stay float32 "master" copies and their gradients come back as float32);
//     inputs in auxiliary-state positions and inputs the operator wants in float32 (BatchNorm's gamma) are left;
//   - float32 list (SoftmaxOutput, Flatten, norms, ...) and excluded node names: inputs cast to float32;
//   - widest-type list (elemwise_add, Concat, ...): inputs brought to one type (amp_multicast where a type is
//     not known from the graph, amp_cast where it is);
//   - conditional float32 list: float32 when a parameter has one of the listed values (Activation softrelu);
//   - any other operator runs in whatever type its first input has.
// The symbol's outputs are cast back to float32. Casts of one array to one type are shared by its consumers.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "tensor/tensor.h"

namespace troupe::amp {

// An operator that must run in float32 when its parameter `param` has one of `values`.
struct ConditionalFp32Op {
  std::string op, param;
  std::vector<std::string> values;
};

struct ConvertOptions {
  DType target_dtype = DType::kFloat16;  // float16 or bfloat16
  // Overrides of the default lists (unset: the lists below for target_dtype).
  std::optional<std::vector<std::string>> target_dtype_ops, fp32_ops;
  std::optional<std::vector<ConditionalFp32Op>> conditional_fp32_ops;
  std::vector<std::string> excluded_sym_names;  // nodes that stay float32
  // Inputs that are data (not parameters); unset: every input without a "__dtype__" attribute, as MXNet.
  std::optional<std::vector<std::string>> data_names;
  // Parameters consumed only in the target type are not cast in the graph: the caller converts them (MXNet's
  // convert_model does). Off by default: parameters stay float32.
  bool cast_optional_params = false;
};

// The converted symbol. Throws troupe::Error for a target type other than float16/bfloat16, for an operator
// in two lists, and for a list naming an operator that is in none of the defaults (as MXNet refuses them).
Symbol ConvertSymbol(const Symbol& symbol, const ConvertOptions& options = {});

// The default lists (operator names as registered, aliases included where MXNet lists them).
std::vector<std::string> ListLp16Ops(DType target);       // computed in the target type
std::vector<std::string> ListFp32Ops(DType target);       // cast to float32
std::vector<std::string> ListLp16Fp32Ops(DType target);   // either type: no cast
std::vector<std::string> ListWidestTypeCast(DType target);
std::vector<ConditionalFp32Op> ListConditionalFp32Ops(DType target);

}  // namespace troupe::amp
