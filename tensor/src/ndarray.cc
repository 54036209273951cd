#include "tensor/ndarray.h"

#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "tensor/detail/kernels.h"
#include "tensor/detail/ndarray_access.h"

namespace troupe {

// The memory and the engine variable that NDArrays (an array and its views) share.
struct NDArray::Chunk {
  std::shared_ptr<Storage> storage;
  StorageHandle handle;
  Engine* engine = nullptr;
  VarHandle var = nullptr;
  Context ctx;

  Chunk(std::size_t bytes, Context c, Engine* e) : storage(Storage::Get()), engine(e), ctx(c) {
    handle = storage->Alloc(bytes, ctx);
    var = engine->NewVariable();
  }
  ~Chunk() {
    // The memory goes back to the pool once every function pushed on the variable has run.
    engine->DeleteVariable([storage = storage, handle = handle](RunContext) { storage->Free(handle); },
                           ctx, var);
  }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
};

namespace {

using internal::BinaryOp;

Engine* EngineOr(Engine* e) { return e != nullptr ? e : Engine::Get(); }

void CheckNotNone(const NDArray& a, const char* op) {
  if (a.is_none()) throw Error(std::string(op) + ": the array is none (default-constructed); give it a shape first");
}

// Operands of an elementwise operation must agree in everything.
void CheckSame(const char* op, const NDArray& a, const NDArray& b) {
  CheckNotNone(a, op);
  CheckNotNone(b, op);
  if (a.shape() != b.shape()) {
    throw Error(std::string(op) + ": shapes differ: " + a.shape().ToString() + " and " + b.shape().ToString());
  }
  if (a.dtype() != b.dtype()) {
    throw Error(std::string(op) + ": dtypes differ: " + DTypeName(a.dtype()) + " and " + DTypeName(b.dtype()) +
                "; convert one to the other's dtype first (NDArray::AsType; astype() in troupe shell)");
  }
  if (a.ctx() != b.ctx()) {
    throw Error(std::string(op) + ": arrays are on different devices: " + a.ctx().ToString() + " and " +
                b.ctx().ToString() + "; copy one to the other's device first (NDArray::CopyTo)");
  }
  if (a.engine() != b.engine()) throw Error(std::string(op) + ": arrays belong to different engines");
}

void CheckArithmetic(const NDArray& a, BinaryOp op) {
  if (a.dtype() == DType::kBool) {
    throw Error(std::string("arithmetic '") + internal::BinaryOpName(op) +
                "' is not defined for dtype bool; convert it to a number type first (NDArray::AsType; astype() in troupe shell)");
  }
}

// True when the two views' bytes overlap.
bool Overlaps(const NDArray& a, const NDArray& b) {
  return a.SharesChunkWith(b) && a.offset() < b.offset() + b.Bytes() && b.offset() < a.offset() + a.Bytes();
}

// True when the views overlap without being the same range: an elementwise kernel reading one while
// writing the other would see values it already overwrote.
bool PartialOverlap(const NDArray& a, const NDArray& b) {
  return Overlaps(a, b) && !(a.offset() == b.offset() && a.Bytes() == b.Bytes());
}

void Push(Engine* engine, Context ctx, SyncFn fn, std::vector<VarHandle> reads, std::vector<VarHandle> writes,
          const char* name, FnProperty prop = FnProperty::kNormal, int priority = 0) {
  engine->PushSync(std::move(fn), ctx, reads, writes, prop, priority, name);
}

void RunBinary(BinaryOp op, const TBlob& a, const TBlob& b, const TBlob& out, RunContext rctx) {
  if (out.ctx.is_gpu()) {
    internal::GpuBinary(op, a, b, out, rctx.stream);
  } else {
    internal::CpuBinary(op, a, b, out);
  }
}

void RunBinaryScalar(BinaryOp op, const TBlob& a, double s, const TBlob& out, RunContext rctx) {
  if (out.ctx.is_gpu()) {
    internal::GpuBinaryScalar(op, a, s, out, rctx.stream);
  } else {
    internal::CpuBinaryScalar(op, a, s, out);
  }
}

// out = a op b, where out may be a itself (in place).
void PushBinary(BinaryOp op, const NDArray& a, const NDArray& b, const NDArray& out) {
  for (const NDArray* x : {&a, &b, &out}) internal::RefuseRecorded(*x, internal::BinaryOpName(op));
  CheckSame(internal::BinaryOpName(op), a, b);
  CheckArithmetic(a, op);
  if (PartialOverlap(b, out)) {
    PushBinary(op, a, b.CopyTo(b.ctx()), out);
    return;
  }
  if (PartialOverlap(a, out)) {
    PushBinary(op, a.CopyTo(a.ctx()), b, out);
    return;
  }
  const TBlob ta = a.data(), tb = b.data(), to = out.data();
  Push(out.engine(), out.ctx(), [op, ta, tb, to](RunContext rctx) { RunBinary(op, ta, tb, to, rctx); },
       {a.var(), b.var()}, {out.var()}, internal::BinaryOpName(op));
}

void PushBinaryScalar(BinaryOp op, const NDArray& a, double s, const NDArray& out) {
  for (const NDArray* x : {&a, &out}) internal::RefuseRecorded(*x, internal::BinaryOpName(op));
  CheckNotNone(a, internal::BinaryOpName(op));
  CheckArithmetic(a, op);
  const TBlob ta = a.data(), to = out.data();
  Push(out.engine(), out.ctx(), [op, ta, s, to](RunContext rctx) { RunBinaryScalar(op, ta, s, to, rctx); },
       {a.var()}, {out.var()}, internal::BinaryOpName(op));
}

// The registered operators that record NDArray's arithmetic (see tensor/detail/ndarray_access.h).
const char* RecordedBinary(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "elemwise_add";
    case BinaryOp::kSub: return "elemwise_sub";
    case BinaryOp::kMul: return "elemwise_mul";
    case BinaryOp::kDiv: return "elemwise_div";
  }
  return "";
}
const char* RecordedScalar(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "_plus_scalar";
    case BinaryOp::kSub: return "_minus_scalar";
    case BinaryOp::kMul: return "_mul_scalar";
    case BinaryOp::kDiv: return "_div_scalar";
  }
  return "";
}

