// MXNet 1.x symbol JSON: files written by MXNet 1.9.1 (data/*-symbol.json, made by data/make_reference.py)
// load and list and infer what MXNet listed and inferred (data/*-ref.txt); troupe's output reloads to the
// same graph and, for graphs built the way MXNet builds them, is byte-identical to MXNet's file; older
// layouts load; errors name what is wrong.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/models.h"
#include "graph/symbol.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectError;
using Names = std::vector<std::string>;
using Shapes = std::vector<TShape>;

const std::string kDataDir = TROUPE_TEST_DATA_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TShape ParseShape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::stringstream ss(text);
  std::string d;
  while (std::getline(ss, d, ',')) dims.push_back(std::stoll(d));
  return TShape(dims);
}

// What MXNet listed and inferred for one network.
struct Reference {
  Names arguments, outputs, aux_states, internals;
  std::map<std::string, TShape> known;
  Shapes arg_shapes, out_shapes, aux_shapes;
};

Reference ReadReference(const std::string& name) {
  Reference r;
  std::stringstream file(ReadFile(kDataDir + "/" + name + "-ref.txt"));
  std::string line;
  while (std::getline(file, line)) {
    std::stringstream ls(line);
    std::string key, v;
    ls >> key;
    std::vector<std::string> values;
    while (ls >> v) values.push_back(v);
    auto shapes = [&] {
      Shapes s;
      for (const auto& x : values) s.push_back(ParseShape(x));
      return s;
    };
    if (key == "arguments") r.arguments = values;
    if (key == "outputs") r.outputs = values;
    if (key == "aux_states") r.aux_states = values;
    if (key == "internals") r.internals = values;
    if (key == "known") {
      for (const auto& x : values) {
        const auto eq = x.find('=');
        r.known[x.substr(0, eq)] = ParseShape(x.substr(eq + 1));
      }
    }
    if (key == "arg_shapes") r.arg_shapes = shapes();
    if (key == "out_shapes") r.out_shapes = shapes();
    if (key == "aux_shapes") r.aux_shapes = shapes();
  }
  EXPECT_FALSE(r.arguments.empty()) << name;
  return r;
}

void ExpectMatchesReference(const Symbol& s, const Reference& r) {
  EXPECT_EQ(s.ListArguments(), r.arguments);
  EXPECT_EQ(s.ListOutputs(), r.outputs);
  EXPECT_EQ(s.ListAuxiliaryStates(), r.aux_states);
  EXPECT_EQ(s.GetInternals().ListOutputs(), r.internals);
  Shapes args, outs, aux;
  std::string why;
  ASSERT_TRUE(s.InferShape(r.known, &args, &outs, &aux, &why)) << why;
  EXPECT_EQ(args, r.arg_shapes);
  EXPECT_EQ(outs, r.out_shapes);
  EXPECT_EQ(aux, r.aux_shapes);
}

const char* const kReferenceNets[] = {"mlp", "lenet", "bn", "attrs", "group"};

TEST(SymbolJsonTest, MXNetFilesLoadAndInferAsInMXNet) {
  for (const char* name : kReferenceNets) {
    SCOPED_TRACE(name);
    const Symbol s = Symbol::Load(kDataDir + "/" + name + "-symbol.json");
    ExpectMatchesReference(s, ReadReference(name));
  }
}

TEST(SymbolJsonTest, RoundTripKeepsTheGraph) {
  for (const char* name : kReferenceNets) {
    SCOPED_TRACE(name);
    const Symbol s = Symbol::Load(kDataDir + "/" + name + "-symbol.json");
    const std::string once = s.ToJSON();
    const Symbol back = Symbol::FromJSON(once);
    ExpectMatchesReference(back, ReadReference(name));
    EXPECT_EQ(back.ToJSON(), once);
    EXPECT_EQ(back.ListAttrs(), s.ListAttrs());
  }
}

