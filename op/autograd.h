// Autograd on NDArrays: MXNet's mx.autograd for C++ (record, attach_grad, backward).
//
// While a thread records (RecordScope), every Invoke of a registered operator (op/imperative.h), and NDArray's
// own operations that make a new value from an array of a graph (a + b, a * 2.0, AsType, Reshape, Slice, At:
// run as elemwise_add, _mul_scalar, Cast, Reshape, slice_axis), add a node to a graph kept with its output
// arrays: the operator, its inputs and outputs as they were at the call. Backward
// walks that graph from the heads back to the variables (arrays given a gradient buffer by AttachGrad or
// MarkVariables) and pushes each operator's own Backward (the same gradient definitions the symbolic executor
// runs) to the engine, summing the gradients of an array used several times, then writes each variable's
// gradient into its buffer under its request (kWriteTo replaces, kAddTo accumulates across Backward calls,
// kNullOp skips). Nothing is recomputed: the nodes hold the forward pass's arrays until a backward pass without
// retain_graph releases them, each node's as soon as its gradient is pushed. Grad (MXNet's autograd.grad)
// returns the gradients of given variables instead, and with create_graph records the gradient computation so
// that it can be differentiated again.
//
//   NDArray x = ...;
//   autograd::AttachGrad(&x);
//   NDArray y;
//   {
//     autograd::RecordScope record;                          // train mode: Dropout drops, BatchNorm uses the batch
//     y = Invoke("Activation", {Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "4"}})[0]},
//                {{"act_type", "relu"}})[0];
//   }
//   autograd::Backward({y});                                 // head gradient: ones
//   NDArray dx = autograd::GradOf(x);                        // pushed; read it to wait
//
// Recording and the train/predict mode are per thread (as MXNet's), and scopes nest: each restores what it
// found. An array keeps its node through copies of its handle (copies are the same value); AttachGrad sets the
// handle it is given, so attach before making the copies you compute with.
//
// Errors (troupe::Error, at the call): Backward from an array that was not computed while recording and is not
// a variable, through a graph a backward pass without retain_graph already freed, through an operator without a
// backward pass, or after an array the backward pass reads was written in place since it was recorded (a
// write pushed on its engine variable since); head gradients of the wrong count or shape; Grad with an array
// that is not a variable, or with create_graph through a node that has no higher-order gradient. While recording, an
// in-place operation on an array of a graph (a += b, fills, CopyFromTo into it, or reading one into another
// array in place) is an error, and so is Invoke into given outputs: the graph follows new arrays only.
//
// Thread-safety: recording state is thread-local. The graph of one computation must not be recorded and
// differentiated from several threads at once; different computations may run on different threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "op/operator.h"
#include "tensor/ndarray.h"

namespace troupe {
class OperatorRunner;
}

namespace troupe::autograd {

// Whether the calling thread records operators, and whether operators run in training mode (is_train) when
// called through Invoke. Both start false. Each setter returns the previous value.
bool IsRecording();
bool IsTraining();
bool SetRecording(bool recording);
bool SetTraining(bool training);

// Records (and sets the mode) for its lifetime, then restores both: MXNet's autograd.record(train_mode).
class RecordScope {
 public:
  explicit RecordScope(bool train_mode = true);
  ~RecordScope();
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  bool was_recording_, was_training_;
};

// Stops recording (and sets the mode) for its lifetime: MXNet's autograd.pause(train_mode).
class PauseScope {
 public:
  explicit PauseScope(bool train_mode = false);
  ~PauseScope();
  PauseScope(const PauseScope&) = delete;
  PauseScope& operator=(const PauseScope&) = delete;

