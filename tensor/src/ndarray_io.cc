// NDArray::Save/Load/SaveToBytes/LoadFromBytes: MXNet 1.x's NDArray list file (.params; mx.nd.save and
// mx.nd.load), byte for byte as the project's format spec (formats.md §1) describes it.
//
// Writer: the list container (0x112, reserved 0, count, records, names). Records are V2 (what MXNet 1.x
// writes, so troupe's output loads in MXNet), unless an array needs NumPy shape semantics (0-d, or a zero
// dimension): then every record is V3, as MXNet writes in its NumPy-shape mode. A none array's record stops
// after its shape.
//
// Reader: V2, V3, V1 and legacy 0.x records. The whole input is validated (every field, every length,
// names, trailing bytes) before a single array is allocated, so a damaged or hostile file costs no memory
// beyond its own bytes and produces a troupe::Error that names the source, the byte offset of the bad
// field, the array index, what was found and what was expected. Outputs are only assigned on success.
//
// Thread-safety: the functions share no state; they may be called from several threads at once.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "actors/runtime.h"
#include "tensor/ndarray.h"

namespace troupe {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".params files are little-endian and troupe copies tensor data as raw bytes: a big-endian host needs "
              "byte swapping in ndarray_io.cc");

constexpr std::uint64_t kListMagic = 0x112;
constexpr std::uint32_t kV1Magic = 0xF993FAC8;
constexpr std::uint32_t kV2Magic = 0xF993FAC9;
constexpr std::uint32_t kV3Magic = 0xF993FACA;

std::string Hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llX", static_cast<unsigned long long>(v));
  return buf;
}

// ---- writing -------------------------------------------------------------------------------------------

// Appends little-endian fields to a byte string.
class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  void U32(std::uint32_t v) { Put(&v, sizeof(v)); }
  void I32(std::int32_t v) { Put(&v, sizeof(v)); }
  void U64(std::uint64_t v) { Put(&v, sizeof(v)); }
  void I64(std::int64_t v) { Put(&v, sizeof(v)); }
  void Put(const void* p, std::size_t n) { out_->append(static_cast<const char*>(p), n); }
  // Grows the output by n bytes and returns where they start (for SyncCopyToCPU to fill).
  char* Grow(std::size_t n) {
    const std::size_t at = out_->size();
    out_->resize(at + n);
    return out_->data() + at;
  }

 private:
  std::string* out_;
};

void WriteShape(ByteWriter& w, const TShape& shape) {
  w.I32(shape.ndim());
  for (std::int64_t d : shape) w.I64(d);
}

// Whether the list needs NumPy shape semantics (V3 records): a 0-d array (V2's ndim 0 means "none") or a
// zero-size one (V2's 0 dimension means "unknown"). MXNet writes every record of a file in one version,
// V3 in its NumPy-shape mode, and refuses V3 records outside that mode, so such a list is all V3.
bool NeedsNumpyShape(const std::vector<NDArray>& arrays) {
  for (const NDArray& a : arrays) {
    if (!a.is_none() && (a.shape().ndim() == 0 || a.shape().Size() == 0)) return true;
  }
  return false;
}

// One array record (formats.md §1.3) appended to `out`: V3 when `v3` (the whole list is), else V2.
void WriteRecord(std::string* out, const NDArray& a, std::size_t index, bool v3) {
  ByteWriter w(out);
  if (a.is_none()) {  // "none": V2 ndim 0, V3 ndim -1; nothing follows the shape.
    w.U32(v3 ? kV3Magic : kV2Magic);
    w.I32(0);
    w.I32(v3 ? -1 : 0);
    return;
  }
  const TShape& shape = a.shape();
  if (!shape.known()) {
    throw Error("NDArray::Save: array " + std::to_string(index) + " has the unknown shape " + shape.ToString());
  }
  w.U32(v3 ? kV3Magic : kV2Magic);
  w.I32(0);  // dense storage
  WriteShape(w, shape);
  const Context ctx = a.ctx();
  w.I32(static_cast<std::int32_t>(ctx.dev_type));
  w.I32(ctx.dev_id);
  w.I32(static_cast<std::int32_t>(a.dtype()));
  const std::size_t bytes = a.Bytes();
  if (bytes == 0) {
    a.WaitToRead();  // nothing to copy, but a failed producer must still surface here
  } else {
    a.SyncCopyToCPU(w.Grow(bytes), bytes);
  }
}