TEST(SymbolJsonTest, OutputIsByteIdenticalToMXNets) {
  // These files hold only parameters that differ from their defaults and operators with the same outputs in
  // both, so troupe writes exactly MXNet's bytes (layout, key order, entry versions, node_row_ptr).
  for (const char* name : {"mlp", "group"}) {
    SCOPED_TRACE(name);
    const std::string mxnet = ReadFile(kDataDir + "/" + std::string(name) + "-symbol.json");
    EXPECT_EQ(Symbol::FromJSON(mxnet).ToJSON(), mxnet);
  }
  // The others differ only where MXNet wrote parameters at their default values (troupe writes the ones that
  // differ from the default) and in Pooling's node_row_ptr (MXNet's MKL-DNN build gives Pooling a hidden
  // workspace output). BatchNorm's auxiliary inputs carry version 1 as in MXNet, and its three outputs
  // count in node_row_ptr.
  const std::string bn = Symbol::Load(kDataDir + "/bn-symbol.json").ToJSON();
  EXPECT_NE(bn.find("\"inputs\": [[2, 0, 0], [3, 0, 0], [4, 0, 0], [5, 0, 1], [6, 0, 1]]"), std::string::npos) << bn;
  EXPECT_NE(bn.find("\"node_row_ptr\": [\n    0, \n    1, \n    2, \n    3, \n    4, \n    5, \n    6, \n    7, \n    10, "),
            std::string::npos)
      << bn;
}

TEST(SymbolJsonTest, HandWrittenMXNetLayoutLoads) {
  // Written by hand in MXNet 1.x's documented layout (an MLP with FullyConnected/Activation/SoftmaxOutput).
  const std::string text = ReadFile(kDataDir + "/mlp_handwritten-symbol.json");
  const Symbol s = Symbol::FromJSON(text);
  EXPECT_EQ(s.ListArguments(), (Names{"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "softmax_label"}));
  EXPECT_EQ(s.ListOutputs(), (Names{"softmax_output"}));
  Shapes args, outs, aux;
  ASSERT_TRUE(s.InferShape({{"data", {16, 784}}}, &args, &outs, &aux));
  EXPECT_EQ(args, (Shapes{{16, 784}, {128, 784}, {128}, {10, 128}, {10}, {16}}));
  EXPECT_EQ(outs, (Shapes{{16, 10}}));
  EXPECT_EQ(s.ToJSON(), text);
}

TEST(SymbolJsonTest, SymbolsBuiltInCppMatchMXNetsGraphs) {
  // models::LeNet is make_reference.py's lenet; reloaded from troupe's JSON it lists and infers as MXNet.
  const Symbol lenet = Symbol::FromJSON(models::LeNet(10, "tanh").ToJSON());
  ExpectMatchesReference(lenet, ReadReference("lenet"));
  // The same for a BatchNorm net built here like make_reference.py's bn_net.
  Symbol x = Symbol::Variable("data");
  auto op = [](const std::string& o, const Kwargs& p, const Symbol& in, const std::string& n) {
    return Symbol::Create(o, p, std::vector<Symbol>{in}, n);
  };
  x = op("Convolution", {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "8"}, {"no_bias", "True"}}, x, "conv1");
  x = op("BatchNorm", {{"fix_gamma", "False"}, {"eps", "2e-05"}, {"momentum", "0.9"}}, x, "bn1");
  x = op("Activation", {{"act_type", "relu"}}, x, "relu1");
  x = op("Pooling", {{"pool_type", "avg"}, {"kernel", "(2, 2)"}, {"stride", "(2, 2)"}}, x, "pool1");
  x = op("BatchNorm", {}, x, "bn2");
  x = op("Flatten", {}, x, "flatten");
  x = op("Dropout", {{"p", "0.25"}}, x, "drop");
  x = op("FullyConnected", {{"num_hidden", "10"}}, x, "fc");
  x = op("SoftmaxOutput", {}, x, "softmax");
  const std::string json = x.ToJSON();
  ExpectMatchesReference(Symbol::FromJSON(json), ReadReference("bn"));

  // One-off check that MXNet loads troupe's files: with TROUPE_SYMBOL_JSON_DUMP=<dir> the files are written
  // there (see data/make_reference.py's --check-troupe).
  if (const char* dir = std::getenv("TROUPE_SYMBOL_JSON_DUMP")) {
    models::MLP().Save(std::string(dir) + "/troupe_mlp-symbol.json");
    models::LeNet().Save(std::string(dir) + "/troupe_lenet-symbol.json");
    x.Save(std::string(dir) + "/troupe_bn-symbol.json");
    Symbol::Load(kDataDir + "/attrs-symbol.json").Save(std::string(dir) + "/troupe_attrs-symbol.json");
    Symbol::Load(kDataDir + "/group-symbol.json").Save(std::string(dir) + "/troupe_group-symbol.json");
  }
}

TEST(SymbolJsonTest, SaveAndLoadFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_symbol_json_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "mlp-symbol.json").string();
  const Symbol mlp = models::MLP(10, {32});
  mlp.Save(path);
  const Symbol back = Symbol::Load(path);
  EXPECT_EQ(back.ListArguments(), mlp.ListArguments());
  EXPECT_EQ(back.ToJSON(), mlp.ToJSON());
  std::filesystem::remove_all(dir);
  ExpectError([&] { Symbol::Load(path); }, {path});
  ExpectError([&] { mlp.Save((dir / "no_such_dir" / "x.json").string()); }, {"no_such_dir"});
}

TEST(SymbolJsonTest, UnknownOperatorsAreListedTogether) {
  const std::string json = R"({
    "nodes": [
      {"op": "null", "name": "data", "inputs": []},
      {"op": "FancyConv", "name": "c1", "inputs": [[0, 0, 0]]},
      {"op": "FancyConv", "name": "c2", "inputs": [[1, 0, 0]]},
      {"op": "Activation", "name": "a", "attrs": {"act_type": "relu"}, "inputs": [[2, 0, 0]]},
      {"op": "_contrib_Magic", "name": "m", "inputs": [[3, 0, 0]]}
    ],
    "arg_nodes": [0], "heads": [[4, 0, 0]]})";
  ExpectError([&] { Symbol::FromJSON(json); }, {"FancyConv", "'c1'", "'c2'", "_contrib_Magic", "'m'"});
}

