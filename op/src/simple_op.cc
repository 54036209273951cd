// SimpleOp (op/simple_op.h): the registered functions of a simple operator, and the OperatorProperty and
// Operator that make it a symbolic operator and an NDArray function.
#include "op/simple_op.h"

#include <map>
#include <mutex>

#include "base/error.h"
#include "op/internal/op_util.h"

namespace troupe {

namespace {
enum class GradKind { kNone, kUnaryOut, kUnaryOutValue, kUnaryIn, kBinaryOut, kBinaryIn };

// CPU-pinned memory is host memory: it runs the CPU functions.
DeviceType DevKey(DeviceType d) { return d == DeviceType::kCPUPinned ? DeviceType::kCPU : d; }
}  // namespace

struct SimpleOpEntry::Impl {
  int num_args = 0;  // 1 unary, 2 binary; set by the first set_function
  std::map<DeviceType, UnaryFunction> unary;
  std::map<DeviceType, BinaryFunction> binary;
  SimpleOpInplaceOption forward_inplace = kNoInplace;
  GradKind grad_kind = GradKind::kNone;
  std::map<DeviceType, UnaryGradT0> grad_u0;
  std::map<DeviceType, UnaryGradT1> grad_u1;
  std::map<DeviceType, UnaryGradT2> grad_u2;
  std::map<DeviceType, BinaryGradT0> grad_b0;
  std::map<DeviceType, BinaryGradT1> grad_b1;
  SimpleOpInplaceOption backward_inplace = kNoInplace;
  UnaryShapeFunction unary_shape;
  BinaryShapeFunction binary_shape;
  bool enable_scalar = false;
  bool enable_kwargs = false;
  std::vector<ResourceRequest> resources;
};

namespace {

class SimpleOpOperator : public Operator {
 public:
  SimpleOpOperator(const SimpleOpEntry::Impl* e, DeviceType dev, EnvArguments env)
      : e_(e), dev_(dev), env_(std::move(env)) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    EnvArguments env = env_;
    env.resource = ctx.requested;
    TBlob ret = out_data[0];
    if (e_->num_args == 1) {
      e_->unary.at(dev_)(in_data[0], env, &ret, req[0], ctx.run_ctx);
    } else {
      e_->binary.at(dev_)(in_data[0], in_data[1], env, &ret, req[0], ctx.run_ctx);
    }
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    EnvArguments env = env_;
    env.resource = ctx.requested;
    TBlob g0 = in_grad[0];
    const OutputGrad og{out_grad[0]};
    switch (e_->grad_kind) {
      case GradKind::kUnaryOut: e_->grad_u0.at(dev_)(og, env, &g0, req[0], ctx.run_ctx); break;
      case GradKind::kUnaryOutValue:
        e_->grad_u1.at(dev_)(og, OutputValue{out_data[0]}, env, &g0, req[0], ctx.run_ctx);
        break;
      case GradKind::kUnaryIn: e_->grad_u2.at(dev_)(og, Input0{in_data[0]}, env, &g0, req[0], ctx.run_ctx); break;
      case GradKind::kBinaryOut: {
        TBlob g1 = in_grad[1];
        e_->grad_b0.at(dev_)(og, env, &g0, &g1, req[0], req[1], ctx.run_ctx);
        break;
      }
      case GradKind::kBinaryIn: {
        TBlob g1 = in_grad[1];
        e_->grad_b1.at(dev_)(og, Input0{in_data[0]}, Input1{in_data[1]}, env, &g0, &g1, req[0], req[1], ctx.run_ctx);
        break;
      }
      case GradKind::kNone: throw Error("this simple operator has no gradient");
    }
  }

 private:
  const SimpleOpEntry::Impl* e_;
  DeviceType dev_;
  EnvArguments env_;
};

class SimpleOpProperty : public OperatorProperty {
 public:
  SimpleOpProperty(std::string name, const SimpleOpEntry::Impl* e) : name_(std::move(name)), e_(e) {}

  void Init(const Kwargs& kwargs) override {
    env_ = EnvArguments();
    bool have_scalar = false;
    for (const auto& [k, v] : kwargs) {
      if (k == "scalar" && e_->enable_scalar) {
        try {
          env_.scalar = param_detail::ParseReal(v);
        } catch (const std::invalid_argument& err) {
          throw Error(name_ + ": parameter 'scalar' must be a value of type float, got '" + v + "' (" + err.what() +
                      ")");
        }
        have_scalar = true;
      } else if (k.size() > 4 && k.starts_with("__") && k.ends_with("__")) {
        continue;  // MXNet's hidden graph attributes
      } else if (e_->enable_kwargs) {
        env_.kwargs.emplace_back(k, v);
      } else {
        throw Error(name_ + ": unknown parameter '" + k + "'; accepted parameters: " +
                    (e_->enable_scalar ? "scalar" : "none"));
      }
    }
    if (e_->enable_scalar && !have_scalar) {
      throw Error(name_ + ": required parameter 'scalar' (float) is missing");
    }
  }