// A list (no names) or a dict (one name per array); `where` starts the message ("NDArray::Save: path").
void CheckNames(const std::string& where, const std::vector<NDArray>& arrays, const std::vector<std::string>& names) {
  if (!names.empty() && names.size() != arrays.size()) {
    throw Error(where + ": " + std::to_string(names.size()) + " names for " + std::to_string(arrays.size()) +
                " arrays; give one name per array (a dict) or none (a list)");
  }
}

// Produces the list file piece by piece: `emit` receives the header, each record, then the names, so a
// file writer holds at most one array's bytes at a time.
void WriteList(const std::vector<NDArray>& arrays, const std::vector<std::string>& names,
               const std::function<void(const std::string&)>& emit) {
  std::string buf;
  ByteWriter w(&buf);
  w.U64(kListMagic);
  w.U64(0);
  w.U64(arrays.size());
  emit(buf);
  const bool v3 = NeedsNumpyShape(arrays);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    buf.clear();
    WriteRecord(&buf, arrays[i], i, v3);
    emit(buf);
  }
  buf.clear();
  w.U64(names.size());
  for (const std::string& name : names) {
    w.U64(name.size());
    w.Put(name.data(), name.size());
  }
  emit(buf);
}

std::string ErrnoText(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// Writes all of [p, p+n) to fd, retrying short writes and EINTR. Returns false with errno set on failure.
bool WriteAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// A temporary file next to the target, removed again unless Commit() renamed it over the target.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    static std::atomic<std::uint64_t> counter{0};
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      path_ = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) Fail("cannot create the temporary file " + path_);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void Write(const std::string& bytes) {
    if (!WriteAll(fd_, bytes.data(), bytes.size())) Fail("cannot write the temporary file " + path_);
  }
  // Flushes the bytes to disk and renames the temporary file over the target.
  void Commit() {
    if (::fsync(fd_) != 0) Fail("cannot flush the temporary file " + path_);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) Fail("cannot close the temporary file " + path_);
    if (::rename(path_.c_str(), target_.c_str()) != 0) Fail("cannot rename " + path_ + " to the target");
    committed_ = true;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    const int err = errno;
    throw Error("NDArray::Save: " + target_ + ": " + what + ": " + ErrnoText(err) +
                "; check that the directory exists and is writable and that the disk has space");
  }

  std::string target_;
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

// ---- reading -------------------------------------------------------------------------------------------

// Reads little-endian fields from a bounded byte range, tracking the offset; every read checks the bounds
// and every error names the source, the byte offset and (while a record is read) the array index.
class ByteReader {
 public:
  ByteReader(const unsigned char* data, std::size_t size, const std::string& source)
      : data_(data), size_(size), source_(source) {}

  std::size_t offset() const { return offset_; }
  std::size_t remaining() const { return size_ - offset_; }
  void set_array(std::int64_t index) { array_ = index; }

  std::uint32_t U32(const char* field) { return Get<std::uint32_t>(field); }
  std::int32_t I32(const char* field) { return Get<std::int32_t>(field); }
  std::uint64_t U64(const char* field) { return Get<std::uint64_t>(field); }
  std::int64_t I64(const char* field) { return Get<std::int64_t>(field); }
  // n bytes, returned in place (no copy).
  const unsigned char* Bytes(std::size_t n, const char* field) {
    Need(n, field);
    const unsigned char* p = data_ + offset_;
    offset_ += n;
    return p;
  }

  // Throws for the field that starts at byte `at`.
  [[noreturn]] void Fail(std::size_t at, const std::string& what) const {
    std::string msg =
        "NDArray::Load: " + source_ + ": bad MXNet NDArray list (.params) at byte offset " + std::to_string(at);
    if (array_ >= 0) msg += " (array " + std::to_string(array_) + ")";
    throw Error(msg + ": " + what);
  }

 private:
  template <typename T>
  T Get(const char* field) {
    Need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return v;
  }
  void Need(std::size_t n, const char* field) const {
    if (n > remaining()) {
      Fail(offset_, std::string("truncated: the ") + field + " needs " + std::to_string(n) + " bytes but only " +
                        std::to_string(remaining()) + " are left (the input is " + std::to_string(size_) +
                        " bytes); the file is cut short or a length before it is wrong");
    }
  }

  const unsigned char* data_;
  std::size_t size_;
  std::size_t offset_ = 0;
  const std::string& source_;
  std::int64_t array_ = -1;
};

