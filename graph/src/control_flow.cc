// MXNet's control-flow operators _foreach, _while_loop and _cond (graph/internal/control_flow.h): their
// parameters, shape and type inference through the subgraphs, and the runners the executor drives.
#include "graph/internal/control_flow.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "base/error.h"
#include "graph/internal/graph.h"
#include "op/param.h"

namespace troupe {
namespace graph {

namespace {

std::string LocsText(const std::vector<std::int64_t>& v) { return param_detail::PrintTuple(v); }

// (d0, d1, ...) -> (d1, ...); a 1-D shape (n) -> (1), as MXNet's foreach slices.
TShape SliceFirstDim(const TShape& s) {
  if (s.ndim() > 1) return TShape(std::vector<std::int64_t>(s.begin() + 1, s.end()));
  return TShape{1};
}
TShape Prepend(std::int64_t n, const TShape& s) {
  std::vector<std::int64_t> d{n};
  d.insert(d.end(), s.begin(), s.end());
  return TShape(d);
}

// Row i of `a` along its first axis, shaped `row` (a view).
NDArray Row(const NDArray& a, std::int64_t i, const TShape& row) { return a.Slice(i, i + 1).Reshape(row); }

// dst (op)= src by request.
void Assign(const NDArray& dst, const NDArray& src, OpReqType req) {
  if (req == kNullOp || dst.is_none()) return;
  if (req == kAddTo) {
    NDArray d = dst;
    d += src;
  } else {
    CopyFromTo(src, dst);
  }
}

// Whether a condition subgraph's output (one element) is true: waits for it.
bool Truth(const NDArray& c, const std::string& op) {
  if (c.Size() != 1) {
    throw Error(op + ": the condition must give one element, it gives an array of shape " + c.shape().ToString());
  }
  const NDArray v = c.dtype() == DType::kFloat64 ? c : c.AsType(DType::kFloat64);
  return v.ToVector<double>()[0] != 0.0;
}

// The backward pass of one iteration's executor. heads: per output, none where no gradient arrives (an integer
// loop counter's): zeros then. Nothing to do for an executor without gradients (integer inputs only).
void RunBackward(Executor& e, std::vector<NDArray> heads) {
  const auto& reqs = e.grad_req();
  if (std::all_of(reqs.begin(), reqs.end(), [](OpReqType r) { return r == kNullOp; })) return;
  for (std::size_t k = 0; k < heads.size(); ++k) {
    if (heads[k].is_none()) {
      const NDArray& o = e.outputs()[k];
      heads[k] = NDArray::Zeros(o.shape(), o.ctx(), o.dtype(), o.engine());
    }
  }
  e.Backward(heads);
}

// The gradients of a node's inputs, summed over the contributions the iterations make (the first writes as the
// node's request says, the later ones add); inputs nothing contributed to are zero.
class GradSink {
 public:
  GradSink(const std::vector<NDArray>& in_grad, const std::vector<OpReqType>& req)
      : in_grad_(in_grad), req_(req), written_(in_grad.size(), 0) {}
  void Add(std::size_t input, const NDArray& g) {
    if (req_[input] == kNullOp || g.is_none()) return;
    Assign(in_grad_[input], g, written_[input] ? kAddTo : req_[input]);
    written_[input] = 1;
  }
  void Mark(std::size_t input) { written_[input] = 1; }
  void ZeroRest() {
    for (std::size_t i = 0; i < in_grad_.size(); ++i) {
      if (written_[i] || req_[i] == kNullOp || req_[i] == kAddTo || in_grad_[i].is_none()) continue;
      NDArray d = in_grad_[i];
      d = 0.0;
    }
  }

 private:
  const std::vector<NDArray>& in_grad_;
  const std::vector<OpReqType>& req_;
  std::vector<char> written_;
};

// Executors of one subgraph: one per iteration when the backward pass needs them, else two taking turns (an
// iteration's states are the previous one's outputs, which must not be the buffers it writes).
class ExecutorPool {
 public:
  ExecutorPool(const Subgraph& sub, Context ctx, Engine* engine) : sub_(sub), ctx_(ctx), engine_(engine) {}
  void Start(bool need_grad) {
    if (need_grad != grads_) execs_.clear();
    grads_ = need_grad;
  }
  Executor& Get(std::size_t iteration, const std::vector<NDArray>& in) {
    const std::size_t k = grads_ ? iteration : iteration % 2;
    if (k < execs_.size()) {
      sub_.Rebind(*execs_[k], in);
    } else {
      execs_.push_back(sub_.Bind(in, grads_, ctx_, engine_));
    }
    return *execs_[k];
  }
  Executor& At(std::size_t iteration) { return *execs_.at(iteration); }
  bool has_grads() const { return grads_; }

