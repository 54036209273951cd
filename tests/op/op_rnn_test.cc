// RNN on the CPU beyond what data/ops/rnn.json checks against MXNet 1.9.1 (MXNet's CPU kernels have neither
// sequence lengths nor reproducible dropout): gradients against central differences (with kAddTo), sequence
// lengths against running each sequence alone, dropout between layers, shapes and the errors for what is
// not supported.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "op/nn/rnn/rnn.h"
#include "tests/common/op_test_util.h"

namespace troupe::test {
namespace {

struct Net {
  std::string mode;
  std::int64_t T, N, I, H;
  int L = 1;
  bool bidir = false;
  bool seq = false;

  int D() const { return bidir ? 2 : 1; }
  bool lstm() const { return mode == "lstm"; }
  std::int64_t ParamSize() const {
    RnnDims g;
    g.T = T, g.N = N, g.I = I, g.H = H, g.L = L, g.D = D(), g.G = RnnGates(mode);
    return g.ParamSize();
  }
  OpCase Case(DType dt = DType::kFloat64, Kwargs extra = {}) const {
    Kwargs kw = {{"mode", mode}, {"state_size", std::to_string(H)}, {"num_layers", std::to_string(L)},
                 {"bidirectional", bidir ? "True" : "False"}, {"state_outputs", "True"},
                 {"use_sequence_length", seq ? "True" : "False"}};
    kw.insert(kw.end(), extra.begin(), extra.end());
    const TShape state{static_cast<std::int64_t>(L) * D(), N, H};
    std::vector<TShape> shapes{TShape{T, N, I}, TShape{ParamSize()}, state};
    if (lstm()) shapes.push_back(state);
    if (seq) shapes.push_back(TShape{N});
    return OpCase{"RNN", kw, shapes, dt};
  }
  // Random data, parameters and states (and the given lengths).
  std::vector<HostTensor> Inputs(std::mt19937_64* rng, const HostTensor& lengths = {}) const {
    const TShape state{static_cast<std::int64_t>(L) * D(), N, H};
    std::vector<HostTensor> in{RandomTensor(TShape{T, N, I}, rng), RandomTensor(TShape{ParamSize()}, rng, -0.7, 0.7),
                               RandomTensor(state, rng)};
    if (lstm()) in.push_back(RandomTensor(state, rng));
    if (seq) in.push_back(lengths);
    return in;
  }
};

const char* const kModes[] = {"rnn_relu", "rnn_tanh", "lstm", "gru"};

TEST(RnnTest, GradientsMatchCentralDifferences) {
  for (const char* mode : kModes) {
    for (bool bidir : {false, true}) {
      const Net net{mode, 3, 2, 3, 2, 2, bidir};
      std::mt19937_64 rng(7);
      GradCheckOptions o;
      o.inputs = net.Inputs(&rng);
      CheckGradient(net.Case(), o);
    }
  }
}

TEST(RnnTest, SequenceLengthGradientsMatchCentralDifferences) {
  for (const char* mode : kModes) {
    for (bool bidir : {false, true}) {
      const Net net{mode, 4, 3, 2, 2, 2, bidir, true};
      std::mt19937_64 rng(11);
      GradCheckOptions o;
      o.inputs = net.Inputs(&rng, {2, 4, 1});
      const int nargs = net.lstm() ? 4 : 3;
      for (int i = 0; i < nargs; ++i) o.check.push_back(i);  // not the lengths
      CheckGradient(net.Case(), o);
    }
  }
}

// With lengths, each sequence gives what it gives alone, cut to its length: the outputs of the later steps
// are 0 and the final states are those after its last step (the reverse direction starts there).
TEST(RnnTest, SequenceLengthRunsEachSequenceAlone) {
  for (const char* mode : kModes) {
    for (bool bidir : {false, true}) {
      const Net net{mode, 4, 3, 2, 3, 2, bidir, true};
      const HostTensor lengths{3, 4, 1};
      std::mt19937_64 rng(5);
      const std::vector<HostTensor> in = net.Inputs(&rng, lengths);
      const std::vector<HostTensor> all = RunForward(net.Case(), in);
      const std::int64_t DH = net.D() * net.H, LD = net.L * net.D();
      for (std::int64_t n = 0; n < net.N; ++n) {
        const auto len = static_cast<std::int64_t>(lengths[n]);
        Net one = net;
        one.T = len, one.N = 1, one.seq = false;
        std::vector<HostTensor> sub{HostTensor(), in[1]};
        for (std::int64_t t = 0; t < len; ++t) {
          for (std::int64_t i = 0; i < net.I; ++i) sub[0].push_back(in[0][(t * net.N + n) * net.I + i]);
        }
        for (std::size_t s = 2; s < (net.lstm() ? 4u : 3u); ++s) {
          HostTensor st;
          for (std::int64_t ld = 0; ld < LD; ++ld) {
            for (std::int64_t k = 0; k < net.H; ++k) st.push_back(in[s][(ld * net.N + n) * net.H + k]);
          }
          sub.push_back(st);
        }
        const std::vector<HostTensor> alone = RunForward(one.Case(), sub);
        const std::string what = std::string(mode) + (bidir ? " bidirectional" : "") + " sequence " + std::to_string(n);
        HostTensor got, want;
        for (std::int64_t t = 0; t < net.T; ++t) {
          for (std::int64_t k = 0; k < DH; ++k) {
            got.push_back(all[0][(t * net.N + n) * DH + k]);
            want.push_back(t < len ? alone[0][t * DH + k] : 0.0);
          }
        }
        EXPECT_TRUE(Near(got, want, 1e-12, 1e-12, what + " output"));
        for (std::size_t s = 1; s < (net.lstm() ? 3u : 2u); ++s) {
          HostTensor gs;
          for (std::int64_t ld = 0; ld < LD; ++ld) {
            for (std::int64_t k = 0; k < net.H; ++k) gs.push_back(all[s][(ld * net.N + n) * net.H + k]);
          }
          EXPECT_TRUE(Near(gs, alone[s], 1e-12, 1e-12, what + " final state " + std::to_string(s)));
        }
      }
    }
  }
}

TEST(RnnTest, DropoutActsBetweenLayersInTrainingOnly) {
  const Net net{"lstm", 4, 3, 2, 5, 2, true};
  std::mt19937_64 rng(3);
  const std::vector<HostTensor> in = net.Inputs(&rng);
  OpCase plain = net.Case();
  OpCase dropped = net.Case(DType::kFloat64, {{"p", "0.5"}});
  const auto ref = RunForward(plain, in);
  // Outside training p changes nothing.
  dropped.is_train = false;
  const auto inference = RunForward(dropped, in);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Near(inference[i], ref[i], 0, 0, "inference output " + std::to_string(i)));
  // In training the first layer's final states are unchanged (they are taken before the dropout), the second
  // layer's differ; the mask holds 0 and 1 / (1 - p) only, about half of each.
  dropped.is_train = true;
  const auto train = RunForward(dropped, in);
  const std::int64_t NH = net.N * net.H, first = net.D() * NH;
  for (int s = 1; s < 3; ++s) {
    EXPECT_TRUE(Near(HostTensor(train[s].begin(), train[s].begin() + first),
                     HostTensor(ref[s].begin(), ref[s].begin() + first), 0, 0, "first layer's final state"));
  }
  EXPECT_FALSE(Near(train[0], ref[0], 1e-6, 1e-6, "output"));
  const std::int64_t out = net.T * net.N * net.D() * net.H;
  const HostTensor& reserve = train.back();
  int zeros = 0;
  for (std::int64_t j = 0; j < out; ++j) {
    const double m = reserve[out + j];  // the mask follows the first layer's output
    EXPECT_TRUE(m == 0.0 || m == 2.0) << m;
    zeros += m == 0.0;
    EXPECT_EQ(reserve[2 * out + j], reserve[j] * m);  // the second layer's input
  }
  EXPECT_GT(zeros, out / 4);
  EXPECT_LT(zeros, 3 * out / 4);
}

// Two layers with dropout are the first layer, the mask, and the second layer run on the masked output: in
// training, outputs and gradients (through the mask of that call) equal those of the two layers run alone.
TEST(RnnTest, DropoutGradientsGoThroughTheMask) {
  for (const char* mode : {"lstm", "gru"}) {
    const Net net{mode, 3, 2, 3, 2, 2, true};
    std::mt19937_64 rng(9);
    const std::vector<HostTensor> in = net.Inputs(&rng);
    const std::int64_t out = net.T * net.N * net.D() * net.H, NH = net.N * net.H, D = net.D();
    const std::size_t nstates = net.lstm() ? 2 : 1;
    std::vector<HostTensor> heads{RandomTensor(TShape{out}, &rng)};
    for (std::size_t s = 0; s < nstates; ++s) heads.push_back(RandomTensor(TShape{2 * D * NH}, &rng));
    const FwdBwd both = RunForwardBackward(net.Case(DType::kFloat64, {{"p", "0.4"}}), in, heads);
    const HostTensor& reserve = both.out.back();
    const HostTensor mask(reserve.begin() + out, reserve.begin() + 2 * out);
    const HostTensor xnext(reserve.begin() + 2 * out, reserve.begin() + 3 * out);

    RnnDims g;
    g.T = net.T, g.N = net.N, g.I = net.I, g.H = net.H, g.L = 2, g.D = net.bidir ? 2 : 1, g.G = RnnGates(mode);
    // One layer's part of a vector: its slice of the packed parameters, its rows of a state.
    auto params_of = [&](const HostTensor& w, int l) {
      HostTensor p(w.begin() + g.WeightOffset(l, 0), w.begin() + g.WeightOffset(l + 1, 0));
      p.insert(p.end(), w.begin() + g.BiasOffset(l, 0), w.begin() + g.BiasOffset(l + 1, 0));
      return p;
    };
    auto rows_of = [&](const HostTensor& s, int l) {
      return HostTensor(s.begin() + l * D * NH, s.begin() + (l + 1) * D * NH);
    };
    Net top{mode, net.T, net.N, D * net.H, net.H, 1, true};
    Net bottom{mode, net.T, net.N, net.I, net.H, 1, true};
    std::vector<HostTensor> top_in{xnext, params_of(in[1], 1)}, top_heads{heads[0]};
    std::vector<HostTensor> bottom_in{in[0], params_of(in[1], 0)};
    for (std::size_t s = 0; s < nstates; ++s) {
      top_in.push_back(rows_of(in[2 + s], 1));
      bottom_in.push_back(rows_of(in[2 + s], 0));
      top_heads.push_back(rows_of(heads[1 + s], 1));
    }
    const FwdBwd t = RunForwardBackward(top.Case(), top_in, top_heads);
    std::vector<HostTensor> bottom_heads{t.grad[0]};
    for (std::int64_t j = 0; j < out; ++j) bottom_heads[0][j] *= mask[j];
    for (std::size_t s = 0; s < nstates; ++s) bottom_heads.push_back(rows_of(heads[1 + s], 0));
    const FwdBwd b = RunForwardBackward(bottom.Case(), bottom_in, bottom_heads);

    const std::string m = mode;
    EXPECT_TRUE(Near(both.out[0], t.out[0], 1e-12, 1e-12, m + " output"));
    EXPECT_TRUE(Near(both.grad[0], b.grad[0], 1e-12, 1e-12, m + " gradient of the data"));
    EXPECT_TRUE(Near(params_of(both.grad[1], 0), b.grad[1], 1e-12, 1e-12, m + " first layer's parameter gradient"));
    EXPECT_TRUE(Near(params_of(both.grad[1], 1), t.grad[1], 1e-12, 1e-12, m + " second layer's parameter gradient"));
    for (std::size_t s = 0; s < nstates; ++s) {
      EXPECT_TRUE(Near(rows_of(both.grad[2 + s], 0), b.grad[2 + s], 1e-12, 1e-12, m + " first layer's state gradient"));
      EXPECT_TRUE(Near(rows_of(both.grad[2 + s], 1), t.grad[2 + s], 1e-12, 1e-12, m + " second layer's state gradient"));
    }
  }
}

TEST(RnnTest, ShapesAndErrors) {
  const Net net{"gru", 5, 2, 3, 4, 2, true};
  auto out = InferOutShapes(net.Case());
  ASSERT_EQ(out.size(), 3u);  // output, state_output, the hidden reserve
  EXPECT_EQ(out[0], (TShape{5, 2, 8}));
  EXPECT_EQ(out[1], (TShape{4, 2, 4}));
  // The parameter vector's size from the data alone (as MXNet's infer_shape gives it).
  auto prop = MakeProp(net.Case());
  std::vector<TShape> in{TShape{5, 2, 3}, TShape(), TShape()}, o, aux;
  ASSERT_TRUE(prop->InferShape(&in, &o, &aux));
  EXPECT_EQ(in[1], (TShape{3 * 4 * 2 * (3 + 4 + 2) + 3 * 4 * 2 * (8 + 4 + 2)}));
  EXPECT_EQ(in[2], (TShape{4, 2, 4}));
  EXPECT_EQ(prop->ListArguments(), (std::vector<std::string>{"data", "parameters", "state"}));
  EXPECT_EQ(prop->NumVisibleOutputs(), 2);

  ExpectInitError("RNN", {{"mode", "lstm"}, {"state_size", "4"}, {"num_layers", "1"}, {"projection_size", "2"}},
                  {"RNN", "projection_size", "not supported"});
  ExpectInitError("RNN",
                  {{"mode", "lstm"}, {"state_size", "4"}, {"num_layers", "1"}, {"lstm_state_clip_min", "-1"},
                   {"lstm_state_clip_max", "1"}},
                  {"RNN", "lstm_state_clip_min", "not supported"});
  ExpectInitError("RNN", {{"mode", "lstm2"}, {"state_size", "4"}, {"num_layers", "1"}}, {"RNN", "mode"});
  ExpectInitError("RNN", {{"mode", "gru"}, {"num_layers", "1"}}, {"RNN", "state_size"});
  ExpectError([&] { InferOutShapes(OpCase{"RNN", net.Case().kwargs, {TShape{5, 3}, TShape(), TShape()}}); },
              {"RNN", "data", "(5,3)"});
  ExpectError([&] { InferOutShapes(OpCase{"RNN", net.Case().kwargs, {TShape{5, 2, 3}, TShape{7}, TShape()}}); },
              {"RNN", "parameters"});
  ExpectError([&] { MakeProp(net.Case())->CreateOperator(Context::GPU(0)); }, {"RNN", "gpu"});
  // Lengths outside [1, T].
  Net seq{"rnn_tanh", 3, 2, 2, 2, 1, false, true};
  std::mt19937_64 rng(1);
  ExpectError([&] { RunForward(seq.Case(), seq.Inputs(&rng, {3, 4})); }, {"RNN", "sequence_length[1] is 4"});
}

TEST(RnnParamConcatTest, InfersUnknownSizesFromTheOutput) {
  auto prop = MakeProp(OpCase{"_rnn_param_concat", {{"num_args", "4"}, {"dim", "0"}}, {}});
  // Two inputs of unknown size share what the output leaves.
  std::vector<TShape> in{TShape{-1}, TShape{6}, TShape{-1}, TShape{4}}, out{TShape{30}}, aux;
  ASSERT_TRUE(prop->InferShape(&in, &out, &aux));
  EXPECT_EQ(in[0], TShape{10});
  EXPECT_EQ(in[2], TShape{10});
  // Forward: the sum.
  std::vector<TShape> known{TShape{2}, TShape{3}, TShape{1}, TShape{4}}, o;
  ASSERT_TRUE(prop->InferShape(&known, &o, &aux));
  EXPECT_EQ(o[0], TShape{10});
  std::vector<TShape> bad{TShape{-1}, TShape{20}, TShape{-1}, TShape{20}}, bo{TShape{30}};
  ExpectError([&] { prop->InferShape(&bad, &bo, &aux); }, {"_rnn_param_concat"});
  const auto r = RunForward(OpCase{"_rnn_param_concat", {{"num_args", "2"}, {"dim", "0"}}, {TShape{2}, TShape{3}}},
                            {{1, 2}, {3, 4, 5}});
  EXPECT_EQ(r[0], (HostTensor{1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace troupe::test
