// Loops and conditions in a Symbol: MXNet's contrib.foreach, contrib.while_loop and contrib.cond.
//
// Each builds one node (_foreach, _while_loop, _cond) that carries its bodies as subgraphs, the node MXNet 1.x
// writes into a symbol file; files MXNet saved with such nodes load too (Symbol::Load). The Executor, CachedOp and
// RunImperative run them: between the node's neighbours, the bodies' passes are pushed one iteration after another,
// a loop or a condition first waits for its condition's value. Gradients flow through every iteration taken (in
// reverse order) and through the branch taken; an input only the steps not taken read gets a zero gradient.
//
// A body is a C++ function called once, at build time, on placeholder variables; what it returns is the subgraph.
// Symbols from outside that a body uses become inputs of the node: a variable is passed in as it is (a weight
// shared by every step); an operator's output from outside is computed again inside the body (its variables
// become inputs).
//
//   // An RNN cell over the first axis of data (T, N, D): h = tanh(x W + h U), every step's h stacked.
//   Symbol w = Symbol::Variable("w"), u = Symbol::Variable("u");
//   Symbol loop = Foreach([&](const std::vector<Symbol>& x, const std::vector<Symbol>& h) {
//     Symbol next = Symbol::Create("tanh", {}, {Symbol::Create("elemwise_add", {},
//         {Symbol::Create("dot", {}, {x[0], w}), Symbol::Create("dot", {}, {h[0], u})})});
//     return LoopStep{{next}, {next}};
//   }, {Symbol::Variable("data")}, {Symbol::Variable("h0")});
//   // loop[0]: (T, N, H), every step's output; loop[1]: the last state.
//
// Thread-safety: as Symbol.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/symbol.h"

namespace troupe {

// What one step of a loop gives: its outputs (stacked over the steps) and the next values of the loop states.
struct LoopStep {
  std::vector<Symbol> outputs;
  std::vector<Symbol> states;
};

// Runs `body` over the first axis of every `data` symbol (all of the same length T; a 1-D sequence gives rows of
// shape (1)), carrying `init_states`. body(rows, states) gets one row of each data symbol and the states, and
// returns the step's outputs and one new state per state (same shapes). The node's outputs: each step output
// stacked into (T, ...), then the last states. Throws troupe::Error for no data, inputs with several outputs, a
// body that ignores one of its data rows or states, or returns another number of states.
Symbol Foreach(const std::function<LoopStep(const std::vector<Symbol>& rows, const std::vector<Symbol>& states)>& body,
               const std::vector<Symbol>& data, const std::vector<Symbol>& init_states, const std::string& name = "");

// While cond(vars) (a symbol of one element: nonzero is true) holds, and at most max_iterations times, runs
// func(vars), which returns the step's outputs and the next values of the loop variables. The node's outputs:
// each step output stacked into (max_iterations, ...) (the rows after the steps taken are zero), then the loop
// variables' last values. Throws troupe::Error for max_iterations < 1, a func that ignores a loop variable or
// returns another number of them.
Symbol WhileLoop(const std::function<Symbol(const std::vector<Symbol>& vars)>& cond,
                 const std::function<LoopStep(const std::vector<Symbol>& vars)>& func,
                 const std::vector<Symbol>& loop_vars, int max_iterations, const std::string& name = "");

// then_branch() when `pred` (one element) is nonzero, else else_branch(); both return the same number of outputs
// with the same shapes and types. Throws troupe::Error when they return different numbers of outputs.
Symbol Cond(const Symbol& pred, const std::function<std::vector<Symbol>()>& then_branch,
            const std::function<std::vector<Symbol>()>& else_branch, const std::string& name = "");

}  // namespace troupe
