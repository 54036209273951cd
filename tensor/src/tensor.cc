#include "tensor/tensor.h"

#include <limits>
#include <sstream>

namespace troupe {

std::size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kUint8: return 1;
    case DType::kInt32: return 4;
    case DType::kInt8: return 1;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
    case DType::kBfloat16: return 2;
  }
  ThrowBadDType(dtype, "DTypeSize");
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kUint8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt8: return "int8";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kBfloat16: return "bfloat16";
  }
  return "invalid";
}

namespace {
constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kUint8, DType::kInt32,
                                DType::kInt8,    DType::kInt64,   DType::kBool,    DType::kBfloat16};
}  // namespace

DType DTypeFromName(const std::string& name) {
  std::string accepted;
  for (DType d : kAllDTypes) {
    if (name == DTypeName(d)) return d;
    accepted += accepted.empty() ? "" : ", ";
    accepted += DTypeName(d);
  }
  throw Error("unknown dtype '" + name + "': use one of " + accepted);
}

bool IsValidDTypeFlag(int flag) { return (flag >= 0 && flag <= 7) || flag == 12; }

void ThrowBadDType(DType dtype, const char* what) {
  const int flag = static_cast<int>(dtype);
  if (!IsValidDTypeFlag(flag)) {
    throw Error(std::string(what) + ": " + std::to_string(flag) + " is not a dtype (valid flags: 0-7, 12)");
  }
  throw Error(std::string(what) + ": dtype " + DTypeName(dtype) + " is not supported here");
}

TShape::TShape(std::initializer_list<std::int64_t> dims) : TShape(std::vector<std::int64_t>(dims)) {}

TShape::TShape(const std::vector<std::int64_t>& dims) {
  if (dims.size() > static_cast<std::size_t>(kMaxDims)) {
    throw Error("shape with " + std::to_string(dims.size()) + " dimensions: troupe supports at most " +
                std::to_string(kMaxDims));
  }
  ndim_ = static_cast<int>(dims.size());
  for (int i = 0; i < ndim_; ++i) {
    if (dims[i] < -1) throw Error("shape dimension " + std::to_string(i) + " is " + std::to_string(dims[i]) +
                                  ": dimensions are >= 0 (or -1 for unknown)");
    dims_[i] = dims[i];
  }
}

TShape TShape::Filled(int ndim, std::int64_t value) {
  if (ndim < 0) return TShape();
  return TShape(std::vector<std::int64_t>(static_cast<std::size_t>(ndim), value));
}

bool TShape::known() const {
  if (ndim_ < 0) return false;
  for (int i = 0; i < ndim_; ++i) {
    if (dims_[i] < 0) return false;
  }
  return true;
}

std::int64_t TShape::ProdDims(int begin, int end) const {
  std::int64_t p = 1;
  for (int i = begin; i < end; ++i) {
    if (dims_[i] < 0) throw Error("size of shape " + ToString() + ": the shape is not known");
    if (dims_[i] != 0 && p > std::numeric_limits<std::int64_t>::max() / dims_[i]) {
      throw Error("size of shape " + ToString() + " overflows 64 bits");
    }
    p *= dims_[i];
  }
  return p;
}

std::int64_t TShape::Size() const {
  if (ndim_ < 0) throw Error("size of an unknown shape");
  return ProdDims(0, ndim_);
}

bool TShape::operator==(const TShape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i) {
    if (dims_[i] != o.dims_[i]) return false;
  }
  return true;
}

std::string TShape::ToString() const {
  if (ndim_ < 0) return "(?)";
  std::ostringstream s;
  s << '(';
  for (int i = 0; i < ndim_; ++i) {
    if (i) s << ',';
    if (dims_[i] < 0) {
      s << '?';
    } else {
      s << dims_[i];
    }
  }
  if (ndim_ == 1) s << ',';
  s << ')';
  return s.str();
}

}  // namespace troupe
