// RNN (MXNet 1.9's fused recurrent operator: rnn_relu, rnn_tanh, lstm, gru, stacked and bidirectional): the
// parameter struct, the packed-parameter layout and the property, for the CPU operator in rnn.cc (and a GPU
// one to come, which would share them).
//
// Names, parameters, defaults, argument and output names are MXNet 1.9's, so symbol JSON (and exported Gluon
// rnn layers, with their _rnn_param_concat) maps onto them. Properties are immutable after Init (thread-safe to
// share). Compiles under nvcc (-std=c++20): no CAF or Cap'n Proto.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct RNNParam : Params<RNNParam> {
  int state_size = 0;
  int num_layers = 0;
  bool bidirectional = false;
  std::string mode;
  float p = 0.0f;
  bool state_outputs = false;
  std::optional<int> projection_size;
  std::optional<double> lstm_state_clip_min, lstm_state_clip_max;
  bool lstm_state_clip_nan = false;
  bool use_sequence_length = false;
  static void Declare(ParamSchema<RNNParam>& s) {
    s.Field("state_size", &RNNParam::state_size).LowerBound(1).Describe("size of the state for each layer");
    s.Field("num_layers", &RNNParam::num_layers).LowerBound(1).Describe("number of stacked layers");
    s.Field("bidirectional", &RNNParam::bidirectional)
        .Default(false)
        .Describe("whether to use bidirectional recurrent layers");
    s.Field("mode", &RNNParam::mode)
        .Choices({"rnn_relu", "rnn_tanh", "lstm", "gru"})
        .Describe("the type of RNN to compute");
    s.Field("p", &RNNParam::p)
        .Default(0.0f)
        .Range(0, 1)
        .Describe("drop rate of the dropout on the outputs of each RNN layer, except the last layer.");
    s.Field("state_outputs", &RNNParam::state_outputs)
        .Default(false)
        .Describe("Whether to have the states as symbol outputs.");
    s.Field("projection_size", &RNNParam::projection_size)
        .Default(std::nullopt)
        .Describe("size of project size (troupe: not supported; leave it None)");
    s.Field("lstm_state_clip_min", &RNNParam::lstm_state_clip_min)
        .Default(std::nullopt)
        .Describe("Minimum clip value of LSTM states (troupe, as MXNet on the CPU: not supported).");
    s.Field("lstm_state_clip_max", &RNNParam::lstm_state_clip_max)
        .Default(std::nullopt)
        .Describe("Maximum clip value of LSTM states (troupe, as MXNet on the CPU: not supported).");
    s.Field("lstm_state_clip_nan", &RNNParam::lstm_state_clip_nan)
        .Default(false)
        .Describe("Whether to stop NaN from propagating in state by clipping it to min/max. "
                  "If clipping range is not specified, this option is ignored.");
    s.Field("use_sequence_length", &RNNParam::use_sequence_length)
        .Default(false)
        .Describe("If set to true, this layer takes in an extra input parameter `sequence_length` to specify "
                  "variable length sequence");
  }
};

// The sizes of one RNN call and where everything sits in the packed parameter vector, which is MXNet's (and
// cuDNN's canonical) layout: first every weight, for each layer and within it each direction the i2h weight
// (G*H, I_l) then the h2h weight (G*H, H); then every bias in the same order, i2h (G*H) then h2h (G*H). G is
// the number of gates (1; lstm 4 in the order i, f, g, o; gru 3 in the order r, z, n) and I_l the input size
// of layer l (I for the first, D*H above it).
struct RnnDims {
  std::int64_t T = 0, N = 0, I = 0, H = 0;  // steps, batch, input size, state size
  int L = 1, D = 1, G = 1;                  // layers, directions, gates

  std::int64_t InputSize(int l) const { return l == 0 ? I : D * H; }
  std::int64_t GH() const { return G * H; }
  // Offset of layer l, direction d's i2h weight; its h2h weight follows it.
  std::int64_t WeightOffset(int l, int d) const {
    std::int64_t off = 0;
    for (int k = 0; k < l; ++k) off += D * GH() * (InputSize(k) + H);
    return off + d * GH() * (InputSize(l) + H);
  }
  std::int64_t WeightSize() const { return WeightOffset(L, 0); }
  // Offset of layer l, direction d's i2h bias; its h2h bias follows it.
  std::int64_t BiasOffset(int l, int d) const { return WeightSize() + (static_cast<std::int64_t>(l) * D + d) * 2 * GH(); }
  std::int64_t ParamSize() const { return BiasOffset(L, 0); }
};

// Gates per mode: 1 (rnn_relu, rnn_tanh), 4 (lstm), 3 (gru).
int RnnGates(const std::string& mode);

class RNNProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
  // The visible outputs, then the hidden 'reserve' (what Backward reads: every layer's output, the gates,
  // LSTM cells or GRU's h2h candidate term, and the dropout masks).
  std::vector<std::string> ListOutputs() const override;
  int NumVisibleOutputs() const override;
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<RNNProp>(*this); }
  std::string TypeString() const override { return "RNN"; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>& in_shape) const override;
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const RNNParam& param() const { return param_; }

 private:
  RNNParam param_;
};

}  // namespace troupe
