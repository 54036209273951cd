// The operator framework of the seed: Operator (the computation, Forward/Backward on TBlobs),
// OperatorProperty (the semantics: arguments, outputs, shapes, types, resources, backward dependencies,
// in-place options) and the registry of properties by name.
//
// An Operator is created by its property for one device and is called by the engine's workers (through
// OperatorRunner, op/imperative.h, or the executor): calls to one Operator object never overlap, so it may
// keep per-shape state (cuDNN descriptors, workspace sizes) without locking. A property is immutable after
// Init and may be shared between threads. The registry is filled during static initialisation and is
// read-only afterwards; its lookups are thread-safe.
#pragma once

#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/context.h"
#include "op/param.h"
#include "tensor/resource.h"
#include "tensor/tensor.h"

namespace troupe {

// How an operator must write an output (or an input gradient).
enum OpReqType {
  kNullOp,        // do not write (the result is not needed)
  kWriteTo,       // overwrite; the destination does not alias any input
  kWriteInplace,  // overwrite; the destination is the memory of the input named by the in-place option
  kAddTo,         // add to what is there (gradient accumulation)
};

// Type flags as in MXNet (the values of DType), with -1 for "not known yet" during type inference.
constexpr int kTypeUnknown = -1;

// What Forward/Backward get besides tensors.
struct OpContext {
  bool is_train = false;             // training: Dropout drops, BatchNorm uses batch statistics
  RunContext run_ctx;                // the device; on GPU run_ctx.stream is the cudaStream_t* to use
  std::vector<Resource> requested;   // what ForwardResource/BackwardResource asked for, in that order
  // Forward: each input's state, its engine variable's id and write count (Var::id, Var::version) when the
  // call runs; the same state means the same contents, so an operator may keep something derived from an
  // input (a weight in another layout) across calls. Empty when the caller does not know: then nothing may be
  // kept.
  struct InputState {
    std::uint64_t var = 0, version = 0;
    bool operator==(const InputState&) const = default;
  };
  std::vector<InputState> in_states;
  // Backward: the dynamic loss scale of mixed-precision training (train/loss_scaler.h). The loss outputs
  // (SoftmaxOutput, the *RegressionOutput heads) multiply the gradient they start by it, as MXNet's AMP
  // multiplies their grad_scale; every other operator ignores it. 1 otherwise.
  float loss_scale = 1.0f;
};

// Applies a request to one element: out = v (kWriteTo/kWriteInplace), out += v (kAddTo), nothing (kNullOp).
// Host and device code (CUDA kernels of the op library use it per element).
template <typename T>
TROUPE_HOST_DEVICE inline void Assign(T* out, OpReqType req, T v) {
  switch (req) {
    case kNullOp: break;
    case kWriteTo:
    case kWriteInplace: *out = v; break;
    case kAddTo: *out += v; break;
  }
}

class Operator {
 public:
  virtual ~Operator() = default;
  // in_data: the arguments (ListArguments order); out_data: every output (NumOutputs, hidden ones too);
  // aux_states: ListAuxiliaryStates order (may be updated, e.g. BatchNorm's moving statistics).
  virtual void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
                       const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux_states) = 0;
  // out_grad: one per visible output; in_grad and req: one per argument. Entries of out_grad, in_data and
  // out_data that DeclareBackwardDependency did not name are empty TBlobs (null dptr).
  // The default throws troupe::Error ("operator X has no backward").
  virtual void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                        const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                        const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux_states);
};

class OperatorProperty {
 public:
  virtual ~OperatorProperty() = default;
  // Sets the parameters; throws troupe::Error for an unknown key or a bad value (naming the operator).
  virtual void Init(const Kwargs& kwargs) = 0;
  // Every parameter as text (round-trips through Init).
  virtual Kwargs GetParams() const = 0;
  virtual std::vector<std::string> ListArguments() const { return {"data"}; }
  virtual std::vector<std::string> ListOutputs() const { return {"output"}; }
  virtual std::vector<std::string> ListAuxiliaryStates() const { return {}; }
  virtual int NumOutputs() const { return static_cast<int>(ListOutputs().size()); }
  virtual int NumVisibleOutputs() const { return NumOutputs(); }
  // Fills unknown shapes (ndim -1 or a -1 dimension) from the known ones. Returns false when there is not
  // enough information yet; throws troupe::Error naming the operator and the argument when shapes are
  // inconsistent. in_shape has one entry per argument; out_shape/aux_shape are resized by the callee.
  virtual bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                          std::vector<TShape>* aux_shape) const = 0;
  // Same for type flags (kTypeUnknown when not known). The default: every argument, output and auxiliary
  // state gets the type of the first known argument (false when none is known); a different known type is
  // an error naming the argument.
  virtual bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const;
  virtual std::unique_ptr<OperatorProperty> Copy() const = 0;
  // The registered name ("FullyConnected").
  virtual std::string TypeString() const = 0;
  virtual std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>& /*in_shape*/) const { return {}; }
  virtual std::vector<ResourceRequest> BackwardResource(const std::vector<TShape>& /*in_shape*/) const { return {}; }
  // Which of out_grad, in_data and out_data Backward reads, given ids for each (the default: all of them).
  virtual std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                                     const std::vector<int>& out_data) const;
  // Pairs (input index, output id): the output may share the input's memory (kWriteInplace).
  virtual std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& /*in_data*/,
                                                                  const std::vector<void*>& /*out_data*/) const {
    return {};
  }
  // True when each ForwardInplaceOption output is its input's bytes unchanged (MXNet's FInplaceIdentity:
  // Flatten, Reshape). The executor may then make such an output a view of an argument, with no copy.
  virtual bool ForwardInplaceIdentity() const { return false; }
  // Pairs (id of out_grad/in_data/out_data, in_grad id): the input gradient may share that memory.
  virtual std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& /*out_grad*/,
                                                                   const std::vector<int>& /*in_data*/,
                                                                   const std::vector<int>& /*out_data*/,
                                                                   const std::vector<void*>& /*in_grad*/) const {
    return {};
  }
  // Whether Backward exists (false: the operator is forward-only, e.g. argmax-like functions).
  virtual bool HasBackward() const { return true; }
  // Creates the computation for a device. Throws troupe::Error when the operator has no implementation for
  // it (a GPU context in a build without CUDA names the operator and the device).
  virtual std::unique_ptr<Operator> CreateOperator(Context ctx) const = 0;

  // A property by registered name or alias, not yet initialised. Throws troupe::Error for an unknown name.
  static std::unique_ptr<OperatorProperty> Create(const std::string& name);
};

