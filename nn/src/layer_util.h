// Small helpers of the layer implementations (nn/src only).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/symbol.h"

namespace troupe::nn {

// The single input of a one-input layer; troupe::Error naming the layer otherwise.
inline const Symbol& One(const std::vector<Symbol>& x, const char* layer) {
  if (x.size() != 1) throw Error(std::string(layer) + ": takes one input, got " + std::to_string(x.size()));
  return x[0];
}

inline void RequirePositive(long long v, const char* layer, const char* what) {
  if (v <= 0) throw Error(std::string(layer) + ": " + what + " must be positive, got " + std::to_string(v));
}

// A number as operator parameters take it (shortest form that reads back the same float).
inline std::string Num(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

// MXNet's tuple text: "(3, 3)"; one element as "(3,)".
inline std::string Tuple(const std::vector<int>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

}  // namespace troupe::nn
