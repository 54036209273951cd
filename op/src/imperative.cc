// OperatorRunner and Invoke (op/imperative.h): an operator's Forward/Backward pushed to the engine.
#include "op/imperative.h"

#include <algorithm>

#include "base/error.h"
#include "op/autograd.h"

namespace troupe {

struct OperatorRunner::Impl {
  std::shared_ptr<const OperatorProperty> prop;
  std::string name;
  Context ctx;
  Engine* engine = nullptr;
  std::vector<TShape> in_shapes, out_shapes, aux_shapes;
  std::vector<int> in_types, out_types, aux_types;
  std::shared_ptr<Operator> op;
  std::vector<Resource> forward_res, backward_res;
  VarHandle op_var = nullptr;  // written by every pushed function: one Operator call at a time
  std::vector<std::string> args, aux_names;
  int num_outputs = 0, num_visible = 0;
  // What Backward reads, by position in out_grad / in_data / out_data.
  std::vector<bool> need_out_grad, need_in_data, need_out_data;

  void Check(const NDArray& a, const TShape& shape, int type, const std::string& what) const {
    if (a.is_none()) throw Error(name + ": " + what + " is missing (an empty NDArray)");
    if (a.ctx() != ctx) {
      throw Error(name + ": " + what + " is on " + a.ctx().ToString() + " but the operator runs on " + ctx.ToString());
    }
    if (a.shape() != shape) {
      throw Error(name + ": " + what + " has shape " + a.shape().ToString() + " but " + shape.ToString() +
                  " is required");
    }
    if (static_cast<int>(a.dtype()) != type) {
      throw Error(name + ": " + what + " has type " + DTypeName(a.dtype()) + " but " +
                  DTypeName(static_cast<DType>(type)) + " is required");
    }
  }

  void CheckCount(std::size_t got, std::size_t want, const std::string& what) const {
    if (got != want) {
      throw Error(name + ": expected " + std::to_string(want) + " " + what + ", got " + std::to_string(got));
    }
  }
};

namespace {

// The resources an operator asks for. keyed (a runner of one imperative call): temporary space from the copy
// its type and input shapes key, so that the same operator made again uses the same copy and the copies do not
// all grow to the largest workspace of the process; otherwise the copies in turn.
std::vector<Resource> RequestAll(Engine* engine, Context ctx, const std::vector<ResourceRequest>& reqs, bool keyed,
                                 const std::string& type, const std::vector<TShape>& in_shapes) {
  std::vector<Resource> out;
  if (reqs.empty()) return out;
  ResourceManager* rm = ResourceManager::Get(engine);
  if (!keyed) {
    for (const auto& r : reqs) out.push_back(rm->Request(ctx, r));
    return out;
  }
  std::string what = type;
  for (const TShape& s : in_shapes) what += s.ToString();
  const std::uint64_t key = std::hash<std::string>{}(what);
  for (std::size_t i = 0; i < reqs.size(); ++i) out.push_back(rm->Request(ctx, reqs[i], key + i));
  return out;
}

TBlob BlobOf(const NDArray& a) { return a.is_none() ? TBlob() : a.data(); }

}  // namespace

OperatorRunner::OperatorRunner(std::shared_ptr<const OperatorProperty> prop, Context ctx,
                               const std::vector<TShape>& in_shapes, const std::vector<int>& in_types,
                               Engine* engine, const std::vector<TShape>& out_shapes, bool one_call)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (prop == nullptr) throw Error("OperatorRunner: no operator property given");
  m.prop = std::move(prop);
  m.name = m.prop->TypeString();
  m.ctx = ctx;
  m.engine = engine != nullptr ? engine : Engine::Get();
  m.args = m.prop->ListArguments();
  m.aux_names = m.prop->ListAuxiliaryStates();
  m.num_outputs = m.prop->NumOutputs();
  m.num_visible = m.prop->NumVisibleOutputs();
  m.CheckCount(in_shapes.size(), m.args.size(), "input shapes (one per argument)");
  m.CheckCount(in_types.size(), m.args.size(), "input types (one per argument)");

