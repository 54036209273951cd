// Blocks: models written as C++ classes (Gluon's Block / HybridBlock, LibTorch's torch::nn::Module).
//
// A Block owns parameters (nn/parameter.h) and child blocks and computes outputs from inputs imperatively:
// Forward is any NDArray code (Invoke, NDArray arithmetic, child blocks), recorded by autograd
// (op/autograd.h) inside a RecordScope like any other imperative call.
//
// A HybridBlock writes its forward pass once, on Symbols (HybridForward: its inputs and its parameters'
// Var() composed with Symbol::Create and child HybridBlocks), and runs it two ways:
//   - imperatively (the default): the symbol operator by operator through Invoke (graph/cached_op.h
//     RunImperative), each operator an imperative call autograd records;
//   - hybridized (Hybridize()): the whole symbol as one CachedOp (graph/cached_op.h): one executor with its
//     memory plan and bulk execution, one autograd node.
// Both give the same outputs and gradients. The symbol is built once per number of inputs; its inputs are
// variables "data" (one input) or "data0", "data1", ... ToSymbol and Export give it to other programs:
// Export writes "<path>-symbol.json" and "<path>-<epoch, 4 digits>.params" ("arg:<name>" / "aux:<name>"),
// which MXNet 1.9.1's SymbolBlock.imports loads and SymbolBlock::Imports here reads back, with GluonCV's and
// GluonNLP's exports.
//
// Parameters with unknown dimensions (a layer's input size left 0) are completed by the first forward pass:
// the symbol's shape inference from the inputs' shapes (Gluon's deferred initialisation).
//
// Names: a block's parameters are "<prefix><short name>" (dense0_weight). The prefix is given, or made from
// the block's kind and a number counted per kind in this process (dense0_, dense1_, conv0_ ...), as Gluon
// names blocks created outside any name scope. SaveParameters / LoadParameters use Gluon's structural names
// instead (the path of child names and the short name, "features.0.weight"), which do not depend on the
// prefixes; LoadParameters also reads files of full names (ParameterDict::Save, Export's .params).
//
//   class Net : public nn::HybridBlock {
//    public:
//     Net() : HybridBlock("", "net") {
//       fc1_ = RegisterChild("fc1", std::make_shared<nn::Dense>(64, "relu"));
//       fc2_ = RegisterChild("fc2", std::make_shared<nn::Dense>(10));
//     }
//     std::vector<Symbol> HybridForward(const std::vector<Symbol>& x) override { return {(*fc2_)((*fc1_)(x[0]))}; }
//    private:
//     std::shared_ptr<nn::Dense> fc1_, fc2_;
//   };
//   auto net = std::make_shared<Net>();
//   net->Initialize("xavier");
//   net->Hybridize();
//   NDArray y = (*net)(x);
//
// Thread-safety: a block is built and run by one thread at a time.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/cached_op.h"
#include "graph/symbol.h"
#include "nn/parameter.h"
#include "tensor/ndarray.h"

namespace troupe::nn {

class Block {
 public:
  // prefix: the start of this block's parameter names; empty: "<hint><n>_" (see the file comment), or no
  // prefix when hint is empty too.
  Block(const std::string& prefix, const std::string& hint);
  virtual ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  const std::string& prefix() const { return prefix_; }

  virtual std::vector<NDArray> Forward(const std::vector<NDArray>& inputs) = 0;
  NDArray operator()(const NDArray& x) { return Forward({x}).at(0); }
  std::vector<NDArray> operator()(const std::vector<NDArray>& inputs) { return Forward(inputs); }

  // The parameters of this block and of its children, depth first (own ones first), those whose full names
  // match `select` (a regular expression) when given.
  ParameterDict CollectParams(const std::string& select = {}) const;
  // CollectParams().Initialize(...) (see Parameter::Initialize; "uniform" is Gluon's default).
  void Initialize(const std::string& init = "uniform", const std::vector<Context>& ctx = {Context::CPU()},
                  bool force_reinit = false, const Kwargs& init_params = {});
  // Gluon's save_parameters / load_parameters (structural names; see the file comment). Load: the
  // parameters not initialised yet are initialised on ctx. Missing or extra names are errors naming them
  // unless allow_missing / ignore_extra.
  void SaveParameters(const std::string& path) const;
  void LoadParameters(const std::string& path, const std::vector<Context>& ctx = {Context::CPU()},
                      bool allow_missing = false, bool ignore_extra = false);
  // Hybridizes (or not) every HybridBlock in this tree; the other blocks stay imperative.
  virtual void Hybridize(bool active = true, const CachedOpOptions& options = {});

  const std::vector<std::pair<std::string, std::shared_ptr<Block>>>& children() const { return children_; }
  // This block's own parameters by short name.
  const std::vector<std::pair<std::string, std::shared_ptr<Parameter>>>& params() const { return params_; }