 private:
  const Subgraph& sub_;
  Context ctx_;
  Engine* engine_;
  bool grads_ = false;
  std::vector<std::unique_ptr<Executor>> execs_;
};

std::vector<NDArray> Pick(const std::vector<NDArray>& in, const std::vector<std::int64_t>& locs) {
  std::vector<NDArray> out;
  for (auto l : locs) out.push_back(in[static_cast<std::size_t>(l)]);
  return out;
}

// Checks that `locs` are distinct indices below n.
void CheckLocs(const std::string& op, const char* name, const std::vector<std::int64_t>& locs, std::size_t n) {
  std::vector<std::int64_t> seen;
  for (auto l : locs) {
    if (l < 0 || static_cast<std::size_t>(l) >= n || std::find(seen.begin(), seen.end(), l) != seen.end()) {
      throw Error(op + ": " + name + " " + LocsText(locs) + " must be distinct positions below " + std::to_string(n));
    }
    seen.push_back(l);
  }
}

std::vector<std::string> DataNames(std::size_t n) {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back("data" + std::to_string(i));
  return v;
}
std::vector<std::string> OutputNames(std::size_t n) {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back("output" + std::to_string(i));
  return v;
}

// Moves what a subgraph's inference learnt of its inputs back to the node's inputs (locs[i]: the node input of
// subgraph input i).
template <typename T, typename AssignFn>
void FillInputs(const std::vector<T>& sub_in, const std::vector<std::int64_t>& locs, std::vector<T>* in,
                AssignFn assign) {
  for (std::size_t i = 0; i < locs.size(); ++i) assign(in, static_cast<std::size_t>(locs[i]), sub_in[i]);
}

bool Known(const TShape& s) { return s.known(); }
bool Known(int t) { return t != kTypeUnknown; }
// What inference starts from: an unknown shape or type.
template <typename T>
T Unknown() {
  if constexpr (std::is_same_v<T, int>) {
    return kTypeUnknown;
  } else {
    return T();
  }
}

// ---------------------------------------------------------------------------------------------------- _foreach

struct ForeachParam : Params<ForeachParam> {
  int num_args = 1;
  int num_outputs = 1;
  int num_out_data = 0;
  std::vector<std::int64_t> in_state_locs, in_data_locs, remain_locs;
  static void Declare(ParamSchema<ForeachParam>& s) {
    s.Field("num_args", &ForeachParam::num_args).LowerBound(2).Describe("Number of inputs, the body included.");
    s.Field("num_outputs", &ForeachParam::num_outputs).LowerBound(1).Describe("Number of outputs of the body.");
    s.Field("num_out_data", &ForeachParam::num_out_data).LowerBound(0).Describe("Number of its per-step outputs.");
    s.Field("in_state_locs", &ForeachParam::in_state_locs).Describe("The loop states' positions among the body's inputs.");
    s.Field("in_data_locs", &ForeachParam::in_data_locs).Describe("The sliced data's positions among the body's inputs.");
    s.Field("remain_locs", &ForeachParam::remain_locs).Describe("The other inputs' positions among the body's inputs.");
  }
};

class ForeachProp final : public ControlFlowProperty {
 public:
  static constexpr const char* kName = "_foreach";
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, kName);
    if (p_.num_out_data > p_.num_outputs) throw Error("_foreach: num_out_data exceeds num_outputs");
    if (p_.in_data_locs.empty()) throw Error("_foreach: in_data_locs is empty (nothing to iterate over)");
    if (p_.in_data_locs.size() + p_.in_state_locs.size() + p_.remain_locs.size() + 1 !=
        static_cast<std::size_t>(p_.num_args)) {
      throw Error("_foreach: in_data_locs, in_state_locs and remain_locs must place num_args - 1 = " +
                  std::to_string(p_.num_args - 1) + " inputs");
    }
    if (p_.in_state_locs.size() != static_cast<std::size_t>(p_.num_outputs - p_.num_out_data)) {
      throw Error("_foreach: " + std::to_string(p_.in_state_locs.size()) + " loop states but " +
                  std::to_string(p_.num_outputs - p_.num_out_data) + " state outputs");
    }
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return DataNames(static_cast<std::size_t>(p_.num_args - 1)); }
  std::vector<std::string> ListOutputs() const override { return OutputNames(static_cast<std::size_t>(p_.num_outputs)); }
  std::vector<std::string> SubgraphRoles() const override { return {"body"}; }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ForeachProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::unique_ptr<ControlFlowRunner> CreateRunner(Context ctx, Engine* engine) const override;

  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    Prepare(in, out, aux);
    const std::size_t nd = p_.in_data_locs.size(), nod = static_cast<std::size_t>(p_.num_out_data);
    std::vector<TShape> sub_in = BodyInputs(*in), sub_out(out->size());  // unknown shapes
    for (std::size_t j = 0; j < nd; ++j) {
      const TShape& d = (*in)[j];
      sub_in[static_cast<std::size_t>(p_.in_data_locs[j])] = d.known() ? SliceFirstDim(d) : TShape();
    }
    for (std::size_t k = nod; k < out->size(); ++k) sub_out[k] = (*out)[k];
    const bool ok = body().InferShape(&sub_in, &sub_out, kName);
    FillBack(sub_in, nd, in, [](std::vector<TShape>* v, std::size_t i, const TShape& s) {
      if (s.known()) AssignShape(v, i, s, kName, "data" + std::to_string(i));
    });
    if (!(*in)[0].known()) return false;
    const std::int64_t len = (*in)[0][0];
    for (std::size_t j = 1; j < nd; ++j) {
      if ((*in)[j].known() && (*in)[j][0] != len) {
        throw Error("_foreach: the data arrays must have the same first dimension; data0 has " +
                    (*in)[0].ToString() + ", data" + std::to_string(j) + " has " + (*in)[j].ToString());
      }
    }
    for (std::size_t j = 0; j < out->size(); ++j) {
      if (!sub_out[j].known()) continue;
      AssignShape(out, j, j < nod ? Prepend(len, sub_out[j]) : sub_out[j], kName, "output" + std::to_string(j));
    }
    for (std::size_t k = 0; k + nod < out->size(); ++k) {
      const TShape& s = (*in)[nd + k];
      if (s.known() && (*out)[nod + k].known() && s != (*out)[nod + k]) {
        throw Error("_foreach: loop state " + std::to_string(k) + " enters as " + s.ToString() + " but the body returns " +
                    (*out)[nod + k].ToString());
      }
    }
    return ok && std::all_of(in->begin(), in->end(), [](const TShape& s) { return s.known(); }) &&
           std::all_of(out->begin(), out->end(), [](const TShape& s) { return s.known(); });
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    Prepare(in, out, aux);
    std::vector<int> sub_in = BodyInputs(*in), sub_out = *out;
    const bool ok = body().InferType(&sub_in, &sub_out, kName);
    FillBack(sub_in, p_.in_data_locs.size(), in, [](std::vector<int>* v, std::size_t i, int t) {
      if (t != kTypeUnknown) AssignType(v, i, t, kName, "data" + std::to_string(i));
    });
    for (std::size_t j = 0; j < out->size(); ++j) {
      if (sub_out[j] != kTypeUnknown) AssignType(out, j, sub_out[j], kName, "output" + std::to_string(j));
    }
    return ok;
  }