TEST(SymbolJsonTest, MalformedFilesNameTheProblem) {
  ExpectError([] { Symbol::FromJSON("{\"nodes\": [}"); }, {"byte 11"});
  ExpectError([] { Symbol::FromJSON("{\"nodes\": [], \"arg_nodes\": []"); }, {"byte", "'}'"});
  ExpectError([] { Symbol::FromJSON("{\"nodes\": [], \"arg_nodes\": []} x"); }, {"byte 31"});
  ExpectError([] { Symbol::FromJSON(R"({"nodes": [], "arg_nodes": []})"); }, {"heads"});
  ExpectError([] { Symbol::FromJSON(R"({"nodes": [{"op": "null", "inputs": []}], "arg_nodes": [0], "heads": []})"); },
              {"name"});
  // An input pointing forward (or at a missing node), a bad output index, a non-string attribute.
  ExpectError(
      [] {
        Symbol::FromJSON(R"({"nodes": [{"op": "Activation", "name": "a", "attrs": {"act_type": "relu"},
                              "inputs": [[1, 0, 0]]}, {"op": "null", "name": "x", "inputs": []}],
                              "arg_nodes": [1], "heads": [[0, 0, 0]]})");
      },
      {"'a'", "not an earlier node"});
  ExpectError(
      [] {
        Symbol::FromJSON(R"({"nodes": [{"op": "null", "name": "x", "inputs": []},
                              {"op": "Activation", "name": "a", "attrs": {"act_type": "relu"}, "inputs": [[0, 1, 0]]}],
                              "arg_nodes": [0], "heads": [[1, 0, 0]]})");
      },
      {"'a'", "output 1", "'x'"});
  ExpectError(
      [] {
        Symbol::FromJSON(R"({"nodes": [{"op": "null", "name": "x", "attrs": {"__shape__": [1, 2]}, "inputs": []}],
                              "arg_nodes": [0], "heads": [[0, 0, 0]]})");
      },
      {"'x'", "__shape__", "string"});
  // A bad parameter value names the node and the operator.
  ExpectError(
      [] {
        Symbol::FromJSON(R"({"nodes": [{"op": "null", "name": "x", "inputs": []},
                              {"op": "Activation", "name": "act7", "attrs": {"act_type": "wiggle"}, "inputs": [[0, 0, 0]]}],
                              "arg_nodes": [0], "heads": [[1, 0, 0]]})");
      },
      {"act7", "Activation", "wiggle"});
  // Too few inputs in a 1.x file.
  ExpectError(
      [] {
        Symbol::FromJSON(R"({"nodes": [{"op": "null", "name": "x", "inputs": []},
                              {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "2"}, "inputs": [[0, 0, 0]]}],
                              "arg_nodes": [0], "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}})");
      },
      {"'fc'", "has 1 inputs", "takes 3"});
}