// A validated record: what to allocate and where its bytes are in the input.
struct Record {
  bool none = false;
  std::size_t shape_at = 0;  // where the shape starts, for messages
  TShape shape;
  DType dtype = DType::kFloat32;
  int dev_type = 1;
  int dev_id = 0;
  const unsigned char* data = nullptr;
  std::size_t bytes = 0;
};

enum class RecordKind { kV3, kV2, kV1 };

// Reads a TShape with a 4-byte ndim and i64 dims (V1/V2/V3). Sets *none for the shapes that mean "none"
// in this record kind (V2/V1: ndim 0; V3: ndim -1 or a dim of -1).
TShape ReadShape(ByteReader& r, RecordKind kind, bool* none) {
  const std::size_t at = r.offset();
  const std::int32_t ndim = r.I32("shape's ndim");
  *none = false;
  if (kind == RecordKind::kV3 && ndim == -1) {
    *none = true;
    return TShape();
  }
  if (ndim < 0) {
    r.Fail(at, "ndim is " + std::to_string(ndim) + ", expected 0.." + std::to_string(TShape::kMaxDims) +
                   (kind == RecordKind::kV3 ? " (or -1 for an unknown shape)" : ""));
  }
  if (ndim > TShape::kMaxDims) {
    r.Fail(at, "ndim is " + std::to_string(ndim) + ": troupe supports at most " + std::to_string(TShape::kMaxDims) +
                   " dimensions");
  }
  std::vector<std::int64_t> dims(static_cast<std::size_t>(ndim));
  bool unknown = false;
  for (auto& d : dims) {
    const std::size_t dim_at = r.offset();
    d = r.I64("shape's dimension");
    if (kind == RecordKind::kV3 && d == -1) {
      unknown = true;
    } else if (d < 0) {
      r.Fail(dim_at,
             "dimension " + std::to_string(&d - dims.data()) + " is " + std::to_string(d) + ", expected a size >= 0");
    }
  }
  if (unknown || (ndim == 0 && kind != RecordKind::kV3)) {
    *none = true;
    return TShape();
  }
  return TShape(dims);
}

// Reads a legacy 0.x shape: `ndim` was the record's first u32, then ndim u32 dims. ndim 0 is none.
TShape ReadLegacyShape(ByteReader& r, std::uint32_t ndim, std::size_t at, bool* none) {
  if (ndim > static_cast<std::uint32_t>(TShape::kMaxDims)) {
    r.Fail(at, "record magic " + Hex(ndim) + " is not V1 (" + Hex(kV1Magic) + "), V2 (" + Hex(kV2Magic) + ") or V3 (" +
                   Hex(kV3Magic) + "), and read as a legacy 0.x record's ndim (" + std::to_string(ndim) +
                   ") it is too large: troupe supports at most " + std::to_string(TShape::kMaxDims) + " dimensions");
  }
  std::vector<std::int64_t> dims(ndim);
  for (auto& d : dims) d = r.U32("legacy shape's dimension");
  *none = ndim == 0;
  return *none ? TShape() : TShape(dims);
}

// Reads context, type flag and data after a known shape, checking the size against the input first.
void ReadBody(ByteReader& r, Record* rec) {
  const std::size_t ctx_at = r.offset();
  rec->dev_type = r.I32("context's dev_type");
  if (rec->dev_type != 1 && rec->dev_type != 2 && rec->dev_type != 3 && rec->dev_type != 5) {
    r.Fail(ctx_at, "dev_type is " + std::to_string(rec->dev_type) +
                       ", expected 1 (cpu), 2 (gpu), 3 (cpu_pinned) or 5 (cpu_shared)");
  }
  const std::size_t id_at = r.offset();
  rec->dev_id = r.I32("context's dev_id");
  if (rec->dev_id < 0) r.Fail(id_at, "dev_id is " + std::to_string(rec->dev_id) + ", expected >= 0");
  const std::size_t type_at = r.offset();
  const std::int32_t flag = r.I32("type flag");
  if (!IsValidDTypeFlag(flag)) {
    r.Fail(type_at, "type flag is " + std::to_string(flag) +
                        ", expected 0-7 or 12 (float32, float64, float16, uint8, int32, int8, int64, bool, "
                        "bfloat16)");
  }
  rec->dtype = static_cast<DType>(flag);
  // Element count and byte size with overflow checks, compared with the input before anything allocates.
  const std::size_t data_at = r.offset();
  const std::uint64_t limit = r.remaining();
  // Multiplied in order, as TShape::Size does: a zero dim makes the rest free, an overflow before it fails.
  std::uint64_t elements = 1;
  bool overflow = false;
  for (std::int64_t d : rec->shape) {
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / u) {
      overflow = true;
      break;
    }
    elements *= u;
  }
  const std::uint64_t size = DTypeSize(rec->dtype);
  if (!overflow && elements > std::numeric_limits<std::uint64_t>::max() / size) overflow = true;
  if (overflow || elements * size > limit) {
    r.Fail(data_at, std::string("the ") + DTypeName(rec->dtype) + " data of shape " + rec->shape.ToString() +
                        " (shape at byte offset " + std::to_string(rec->shape_at) + ") needs " +
                        (overflow ? std::string("more than 2^63") : std::to_string(elements * size)) +
                        " bytes but only " + std::to_string(limit) +
                        " are left; the file is cut short or the shape is damaged");
  }
  rec->bytes = static_cast<std::size_t>(elements * size);
  rec->data = r.Bytes(rec->bytes, "data");
}

