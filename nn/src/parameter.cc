// Parameter and ParameterDict (nn/parameter.h).
#include "nn/parameter.h"

#include <algorithm>
#include <regex>
#include <set>
#include <utility>

#include "base/error.h"
#include "op/autograd.h"
#include "op/initializer.h"

namespace troupe::nn {

namespace {

bool Known(const TShape& s) {
  if (s.ndim() < 0) return false;
  for (int i = 0; i < s.ndim(); ++i) {
    if (s[i] <= 0) return false;
  }
  return true;
}

void CheckReq(OpReqType req, const std::string& what) {
  if (req != kWriteTo && req != kAddTo && req != kNullOp) {
    throw Error(what + ": grad_req must be kWriteTo, kAddTo or kNullOp");
  }
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

Parameter::Parameter(std::string name, TShape shape, std::string init, OpReqType grad_req, DType dtype)
    : name_(std::move(name)), init_(std::move(init)), shape_(std::move(shape)), grad_req_(grad_req), dtype_(dtype) {
  if (name_.empty()) throw Error("Parameter: the name is empty");
  CheckReq(grad_req_, "Parameter '" + name_ + "'");
}

void Parameter::Initialize(const std::string& default_init, const std::vector<Context>& ctx, bool force_reinit,
                           const Kwargs& init_params) {
  if (ctx.empty()) throw Error("Parameter '" + name_ + "': Initialize needs at least one device");
  if ((initialized() || deferred_) && !force_reinit) {
    throw Error("Parameter '" + name_ + "' is already initialised; pass force_reinit to initialise it again");
  }
  // Check the initializer now, not at the deferred allocation.
  Initializer::Create(init_.empty() ? default_init : init_, init_.empty() ? init_params : Kwargs{});
  default_init_ = default_init;
  init_params_ = init_params;
  ctx_ = ctx;
  data_.clear();
  deferred_ = !Known(shape_);
  if (!deferred_) Allocate();
}

void Parameter::Allocate() {
  data_.clear();
  NDArray first;
  for (std::size_t i = 0; i < ctx_.size(); ++i) {
    NDArray a(shape_, ctx_[i], dtype_);
    if (i == 0) {
      // An explicit init applies whatever the name; the default one follows MXNet's name rules.
      if (init_.empty()) {
        (*Initializer::Create(default_init_, init_params_))(name_, &a);
      } else {
        Initializer::Create(init_)->InitWeight(name_, &a);
      }
      first = a;
    } else {
      CopyFromTo(first, a);  // every device starts from the same values
    }
    if (grad_req_ != kNullOp) autograd::AttachGrad(&a, grad_req_);
    data_.push_back(a);
  }
  deferred_ = false;
}

void Parameter::SetShape(const TShape& shape) {
  if (shape_.ndim() >= 0) {
    bool ok = shape.ndim() == shape_.ndim();
    for (int i = 0; ok && i < shape.ndim(); ++i) ok = shape_[i] == 0 || shape_[i] == shape[i];
    if (!ok) {
      throw Error("Parameter '" + name_ + "' has shape " + shape_.ToString() + ", which " + shape.ToString() +
                  " does not match");
    }
  }
  if (!Known(shape)) throw Error("Parameter '" + name_ + "': SetShape needs a complete shape, got " + shape.ToString());
  shape_ = shape;
  if (deferred_) Allocate();
}

NDArray Parameter::Data(Context ctx) const {
  if (deferred_) {
    throw Error("Parameter '" + name_ + "' has not been initialised yet: its shape " + shape_.ToString() +
                " is completed by the first forward pass of its block; run one first");
  }
  if (!initialized()) throw Error("Parameter '" + name_ + "' has not been initialised; call Initialize first");
  for (std::size_t i = 0; i < ctx_.size(); ++i) {
    if (ctx_[i] == ctx) return data_[i];
  }
  std::vector<std::string> names;
  for (const auto& c : ctx_) names.push_back(c.ToString());
  throw Error("Parameter '" + name_ + "' is not on " + ctx.ToString() + "; it is on " + Join(names));
}

NDArray Parameter::Data() const { return Data(ctx_.empty() ? Context::CPU() : ctx_[0]); }

std::vector<NDArray> Parameter::ListData() const {
  if (!ctx_.empty()) Data(ctx_[0]);  // the errors
  return data_;
}

NDArray Parameter::Grad(Context ctx) const {
  if (grad_req_ == kNullOp) throw Error("Parameter '" + name_ + "' has no gradient (grad_req kNullOp)");
  return autograd::GradOf(Data(ctx));
}

NDArray Parameter::Grad() const { return Grad(ctx_.empty() ? Context::CPU() : ctx_[0]); }

std::vector<NDArray> Parameter::ListGrad() const {
  std::vector<NDArray> g;
  for (const auto& c : ListCtx()) g.push_back(Grad(c));
  return g;
}

void Parameter::SetData(const NDArray& value) {
  if (value.is_none()) throw Error("Parameter '" + name_ + "': SetData got an empty array");
  if (!initialized()) {
    if (ctx_.empty()) ctx_ = {Context::CPU()};
    if (default_init_.empty()) default_init_ = "zero";
    if (shape_.ndim() < 0) shape_ = value.shape();
    SetShape(value.shape());
    if (!initialized()) Allocate();
  }
  if (value.shape() != shape_) {
    throw Error("Parameter '" + name_ + "' has shape " + shape_.ToString() + ", the value " + value.shape().ToString());
  }
  for (NDArray& a : data_) {
    if (value.dtype() == a.dtype()) {
      CopyFromTo(value, a);
    } else {
      CopyFromTo(value.AsType(a.dtype()), a);
    }
  }
}

void Parameter::ZeroGrad() {
  if (grad_req_ == kNullOp || !initialized()) return;
  for (const NDArray& a : data_) {
    NDArray g = autograd::GradOf(a);
    g = 0.0;
  }
}

void Parameter::SetGradReq(OpReqType req) {
  CheckReq(req, "Parameter '" + name_ + "'");
  if (req == grad_req_) return;
  grad_req_ = req;
  for (NDArray& a : data_) {
    // A fresh handle drops the variable; AttachGrad makes one with the new request.
    NDArray plain = a.Reshape(a.shape());
    if (req != kNullOp) autograd::AttachGrad(&plain, req);
    a = plain;
  }
}

// ------------------------------------------------------------------------------------------ ParameterDict

void ParameterDict::Add(std::shared_ptr<Parameter> p) {
  if (!p) throw Error("ParameterDict: a null parameter");
  auto it = by_name_.find(p->name());
  if (it != by_name_.end()) {
    if (it->second == p) return;
    throw Error("ParameterDict: two different parameters are named '" + p->name() +
                "'; give the blocks different prefixes");
  }
  by_name_[p->name()] = p;
  list_.push_back(std::move(p));
}

std::shared_ptr<Parameter> ParameterDict::Get(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

ParameterDict ParameterDict::Select(const std::string& pattern) const {
  std::regex re;
  try {
    re = std::regex(pattern);
  } catch (const std::regex_error& e) {
    throw Error("ParameterDict::Select: '" + pattern + "' is not a regular expression: " + e.what());
  }
  ParameterDict out;
  for (const auto& p : list_) {
    if (std::regex_match(p->name(), re)) out.Add(p);
  }
  return out;
}

void ParameterDict::Initialize(const std::string& default_init, const std::vector<Context>& ctx, bool force_reinit,
                               const Kwargs& init_params) {
  for (const auto& p : list_) p->Initialize(default_init, ctx, force_reinit, init_params);
}

void ParameterDict::ZeroGrad() {
  for (const auto& p : list_) p->ZeroGrad();
}
void ParameterDict::SetGradReq(OpReqType req) {
  for (const auto& p : list_) p->SetGradReq(req);
}
void ParameterDict::SetLrMult(float lr_mult) {
  for (const auto& p : list_) p->lr_mult = lr_mult;
}
void ParameterDict::SetWdMult(float wd_mult) {
  for (const auto& p : list_) p->wd_mult = wd_mult;
}

void ParameterDict::Save(const std::string& path, const std::string& strip_prefix) const {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  for (const auto& p : list_) {
    std::string n = p->name();
    if (!strip_prefix.empty() && n.compare(0, strip_prefix.size(), strip_prefix) == 0) n = n.substr(strip_prefix.size());
    arrays.push_back(p->Data().CopyTo(Context::CPU()));
    names.push_back(n);
  }
  NDArray::Save(path, arrays, names);
}

void ParameterDict::Load(const std::string& path, const std::vector<Context>& ctx, bool allow_missing,
                         bool ignore_extra, const std::string& restore_prefix) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(path, &arrays, &names);
  if (names.size() != arrays.size()) throw Error("ParameterDict::Load: '" + path + "' has arrays without names");
  std::map<std::string, NDArray> loaded;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::string n = names[i];
    if (n.compare(0, 4, "arg:") == 0 || n.compare(0, 4, "aux:") == 0) n = n.substr(4);
    loaded[restore_prefix + n] = arrays[i];
  }
  std::vector<std::string> missing, extra;
  for (const auto& p : list_) {
    if (!loaded.count(p->name())) missing.push_back(p->name());
  }
  for (const auto& [n, a] : loaded) {
    if (!by_name_.count(n)) extra.push_back(n);
  }
  if (!missing.empty() && !allow_missing) {
    throw Error("ParameterDict::Load: '" + path + "' has no value for [" + Join(missing) +
                "] (pass allow_missing to keep their values)");
  }
  if (!extra.empty() && !ignore_extra) {
    throw Error("ParameterDict::Load: '" + path + "' has [" + Join(extra) +
                "], which are no parameters here (pass ignore_extra to skip them)");
  }
  for (const auto& p : list_) {
    auto it = loaded.find(p->name());
    if (it == loaded.end()) continue;
    if (!p->initialized()) {
      p->SetShape(it->second.shape());
      if (!p->initialized()) p->Initialize("zero", ctx, true);
    }
    p->SetData(it->second);
  }
}

}  // namespace troupe::nn