  Kwargs GetParams() const override {
    Kwargs out;
    if (e_->enable_scalar) out.emplace_back("scalar", param_detail::PrintReal(env_.scalar));
    out.insert(out.end(), env_.kwargs.begin(), env_.kwargs.end());
    return out;
  }

  std::vector<std::string> ListArguments() const override {
    if (e_->num_args == 2) return {"lhs", "rhs"};
    return {"data"};
  }

  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const auto args = ListArguments();
    in->resize(args.size());
    if (e_->num_args == 1) {
      if (e_->unary_shape) {
        if (!(*in)[0].known()) return false;
        AssignShape(out, 0, e_->unary_shape((*in)[0], env_), name_, "output");
        return true;
      }
      AssignShape(out, 0, (*in)[0], name_, "output");
      AssignShape(in, 0, (*out)[0], name_, "data");
      return (*out)[0].known();
    }
    if (e_->binary_shape) {
      if (!(*in)[0].known() || !(*in)[1].known()) return false;
      AssignShape(out, 0, e_->binary_shape((*in)[0], (*in)[1], env_), name_, "output");
      return true;
    }
    // Default: both operands and the output share one shape.
    AssignShape(in, 1, (*in)[0], name_, "rhs");
    AssignShape(in, 0, (*in)[1], name_, "lhs");
    AssignShape(in, 0, (*out)[0], name_, "lhs");
    AssignShape(in, 1, (*in)[0], name_, "rhs");
    AssignShape(out, 0, (*in)[0], name_, "output");
    return (*out)[0].known();
  }

  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SimpleOpProperty>(*this); }
  std::string TypeString() const override { return name_; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>&) const override { return e_->resources; }
  std::vector<ResourceRequest> BackwardResource(const std::vector<TShape>&) const override { return e_->resources; }
  bool HasBackward() const override { return e_->grad_kind != GradKind::kNone; }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    switch (e_->grad_kind) {
      case GradKind::kUnaryOut:
      case GradKind::kBinaryOut: return {out_grad[0]};
      case GradKind::kUnaryOutValue: return {out_grad[0], out_data[0]};
      case GradKind::kUnaryIn: return {out_grad[0], in_data[0]};
      case GradKind::kBinaryIn: return {out_grad[0], in_data[0], in_data[1]};
      case GradKind::kNone: break;
    }
    return {};
  }

  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    if (e_->forward_inplace == kInplaceInOut || e_->forward_inplace == kInplaceLhsOut) return {{in_data[0], out_data[0]}};
    return {};
  }

  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad, const std::vector<int>&,
                                                           const std::vector<int>&,
                                                           const std::vector<void*>& in_grad) const override {
    if (e_->backward_inplace == kInplaceOutIn || e_->backward_inplace == kInplaceOutLhs) {
      return {{out_grad[0], in_grad[0]}};
    }
    return {};
  }

  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) internal::LoadGpuOperators();  // registers the GPU functions (ThrowNoImplementation says why not)
    const DeviceType dev = DevKey(ctx.dev_type);
    const bool forward = e_->num_args == 1 ? e_->unary.count(dev) != 0 : e_->binary.count(dev) != 0;
    bool backward = true;
    switch (e_->grad_kind) {
      case GradKind::kUnaryOut: backward = e_->grad_u0.count(dev) != 0; break;
      case GradKind::kUnaryOutValue: backward = e_->grad_u1.count(dev) != 0; break;
      case GradKind::kUnaryIn: backward = e_->grad_u2.count(dev) != 0; break;
      case GradKind::kBinaryOut: backward = e_->grad_b0.count(dev) != 0; break;
      case GradKind::kBinaryIn: backward = e_->grad_b1.count(dev) != 0; break;
      case GradKind::kNone: break;
    }
    if (!forward || !backward) internal::ThrowNoImplementation(name_, ctx);
    return std::make_unique<SimpleOpOperator>(e_, dev, env_);
  }

 private:
  std::string name_;
  const SimpleOpEntry::Impl* e_;
  EnvArguments env_;
};

struct SimpleOps {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<SimpleOpEntry>> by_name;
};
SimpleOps& Entries() {
  static SimpleOps s;
  return s;
}

}  // namespace

