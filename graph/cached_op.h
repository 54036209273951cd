// A Symbol run as one imperative operator (MXNet's CachedOp: what a hybridized Gluon block runs), and a
// Symbol run operator by operator (what the same block runs before it is hybridized).
//
// CachedOp binds an Executor (graph/executor.h: its memory plan, bulk execution and, for inference, fusion)
// for the shapes, types and device of the inputs it is called with, keeps it for later calls with the same
// ones, and binds the call's arrays by reference (Executor::SetArgArray: no copy of the inputs). The outputs
// are new arrays (copies of the executor's, so a later call cannot change them). Operators run in autograd's
// mode (op/autograd.h: training inside a RecordScope). While the thread records and some input belongs to an
// autograd graph (a variable, or an array computed while recording), the call joins the graph as one node:
// its backward pass is the executor's Backward, the gradients of the inputs that are in a graph computed at
// once, the others not at all. Such a call holds its executor until the graph is freed (a Backward without
// retain_graph); a call while it is held binds another one, so one CachedOp may appear several times in one
// graph.
//
// Inputs: the symbol's arguments (ListArguments order) then its auxiliary states (ListAuxiliaryStates),
// as ListInputs says; auxiliary states (BatchNorm's moving statistics) are updated in place in training mode.
//
//   CachedOp op(net);                              // net: a Symbol with arguments data, w, b
//   NDArray y = op({x, w, b})[0];
//
// Thread-safety: one thread calls a CachedOp at a time. The arrays it returns may be read from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "graph/symbol.h"
#include "tensor/ndarray.h"

namespace troupe {

// MXNet's CachedOp flags.
struct CachedOpOptions {
  // Keep every executor bound for a signature (shapes, types, device, which inputs need gradients) between
  // calls, buffers included. false: keep one per signature; the extra executors that concurrent recorded calls
  // of one signature needed are dropped (their memory freed) when their graph is freed.
  bool static_alloc = false;
  // The inputs keep their shapes: keep the executors of one signature only; a call with another signature
  // drops them and binds anew. false: keep every signature seen.
  bool static_shape = false;
  // MXNet's data_indices / param_indices: which inputs are data (change every call) and which are parameters.
  // Checked (in range, disjoint); every input is bound by reference on every call, so they do not change
  // what runs.
  std::vector<int> data_indices, param_indices;
  ExecutorOptions executor;  // for every executor bound (its engine is the inputs')
};

class CachedOp {
 public:
  // Throws troupe::Error for an empty symbol or bad data_indices / param_indices.
  explicit CachedOp(Symbol symbol, CachedOpOptions options = {});
  ~CachedOp();
  CachedOp(const CachedOp&) = delete;
  CachedOp& operator=(const CachedOp&) = delete;

  const Symbol& symbol() const;
  // The names of the inputs in call order: ListArguments() then ListAuxiliaryStates().
  const std::vector<std::string>& ListInputs() const;
  // Runs the symbol on `inputs` (one per ListInputs entry, all on one device and engine) and returns one new
  // array per output (ListOutputs order). Returns without waiting; read the outputs to wait. Throws
  // troupe::Error naming the input for a wrong count, an empty array, a device or engine other than the first
  // input's, and for shapes or types the symbol rejects.
  std::vector<NDArray> operator()(const std::vector<NDArray>& inputs);
  // Executors currently bound (held by graphs or kept for later calls).
  std::size_t num_executors() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Runs `symbol` on `inputs` (ListArguments() then ListAuxiliaryStates() order) operator by operator through
// Invoke (op/imperative.h): each operator is an imperative call, recorded while the thread records, in
// autograd's mode. Returns the outputs (ListOutputs order). Throws troupe::Error as Invoke does, naming the
// node, and for a wrong number of inputs.
std::vector<NDArray> RunImperative(const Symbol& symbol, const std::vector<NDArray>& inputs);

}  // namespace troupe