TEST(SymbolJsonTest, OlderLayoutsLoad) {
  // MXNet 0.8's layout: "param" for parameters, "attr" for user attributes (lr_mult, weight_lr_mult),
  // two-element entries, no version, BatchNorm without its auxiliary-state inputs.
  const std::string v08 = R"({
    "nodes": [
      {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1, "attr": {"lr_mult": "0"}},
      {"op": "null", "param": {}, "name": "fc_weight", "inputs": [], "backward_source_id": -1},
      {"op": "null", "param": {}, "name": "fc_bias", "inputs": [], "backward_source_id": -1},
      {"op": "FullyConnected", "param": {"no_bias": "False", "num_hidden": "4"}, "name": "fc",
       "inputs": [[0, 0], [1, 0], [2, 0]], "backward_source_id": -1, "attr": {"weight_lr_mult": "2"}},
      {"op": "null", "param": {}, "name": "bn_gamma", "inputs": [], "backward_source_id": -1},
      {"op": "null", "param": {}, "name": "bn_beta", "inputs": [], "backward_source_id": -1},
      {"op": "BatchNorm", "param": {"eps": "0.001", "fix_gamma": "True", "momentum": "0.9"}, "name": "bn",
       "inputs": [[3, 0], [4, 0], [5, 0]], "backward_source_id": -1}
    ],
    "arg_nodes": [0, 1, 2, 4, 5],
    "heads": [[6, 0]]
  })";
  const Symbol s = Symbol::FromJSON(v08);
  EXPECT_EQ(s.ListArguments(), (Names{"data", "fc_weight", "fc_bias", "bn_gamma", "bn_beta"}));
  EXPECT_EQ(s.ListAuxiliaryStates(), (Names{"bn_moving_mean", "bn_moving_var"}));
  const auto attrs = s.ListAttrs();
  EXPECT_EQ(attrs.at("data"), (SymbolAttrs{{"__lr_mult__", "0"}}));
  EXPECT_EQ(attrs.at("fc_weight"), (SymbolAttrs{{"__lr_mult__", "2"}}));
  Shapes args, outs, aux;
  ASSERT_TRUE(s.InferShape({{"data", {3, 5}}}, &args, &outs, &aux));
  EXPECT_EQ(args, (Shapes{{3, 5}, {4, 5}, {4}, {4}, {4}}));
  EXPECT_EQ(aux, (Shapes{{4}, {4}}));

  // 0.9's "attr" spelling for everything, with a version.
  const std::string v09 = R"({
    "nodes": [
      {"op": "null", "name": "x", "inputs": []},
      {"op": "Activation", "name": "act", "attr": {"act_type": "tanh"}, "inputs": [[0, 0, 0]]}
    ],
    "arg_nodes": [0], "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 904]}})";
  const Symbol t = Symbol::FromJSON(v09);
  EXPECT_EQ(t.ListOutputs(), (Names{"act_output"}));
  EXPECT_NE(t.ToJSON().find("\"attrs\": {\"act_type\": \"tanh\"}"), std::string::npos) << t.ToJSON();
}

TEST(SymbolJsonTest, WriterEscapesAndFormatsLikeDmlc) {
  // Only \r \n \t \\ \" are escaped (MXNet's reader rejects \u); more than 10 inputs go one per line.
  std::vector<Symbol> parts;
  for (const char* name : {"v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10"}) {
    parts.push_back(Symbol::Variable(name));
  }
  Symbol cat = Symbol::Create("Concat", {{"dim", "0"}}, parts, "cat");
  cat.SetAttr("__note__", "a\"b\\c\nd\té");
  const std::string json = cat.ToJSON();
  EXPECT_NE(json.find(R"("__note__": "a\"b\\c\nd\té")"), std::string::npos) << json;
  EXPECT_NE(json.find("\"inputs\": [\n        [0, 0, 0], \n        [1, 0, 0], "), std::string::npos) << json;
  EXPECT_NE(json.find("\"num_args\": \"11\""), std::string::npos) << json;
  const Symbol back = Symbol::FromJSON(json);
  EXPECT_EQ(back.GetAttr("__note__"), "a\"b\\c\nd\té");
  EXPECT_EQ(back.ListArguments().size(), 11u);
}

}  // namespace
}  // namespace troupe
