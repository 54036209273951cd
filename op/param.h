// Typed operator parameters: a struct with one member per parameter, declared once with its name, default,
// accepted range or choices and a description; parsed from the string key/value pairs that operators are
// created with (the attributes of MXNet's symbol JSON are exactly such pairs: "kernel": "(3, 3)",
// "no_bias": "True").
//
//   struct PoolingParam : Params<PoolingParam> {
//     TShape kernel;
//     std::string pool_type = "max";
//     static void Declare(ParamSchema<PoolingParam>& s) {
//       s.Field("kernel", &PoolingParam::kernel).Describe("Pooling kernel size: (y, x).");
//       s.Field("pool_type", &PoolingParam::pool_type).Default("max").Choices({"max", "avg", "sum"})
//           .Describe("Pooling type to be applied.");
//     }
//   };
//   PoolingParam p;
//   p.Init(kwargs, "Pooling");  // throws troupe::Error naming "Pooling", the parameter and what it accepts
//
// A field without Default() is required. Keys of the form "__name__" (MXNet's hidden attributes such as
// "__lr_mult__") are ignored, as MXNet does. Value syntax: bool "True"/"False"/"true"/"false"/"1"/"0";
// integers and reals in C syntax; tuples "(3, 3)", "[3,3]", "(3,)", "()" or a bare "3"; optional values
// "None", and tuples of optional integers with "None" items ("(0, None)"). Thread-safety: the schema is
// built once (thread-safe static); Init/GetParams touch only the object they are called on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace troupe {

// Operator arguments as given by a user or a symbol file, in order.
using Kwargs = std::vector<std::pair<std::string, std::string>>;

// Names among `candidates` that look like `name` (equal ignoring case, the same first three letters, one part
// of the other when both have three letters or more, or a typo away: one edit in a name of up to 4 letters,
// two in a longer one):
// what the registries suggest for an unknown operator or iterator. Comma-separated; empty when none.
std::string SimilarNames(const std::string& name, const std::vector<std::string>& candidates);
// The same names, one per element (for a caller that formats them itself).
std::vector<std::string> SimilarNameList(const std::string& name, const std::vector<std::string>& candidates);

// One parameter, as the registry and the shell's `help` show it.
struct ParamDoc {
  std::string name;
  std::string type;           // "int", "int (>= 1)", "{'max', 'avg', 'sum'}", "Shape(tuple)", "float", ...
  std::string default_value;  // as text; empty when required
  bool required = false;
  std::string description;
};