std::string ExactText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

NDArray Binary(BinaryOp op, const NDArray& a, const NDArray& b) {
  CheckSame(internal::BinaryOpName(op), a, b);
  if (internal::MustRecord({&a, &b})) return internal::InvokeRecorded(RecordedBinary(op), {a, b});
  NDArray out(a.shape(), a.ctx(), a.dtype(), a.engine());
  PushBinary(op, a, b, out);
  return out;
}

NDArray BinaryScalar(BinaryOp op, const NDArray& a, double s) {
  CheckNotNone(a, internal::BinaryOpName(op));
  if (internal::MustRecord({&a})) return internal::InvokeRecorded(RecordedScalar(op), {a}, {{"scalar", ExactText(s)}});
  NDArray out(a.shape(), a.ctx(), a.dtype(), a.engine());
  PushBinaryScalar(op, a, s, out);
  return out;
}

bool OnHost(Context c) { return c.dev_type != DeviceType::kGPU; }

// Pushes a function that reads `a` (with no other effect on it) and waits for it; rethrows the error of
// the function or of anything `a` depends on. The function writes a private variable so that its own
// failure (which poisons what it writes) is seen here rather than lost.
void PushReadAndWait(const NDArray& a, SyncFn fn, FnProperty prop, Context exec, const char* name) {
  Engine* engine = a.engine();
  VarHandle done = engine->NewVariable();
  engine->PushSync(std::move(fn), exec, {a.var()}, {done}, prop, 0, name);
  std::exception_ptr error;
  try {
    engine->WaitForVar(done);
  } catch (...) {
    error = std::current_exception();
  }
  engine->DeleteVariable([](RunContext) {}, exec, done);
  if (error) std::rethrow_exception(error);
}

}  // namespace

// ---- construction and properties -------------------------------------------------------------------

NDArray::NDArray(const TShape& shape, Context ctx, DType dtype, Engine* engine) : shape_(shape), dtype_(dtype) {
  if (!shape.known()) throw Error("NDArray: shape " + shape.ToString() + " is not fully known");
  const std::size_t bytes = static_cast<std::size_t>(shape.Size()) * DTypeSize(dtype);
  chunk_ = std::make_shared<Chunk>(bytes, ctx, EngineOr(engine));
}

NDArray NDArray::Zeros(const TShape& shape, Context ctx, DType dtype, Engine* engine) {
  return Full(shape, 0.0, ctx, dtype, engine);
}

NDArray NDArray::Ones(const TShape& shape, Context ctx, DType dtype, Engine* engine) {
  return Full(shape, 1.0, ctx, dtype, engine);
}