  m.in_shapes = in_shapes;
  m.out_shapes = out_shapes;
  if (!m.prop->InferShape(&m.in_shapes, &m.out_shapes, &m.aux_shapes)) {
    std::string unknown;
    for (std::size_t i = 0; i < m.args.size(); ++i) {
      if (!m.in_shapes[i].known()) unknown += (unknown.empty() ? "'" : ", '") + m.args[i] + "'";
    }
    throw Error(m.name + ": cannot infer shapes; unknown: " + (unknown.empty() ? "outputs" : unknown));
  }
  for (const auto* list : {&m.in_shapes, &m.out_shapes, &m.aux_shapes}) {
    for (const auto& s : *list) {
      if (!s.known()) throw Error(m.name + ": shape inference left an unknown shape " + s.ToString());
    }
  }
  m.CheckCount(m.out_shapes.size(), static_cast<std::size_t>(m.num_outputs), "inferred output shapes");
  m.in_types = in_types;
  if (!m.prop->InferType(&m.in_types, &m.out_types, &m.aux_types)) {
    throw Error(m.name + ": cannot infer types (no input type is known)");
  }
  m.aux_types.resize(m.aux_shapes.size(), m.in_types.empty() ? 0 : m.in_types[0]);

  m.op = m.prop->CreateOperator(ctx);
  m.forward_res = RequestAll(m.engine, ctx, m.prop->ForwardResource(m.in_shapes), one_call, m.name, m.in_shapes);
  if (m.prop->HasBackward()) {
    m.backward_res =
        RequestAll(m.engine, ctx, m.prop->BackwardResource(m.in_shapes), one_call, m.name, m.in_shapes);
  }
  m.op_var = m.engine->NewVariable();

  // Ids: out_grad i -> i, in_data i -> V + i, out_data i -> V + N + i.
  const int nv = m.num_visible, ni = static_cast<int>(m.args.size());
  std::vector<int> og(nv), id(ni), od(m.num_outputs);
  for (int i = 0; i < nv; ++i) og[i] = i;
  for (int i = 0; i < ni; ++i) id[i] = nv + i;
  for (int i = 0; i < m.num_outputs; ++i) od[i] = nv + ni + i;
  m.need_out_grad.assign(nv, false);
  m.need_in_data.assign(ni, false);
  m.need_out_data.assign(m.num_outputs, false);
  if (m.prop->HasBackward()) {
    for (int d : m.prop->DeclareBackwardDependency(og, id, od)) {
      if (d >= 0 && d < nv) {
        m.need_out_grad[d] = true;
      } else if (d >= nv && d < nv + ni) {
        m.need_in_data[d - nv] = true;
      } else if (d >= nv + ni && d < nv + ni + m.num_outputs) {
        m.need_out_data[d - nv - ni] = true;
      } else {
        throw Error(m.name + ": DeclareBackwardDependency returned an unknown id " + std::to_string(d));
      }
    }
  }
}

OperatorRunner::~OperatorRunner() {
  if (impl_ && impl_->op_var != nullptr) {
    // Freed after the last pushed function; the functions hold the Operator themselves.
    impl_->engine->DeleteVariable([](RunContext) {}, impl_->ctx, impl_->op_var);
  }
}

const OperatorProperty& OperatorRunner::prop() const { return *impl_->prop; }
Context OperatorRunner::ctx() const { return impl_->ctx; }
const std::vector<TShape>& OperatorRunner::in_shapes() const { return impl_->in_shapes; }
const std::vector<TShape>& OperatorRunner::out_shapes() const { return impl_->out_shapes; }
const std::vector<TShape>& OperatorRunner::aux_shapes() const { return impl_->aux_shapes; }
const std::vector<int>& OperatorRunner::in_types() const { return impl_->in_types; }
const std::vector<int>& OperatorRunner::out_types() const { return impl_->out_types; }
const std::vector<int>& OperatorRunner::aux_types() const { return impl_->aux_types; }