// Value parsing and printing for each supported field type. Parse* throw std::invalid_argument with a
// short reason; the schema turns that into a troupe::Error naming the operator and the parameter.
namespace param_detail {
bool ParseBool(const std::string& s);
std::int64_t ParseInt(const std::string& s);
double ParseReal(const std::string& s);
std::vector<std::int64_t> ParseTuple(const std::string& s);
// A tuple whose items may be "None" (slice's begin/end/step: "(0, None)"); same syntax otherwise.
std::vector<std::optional<std::int64_t>> ParseOptionalTuple(const std::string& s);
std::string PrintReal(double v);  // shortest text that reads back to the same double
std::string PrintFloat(float v);  // shortest text that reads back to the same float
std::string PrintTuple(const std::vector<std::int64_t>& v);  // "(3, 3)", "(3,)", "()"
std::string PrintOptionalTuple(const std::vector<std::optional<std::int64_t>>& v);  // "(0, None)"

template <typename T>
struct Codec;
template <>
struct Codec<bool> {
  static bool Parse(const std::string& s) { return ParseBool(s); }
  static std::string Print(bool v) { return v ? "True" : "False"; }
  static const char* Type() { return "boolean"; }
  static double Number(bool v) { return v; }
};
template <>
struct Codec<int> {
  static int Parse(const std::string& s);
  static std::string Print(int v) { return std::to_string(v); }
  static const char* Type() { return "int"; }
  static double Number(int v) { return v; }
};
template <>
struct Codec<std::int64_t> {
  static std::int64_t Parse(const std::string& s) { return ParseInt(s); }
  static std::string Print(std::int64_t v) { return std::to_string(v); }
  static const char* Type() { return "long"; }
  static double Number(std::int64_t v) { return static_cast<double>(v); }
};
template <>
struct Codec<float> {
  static float Parse(const std::string& s) { return static_cast<float>(ParseReal(s)); }
  static std::string Print(float v) { return PrintFloat(v); }
  static const char* Type() { return "float"; }
  static double Number(float v) { return v; }
};
template <>
struct Codec<double> {
  static double Parse(const std::string& s) { return ParseReal(s); }
  static std::string Print(double v) { return PrintReal(v); }
  static const char* Type() { return "double"; }
  static double Number(double v) { return v; }
};
template <>
struct Codec<std::string> {
  static std::string Parse(const std::string& s) { return s; }
  static std::string Print(const std::string& v) { return v; }
  static const char* Type() { return "string"; }
  static double Number(const std::string&) { return 0; }
};
// A tuple of non-negative sizes (kernel, stride, pad, ...).
template <>
struct Codec<TShape> {
  static TShape Parse(const std::string& s);
  static std::string Print(const TShape& v) { return PrintTuple(v.ToVector()); }
  static const char* Type() { return "Shape(tuple)"; }
  static double Number(const TShape&) { return 0; }
};
// A tuple of any integers (axes, Reshape's target with its special values).
template <>
struct Codec<std::vector<std::int64_t>> {
  static std::vector<std::int64_t> Parse(const std::string& s) { return ParseTuple(s); }
  static std::string Print(const std::vector<std::int64_t>& v) { return PrintTuple(v); }
  static const char* Type() { return "tuple of int"; }
  static double Number(const std::vector<std::int64_t>&) { return 0; }
};
// A tuple of integers or None (slice's begin, end and step, as MXNet writes them: "(0, None)").
template <>
struct Codec<std::vector<std::optional<std::int64_t>>> {
  static std::vector<std::optional<std::int64_t>> Parse(const std::string& s) { return ParseOptionalTuple(s); }
  static std::string Print(const std::vector<std::optional<std::int64_t>>& v) { return PrintOptionalTuple(v); }
  static const char* Type() { return "tuple of int or None"; }
  static double Number(const std::vector<std::optional<std::int64_t>>&) { return 0; }
};
template <typename T>
struct Codec<std::optional<T>> {
  static std::optional<T> Parse(const std::string& s) {
    if (s == "None" || s.empty()) return std::nullopt;
    return Codec<T>::Parse(s);
  }
  static std::string Print(const std::optional<T>& v) { return v ? Codec<T>::Print(*v) : "None"; }
  static std::string TypeText() { return std::string(Codec<T>::Type()) + " or None"; }
  static const char* Type() { return "optional"; }
  static double Number(const std::optional<T>& v) { return v ? Codec<T>::Number(*v) : 0; }
};
template <typename T>
std::string TypeText() {
  if constexpr (requires { Codec<T>::TypeText(); }) {
    return Codec<T>::TypeText();
  } else {
    return Codec<T>::Type();
  }
}

// One declared field, type-erased over its owner P (which is passed as void*).
struct FieldEntry {
  ParamDoc doc;
  bool has_lower = false, has_upper = false;
  double lower = 0, upper = 0;
  std::vector<std::string> choices;
  // Sets the field from text (throws std::invalid_argument), prints it, resets it to its default.
  std::function<void(void*, const std::string&)> set;
  std::function<std::string(const void*)> get;
  std::function<void(void*)> reset;
  std::function<double(const void*)> number;  // numeric value for range checks
  std::string Accepted() const;               // "an int >= 1", "one of 'max', 'avg', 'sum'", ...
};

// Parses kwargs into obj against the fields; errors name `op` and the parameter.
void InitFields(const std::vector<std::unique_ptr<FieldEntry>>& fields, void* obj, const Kwargs& kwargs,
                const std::string& op);
}  // namespace param_detail