  const ForeachParam& param() const { return p_; }
  const Subgraph& body() const { return subgraphs_.at(0); }

 protected:
  void CheckSubgraphs() const override {
    const Subgraph& b = body();
    const std::size_t n = static_cast<std::size_t>(p_.num_args - 1);
    if (b.inputs.size() != n) {
      throw Error("_foreach: the body has " + std::to_string(b.inputs.size()) + " inputs but num_args - 1 is " +
                  std::to_string(n));
    }
    if (b.num_outputs != static_cast<std::size_t>(p_.num_outputs)) {
      throw Error("_foreach: the body has " + std::to_string(b.num_outputs) + " outputs but num_outputs is " +
                  std::to_string(p_.num_outputs));
    }
    std::vector<std::int64_t> all = p_.in_data_locs;
    all.insert(all.end(), p_.in_state_locs.begin(), p_.in_state_locs.end());
    all.insert(all.end(), p_.remain_locs.begin(), p_.remain_locs.end());
    CheckLocs(kName, "in_data_locs + in_state_locs + remain_locs", all, n);
  }

 private:
  template <typename T>
  void Prepare(std::vector<T>* in, std::vector<T>* out, std::vector<T>* aux) const {
    if (subgraphs_.empty()) throw Error("_foreach: the node has no body (a control-flow node needs its subgraph)");
    in->resize(static_cast<std::size_t>(p_.num_args - 1), Unknown<T>());
    out->resize(static_cast<std::size_t>(p_.num_outputs), Unknown<T>());
    aux->clear();
  }
  // The node's inputs in body order: data, states, then the rest, each at its loc.
  template <typename T>
  std::vector<T> BodyInputs(const std::vector<T>& in) const {
    std::vector<T> sub(in.size());
    std::size_t i = 0;
    for (const auto* locs : {&p_.in_data_locs, &p_.in_state_locs, &p_.remain_locs}) {
      for (auto l : *locs) sub[static_cast<std::size_t>(l)] = in[i++];
    }
    return sub;
  }
  // Back to node order, except the data (their body shapes are rows).
  template <typename T, typename AssignFn>
  void FillBack(const std::vector<T>& sub, std::size_t nd, std::vector<T>* in, AssignFn assign) const {
    std::vector<std::int64_t> locs = p_.in_data_locs;
    locs.insert(locs.end(), p_.in_state_locs.begin(), p_.in_state_locs.end());
    locs.insert(locs.end(), p_.remain_locs.begin(), p_.remain_locs.end());
    for (std::size_t i = 0; i < locs.size(); ++i) {
      if constexpr (std::is_same_v<T, TShape>) {
        if (i < nd) continue;
      }
      assign(in, i, sub[static_cast<std::size_t>(locs[i])]);
    }
  }

  ForeachParam p_;
};

class ForeachRunner final : public ControlFlowRunner {
 public:
  ForeachRunner(const ForeachProp& op, Context ctx, Engine* engine) : op_(op), pool_(op.body(), ctx, engine) {}

  void Forward(bool is_train, bool need_grad, const std::vector<NDArray>& in, const std::vector<NDArray>& out,
               const std::vector<OpReqType>& req) override {
    const ForeachParam& p = op_.param();
    const std::size_t nd = p.in_data_locs.size(), ns = p.in_state_locs.size(), nod = static_cast<std::size_t>(p.num_out_data);
    const std::int64_t len = in[0].shape()[0];
    std::vector<NDArray> sub(op_.body().inputs.size());
    for (std::size_t r = 0; r < p.remain_locs.size(); ++r) sub[static_cast<std::size_t>(p.remain_locs[r])] = in[nd + ns + r];
    pool_.Start(need_grad);
    Executor* prev = nullptr;
    for (std::int64_t i = 0; i < len; ++i) {
      for (std::size_t j = 0; j < nd; ++j) {
        sub[static_cast<std::size_t>(p.in_data_locs[j])] = Row(in[j], i, SliceFirstDim(in[j].shape()));
      }
      for (std::size_t k = 0; k < ns; ++k) {
        sub[static_cast<std::size_t>(p.in_state_locs[k])] = prev == nullptr ? in[nd + k] : prev->outputs()[nod + k];
      }
      Executor& e = pool_.Get(static_cast<std::size_t>(i), sub);
      e.Forward(is_train);
      for (std::size_t j = 0; j < nod; ++j) Assign(Row(out[j], i, e.outputs()[j].shape()), e.outputs()[j], req[j]);
      prev = &e;
    }
    for (std::size_t k = 0; k < ns; ++k) Assign(out[nod + k], prev != nullptr ? prev->outputs()[nod + k] : in[nd + k], req[nod + k]);
    iterations_ = len;
  }

