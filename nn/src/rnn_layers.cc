// The recurrent layers (nn/rnn_layers.h).
#include "nn/rnn_layers.h"

#include <utility>

#include "base/error.h"
#include "nn/src/layer_util.h"

namespace troupe::nn {

namespace {

// A block that only holds parameters (or other holders) under a structural name: Gluon's save_parameters
// names of the recurrent layers (see the header). Its parameters are named like the layer's own.
class ParamHolder final : public Block {
 public:
  explicit ParamHolder(const std::string& prefix) : Block(prefix, "") {}
  std::vector<NDArray> Forward(const std::vector<NDArray>&) override {
    throw Error("the parameter holder '" + prefix() + "' of a recurrent layer is not callable; call the layer");
  }
  using Block::AddChild;
  using Block::AddParameter;
};

// MXNet's shape text with 0 for unknown dimensions ("(16, 0)"), as a variable's __shape__ attribute.
std::string ShapeAttr(const TShape& s) {
  std::string t = "(";
  for (int i = 0; i < s.ndim(); ++i) t += (i ? ", " : "") + std::to_string(s[i] > 0 ? s[i] : 0);
  return t + (s.ndim() == 1 ? ",)" : ")");
}

}  // namespace

RecurrentLayer::RecurrentLayer(std::string kind, const std::string& hint, std::string mode, int hidden_size,
                               int num_layers, std::string layout, float dropout, bool bidirectional, int input_size,
                               const std::string& i2h_weight_init, const std::string& h2h_weight_init,
                               const std::string& i2h_bias_init, const std::string& h2h_bias_init,
                               const std::string& prefix)
    : HybridBlock(prefix, hint),
      kind_(std::move(kind)),
      mode_(std::move(mode)),
      layout_(std::move(layout)),
      hidden_size_(hidden_size),
      num_layers_(num_layers),
      directions_(bidirectional ? 2 : 1),
      dropout_(dropout) {
  RequirePositive(hidden_size, kind_.c_str(), "hidden_size");
  RequirePositive(num_layers, kind_.c_str(), "num_layers");
  if (input_size < 0) {
    throw Error(kind_ + ": input_size must be positive or 0 (deferred), got " + std::to_string(input_size));
  }
  if (layout_ != "TNC" && layout_ != "NTC") throw Error(kind_ + ": layout must be TNC or NTC, got '" + layout_ + "'");
  if (!(dropout >= 0 && dropout < 1)) throw Error(kind_ + ": dropout must be in [0, 1), got " + Num(dropout));
  const std::int64_t gh = static_cast<std::int64_t>(mode_ == "lstm" ? 4 : mode_ == "gru" ? 3 : 1) * hidden_size;
  auto unfused = std::make_shared<ParamHolder>(this->prefix());
  AddChild("_unfused", unfused);
  std::vector<std::shared_ptr<Parameter>> weights, biases;
  std::int64_t in = input_size;
  for (int l = 0; l < num_layers; ++l) {
    // Unidirectional: "_unfused.<l>" holds the parameters; bidirectional: "_unfused.<l>.l_cell" and ".r_cell".
    auto layer =
        std::make_shared<ParamHolder>(this->prefix() + (directions_ == 2 ? "" : "l" + std::to_string(l) + "_"));
    unfused->AddChild(std::to_string(l), layer);
    for (int d = 0; d < directions_; ++d) {
      const std::string dir = d == 0 ? "l" : "r";
      const std::string short_prefix = dir + std::to_string(l) + "_";
      std::shared_ptr<ParamHolder> cell = layer;
      if (directions_ == 2) {
        cell = std::make_shared<ParamHolder>(this->prefix() + short_prefix);
        layer->AddChild(dir + "_cell", cell);
      }
      auto add = [&](const std::string& name, TShape shape, const std::string& init) {
        auto p = cell->AddParameter(name, std::move(shape), init);
        by_name_.emplace_back(short_prefix + name, p);
        return p;
      };
      weights.push_back(add("i2h_weight", TShape{gh, in}, i2h_weight_init));
      weights.push_back(add("h2h_weight", TShape{gh, hidden_size}, h2h_weight_init));
      biases.push_back(add("i2h_bias", TShape{gh}, i2h_bias_init));
      biases.push_back(add("h2h_bias", TShape{gh}, h2h_bias_init));
    }
    in = static_cast<std::int64_t>(directions_) * hidden_size;
  }
  packed_ = weights;
  packed_.insert(packed_.end(), biases.begin(), biases.end());
}

std::string RecurrentLayer::Who() const { return kind_ + " '" + prefix() + "'"; }

void RecurrentLayer::CheckInputCount(std::size_t n) const {
  if (n != 1 && n != 1 + num_states()) {
    throw Error(Who() + ": takes the input sequence, or the input sequence and its " +
                (num_states() == 2 ? std::string("2 begin states (h, c)") : std::string("begin state (h)")) + "; got " +
                std::to_string(n) + " inputs");
  }
}

std::shared_ptr<Parameter> RecurrentLayer::param(const std::string& short_name) const {
  for (const auto& [n, p] : by_name_) {
    if (n == short_name) return p;
  }
  std::string names;
  for (const auto& [n, p] : by_name_) names += (names.empty() ? "" : ", ") + n;
  throw Error(Who() + " has no parameter '" + short_name + "' (it has " + names + ")");
}

std::vector<TShape> RecurrentLayer::StateShapes(std::int64_t batch_size) const {
  const TShape s{static_cast<std::int64_t>(num_layers_) * directions_, batch_size, hidden_size_};
  return std::vector<TShape>(num_states(), s);
}

std::vector<NDArray> RecurrentLayer::BeginState(std::int64_t batch_size, Context ctx) const {
  RequirePositive(batch_size, kind_.c_str(), "BeginState's batch_size");
  std::vector<NDArray> states;
  for (const TShape& s : StateShapes(batch_size)) states.push_back(NDArray::Zeros(s, ctx));
  return states;
}

std::vector<NDArray> RecurrentLayer::Forward(const std::vector<NDArray>& inputs) {
  CheckInputCount(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_none()) throw Error(Who() + ": input " + std::to_string(i) + " is empty");
  }
  const TShape& x = inputs[0].shape();
  if (x.ndim() != 3) {
    throw Error(
        Who() + ": the input sequence must have 3 dimensions (" +
        (layout_ == "TNC" ? "sequence length, batch size, input size" : "batch size, sequence length, input size") +
        " in layout " + layout_ + "), got shape " + x.ToString());
  }
  const TShape& w = packed_[0]->shape();
  if (w[1] > 0 && x[2] != w[1]) {
    throw Error(Who() + ": the input sequence has " + std::to_string(x[2]) + " features (shape " + x.ToString() +
                ") but the layer's input size is " + std::to_string(w[1]));
  }
  const std::vector<TShape> want = StateShapes(x[layout_ == "TNC" ? 1 : 0]);
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].shape() != want[i - 1]) {
      throw Error(Who() + ": begin state " + std::to_string(i - 1) + " has shape " + inputs[i].shape().ToString() +
                  " but the layer expects " + want[i - 1].ToString() +
                  " (num_layers * directions, batch size, hidden_size)");
    }
  }
  // A deferred input size is the input's feature size. (The block's shape inference cannot complete it: the
  // Reshape that flattens the weight gives no partial shape to _rnn_param_concat while its input is unknown.)
  for (const auto& [n, p] : by_name_) {
    if (p->deferred() && p->shape()[1] <= 0) p->SetShape(TShape{p->shape()[0], x[2]});
  }
  return HybridBlock::Forward(inputs);
}