NDArray NDArray::Full(const TShape& shape, double value, Context ctx, DType dtype, Engine* engine) {
  NDArray a(shape, ctx, dtype, engine);
  a = value;
  return a;
}

Context NDArray::ctx() const { return chunk_ ? chunk_->ctx : Context{}; }
Engine* NDArray::engine() const { return chunk_ ? chunk_->engine : nullptr; }
VarHandle NDArray::var() const { return chunk_ ? chunk_->var : nullptr; }

TBlob NDArray::data() const {
  if (!chunk_) return TBlob();
  return TBlob(static_cast<char*>(chunk_->handle.dptr) + offset_, shape_, dtype_, chunk_->ctx);
}

void NDArray::WaitToRead() const {
  if (chunk_) chunk_->engine->WaitForVar(chunk_->var);
}

void NDArray::WaitToWrite() const {
  if (chunk_) chunk_->engine->WaitForVar(chunk_->var);
}

// ---- host copies ---------------------------------------------------------------------------------------

namespace {

void CheckBytes(const char* op, const NDArray& a, std::size_t bytes) {
  CheckNotNone(a, op);
  if (bytes != a.Bytes()) {
    throw Error(std::string(op) + ": " + std::to_string(bytes) + " bytes given, the " + a.shape().ToString() + " " +
                DTypeName(a.dtype()) + " array holds " + std::to_string(a.Bytes()));
  }
}

}  // namespace

void NDArray::SyncCopyFromCPU(const void* src, std::size_t bytes) {
  CheckBytes("SyncCopyFromCPU", *this, bytes);
  const TBlob dst = data();
  if (OnHost(ctx())) {
    Push(engine(), ctx(), [dst, src, bytes](RunContext) { std::memcpy(dst.dptr, src, bytes); }, {}, {var()},
         "SyncCopyFromCPU");
  } else {
    Push(engine(), ctx(),
         [dst, src, bytes](RunContext rctx) {
           internal::GpuCopy(dst.dptr, src, bytes, internal::CopyKind::kHostToDevice, dst.ctx.dev_id, rctx.stream);
         },
         {}, {var()}, "SyncCopyFromCPU", FnProperty::kCopyToGPU);
  }
  WaitToWrite();
}

void NDArray::SyncCopyToCPU(void* dst, std::size_t bytes) const {
  CheckBytes("SyncCopyToCPU", *this, bytes);
  const TBlob src = data();
  if (OnHost(ctx())) {
    PushReadAndWait(*this, [dst, src, bytes](RunContext) { std::memcpy(dst, src.dptr, bytes); }, FnProperty::kNormal,
                    ctx(), "SyncCopyToCPU");
  } else {
    PushReadAndWait(*this,
                    [dst, src, bytes](RunContext rctx) {
                      internal::GpuCopy(dst, src.dptr, bytes, internal::CopyKind::kDeviceToHost, src.ctx.dev_id,
                                        rctx.stream);
                    },
                    FnProperty::kCopyFromGPU, ctx(), "SyncCopyToCPU");
  }
}

void NDArray::CopyFromHost(const void* src, std::size_t bytes) {
  CheckBytes("CopyFromHost", *this, bytes);
  auto buffer = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
  const TBlob dst = data();
  if (OnHost(ctx())) {
    Push(engine(), ctx(), [dst, buffer](RunContext) { std::memcpy(dst.dptr, buffer->data(), buffer->size()); }, {},
         {var()}, "CopyFromHost");
  } else {
    // From pageable memory, cudaMemcpyAsync has staged the bytes when it returns: the buffer may go then.
    Push(engine(), ctx(),
         [dst, buffer](RunContext rctx) {
           internal::GpuCopy(dst.dptr, buffer->data(), buffer->size(), internal::CopyKind::kHostToDevice, dst.ctx.dev_id,
                             rctx.stream);
         },
         {}, {var()}, "CopyFromHost", FnProperty::kCopyToGPU);
  }
}

// ---- copies between devices ------------------------------------------------------------------------