  void Backward(const std::vector<NDArray>& out_grad, const std::vector<NDArray>& in_grad,
                const std::vector<OpReqType>& req) override {
    const ForeachParam& p = op_.param();
    const Subgraph& body = op_.body();
    const std::size_t nd = p.in_data_locs.size(), ns = p.in_state_locs.size(), nod = static_cast<std::size_t>(p.num_out_data);
    std::vector<NDArray> state_grad(out_grad.begin() + static_cast<std::ptrdiff_t>(nod), out_grad.end());
    GradSink sink(in_grad, req);
    for (std::int64_t i = iterations_ - 1; i >= 0; --i) {
      Executor& e = pool_.At(static_cast<std::size_t>(i));
      std::vector<NDArray> heads;
      for (std::size_t j = 0; j < nod; ++j) heads.push_back(Row(out_grad[j], i, e.outputs()[j].shape()));
      heads.insert(heads.end(), state_grad.begin(), state_grad.end());
      RunBackward(e, std::move(heads));
      const std::vector<NDArray> g = body.InputGrads(e);
      for (std::size_t j = 0; j < nd; ++j) {
        const NDArray& gj = g[static_cast<std::size_t>(p.in_data_locs[j])];
        if (!gj.is_none() && req[j] != kNullOp && !in_grad[j].is_none()) {
          Assign(Row(in_grad[j], i, gj.shape()), gj, req[j]);
        }
        sink.Mark(j);
      }
      for (std::size_t r = 0; r < p.remain_locs.size(); ++r) sink.Add(nd + ns + r, g[static_cast<std::size_t>(p.remain_locs[r])]);
      for (std::size_t k = 0; k < ns; ++k) state_grad[k] = g[static_cast<std::size_t>(p.in_state_locs[k])];
    }
    for (std::size_t k = 0; k < ns; ++k) sink.Add(nd + k, state_grad[k]);
    sink.ZeroRest();
  }

 private:
  const ForeachProp& op_;
  ExecutorPool pool_;
  std::int64_t iterations_ = 0;
};

std::unique_ptr<ControlFlowRunner> ForeachProp::CreateRunner(Context ctx, Engine* engine) const {
  return std::make_unique<ForeachRunner>(*this, ctx, engine);
}

// -------------------------------------------------------------------------------------------------- _while_loop

struct WhileLoopParam : Params<WhileLoopParam> {
  int num_args = 2;
  int num_outputs = 1;
  int num_out_data = 0;
  int max_iterations = 1;
  std::vector<std::int64_t> cond_input_locs, func_input_locs, func_var_locs;
  static void Declare(ParamSchema<WhileLoopParam>& s) {
    s.Field("num_args", &WhileLoopParam::num_args).LowerBound(2).Describe("Number of inputs, cond and func included.");
    s.Field("num_outputs", &WhileLoopParam::num_outputs).LowerBound(1).Describe("Number of outputs of func.");
    s.Field("num_out_data", &WhileLoopParam::num_out_data).LowerBound(0).Describe("Number of its per-step outputs.");
    s.Field("max_iterations", &WhileLoopParam::max_iterations).LowerBound(1).Describe("The most iterations run.");
    s.Field("cond_input_locs", &WhileLoopParam::cond_input_locs).Describe("cond's inputs among the node's inputs.");
    s.Field("func_input_locs", &WhileLoopParam::func_input_locs).Describe("func's inputs among the node's inputs.");
    s.Field("func_var_locs", &WhileLoopParam::func_var_locs).Describe("The loop variables among func's inputs.");
  }
};

