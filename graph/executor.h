// Executor — a Symbol bound to a device and to arrays (the seed's "Symbolic Execution").
//
// Binding infers every shape and type, creates one OperatorRunner per operator node, builds the backward
// pass when gradients are requested, and plans the memory of every intermediate array: an output may take
// its input's buffer where the operator's in-place options allow it and nothing else still needs the input,
// and buffers whose last reader has run are reused by later arrays of the same size; arrays that Backward
// does not read (DeclareBackwardDependency) are released after their last forward reader. The planner's
// result is reported (MemoryPlanStats) and can be switched off (ExecutorOptions::plan_memory): outputs and
// gradients are identical either way.
//
// Forward and Backward push every node to the engine and return at once; read an output (WaitToRead,
// ToVector) or a gradient to wait. An error in an operator poisons the arrays it writes and surfaces there.
// Bulk execution (MXNet's MXNET_EXEC_BULK_EXEC_*): consecutive operators of a pass, up to
// ExecutorOptions::bulk_max_nodes, run as one engine function that reads and writes the union of their
// arrays, in their order. That saves the engine's hand-off between small operators; the price is that
// nothing waiting for one of the segment's arrays starts before the whole segment ends. So, as in MXNet, a
// backward segment ends at each operator that writes an argument's gradient: a KVStore push of that gradient
// starts while the rest of backward runs. An error in one of them poisons every array the segment writes
// (the later operators do not run).
// Gradient of an entry used by several nodes: the contributions are added (the first written, the others
// added).
//
// Thread-safety: one thread drives an Executor (Forward, Backward, the accessors); the arrays it returns may
// be read from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "tensor/ndarray.h"
#include "op/operator.h"

namespace troupe {

struct ExecutorOptions {
  bool plan_memory = true;    // false: every intermediate array gets its own buffer
  Engine* engine = nullptr;   // null: the engine of the first bound array, else Engine::Get()
  // Operators per engine function (bulk execution); 1: one function per operator. -1: the setting
  // TROUPE_EXEC_BULK_MAX_NODES, default 15 (MXNet's MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN default).
  int bulk_max_nodes = -1;
  // Inference fusion (as MXNet's MKLDNN backend): in an executor bound without gradients on the CPU,
  // Convolution [-> BatchNorm] -> Activation (relu, sigmoid, tanh, softrelu), Convolution [-> BatchNorm] ->
  // elemwise_add [-> Activation] and Convolution -> BatchNorm run as one oneDNN convolution with post-ops
  // (op/detail/fusion.h; the BatchNorm folded into the weights with its moving statistics), where the
  // intermediate arrays have no other reader and are not outputs, and the arrays are float32; arrays between
  // fused convolutions stay in oneDNN's blocked layout. The fused node is named after the nodes it replaces
  // ("conv1+relu1"), in the profiler too. Results equal the unfused ones up to float32 rounding.
  // 1: fuse, 0: never; -1: the setting TROUPE_EXEC_FUSE, default 1. Executors with gradients never fuse.
  int fuse_inference = -1;
};

struct MemoryPlanStats {
  std::int64_t naive_bytes = 0;    // intermediate arrays (outputs of operators, their gradients), each its own
  std::int64_t planned_bytes = 0;  // the buffers the plan allocates for the same arrays
  int inplace = 0;                 // arrays that took their input's buffer
  int reused = 0;                  // arrays that reuse a released buffer
};

class Executor {
 public:
  // args: one per ListArguments(), aux_states: one per ListAuxiliaryStates(), on ctx, with shapes and types
  // the symbol accepts. grad_req: one per argument, or one entry for all: kNullOp (no gradient), kWriteTo,
  // kAddTo (gradient added to the array). arg_grads: one per argument (none arrays where grad_req is
  // kNullOp; empty when every grad_req is kNullOp). Throws troupe::Error naming the argument for a missing
  // or mis-shaped array, and the node for shape errors.
  static std::unique_ptr<Executor> Bind(const Symbol& symbol, Context ctx, const std::vector<NDArray>& args,
                                        const std::vector<NDArray>& arg_grads,
                                        const std::vector<OpReqType>& grad_req,
                                        const std::vector<NDArray>& aux_states,
                                        const ExecutorOptions& options = {});
  // Allocates the arguments, the gradients (where the request is not kNullOp) and the auxiliary states from
  // the shapes of some arguments (the rest inferred), all zero. grad_req applies to every argument except
  // those named in grad_req_by_name (the inputs such as "data" and labels are usually kNullOp).
  static std::unique_ptr<Executor> SimpleBind(const Symbol& symbol, Context ctx,
                                              const std::map<std::string, TShape>& shapes,
                                              OpReqType grad_req = kWriteTo,
                                              const std::map<std::string, OpReqType>& grad_req_by_name = {},
                                              const ExecutorOptions& options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Pushes the forward pass. is_train: operators run in training mode (Dropout drops, BatchNorm uses batch
  // statistics).
  void Forward(bool is_train);
  // Pushes the backward pass of the preceding Forward (usually Forward(true); after Forward(false) it is the
  // gradient of the prediction-mode pass, as MXNet's autograd.record(train_mode=False) gives). head_grads:
  // one per output, the gradient arriving at it; empty means ones for every output (what loss outputs such as
  // SoftmaxOutput ignore). Throws troupe::Error when the executor was bound without gradients or no Forward
  // came since the last Backward.
  void Backward(const std::vector<NDArray>& head_grads = {});
  // Binds argument i (ListArguments order) / auxiliary state i to another array of the same shape, type,
  // device and engine (troupe::Error otherwise): the following passes read and write it instead, without a
  // copy (outputs that are views of the argument follow). Call between passes, from the driving thread.
  void SetArgArray(std::size_t i, const NDArray& array);
  void SetAuxArray(std::size_t i, const NDArray& array);
  // The loss scale the following Backward calls start the gradient with (dynamic loss scaling of mixed-precision
  // training, train/loss_scaler.h: OpContext::loss_scale of the loss outputs). 1 after Bind. Call between
  // steps, from the thread that calls Backward.
  void SetLossScale(float scale);
  float loss_scale() const;

  const Symbol& symbol() const;
  Context ctx() const;
  const std::vector<NDArray>& outputs() const;     // ListOutputs order
  const std::vector<NDArray>& arg_arrays() const;  // ListArguments order
  const std::vector<NDArray>& grad_arrays() const; // ListArguments order; none where kNullOp
  const std::vector<NDArray>& aux_arrays() const;  // ListAuxiliaryStates order
  const std::vector<OpReqType>& grad_req() const;  // ListArguments order
  // By name (copies of the handles: writing into them writes the executor's arrays).
  std::map<std::string, NDArray> arg_dict() const;
  std::map<std::string, NDArray> grad_dict() const;  // only arguments with a gradient
  std::map<std::string, NDArray> aux_dict() const;
  MemoryPlanStats memory_stats() const;
  // The names of the fused nodes (ExecutorOptions::fuse_inference), in push order; empty when none.
  std::vector<std::string> fused_nodes() const;

  struct Impl;

 private:
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
