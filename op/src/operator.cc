// The operator framework's shared pieces (op/operator.h): defaults of Operator/OperatorProperty, shape and
// type assignment helpers, the registry, and the GPU implementation factories.
#include "op/operator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>

#include "base/error.h"
#include "base/gpu_module.h"
#include "op/internal/op_util.h"

namespace troupe {

void Operator::Backward(const OpContext&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                        const std::vector<TBlob>&, const std::vector<OpReqType>&, const std::vector<TBlob>&,
                        const std::vector<TBlob>&) {
  throw Error("this operator has no backward (it is forward-only)");
}

namespace {

// Merges `expected` into `cur` dimension by dimension (-1 is unknown); false on a contradiction.
bool MergeShape(const TShape& cur, const TShape& expected, TShape* out) {
  if (expected.ndim() < 0) {
    *out = cur;
    return true;
  }
  if (cur.ndim() < 0) {
    *out = expected;
    return true;
  }
  if (cur.ndim() != expected.ndim()) return false;
  TShape m = cur;
  for (int i = 0; i < cur.ndim(); ++i) {
    if (cur[i] == -1) {
      m[i] = expected[i];
    } else if (expected[i] != -1 && expected[i] != cur[i]) {
      return false;
    }
  }
  *out = m;
  return true;
}

}  // namespace

void AssignShape(std::vector<TShape>* shapes, std::size_t index, const TShape& expected, const std::string& op,
                 const std::string& name) {
  if (index >= shapes->size()) shapes->resize(index + 1);
  TShape merged;
  if (!MergeShape((*shapes)[index], expected, &merged)) {
    throw Error(op + ": shape of argument '" + name + "' is " + (*shapes)[index].ToString() + " but " +
                expected.ToString() + " is required");
  }
  (*shapes)[index] = merged;
}

void AssignType(std::vector<int>* types, std::size_t index, int expected, const std::string& op,
                const std::string& name) {
  if (index >= types->size()) types->resize(index + 1, kTypeUnknown);
  int& cur = (*types)[index];
  if (expected == kTypeUnknown) return;
  if (cur == kTypeUnknown) {
    cur = expected;
  } else if (cur != expected) {
    throw Error(op + ": type of argument '" + name + "' is " + DTypeName(static_cast<DType>(cur)) + " but " +
                DTypeName(static_cast<DType>(expected)) + " is required");
  }
}

bool OperatorProperty::InferType(std::vector<int>* in_type, std::vector<int>* out_type,
                                 std::vector<int>* aux_type) const {
  const auto args = ListArguments();
  in_type->resize(args.size(), kTypeUnknown);
  int t = kTypeUnknown;
  for (int v : *in_type) {
    if (v != kTypeUnknown) {
      t = v;
      break;
    }
  }
  if (t == kTypeUnknown) return false;
  const std::string op = TypeString();
  for (std::size_t i = 0; i < args.size(); ++i) AssignType(in_type, i, t, op, args[i]);
  const auto outs = ListOutputs();
  out_type->assign(static_cast<std::size_t>(NumOutputs()), t);
  aux_type->assign(ListAuxiliaryStates().size(), t);
  return true;
}

std::vector<int> OperatorProperty::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                             const std::vector<int>& in_data,
                                                             const std::vector<int>& out_data) const {
  std::vector<int> deps = out_grad;
  deps.insert(deps.end(), in_data.begin(), in_data.end());
  deps.insert(deps.end(), out_data.begin(), out_data.end());
  return deps;
}

// ------------------------------------------------------------------------------------------- registry
struct OperatorRegistry::Impl {
  mutable std::mutex mu;
  std::deque<OperatorInfo> infos;              // stable addresses
  std::map<std::string, OperatorInfo*> names;  // names and aliases
};

namespace {
struct GpuFactories {
  std::mutex mu;
  std::map<std::string, GpuOperatorFactory> by_name;
};
GpuFactories& Gpu() {
  static GpuFactories g;
  return g;
}
}  // namespace