class WhileLoopProp final : public ControlFlowProperty {
 public:
  static constexpr const char* kName = "_while_loop";
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, kName);
    if (p_.num_out_data > p_.num_outputs) throw Error("_while_loop: num_out_data exceeds num_outputs");
    const std::size_t n = static_cast<std::size_t>(p_.num_args - 2);
    CheckLocs(kName, "cond_input_locs", p_.cond_input_locs, n);
    CheckLocs(kName, "func_input_locs", p_.func_input_locs, n);
    CheckLocs(kName, "func_var_locs", p_.func_var_locs, p_.func_input_locs.size());
    if (p_.func_var_locs.size() != static_cast<std::size_t>(p_.num_outputs - p_.num_out_data)) {
      throw Error("_while_loop: " + std::to_string(p_.func_var_locs.size()) + " loop variables but " +
                  std::to_string(p_.num_outputs - p_.num_out_data) + " variable outputs");
    }
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return DataNames(static_cast<std::size_t>(p_.num_args - 2)); }
  std::vector<std::string> ListOutputs() const override { return OutputNames(static_cast<std::size_t>(p_.num_outputs)); }
  std::vector<std::string> SubgraphRoles() const override { return {"cond", "func"}; }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<WhileLoopProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::unique_ptr<ControlFlowRunner> CreateRunner(Context ctx, Engine* engine) const override;

  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    Prepare(in, out, aux);
    const std::size_t nod = static_cast<std::size_t>(p_.num_out_data);
    // A loop variable's output has its input's shape.
    for (std::size_t k = 0; k < p_.func_var_locs.size(); ++k) {
      const std::size_t i = VarInput(k);
      if ((*in)[i].known()) AssignShape(out, nod + k, (*in)[i], kName, "output" + std::to_string(nod + k));
      if ((*out)[nod + k].known()) AssignShape(in, i, (*out)[nod + k], kName, "data" + std::to_string(i));
    }
    std::vector<TShape> cond_in = Gather(*in, p_.cond_input_locs), cond_out(1);
    std::vector<TShape> func_in = Gather(*in, p_.func_input_locs), func_out(out->size());
    for (std::size_t k = nod; k < out->size(); ++k) func_out[k] = (*out)[k];
    const bool cond_ok = cond().InferShape(&cond_in, &cond_out, kName);
    const bool func_ok = func().InferShape(&func_in, &func_out, kName);
    auto assign = [](std::vector<TShape>* v, std::size_t i, const TShape& s) {
      if (s.known()) AssignShape(v, i, s, kName, "data" + std::to_string(i));
    };
    FillInputs(cond_in, p_.cond_input_locs, in, assign);
    FillInputs(func_in, p_.func_input_locs, in, assign);
    for (std::size_t j = 0; j < out->size(); ++j) {
      if (!func_out[j].known()) continue;
      AssignShape(out, j, j < nod ? Prepend(p_.max_iterations, func_out[j]) : func_out[j], kName,
                  "output" + std::to_string(j));
    }
    return cond_ok && func_ok && std::all_of(in->begin(), in->end(), [](const TShape& s) { return s.known(); }) &&
           std::all_of(out->begin(), out->end(), [](const TShape& s) { return s.known(); });
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    Prepare(in, out, aux);
    std::vector<int> cond_in = Gather(*in, p_.cond_input_locs), cond_out(1, kTypeUnknown);
    std::vector<int> func_in = Gather(*in, p_.func_input_locs), func_out = *out;
    const bool cond_ok = cond().InferType(&cond_in, &cond_out, kName);
    const bool func_ok = func().InferType(&func_in, &func_out, kName);
    auto assign = [](std::vector<int>* v, std::size_t i, int t) {
      if (t != kTypeUnknown) AssignType(v, i, t, kName, "data" + std::to_string(i));
    };
    FillInputs(cond_in, p_.cond_input_locs, in, assign);
    FillInputs(func_in, p_.func_input_locs, in, assign);
    for (std::size_t j = 0; j < out->size(); ++j) {
      if (func_out[j] != kTypeUnknown) AssignType(out, j, func_out[j], kName, "output" + std::to_string(j));
    }
    return cond_ok && func_ok;
  }

  const WhileLoopParam& param() const { return p_; }
  const Subgraph& cond() const { return subgraphs_.at(0); }
  const Subgraph& func() const { return subgraphs_.at(1); }
  // The node input that loop variable k starts from.
  std::size_t VarInput(std::size_t k) const {
    return static_cast<std::size_t>(p_.func_input_locs[static_cast<std::size_t>(p_.func_var_locs[k])]);
  }

 protected:
  void CheckSubgraphs() const override {
    if (cond().num_outputs != 1) throw Error("_while_loop: cond must have one output, it has " + std::to_string(cond().num_outputs));
    if (cond().inputs.size() != p_.cond_input_locs.size()) {
      throw Error("_while_loop: cond has " + std::to_string(cond().inputs.size()) + " inputs but cond_input_locs " +
                  LocsText(p_.cond_input_locs) + " places " + std::to_string(p_.cond_input_locs.size()));
    }
    if (func().inputs.size() != p_.func_input_locs.size()) {
      throw Error("_while_loop: func has " + std::to_string(func().inputs.size()) + " inputs but func_input_locs " +
                  LocsText(p_.func_input_locs) + " places " + std::to_string(p_.func_input_locs.size()));
    }
    if (func().num_outputs != static_cast<std::size_t>(p_.num_outputs)) {
      throw Error("_while_loop: func has " + std::to_string(func().num_outputs) + " outputs but num_outputs is " +
                  std::to_string(p_.num_outputs));
    }
  }

 private:
  template <typename T>
  void Prepare(std::vector<T>* in, std::vector<T>* out, std::vector<T>* aux) const {
    if (subgraphs_.empty()) throw Error("_while_loop: the node has no cond and func subgraphs");
    in->resize(static_cast<std::size_t>(p_.num_args - 2), Unknown<T>());
    out->resize(static_cast<std::size_t>(p_.num_outputs), Unknown<T>());
    aux->clear();
  }
  template <typename T>
  static std::vector<T> Gather(const std::vector<T>& in, const std::vector<std::int64_t>& locs) {
    std::vector<T> v;
    for (auto l : locs) v.push_back(in[static_cast<std::size_t>(l)]);
    return v;
  }

  WhileLoopParam p_;
};

class WhileLoopRunner final : public ControlFlowRunner {
 public:
  WhileLoopRunner(const WhileLoopProp& op, Context ctx, Engine* engine)
      : op_(op), ctx_(ctx), engine_(engine), pool_(op.func(), ctx, engine) {}

  void Forward(bool is_train, bool need_grad, const std::vector<NDArray>& in, const std::vector<NDArray>& out,
               const std::vector<OpReqType>& req) override {
    const WhileLoopParam& p = op_.param();
    const std::size_t nod = static_cast<std::size_t>(p.num_out_data), nv = p.func_var_locs.size();
    std::vector<NDArray> func_in = Pick(in, p.func_input_locs), cond_in = Pick(in, p.cond_input_locs);
    // cond's inputs that are loop variables follow them.
    std::vector<int> var_of_cond(cond_in.size(), -1);
    for (std::size_t j = 0; j < cond_in.size(); ++j) {
      for (std::size_t k = 0; k < nv; ++k) {
        if (static_cast<std::size_t>(p.cond_input_locs[j]) == op_.VarInput(k)) var_of_cond[j] = static_cast<int>(k);
      }
    }
    pool_.Start(need_grad);
    std::int64_t step = 0;
    for (; step < p.max_iterations; ++step) {
      if (cond_exec_ == nullptr) {
        cond_exec_ = op_.cond().Bind(cond_in, false, ctx_, engine_);
      } else {
        op_.cond().Rebind(*cond_exec_, cond_in);
      }
      cond_exec_->Forward(is_train);
      if (!Truth(cond_exec_->outputs()[0], WhileLoopProp::kName)) break;
      Executor& e = pool_.Get(static_cast<std::size_t>(step), func_in);
      e.Forward(is_train);
      for (std::size_t j = 0; j < nod; ++j) Assign(Row(out[j], step, e.outputs()[j].shape()), e.outputs()[j], req[j]);
      for (std::size_t k = 0; k < nv; ++k) {
        func_in[static_cast<std::size_t>(p.func_var_locs[k])] = e.outputs()[nod + k];
        for (std::size_t j = 0; j < cond_in.size(); ++j) {
          if (var_of_cond[j] == static_cast<int>(k)) cond_in[j] = e.outputs()[nod + k];
        }
      }
    }
    // The steps not taken: zero rows.
    for (std::size_t j = 0; j < nod; ++j) {
      if (step < p.max_iterations && (req[j] == kWriteTo || req[j] == kWriteInplace)) {
        NDArray rest = out[j].Slice(step, p.max_iterations);
        rest = 0.0;
      }
    }
    for (std::size_t k = 0; k < nv; ++k) Assign(out[nod + k], func_in[static_cast<std::size_t>(p.func_var_locs[k])], req[nod + k]);
    iterations_ = step;
  }

