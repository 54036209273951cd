// Parameters of imperative models (Gluon's Parameter and ParameterDict): a named array per device, with its
// gradient buffer for autograd (op/autograd.h), its initializer and its learning-rate multipliers.
//
// A Parameter's shape may be partly unknown (a 0 dimension, say the input size of a Dense layer):
// Initialize then defers, and the first forward pass of its block completes the shape from the input's and
// initialises it (Gluon's deferred initialisation). Data(ctx) is the array on a device: an autograd variable
// (AttachGrad with the parameter's grad_req) unless grad_req is kNullOp (BatchNorm's running statistics), so
// that a forward pass recorded with it computes its gradient into Grad(ctx).
//
//   auto w = std::make_shared<nn::Parameter>("dense0_weight", TShape{10, 0});
//   w->Initialize("xavier");                 // deferred: the input size is not known yet
//   w->SetShape({10, 784});                  // what a block's first forward pass does
//   NDArray x = w->Data();
//
// ParameterDict is the parameters of a block and its children by name, in the order they were added, with
// Gluon's save/load (MXNet's .params format: tensor/ndarray.h Save/Load).
//
// Thread-safety: a Parameter is set up and initialised from one thread; its arrays may be read from any.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "op/param.h"
#include "tensor/ndarray.h"

namespace troupe::nn {

class Parameter {
 public:
  // name: the full name (a block's prefix and the short name, "dense0_weight"). shape: 0 dimensions are
  // unknown until SetShape. init: an Initializer::Create name used for this parameter instead of the one
  // Initialize is given (empty: that one). grad_req: kWriteTo, kAddTo or kNullOp (no gradient).
  // Throws troupe::Error for an empty name or another grad_req.
  Parameter(std::string name, TShape shape, std::string init = {}, OpReqType grad_req = kWriteTo,
            DType dtype = DType::kFloat32);

  const std::string& name() const { return name_; }
  const TShape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  OpReqType grad_req() const { return grad_req_; }
  const std::string& init() const { return init_; }
  // Gluon's lr_mult / wd_mult: the optimizer multiplies the learning rate / weight decay by them.
  float lr_mult = 1.0f, wd_mult = 1.0f;

  // Allocates the parameter on every device of ctx and initialises it with init() or else default_init
  // (Initializer::Create(name, init_params); MXNet's name rules apply: "_bias" zeros, "_gamma" ones ...).
  // With an unknown dimension the allocation waits for SetShape. Initialising again is an error unless
  // force_reinit. Throws troupe::Error for an unknown initializer or an empty ctx.
  void Initialize(const std::string& default_init = "uniform", const std::vector<Context>& ctx = {Context::CPU()},
                  bool force_reinit = false, const Kwargs& init_params = {});
  bool initialized() const { return !data_.empty(); }
  // Initialize was called but the shape is still unknown.
  bool deferred() const { return deferred_; }
  // Fills the unknown dimensions (the known ones must match: troupe::Error naming the parameter otherwise)
  // and finishes a deferred initialisation.
  void SetShape(const TShape& shape);

  // The array on ctx (the first device when ctx is omitted). Throws troupe::Error naming the parameter when it
  // is not initialised (or deferred: "run a forward pass first") or not on ctx.
  NDArray Data(Context ctx) const;
  NDArray Data() const;
  std::vector<NDArray> ListData() const;
  // The gradient buffer on ctx; troupe::Error for grad_req kNullOp.
  NDArray Grad(Context ctx) const;
  NDArray Grad() const;
  std::vector<NDArray> ListGrad() const;
  std::vector<Context> ListCtx() const { return ctx_; }
  // Copies value into the array on every device (the shape must match; an unknown shape takes value's).
  // Initialises a parameter that was not (on the devices Initialize was given, or the CPU).
  void SetData(const NDArray& value);
  // Zeros every gradient buffer.
  void ZeroGrad();
  // A different request: the arrays become variables with it (kNullOp: not variables any more).
  void SetGradReq(OpReqType req);
  // The symbol variable of this parameter (its name), for hybrid forward passes.
  Symbol Var() const { return Symbol::Variable(name_); }

 private:
  void Allocate();

  std::string name_, init_;
  TShape shape_;
  OpReqType grad_req_;
  DType dtype_;
  std::string default_init_;
  Kwargs init_params_;
  std::vector<Context> ctx_;
  std::vector<NDArray> data_;
  bool deferred_ = false;
};

class ParameterDict {
 public:
  // Adds a parameter; the same name twice is an error (troupe::Error) unless it is the same object.
  void Add(std::shared_ptr<Parameter> p);
  // nullptr when there is none of that name.
  std::shared_ptr<Parameter> Get(const std::string& name) const;
  const std::vector<std::shared_ptr<Parameter>>& list() const { return list_; }
  std::size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  auto begin() const { return list_.begin(); }
  auto end() const { return list_.end(); }
  // The parameters whose full names match the regular expression (ECMAScript, whole name; Gluon's select,
  // "conv.*_weight|dense0_bias").
  ParameterDict Select(const std::string& pattern) const;

  // Parameter::Initialize on each.
  void Initialize(const std::string& default_init = "uniform", const std::vector<Context>& ctx = {Context::CPU()},
                  bool force_reinit = false, const Kwargs& init_params = {});
  void ZeroGrad();
  void SetGradReq(OpReqType req);
  void SetLrMult(float lr_mult);
  void SetWdMult(float wd_mult);

  // Gluon's ParameterDict.save: the arrays (from the first device) under their names, strip_prefix removed
  // from the front of each name that starts with it. Throws troupe::Error for an uninitialised parameter or
  // a file that cannot be written.
  void Save(const std::string& path, const std::string& strip_prefix = {}) const;
  // Gluon's ParameterDict.load: names in the file (an "arg:" / "aux:" prefix is dropped) get restore_prefix in
  // front and set the parameter of that name (on its devices, or initialised on ctx). Missing parameters or
  // names of none are errors naming them unless allow_missing / ignore_extra.
  void Load(const std::string& path, const std::vector<Context>& ctx = {Context::CPU()}, bool allow_missing = false,
            bool ignore_extra = false, const std::string& restore_prefix = {});

 private:
  std::vector<std::shared_ptr<Parameter>> list_;
  std::map<std::string, std::shared_ptr<Parameter>> by_name_;
};

}  // namespace troupe::nn
