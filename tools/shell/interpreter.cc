// The `troupe shell` language (see interpreter.h).
#include "tools/shell/interpreter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "actors/device.h"
#include "base/error.h"
#include "engine/engine.h"
#include "engine/profiler.h"
#include "io/io.h"
#include "op/imperative.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe::shell {

// ---------------------------------------------------------------------------------------------------------
// Tokens and the syntax tree.
namespace {

enum class Tok { kNumber, kIdent, kString, kPunct, kEnd };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;
  std::size_t begin = 0, end = 0;  // byte offsets in the statement
};

// A parse error: `pos` is the byte offset it points at.
struct ParseError {
  std::size_t pos;
  std::string message;
};

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<Token> Lex(const std::string& s) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '#') break;
    Token t;
    t.begin = i;
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      t.kind = Tok::kNumber;
      while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
      if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        std::size_t j = i + 1;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        if (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
          i = j;
          while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
        }
      }
    } else if (IsIdentStart(c)) {
      t.kind = Tok::kIdent;
      while (i < s.size() && IsIdentChar(s[i])) ++i;
    } else if (c == '\'' || c == '"') {
      t.kind = Tok::kString;
      const std::size_t close = s.find(c, i + 1);
      if (close == std::string::npos) throw ParseError{i, "unterminated string"};
      i = close + 1;
    } else if (std::string("+-*/()[],=:").find(c) != std::string::npos) {
      t.kind = Tok::kPunct;
      ++i;
    } else {
      throw ParseError{i, std::string("unexpected character '") + c + "'"};
    }
    t.end = i;
    t.text = s.substr(t.begin, t.end - t.begin);
    out.push_back(std::move(t));
  }
  Token end;
  end.begin = end.end = s.size();
  out.push_back(end);
  return out;
}

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallArg {
  std::string key;  // empty for a positional argument
  ExprPtr expr;     // null when the value is not an expression (kernel=(3,3)): then only `raw` is used
  std::string raw;  // the value's source text
  std::size_t pos = 0;
};

struct Expr {
  enum Kind { kNumber, kVar, kBinary, kNeg, kCall, kIndex } kind;
  std::size_t pos = 0;
  double number = 0;
  std::string name;  // variable or function; the operator for kBinary
  ExprPtr lhs, rhs;  // kBinary; kNeg and kIndex use lhs
  std::vector<CallArg> args;
  ExprPtr begin, end;  // kIndex: begin alone (a[i]) or a range when is_range
  bool is_range = false;
};

class Parser {
 public:
  Parser(const std::string& src, std::vector<Token> tokens) : src_(src), t_(std::move(tokens)) {}

  ExprPtr ParseWhole() {
    ExprPtr e = ParseExpr();
    if (Peek().kind != Tok::kEnd) Fail("expected an operator or the end of the statement");
    return e;
  }

 private:
  const Token& Peek() const { return t_[i_]; }
  bool IsPunct(const char* p) const { return Peek().kind == Tok::kPunct && Peek().text == p; }
  [[noreturn]] void Fail(const std::string& what) const {
    const Token& t = Peek();
    throw ParseError{t.begin, what + (t.kind == Tok::kEnd ? ", found the end" : ", found '" + t.text + "'")};
  }
  void Expect(const char* p) {
    if (!IsPunct(p)) Fail(std::string("expected '") + p + "'");
    ++i_;
  }

  ExprPtr ParseExpr() {
    ExprPtr e = ParseTerm();
    while (IsPunct("+") || IsPunct("-")) e = Binary(std::move(e), &Parser::ParseTerm);
    return e;
  }
  ExprPtr ParseTerm() {
    ExprPtr e = ParseUnary();
    while (IsPunct("*") || IsPunct("/")) e = Binary(std::move(e), &Parser::ParseUnary);
    return e;
  }
  ExprPtr Binary(ExprPtr lhs, ExprPtr (Parser::*next)()) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::kBinary;
    e->pos = Peek().begin;
    e->name = t_[i_++].text;
    e->lhs = std::move(lhs);
    e->rhs = (this->*next)();
    return e;
  }
  ExprPtr ParseUnary() {
    if (IsPunct("-")) {
      auto e = std::make_unique<Expr>();
      e->kind = Expr::kNeg;
      e->pos = t_[i_++].begin;
      e->lhs = ParseUnary();
      return e;
    }
    if (IsPunct("+")) {
      ++i_;
      return ParseUnary();
    }
    return ParsePostfix();
  }
  ExprPtr ParsePostfix() {
    ExprPtr e = ParsePrimary();
    while (IsPunct("[")) {
      auto idx = std::make_unique<Expr>();
      idx->kind = Expr::kIndex;
      idx->pos = t_[i_++].begin;
      idx->lhs = std::move(e);
      if (!IsPunct(":")) idx->begin = ParseExpr();
      if (IsPunct(":")) {
        ++i_;
        idx->is_range = true;
        if (!IsPunct("]")) idx->end = ParseExpr();
      }
      Expect("]");
      e = std::move(idx);
    }
    return e;
  }
  ExprPtr ParsePrimary() {
    const Token& t = Peek();
    auto e = std::make_unique<Expr>();
    e->pos = t.begin;
    if (t.kind == Tok::kNumber) {
      e->kind = Expr::kNumber;
      try {
        std::size_t used = 0;
        e->number = std::stod(t.text, &used);
        if (used != t.text.size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        throw ParseError{t.begin, "bad number '" + t.text + "'"};
      }
      ++i_;
      return e;
    }
    if (t.kind == Tok::kIdent) {
      e->name = t.text;
      ++i_;
      if (IsPunct("(")) {
        ++i_;
        e->kind = Expr::kCall;
        ParseArgs(e.get());
      } else {
        e->kind = Expr::kVar;
      }
      return e;
    }
    if (IsPunct("(")) {
      ++i_;
      e = ParseExpr();
      Expect(")");
      return e;
    }
    Fail("expected a number, a name or '('");
  }
  // Arguments up to and including ')'. A keyword's value that is not an expression (a tuple, a quoted
  // string) is kept as its source text.
  void ParseArgs(Expr* call) {
    if (IsPunct(")")) {
      ++i_;
      return;
    }
    while (true) {
      CallArg arg;
      arg.pos = Peek().begin;
      if (Peek().kind == Tok::kIdent && t_[i_ + 1].kind == Tok::kPunct && t_[i_ + 1].text == "=") {
        arg.key = Peek().text;
        i_ += 2;
        arg.pos = Peek().begin;
      }
      const std::size_t start = i_;
      bool parsed = false;
      if (Peek().kind != Tok::kString) {
        try {
          arg.expr = ParseExpr();
          parsed = IsPunct(",") || IsPunct(")");
        } catch (const ParseError&) {
          if (arg.key.empty()) throw;
        }
      }
      if (!parsed) {
        if (arg.key.empty() && t_[start].kind != Tok::kString) Fail("expected ',' or ')'");
        arg.expr.reset();
        i_ = start;
        SkipBalanced();
      }
      const std::size_t raw_end = t_[i_ - 1].end;
      arg.raw = src_.substr(t_[start].begin, raw_end - t_[start].begin);
      if (t_[start].kind == Tok::kString) arg.raw = t_[start].text.substr(1, t_[start].text.size() - 2);
      call->args.push_back(std::move(arg));
      if (IsPunct(")")) {
        ++i_;
        return;
      }
      Expect(",");
    }
  }
  // Skips tokens up to the next ',' or ')' outside brackets.
  void SkipBalanced() {
    int depth = 0;
    const std::size_t start = i_;
    while (Peek().kind != Tok::kEnd) {
      if (depth == 0 && (IsPunct(",") || IsPunct(")"))) break;
      if (IsPunct("(") || IsPunct("[")) ++depth;
      if (IsPunct(")") || IsPunct("]")) --depth;
      ++i_;
    }
    if (Peek().kind == Tok::kEnd) Fail("expected ')'");
    if (i_ == start) Fail("expected a value");
  }

  const std::string& src_;
  std::vector<Token> t_;
  std::size_t i_ = 0;
};