  void Backward(const std::vector<NDArray>& out_grad, const std::vector<NDArray>& in_grad,
                const std::vector<OpReqType>& req) override {
    const WhileLoopParam& p = op_.param();
    const Subgraph& func = op_.func();
    const std::size_t nod = static_cast<std::size_t>(p.num_out_data), nv = p.func_var_locs.size();
    std::vector<char> is_var(func.inputs.size(), 0);
    for (auto l : p.func_var_locs) is_var[static_cast<std::size_t>(l)] = 1;
    std::vector<NDArray> var_grad(out_grad.begin() + static_cast<std::ptrdiff_t>(nod), out_grad.end());
    GradSink sink(in_grad, req);
    for (std::int64_t s = iterations_ - 1; s >= 0; --s) {
      Executor& e = pool_.At(static_cast<std::size_t>(s));
      std::vector<NDArray> heads;
      for (std::size_t j = 0; j < nod; ++j) heads.push_back(Row(out_grad[j], s, e.outputs()[j].shape()));
      heads.insert(heads.end(), var_grad.begin(), var_grad.end());
      RunBackward(e, std::move(heads));
      const std::vector<NDArray> g = func.InputGrads(e);
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (!is_var[i]) sink.Add(static_cast<std::size_t>(p.func_input_locs[i]), g[i]);
      }
      for (std::size_t k = 0; k < nv; ++k) var_grad[k] = g[static_cast<std::size_t>(p.func_var_locs[k])];
    }
    for (std::size_t k = 0; k < nv; ++k) sink.Add(op_.VarInput(k), var_grad[k]);
    sink.ZeroRest();  // inputs only cond reads
  }

 private:
  const WhileLoopProp& op_;
  Context ctx_;
  Engine* engine_;
  ExecutorPool pool_;
  std::unique_ptr<Executor> cond_exec_;
  std::int64_t iterations_ = 0;
};

std::unique_ptr<ControlFlowRunner> WhileLoopProp::CreateRunner(Context ctx, Engine* engine) const {
  return std::make_unique<WhileLoopRunner>(*this, ctx, engine);
}

// ------------------------------------------------------------------------------------------------------- _cond

struct CondParam : Params<CondParam> {
  int num_args = 3;
  int num_outputs = 1;
  std::vector<std::int64_t> cond_input_locs, then_input_locs, else_input_locs;
  static void Declare(ParamSchema<CondParam>& s) {
    s.Field("num_args", &CondParam::num_args).LowerBound(3).Describe("Number of inputs, the three graphs included.");
    s.Field("num_outputs", &CondParam::num_outputs).LowerBound(1).Describe("Number of outputs of each branch.");
    s.Field("cond_input_locs", &CondParam::cond_input_locs).Describe("cond's inputs among the node's inputs.");
    s.Field("then_input_locs", &CondParam::then_input_locs).Describe("then_branch's inputs among the node's inputs.");
    s.Field("else_input_locs", &CondParam::else_input_locs).Describe("else_branch's inputs among the node's inputs.");
  }
};

class CondProp final : public ControlFlowProperty {
 public:
  static constexpr const char* kName = "_cond";
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, kName);
    const std::size_t n = static_cast<std::size_t>(p_.num_args - 3);
    CheckLocs(kName, "cond_input_locs", p_.cond_input_locs, n);
    CheckLocs(kName, "then_input_locs", p_.then_input_locs, n);
    CheckLocs(kName, "else_input_locs", p_.else_input_locs, n);
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return DataNames(static_cast<std::size_t>(p_.num_args - 3)); }
  std::vector<std::string> ListOutputs() const override { return OutputNames(static_cast<std::size_t>(p_.num_outputs)); }
  std::vector<std::string> SubgraphRoles() const override { return {"cond", "then_branch", "else_branch"}; }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<CondProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::unique_ptr<ControlFlowRunner> CreateRunner(Context ctx, Engine* engine) const override;

  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    return Infer(in, out, aux, [](std::vector<TShape>* v, std::size_t i, const TShape& s, const std::string& name) {
      if (s.known()) AssignShape(v, i, s, kName, name);
    });
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    return Infer(in, out, aux, [](std::vector<int>* v, std::size_t i, int t, const std::string& name) {
      if (t != kTypeUnknown) AssignType(v, i, t, kName, name);
    });
  }

  const CondParam& param() const { return p_; }
  const Subgraph& cond() const { return subgraphs_.at(0); }
  const Subgraph& branch(bool then) const { return subgraphs_.at(then ? 1 : 2); }
  const std::vector<std::int64_t>& branch_locs(bool then) const { return then ? p_.then_input_locs : p_.else_input_locs; }

 protected:
  void CheckSubgraphs() const override {
    if (cond().num_outputs != 1) throw Error("_cond: cond must have one output, it has " + std::to_string(cond().num_outputs));
    const std::vector<std::pair<const Subgraph*, const std::vector<std::int64_t>*>> parts = {
        {&cond(), &p_.cond_input_locs}, {&branch(true), &p_.then_input_locs}, {&branch(false), &p_.else_input_locs}};
    for (std::size_t k = 0; k < parts.size(); ++k) {
      if (parts[k].first->inputs.size() != parts[k].second->size()) {
        throw Error("_cond: " + SubgraphRoles()[k] + " has " + std::to_string(parts[k].first->inputs.size()) +
                    " inputs but its locs " + LocsText(*parts[k].second) + " place " +
                    std::to_string(parts[k].second->size()));
      }
    }
    for (bool then : {true, false}) {
      if (branch(then).num_outputs != static_cast<std::size_t>(p_.num_outputs)) {
        throw Error("_cond: " + std::string(then ? "then_branch" : "else_branch") + " has " +
                    std::to_string(branch(then).num_outputs) + " outputs but num_outputs is " +
                    std::to_string(p_.num_outputs));
      }
    }
  }

 private:
  // Both branches must give the outputs' shapes and types; cond's and the branches' inputs come from the node's.
  template <typename T, typename AssignFn>
  bool Infer(std::vector<T>* in, std::vector<T>* out, std::vector<T>* aux, AssignFn assign) const {
    if (subgraphs_.empty()) throw Error("_cond: the node has no cond, then_branch and else_branch subgraphs");
    in->resize(static_cast<std::size_t>(p_.num_args - 3), Unknown<T>());
    out->resize(static_cast<std::size_t>(p_.num_outputs), Unknown<T>());
    aux->clear();
    bool ok = true;
    for (int part = 0; part < 3; ++part) {
      const Subgraph& sub = subgraphs_[static_cast<std::size_t>(part)];
      const auto& locs = part == 0 ? p_.cond_input_locs : part == 1 ? p_.then_input_locs : p_.else_input_locs;
      std::vector<T> sin, sout(1, Unknown<T>());
      for (auto l : locs) sin.push_back((*in)[static_cast<std::size_t>(l)]);
      if (part > 0) sout = *out;
      if constexpr (std::is_same_v<T, TShape>) {
        ok = sub.InferShape(&sin, &sout, kName) && ok;
      } else {
        ok = sub.InferType(&sin, &sout, kName) && ok;
      }
      for (std::size_t i = 0; i < locs.size(); ++i) {
        assign(in, static_cast<std::size_t>(locs[i]), sin[i], "data" + std::to_string(locs[i]));
      }
      if (part == 0) continue;
      for (std::size_t j = 0; j < out->size(); ++j) {
        assign(out, j, sout[j], "output" + std::to_string(j) + " (of " + SubgraphRoles()[static_cast<std::size_t>(part)] + ")");
      }
    }
    return ok && std::all_of(in->begin(), in->end(), [](const T& v) { return Known(v); }) &&
           std::all_of(out->begin(), out->end(), [](const T& v) { return Known(v); });
  }

  CondParam p_;
};