void CopyFromTo(const NDArray& from, const NDArray& to, int priority) {
  CheckNotNone(from, "CopyFromTo");
  CheckNotNone(to, "CopyFromTo");
  internal::RefuseRecorded(to, "CopyFromTo");
  if (from.shape() != to.shape() || from.dtype() != to.dtype()) {
    throw Error("CopyFromTo: source " + from.shape().ToString() + " " + DTypeName(from.dtype()) + " and target " +
                to.shape().ToString() + " " + DTypeName(to.dtype()) + " differ; use AsType or Reshape first");
  }
  if (from.engine() != to.engine()) throw Error("CopyFromTo: arrays belong to different engines");
  if (PartialOverlap(from, to)) {
    CopyFromTo(from.CopyTo(from.ctx()), to, priority);
    return;
  }
  Engine* engine = to.engine();
  const TBlob src = from.data(), dst = to.data();
  const std::size_t bytes = to.Bytes();
  const Context fc = from.ctx(), tc = to.ctx();
  const std::vector<VarHandle> reads = {from.var()}, writes = {to.var()};
  if (OnHost(fc) && OnHost(tc)) {
    engine->PushSync([src, dst, bytes](RunContext) { std::memmove(dst.dptr, src.dptr, bytes); },
                     tc, reads, writes, FnProperty::kNormal, priority, "CopyCPU");
  } else if (OnHost(fc)) {
    engine->PushSync(
        [src, dst, bytes](RunContext rctx) {
          internal::GpuCopy(dst.dptr, src.dptr, bytes, internal::CopyKind::kHostToDevice, dst.ctx.dev_id, rctx.stream);
        },
        tc, reads, writes, FnProperty::kCopyToGPU, priority, "CopyCPU2GPU");
  } else if (OnHost(tc)) {
    engine->PushSync(
        [src, dst, bytes](RunContext rctx) {
          internal::GpuCopy(dst.dptr, src.dptr, bytes, internal::CopyKind::kDeviceToHost, src.ctx.dev_id, rctx.stream);
        },
        fc, reads, writes, FnProperty::kCopyFromGPU, priority, "CopyGPU2CPU");
  } else if (fc == tc) {
    engine->PushSync(
        [src, dst, bytes](RunContext rctx) {
          internal::GpuCopy(dst.dptr, src.dptr, bytes, internal::CopyKind::kDeviceToDevice, dst.ctx.dev_id, rctx.stream);
        },
        tc, reads, writes, FnProperty::kNormal, priority, "CopyGPU");
  } else {
    engine->PushSync(
        [src, dst, bytes](RunContext rctx) {
          internal::GpuCopyPeer(dst.dptr, dst.ctx.dev_id, src.dptr, src.ctx.dev_id, bytes, rctx.stream);
        },
        tc, reads, writes, FnProperty::kCopyToGPU, priority, "CopyGPU2GPU");
  }
}

NDArray NDArray::CopyTo(Context ctx) const { return CopyTo(ctx, engine()); }

NDArray NDArray::CopyTo(Context ctx, Engine* engine) const {
  CheckNotNone(*this, "CopyTo");
  NDArray out(shape_, ctx, dtype_, engine);
  if (out.engine() == this->engine()) {
    CopyFromTo(*this, out);
  } else if (OnHost(ctx)) {
    SyncCopyToCPU(out.data().dptr, Bytes());  // `out` is new: no function of its engine touches it yet
  } else {
    std::vector<char> host(Bytes());
    SyncCopyToCPU(host.data(), host.size());
    out.SyncCopyFromCPU(host.data(), host.size());
  }
  return out;
}

NDArray NDArray::AsType(DType dtype) const {
  CheckNotNone(*this, "AsType");
  if (internal::MustRecord({this})) return internal::InvokeRecorded("Cast", {*this}, {{"dtype", DTypeName(dtype)}});
  DTypeSize(dtype);  // validates
  NDArray out(shape_, ctx(), dtype, engine());
  const TBlob in = data(), o = out.data();
  Push(engine(), ctx(),
       [in, o](RunContext rctx) {
         if (o.ctx.is_gpu()) {
           internal::GpuCast(in, o, rctx.stream);
         } else {
           internal::CpuCast(in, o);
         }
       },
       {var()}, {out.var()}, "AsType");
  return out;
}

// ---- views -----------------------------------------------------------------------------------------