Record ReadRecord(ByteReader& r, std::size_t index) {
  r.set_array(static_cast<std::int64_t>(index));
  Record rec;
  const std::size_t at = r.offset();
  const std::uint32_t magic = r.U32("record magic");
  if (magic == kV2Magic || magic == kV3Magic) {
    const RecordKind kind = magic == kV2Magic ? RecordKind::kV2 : RecordKind::kV3;
    const std::size_t stype_at = r.offset();
    const std::int32_t stype = r.I32("storage type");
    rec.shape_at = r.offset();
    if (stype == 1 || stype == 2) {
      r.Fail(stype_at, std::string("storage type ") + (stype == 1 ? "1 (row_sparse)" : "2 (csr)") +
                           ": sparse storage is not supported by troupe; convert the array to dense in MXNet "
                           "(x.tostype('default')) and save it again");
    }
    if (stype != 0) {
      r.Fail(stype_at, "storage type is " + std::to_string(stype) + ", expected 0 (dense)");
    }
    rec.shape = ReadShape(r, kind, &rec.none);
  } else if (magic == kV1Magic) {
    rec.shape_at = r.offset();
    rec.shape = ReadShape(r, RecordKind::kV1, &rec.none);
  } else {
    rec.shape_at = at;
    rec.shape = ReadLegacyShape(r, magic, at, &rec.none);
  }
  if (!rec.none) ReadBody(r, &rec);
  return rec;
}

// Where a record's array goes: the device it was saved from when that exists here, else CPU(0).
Context TargetContext(const Record& rec, const Context* override_ctx) {
  if (override_ctx != nullptr) return *override_ctx;
  if (rec.dev_type == static_cast<int>(DeviceType::kGPU) && rec.dev_id < Runtime::GpuCount()) {
    return Context::GPU(rec.dev_id);
  }
  return Context::CPU(0);  // cpu, cpu_pinned and cpu_shared load on the CPU; a missing GPU too
}

}  // namespace

// ---- public functions ------------------------------------------------------------------------------------

std::string NDArray::SaveToBytes(const std::vector<NDArray>& arrays, const std::vector<std::string>& names) {
  CheckNames("NDArray::SaveToBytes", arrays, names);
  std::string out;
  WriteList(arrays, names, [&out](const std::string& piece) { out += piece; });
  return out;
}

// A list of one unnamed array is the list header (magic, reserved, count: 24 bytes), the record, and the
// name count (8 bytes).
constexpr std::size_t kOneArrayHeader = 24, kNoNames = 8;

std::string NDArray::SaveRawBytes(const NDArray& array) {
  const std::string list = SaveToBytes({array});
  return list.substr(kOneArrayHeader, list.size() - kOneArrayHeader - kNoNames);
}

NDArray NDArray::LoadRawBytes(const void* data, std::size_t size, const std::string& source) {
  const std::uint64_t header[3] = {kListMagic, 0, 1};
  std::string list(reinterpret_cast<const char*>(header), sizeof(header));
  if (size > 0) list.append(static_cast<const char*>(data), size);
  list.append(kNoNames, '\0');
  std::vector<NDArray> arrays;
  LoadFromBytes(list.data(), list.size(), source, &arrays, nullptr);
  return arrays.at(0);
}

void NDArray::Save(const std::string& path, const std::vector<NDArray>& arrays, const std::vector<std::string>& names) {
  CheckNames("NDArray::Save: " + path, arrays, names);  // before the temporary file exists
  TempFile file(path);
  WriteList(arrays, names, [&file](const std::string& piece) { file.Write(piece); });
  file.Commit();
}