std::vector<Symbol> RecurrentLayer::HybridForward(const std::vector<Symbol>& inputs) {
  CheckInputCount(inputs.size());
  const bool ntc = layout_ == "NTC";
  Symbol x = inputs[0];
  if (ntc) x = Symbol::Create("SwapAxis", {{"dim1", "0"}, {"dim2", "1"}}, {x}, prefix() + "swapaxes0");
  // The parameters flattened and packed in the operator's order. The variables carry their shapes (0 where
  // still unknown), as Gluon's do.
  std::vector<Symbol> flat;
  for (const auto& p : packed_) {
    Symbol v = Symbol::Variable(p->name(), {{"__shape__", ShapeAttr(p->shape())}});
    flat.push_back(Symbol::Create("Reshape", {{"shape", "(-1,)"}}, {v}, p->name() + "_flat"));
  }
  Symbol params = Symbol::Create("_rnn_param_concat", {{"num_args", std::to_string(flat.size())}, {"dim", "0"}}, flat,
                                 prefix() + "rnn_param_concat0");
  std::vector<Symbol> rnn_in{x, params};
  const bool given = inputs.size() > 1;
  if (given) {
    rnn_in.insert(rnn_in.end(), inputs.begin() + 1, inputs.end());
  } else {
    // Zero states (L*D, N, H) made from the input, whose batch size is only known when the block runs:
    // a (1, N, 1) slice of it, zeroed and broadcast.
    Symbol z =
        Symbol::Create("slice_axis", {{"axis", "0"}, {"begin", "0"}, {"end", "1"}}, {x}, prefix() + "state_slice0");
    z = Symbol::Create("slice_axis", {{"axis", "2"}, {"begin", "0"}, {"end", "1"}}, {z}, prefix() + "state_slice1");
    z = Symbol::Create("zeros_like", {}, {z}, prefix() + "state_zeros");
    z = Symbol::Create("broadcast_axis",
                       {{"axis", Tuple({0, 2})}, {"size", Tuple({num_layers_ * directions_, hidden_size_})}}, {z},
                       prefix() + "begin_state");
    for (std::size_t i = 0; i < num_states(); ++i) rnn_in.push_back(z);
  }
  Symbol rnn = Symbol::Create("RNN",
                              {{"state_size", std::to_string(hidden_size_)},
                               {"num_layers", std::to_string(num_layers_)},
                               {"bidirectional", directions_ == 2 ? "true" : "false"},
                               {"mode", mode_},
                               {"p", Num(dropout_)},
                               {"state_outputs", given ? "true" : "false"}},
                              rnn_in, prefix() + "rnn0");
  Symbol out = rnn[0];
  if (ntc) out = Symbol::Create("SwapAxis", {{"dim1", "0"}, {"dim2", "1"}}, {out}, prefix() + "swapaxes1");
  std::vector<Symbol> result{out};
  for (std::size_t i = 0; given && i < num_states(); ++i) result.push_back(rnn[1 + i]);
  return result;
}