class CondRunner final : public ControlFlowRunner {
 public:
  CondRunner(const CondProp& op, Context ctx, Engine* engine)
      : op_(op), ctx_(ctx), engine_(engine), then_(op.branch(true), ctx, engine), else_(op.branch(false), ctx, engine) {}

  void Forward(bool is_train, bool need_grad, const std::vector<NDArray>& in, const std::vector<NDArray>& out,
               const std::vector<OpReqType>& req) override {
    const std::vector<NDArray> cond_in = Pick(in, op_.param().cond_input_locs);
    if (cond_exec_ == nullptr) {
      cond_exec_ = op_.cond().Bind(cond_in, false, ctx_, engine_);
    } else {
      op_.cond().Rebind(*cond_exec_, cond_in);
    }
    cond_exec_->Forward(is_train);
    taken_ = Truth(cond_exec_->outputs()[0], CondProp::kName);
    ExecutorPool& pool = taken_ ? then_ : else_;
    pool.Start(need_grad);
    Executor& e = pool.Get(0, Pick(in, op_.branch_locs(taken_)));
    e.Forward(is_train);
    for (std::size_t j = 0; j < out.size(); ++j) Assign(out[j], e.outputs()[j], req[j]);
  }

  void Backward(const std::vector<NDArray>& out_grad, const std::vector<NDArray>& in_grad,
                const std::vector<OpReqType>& req) override {
    Executor& e = (taken_ ? then_ : else_).At(0);
    RunBackward(e, out_grad);
    const std::vector<NDArray> g = op_.branch(taken_).InputGrads(e);
    const auto& locs = op_.branch_locs(taken_);
    GradSink sink(in_grad, req);
    for (std::size_t i = 0; i < locs.size(); ++i) sink.Add(static_cast<std::size_t>(locs[i]), g[i]);
    sink.ZeroRest();  // inputs the branch taken does not read
  }

 private:
  const CondProp& op_;
  Context ctx_;
  Engine* engine_;
  std::unique_ptr<Executor> cond_exec_;
  ExecutorPool then_, else_;
  bool taken_ = false;
};

std::unique_ptr<ControlFlowRunner> CondProp::CreateRunner(Context ctx, Engine* engine) const {
  return std::make_unique<CondRunner>(*this, ctx, engine);
}

}  // namespace

// ------------------------------------------------------------------------------------------------- Subgraph

Subgraph::Subgraph(Symbol s) : symbol(std::move(s)) {
  const IndexedGraph g = IndexGraph(symbol.outputs());
  for (const Node* n : g.nodes) {
    if (!n->is_variable()) continue;
    if (std::find(inputs.begin(), inputs.end(), n->name) != inputs.end()) {
      throw Error("a subgraph has two inputs named '" + n->name + "'");
    }
    inputs.push_back(n->name);
  }
  auto index_of = [&](std::uint32_t node) {
    return static_cast<int>(std::find(inputs.begin(), inputs.end(), g.nodes[node]->name) - inputs.begin());
  };
  for (auto n : g.arg_nodes) input_of_arg.push_back(index_of(n));
  for (auto n : g.aux_nodes) input_of_aux.push_back(index_of(n));
  num_outputs = g.heads.size();
}

