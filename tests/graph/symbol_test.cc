// Symbol construction, naming, listing, attributes, and shape/type inference over a table of graphs.
// Expected shapes are worked out by hand from the operators' definitions (MXNet 1.x's rules).
#include "graph/symbol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/internal/graph.h"
#include "graph/models.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectError;
using Shapes = std::vector<TShape>;
using Names = std::vector<std::string>;

Symbol Var(const std::string& name, const SymbolAttrs& attrs = {}) { return Symbol::Variable(name, attrs); }

Symbol Op(const std::string& op, const Kwargs& params, const std::vector<Symbol>& in, const std::string& name) {
  return Symbol::Create(op, params, in, name);
}

Symbol Mlp() {
  Symbol x = Var("data");
  Symbol fc1 = Op("FullyConnected", {{"num_hidden", "128"}}, {x}, "fc1");
  Symbol act = Op("Activation", {{"act_type", "relu"}}, {fc1}, "relu1");
  Symbol fc2 = Op("FullyConnected", {{"num_hidden", "10"}}, {act}, "fc2");
  return Op("SoftmaxOutput", {}, {fc2}, "softmax");
}

Symbol ConvNet() {
  Symbol x = Var("data");
  Symbol c = Op("Convolution", {{"kernel", "(5, 5)"}, {"num_filter", "20"}}, {x}, "conv1");
  Symbol a = Op("Activation", {{"act_type", "tanh"}}, {c}, "tanh1");
  Symbol p = Op("Pooling", {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}}, {a}, "pool1");
  Symbol f = Op("Flatten", {}, {p}, "flatten");
  Symbol fc = Op("FullyConnected", {{"num_hidden", "10"}}, {f}, "fc");
  return Op("SoftmaxOutput", {}, {fc}, "softmax");
}

Symbol BnNet() {
  Symbol x = Var("data");
  Symbol bn = Op("BatchNorm", {{"fix_gamma", "False"}}, {x}, "bn1");
  return Op("Activation", {{"act_type", "relu"}}, {bn}, "relu1");
}

struct ShapeCase {
  std::string label;
  Symbol sym;
  std::map<std::string, TShape> known;
  Names args, outs, aux;
  Shapes arg_shapes, out_shapes, aux_shapes;
};

