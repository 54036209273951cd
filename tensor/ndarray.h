// NDArray — a dynamic, asynchronous n-dimensional array (the seed's "NDArray").
//
// An NDArray owns (shares) a chunk of device memory from Storage and the engine variable that stands for
// it. Every operation on it is a function pushed to the engine with the variables it reads and writes, so
// the caller's thread never waits unless it asks to (WaitToRead, WaitToWrite, SyncCopyToCPU, ...). Views
// (Slice, At, Reshape) share the chunk and its variable with the array they come from, so an update
// through a view is ordered with every other use of the array. Memory goes back to the pool when the last
// array using it is gone and every function pushed on it has run.
//
// Errors: a mistake visible at the call (shapes that do not match, different devices, dtypes or engines,
// an unsupported dtype) throws troupe::Error at once and pushes nothing. A failure while a function runs
// (for instance out of device memory while growing temporary space) poisons the arrays it writes; it is
// rethrown by the next WaitToRead/WaitToWrite/SyncCopyToCPU on them, or by Engine::WaitForAll.
//
// Integer arithmetic follows C: division truncates towards zero, overflow wraps. Integer division by zero
// gives 0 on every device (as NumPy's floor_divide does) rather than trapping.
//
// Thread-safety: an NDArray object is a handle; const member functions may be called from several threads
// at once, and operations on different handles of the same data are ordered by the engine in the order
// their calls returned. A non-const member function must not race with other uses of the same handle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tensor/resource.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

namespace troupe {

namespace autograd {
struct Entry;  // op/src/autograd.cc
}

class NDArray {
 public:
  // A "none" array: no shape, no memory (is_none() is true).
  NDArray() = default;
  // An array of `shape` on `ctx`, its memory taken from Storage::Get() now (so out of memory is reported
  // here). The contents are uninitialised. `engine` null means Engine::Get(). Throws troupe::Error for an
  // unknown shape, a device that does not exist or out of memory.
  NDArray(const TShape& shape, Context ctx, DType dtype = DType::kFloat32, Engine* engine = nullptr);

  static NDArray Zeros(const TShape& shape, Context ctx, DType dtype = DType::kFloat32, Engine* engine = nullptr);
  static NDArray Ones(const TShape& shape, Context ctx, DType dtype = DType::kFloat32, Engine* engine = nullptr);
  static NDArray Full(const TShape& shape, double value, Context ctx, DType dtype = DType::kFloat32,
                      Engine* engine = nullptr);
  // A CPU array holding `values` (pushed, not copied synchronously: `values` is copied into the closure).
  template <typename T>
  static NDArray FromVector(const std::vector<T>& values, const TShape& shape, Context ctx = Context::CPU(),
                            Engine* engine = nullptr) {
    NDArray a(shape, ctx, DTypeOf<T>(), engine);
    a.CopyFromHost(values.data(), values.size() * sizeof(T));
    return a;
  }

  bool is_none() const { return chunk_ == nullptr; }
  const TShape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Context ctx() const;
  Engine* engine() const;
  VarHandle var() const;
  std::int64_t Size() const { return is_none() ? 0 : shape_.Size(); }
  std::size_t Bytes() const { return static_cast<std::size_t>(Size()) * DTypeSize(dtype_); }
  // True when both arrays share the same memory chunk (one is a view of the other, or both of a third).
  bool SharesChunkWith(const NDArray& other) const { return chunk_ != nullptr && chunk_ == other.chunk_; }
  // Byte offset of this view in its chunk.
  std::size_t offset() const { return offset_; }

  // The memory as a TBlob. Only to be dereferenced inside a function pushed with this array's variable
  // (or after WaitToRead/WaitToWrite, until the next operation is pushed).
  TBlob data() const;

  // Blocks until every function pushed so far that writes this array has run (WaitToRead), or every
  // function that reads or writes it (WaitToWrite). Rethrows the error of a failed function that wrote it.
  void WaitToRead() const;
  void WaitToWrite() const;

  // Copies `bytes` bytes of host memory into the array (bytes must equal Bytes()), blocking until done.
  void SyncCopyFromCPU(const void* src, std::size_t bytes);
  // Copies the array into host memory (bytes must equal Bytes()), blocking until done; rethrows errors.
  void SyncCopyToCPU(void* dst, std::size_t bytes) const;
  // The values as a vector of T (T must match dtype()); blocks.
  template <typename T>
  std::vector<T> ToVector() const {
    if (DTypeOf<T>() != dtype_) ThrowBadDType(dtype_, "NDArray::ToVector (element type differs)");
    std::vector<T> out(static_cast<std::size_t>(Size()));
    SyncCopyToCPU(out.data(), out.size() * sizeof(T));
    return out;
  }
  // Pushes a copy of `bytes` bytes of host memory (copied now into the function) into the array.
  void CopyFromHost(const void* src, std::size_t bytes);

  // A new array on `ctx` holding a copy of this one (pushed; GPU copies use the copy lanes).
  NDArray CopyTo(Context ctx) const;
  // The same on `engine`'s arrays. On another engine than this array's, nothing orders the two engines'
  // functions (CopyFromTo refuses them), so the copy blocks: it waits for this array (rethrowing its error)
  // and copies through host memory.
  NDArray CopyTo(Context ctx, Engine* engine) const;
  // A new array of the same shape with the values converted to `dtype` (pushed).
  NDArray AsType(DType dtype) const;