void OperatorRunner::Forward(bool is_train, const std::vector<NDArray>& in, const std::vector<NDArray>& out,
                             const std::vector<NDArray>& aux, const std::vector<OpReqType>& req) {
  Call c = PrepareForward(is_train, in, out, aux, req);
  impl_->engine->PushSync(std::move(c.fn), impl_->ctx, c.const_vars, c.mutable_vars, FnProperty::kNormal, 0,
                          impl_->name.c_str());
}

void OperatorRunner::Backward(const std::vector<NDArray>& out_grad, const std::vector<NDArray>& in_data,
                              const std::vector<NDArray>& out_data, const std::vector<NDArray>& aux,
                              const std::vector<NDArray>& in_grad, const std::vector<OpReqType>& req,
                              float loss_scale) {
  Call c = PrepareBackward(out_grad, in_data, out_data, aux, in_grad, req, loss_scale);
  impl_->engine->PushSync(std::move(c.fn), impl_->ctx, c.const_vars, c.mutable_vars, FnProperty::kNormal, 0,
                          impl_->name.c_str());
}

const std::string& OperatorRunner::name() const { return impl_->name; }

OperatorRunner::Call OperatorRunner::PrepareForward(bool is_train, const std::vector<NDArray>& in,
                                                    const std::vector<NDArray>& out, const std::vector<NDArray>& aux,
                                                    const std::vector<OpReqType>& req_in) {
  const Impl& m = *impl_;
  m.CheckCount(in.size(), m.args.size(), "inputs (one per argument: " + std::to_string(m.args.size()) + ")");
  m.CheckCount(out.size(), static_cast<std::size_t>(m.num_outputs), "outputs");
  m.CheckCount(aux.size(), m.aux_names.size(), "auxiliary states");
  std::vector<OpReqType> req = req_in.empty() ? std::vector<OpReqType>(out.size(), kWriteTo) : req_in;
  m.CheckCount(req.size(), out.size(), "output requests");

  std::vector<VarHandle> const_vars, mutable_vars{m.op_var};
  for (std::size_t i = 0; i < in.size(); ++i) {
    m.Check(in[i], m.in_shapes[i], m.in_types[i], "argument '" + m.args[i] + "'");
    const_vars.push_back(in[i].var());
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (req[i] == kNullOp && out[i].is_none()) continue;
    m.Check(out[i], m.out_shapes[i], m.out_types[i], "output " + std::to_string(i));
    mutable_vars.push_back(out[i].var());
  }
  for (std::size_t i = 0; i < aux.size(); ++i) {
    m.Check(aux[i], m.aux_shapes[i], m.aux_types[i], "auxiliary state '" + m.aux_names[i] + "'");
    mutable_vars.push_back(aux[i].var());
  }
  for (const auto& r : m.forward_res) mutable_vars.push_back(r.var());

  auto fn = [op = m.op, res = m.forward_res, is_train, in, out, aux, req](RunContext rctx) {
    OpContext oc{is_train, rctx, res, {}};
    std::vector<TBlob> ib, ob, ab;
    oc.in_states.reserve(in.size());
    for (const auto& a : in) {
      ib.push_back(BlobOf(a));
      oc.in_states.push_back({a.var()->id(), a.var()->version()});
    }
    for (const auto& a : out) ob.push_back(BlobOf(a));
    for (const auto& a : aux) ab.push_back(BlobOf(a));
    op->Forward(oc, ib, req, ob, ab);
  };
  return Call{std::move(fn), std::move(const_vars), std::move(mutable_vars)};
}