SimpleOpEntry::SimpleOpEntry(const std::string& name) : name_(name), impl_(std::make_unique<Impl>()) {
  const Impl* e = impl_.get();
  info_ = &OperatorRegistry::Get().Register(
      name, [name, e]() -> std::unique_ptr<OperatorProperty> { return std::make_unique<SimpleOpProperty>(name, e); });
  info_->simple_op = true;
  info_->has_gpu_functions = [e]() {
    const DeviceType gpu = DevKey(DeviceType::kGPU);
    return e->unary.count(gpu) != 0 || e->binary.count(gpu) != 0;
  };
}

SimpleOpEntry::~SimpleOpEntry() = default;

SimpleOpEntry& SimpleOpRegister(const std::string& name) {
  auto& s = Entries();
  std::lock_guard lock(s.mu);
  auto& slot = s.by_name[name];
  if (!slot) slot = std::make_unique<SimpleOpEntry>(name);
  return *slot;
}

namespace {
void SetArgs(SimpleOpEntry::Impl* e, OperatorInfo* info, int n, const std::string& name) {
  if (e->num_args != 0 && e->num_args != n) {
    throw Error("simple operator '" + name + "': set_function with " + std::to_string(n) +
                " operands after one with " + std::to_string(e->num_args));
  }
  if (e->num_args == 0) {
    e->num_args = n;
    if (n == 1) {
      info->add_argument("data", "NDArray-or-Symbol", "Input to the function.");
    } else {
      info->add_argument("lhs", "NDArray-or-Symbol", "First input to the function.");
      info->add_argument("rhs", "NDArray-or-Symbol", "Second input to the function.");
    }
  }
}
void SetGrad(SimpleOpEntry::Impl* e, GradKind k, SimpleOpInplaceOption inplace, const std::string& name) {
  if (e->grad_kind != GradKind::kNone && e->grad_kind != k) {
    throw Error("simple operator '" + name + "': gradients of different kinds registered");
  }
  e->grad_kind = k;
  e->backward_inplace = inplace;
}
}  // namespace

SimpleOpEntry& SimpleOpEntry::set_function(DeviceType dev, UnaryFunction fn, SimpleOpInplaceOption inplace) {
  SetArgs(impl_.get(), info_, 1, name_);
  impl_->unary[DevKey(dev)] = std::move(fn);
  impl_->forward_inplace = inplace;
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_function(DeviceType dev, BinaryFunction fn, SimpleOpInplaceOption inplace) {
  SetArgs(impl_.get(), info_, 2, name_);
  impl_->binary[DevKey(dev)] = std::move(fn);
  impl_->forward_inplace = inplace;
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_gradient(DeviceType dev, UnaryGradT0 fn, SimpleOpInplaceOption inplace) {
  SetGrad(impl_.get(), GradKind::kUnaryOut, inplace, name_);
  impl_->grad_u0[DevKey(dev)] = std::move(fn);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_gradient(DeviceType dev, UnaryGradT1 fn, SimpleOpInplaceOption inplace) {
  SetGrad(impl_.get(), GradKind::kUnaryOutValue, inplace, name_);
  impl_->grad_u1[DevKey(dev)] = std::move(fn);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_gradient(DeviceType dev, UnaryGradT2 fn, SimpleOpInplaceOption inplace) {
  SetGrad(impl_.get(), GradKind::kUnaryIn, inplace, name_);
  impl_->grad_u2[DevKey(dev)] = std::move(fn);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_gradient(DeviceType dev, BinaryGradT0 fn, SimpleOpInplaceOption inplace) {
  SetGrad(impl_.get(), GradKind::kBinaryOut, inplace, name_);
  impl_->grad_b0[DevKey(dev)] = std::move(fn);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_gradient(DeviceType dev, BinaryGradT1 fn, SimpleOpInplaceOption inplace) {
  SetGrad(impl_.get(), GradKind::kBinaryIn, inplace, name_);
  impl_->grad_b1[DevKey(dev)] = std::move(fn);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_shape_function(UnaryShapeFunction fn) {
  impl_->unary_shape = std::move(fn);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_shape_function(BinaryShapeFunction fn) {
  impl_->binary_shape = std::move(fn);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_enable_scalar(bool enable, const std::string& doc) {
  if (enable && !impl_->enable_scalar) info_->params.push_back({"scalar", "float", "", true, doc});
  impl_->enable_scalar = enable;
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_enable_kwargs(bool enable) {
  impl_->enable_kwargs = enable;
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_resource_request(ResourceRequest req) {
  impl_->resources = {req};
  return *this;
}
SimpleOpEntry& SimpleOpEntry::set_resource_request(std::vector<ResourceRequest> reqs) {
  impl_->resources = std::move(reqs);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::describe(const std::string& text) {
  info_->describe(text);
  return *this;
}
SimpleOpEntry& SimpleOpEntry::add_alias(const std::string& alias) {
  info_->add_alias(alias);
  return *this;
}

}  // namespace troupe
