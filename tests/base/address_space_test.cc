// Running out of address space (`ulimit -v`) is a clear troupe::Error naming the request and the limit,
// never a hang: OpenBLAS's work buffers (it would retry forever: base/address_space.h), the storage pool.
// The test lowers the process's own soft RLIMIT_AS (and raises it back), so it runs in a process of its own
// and not under a sanitizer (whose shadow memory needs terabytes of address space).
#include "base/address_space.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/detail/kernels.h"
#include "tensor/ndarray.h"
#include "tests/common/error_text.h"

namespace troupe {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Lowers the soft address-space limit to what is mapped now plus `headroom`, for the life of the object.
// It also stops glibc from making new malloc arenas, as the runtime does when it starts under a limit
// (actors/src/runtime.cc, CapMallocArenas): here the runtime started before the limit, and a thread of it
// that allocates for the first time only now (a CAF thread the scheduler starts late, on a loaded machine)
// would otherwise reserve a 64 MiB arena, when the mapping happens to come aligned, and leave nothing of
// the headroom for the next thread's first allocation (CI once aborted: "failed to register TLS destructor:
// out of memory").
class ScopedAddressLimit {
 public:
  explicit ScopedAddressLimit(std::size_t headroom) {
    mallopt(M_ARENA_MAX, 1);  // threads without an arena share the existing ones (never undone: harmless here)
    EXPECT_EQ(getrlimit(RLIMIT_AS, &old_), 0);
    const std::size_t used = AddressSpaceUsed();
    EXPECT_GT(used, 0u);
    struct rlimit lowered = old_;
    lowered.rlim_cur = used + headroom;
    EXPECT_EQ(setrlimit(RLIMIT_AS, &lowered), 0);
  }
  ~ScopedAddressLimit() { setrlimit(RLIMIT_AS, &old_); }

 private:
  struct rlimit old_ {};
};

void Gemm64(std::vector<double>* a, std::vector<double>* b, std::vector<double>* c) {
  const TBlob ta{a->data(), TShape{2, 2}, DType::kFloat64, Context::CPU()};
  const TBlob tb{b->data(), TShape{2, 2}, DType::kFloat64, Context::CPU()};
  const TBlob tc{c->data(), TShape{2, 2}, DType::kFloat64, Context::CPU()};
  internal::CpuGemm(ta, tb, tc, false, false, 2, 2, 2, 1.0, 0.0);
}

TEST(AddressSpace, LimitIsReadAndProbed) {
  if (AddressSpaceLimit() != 0) GTEST_SKIP() << "started under a limit already";
  EXPECT_EQ(AddressSpaceNote(), "");
  EXPECT_TRUE(AddressSpaceAvailable(std::size_t{1} << 40));  // no limit: nothing to check
  const ScopedAddressLimit limit(64 * kMiB);
  EXPECT_NE(AddressSpaceLimit(), 0u);
  EXPECT_TRUE(AddressSpaceAvailable(8 * kMiB));
  EXPECT_FALSE(AddressSpaceAvailable(256 * kMiB));
  const std::string note = AddressSpaceNote();
  EXPECT_NE(note.find("ulimit -v"), std::string::npos) << note;
  EXPECT_NE(note.find("MiB of it are mapped"), std::string::npos) << note;
}

TEST(AddressSpace, OpenBlasBufferThatCannotBeMappedIsAnErrorNotAHang) {
  if (AddressSpaceLimit() != 0) GTEST_SKIP() << "started under a limit already";
  std::vector<double> a = {1, 2, 3, 4}, b = {1, 0, 0, 1}, c(4, 0.0);
  {
    // Less room than one OpenBLAS work buffer: OpenBLAS itself would retry its allocation forever (the
    // test's timeout would catch that); troupe checks first. The first float64 product of the process is
    // this one, so OpenBLAS has no caller buffer mapped yet.
    const ScopedAddressLimit limit(64 * kMiB);
    const std::string e = ErrorText([&] { Gemm64(&a, &b, &c); });
    EXPECT_NE(e.find("OpenBLAS"), std::string::npos) << e;
    EXPECT_NE(e.find("dgemm for 2x2 times 2x2"), std::string::npos) << e;
    EXPECT_NE(e.find("ulimit -v"), std::string::npos) << e;
  }
  Gemm64(&a, &b, &c);  // with the limit back, the same call works
  EXPECT_EQ(c, a);
  {
    // Now a buffer is mapped and free: a product needs no new space and runs under a tight limit.
    const ScopedAddressLimit limit(64 * kMiB);
    c.assign(4, 0.0);
    Gemm64(&a, &b, &c);
    EXPECT_EQ(c, a);
  }
}

TEST(AddressSpace, StorageFailureNamesTheRequestAndTheLimit) {
  if (AddressSpaceLimit() != 0) GTEST_SKIP() << "started under a limit already";
  NDArray warm = NDArray::Ones(TShape{16}, Context::CPU());  // engine and workers started before the limit
  warm.WaitToRead();
  const ScopedAddressLimit limit(64 * kMiB);
  const std::string e = ErrorText([] { NDArray::Zeros(TShape{64, 1024, 1024}, Context::CPU()).WaitToRead(); });
  EXPECT_NE(e.find("out of memory on cpu(0)"), std::string::npos) << e;
  EXPECT_NE(e.find("256 MiB"), std::string::npos) << e;
  EXPECT_NE(e.find("ulimit -v"), std::string::npos) << e;
}

}  // namespace
}  // namespace troupe