std::string Join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string ShapeText(const TShape& s) {
  if (s.ndim() == 0) return "()";
  std::string out;
  for (int i = 0; i < s.ndim(); ++i) {
    if (i > 0) out += 'x';
    out += std::to_string(s[i]);
  }
  return out;
}

std::string Trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) {
    if (w.size() >= 2 && (w.front() == '\'' || w.front() == '"') && w.back() == w.front()) {
      w = w.substr(1, w.size() - 2);
    }
    out.push_back(w);
  }
  return out;
}

// "; did you mean: a, b" when there are close names.
std::string Suggest(const std::string& name, const std::vector<std::string>& candidates) {
  const std::string similar = SimilarNames(name, candidates);
  return similar.empty() ? "" : "; did you mean: " + similar + "?";
}

// Built-in functions: name, usage, summary.
struct Builtin {
  const char* name;
  const char* usage;
  const char* summary;
};
constexpr Builtin kBuiltins[] = {
    {"ones", "ones(d0, d1, ...)", "an array of ones with that shape"},
    {"zeros", "zeros(d0, d1, ...)", "an array of zeros"},
    {"full", "full(d0, d1, ..., value)", "an array filled with value"},
    {"arange", "arange(stop) | arange(start, stop[, step])", "evenly spaced values (1-D)"},
    {"uniform", "uniform(d0, d1, ...)", "uniform samples in [0, 1)"},
    {"normal", "normal(d0, d1, ...)", "standard normal samples"},
    {"dot", "dot(a, b)", "matrix product of 2-D arrays"},
    {"reshape", "reshape(a, d0, d1, ...)", "a view with another shape (0 copies a dimension, -1 infers one)"},
    {"astype", "astype(a, dtype)", "a copy in another type: float32, float64, float16, bfloat16, uint8, int8, int32, int64, bool"},
    {"mnist", "mnist(batch_size=100, train=1, shuffle=0, flat=0, seed=0)",
     "an iterator over Fashion-MNIST (Debian's dataset-fashion-mnist); train=0: the test set"},
    {"next", "next(it)", "the next batch of an iterator: its data (an error at the end of the epoch)"},
    {"label", "label(it)", "the label of the batch next(it) gave last"},
    {"reset", "reset(it)", "rewinds an iterator to the first batch of a new epoch"},
};