  // Views: they share this array's memory and variable.
  // Rows [begin, end) along the first axis. Throws troupe::Error when out of range.
  NDArray Slice(std::int64_t begin, std::int64_t end) const;
  // Row `index` along the first axis, with that axis dropped.
  NDArray At(std::int64_t index) const;
  // The same elements with another shape. MXNet's special values are accepted: 0 copies the dimension
  // from this shape, -1 is inferred from the rest. Throws troupe::Error when the sizes differ.
  NDArray Reshape(const TShape& shape) const;

  // Fills (pushed).
  NDArray& operator=(double scalar);
  // Uniform in [low, high) and normal(mean, stddev) from the device's kRandom generator (float types).
  void SampleUniform(double low, double high);
  void SampleNormal(double mean, double stddev);

  // Elementwise arithmetic (pushed). Operands must have the same shape, dtype, device and engine.
  NDArray& operator+=(const NDArray& rhs);
  NDArray& operator-=(const NDArray& rhs);
  NDArray& operator*=(const NDArray& rhs);
  NDArray& operator/=(const NDArray& rhs);
  NDArray& operator+=(double rhs);
  NDArray& operator-=(double rhs);
  NDArray& operator*=(double rhs);
  NDArray& operator/=(double rhs);

  // Saves arrays to / loads arrays from MXNet 1.x's NDArray list format (.params; mx.nd.save/load; the
  // layout is described in shared/formats.md §1). `names` is empty (a list) or has one name per array (a
  // dict). Records are V2, byte for byte what MXNet 1.x writes; when any array is 0-d or has a zero
  // dimension (which need NumPy shape semantics), every record is V3, as MXNet writes in its numpy-shape
  // mode (and loads only in that mode); a none array makes a file MXNet's Python API cannot load. Save waits for the arrays (and rethrows a
  // failed producer's error) and replaces the file atomically. Throws troupe::Error naming the file on an
  // I/O error; Load reads V1, V2, V3 and 0.x records (dense storage), checks every field before it
  // allocates anything and names the file and byte offset of the first bad field.
  static void Save(const std::string& path, const std::vector<NDArray>& arrays,
                   const std::vector<std::string>& names = {});
  // Arrays saved from a GPU are loaded onto that GPU when it exists here; every other array (cpu(n),
  // cpu_pinned, cpu_shared, a missing GPU) onto cpu(0). `ctx` (when given) overrides that.
  static void Load(const std::string& path, std::vector<NDArray>* arrays, std::vector<std::string>* names,
                   const Context* ctx = nullptr, Engine* engine = nullptr);
  // The same bytes to and from memory. `source` names the bytes in error messages.
  static std::string SaveToBytes(const std::vector<NDArray>& arrays, const std::vector<std::string>& names = {});
  static void LoadFromBytes(const void* data, std::size_t size, const std::string& source,
                            std::vector<NDArray>* arrays, std::vector<std::string>* names,
                            const Context* ctx = nullptr, Engine* engine = nullptr);
  // One array's record of that format alone (MXNet's MXNDArraySaveRawBytes / MXNDArrayLoadFromRawBytes, what
  // an NDArray pickles as). LoadRawBytes may return a none array (a record of one); it throws as LoadFromBytes.
  static std::string SaveRawBytes(const NDArray& array);
  static NDArray LoadRawBytes(const void* data, std::size_t size, const std::string& source);

  struct Chunk;

 private:
  friend class NDArrayAccess;
  std::shared_ptr<Chunk> chunk_;
  TShape shape_;
  DType dtype_ = DType::kFloat32;
  std::size_t offset_ = 0;
  // The recorded operation that produced this value, or the variable it is (op/autograd.h); null: neither.
  // Copies of the handle share it.
  std::shared_ptr<autograd::Entry> autograd_;
};

// Elementwise arithmetic producing a new array (pushed).
NDArray operator+(const NDArray& lhs, const NDArray& rhs);
NDArray operator-(const NDArray& lhs, const NDArray& rhs);
NDArray operator*(const NDArray& lhs, const NDArray& rhs);
NDArray operator/(const NDArray& lhs, const NDArray& rhs);
NDArray operator+(const NDArray& lhs, double rhs);
NDArray operator-(const NDArray& lhs, double rhs);
NDArray operator*(const NDArray& lhs, double rhs);
NDArray operator/(const NDArray& lhs, double rhs);

// Copies `from` into `to` (same shape and dtype; any devices), pushed.
void CopyFromTo(const NDArray& from, const NDArray& to, int priority = 0);

// Matrix product of 2-D arrays: op(a) x op(b), where op transposes when asked. float32 and float64
// (OpenBLAS cblas_sgemm/dgemm on CPU, cuBLAS on GPU). Throws troupe::Error when the inner dimensions differ.
NDArray Dot(const NDArray& a, const NDArray& b, bool transpose_a = false, bool transpose_b = false);
// The same into an existing array `out` (out = op(a) x op(b), or out += ... when accumulate).
void Dot(const NDArray& a, const NDArray& b, NDArray* out, bool transpose_a = false, bool transpose_b = false,
         bool accumulate = false);

}  // namespace troupe