namespace {
// Runs Symbol::InferShape / InferType for a subgraph (Infer: a member pointer) on its inputs' values.
template <typename T, typename Infer>
bool InferSubgraph(const Subgraph& sub, std::vector<T>* in, std::vector<T>* out, const std::string& what, Infer infer) {
  std::map<std::string, T> known;
  for (std::size_t i = 0; i < sub.inputs.size(); ++i) {
    if (Known((*in)[i])) known[sub.inputs[i]] = (*in)[i];
  }
  std::vector<T> args, outs, aux;
  bool ok = false;
  try {
    ok = (sub.symbol.*infer)(known, &args, &outs, &aux, nullptr);
  } catch (const Error& e) {
    throw Error(what + ": in its subgraph: " + e.what());
  }
  for (std::size_t k = 0; k < args.size(); ++k) (*in)[static_cast<std::size_t>(sub.input_of_arg[k])] = args[k];
  for (std::size_t k = 0; k < aux.size(); ++k) (*in)[static_cast<std::size_t>(sub.input_of_aux[k])] = aux[k];
  out->resize(outs.size(), Unknown<T>());
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (Known(outs[k])) (*out)[k] = outs[k];
  }
  return ok;
}
}  // namespace

bool Subgraph::InferShape(std::vector<TShape>* in, std::vector<TShape>* out, const std::string& what) const {
  return InferSubgraph(*this, in, out, what, &Symbol::InferShape);
}
bool Subgraph::InferType(std::vector<int>* in, std::vector<int>* out, const std::string& what) const {
  return InferSubgraph(*this, in, out, what, &Symbol::InferType);
}

std::unique_ptr<Executor> Subgraph::Bind(const std::vector<NDArray>& in, bool grads, Context ctx, Engine* engine) const {
  std::vector<NDArray> args, arg_grads, aux;
  std::vector<OpReqType> reqs;
  for (int i : input_of_arg) {
    const NDArray& a = in[static_cast<std::size_t>(i)];
    args.push_back(a);
    // Integer inputs (a loop counter) get no gradient.
    const DType t = a.dtype();
    const bool differentiable = t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBfloat16;
    reqs.push_back(grads && differentiable ? kWriteTo : kNullOp);
    arg_grads.push_back(reqs.back() == kWriteTo ? NDArray(a.shape(), ctx, t, engine) : NDArray());
  }
  for (int i : input_of_aux) aux.push_back(in[static_cast<std::size_t>(i)]);
  if (!grads) arg_grads.clear(), reqs.clear();
  ExecutorOptions options;
  options.engine = engine;
  return Executor::Bind(symbol, ctx, args, arg_grads, reqs, aux, options);
}

void Subgraph::Rebind(Executor& exec, const std::vector<NDArray>& in) const {
  for (std::size_t k = 0; k < input_of_arg.size(); ++k) exec.SetArgArray(k, in[static_cast<std::size_t>(input_of_arg[k])]);
  for (std::size_t k = 0; k < input_of_aux.size(); ++k) exec.SetAuxArray(k, in[static_cast<std::size_t>(input_of_aux[k])]);
}

std::vector<NDArray> Subgraph::InputGrads(const Executor& exec) const {
  std::vector<NDArray> g(inputs.size());
  for (std::size_t k = 0; k < input_of_arg.size(); ++k) g[static_cast<std::size_t>(input_of_arg[k])] = exec.grad_arrays()[k];
  return g;
}

// ------------------------------------------------------------------------------------------------ property

void ControlFlowProperty::SetSubgraphs(std::vector<Symbol> subgraphs) {
  const auto roles = SubgraphRoles();
  if (subgraphs.size() != roles.size()) {
    std::string names;
    for (const auto& r : roles) names += (names.empty() ? "" : ", ") + r;
    throw Error(TypeString() + ": takes " + std::to_string(roles.size()) + " subgraphs (" + names + "), got " +
                std::to_string(subgraphs.size()));
  }
  subgraphs_.clear();
  for (std::size_t k = 0; k < subgraphs.size(); ++k) {
    if (subgraphs[k].empty()) throw Error(TypeString() + ": subgraph " + roles[k] + " is empty");
    try {
      subgraphs_.emplace_back(std::move(subgraphs[k]));
    } catch (const Error& e) {
      throw Error(TypeString() + ": " + roles[k] + ": " + e.what());
    }
  }
  CheckSubgraphs();
}

std::vector<Symbol> ControlFlowProperty::subgraph_symbols() const {
  std::vector<Symbol> v;
  for (const auto& s : subgraphs_) v.push_back(s.symbol);
  return v;
}

std::unique_ptr<Operator> ControlFlowProperty::CreateOperator(Context) const {
  throw Error(TypeString() +
              " runs its subgraphs from a graph (Executor, CachedOp, RunImperative), not as a single operator call");
}

std::vector<int> ControlFlowProperty::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                                const std::vector<int>& in_data,
                                                                const std::vector<int>&) const {
  std::vector<int> deps = out_grad;
  deps.insert(deps.end(), in_data.begin(), in_data.end());
  return deps;
}

const ControlFlowProperty* AsControlFlow(const OperatorProperty& op) {
  return dynamic_cast<const ControlFlowProperty*>(&op);
}

TROUPE_REGISTER_OP_PROPERTY(_foreach, ForeachProp)
    .describe("Runs a body subgraph over the first axis of its data, carrying loop states (MXNet's contrib.foreach).")
    .add_argument("data", "NDArray-or-Symbol[]", "The sliced data, the initial states, then the body's other inputs.")
    .add_arguments(ForeachParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_while_loop, WhileLoopProp)
    .describe("Runs func while cond holds, at most max_iterations times (MXNet's contrib.while_loop).")
    .add_argument("data", "NDArray-or-Symbol[]", "The inputs of cond and func, loop variables among them.")
    .add_arguments(WhileLoopParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_cond, CondProp)
    .describe("Runs then_branch or else_branch as cond says (MXNet's contrib.cond).")
    .add_argument("data", "NDArray-or-Symbol[]", "The inputs of cond and the branches.")
    .add_arguments(CondParam::Docs());

}  // namespace graph
}  // namespace troupe