namespace {

std::string RnnMode(const std::string& activation) {
  if (activation == "relu") return "rnn_relu";
  if (activation == "tanh") return "rnn_tanh";
  throw Error("RNN: activation must be relu or tanh, got '" + activation + "'");
}

}  // namespace

RNN::RNN(int hidden_size, int num_layers, const std::string& activation, const std::string& layout, float dropout,
         bool bidirectional, int input_size, const std::string& i2h_weight_init, const std::string& h2h_weight_init,
         const std::string& i2h_bias_init, const std::string& h2h_bias_init, const std::string& prefix)
    : RecurrentLayer("RNN", "rnn", RnnMode(activation), hidden_size, num_layers, layout, dropout, bidirectional,
                     input_size, i2h_weight_init, h2h_weight_init, i2h_bias_init, h2h_bias_init, prefix) {}

LSTM::LSTM(int hidden_size, int num_layers, const std::string& layout, float dropout, bool bidirectional,
           int input_size, const std::string& i2h_weight_init, const std::string& h2h_weight_init,
           const std::string& i2h_bias_init, const std::string& h2h_bias_init, const std::string& prefix)
    : RecurrentLayer("LSTM", "lstm", "lstm", hidden_size, num_layers, layout, dropout, bidirectional, input_size,
                     i2h_weight_init, h2h_weight_init, i2h_bias_init, h2h_bias_init, prefix) {}

GRU::GRU(int hidden_size, int num_layers, const std::string& layout, float dropout, bool bidirectional, int input_size,
         const std::string& i2h_weight_init, const std::string& h2h_weight_init, const std::string& i2h_bias_init,
         const std::string& h2h_bias_init, const std::string& prefix)
    : RecurrentLayer("GRU", "gru", "gru", hidden_size, num_layers, layout, dropout, bidirectional, input_size,
                     i2h_weight_init, h2h_weight_init, i2h_bias_init, h2h_bias_init, prefix) {}

}  // namespace troupe::nn