std::vector<ShapeCase> ShapeTable() {
  std::vector<ShapeCase> t;
  t.push_back({"mlp", Mlp(), {{"data", {128, 784}}},
               {"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "softmax_label"},
               {"softmax_output"}, {},
               {{128, 784}, {128, 784}, {128}, {10, 128}, {10}, {128}}, {{128, 10}}, {}});
  // (28-5+1)=24, pooled by 2 to 12: 20*12*12 = 2880 features.
  t.push_back({"convnet", ConvNet(), {{"data", {2, 1, 28, 28}}},
               {"data", "conv1_weight", "conv1_bias", "fc_weight", "fc_bias", "softmax_label"},
               {"softmax_output"}, {},
               {{2, 1, 28, 28}, {20, 1, 5, 5}, {20}, {10, 2880}, {10}, {2}}, {{2, 10}}, {}});
  t.push_back({"batchnorm", BnNet(), {{"data", {4, 3, 8, 8}}}, {"data", "bn1_gamma", "bn1_beta"}, {"relu1_output"},
               {"bn1_moving_mean", "bn1_moving_var"}, {{4, 3, 8, 8}, {3}, {3}}, {{4, 3, 8, 8}}, {{3}, {3}}});
  {
    Symbol c = Op("Concat", {{"dim", "1"}}, {Var("a"), Var("b")}, "concat");
    t.push_back({"concat", c, {{"a", {2, 3}}, {"b", {2, 5}}}, {"a", "b"}, {"concat_output"}, {},
                 {{2, 3}, {2, 5}}, {{2, 8}}, {}});
  }
  {
    Symbol r = Op("Reshape", {{"shape", "(0, -1)"}}, {Var("x")}, "r");
    t.push_back({"reshape", r, {{"x", {2, 3, 4}}}, {"x"}, {"r_output"}, {}, {{2, 3, 4}}, {{2, 12}}, {}});
  }
  {
    // (a + b) * 2, then Dropout: its mask is a hidden output.
    Symbol s = Op("elemwise_add", {}, {Var("a"), Var("b")}, "add");
    Symbol m = Op("_mul_scalar", {{"scalar", "2"}}, {s}, "twice");
    Symbol d = Op("Dropout", {{"p", "0.5"}}, {m}, "drop");
    t.push_back({"elementwise", d, {{"a", {3, 4}}, {"b", {3, 4}}}, {"a", "b"}, {"drop_output"}, {},
                 {{3, 4}, {3, 4}}, {{3, 4}}, {}});
  }
  {
    Symbol x = Var("data");
    Symbol fc1 = Op("FullyConnected", {{"num_hidden", "7"}}, {x}, "fc1");
    Symbol fc2 = Op("FullyConnected", {{"num_hidden", "5"}, {"no_bias", "True"}}, {fc1}, "fc2");
    t.push_back({"group", Symbol::Group({fc1, fc2}), {{"data", {6, 4}}},
                 {"data", "fc1_weight", "fc1_bias", "fc2_weight"}, {"fc1_output", "fc2_output"}, {},
                 {{6, 4}, {7, 4}, {7}, {5, 7}}, {{6, 7}, {6, 5}}, {}});
  }
  {
    // The shape of data comes from its __shape__ attribute alone.
    Symbol x = Var("data", {{"__shape__", "(16, 20)"}});
    Symbol fc = Op("FullyConnected", {{"num_hidden", "3"}}, {x}, "fc");
    t.push_back({"shape_attr", fc, {}, {"data", "fc_weight", "fc_bias"}, {"fc_output"}, {},
                 {{16, 20}, {3, 20}, {3}}, {{16, 3}}, {}});
  }
  {
    // The batch size is unknown in __shape__ (0, MXNet's legacy convention) and comes from the known shape;
    // the label's shape comes from SoftmaxOutput.
    Symbol x = Var("data", {{"__shape__", "(0, 20)"}});
    Symbol fc = Op("FullyConnected", {{"num_hidden", "3"}}, {x}, "fc");
    Symbol s = Op("SoftmaxOutput", {}, {fc}, "sm");
    t.push_back({"partial_shape_attr", s, {{"data", {8, 20}}}, {"data", "fc_weight", "fc_bias", "sm_label"},
                 {"sm_output"}, {}, {{8, 20}, {3, 20}, {3}, {8}}, {{8, 3}}, {}});
  }
  return t;
}

TEST(SymbolTest, ShapeInferenceTable) {
  for (const ShapeCase& c : ShapeTable()) {
    SCOPED_TRACE(c.label);
    EXPECT_EQ(c.sym.ListArguments(), c.args);
    EXPECT_EQ(c.sym.ListOutputs(), c.outs);
    EXPECT_EQ(c.sym.ListAuxiliaryStates(), c.aux);
    Shapes args, outs, aux;
    std::string why;
    ASSERT_TRUE(c.sym.InferShape(c.known, &args, &outs, &aux, &why)) << why;
    EXPECT_EQ(args, c.arg_shapes);
    EXPECT_EQ(outs, c.out_shapes);
    EXPECT_EQ(aux, c.aux_shapes);
  }
}

TEST(SymbolTest, GetInternalsListsEveryVisibleOutput) {
  Symbol internals = Mlp().GetInternals();
  const Names expected = {"data",        "fc1_weight", "fc1_bias", "fc1_output",    "relu1_output",
                          "fc2_weight",  "fc2_bias",   "fc2_output", "softmax_label", "softmax_output"};
  ASSERT_EQ(internals.ListOutputs(), expected);
  // A feature extractor: the symbol up to relu1.
  Symbol relu = internals[4];
  EXPECT_EQ(relu.name(), "relu1");
  EXPECT_EQ(relu.ListArguments(), (Names{"data", "fc1_weight", "fc1_bias"}));
  Shapes args, outs, aux;
  ASSERT_TRUE(relu.InferShape({{"data", {32, 50}}}, &args, &outs, &aux));
  EXPECT_EQ(outs, (Shapes{{32, 128}}));
  // BatchNorm's hidden mean/var outputs are not internals (as in MXNet).
  EXPECT_EQ(BnNet().GetInternals().ListOutputs(),
            (Names{"data", "bn1_gamma", "bn1_beta", "bn1_moving_mean", "bn1_moving_var", "bn1_output",
                   "relu1_output"}));
  ExpectError([&] { internals[10]; }, {"out of range", "10"});
}

TEST(SymbolTest, InconsistentShapesNameTheNode) {
  Symbol s = Mlp();
  Shapes a, o, x;
  ExpectError([&] { s.InferShape({{"data", {128, 784}}, {"fc1_weight", {128, 100}}}, &a, &o, &x); },
              {"fc1", "FullyConnected", "weight"});
  Symbol c = Op("Concat", {{"dim", "1"}}, {Var("a"), Var("b")}, "cat");
  ExpectError([&] { c.InferShape({{"a", {2, 3}}, {"b", {4, 5}}}, &a, &o, &x); }, {"cat", "Concat"});
  Symbol add = Op("elemwise_add", {}, {Var("a"), Var("b")}, "plus");
  ExpectError([&] { add.InferShape({{"a", {2, 3}}, {"b", {3, 2}}}, &a, &o, &x); }, {"plus", "elemwise_add"});
  // A known shape contradicting a __shape__ attribute names the variable.
  Symbol v = Op("Activation", {{"act_type", "relu"}}, {Var("data", {{"__shape__", "(2, 3)"}})}, "r");
  ExpectError([&] { v.InferShape({{"data", {5, 5}}}, &a, &o, &x); }, {"data", "__shape__"});
}

TEST(SymbolTest, UnderdeterminedShapesReturnFalseNamingTheNode) {
  Symbol s = Mlp();
  Shapes args, outs, aux;
  std::string why;
  EXPECT_FALSE(s.InferShape({}, &args, &outs, &aux, &why));
  EXPECT_NE(why.find("fc1"), std::string::npos) << why;
  EXPECT_NE(why.find("data"), std::string::npos) << why;
  // What could be inferred is filled, the rest left unknown: bias shapes come from num_hidden alone.
  ASSERT_EQ(args.size(), 6u);
  EXPECT_FALSE(args[0].known());
  EXPECT_EQ(args[2], TShape({128}));
  EXPECT_EQ(args[4], TShape({10}));
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_FALSE(outs[0].known());

  // Data known but not the second operand of an addition further down.
  Symbol fc = Op("FullyConnected", {{"num_hidden", "4"}}, {Var("x")}, "fc");
  Symbol bc = Op("broadcast_add", {}, {fc, Var("y")}, "badd");
  why.clear();
  EXPECT_FALSE(bc.InferShape({{"x", {2, 3}}}, &args, &outs, &aux, &why));
  EXPECT_NE(why.find("badd"), std::string::npos) << why;
  EXPECT_NE(why.find("'y'"), std::string::npos) << why;
}

TEST(SymbolTest, ConstructionErrors) {
  Symbol x = Var("x");
  ExpectError([&] { Symbol::Create("NoSuchOperator", {}, std::vector<Symbol>{x}); }, {"NoSuchOperator"});
  ExpectError([&] { Symbol::Create("Activation", {{"act_type", "relu"}}, std::vector<Symbol>{x, x}, "act"); },
              {"act", "Activation", "takes 1 inputs", "got 2"});
  ExpectError(
      [&] { Symbol::Create("FullyConnected", {{"num_hidden", "2"}}, std::map<std::string, Symbol>{{"wieght", x}}, "fc"); },
      {"fc", "wieght", "data", "weight", "bias"});
  ExpectError([&] { Symbol::Create("FullyConnected", {{"num_hiden", "2"}}, std::vector<Symbol>{x}, "fc"); },
              {"fc", "num_hiden"});
  Symbol g = Symbol::Group({x, Var("y")});
  ExpectError([&] { Symbol::Create("Activation", {{"act_type", "relu"}}, std::vector<Symbol>{g}, "act"); },
              {"act", "2 outputs"});
  ExpectError([&] { g.name(); }, {"2 outputs"});
  Shapes a, o, u;
  ExpectError([&] { Mlp().InferShape({{"dta", {1, 2}}}, &a, &o, &u); }, {"dta", "data", "fc1_weight"});
  // One variable as an argument of one node and an auxiliary state of another.
  Symbol v = Var("v");
  Symbol bn = Symbol::Create("BatchNorm", {}, std::map<std::string, Symbol>{{"data", x}, {"moving_mean", v}}, "bn");
  Symbol mix = Symbol::Create("elemwise_add", {}, std::vector<Symbol>{bn, v}, "mix");
  ExpectError([&] { mix.ListArguments(); }, {"'v'", "auxiliary"});
}

TEST(SymbolTest, AutomaticNames) {
  Symbol x = Var("x");
  Symbol a = Symbol::Create("FullyConnected", {{"num_hidden", "2"}}, std::vector<Symbol>{x});
  Symbol b = Symbol::Create("FullyConnected", {{"num_hidden", "2"}}, std::vector<Symbol>{a});
  const std::string prefix = "fullyconnected";
  ASSERT_EQ(a.name().rfind(prefix, 0), 0u) << a.name();
  ASSERT_EQ(b.name().rfind(prefix, 0), 0u) << b.name();
  const int na = std::stoi(a.name().substr(prefix.size()));
  EXPECT_EQ(b.name(), prefix + std::to_string(na + 1));
  EXPECT_EQ(b.ListArguments(), (Names{"x", a.name() + "_weight", a.name() + "_bias", b.name() + "_weight",
                                      b.name() + "_bias"}));
  EXPECT_EQ(b.ListOutputs(), (Names{b.name() + "_output"}));
  // Counters are per operator name (lower-cased).
  Symbol act = Symbol::Create("Activation", {{"act_type", "relu"}}, std::vector<Symbol>{x});
  EXPECT_EQ(act.name().rfind("activation", 0), 0u) << act.name();
  // A variable's output is its own name.
  EXPECT_EQ(x.ListOutputs(), (Names{"x"}));
  EXPECT_EQ(x.ListArguments(), (Names{"x"}));
}

TEST(SymbolTest, NamedAndPositionalInputs) {
  Symbol x = Var("x"), w = Var("shared_w"), mm = Var("mean");
  Symbol fc = Symbol::Create("FullyConnected", {{"num_hidden", "3"}},
                             std::map<std::string, Symbol>{{"weight", w}, {"data", x}}, "fc");
  EXPECT_EQ(fc.ListArguments(), (Names{"x", "shared_w", "fc_bias"}));
  Symbol nb = Symbol::Create("FullyConnected", {{"num_hidden", "3"}, {"no_bias", "True"}}, std::vector<Symbol>{x},
                             "nb");
  EXPECT_EQ(nb.ListArguments(), (Names{"x", "nb_weight"}));
  // Positional inputs continue into the auxiliary states.
  Symbol bn = Symbol::Create("BatchNorm", {}, std::vector<Symbol>{x, Var("g"), Var("b"), mm}, "bn");
  EXPECT_EQ(bn.ListArguments(), (Names{"x", "g", "b"}));
  EXPECT_EQ(bn.ListAuxiliaryStates(), (Names{"mean", "bn_moving_var"}));
  EXPECT_EQ(bn.ListOutputs(), (Names{"bn_output"}));
  // Sharing a weight between two layers lists it once.
  Symbol fc2 = Symbol::Create("FullyConnected", {{"num_hidden", "3"}},
                              std::map<std::string, Symbol>{{"data", fc}, {"weight", w}}, "fc2");
  EXPECT_EQ(fc2.ListArguments(), (Names{"x", "shared_w", "fc_bias", "fc2_bias"}));
  Shapes a, o, u;
  ExpectError([&] { fc2.InferShape({{"x", {2, 5}}}, &a, &o, &u); }, {"fc2", "FullyConnected"});
  ASSERT_TRUE(fc2.InferShape({{"x", {2, 3}}}, &a, &o, &u));
  EXPECT_EQ(a, (Shapes{{2, 3}, {3, 3}, {3}, {3}}));
}

TEST(SymbolTest, TypeInference) {
  Symbol s = Mlp();
  std::vector<int> args, outs, aux;
  const int f64 = static_cast<int>(DType::kFloat64);
  ASSERT_TRUE(s.InferType({{"data", f64}}, &args, &outs, &aux));
  EXPECT_EQ(args, std::vector<int>(6, f64));
  EXPECT_EQ(outs, std::vector<int>{f64});
  std::string why;
  EXPECT_FALSE(s.InferType({}, &args, &outs, &aux, &why));
  EXPECT_NE(why.find("fc1"), std::string::npos) << why;
  // __dtype__ counts as given (MXNet writes the numeric flag).
  Symbol x = Var("data", {{"__dtype__", "1"}});
  Symbol bn = Op("BatchNorm", {}, {x}, "bn");
  ASSERT_TRUE(bn.InferType({}, &args, &outs, &aux));
  EXPECT_EQ(args, std::vector<int>(3, f64));
  EXPECT_EQ(aux, std::vector<int>(2, f64));
  // Two different known types meeting at one node.
  Symbol add = Op("elemwise_add", {}, {Var("a"), Var("b")}, "add");
  ExpectError([&] { add.InferType({{"a", f64}, {"b", static_cast<int>(DType::kFloat32)}}, &args, &outs, &aux); },
              {"add", "elemwise_add"});
}

TEST(SymbolTest, Attributes) {
  Symbol w = Var("w", {{"lr_mult", "0.5"}, {"__init__", "[\"zero\", {}]"}});
  Symbol fc = Symbol::Create("FullyConnected", {{"num_hidden", "3"}, {"__wd_mult__", "0"}},
                             std::map<std::string, Symbol>{{"data", Var("x")}, {"weight", w}}, "fc", {{"ctx", "a"}});
  // Hidden keys among the parameters are node attributes, not parameters.
  EXPECT_EQ(fc.GetAttr("__wd_mult__"), "0");
  EXPECT_EQ(fc.GetAttr("ctx"), "a");
  EXPECT_FALSE(fc.GetAttr("num_hidden").has_value());
  EXPECT_EQ(w.GetAttr("lr_mult"), "0.5");
  fc.SetAttr("__lr_mult__", "2");
  EXPECT_EQ(fc.GetAttr("__lr_mult__"), "2");
  const auto all = fc.ListAttrs();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all.at("w"), (SymbolAttrs{{"lr_mult", "0.5"}, {"__init__", "[\"zero\", {}]"}}));
  EXPECT_EQ(all.at("fc"), (SymbolAttrs{{"__wd_mult__", "0"}, {"ctx", "a"}, {"__lr_mult__", "2"}}));
  // Symbols share nodes: the attribute is visible through the group too.
  Symbol g = Symbol::Group({fc, w});
  EXPECT_EQ(g[0].GetAttr("__lr_mult__"), "2");
  ExpectError([&] { g.SetAttr("a", "b"); }, {"2 outputs"});
  EXPECT_TRUE(Symbol().empty());
  EXPECT_EQ(g.NumOutputs(), 2u);
}