NDArray NDArray::Slice(std::int64_t begin, std::int64_t end) const {
  CheckNotNone(*this, "Slice");
  if (shape_.ndim() < 1) throw Error("Slice: a scalar (0-d array) has no first axis to slice");
  if (begin < 0 || end < begin || end > shape_[0]) {
    throw Error("Slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") is out of range for shape " +
                shape_.ToString());
  }
  if (internal::MustRecord({this})) {  // a recorded copy, as MXNet records slicing
    return internal::InvokeRecorded("slice_axis", {*this},
                                    {{"axis", "0"}, {"begin", std::to_string(begin)}, {"end", std::to_string(end)}});
  }
  NDArray v = *this;
  v.autograd_.reset();  // another value than the array's: not its node
  v.shape_[0] = end - begin;
  v.offset_ += static_cast<std::size_t>(begin * shape_.ProdDims(1, shape_.ndim())) * DTypeSize(dtype_);
  return v;
}

NDArray NDArray::At(std::int64_t index) const {
  CheckNotNone(*this, "At");
  if (shape_.ndim() < 1) throw Error("At: a scalar (0-d array) has no first axis to index");
  if (index < 0 || index >= shape_[0]) {
    throw Error("At(" + std::to_string(index) + ") is out of range for shape " + shape_.ToString());
  }
  NDArray v = Slice(index, index + 1);
  std::vector<std::int64_t> dims(shape_.begin() + 1, shape_.end());
  if (internal::MustRecord({this})) return v.Reshape(TShape(dims));  // both recorded
  v.shape_ = TShape(dims);
  return v;
}

NDArray NDArray::Reshape(const TShape& shape) const {
  CheckNotNone(*this, "Reshape");
  if (shape.ndim() < 0) throw Error("Reshape: the target shape is unknown");
  std::vector<std::int64_t> dims = shape.ToVector();
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    if (dims[i] == 0) {
      if (i >= shape_.ndim()) {
        throw Error("Reshape " + shape_.ToString() + " to " + shape.ToString() + ": 0 at position " +
                    std::to_string(i) + " copies a dimension the array does not have");
      }
      dims[i] = shape_[i];
    }
    if (dims[i] == -1) {
      if (infer >= 0) throw Error("Reshape to " + shape.ToString() + ": at most one dimension may be -1");
      infer = i;
    } else {
      known *= dims[i];
    }
  }
  const std::int64_t size = shape_.Size();
  if (infer >= 0) {
    if (known == 0 || size % known != 0) {
      throw Error("Reshape " + shape_.ToString() + " to " + shape.ToString() + ": cannot infer the -1 dimension");
    }
    dims[infer] = size / known;
    known *= dims[infer];
  }
  if (known != size) {
    throw Error("Reshape " + shape_.ToString() + " (" + std::to_string(size) + " elements) to " + shape.ToString() +
                " (" + std::to_string(known) + " elements): sizes differ");
  }
  if (internal::MustRecord({this})) return internal::InvokeRecorded("Reshape", {*this}, {{"shape", TShape(dims).ToString()}});
  NDArray v = *this;
  v.autograd_.reset();  // another value than the array's: not its node
  v.shape_ = TShape(dims);
  return v;
}

// ---- fills and random ------------------------------------------------------------------------------

NDArray& NDArray::operator=(double scalar) {
  CheckNotNone(*this, "fill");
  internal::RefuseRecorded(*this, "fill");
  const TBlob o = data();
  Push(engine(), ctx(),
       [o, scalar](RunContext rctx) {
         if (o.ctx.is_gpu()) {
           internal::GpuFill(o, scalar, rctx.stream);
         } else {
           internal::CpuFill(o, scalar);
         }
       },
       {}, {var()}, "fill");
  return *this;
}

namespace {

void PushSample(NDArray* a, internal::Distribution dist, double p1, double p2) {
  const bool normal = dist == internal::Distribution::kNormal;
  const char* name = normal ? "SampleNormal" : "SampleUniform";
  CheckNotNone(*a, name);
  if (a->dtype() != DType::kFloat32 && a->dtype() != DType::kFloat64 && a->dtype() != DType::kFloat16 &&
      a->dtype() != DType::kBfloat16) {
    throw Error(std::string(name) + ": random sampling needs a floating dtype, not " + DTypeName(a->dtype()));
  }
  if (normal && !(p2 >= 0)) throw Error("SampleNormal: stddev must be >= 0, not " + std::to_string(p2));
  if (!normal && !(p1 <= p2)) {
    throw Error("SampleUniform: low (" + std::to_string(p1) + ") must not exceed high (" + std::to_string(p2) + ")");
  }
  const Resource res = ResourceManager::Get(a->engine())->Request(a->ctx(), ResourceRequest::kRandom);
  const TBlob o = a->data();
  Push(a->engine(), a->ctx(),
       [o, res, dist, p1, p2](RunContext rctx) {
         RandomGenerator* g = res.get_random();
         const std::uint64_t base = g->Reserve(internal::SampleBlocks(o.Size(), o.dtype, dist));
         if (o.ctx.is_gpu()) {
           internal::GpuSample(dist, o, g->key(), base, p1, p2, rctx.stream);
         } else {
           internal::CpuSample(dist, o, g->key(), base, p1, p2);
         }
       },
       {}, {a->var(), res.var()}, name);
}

}  // namespace

