// The recurrent layers (Gluon's gluon.rnn RNN, LSTM, GRU): stacked, optionally bidirectional recurrent
// layers over a whole sequence, each a HybridBlock whose forward pass is the fused RNN operator
// (op/nn/rnn/rnn.h) on its parameters packed by _rnn_param_concat, as Gluon's layers do.
//
// Input: the sequence, (sequence length, batch, input size) in layout "TNC" or (batch, sequence length,
// input size) in "NTC". Called with the sequence alone, a layer starts from zero states and returns the
// output sequence only, (T, N, D*H) or (N, T, D*H) with D = 2 when bidirectional. Called with the begin
// states as well (LSTM: h and c; RNN, GRU: h; each (num_layers * D, batch, hidden_size) whatever the layout),
// it returns the output sequence and the final states in the same order.
//
// Parameters, as Gluon's: for each layer l and direction ("l" forward, "r" reverse) l<l>_i2h_weight
// (G*H, input size of the layer), l<l>_h2h_weight (G*H, H), l<l>_i2h_bias and l<l>_h2h_bias (G*H), with G
// the gate count (LSTM 4, GRU 3, RNN 1) and H the hidden size; full names "<prefix>l0_i2h_weight" ... The
// first layer's input size may be left 0: the layer's first forward pass completes it. Inside another block's
// symbol (a HybridSequential), give input_size: that block's shape inference cannot complete it, because
// Reshape passes on no partial shape of a weight with an unknown dimension. Gluon's save_parameters
// writes these layers' parameters under the structural names of the stack of cells they once were,
// "_unfused.<layer>.i2h_weight", or "_unfused.<layer>.<l|r>_cell.i2h_weight" when bidirectional; the layers
// keep their parameters in child blocks of those names so that SaveParameters and LoadParameters read and
// write Gluon's files. The children only hold parameters (calling them is an error).
//
// Dropout (rate dropout) applies between stacked layers in training mode only, drawn by the operator (not
// MXNet's random numbers).
//
//   auto lstm = std::make_shared<nn::LSTM>(64, 2);          // 2 layers, input size deferred
//   lstm->Initialize();
//   NDArray y = (*lstm)(x);                                  // x (T, N, C) -> y (T, N, 64)
//   auto out = lstm->Forward({x, h0, c0});                   // {y, h, c}
//
// Thread-safety: as any block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/block.h"

namespace troupe::nn {

// What RNN, LSTM and GRU share (Gluon's _RNNLayer).
class RecurrentLayer : public HybridBlock {
 public:
  // Checks the inputs (count, the sequence's rank and input size, the begin states' shapes) with errors naming
  // the layer, then runs the block.
  std::vector<NDArray> Forward(const std::vector<NDArray>& inputs) override;
  using HybridBlock::operator();
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

  // The begin states' shapes for a batch size (h, and c for LSTM), and zero states of those shapes on ctx.
  std::vector<TShape> StateShapes(std::int64_t batch_size) const;
  std::vector<NDArray> BeginState(std::int64_t batch_size, Context ctx = Context::CPU()) const;
  // A parameter by its Gluon short name ("l0_i2h_weight", "r1_h2h_bias"); troupe::Error for another name.
  std::shared_ptr<Parameter> param(const std::string& short_name) const;

  const std::string& mode() const { return mode_; }  // the RNN operator's mode: rnn_relu, rnn_tanh, lstm, gru
  int hidden_size() const { return hidden_size_; }
  int num_layers() const { return num_layers_; }
  bool bidirectional() const { return directions_ == 2; }
  const std::string& layout() const { return layout_; }
  std::size_t num_states() const { return mode_ == "lstm" ? 2 : 1; }

 protected:
  // kind: the class name for messages (RNN, LSTM, GRU); hint: the automatic prefix's start.
  RecurrentLayer(std::string kind, const std::string& hint, std::string mode, int hidden_size, int num_layers,
                 std::string layout, float dropout, bool bidirectional, int input_size,
                 const std::string& i2h_weight_init, const std::string& h2h_weight_init,
                 const std::string& i2h_bias_init, const std::string& h2h_bias_init, const std::string& prefix);

 private:
  std::string Who() const;
  void CheckInputCount(std::size_t n) const;

  std::string kind_, mode_, layout_;
  int hidden_size_, num_layers_, directions_;
  float dropout_;
  // By short name, and in the RNN operator's packed order (every weight, then every bias; each by layer,
  // then direction, i2h before h2h).
  std::vector<std::pair<std::string, std::shared_ptr<Parameter>>> by_name_;
  std::vector<std::shared_ptr<Parameter>> packed_;
};

// An Elman RNN: h' = activation(W_i x + b_i + W_h h + b_h); activation "relu" (Gluon's default) or "tanh".
class RNN : public RecurrentLayer {
 public:
  explicit RNN(int hidden_size, int num_layers = 1, const std::string& activation = "relu",
               const std::string& layout = "TNC", float dropout = 0.0f, bool bidirectional = false, int input_size = 0,
               const std::string& i2h_weight_init = {}, const std::string& h2h_weight_init = {},
               const std::string& i2h_bias_init = "zeros", const std::string& h2h_bias_init = "zeros",
               const std::string& prefix = {});
};

// Long short-term memory: gates i, f, g, o (in that order in the weights); states h and c.
class LSTM : public RecurrentLayer {
 public:
  explicit LSTM(int hidden_size, int num_layers = 1, const std::string& layout = "TNC", float dropout = 0.0f,
                bool bidirectional = false, int input_size = 0, const std::string& i2h_weight_init = {},
                const std::string& h2h_weight_init = {}, const std::string& i2h_bias_init = "zeros",
                const std::string& h2h_bias_init = "zeros", const std::string& prefix = {});
};

// Gated recurrent unit: gates r, z, n (in that order in the weights); state h.
class GRU : public RecurrentLayer {
 public:
  explicit GRU(int hidden_size, int num_layers = 1, const std::string& layout = "TNC", float dropout = 0.0f,
               bool bidirectional = false, int input_size = 0, const std::string& i2h_weight_init = {},
               const std::string& h2h_weight_init = {}, const std::string& i2h_bias_init = "zeros",
               const std::string& h2h_bias_init = "zeros", const std::string& prefix = {});
};

}  // namespace troupe::nn
