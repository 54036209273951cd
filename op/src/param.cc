// Parameter parsing (op/param.h).
#include "op/param.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <unordered_set>

#include "base/error.h"

namespace troupe {

namespace {

// Optimal-string-alignment distance (insertions, deletions, substitutions and swaps of neighbours), at most
// `limit + 1`: enough to tell whether two names are within `limit` edits.
std::size_t EditDistance(const std::string& a, const std::string& b, std::size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) return limit + 1;
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return std::min(d[a.size()][b.size()], limit + 1);
}

}  // namespace

std::vector<std::string> SimilarNameList(const std::string& name, const std::vector<std::string>& candidates) {
  auto lower = [](std::string x) {
    for (auto& c : x) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return x;
  };
  const std::string l = lower(name);
  std::vector<std::string> out;
  if (l.empty()) return out;
  // Typos: one edit in a short name, two in a longer one ("trian" -> "train", "epocs" -> "epochs").
  const std::size_t typos = l.size() <= 4 ? 1 : 2;
  for (const auto& c : candidates) {
    const std::string lc = lower(c);
    const std::size_t k = std::min<std::size_t>(3, std::min(lc.size(), l.size()));
    // One name part of the other counts from three letters on ("a" is part of too many names).
    const bool part = std::min(l.size(), lc.size()) >= 3 && (lc.find(l) != std::string::npos || l.find(lc) != std::string::npos);
    if (lc == l || lc.compare(0, k, l, 0, k) == 0 || part || EditDistance(l, lc, typos) <= typos) out.push_back(c);
  }
  return out;
}

std::string SimilarNames(const std::string& name, const std::vector<std::string>& candidates) {
  std::string out;
  for (const std::string& n : SimilarNameList(name, candidates)) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace troupe

namespace troupe::param_detail {
namespace {

std::string Trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// "0.5" -> "0.5", 3 -> "3"; the same for the accepted-range text.
std::string Num(double v) { return PrintReal(v); }

}  // namespace

bool ParseBool(const std::string& raw) {
  const std::string s = Trim(raw);
  if (s == "True" || s == "true" || s == "1") return true;
  if (s == "False" || s == "false" || s == "0") return false;
  throw std::invalid_argument("not a boolean");
}

std::int64_t ParseInt(const std::string& raw) {
  const std::string s = Trim(raw);
  std::int64_t v = 0;
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec == std::errc::result_out_of_range) throw std::invalid_argument("integer out of range");
  if (ec != std::errc() || p != e || b == e) throw std::invalid_argument("not an integer");
  return v;
}

double ParseReal(const std::string& raw) {
  const std::string s = Trim(raw);
  if (s.empty()) throw std::invalid_argument("not a number");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) throw std::invalid_argument("not a number");
  if (errno == ERANGE && std::isinf(v)) throw std::invalid_argument("number out of range");
  return v;
}