void NDArray::SampleUniform(double low, double high) {
  PushSample(this, internal::Distribution::kUniform, low, high);
}
void NDArray::SampleNormal(double mean, double stddev) {
  PushSample(this, internal::Distribution::kNormal, mean, stddev);
}

// ---- arithmetic ------------------------------------------------------------------------------------

NDArray& NDArray::operator+=(const NDArray& rhs) {
  PushBinary(BinaryOp::kAdd, *this, rhs, *this);
  return *this;
}
NDArray& NDArray::operator-=(const NDArray& rhs) {
  PushBinary(BinaryOp::kSub, *this, rhs, *this);
  return *this;
}
NDArray& NDArray::operator*=(const NDArray& rhs) {
  PushBinary(BinaryOp::kMul, *this, rhs, *this);
  return *this;
}
NDArray& NDArray::operator/=(const NDArray& rhs) {
  PushBinary(BinaryOp::kDiv, *this, rhs, *this);
  return *this;
}
NDArray& NDArray::operator+=(double rhs) {
  PushBinaryScalar(BinaryOp::kAdd, *this, rhs, *this);
  return *this;
}
NDArray& NDArray::operator-=(double rhs) {
  PushBinaryScalar(BinaryOp::kSub, *this, rhs, *this);
  return *this;
}
NDArray& NDArray::operator*=(double rhs) {
  PushBinaryScalar(BinaryOp::kMul, *this, rhs, *this);
  return *this;
}
NDArray& NDArray::operator/=(double rhs) {
  PushBinaryScalar(BinaryOp::kDiv, *this, rhs, *this);
  return *this;
}

NDArray operator+(const NDArray& lhs, const NDArray& rhs) { return Binary(BinaryOp::kAdd, lhs, rhs); }
NDArray operator-(const NDArray& lhs, const NDArray& rhs) { return Binary(BinaryOp::kSub, lhs, rhs); }
NDArray operator*(const NDArray& lhs, const NDArray& rhs) { return Binary(BinaryOp::kMul, lhs, rhs); }
NDArray operator/(const NDArray& lhs, const NDArray& rhs) { return Binary(BinaryOp::kDiv, lhs, rhs); }
NDArray operator+(const NDArray& lhs, double rhs) { return BinaryScalar(BinaryOp::kAdd, lhs, rhs); }
NDArray operator-(const NDArray& lhs, double rhs) { return BinaryScalar(BinaryOp::kSub, lhs, rhs); }
NDArray operator*(const NDArray& lhs, double rhs) { return BinaryScalar(BinaryOp::kMul, lhs, rhs); }
NDArray operator/(const NDArray& lhs, double rhs) { return BinaryScalar(BinaryOp::kDiv, lhs, rhs); }

// ---- Dot -------------------------------------------------------------------------------------------

namespace {

struct GemmDims {
  int m = 0, n = 0, k = 0;
};

GemmDims CheckDot(const NDArray& a, const NDArray& b, bool ta, bool tb) {
  CheckNotNone(a, "Dot");
  CheckNotNone(b, "Dot");
  if (a.shape().ndim() != 2 || b.shape().ndim() != 2) {
    throw Error("Dot: both arrays must be 2-D, got " + a.shape().ToString() + " and " + b.shape().ToString());
  }
  if (a.dtype() != b.dtype()) {
    throw Error(std::string("Dot: dtypes differ: ") + DTypeName(a.dtype()) + " and " + DTypeName(b.dtype()));
  }
  if (a.dtype() != DType::kFloat32 && a.dtype() != DType::kFloat64) {
    throw Error(std::string("Dot: dtype ") + DTypeName(a.dtype()) + " is not supported (float32, float64)");
  }
  if (a.ctx() != b.ctx()) {
    throw Error("Dot: arrays are on different devices: " + a.ctx().ToString() + " and " + b.ctx().ToString());
  }
  if (a.engine() != b.engine()) throw Error("Dot: arrays belong to different engines");
  const std::int64_t m = ta ? a.shape()[1] : a.shape()[0], ka = ta ? a.shape()[0] : a.shape()[1];
  const std::int64_t kb = tb ? b.shape()[1] : b.shape()[0], n = tb ? b.shape()[0] : b.shape()[1];
  if (ka != kb) {
    throw Error("Dot: inner dimensions differ: " + a.shape().ToString() + (ta ? "^T" : "") + " x " +
                b.shape().ToString() + (tb ? "^T" : "") + " (" + std::to_string(ka) + " vs " + std::to_string(kb) + ")");
  }
  if (m > INT_MAX || n > INT_MAX || ka > INT_MAX) throw Error("Dot: dimensions beyond 2^31 are not supported");
  return {static_cast<int>(m), static_cast<int>(n), static_cast<int>(ka)};
}

}  // namespace