 protected:
  // Adds a child under `name` (its structural name; unique among the children: troupe::Error otherwise).
  template <class B>
  std::shared_ptr<B> RegisterChild(const std::string& name, std::shared_ptr<B> block) {
    AddChild(name, block);
    return block;
  }
  void AddChild(const std::string& name, std::shared_ptr<Block> block);
  // A parameter named prefix() + short_name (see Parameter's constructor).
  std::shared_ptr<Parameter> AddParameter(const std::string& short_name, TShape shape, std::string init = {},
                                          OpReqType grad_req = kWriteTo, DType dtype = DType::kFloat32);
  // Another block's parameter as one of this block's (shared: both train the same array).
  void AddSharedParameter(const std::string& short_name, std::shared_ptr<Parameter> p);

 private:
  void Structural(const std::string& path, std::vector<std::pair<std::string, std::shared_ptr<Parameter>>>* out) const;

  std::string prefix_;
  std::vector<std::pair<std::string, std::shared_ptr<Block>>> children_;
  std::vector<std::pair<std::string, std::shared_ptr<Parameter>>> params_;
};

class HybridBlock : public Block {
 public:
  using Block::Block;
  ~HybridBlock() override;

  // The forward pass on symbols: the inputs, and parameters as Var(). Called when the block's symbol is
  // built, and by parents composing it.
  virtual std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) = 0;
  using Block::operator();
  Symbol operator()(const Symbol& x) { return HybridForward({x}).at(0); }

  // Runs the symbol on the inputs (imperatively, or as a CachedOp when hybridized), after completing deferred
  // parameter shapes. Throws troupe::Error for an uninitialised parameter, shapes the symbol rejects, or a
  // variable of the symbol that is neither an input nor a parameter of this block.
  std::vector<NDArray> Forward(const std::vector<NDArray>& inputs) override;
  void Hybridize(bool active = true, const CachedOpOptions& options = {}) override;
  bool hybridized() const { return hybridized_; }

  // The forward pass as one symbol over num_inputs input variables (see the file comment).
  Symbol ToSymbol(std::size_t num_inputs = 1);
  // Gluon's export (see the file comment). Throws troupe::Error for uninitialised parameters or a file that
  // cannot be written.
  void Export(const std::string& path, int epoch = 0, std::size_t num_inputs = 1);

 protected:
  // The names of the input variables for n inputs.
  virtual std::vector<std::string> InputNames(std::size_t n) const;

 private:
  struct Graph;
  Graph& GraphFor(std::size_t num_inputs);

  bool hybridized_ = false;
  CachedOpOptions options_;
  std::map<std::size_t, std::shared_ptr<Graph>> graphs_;  // shared: the type stays incomplete here
};

// Children run one after the other, each on the previous one's outputs (Gluon's Sequential).
class Sequential : public Block {
 public:
  explicit Sequential(const std::string& prefix = {}) : Block(prefix, "sequential") {}
  // Adds a block as child "0", "1", ...; returns it.
  template <class B>
  std::shared_ptr<B> Add(std::shared_ptr<B> block) {
    return RegisterChild(std::to_string(children().size()), std::move(block));
  }
  std::vector<NDArray> Forward(const std::vector<NDArray>& inputs) override;
};

// The same over hybrid blocks: hybridizes into one CachedOp (Gluon's HybridSequential).
class HybridSequential : public HybridBlock {
 public:
  explicit HybridSequential(const std::string& prefix = {}) : HybridBlock(prefix, "hybridsequential") {}
  template <class B>
  std::shared_ptr<B> Add(std::shared_ptr<B> block) {
    static_assert(std::is_base_of_v<HybridBlock, B>, "HybridSequential holds HybridBlocks");
    return RegisterChild(std::to_string(children().size()), std::move(block));
  }
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;
};

// A block made of a symbol (Gluon's SymbolBlock): its arguments other than the inputs, and its auxiliary
// states, are parameters of the same names (no prefix). Imports reads an exported model.
class SymbolBlock : public HybridBlock {
 public:
  // outputs: the network; input_names: its data inputs (variables of the symbol; troupe::Error otherwise).
  // params: parameters to share (by name), the others are new.
  SymbolBlock(Symbol outputs, std::vector<std::string> input_names, const ParameterDict& params = {});
  // Gluon's SymbolBlock.imports: the symbol file, its inputs, and a .params file ("arg:"/"aux:" names, or
  // none: then initialise the block) loaded on ctx. Throws troupe::Error naming the file or what is missing.
  static std::shared_ptr<SymbolBlock> Imports(const std::string& symbol_file, const std::vector<std::string>& input_names,
                                              const std::string& param_file = {},
                                              const std::vector<Context>& ctx = {Context::CPU()});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 protected:
  std::vector<std::string> InputNames(std::size_t n) const override;

 private:
  Symbol symbol_;
  std::vector<std::string> input_names_;
};

}  // namespace troupe::nn