OperatorRegistry::OperatorRegistry() : impl_(std::make_unique<Impl>()) {}

OperatorRegistry& OperatorRegistry::Get() {
  // Constructed on first use, so registrations from any translation unit find it during static init.
  static OperatorRegistry r;
  return r;
}

OperatorInfo& OperatorRegistry::Register(const std::string& name,
                                         std::function<std::unique_ptr<OperatorProperty>()> factory) {
  std::lock_guard lock(impl_->mu);
  if (impl_->names.count(name) != 0) throw Error("operator '" + name + "' is registered twice");
  OperatorInfo& info = impl_->infos.emplace_back();
  info.name = name;
  info.factory = std::move(factory);
  impl_->names[name] = &info;
  return info;
}

void OperatorRegistry::AddAlias(OperatorInfo* info, const std::string& alias) {
  std::lock_guard lock(impl_->mu);
  if (impl_->names.count(alias) != 0) throw Error("operator alias '" + alias + "' is registered twice");
  impl_->names[alias] = info;
  info->aliases.push_back(alias);
}

OperatorInfo& OperatorInfo::add_alias(const std::string& alias) {
  OperatorRegistry::Get().AddAlias(this, alias);
  return *this;
}

const OperatorInfo* OperatorRegistry::Find(const std::string& name) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->names.find(name);
  return it == impl_->names.end() ? nullptr : it->second;
}

std::vector<std::string> OperatorRegistry::ListNames() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& info : impl_->infos) out.push_back(info.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<OperatorProperty> OperatorProperty::Create(const std::string& name) {
  const OperatorInfo* info = OperatorRegistry::Get().Find(name);
  if (info == nullptr) {
    const std::string similar = SimilarNames(name, OperatorRegistry::Get().ListNames());
    throw Error("unknown operator '" + name + "'" + (similar.empty() ? "" : "; did you mean: " + similar) +
                " (OperatorRegistry::ListNames() lists all)");
  }
  return info->factory();
}

namespace internal {
void ThrowNoImplementation(const std::string& op, Context ctx) {
  std::string why;
  if (ctx.is_gpu() && !GpuModuleLoaded()) {
    // The GPU operators are registered by the GPU backend when it is loaded: say why it is not.
    why = GpuModuleError();
    if (why.empty()) {
      try {
        LoadGpuModule();
      } catch (const Error& e) {
        why = e.what();
      }
    }
  }
  throw Error(op + " has no implementation for " + ctx.ToString() + (why.empty() ? "" : ": " + why));
}

// In a build with CUDA, the GPU operators are registered when the GPU backend is loaded (its static
// initialisers run at dlopen): load it before the registry is asked about GPU code. Never called with a
// registry lock held (the backend's registrations take them). False when it cannot be loaded.
bool LoadGpuOperators() {
  if (!GpuModuleBuilt()) return false;
  try {
    LoadGpuModule();
    return true;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace internal

bool RegisterGpuOperator(const std::string& name, GpuOperatorFactory factory) {
  std::lock_guard lock(Gpu().mu);
  Gpu().by_name[name] = std::move(factory);
  return true;
}

bool HasGpuImplementation(const std::string& name) {
  internal::LoadGpuOperators();
  const OperatorInfo* info = OperatorRegistry::Get().Find(name);
  if (info == nullptr) return false;
  if (info->has_gpu_functions) return info->has_gpu_functions();
  std::lock_guard lock(Gpu().mu);
  return Gpu().by_name.count(info->name) != 0;
}

std::unique_ptr<Operator> CreateGpuOperator(const OperatorProperty& prop, Context ctx) {
  internal::LoadGpuOperators();  // on failure ThrowNoImplementation below says why
  GpuOperatorFactory f;
  {
    std::lock_guard lock(Gpu().mu);
    auto it = Gpu().by_name.find(prop.TypeString());
    if (it != Gpu().by_name.end()) f = it->second;
  }
  if (!f) internal::ThrowNoImplementation(prop.TypeString(), ctx);
  return f(prop, ctx);
}

}  // namespace troupe