NDArray Dot(const NDArray& a, const NDArray& b, bool transpose_a, bool transpose_b) {
  const GemmDims d = CheckDot(a, b, transpose_a, transpose_b);
  NDArray out(TShape({d.m, d.n}), a.ctx(), a.dtype(), a.engine());
  Dot(a, b, &out, transpose_a, transpose_b, false);
  return out;
}

void Dot(const NDArray& a, const NDArray& b, NDArray* out, bool transpose_a, bool transpose_b, bool accumulate) {
  const GemmDims d = CheckDot(a, b, transpose_a, transpose_b);
  CheckNotNone(*out, "Dot");
  if (out->shape() != TShape({d.m, d.n}) || out->dtype() != a.dtype() || out->ctx() != a.ctx() ||
      out->engine() != a.engine()) {
    throw Error("Dot: the output must be a " + TShape({d.m, d.n}).ToString() + " " + DTypeName(a.dtype()) +
                " array on " + a.ctx().ToString() + ", got " + out->shape().ToString() + " " +
                DTypeName(out->dtype()) + " on " + out->ctx().ToString());
  }
  if (Overlaps(*out, a) || Overlaps(*out, b)) {
    // BLAS cannot write over its inputs: compute aside, then copy.
    NDArray tmp = accumulate ? out->CopyTo(out->ctx()) : NDArray(out->shape(), out->ctx(), out->dtype(), out->engine());
    Dot(a, b, &tmp, transpose_a, transpose_b, accumulate);
    CopyFromTo(tmp, *out);
    return;
  }
  const TBlob ta = a.data(), tb = b.data(), tc = out->data();
  const double beta = accumulate ? 1.0 : 0.0;
  Push(out->engine(), out->ctx(),
       [ta, tb, tc, transpose_a, transpose_b, d, beta](RunContext rctx) {
         if (tc.ctx.is_gpu()) {
           internal::GpuGemm(ta, tb, tc, transpose_a, transpose_b, d.m, d.n, d.k, 1.0, beta, rctx.stream);
         } else {
           internal::CpuGemm(ta, tb, tc, transpose_a, transpose_b, d.m, d.n, d.k, 1.0, beta);
         }
       },
       {a.var(), b.var()}, {out->var()}, "Dot");
}

namespace internal {

bool& AutogradRecording() {
  thread_local bool recording = false;
  return recording;
}

void RefuseRecorded(const NDArray& a, const char* what) {
  if (!AutogradRecording() || !NDArrayAccess::Entry(a)) return;
  throw Error(std::string(what) + ": an in-place operation on an array of a graph being recorded (op/autograd.h) "
              "cannot be recorded; compute a new array instead (a + b, not a += b), or work outside the "
              "RecordScope");
}

bool MustRecord(std::initializer_list<const NDArray*> inputs) {
  if (!AutogradRecording()) return false;
  for (const NDArray* a : inputs) {
    if (NDArrayAccess::Entry(*a)) return true;
  }
  return false;
}

AutogradInvoke& AutogradInvokeHook() {
  static AutogradInvoke hook = nullptr;
  return hook;
}

NDArray InvokeRecorded(const char* op, const std::vector<NDArray>& inputs,
                       const std::vector<std::pair<std::string, std::string>>& kwargs) {
  if (AutogradInvokeHook() == nullptr) throw Error(std::string(op) + ": autograd (libtroupe_op) is not loaded");
  return AutogradInvokeHook()(op, inputs, kwargs);
}

}  // namespace internal
}  // namespace troupe
