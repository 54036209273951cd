// Running registered operators on NDArrays through the engine.
//
// OperatorRunner binds one operator to a device and to input shapes/types: it infers the output and
// auxiliary shapes, creates the Operator, requests its resources, and pushes Forward and Backward to the
// engine with the right variables (inputs read; outputs, auxiliary states and resources written). The
// symbolic executor runs every node through one. Invoke() is the NDArray-function form: any registered
// operator, SimpleOps included, called on arrays.
//
// Thread-safety: Forward/Backward may be called from any thread; the pushed functions of one runner are
// serialised by the runner's own engine variable (an Operator object is never entered twice at once).
// Errors in the operator poison the written arrays and surface at WaitToRead / WaitForVar, as for any
// engine function. Shape, type and parameter errors throw troupe::Error at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensor/ndarray.h"
#include "op/operator.h"

namespace troupe {

class OperatorRunner {
 public:
  // prop must be initialised. in_shapes/in_types: one per argument; types may be kTypeUnknown when
  // inferable. out_shapes: what is known of the outputs' shapes from elsewhere (a graph's consumers), or
  // empty. Throws troupe::Error when shapes/types cannot be inferred or the device is not supported.
  // one_call: the runner serves one imperative call (Invoke makes one per call): its temporary space comes from
  // the copy that the operator's type and input shapes key, so that calling the same operator again and again
  // does not grow every copy to the largest workspace (bound runners, an executor's, take the copies in turn).
  OperatorRunner(std::shared_ptr<const OperatorProperty> prop, Context ctx, const std::vector<TShape>& in_shapes,
                 const std::vector<int>& in_types, Engine* engine = nullptr,
                 const std::vector<TShape>& out_shapes = {}, bool one_call = false);
  ~OperatorRunner();
  OperatorRunner(const OperatorRunner&) = delete;
  OperatorRunner& operator=(const OperatorRunner&) = delete;

  const OperatorProperty& prop() const;
  Context ctx() const;
  const std::vector<TShape>& in_shapes() const;
  const std::vector<TShape>& out_shapes() const;  // every output, hidden ones too
  const std::vector<TShape>& aux_shapes() const;
  const std::vector<int>& in_types() const;
  const std::vector<int>& out_types() const;
  const std::vector<int>& aux_types() const;

  // Pushes Forward. in: one per argument; out: one per output (NumOutputs); aux: one per auxiliary state;
  // req: one per output (empty means kWriteTo for all). Arrays must match the inferred shapes and types
  // and live on the runner's device (checked; troupe::Error otherwise). An output may be the same array as
  // an input only where ForwardInplaceOption allows it, with req kWriteInplace.
  void Forward(bool is_train, const std::vector<NDArray>& in, const std::vector<NDArray>& out,
               const std::vector<NDArray>& aux, const std::vector<OpReqType>& req = {});
  // Pushes Backward. out_grad: one per visible output; in_data/out_data as given to Forward (entries not
  // named by DeclareBackwardDependency may be none); in_grad and req: one per argument (kNullOp entries
  // may be none arrays).
  // loss_scale: OpContext::loss_scale of the call.
  void Backward(const std::vector<NDArray>& out_grad, const std::vector<NDArray>& in_data,
                const std::vector<NDArray>& out_data, const std::vector<NDArray>& aux,
                const std::vector<NDArray>& in_grad, const std::vector<OpReqType>& req, float loss_scale = 1.0f);

  // A Forward or Backward call checked and ready but not pushed: the function and the variables it reads
  // and writes. Forward/Backward push one each; the executor runs several in one engine function (MXNet's
  // bulk execution). Same arguments and checks as Forward/Backward.
  struct Call {
    SyncFn fn;
    std::vector<VarHandle> const_vars, mutable_vars;
  };
  Call PrepareForward(bool is_train, const std::vector<NDArray>& in, const std::vector<NDArray>& out,
                      const std::vector<NDArray>& aux, const std::vector<OpReqType>& req = {});
  Call PrepareBackward(const std::vector<NDArray>& out_grad, const std::vector<NDArray>& in_data,
                       const std::vector<NDArray>& out_data, const std::vector<NDArray>& aux,
                       const std::vector<NDArray>& in_grad, const std::vector<OpReqType>& req,
                       float loss_scale = 1.0f);
  const std::string& name() const;  // the operator's name, as given to the engine

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Calls a registered operator (by name or alias) on arrays: creates and initialises its property from
// kwargs, infers shapes and types from the inputs, allocates the visible outputs on the first input's
// device and pushes Forward, with is_train autograd's mode (false unless a RecordScope or PauseScope says
// otherwise; op/autograd.h). While the thread records, the call joins autograd's graph.
// inputs: the arguments followed by the auxiliary states.
// Returns without waiting; read the outputs to wait. Throws troupe::Error for an unknown operator, a bad
// parameter, the wrong number of inputs or inconsistent shapes.
std::vector<NDArray> Invoke(const std::string& op, const std::vector<NDArray>& inputs, const Kwargs& kwargs = {});
// The same for an initialised property (a graph node's, say), which is shared and must not change afterwards:
// no parameter parsing per call.
std::vector<NDArray> Invoke(std::shared_ptr<const OperatorProperty> prop, const std::vector<NDArray>& inputs);
// The same, writing into given outputs (one per visible output) with req (kWriteTo or kAddTo). Not while
// recording (troupe::Error): the graph follows the arrays Invoke returns.
void Invoke(const std::string& op, const std::vector<NDArray>& inputs, const Kwargs& kwargs,
            const std::vector<NDArray>& outputs, OpReqType req = kWriteTo);

}  // namespace troupe