TEST(SymbolTest, IndexGraphOrderAndEntries) {
  // Depth-first post-order from the heads, inputs in order; every output of every node numbered.
  Symbol bn = BnNet();
  Symbol fc = Op("FullyConnected", {{"num_hidden", "2"}}, {bn}, "fc");
  const graph::IndexedGraph g = graph::IndexGraph(Symbol::Group({fc, bn}).outputs());
  Names order;
  for (const auto* n : g.nodes) order.push_back(n->name);
  EXPECT_EQ(order, (Names{"data", "bn1_gamma", "bn1_beta", "bn1_moving_mean", "bn1_moving_var", "bn1", "relu1",
                          "fc_weight", "fc_bias", "fc"}));
  EXPECT_EQ(g.arg_nodes, (std::vector<std::uint32_t>{0, 1, 2, 7, 8}));
  EXPECT_EQ(g.aux_nodes, (std::vector<std::uint32_t>{3, 4}));
  // BatchNorm has three outputs (two hidden): entries 5, 6, 7; relu1's output is entry 8.
  EXPECT_EQ(g.entry_offset, (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 8, 9, 10, 11}));
  EXPECT_EQ(g.num_entries, 12u);
  ASSERT_EQ(g.heads.size(), 2u);
  EXPECT_EQ(g.entry_id(g.heads[0]), 11u);
  EXPECT_EQ(g.entry_id(g.heads[1]), 8u);
  ASSERT_EQ(g.inputs[5].size(), 5u);
  EXPECT_EQ(g.inputs[5][3].node, 3u);
  EXPECT_EQ(g.inputs[9][0].node, 6u);
  EXPECT_EQ(g.nodes[5]->num_outputs(), 3u);
  EXPECT_EQ(g.nodes[5]->num_visible_outputs(), 1u);
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