 private:
  bool was_recording_, was_training_;
};

// Makes *var a variable with a gradient buffer of zeros of its shape, type and device (MXNet's attach_grad).
// req: kWriteTo (Backward replaces the buffer), kAddTo (Backward adds to it) or kNullOp (no gradient).
// Replaces any node *var had: it becomes a leaf of the graphs recorded from now on.
void AttachGrad(NDArray* var, OpReqType req = kWriteTo);
// MXNet's mark_variables: vars[i] gets the gradient buffer grads[i] (same shape, type and device) and
// reqs[i]. Throws troupe::Error for counts or shapes that do not match.
void MarkVariables(const std::vector<NDArray*>& vars, const std::vector<NDArray>& grads,
                   const std::vector<OpReqType>& reqs);
// The gradient buffer of a variable; a none array for an array that is not one.
NDArray GradOf(const NDArray& var);
// Whether `a` belongs to a graph: a variable, or an array computed while recording (a gradient can flow to
// or through it).
bool InGraph(const NDArray& a);

// Computes the gradients of the heads with respect to every variable they were computed from and writes them
// into the variables' buffers (pushed; reading a buffer waits). head_grads: one per head (the head's shape),
// or empty for ones. retain_graph false frees the graph's arrays as the pass goes, each node's as soon as its
// gradient is pushed (a second backward pass through it is an error); true keeps it for another.
// train_mode (MXNet's): IsTraining() during the pass, which a Function's Backward sees. Operators' own
// backward passes (OperatorRunner::Backward) are always given is_train true; no registered operator's backward
// reads it.
void Backward(const std::vector<NDArray>& heads, const std::vector<NDArray>& head_grads = {},
              bool retain_graph = false, bool train_mode = true);

// MXNet's autograd.grad: the gradients of the heads with respect to `variables` (each a variable: AttachGrad or
// MarkVariables), as new arrays, one per variable (zeros for one the heads do not depend on). The variables'
// gradient buffers are not touched. head_grads, retain_graph and train_mode as for Backward; train_mode is also
// the mode of the operators create_graph invokes. Unlike MXNet's Python grad, retain_graph does not follow
// create_graph: pass both to differentiate a gradient that reads the forward pass's outputs (tanh's, exp's).
//
// create_graph: the gradient computation is itself recorded, each node's gradient written as registered
// operators invoked while recording (d sin(x) = og * cos(x), d tanh = og * (1 - y * y), the gradients of dot
// as dots with transpose flags), so the returned arrays belong to a graph and Backward or Grad on them gives
// second (and higher) derivatives:
//
//   NDArray dx;
//   {
//     autograd::RecordScope record;
//     const NDArray y = Invoke("tanh", {x})[0];
//     dx = autograd::Grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];  // 1 - tanh^2
//   }
//   autograd::Backward({dx});                                // GradOf(x): -2 tanh (1 - tanh^2)
//
// Without create_graph the gradients come from each operator's own backward pass, as Backward's do.
// HigherOrderOperators() lists the operators create_graph covers.
//
// Throws troupe::Error, before anything is pushed, for what Backward refuses, for an array among `variables`
// that is not a variable, and with create_graph for a node on the way to a variable that has no higher-order
// gradient (an operator outside HigherOrderOperators(), an Activation act_type or dot operand rank it does not
// cover, or a Function).
std::vector<NDArray> Grad(const std::vector<NDArray>& heads, const std::vector<NDArray>& variables,
                          const std::vector<NDArray>& head_grads = {}, bool retain_graph = false,
                          bool create_graph = false, bool train_mode = true);

// The operators Grad's create_graph can differentiate through, sorted. Activation: act_type relu, sigmoid,
// tanh or softrelu; dot: 2-D operands.
std::vector<std::string> HigherOrderOperators();

// A differentiable function written in C++ (MXNet's autograd.Function): Forward computes the outputs from the
// inputs with any NDArray code (recording is paused inside), Backward the inputs' gradients from the outputs'.
// Apply runs Forward and, while the thread records, adds one node whose backward pass is this object's
// Backward; the object is kept until the graph is freed, so it may keep what Forward computed for Backward.
//
//   struct Sigmoid : autograd::Function {
//     NDArray y;
//     std::vector<NDArray> Forward(const std::vector<NDArray>& in) override {
//       y = Invoke("sigmoid", {in[0]})[0];
//       return {y};
//     }
//     std::vector<NDArray> Backward(const std::vector<NDArray>& dy) override {
//       return {dy[0] * y * (y * -1.0 + 1.0)};
//     }
//   };
//   NDArray out = autograd::Function::Apply(std::make_shared<Sigmoid>(), {x})[0];
class Function {
 public:
  virtual ~Function() = default;
  // The outputs (at least one); they must be new arrays, not the inputs.
  virtual std::vector<NDArray> Forward(const std::vector<NDArray>& inputs) = 0;
  // One gradient per input, each of its input's shape (a none array: no gradient for that input), from one
  // gradient per output (zeros where an output got none). Runs unrecorded, pushed like everything else.
  virtual std::vector<NDArray> Backward(const std::vector<NDArray>& out_grads) = 0;
  // Throws troupe::Error when Forward returns no output or an input, and (at Backward) when Backward returns
  // the wrong number or shapes of gradients.
  static std::vector<NDArray> Apply(std::shared_ptr<Function> function, const std::vector<NDArray>& inputs);
};

// Called by Invoke after pushing a Forward while recording: adds the node. runner: the runner the Forward went
// through (Backward reuses it and its Operator); args, aux: the inputs; outputs: every output (hidden ones
// too), whose handles get the node.
void RecordOp(std::shared_ptr<OperatorRunner> runner, const std::vector<NDArray>& args,
              const std::vector<NDArray>& aux, std::vector<NDArray>* outputs);

}  // namespace troupe::autograd
