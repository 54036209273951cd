// MXNet's control-flow operators (_foreach, _while_loop, _cond): operators that carry subgraphs (Symbols) and
// run them on the thread that drives the graph, the way MXNet 1.x runs them (ExecType::kSubgraphExec).
//
// A control-flow node is an ordinary node of the outer graph for shape and type inference, JSON and the memory
// plan; its property (ControlFlowProperty) holds the subgraphs and infers through them. The executor runs it
// with a ControlFlowRunner instead of an OperatorRunner: between the node's neighbours, the runner binds
// executors of the subgraphs to views of the node's input arrays and pushes their passes one iteration after
// another (a loop or a condition reads its condition's value first: that waits for it), then pushes the copies
// of their results into the node's outputs. With gradients it keeps one executor per iteration, and the
// backward pass runs them in reverse order, passing the loop states' gradients from one to the next.
//
// A subgraph's inputs are its variables in MXNet's list_inputs() order (depth-first from its outputs, what
// IndexGraph gives); the *_locs parameters place the node's inputs among them as MXNet's do.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "graph/symbol.h"
#include "op/operator.h"

namespace troupe {
namespace graph {

// A subgraph with its inputs in list_inputs() order and where each of them goes when it is bound.
struct Subgraph {
  Symbol symbol;
  std::vector<std::string> inputs;  // variable names, list_inputs() order
  std::vector<int> input_of_arg;    // per ListArguments() entry: its index in `inputs`
  std::vector<int> input_of_aux;    // per ListAuxiliaryStates() entry
  std::size_t num_outputs = 0;

  explicit Subgraph(Symbol s);
  // Shapes / types of the inputs (list_inputs order; unknown ones as TShape() / kTypeUnknown) through the
  // subgraph: fills what it learns of the inputs and of the outputs. Returns true when every shape is known.
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, const std::string& what) const;
  bool InferType(std::vector<int>* in, std::vector<int>* out, const std::string& what) const;
  // An executor of the subgraph on `in` (list_inputs order), with a gradient array (kWriteTo) for every
  // argument when `grads`.
  std::unique_ptr<Executor> Bind(const std::vector<NDArray>& in, bool grads, Context ctx, Engine* engine) const;
  // Binds `exec` (made by Bind) to other arrays of the same shapes.
  void Rebind(Executor& exec, const std::vector<NDArray>& in) const;
  // The gradient arrays of `exec` per input (none for auxiliary states).
  std::vector<NDArray> InputGrads(const Executor& exec) const;
};

class ControlFlowRunner;

// The property of a control-flow operator. Init parses the parameters; SetSubgraphs (before the property is
// shared) gives it its subgraphs, checked against the parameters.
class ControlFlowProperty : public OperatorProperty {
 public:
  // How many subgraphs the operator takes, and their roles ("body"; "cond", "func"; ...).
  virtual std::vector<std::string> SubgraphRoles() const = 0;
  // Throws troupe::Error naming the operator for a wrong count, or subgraphs that do not fit the parameters.
  void SetSubgraphs(std::vector<Symbol> subgraphs);
  const std::vector<Subgraph>& subgraphs() const { return subgraphs_; }
  std::vector<Symbol> subgraph_symbols() const;
  virtual std::unique_ptr<ControlFlowRunner> CreateRunner(Context ctx, Engine* engine) const = 0;
  // The subgraphs are run by the executor (ControlFlowRunner), not by an Operator: this throws.
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  // The backward pass reads every input and every output gradient (the executors of the iterations are bound to
  // the inputs).
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;

 protected:
  virtual void CheckSubgraphs() const = 0;  // after SetSubgraphs
  std::vector<Subgraph> subgraphs_;
};

// Null when `op` is not a control-flow operator.
const ControlFlowProperty* AsControlFlow(const OperatorProperty& op);

// Runs one control-flow node for an executor (see the top of this file). One thread calls it, the one driving the
// executor.
class ControlFlowRunner {
 public:
  virtual ~ControlFlowRunner() = default;
  // in: the node's inputs; out: its outputs (shapes and types as inferred); req: per output. need_grad: keep
  // what Backward needs.
  virtual void Forward(bool is_train, bool need_grad, const std::vector<NDArray>& in, const std::vector<NDArray>& out,
                       const std::vector<OpReqType>& req) = 0;
  // The backward pass of the last Forward(need_grad = true): out_grad per output, in_grad and req per input
  // (none arrays where kNullOp).
  virtual void Backward(const std::vector<NDArray>& out_grad, const std::vector<NDArray>& in_grad,
                        const std::vector<OpReqType>& req) = 0;
};

}  // namespace graph
}  // namespace troupe