OperatorRunner::Call OperatorRunner::PrepareBackward(const std::vector<NDArray>& out_grad,
                                                     const std::vector<NDArray>& in_data,
                                                     const std::vector<NDArray>& out_data,
                                                     const std::vector<NDArray>& aux,
                                                     const std::vector<NDArray>& in_grad,
                                                     const std::vector<OpReqType>& req, float loss_scale) {
  const Impl& m = *impl_;
  if (!m.prop->HasBackward()) throw Error(m.name + " has no backward");
  m.CheckCount(out_grad.size(), static_cast<std::size_t>(m.num_visible), "output gradients (one per visible output)");
  m.CheckCount(in_data.size(), m.args.size(), "inputs");
  m.CheckCount(out_data.size(), static_cast<std::size_t>(m.num_outputs), "outputs");
  m.CheckCount(aux.size(), m.aux_names.size(), "auxiliary states");
  m.CheckCount(in_grad.size(), m.args.size(), "input gradients (one per argument)");
  m.CheckCount(req.size(), m.args.size(), "gradient requests (one per argument)");

  std::vector<VarHandle> const_vars, mutable_vars{m.op_var};
  // Only what the property declared is handed over (and waited for); the rest are empty blobs.
  std::vector<NDArray> og(out_grad.size()), id(in_data.size()), od(out_data.size());
  for (std::size_t i = 0; i < og.size(); ++i) {
    if (!m.need_out_grad[i]) continue;
    m.Check(out_grad[i], m.out_shapes[i], m.out_types[i], "gradient of output " + std::to_string(i));
    og[i] = out_grad[i];
    const_vars.push_back(og[i].var());
  }
  for (std::size_t i = 0; i < id.size(); ++i) {
    if (!m.need_in_data[i]) continue;
    m.Check(in_data[i], m.in_shapes[i], m.in_types[i], "argument '" + m.args[i] + "'");
    id[i] = in_data[i];
    const_vars.push_back(id[i].var());
  }
  for (std::size_t i = 0; i < od.size(); ++i) {
    if (!m.need_out_data[i]) continue;
    m.Check(out_data[i], m.out_shapes[i], m.out_types[i], "output " + std::to_string(i));
    od[i] = out_data[i];
    const_vars.push_back(od[i].var());
  }
  for (std::size_t i = 0; i < aux.size(); ++i) {
    m.Check(aux[i], m.aux_shapes[i], m.aux_types[i], "auxiliary state '" + m.aux_names[i] + "'");
    const_vars.push_back(aux[i].var());
  }
  for (std::size_t i = 0; i < in_grad.size(); ++i) {
    if (req[i] == kNullOp && in_grad[i].is_none()) continue;
    m.Check(in_grad[i], m.in_shapes[i], m.in_types[i], "gradient of argument '" + m.args[i] + "'");
    if (req[i] != kNullOp) mutable_vars.push_back(in_grad[i].var());
  }
  for (const auto& r : m.backward_res) mutable_vars.push_back(r.var());

  auto fn = [op = m.op, res = m.backward_res, og, id, od, aux, in_grad, req, loss_scale](RunContext rctx) {
    OpContext oc{true, rctx, res, {}, loss_scale};
    std::vector<TBlob> ogb, idb, odb, ab, igb;
    for (const auto& a : og) ogb.push_back(BlobOf(a));
    for (const auto& a : id) idb.push_back(BlobOf(a));
    for (const auto& a : od) odb.push_back(BlobOf(a));
    for (const auto& a : aux) ab.push_back(BlobOf(a));
    for (const auto& a : in_grad) igb.push_back(BlobOf(a));
    op->Backward(oc, ogb, idb, odb, req, igb, ab);
  };
  return Call{std::move(fn), std::move(const_vars), std::move(mutable_vars)};
}