// The declaration of a parameter struct's fields; filled by P::Declare.
template <typename P>
class ParamSchema {
 public:
  template <typename T>
  class FieldBuilder {
   public:
    explicit FieldBuilder(param_detail::FieldEntry* e, T P::*member) : e_(e), member_(member) {}
    FieldBuilder& Default(const T& value) {
      e_->doc.required = false;
      e_->doc.default_value = param_detail::Codec<T>::Print(value);
      T P::*m = member_;
      e_->reset = [m, value](void* obj) { static_cast<P*>(obj)->*m = value; };
      return *this;
    }
    // Inclusive bounds for numeric fields.
    FieldBuilder& LowerBound(double lo) {
      e_->has_lower = true;
      e_->lower = lo;
      return *this;
    }
    FieldBuilder& UpperBound(double hi) {
      e_->has_upper = true;
      e_->upper = hi;
      return *this;
    }
    FieldBuilder& Range(double lo, double hi) { return LowerBound(lo).UpperBound(hi); }
    // Accepted values of a string field.
    FieldBuilder& Choices(std::vector<std::string> choices) {
      e_->choices = std::move(choices);
      std::string t = "{";
      for (std::size_t i = 0; i < e_->choices.size(); ++i) t += (i ? ", '" : "'") + e_->choices[i] + "'";
      e_->doc.type = t + "}";
      return *this;
    }
    FieldBuilder& Describe(const std::string& text) {
      e_->doc.description = text;
      return *this;
    }

   private:
    param_detail::FieldEntry* e_;
    T P::*member_;
  };

  template <typename T>
  FieldBuilder<T> Field(const char* name, T P::*member) {
    auto e = std::make_unique<param_detail::FieldEntry>();
    e->doc.name = name;
    e->doc.type = param_detail::TypeText<T>();
    e->doc.required = true;
    e->set = [member](void* obj, const std::string& s) {
      static_cast<P*>(obj)->*member = param_detail::Codec<T>::Parse(s);
    };
    e->get = [member](const void* obj) { return param_detail::Codec<T>::Print(static_cast<const P*>(obj)->*member); };
    e->reset = [](void*) {};
    e->number = [member](const void* obj) {
      return param_detail::Codec<T>::Number(static_cast<const P*>(obj)->*member);
    };
    fields_.push_back(std::move(e));
    return FieldBuilder<T>(fields_.back().get(), member);
  }

  const std::vector<std::unique_ptr<param_detail::FieldEntry>>& fields() const { return fields_; }

 private:
  std::vector<std::unique_ptr<param_detail::FieldEntry>> fields_;
};

// Base of a parameter struct P (CRTP). P provides `static void Declare(ParamSchema<P>&)`.
template <typename P>
struct Params {
  static const ParamSchema<P>& Schema() {
    static const ParamSchema<P> schema = [] {
      ParamSchema<P> s;
      P::Declare(s);
      return s;
    }();
    return schema;
  }
  // Resets every field to its default, then applies kwargs. Throws troupe::Error (naming op, the parameter
  // and what it accepts) for an unknown key, a malformed or out-of-range value, or a missing required field.
  void Init(const Kwargs& kwargs, const std::string& op) {
    param_detail::InitFields(Schema().fields(), static_cast<P*>(this), kwargs, op);
  }
  // Every field as text, in declaration order; Init(GetParams()) gives back the same values.
  Kwargs GetParams() const {
    Kwargs out;
    for (const auto& f : Schema().fields()) out.emplace_back(f->doc.name, f->get(static_cast<const P*>(this)));
    return out;
  }
  static std::vector<ParamDoc> Docs() {
    std::vector<ParamDoc> out;
    for (const auto& f : Schema().fields()) out.push_back(f->doc);
    return out;
  }
};

}  // namespace troupe
