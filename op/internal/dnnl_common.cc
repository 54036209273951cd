// oneDNN plumbing for the CPU operators (see dnnl_common.h).
#include "op/internal/dnnl_common.h"

#include <oneapi/dnnl/dnnl_debug.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/address_space.h"
#include "base/error.h"
#include "tensor/detail/kernels.h"

namespace troupe::internal {

bool DnnlWinograd() {
  static const bool enabled = [] {
    const char* v = std::getenv("TROUPE_DNNL_WINOGRAD");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

const dnnl::engine& DnnlEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  UseCpuKernelThreads();
  return engine;
}

dnnl::stream& DnnlStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  UseCpuKernelThreads();
  return stream;
}

dnnl::memory::dims Dims(const TShape& shape) {
  dnnl::memory::dims d(shape.ndim());
  for (int i = 0; i < shape.ndim(); ++i) d[i] = shape[i];
  return d;
}

dnnl::memory::data_type DnnlType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return dnnl::memory::data_type::f32;
    case DType::kBfloat16: return dnnl::memory::data_type::bf16;
    default: throw Error(std::string("oneDNN: element type ") + DTypeName(dtype) + " is not used with oneDNN here");
  }
}

bool DnnlBf16() {
  static const bool yes = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  return yes;
}

dnnl::memory::desc PlainDesc(const TShape& shape, int groups, dnnl::memory::data_type type) {
  using tag = dnnl::memory::format_tag;
  const auto f32 = type;
  if (groups > 1 && shape.ndim() == 4) {
    return dnnl::memory::desc({groups, shape[0] / groups, shape[1], shape[2], shape[3]}, f32, tag::goihw);
  }
  if (groups > 1 && shape.ndim() == 5) {
    return dnnl::memory::desc({groups, shape[0] / groups, shape[1], shape[2], shape[3], shape[4]}, f32, tag::goidhw);
  }
  switch (shape.ndim()) {
    case 1: return dnnl::memory::desc(Dims(shape), f32, tag::a);
    case 2: return dnnl::memory::desc(Dims(shape), f32, tag::ab);
    case 3: return dnnl::memory::desc(Dims(shape), f32, tag::abc);
    case 4: return dnnl::memory::desc(Dims(shape), f32, tag::abcd);
    case 5: return dnnl::memory::desc(Dims(shape), f32, tag::abcde);
    default: throw Error("oneDNN: arrays of " + std::to_string(shape.ndim()) + " dimensions are not supported");
  }
}

namespace {
int ChannelBlock() {
  static const int block = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core ? 16 : 8;
  return block;
}
}  // namespace

dnnl::memory::desc BlockedDesc(const TShape& shape) {
  using tag = dnnl::memory::format_tag;
  const tag blocked = ChannelBlock() == 16 ? tag::nChw16c : tag::nChw8c;
  return dnnl::memory::desc(Dims(shape), dnnl::memory::data_type::f32, blocked);
}

bool BlockedLayoutFits(const TShape& shape) {
  return shape.ndim() == 4 && shape[0] > 0 && shape[1] > 0 && shape[1] % ChannelBlock() == 0 && shape[2] > 0 &&
         shape[3] > 0;
}

void ReorderLayout(const void* from, bool from_blocked, void* to, bool to_blocked, const TShape& shape) {
  const auto& eng = DnnlEngine();
  const dnnl::memory::desc a = from_blocked ? BlockedDesc(shape) : PlainDesc(shape);
  const dnnl::memory::desc b = to_blocked ? BlockedDesc(shape) : PlainDesc(shape);
  dnnl::memory src(a, eng, const_cast<void*>(from)), dst(b, eng, to);
  dnnl::stream& st = DnnlStream();
  dnnl::reorder(src, dst).execute(st, src, dst);
  st.wait();
}

std::size_t DnnlSpace::Reserve(std::size_t bytes) {
  const std::size_t offset = bytes_;
  bytes_ += (bytes + 63) & ~std::size_t{63};
  return offset;
}

void DnnlArg::Plan(const dnnl::memory::desc& user_desc, const dnnl::memory::desc& primitive_desc, bool is_output,
                   DnnlSpace* space) {
  user = user_desc;
  want = primitive_desc;
  reordered = user != want;
  to_want = {};
  to_user = {};
  add_to_user = {};
  const auto& eng = DnnlEngine();
  if (is_output) {
    offset = space->Reserve(want.get_size());
    if (reordered) to_user = dnnl::reorder(dnnl::reorder::primitive_desc(eng, want, eng, user));
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(sum);
    add_to_user = dnnl::reorder(dnnl::reorder::primitive_desc(eng, want, eng, user, attr));
  } else if (reordered) {
    if (space != nullptr) offset = space->Reserve(want.get_size());
    to_want = dnnl::reorder(dnnl::reorder::primitive_desc(eng, user, eng, want));
  }
}

dnnl::memory DnnlArg::In(const void* user_ptr, const DnnlSpace& space, dnnl::stream& stream) const {
  const auto& eng = DnnlEngine();
  dnnl::memory u(user, eng, const_cast<void*>(user_ptr));
  if (!reordered) return u;
  dnnl::memory m(want, eng, space.At(offset));
  to_want.execute(stream, u, m);
  return m;
}

dnnl::memory DnnlArg::Out(void* user_ptr, const DnnlSpace& space, OpReqType req) const {
  if (!reordered && req != kAddTo) return dnnl::memory(user, DnnlEngine(), user_ptr);
  return dnnl::memory(want, DnnlEngine(), space.At(offset));
}

void DnnlArg::Leave(const dnnl::memory& m, void* user_ptr, dnnl::stream& stream, OpReqType req) const {
  if (!reordered && req != kAddTo) return;
  dnnl::memory from = m, u(user, DnnlEngine(), user_ptr);
  (req == kAddTo ? add_to_user : to_user).execute(stream, from, u);
}

void ThrowDnnl(const char* op, const dnnl::error& e) {
  const std::string note = e.status == dnnl_out_of_memory ? AddressSpaceNote() : "";
  throw Error(std::string(op) + ": oneDNN failed (" + dnnl_status2str(e.status) + "): " + e.what() +
              (note.empty() ? "" : " (" + note + ")") + "; TROUPE_DNNL=0 runs troupe's own kernels instead");
}

}  // namespace troupe::internal