namespace {

// The items of a tuple text: "(3, 3)", "[3,3]", "(3,)", "()" or a bare "3"; "None" items are kept as
// nullopt when allow_none, otherwise an error.
std::vector<std::optional<std::int64_t>> ParseTupleItems(const std::string& raw, bool allow_none) {
  std::string s = Trim(raw);
  if (!s.empty() && (s.front() == '(' || s.front() == '[')) {
    const char close = s.front() == '(' ? ')' : ']';
    if (s.back() != close) throw std::invalid_argument("unbalanced brackets in tuple");
    s = s.substr(1, s.size() - 2);
  } else if (s.empty()) {
    throw std::invalid_argument("empty tuple text (write () for an empty tuple)");
  }
  std::vector<std::optional<std::int64_t>> out;
  std::size_t pos = 0;
  const std::string body = Trim(s);
  if (body.empty()) return out;
  while (pos <= body.size()) {
    const std::size_t comma = body.find(',', pos);
    const std::string item = Trim(body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (item.empty()) {
      // A trailing comma, as in "(3,)", is fine; an empty item elsewhere is not.
      if (comma == std::string::npos && !out.empty()) break;
      throw std::invalid_argument("empty item in tuple");
    }
    if (item == "None") {
      if (!allow_none) throw std::invalid_argument("None inside a tuple");
      out.emplace_back(std::nullopt);
    } else {
      out.emplace_back(ParseInt(item));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::int64_t> ParseTuple(const std::string& raw) {
  std::vector<std::int64_t> out;
  for (const auto& v : ParseTupleItems(raw, false)) out.push_back(*v);
  return out;
}

std::vector<std::optional<std::int64_t>> ParseOptionalTuple(const std::string& raw) {
  return ParseTupleItems(raw, true);
}

std::string PrintReal(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string PrintFloat(float v) {
  if (std::isnan(v) || std::isinf(v)) return PrintReal(v);
  char buf[64];
  for (int prec = 1; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

std::string PrintTuple(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(v[i]);
  }
  if (v.size() == 1) s += ",";
  return s + ")";
}

std::string PrintOptionalTuple(const std::vector<std::optional<std::int64_t>>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ", ";
    s += v[i] ? std::to_string(*v[i]) : "None";
  }
  if (v.size() == 1) s += ",";
  return s + ")";
}

int Codec<int>::Parse(const std::string& s) {
  const std::int64_t v = ParseInt(s);
  if (v < INT_MIN || v > INT_MAX) throw std::invalid_argument("integer out of range");
  return static_cast<int>(v);
}

TShape Codec<TShape>::Parse(const std::string& s) {
  const std::vector<std::int64_t> v = ParseTuple(s);
  if (v.size() > static_cast<std::size_t>(TShape::kMaxDims)) throw std::invalid_argument("more than 8 dimensions");
  for (auto d : v) {
    if (d < 0) throw std::invalid_argument("negative size in shape");
  }
  return TShape(v);
}

std::string FieldEntry::Accepted() const {
  if (!choices.empty()) return "one of " + doc.type;
  std::string t = doc.type;
  if (has_lower && has_upper) return t + " in [" + Num(lower) + ", " + Num(upper) + "]";
  if (has_lower) return t + " >= " + Num(lower);
  if (has_upper) return t + " <= " + Num(upper);
  return t;
}

void InitFields(const std::vector<std::unique_ptr<FieldEntry>>& fields, void* obj, const Kwargs& kwargs,
                const std::string& op) {
  for (const auto& f : fields) f->reset(obj);
  std::unordered_set<const FieldEntry*> seen;
  for (const auto& [key, value] : kwargs) {
    const FieldEntry* field = nullptr;
    for (const auto& f : fields) {
      if (f->doc.name == key) field = f.get();
    }
    if (field == nullptr) {
      // MXNet's hidden attributes ("__lr_mult__", "__init__") are for the graph, not the operator.
      if (key.size() > 4 && key.starts_with("__") && key.ends_with("__")) continue;
      std::string names;
      for (const auto& f : fields) names += (names.empty() ? "" : ", ") + f->doc.name;
      throw Error(op + ": unknown parameter '" + key + "'; accepted parameters: " +
                  (names.empty() ? "none" : names));
    }
    const std::string bad = op + ": parameter '" + key + "' must be " +
                            (field->choices.empty() ? "a value of type " : "") + field->Accepted() + ", got '" +
                            value + "'";
    if (!field->choices.empty()) {
      bool ok = false;
      for (const auto& c : field->choices) ok = ok || c == value;
      if (!ok) throw Error(bad);
    }
    try {
      field->set(obj, value);
    } catch (const std::invalid_argument& e) {
      throw Error(bad + " (" + e.what() + ")");
    }
    if (field->has_lower || field->has_upper) {
      const double v = field->number(obj);
      if ((field->has_lower && v < field->lower) || (field->has_upper && v > field->upper)) throw Error(bad);
    }
    seen.insert(field);
  }
  for (const auto& f : fields) {
    if (f->doc.required && seen.count(f.get()) == 0) {
      throw Error(op + ": required parameter '" + f->doc.name + "' (" + f->Accepted() + ") is missing");
    }
  }
}

}  // namespace troupe::param_detail