namespace {

struct Prepared {
  std::shared_ptr<const OperatorProperty> prop;
  std::shared_ptr<OperatorRunner> runner;
  std::vector<NDArray> args, aux;
};

Prepared PrepareWith(std::shared_ptr<const OperatorProperty> prop, const std::vector<NDArray>& inputs) {
  Prepared p;
  p.prop = std::move(prop);
  const std::string op = p.prop->TypeString();
  const auto args = p.prop->ListArguments();
  const auto aux = p.prop->ListAuxiliaryStates();
  if (inputs.size() != args.size() + aux.size()) {
    std::string names;
    for (const auto& a : args) names += (names.empty() ? "" : ", ") + a;
    for (const auto& a : aux) names += (names.empty() ? "" : ", ") + a + " (auxiliary)";
    throw Error(op + ": expected " + std::to_string(args.size() + aux.size()) + " input arrays (" + names + "), got " +
                std::to_string(inputs.size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_none()) {
      throw Error(op + ": input '" + (i < args.size() ? args[i] : aux[i - args.size()]) + "' is an empty NDArray");
    }
  }
  if (inputs.empty()) throw Error(op + ": Invoke needs at least one input array (it decides the device)");
  std::vector<TShape> shapes;
  std::vector<int> types;
  for (std::size_t i = 0; i < args.size(); ++i) {
    shapes.push_back(inputs[i].shape());
    types.push_back(static_cast<int>(inputs[i].dtype()));
    p.args.push_back(inputs[i]);
  }
  for (std::size_t i = args.size(); i < inputs.size(); ++i) p.aux.push_back(inputs[i]);
  p.runner = std::make_shared<OperatorRunner>(p.prop, inputs[0].ctx(), shapes, types, inputs[0].engine(),
                                              std::vector<TShape>{}, /*one_call=*/true);
  return p;
}

Prepared Prepare(const std::string& op, const std::vector<NDArray>& inputs, const Kwargs& kwargs) {
  std::shared_ptr<OperatorProperty> prop = OperatorProperty::Create(op);
  prop->Init(kwargs);
  return PrepareWith(std::move(prop), inputs);
}

std::vector<NDArray> RunPrepared(const Prepared& p, const std::vector<NDArray>& inputs) {
  std::vector<NDArray> out;
  for (std::size_t i = 0; i < p.runner->out_shapes().size(); ++i) {
    out.emplace_back(p.runner->out_shapes()[i], p.runner->ctx(), static_cast<DType>(p.runner->out_types()[i]),
                     inputs[0].engine());
  }
  // The mode is autograd's (training inside a RecordScope, say); recorded calls join its graph.
  p.runner->Forward(autograd::IsTraining(), p.args, out, p.aux);
  if (autograd::IsRecording()) autograd::RecordOp(p.runner, p.args, p.aux, &out);
  out.resize(static_cast<std::size_t>(p.prop->NumVisibleOutputs()));
  return out;
}

}  // namespace

std::vector<NDArray> Invoke(const std::string& op, const std::vector<NDArray>& inputs, const Kwargs& kwargs) {
  return RunPrepared(Prepare(op, inputs, kwargs), inputs);
}

std::vector<NDArray> Invoke(std::shared_ptr<const OperatorProperty> prop, const std::vector<NDArray>& inputs) {
  if (prop == nullptr) throw Error("Invoke: no operator property given");
  return RunPrepared(PrepareWith(std::move(prop), inputs), inputs);
}

void Invoke(const std::string& op, const std::vector<NDArray>& inputs, const Kwargs& kwargs,
            const std::vector<NDArray>& outputs, OpReqType req) {
  if (autograd::IsRecording()) {
    throw Error(op + ": while recording (op/autograd.h), Invoke returns new arrays only: the graph follows the "
                "arrays it returns, not ones written in place; call Invoke(op, inputs, kwargs)");
  }
  Prepared p = Prepare(op, inputs, kwargs);
  const auto nvis = static_cast<std::size_t>(p.prop->NumVisibleOutputs());
  if (outputs.size() != nvis) {
    throw Error(op + ": expected " + std::to_string(nvis) + " output arrays, got " + std::to_string(outputs.size()));
  }
  if (req != kWriteTo && req != kAddTo) throw Error(op + ": Invoke writes outputs with kWriteTo or kAddTo only");
  std::vector<NDArray> out = outputs;
  std::vector<OpReqType> reqs(outputs.size(), req);
  for (std::size_t i = nvis; i < p.runner->out_shapes().size(); ++i) {
    out.emplace_back(p.runner->out_shapes()[i], p.runner->ctx(), static_cast<DType>(p.runner->out_types()[i]),
                     inputs[0].engine());
    reqs.push_back(kWriteTo);
  }
  p.runner->Forward(autograd::IsTraining(), p.args, out, p.aux, reqs);
}

}  // namespace troupe