// Shape-inference helper: sets (*shapes)[index] to `expected` when unknown (or partly unknown and
// compatible); throws troupe::Error "<op>: shape of argument '<name>' is (a,b) but (c,d) is required" when it
// contradicts. Returns nothing; use ShapeKnown to test.
void AssignShape(std::vector<TShape>* shapes, std::size_t index, const TShape& expected, const std::string& op,
                 const std::string& name);
// Same for type flags.
void AssignType(std::vector<int>* types, std::size_t index, int expected, const std::string& op,
                const std::string& name);

// An argument of an operator as documented.
struct ArgumentDoc {
  std::string name;
  std::string type;  // "NDArray-or-Symbol"
  std::string description;
};

// A registered operator: name, docs and factory. Chained setters are for registration only.
struct OperatorInfo {
  std::string name;
  std::string description;  // one line
  std::vector<ArgumentDoc> arguments;
  std::vector<ParamDoc> params;
  std::vector<std::string> aliases;
  bool simple_op = false;  // registered through SimpleOp
  // A SimpleOp's answer to "has GPU functions" (its functions are attached by name from .cu files);
  // empty for other operators, whose GPU code is a RegisterGpuOperator factory. See HasGpuImplementation.
  std::function<bool()> has_gpu_functions;
  std::function<std::unique_ptr<OperatorProperty>()> factory;

  OperatorInfo& describe(const std::string& text) {
    description = text;
    return *this;
  }
  OperatorInfo& add_argument(const std::string& arg, const std::string& type, const std::string& text) {
    arguments.push_back({arg, type, text});
    return *this;
  }
  OperatorInfo& add_arguments(const std::vector<ParamDoc>& docs) {
    params.insert(params.end(), docs.begin(), docs.end());
    return *this;
  }
  OperatorInfo& add_alias(const std::string& alias);
};

class OperatorRegistry {
 public:
  static OperatorRegistry& Get();
  // Adds an operator; a second registration of a name throws troupe::Error. The reference stays valid.
  OperatorInfo& Register(const std::string& name, std::function<std::unique_ptr<OperatorProperty>()> factory);
  // By name or alias; null when unknown.
  const OperatorInfo* Find(const std::string& name) const;
  // Registered names (no aliases), sorted.
  std::vector<std::string> ListNames() const;
  // Makes `alias` find `info` (OperatorInfo::add_alias). Throws troupe::Error when the name is taken.
  void AddAlias(OperatorInfo* info, const std::string& alias);

  struct Impl;

 private:
  OperatorRegistry();
  std::unique_ptr<Impl> impl_;
};

#define TROUPE_OP_CONCAT_(a, b) a##b
#define TROUPE_OP_CONCAT(a, b) TROUPE_OP_CONCAT_(a, b)
// TROUPE_REGISTER_OP_PROPERTY(FullyConnected, FullyConnectedProp).describe("...").add_argument(...)...;
#define TROUPE_REGISTER_OP_PROPERTY(Name, PropClass)                                                      \
  [[maybe_unused]] static ::troupe::OperatorInfo& TROUPE_OP_CONCAT(troupe_op_registration_, __COUNTER__) = \
      ::troupe::OperatorRegistry::Get().Register(                                                         \
          #Name, []() -> std::unique_ptr<::troupe::OperatorProperty> { return std::make_unique<PropClass>(); })

// GPU implementations live in .cu files that register a factory per operator name at static
// initialisation; a property's CreateOperator(gpu ctx) asks for it. In a build without CUDA nothing is
// registered and CreateGpuOperator throws a troupe::Error naming the operator.
using GpuOperatorFactory = std::function<std::unique_ptr<Operator>(const OperatorProperty& prop, Context ctx)>;
bool RegisterGpuOperator(const std::string& name, GpuOperatorFactory factory);
std::unique_ptr<Operator> CreateGpuOperator(const OperatorProperty& prop, Context ctx);
// Whether the registered operator `name` (or an alias) runs on GPU contexts in this build.
bool HasGpuImplementation(const std::string& name);

}  // namespace troupe