const Builtin* FindBuiltin(const std::string& name) {
  for (const auto& b : kBuiltins) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

// A number as the shell prints it: integers without a decimal point, others in the shortest text that reads
// back to the same double.
std::string NumberText(double v) {
  char buf[64];
  if (v == std::floor(v) && std::abs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::vector<std::string> BuiltinNames() {
  std::vector<std::string> out;
  for (const auto& b : kBuiltins) out.push_back(b.name);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Evaluation.

// A data iterator held by a variable: it = mnist(...) or any registered iterator (MNISTIter, CSVIter,
// ImageRecordIter, ...); next(it) advances it.
struct Interpreter::Iterator {
  std::string type;  // the registered name
  std::unique_ptr<DataIter> it;
  bool has_batch = false;  // next() gave a batch this epoch
  std::int64_t batches = 0;

  std::string Describe() const {
    std::string shapes;
    for (const TShape& d : it->DataShapes()) shapes += (shapes.empty() ? "data " : ", data ") + ShapeText(d);
    for (const TShape& l : it->LabelShapes()) shapes += ", label " + ShapeText(l);
    return "<DataIter " + type + ": " + shapes + "; " + std::to_string(batches) + " batch" +
           (batches == 1 ? "" : "es") + " given this epoch>";
  }
};

struct Interpreter::Value {
  bool is_array = false;
  double number = 0;
  NDArray array;
  std::shared_ptr<Iterator> iter;  // set: the value is a data iterator
};

namespace {

using Value = Interpreter::Value;

Value Num(double v) {
  Value out;
  out.number = v;
  return out;
}
Value Arr(NDArray a) {
  Value out;
  out.is_array = true;
  out.array = std::move(a);
  return out;
}

// An evaluation error: `pos` is the byte offset of the expression it is about.
struct EvalError {
  std::size_t pos;
  std::string message;
};

class Evaluator {
 public:
  using Iterators = std::map<std::string, std::shared_ptr<Interpreter::Iterator>>;
  Evaluator(const std::map<std::string, NDArray>& vars, const Iterators& iters) : vars_(vars), iters_(iters) {}

  // Errors of the array layer (troupe::Error) become EvalErrors at the innermost expression they come from.
  // A data iterator is a value only where `iterator_ok` (a statement's whole expression, next(it)'s argument).
  Value Eval(const Expr& e, bool iterator_ok = false) {
    Value v;
    try {
      v = EvalUnchecked(e);
    } catch (const Error& err) {
      throw EvalError{e.pos, err.what()};
    }
    if (v.iter && !iterator_ok) {
      throw EvalError{e.pos, "this is a data iterator, not an array: next(it) gives its next batch's data"};
    }
    return v;
  }

 private:
  Value EvalUnchecked(const Expr& e) {
    switch (e.kind) {
      case Expr::kNumber:
        return Num(e.number);
      case Expr::kVar: {
        const auto it = vars_.find(e.name);
        if (it != vars_.end()) return Arr(it->second);
        if (const auto iter = iters_.find(e.name); iter != iters_.end()) {
          Value v;
          v.iter = iter->second;
          return v;
        }
        if (e.name == "nan") return Num(std::numeric_limits<double>::quiet_NaN());
        if (e.name == "inf") return Num(std::numeric_limits<double>::infinity());
        std::vector<std::string> names;
        for (const auto& [n, _] : vars_) names.push_back(n);
        for (const auto& [n, _] : iters_) names.push_back(n);
        throw EvalError{e.pos, "undefined variable '" + e.name + "'" + Suggest(e.name, names)};
      }
      case Expr::kNeg: {
        Value v = Eval(*e.lhs);
        return v.is_array ? Arr(v.array * -1.0) : Num(-v.number);
      }
      case Expr::kBinary:
        return Binary(e);
      case Expr::kIndex:
        return Index(e);
      case Expr::kCall:
        return Call(e);
    }
    throw EvalError{e.pos, "bad expression"};
  }

  // l op r for numbers, arrays, or an array and a number (NDArray's operators).
  template <typename L, typename R>
  static auto Apply(char op, const L& l, const R& r) {
    switch (op) {
      case '+':
        return l + r;
      case '-':
        return l - r;
      case '*':
        return l * r;
      default:
        return l / r;
    }
  }

  Value Binary(const Expr& e) {
    Value l = Eval(*e.lhs);
    Value r = Eval(*e.rhs);
    const char op = e.name[0];
    if (!l.is_array && !r.is_array) return Num(Apply(op, l.number, r.number));
    if (l.is_array && r.is_array) {
      if (l.array.shape() != r.array.shape()) {  // NumPy's broadcasting, through the broadcast_* operators
        const char* name = op == '+'   ? "broadcast_add"
                           : op == '-' ? "broadcast_sub"
                           : op == '*' ? "broadcast_mul"
                                       : "broadcast_div";
        return Arr(Invoke(name, {l.array, r.array}).at(0));
      }
      return Arr(Apply(op, l.array, r.array));
    }
    if (l.is_array) return Arr(Apply(op, l.array, r.number));
    // number op array: n - a = -a + n, n / a = full(n) / a.
    if (op == '+' || op == '*') return Arr(Apply(op, r.array, l.number));
    if (op == '-') return Arr(r.array * -1.0 + l.number);
    const NDArray& a = r.array;
    return Arr(NDArray::Full(a.shape(), l.number, a.ctx(), a.dtype(), a.engine()) / a);
  }

  std::int64_t Integer(const Expr& e, const char* what) {
    const Value v = Eval(e);
    if (v.is_array || v.number != std::floor(v.number) || std::abs(v.number) > 9e15) {
      throw EvalError{e.pos, std::string(what) + " must be a whole number"};
    }
    return static_cast<std::int64_t>(v.number);
  }

  Value Index(const Expr& e) {
    Value base = Eval(*e.lhs);
    if (!base.is_array) throw EvalError{e.pos, "only arrays can be indexed"};
    const NDArray& a = base.array;
    if (a.shape().ndim() < 1) throw EvalError{e.pos, "a 0-d array cannot be indexed"};
    const std::int64_t n = a.shape()[0];
    if (!e.is_range) {
      std::int64_t i = Integer(*e.begin, "an index");
      if (i < 0) i += n;
      if (i < 0 || i >= n) {
        throw EvalError{e.begin->pos, "index " + std::to_string(i < 0 ? i - n : i) +
                                          " is out of range for axis 0 of size " + std::to_string(n)};
      }
      return Arr(a.At(i));
    }
    // Python's rules: negative counts from the end, out-of-range bounds are clamped.
    auto bound = [&](const ExprPtr& x, std::int64_t dflt) {
      if (!x) return dflt;
      std::int64_t v = Integer(*x, "a slice bound");
      if (v < 0) v += n;
      return std::clamp<std::int64_t>(v, 0, n);
    };
    const std::int64_t b = bound(e.begin, 0);
    const std::int64_t end = std::max(b, bound(e.end, n));
    return Arr(a.Slice(b, end));
  }

  Value Call(const Expr& e) {
    if (e.name == "mnist" || DataIterRegistry::Get().Find(e.name) != nullptr) return CallIterator(e);
    if (e.name == "next" || e.name == "label" || e.name == "reset") return CallOnIterator(e);
    if (FindBuiltin(e.name) != nullptr) return CallBuiltin(e);
    if (OperatorRegistry::Get().Find(e.name) != nullptr) return CallOperator(e);
    std::vector<std::string> names = OperatorRegistry::Get().ListNames();
    for (const auto& b : BuiltinNames()) names.push_back(b);
    for (const auto& i : DataIterRegistry::Get().ListNames()) names.push_back(i);
    throw EvalError{e.pos, "unknown function or operator '" + e.name + "'" + Suggest(e.name, names) +
                               " ('help' lists the built-ins, 'help OP' shows an operator)"};
  }

  TShape ShapeFrom(const Expr& call, std::size_t first, std::size_t last) {
    std::vector<std::int64_t> dims;
    for (std::size_t i = first; i < last; ++i) {
      const std::int64_t d = Integer(*call.args[i].expr, "a dimension");
      if (d < 0) throw EvalError{call.args[i].pos, "a dimension must not be negative"};
      dims.push_back(d);
    }
    if (dims.size() > TShape::kMaxDims) throw EvalError{call.pos, "at most 8 dimensions"};
    return TShape(dims);
  }

  // mnist(...) or a registered iterator by name: keyword arguments only, as MXNet's mx.io.XIter(...) takes them.
  Value CallIterator(const Expr& e) {
    Kwargs kwargs;
    bool train = true;
    for (const auto& a : e.args) {
      if (a.key.empty()) {
        throw EvalError{a.pos, e.name + " takes keyword arguments only (e.g. batch_size=100; 'help' lists them)"};
      }
      std::string value = Trim(a.raw);
      if (a.expr && (a.expr->kind == Expr::kNumber || a.expr->kind == Expr::kNeg)) value = NumberText(Eval(*a.expr).number);
      if (e.name == "mnist" && a.key == "train") {
        train = value != "0" && value != "false" && value != "False";
        continue;
      }
      kwargs.emplace_back(a.key, value);
    }
    std::string type = e.name;
    if (e.name == "mnist") {
      type = "MNISTIter";
      const std::string prefix = std::string(kFashionMnistDir) + (train ? "/train" : "/t10k");
      if (std::FILE* f = std::fopen((prefix + "-images-idx3-ubyte.gz").c_str(), "rb")) {
        std::fclose(f);
      } else {
        throw EvalError{e.pos, std::string("mnist: Fashion-MNIST is not in ") + kFashionMnistDir +
                                   " (install Debian's dataset-fashion-mnist, or use MNISTIter(image=..., label=...))"};
      }
      kwargs.emplace_back("image", prefix + "-images-idx3-ubyte.gz");
      kwargs.emplace_back("label", prefix + "-labels-idx1-ubyte.gz");
      const auto given = [&](const char* key) {
        return std::any_of(kwargs.begin(), kwargs.end(), [&](const auto& kv) { return kv.first == key; });
      };
      if (!given("batch_size")) kwargs.emplace_back("batch_size", "100");
      if (!given("shuffle")) kwargs.emplace_back("shuffle", "0");  // MNISTIter's own default shuffles
    }
    Value v;
    v.iter = std::make_shared<Interpreter::Iterator>();
    v.iter->type = type;
    v.iter->it = CreateDataIter(type, kwargs);
    return v;
  }

  // next(it), label(it), reset(it).
  Value CallOnIterator(const Expr& e) {
    if (e.args.size() != 1 || !e.args[0].key.empty() || !e.args[0].expr) {
      throw EvalError{e.pos, "usage: " + std::string(FindBuiltin(e.name)->usage)};
    }
    const Value target = Eval(*e.args[0].expr, /*iterator_ok=*/true);
    if (!target.iter) throw EvalError{e.args[0].pos, e.name + ": give it an iterator, e.g. it = mnist(batch_size=10)"};
    Interpreter::Iterator& it = *target.iter;
    if (e.name == "reset") {
      it.it->BeforeFirst();
      it.has_batch = false;
      it.batches = 0;
      return target;
    }
    if (e.name == "next") {
      if (!it.it->Next()) {
        it.has_batch = false;
        throw EvalError{e.pos, "the iterator has given all " + std::to_string(it.batches) +
                                   " batches of this epoch; reset(it) starts the next"};
      }
      it.has_batch = true;
      ++it.batches;
    } else if (!it.has_batch) {
      throw EvalError{e.pos, "label: no batch yet this epoch; next(it) gives one"};
    }
    const DataBatch& batch = it.it->Value();
    const std::vector<NDArray>& arrays = e.name == "next" ? batch.data : batch.label;
    if (arrays.empty()) throw EvalError{e.pos, e.name + ": this iterator's batches have none"};
    return Arr(arrays[0].CopyTo(Context::CPU()));  // the iterator may reuse its batch's memory
  }

  Value CallBuiltin(const Expr& e) {
    const Builtin& b = *FindBuiltin(e.name);
    if (e.name == "astype") {  // through the registry's Cast, as MXNet's NDArray.astype
      if (e.args.size() != 2 || !e.args[0].key.empty() || !e.args[1].key.empty() || !e.args[0].expr) {
        throw EvalError{e.pos, std::string("usage: ") + b.usage};
      }
      const Value a = Eval(*e.args[0].expr);
      if (!a.is_array) throw EvalError{e.args[0].pos, "astype: argument 1 must be an array"};
      return Arr(Invoke("Cast", {a.array}, {{"dtype", Trim(e.args[1].raw)}}).at(0));
    }
    for (const auto& a : e.args) {
      if (!a.key.empty() || !a.expr) {
        throw EvalError{a.pos, std::string(b.name) + " takes no keyword arguments (usage: " + b.usage + ")"};
      }
    }
    const std::string name = b.name;
    const std::size_t n = e.args.size();
    auto need = [&](bool ok) {
      if (!ok) throw EvalError{e.pos, "usage: " + std::string(b.usage)};
    };
    auto array_arg = [&](std::size_t i) {
      Value v = Eval(*e.args[i].expr);
      if (!v.is_array)
        throw EvalError{e.args[i].pos, name + ": argument " + std::to_string(i + 1) + " must be an array"};
      return v.array;
    };
    const Context cpu = Context::CPU();
    if (name == "ones" || name == "zeros" || name == "uniform" || name == "normal") {
      need(n >= 1);
      const TShape shape = ShapeFrom(e, 0, n);
      if (name == "ones") return Arr(NDArray::Ones(shape, cpu));
      if (name == "zeros") return Arr(NDArray::Zeros(shape, cpu));
      NDArray a(shape, cpu);
      if (name == "uniform")
        a.SampleUniform(0, 1);
      else
        a.SampleNormal(0, 1);
      return Arr(a);
    }
    if (name == "full") {
      need(n >= 2);
      const Value v = Eval(*e.args[n - 1].expr);
      if (v.is_array) throw EvalError{e.args[n - 1].pos, "full: the value must be a number"};
      return Arr(NDArray::Full(ShapeFrom(e, 0, n - 1), v.number, cpu));
    }
    if (name == "arange") {
      need(n >= 1 && n <= 3);
      std::vector<double> p;
      for (const auto& a : e.args) {
        const Value v = Eval(*a.expr);
        if (v.is_array) throw EvalError{a.pos, "arange: arguments must be numbers"};
        p.push_back(v.number);
      }
      const double start = n == 1 ? 0 : p[0], stop = n == 1 ? p[0] : p[1], step = n == 3 ? p[2] : 1;
      if (step == 0) throw EvalError{e.pos, "arange: step must not be 0"};
      const double count = std::ceil((stop - start) / step);
      if (count > 1e8) throw EvalError{e.pos, "arange: too many values"};
      std::vector<float> values;
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(count); ++i)
        values.push_back(static_cast<float>(start + i * step));
      return Arr(NDArray::FromVector(values, TShape({static_cast<std::int64_t>(values.size())})));
    }
    if (name == "dot") {
      need(n == 2);
      return Arr(Dot(array_arg(0), array_arg(1)));
    }
    // reshape
    need(n >= 2);
    const NDArray a = array_arg(0);
    std::vector<std::int64_t> dims;
    for (std::size_t i = 1; i < n; ++i) dims.push_back(Integer(*e.args[i].expr, "a dimension"));
    return Arr(a.Reshape(TShape(dims)));
  }

  Value CallOperator(const Expr& e) {
    const OperatorInfo& info = *OperatorRegistry::Get().Find(e.name);
    // Keywords whose value is an array are inputs; the others are parameters, as text.
    std::vector<std::pair<std::string, NDArray>> keyword_inputs;
    std::vector<std::pair<NDArray, std::size_t>> positional;
    Kwargs params;
    for (const auto& a : e.args) {
      bool documented_input = false;
      for (const auto& d : info.arguments) documented_input |= d.name == a.key;
      if (a.key.empty() || documented_input) {
        if (!a.expr) throw EvalError{a.pos, "expected an array expression"};
        Value v = Eval(*a.expr);
        if (!v.is_array) {
          throw EvalError{a.pos, a.key.empty() ? "a positional argument must be an array (give parameters as key=value)"
                                               : "input '" + a.key + "' must be an array"};
        }
        if (a.key.empty())
          positional.emplace_back(v.array, a.pos);
        else
          keyword_inputs.emplace_back(a.key, v.array);
        continue;
      }
      std::optional<Value> v;
      if (a.expr && a.expr->kind != Expr::kVar) v = Eval(*a.expr);
      if (a.expr && a.expr->kind == Expr::kVar && vars_.count(a.expr->name) != 0) v = Eval(*a.expr);
      if (v && v->is_array)
        keyword_inputs.emplace_back(a.key, v->array);
      else if (v)
        params.emplace_back(a.key, NumberText(v->number));
      else
        params.emplace_back(a.key, Trim(a.raw));
    }
    std::unique_ptr<OperatorProperty> prop = OperatorProperty::Create(e.name);
    prop->Init(params);
    std::vector<std::string> names = prop->ListArguments();
    const std::size_t num_args = names.size();
    for (const auto& aux : prop->ListAuxiliaryStates()) names.push_back(aux);
    std::vector<NDArray> inputs(names.size());
    if (positional.size() > names.size()) {
      throw EvalError{positional[names.size()].second,
                      e.name + " takes " + std::to_string(names.size()) + " inputs (" + Join(names) + ")"};
    }
    for (std::size_t i = 0; i < positional.size(); ++i) inputs[i] = positional[i].first;
    for (const auto& [key, array] : keyword_inputs) {
      const auto it = std::find(names.begin(), names.end(), key);
      if (it == names.end()) {
        throw Error(e.name + " has no input '" + key + "' (inputs: " + Join(names) + ")");
      }
      const std::size_t i = static_cast<std::size_t>(it - names.begin());
      if (!inputs[i].is_none()) throw Error(e.name + ": input '" + key + "' is given twice");
      inputs[i] = array;
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (inputs[i].is_none()) {
        throw Error(e.name + ": missing input '" + names[i] + "'" + (i >= num_args ? " (an auxiliary state)" : "") +
                    " (inputs: " + Join(names) + ")");
      }
    }
    std::vector<NDArray> out = Invoke(e.name, inputs, params);
    return Arr(out.at(0));
  }

  const std::map<std::string, NDArray>& vars_;
  const Iterators& iters_;
};

// "error text\n  statement\n      ^" for an error at byte `pos`.
std::string Located(const std::string& statement, std::size_t pos, const std::string& message) {
  const std::string line = statement.substr(0, statement.find('\n'));
  std::string out = "column " + std::to_string(pos + 1) + ": " + message + "\n  " + line + "\n  ";
  out += std::string(std::min(pos, line.size()), ' ') + "^";
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Printing.

namespace {

// The fewest significant digits that read back to `v` (of the array's precision: `single` for float32 and
// narrower), as NumPy's dragon4 finds them.
int ShortestDigits(double v, bool single) {
  char buf[64];
  int digits = 1;
  for (; digits < 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    const double back = std::strtod(buf, nullptr);
    if (single ? static_cast<float>(back) == static_cast<float>(v) : back == v) break;
  }
  return digits;
}

// NumPy's rule for a float array: scientific notation when a finite non-zero magnitude is >= 1e8 or < 1e-4,
// or the largest is over 1000 times the smallest.
bool NeedsScientific(const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (double v : values) {
    if (!std::isfinite(v) || v == 0) continue;
    lo = std::min(lo, std::abs(v));
    hi = std::max(hi, std::abs(v));
  }
  return hi > 0 && (hi >= 1e8 || lo < 1e-4 || hi / lo > 1000);
}

// The elements as NumPy prints them: integers as they are; floats in the fewest digits that read back to
// the same value, at most 8 after the point, positional with the point always shown ("2.", "0.1"), or, when
// NeedsScientific, every element with as many digits as the longest needs ("1.000e-01 2.500e+02").
std::vector<std::string> FormatElements(const std::vector<double>& values, bool is_float, bool single) {
  std::vector<std::string> out;
  out.reserve(values.size());
  char buf[400];
  const auto special = [](double v) -> const char* { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; };
  if (!is_float) {
    for (double v : values) {
      std::snprintf(buf, sizeof buf, "%.0f", v);
      out.push_back(buf);
    }
    return out;
  }
  if (NeedsScientific(values)) {
    int precision = 0;
    for (double v : values) {
      if (std::isfinite(v)) precision = std::max(precision, std::min(ShortestDigits(v, single) - 1, 8));
    }
    for (double v : values) {
      if (!std::isfinite(v)) {
        out.push_back(special(v));
        continue;
      }
      std::snprintf(buf, sizeof buf, "%.*e", precision, v);
      std::string e = buf;
      if (precision == 0) e.insert(e.find('e'), ".");  // NumPy's "1.e-05"
      out.push_back(e);
    }
    return out;
  }
  for (double v : values) {
    if (!std::isfinite(v)) {
      out.push_back(special(v));
      continue;
    }
    const int digits = ShortestDigits(v, single);
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
    const int exponent = v == 0 ? 0 : static_cast<int>(std::floor(std::log10(std::abs(std::strtod(buf, nullptr)))));
    std::snprintf(buf, sizeof buf, "%.*f", std::clamp(digits - 1 - exponent, 0, 8), v);
    std::string s = buf;
    if (s.find('.') == std::string::npos) {
      s += ".";
    } else {
      while (s.back() == '0') s.pop_back();
    }
    out.push_back(s);
  }
  return out;
}

// NumPy's _formatArray for str() (numpy/core/arrayprint.py, legacy off): 75 columns, rows wrapped between
// elements, a hanging indent of one space per level, every element padded to the same integer and
// fraction widths.
struct Printer {
  static constexpr std::size_t kLineWidth = 75;
  const std::vector<std::string>* cells;
  const TShape* shape;
  bool summarise;
  std::size_t int_width = 0, frac_width = 0;

  static bool IsSpecial(const std::string& s) { return s == "nan" || s == "inf" || s == "-inf"; }
  std::string Cell(std::size_t i) const {
    const std::string& s = (*cells)[i];
    if (IsSpecial(s)) return std::string(int_width + frac_width - s.size(), ' ') + s;
    const std::size_t dot = s.find('.');
    const std::string ip = dot == std::string::npos ? s : s.substr(0, dot);
    const std::string fp = dot == std::string::npos ? "" : s.substr(dot);
    return std::string(int_width - ip.size(), ' ') + ip + fp + std::string(frac_width - fp.size(), ' ');
  }
  // Which indices along an axis of size n are shown (-1 stands for "...").
  std::vector<std::int64_t> Shown(std::int64_t n) const {
    std::vector<std::int64_t> out;
    if (summarise && n > 6) {
      for (std::int64_t i : {0, 1, 2, -1}) out.push_back(i);
      for (std::int64_t i = n - 3; i < n; ++i) out.push_back(i);
    } else {
      for (std::int64_t i = 0; i < n; ++i) out.push_back(i);
    }
    return out;
  }
  // The sub-array at `offset` from `axis` on; `hanging` starts its continuation lines, `width` is what is left
  // of the line for it.
  std::string Format(int axis, std::size_t offset, const std::string& hanging, std::size_t width) const {
    const int ndim = shape->ndim();
    const std::size_t stride = static_cast<std::size_t>(shape->ProdDims(axis + 1, ndim));
    const std::vector<std::int64_t> shown = Shown((*shape)[axis]);
    std::string s;
    if (axis == ndim - 1) {
      const std::size_t elem_width = width - 1;  // room for the closing ']'
      std::string line = hanging;
      for (std::size_t k = 0; k < shown.size(); ++k) {
        const std::string word = shown[k] < 0 ? "..." : Cell(offset + static_cast<std::size_t>(shown[k]));
        if (line.size() + word.size() > elem_width && line.size() > hanging.size()) {
          while (!line.empty() && line.back() == ' ') line.pop_back();
          s += line + "\n";
          line = hanging;
        }
        line += word;
        if (k + 1 < shown.size()) line += " ";
      }
      s += line;
    } else {
      const std::string rows_apart(static_cast<std::size_t>(ndim - axis - 1), '\n');
      for (std::size_t k = 0; k < shown.size(); ++k) {
        s += hanging;
        s += shown[k] < 0 ? "..." : Format(axis + 1, offset + static_cast<std::size_t>(shown[k]) * stride,
                                           hanging + " ", width - 1);
        if (k + 1 < shown.size()) s += rows_apart;
      }
    }
    return "[" + s.substr(hanging.size()) + "]";
  }
};

}  // namespace

std::string Interpreter::Format(const NDArray& array) {
  if (array.is_none()) return "<NDArray none>";
  const DType t = array.dtype();
  const bool is_float = t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBfloat16;
  NDArray host = array.ctx().dev_type == DeviceType::kGPU ? array.CopyTo(Context::CPU()) : array;
  const std::vector<double> values =
      t == DType::kFloat64 ? host.ToVector<double>() : host.AsType(DType::kFloat64).ToVector<double>();
  const std::vector<std::string> cells = FormatElements(values, is_float, t != DType::kFloat64);
  std::string out;
  const TShape& shape = array.shape();
  if (shape.ndim() == 0) {
    out = cells.at(0);
  } else if (array.Size() == 0) {
    out = "[]";
  } else {
    Printer p{&cells, &shape, array.Size() > 1000};
    std::size_t special_width = 0;  // nan, inf, -inf: right-aligned in the numbers' width, as NumPy does
    for (const auto& s : cells) {
      if (Printer::IsSpecial(s)) {
        special_width = std::max(special_width, s.size());
        continue;
      }
      const std::size_t dot = s.find('.');
      p.int_width = std::max(p.int_width, dot == std::string::npos ? s.size() : dot);
      p.frac_width = std::max(p.frac_width, dot == std::string::npos ? 0 : s.size() - dot);
    }
    if (special_width > p.int_width + p.frac_width) p.int_width = special_width - p.frac_width;
    out = p.Format(0, 0, " ", Printer::kLineWidth);
  }
  out += "\n<NDArray " + ShapeText(shape);
  if (t != DType::kFloat32) out += std::string(" ") + DTypeName(t);
  out += " @" + array.ctx().ToString() + ">";
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Statements.

Interpreter::Interpreter() { AddBuiltinCommands(); }
Interpreter::~Interpreter() = default;

std::vector<std::string> Interpreter::SplitStatements(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  int depth = 0;
  bool comment = false;
  auto flush = [&] {
    if (!Trim(cur).empty()) out.push_back(Trim(cur));
    cur.clear();
    depth = 0;
  };
  for (char c : text) {
    if (comment) {
      if (c == '\n') {
        comment = false;
        flush();
      }
      continue;
    }
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#') {
      comment = true;
      continue;
    } else if (c == '(' || c == '[') {
      ++depth;
    } else if (c == ')' || c == ']') {
      --depth;
    } else if (c == '\n' || (c == ';' && depth <= 0)) {
      flush();
      continue;
    }
    cur += c;
  }
  flush();
  return out;
}

Outcome Interpreter::Run(const std::string& raw) {
  const std::string statement = raw.substr(0, raw.find_first_of("\r\n"));
  try {
    // A command: its name, then anything but an assignment, a call or an index.
    std::size_t word_end = 0;
    while (word_end < statement.size() && IsIdentChar(statement[word_end])) ++word_end;
    const std::string first = statement.substr(0, word_end);
    std::size_t next = word_end;
    while (next < statement.size() && std::isspace(static_cast<unsigned char>(statement[next]))) ++next;
    const char follow = next < statement.size() ? statement[next] : '\0';
    // (Arithmetic on a variable named like a command is not possible: `load /tmp/x.params` must be a command.)
    const bool bare_word = std::string("=([").find(follow) == std::string::npos || follow == '\0';
    if (const auto it = commands_.find(first); it != commands_.end() && bare_word && follow != '#') {
      std::string text = RunCommand(it->second, statement.substr(word_end));
      while (!text.empty() && text.back() == '\n') text.pop_back();
      return {true, text};
    }
    if (statement.empty() || statement[0] == '#') return {};

    std::vector<Token> tokens;
    ExprPtr expr;
    std::string target;
    bool print = true;
    try {
      tokens = Lex(statement);
      std::size_t start = 0;
      if (tokens.size() >= 3 && tokens[0].kind == Tok::kIdent && tokens[1].kind == Tok::kPunct &&
          tokens[1].text == "=") {
        target = tokens[0].text;
        print = false;
        start = 2;
      } else if (tokens[0].kind == Tok::kIdent && tokens[0].text == "print") {
        start = 1;
      } else if (tokens[0].kind == Tok::kEnd) {
        return {};
      }
      if (tokens[start].kind == Tok::kEnd)
        throw ParseError{tokens[start].begin, "expected an expression, found the end"};
      Parser parser(statement, std::vector<Token>(tokens.begin() + static_cast<std::ptrdiff_t>(start), tokens.end()));
      expr = parser.ParseWhole();
    } catch (const ParseError& e) {
      // `word word ...` where the first word is no variable: most likely a mistyped command.
      if (tokens.size() >= 3 && tokens[0].kind == Tok::kIdent && tokens[1].kind == Tok::kIdent &&
          vars_.count(tokens[0].text) == 0 && tokens[0].text != "print") {
        std::vector<std::string> names;
        for (const auto& [n, _] : commands_) names.push_back(n);
        return {false, "unknown command '" + tokens[0].text + "'" + Suggest(tokens[0].text, names) +
                           " ('help' lists the commands)"};
      }
      return {false, "parse error at " + Located(statement, e.pos, e.message)};
    }
    Value v;
    try {
      v = Evaluator(vars_, iters_).Eval(*expr, /*iterator_ok=*/true);
    } catch (const EvalError& e) {
      return {false, Located(statement, e.pos, e.message)};
    }
    if (!target.empty()) {
      if (v.iter) {
        iters_[target] = v.iter;
        vars_.erase(target);
        return {};
      }
      if (!v.is_array) v = Arr(NDArray::Full(TShape({1}), v.number, Context::CPU()));
      vars_[target] = v.array;
      iters_.erase(target);
      return {};
    }
    if (!print) return {};
    if (v.iter) return {true, v.iter->Describe()};
    if (v.is_array) {
      const NDArray a = v.array;
      Block([a] { a.WaitToRead(); });  // interruptible (SetWaiter); Format then finds it ready
    }
    return {true, v.is_array ? Format(v.array) : NumberText(v.number)};
  } catch (const std::exception& e) {
    return {false, e.what()};
  } catch (...) {
    return {false, "unknown error"};
  }
}

std::string Interpreter::RunCommand(const Command& command, const std::string& rest) { return command.fn(Words(rest)); }

void Interpreter::AddCommand(const std::string& name, const std::string& usage, const std::string& summary,
                             CommandFn fn) {
  commands_[name] = Command{usage, summary, std::move(fn)};
}

void Interpreter::AddBuiltinCommands() {
  AddCommand("help", "help [NAME]", "this text, or an operator's inputs and parameters, or a command's usage",
             [this](const std::vector<std::string>& a) { return a.empty() ? HelpText() : HelpFor(a[0]); });
  AddCommand("vars", "vars", "lists the variables with their shapes", [this](const std::vector<std::string>&) {
    std::string out;
    for (const auto& [name, a] : vars_) {
      out += (out.empty() ? "" : "\n") + name + "  " + ShapeText(a.shape()) + " " + DTypeName(a.dtype()) + " @" +
             a.ctx().ToString();
    }
    for (const auto& [name, it] : iters_) out += (out.empty() ? "" : "\n") + name + "  " + it->Describe();
    return out.empty() ? std::string("(no variables)") : out;
  });
  AddCommand("del", "del NAME...", "forgets variables", [this](const std::vector<std::string>& a) {
    if (a.empty()) throw Error("usage: del NAME...");
    for (const auto& n : a) {  // all or nothing
      if (iters_.count(n) == 0) Require(n);
    }
    for (const auto& n : a) {
      vars_.erase(n);
      iters_.erase(n);
    }
    return std::string();
  });
  AddCommand("wait", "wait [NAME...]", "waits for the engine (or for the named arrays); reports a failed function",
             [this](const std::vector<std::string>& a) {
               if (a.empty()) Block([] { Engine::Get()->WaitForAll(); });
               for (const auto& n : a) {
                 const NDArray arr = Require(n);
                 Block([arr] { arr.WaitToRead(); });
               }
               return std::string();
             });
  AddCommand("engine", "engine stats", "functions pushed, completed and pending; queued and running per device",
             [](const std::vector<std::string>& a) {
               if (a.size() != 1 || a[0] != "stats") throw Error("usage: engine stats");
               const EngineStats s = Engine::Get()->Stats();
               std::string out = std::string("engine: ") + EngineTypeName(Engine::Get()->type()) + "\npushed " +
                                 std::to_string(s.pushed) + ", completed " + std::to_string(s.completed) +
                                 ", skipped " + std::to_string(s.skipped) + ", pending " + std::to_string(s.pending);
               for (const auto& d : s.devices) {
                 out += "\n" + d.ctx.ToString() + " (" + std::to_string(d.workers) + " workers):";
                 for (int l = 0; l < kNumLanes; ++l) {
                   const LaneStats& ls = d.lanes[l];
                   out += std::string("\n  ") + LaneName(static_cast<Lane>(l)) + ": queued " +
                          std::to_string(ls.queued) + ", running " + std::to_string(ls.running) + ", executed " +
                          std::to_string(ls.executed) + " (in order " + std::to_string(ls.executed_in_order) + ")";
                 }
               }
               return out;
             });
  AddCommand("profile", "profile start|stop|table|dump FILE",
             "records the engine's functions; stop and table print the per-name totals; dump writes a Chrome trace",
             [](const std::vector<std::string>& a) {
               Profiler& p = Profiler::Get();
               const std::string what = a.empty() ? "" : a[0];
               if (what == "start" && a.size() == 1) {
                 p.Start();
                 return std::string("profiling (profile stop to see the totals)");
               }
               if (what == "stop" && a.size() == 1) {
                 Engine::Get()->WaitForAll();
                 p.Stop();
                 return p.AggregateTable();
               }
               if (what == "table" && a.size() == 1) return p.AggregateTable();
               if (what == "dump" && a.size() == 2) {
                 p.Dump(a[1]);
                 return "wrote " + a[1] + " (open it in chrome://tracing or ui.perfetto.dev)";
               }
               throw Error("usage: profile start|stop|table|dump FILE");
             });
  AddCommand("load", "load FILE", "loads a .params file; its names become variables (arg:/aux: prefixes dropped)",
             [this](const std::vector<std::string>& a) {
               if (a.size() != 1) throw Error("usage: load FILE");
               std::vector<NDArray> arrays;
               std::vector<std::string> names;
               NDArray::Load(a[0], &arrays, &names);
               std::map<std::string, NDArray> loaded;
               for (std::size_t i = 0; i < arrays.size(); ++i) {
                 std::string n = i < names.size() ? names[i] : "arr" + std::to_string(i);
                 if (n.rfind("arg:", 0) == 0 || n.rfind("aux:", 0) == 0) n = n.substr(4);
                 for (char& c : n) c = IsIdentChar(c) ? c : '_';
                 if (n.empty() || !IsIdentStart(n[0])) n = "_" + n;
                 if (!loaded.emplace(n, arrays[i]).second) {
                   throw Error(a[0] + ": two arrays would both be named '" + n + "'; nothing was loaded");
                 }
               }
               std::string out = "loaded " + std::to_string(loaded.size()) + " arrays:";
               for (const auto& [n, arr] : loaded) {
                 out += " " + n + " (" + ShapeText(arr.shape()) + ")";
                 vars_[n] = arr;
               }
               return out;
             });
  AddCommand("save", "save FILE [NAME...]", "saves the named variables (all when none are named) as a .params file",
             [this](const std::vector<std::string>& a) {
               if (a.empty()) throw Error("usage: save FILE [NAME...]");
               std::vector<std::string> names(a.begin() + 1, a.end());
               if (names.empty()) names = VariableNames();
               if (names.empty()) throw Error("save: there are no variables to save");
               std::vector<NDArray> arrays;
               for (const auto& n : names) arrays.push_back(Require(n));
               NDArray::Save(a[0], arrays, names);
               return "saved " + Join(names) + " to " + a[0];
             });
  AddCommand("quit", "quit", "leaves the shell (also exit, or Ctrl-D)", [this](const std::vector<std::string>&) {
    quit_ = true;
    return std::string();
  });
  AddCommand("exit", "exit", "leaves the shell", [this](const std::vector<std::string>&) {
    quit_ = true;
    return std::string();
  });
}

std::string Interpreter::HelpText() const {
  std::string out =
      "troupe shell: arrays, operators and the engine, interactively.\n"
      "\n"
      "Statements (several on a line with ';'; '#' starts a comment):\n"
      "  a = ones(2,3)                 assign\n"
      "  b = a * 2 + 1                 arithmetic: + - * / on arrays and numbers, parentheses, unary minus;\n"
      "                                arrays of different shapes broadcast as in NumPy\n"
      "  b  or  print b                print a value\n"
      "  b[1]  b[0:2]  b[-1]           index and slice the first axis\n"
      "  c = FullyConnected(data=a, weight=w, num_hidden=4, no_bias=true)\n"
      "                                any registered operator: array inputs by name (or by position),\n"
      "                                other keywords are its parameters\n"
      "\n"
      "Built-in functions:\n";
  for (const auto& b : kBuiltins) {
    std::string u = b.usage;
    u.resize(std::max<std::size_t>(u.size(), 44), ' ');
    out += "  " + u + " " + b.summary + "\n";
  }
  out += "\nCommands:\n";
  for (const auto& [name, c] : commands_) {
    std::string u = c.usage;
    u.resize(std::max<std::size_t>(u.size(), 36), ' ');
    out += "  " + u + " " + c.summary + "\n";
  }
  out += "\nOperators (help OP for one; Tab completes names):\n";
  std::string line = " ";
  for (const auto& n : OperatorRegistry::Get().ListNames()) {
    if (line.size() + n.size() + 1 > 100) {
      out += line + "\n";
      line = " ";
    }
    line += " " + n;
  }
  out += line;
  if (commands_.count("nodes") == 0) {
    out += "\n\nA running cluster: start the shell with --connect HOST:PORT (the scheduler's address, which troupe "
           "launch prints) to add the cluster commands nodes, kv, checkpoint and barrier.";
  }
  return out;
}

std::string Interpreter::HelpFor(const std::string& name) const {
  if (const OperatorInfo* info = OperatorRegistry::Get().Find(name)) {
    std::string out = info->name + ": " + info->description + "\n";
    std::vector<std::string> call;
    if (!info->arguments.empty()) {
      out += "\nInputs:\n";
      for (const auto& a : info->arguments) {
        out += "  " + a.name + " (" + a.type + "): " + a.description + "\n";
        call.push_back(a.name + "=ARRAY");
      }
    }
    if (!info->params.empty()) {
      out += "\nParameters:\n";
      for (const auto& p : info->params) {
        out += "  " + p.name + " (" + p.type + (p.required ? ", required" : ", optional, default=" + p.default_value) +
               "): " + p.description + "\n";
        if (p.required) call.push_back(p.name + "=...");
      }
    }
    if (!info->aliases.empty()) out += "\nAliases: " + Join(info->aliases) + "\n";
    out += "\nCall: c = " + info->name + "(" + Join(call) + ")";
    return out;
  }
  if (const Builtin* b = FindBuiltin(name)) return std::string(b->usage) + ": " + b->summary;
  if (const auto it = commands_.find(name); it != commands_.end()) return it->second.usage + ": " + it->second.summary;
  std::vector<std::string> names = OperatorRegistry::Get().ListNames();
  for (const auto& b : BuiltinNames()) names.push_back(b);
  for (const auto& [n, _] : commands_) names.push_back(n);
  throw Error("help: no operator, function or command named '" + name + "'" + Suggest(name, names));
}

std::vector<std::string> Interpreter::Completions(const std::string& prefix) const {
  std::set<std::string> out;
  auto add = [&](const std::string& n) {
    if (n.compare(0, prefix.size(), prefix) == 0) out.insert(n);
  };
  add("print");
  for (const auto& [n, _] : commands_) add(n);
  for (const auto& b : kBuiltins) add(b.name);
  for (const auto& n : OperatorRegistry::Get().ListNames()) {
    add(n);
    for (const auto& alias : OperatorRegistry::Get().Find(n)->aliases) add(alias);
  }
  for (const auto& n : DataIterRegistry::Get().ListNames()) add(n);
  for (const auto& [n, _] : vars_) add(n);
  for (const auto& [n, _] : iters_) add(n);
  return {out.begin(), out.end()};
}

std::vector<std::string> Interpreter::VariableNames() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : vars_) out.push_back(n);
  return out;
}

const NDArray& Interpreter::Require(const std::string& name) const {
  const NDArray* v = Find(name);
  if (v == nullptr) throw Error("undefined variable '" + name + "'" + Suggest(name, VariableNames()));
  return *v;
}

const NDArray* Interpreter::Find(const std::string& name) const {
  const auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : &it->second;
}

void Interpreter::Set(const std::string& name, NDArray value) { vars_[name] = std::move(value); }

}  // namespace troupe::shell
