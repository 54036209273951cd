#include "op/initializer.h"

#include <cmath>
#include <string>

#include "base/error.h"

namespace troupe {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void CheckArray(const std::string& init, const std::string& name, const NDArray* arr) {
  if (arr == nullptr || arr->is_none()) {
    throw Error("initializer '" + init + "': parameter '" + name + "' has no array (null or none)");
  }
}

struct XavierParam : Params<XavierParam> {
  std::string rnd_type = "uniform";
  std::string factor_type = "avg";
  float magnitude = 3.f;
  static void Declare(ParamSchema<XavierParam>& s) {
    s.Field("rnd_type", &XavierParam::rnd_type)
        .Default("uniform")
        .Choices({"uniform", "gaussian"})
        .Describe("Random distribution: uniform(-scale, scale) or normal(0, scale).");
    s.Field("factor_type", &XavierParam::factor_type)
        .Default("avg")
        .Choices({"avg", "in", "out"})
        .Describe("The fan the scale is computed from: (fan_in + fan_out) / 2, fan_in or fan_out.");
    s.Field("magnitude", &XavierParam::magnitude)
        .Default(3.f)
        .LowerBound(0)
        .Describe("scale = sqrt(magnitude / factor).");
  }
};

struct UniformParam : Params<UniformParam> {
  float scale = 0.07f;
  static void Declare(ParamSchema<UniformParam>& s) {
    s.Field("scale", &UniformParam::scale).Default(0.07f).LowerBound(0).Describe("Values in [-scale, scale).");
  }
};

struct NormalParam : Params<NormalParam> {
  float sigma = 0.01f;
  static void Declare(ParamSchema<NormalParam>& s) {
    s.Field("sigma", &NormalParam::sigma).Default(0.01f).LowerBound(0).Describe("Standard deviation.");
  }
};

struct ConstantParam : Params<ConstantParam> {
  double value = 0;
  static void Declare(ParamSchema<ConstantParam>& s) {
    s.Field("value", &ConstantParam::value).Describe("The value every weight element is set to.");
  }
};

struct NoParam : Params<NoParam> {
  static void Declare(ParamSchema<NoParam>&) {}
};

class XavierInit : public Initializer {
 public:
  explicit XavierInit(const Kwargs& kw) { p_.Init(kw, "initializer 'xavier'"); }
  void InitWeight(const std::string& name, NDArray* arr) const override {
    CheckArray("xavier", name, arr);
    const TShape& s = arr->shape();
    if (s.ndim() < 2) {
      throw Error("initializer 'xavier': parameter '" + name + "' has shape " + s.ToString() +
                  "; Xavier needs at least 2 dimensions (use 'uniform', 'normal' or 'zero' for vectors)");
    }
    // MXNet's Xavier: the receptive field (dimensions 2 and up) multiplies both fans.
    double hw = 1;
    for (int i = 2; i < s.ndim(); ++i) hw *= static_cast<double>(s[i]);
    const double fan_in = static_cast<double>(s[1]) * hw, fan_out = static_cast<double>(s[0]) * hw;
    const double factor = p_.factor_type == "avg" ? (fan_in + fan_out) / 2.0
                          : p_.factor_type == "in" ? fan_in
                                                   : fan_out;
    if (!(factor > 0)) {
      throw Error("initializer 'xavier': parameter '" + name + "' has shape " + s.ToString() + ", whose " +
                  p_.factor_type + " fan is 0");
    }
    const double scale = std::sqrt(static_cast<double>(p_.magnitude) / factor);
    if (p_.rnd_type == "uniform") {
      arr->SampleUniform(-scale, scale);
    } else {
      arr->SampleNormal(0.0, scale);
    }
  }

 private:
  XavierParam p_;
};

class UniformInit : public Initializer {
 public:
  explicit UniformInit(const Kwargs& kw) { p_.Init(kw, "initializer 'uniform'"); }
  void InitWeight(const std::string& name, NDArray* arr) const override {
    CheckArray("uniform", name, arr);
    arr->SampleUniform(-p_.scale, p_.scale);
  }

 private:
  UniformParam p_;
};

class NormalInit : public Initializer {
 public:
  explicit NormalInit(const Kwargs& kw) { p_.Init(kw, "initializer 'normal'"); }
  void InitWeight(const std::string& name, NDArray* arr) const override {
    CheckArray("normal", name, arr);
    arr->SampleNormal(0.0, p_.sigma);
  }

 private:
  NormalParam p_;
};

class ConstantInit : public Initializer {
 public:
  // "zero" and "one" are constants without parameters.
  ConstantInit(const std::string& type, const Kwargs& kw) : type_(type) {
    if (type == "constant") {
      ConstantParam p;
      p.Init(kw, "initializer 'constant'");
      value_ = p.value;
    } else {
      NoParam p;
      p.Init(kw, "initializer '" + type + "'");
      value_ = type == "one" ? 1.0 : 0.0;
    }
  }
  void InitWeight(const std::string& name, NDArray* arr) const override {
    CheckArray(type_, name, arr);
    *arr = value_;
  }

 private:
  std::string type_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Initializer> Initializer::Create(const std::string& name, const Kwargs& params) {
  if (name == "xavier") return std::make_unique<XavierInit>(params);
  if (name == "uniform") return std::make_unique<UniformInit>(params);
  if (name == "normal") return std::make_unique<NormalInit>(params);
  if (name == "constant" || name == "zero" || name == "one") return std::make_unique<ConstantInit>(name, params);
  // Gluon's spellings (mx.init.Zero() registers as "zeros", One() as "ones").
  if (name == "zeros" || name == "ones") return std::make_unique<ConstantInit>(name == "zeros" ? "zero" : "one", params);
  const auto names = ListNames();
  std::string msg = "unknown initializer '" + name + "'; known initializers: ";
  for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
  const std::string similar = SimilarNames(name, names);
  if (!similar.empty()) msg += " (did you mean " + similar + "?)";
  throw Error(msg);
}

std::vector<std::string> Initializer::ListNames() {
  return {"constant", "normal", "one", "ones", "uniform", "xavier", "zero", "zeros"};
}

void Initializer::operator()(const std::string& name, NDArray* arr) const {
  if (arr == nullptr || arr->is_none()) throw Error("initializer: parameter '" + name + "' has no array (null or none)");
  // MXNet's Initializer.__call__ order: weight first, then the fixed rules for the other suffixes.
  if (EndsWith(name, "weight")) {
    InitWeight(name, arr);
  } else if (EndsWith(name, "bias") || EndsWith(name, "beta") || EndsWith(name, "moving_mean") ||
             EndsWith(name, "running_mean") || EndsWith(name, "moving_inv_var") || EndsWith(name, "moving_avg")) {
    *arr = 0.0;
  } else if (EndsWith(name, "gamma") || EndsWith(name, "moving_var") || EndsWith(name, "running_var")) {
    *arr = 1.0;
  } else if (name == "data" || name == "label" || EndsWith(name, "_data") || EndsWith(name, "_label")) {
    throw Error("initializer: '" + name + "' looks like a data or label input, not a parameter; initialise only the " +
                "arguments that are not inputs");
  } else {
    InitWeight(name, arr);
  }
}

}  // namespace troupe
