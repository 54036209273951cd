// SimpleOp: write a unary or binary operator once, as plain functions on TBlobs, and get both an NDArray
// function (Invoke(name, ...), op/imperative.h) and a symbolic operator (a registered OperatorProperty).
//
//   TROUPE_REGISTER_SIMPLE_OP(smooth_l1)
//       .set_function(DeviceType::kCPU, SmoothL1Forward, kInplaceInOut)
//       .set_gradient(DeviceType::kCPU, SmoothL1BackwardUseIn, kInplaceOutIn)
//       .set_enable_scalar(true)
//       .describe("Calculate Smooth L1 Loss(lhs, scalar)");
//
// The same chain names the GPU functions in a .cu file (set_function(DeviceType::kGPU, ...)); entries are
// found by name, so the order in which translation units register does not matter.
//
// Which gradient signature you pass decides what backward keeps alive (DeclareBackwardDependency):
// out_grad only (UnaryGradT0), out_grad and the output (UnaryGradT1), out_grad and the input (UnaryGradT2),
// for binary: out_grad only (BinaryGradT0) or out_grad and both inputs (BinaryGradT1).
//
// Functions run on the engine's workers; on GPU they must enqueue on ctx.stream. Registration happens during
// static initialisation; afterwards entries are read-only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "op/operator.h"

namespace troupe {

// What a SimpleOp function gets besides its tensors.
struct EnvArguments {
  double scalar = 0;               // the "scalar" parameter, when set_enable_scalar(true)
  Kwargs kwargs;                   // the other keyword arguments, when set_enable_kwargs(true)
  std::vector<Resource> resource;  // set_resource_request(...), in order
};

// Wrappers that tell gradient signatures apart.
struct OutputGrad { TBlob data; };
struct OutputValue { TBlob data; };
struct Input0 { TBlob data; };
struct Input1 { TBlob data; };

using UnaryFunction = std::function<void(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req,
                                         RunContext ctx)>;
using BinaryFunction = std::function<void(const TBlob& lhs, const TBlob& rhs, const EnvArguments& env, TBlob* ret,
                                          OpReqType req, RunContext ctx)>;
using UnaryShapeFunction = std::function<TShape(const TShape& src, const EnvArguments& env)>;
using BinaryShapeFunction = std::function<TShape(const TShape& lhs, const TShape& rhs, const EnvArguments& env)>;
using UnaryGradT0 = std::function<void(const OutputGrad& out_grad, const EnvArguments& env, TBlob* in_grad,
                                       OpReqType req, RunContext ctx)>;
using UnaryGradT1 = std::function<void(const OutputGrad& out_grad, const OutputValue& out_value,
                                       const EnvArguments& env, TBlob* in_grad, OpReqType req, RunContext ctx)>;
using UnaryGradT2 = std::function<void(const OutputGrad& out_grad, const Input0& in_data0, const EnvArguments& env,
                                       TBlob* in_grad, OpReqType req, RunContext ctx)>;
using BinaryGradT0 = std::function<void(const OutputGrad& out_grad, const EnvArguments& env, TBlob* lhs_grad,
                                        TBlob* rhs_grad, OpReqType req_lhs, OpReqType req_rhs, RunContext ctx)>;
using BinaryGradT1 = std::function<void(const OutputGrad& out_grad, const Input0& lhs, const Input1& rhs,
                                        const EnvArguments& env, TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_lhs,
                                        OpReqType req_rhs, RunContext ctx)>;

enum SimpleOpInplaceOption {
  kNoInplace,
  kInplaceInOut,   // forward: the output may overwrite the (first) input
  kInplaceOutIn,   // backward: the input gradient may overwrite out_grad
  kInplaceLhsOut,  // binary forward: the output may overwrite lhs
  kInplaceOutLhs,  // binary backward: lhs_grad may overwrite out_grad
};

class SimpleOpEntry {
 public:
  SimpleOpEntry& set_function(DeviceType dev, UnaryFunction fn, SimpleOpInplaceOption inplace = kNoInplace);
  SimpleOpEntry& set_function(DeviceType dev, BinaryFunction fn, SimpleOpInplaceOption inplace = kNoInplace);
  SimpleOpEntry& set_gradient(DeviceType dev, UnaryGradT0 fn, SimpleOpInplaceOption inplace = kNoInplace);
  SimpleOpEntry& set_gradient(DeviceType dev, UnaryGradT1 fn, SimpleOpInplaceOption inplace = kNoInplace);
  SimpleOpEntry& set_gradient(DeviceType dev, UnaryGradT2 fn, SimpleOpInplaceOption inplace = kNoInplace);
  SimpleOpEntry& set_gradient(DeviceType dev, BinaryGradT0 fn, SimpleOpInplaceOption inplace = kNoInplace);
  SimpleOpEntry& set_gradient(DeviceType dev, BinaryGradT1 fn, SimpleOpInplaceOption inplace = kNoInplace);
  // Default: the output has the input's shape (binary: both operands must have equal shapes).
  SimpleOpEntry& set_shape_function(UnaryShapeFunction fn);
  SimpleOpEntry& set_shape_function(BinaryShapeFunction fn);
  // Adds a required float parameter "scalar" (EnvArguments::scalar).
  SimpleOpEntry& set_enable_scalar(bool enable, const std::string& doc = "scalar input");
  // Passes any other keyword argument through EnvArguments::kwargs instead of rejecting it.
  SimpleOpEntry& set_enable_kwargs(bool enable);
  SimpleOpEntry& set_resource_request(ResourceRequest req);
  SimpleOpEntry& set_resource_request(std::vector<ResourceRequest> reqs);
  SimpleOpEntry& describe(const std::string& text);
  SimpleOpEntry& add_alias(const std::string& alias);

  const std::string& name() const { return name_; }
  struct Impl;  // the registered functions (op/src/simple_op.cc)
  Impl* impl() const { return impl_.get(); }

  explicit SimpleOpEntry(const std::string& name);
  ~SimpleOpEntry();

 private:
  std::string name_;
  std::unique_ptr<Impl> impl_;
  OperatorInfo* info_;
};

// The entry of a SimpleOp, created (and registered as an operator) on first use of the name.
SimpleOpEntry& SimpleOpRegister(const std::string& name);

#define TROUPE_REGISTER_SIMPLE_OP(Name)                                                                   \
  [[maybe_unused]] static ::troupe::SimpleOpEntry& TROUPE_OP_CONCAT(troupe_simple_op_registration_,      \
                                                                    __COUNTER__) = ::troupe::SimpleOpRegister(#Name)

}  // namespace troupe