// Trainable parameters of a model for an input shape: every argument but the data and the label.
std::int64_t CountParameters(const Symbol& net, const TShape& data) {
  std::vector<TShape> args, outs, aux;
  EXPECT_TRUE(net.InferShape({{"data", data}}, &args, &outs, &aux));
  const std::vector<std::string> names = net.ListArguments();
  std::int64_t total = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] != "data" && names[i] != "softmax_label") total += args[i].Size();
  }
  return total;
}

// The ImageNet variants have the parameter counts of every ResNet v1 implementation (torchvision's and
// Gluon's resnet18_v1: 11,689,512; resnet34_v1: 21,797,672). The CIFAR variant (Gluon's thumbnail) differs
// only in the stem (one 3x3 convolution, no BatchNorm) and, here, 10 classes:
// 11,689,512 - 7*7*3*64 - 2*64 + 3*3*3*64 - (512*1000 + 1000) + (512*10 + 10) = 11,173,834.
// The bottleneck depths have Gluon's counts, which are not torchvision's: Gluon's BottleneckV1 gives its two
// 1x1 body convolutions a bias (5 x the block's inner width per block; 18,880 more for resnet50_v1 than
// torchvision's 25,557,032). Gluon's counts, from MXNet 1.9.1: the elements of the parameters whose grad_req
// is not 'null' of mx.gluon.model_zoo.vision.resnet<depth>_v1(classes=1000) after a forward on
// (1, 3, 224, 224): 25,575,912 (50), 44,589,800 (101), 60,252,648 (152).
// (mxnet_model_cases_test's GluonResNetV1 also checks every name and shape of depth 50, and the forward
// outputs of every depth, against MXNet's.)
TEST(ModelsTest, ResNetParameterCountsAndOutputShapes) {
  EXPECT_EQ(CountParameters(models::ResNet(18, 1000, false), TShape{1, 3, 224, 224}), 11689512);
  EXPECT_EQ(CountParameters(models::ResNet(34, 1000, false), TShape{1, 3, 224, 224}), 21797672);
  EXPECT_EQ(CountParameters(models::ResNet(50, 1000, false), TShape{1, 3, 224, 224}), 25575912);
  EXPECT_EQ(CountParameters(models::ResNet(101, 1000, false), TShape{1, 3, 224, 224}), 44589800);
  EXPECT_EQ(CountParameters(models::ResNet(152, 1000, false), TShape{1, 3, 224, 224}), 60252648);
  EXPECT_EQ(CountParameters(models::ResNet(18, 10, true), TShape{1, 3, 32, 32}), 11173834);
  std::vector<TShape> args, outs, aux;
  ASSERT_TRUE(models::ResNet(18, 10, true).InferShape({{"data", TShape{4, 1, 28, 28}}}, &args, &outs, &aux));
  EXPECT_EQ(outs.at(0), (TShape{4, 10}));
  // BatchNorm's moving mean and variance: two per BatchNorm, 2 x (1 + 16 + 3) for the ImageNet ResNet-18.
  ASSERT_TRUE(models::ResNet(18, 1000, false).InferShape({{"data", TShape{1, 3, 224, 224}}}, &args, &outs, &aux));
  EXPECT_EQ(aux.size(), 40u);
  // ResNet-50: 53 BatchNorms (1 + 16 blocks x 3 + 4 shortcuts), a 2048-wide last stage.
  ASSERT_TRUE(models::ResNet(50, 1000, false).InferShape({{"data", TShape{2, 3, 224, 224}}}, &args, &outs, &aux));
  EXPECT_EQ(aux.size(), 106u);
  EXPECT_EQ(outs.at(0), (TShape{2, 1000}));
  const Symbol internals = models::ResNet(50, 1000, false).GetInternals();
  const std::vector<std::string> names = internals.ListOutputs();
  const auto pool = std::find(names.begin(), names.end(), "pool1_output");
  ASSERT_NE(pool, names.end());
  ASSERT_TRUE(internals[static_cast<std::size_t>(pool - names.begin())].InferShape(
      {{"data", TShape{2, 3, 224, 224}}}, &args, &outs, &aux));
  EXPECT_EQ(outs.at(0), (TShape{2, 2048, 1, 1}));
  EXPECT_THROW(models::ResNet(26), Error);
  EXPECT_THROW(models::ResNet(200), Error);
}

}  // namespace
}  // namespace troupe