void NDArray::LoadFromBytes(const void* data, std::size_t size, const std::string& source, std::vector<NDArray>* arrays,
                            std::vector<std::string>* names, const Context* ctx, Engine* engine) {
  if (arrays == nullptr) throw Error("NDArray::LoadFromBytes: " + source + ": the arrays output is null");
  if (data == nullptr && size != 0) throw Error("NDArray::LoadFromBytes: " + source + ": data is null");
  static const unsigned char kEmpty = 0;
  ByteReader r(data != nullptr ? static_cast<const unsigned char*>(data) : &kEmpty, size, source);

  // 1. Parse and validate everything; nothing is allocated for the tensors yet.
  const std::uint64_t magic = r.U64("list header (magic 0x112)");
  if (magic != kListMagic) {
    r.Fail(0, "header is " + Hex(magic) + ", expected " + Hex(kListMagic) +
                  " (MXNet's NDArray list magic); this is not an MXNet .params file");
  }
  r.U64("reserved field");  // MXNet ignores its value; so do we
  const std::size_t count_at = r.offset();
  const std::uint64_t count = r.U64("array count");
  if (count > r.remaining() / 4) {  // the smallest record (legacy none) is 4 bytes
    r.Fail(count_at, "array count is " + std::to_string(count) + " but only " + std::to_string(r.remaining()) +
                         " bytes follow (each record takes at least 4)");
  }
  std::vector<Record> records;
  records.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(count, 4096)));  // grows as records parse
  for (std::uint64_t i = 0; i < count; ++i) records.push_back(ReadRecord(r, static_cast<std::size_t>(i)));
  r.set_array(-1);

  const std::size_t names_at = r.offset();
  const std::uint64_t name_count = r.U64("name count");
  if (name_count != 0 && name_count != count) {
    r.Fail(names_at, "name count is " + std::to_string(name_count) + ", expected 0 (a list) or " +
                         std::to_string(count) + " (one per array)");
  }
  std::vector<std::string> loaded_names;
  loaded_names.reserve(static_cast<std::size_t>(name_count));  // name_count == count: bounded above
  for (std::uint64_t i = 0; i < name_count; ++i) {
    const std::size_t len_at = r.offset();
    const std::uint64_t len = r.U64("name length");
    if (len > r.remaining()) {
      r.Fail(len_at, "name " + std::to_string(i) + " is " + std::to_string(len) + " bytes long but only " +
                         std::to_string(r.remaining()) + " bytes are left");
    }
    const auto* p = reinterpret_cast<const char*>(r.Bytes(static_cast<std::size_t>(len), "name"));
    loaded_names.emplace_back(p, static_cast<std::size_t>(len));
  }
  if (r.remaining() != 0) {
    r.Fail(r.offset(), std::to_string(r.remaining()) +
                           " trailing bytes after the names, expected the end of the "
                           "input; the file is damaged or not a single NDArray list");
  }

  // 2. Create the arrays and copy the data in.
  std::vector<NDArray> loaded;
  loaded.reserve(records.size());
  for (const Record& rec : records) {
    if (rec.none) {
      loaded.emplace_back();
      continue;
    }
    NDArray a(rec.shape, TargetContext(rec, ctx), rec.dtype, engine);
    if (rec.bytes > 0) a.SyncCopyFromCPU(rec.data, rec.bytes);
    loaded.push_back(std::move(a));
  }
  *arrays = std::move(loaded);
  if (names != nullptr) *names = std::move(loaded_names);
}

void NDArray::Load(const std::string& path, std::vector<NDArray>* arrays, std::vector<std::string>* names,
                   const Context* ctx, Engine* engine) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error("NDArray::Load: cannot open " + path + ": " + ErrnoText(err) + "; check the path and permissions");
  }
  // Read straight into the buffer, sized from fstat when that works and grown if the file is longer.
  std::string bytes;
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  bytes.resize(regular ? static_cast<std::size_t>(st.st_size) + 1 : std::size_t{1} << 16);
  std::size_t used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2);
    const ssize_t k = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (k == 0) break;
    if (k < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw Error("NDArray::Load: cannot read " + path + ": " + ErrnoText(err));
    }
    used += static_cast<std::size_t>(k);
  }
  bytes.resize(used);
  ::close(fd);
  LoadFromBytes(bytes.data(), bytes.size(), path, arrays, names, ctx, engine);
}

}  // namespace troupe
