#include "base/address_space.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace troupe {

std::size_t AddressSpaceLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<std::size_t>(rl.rlim_cur);
}

std::size_t AddressSpaceUsed() {
  // /proc/self/statm: the first field is the mapped size in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long pages = 0;
  const int n = std::fscanf(f, "%lu", &pages);
  std::fclose(f);
  return n == 1 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

bool AddressSpaceAvailable(std::size_t bytes) {
  if (bytes == 0 || AddressSpaceLimit() == 0) return true;
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  ::munmap(p, bytes);
  return true;
}

std::string AddressSpaceNote() {
  const std::size_t limit = AddressSpaceLimit();
  if (limit == 0) return "";
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  std::string note = "the address-space limit (ulimit -v) is " + std::to_string(limit / kMiB) + " MiB";
  const std::size_t used = AddressSpaceUsed();
  if (used != 0) note += " and " + std::to_string(used / kMiB) + " MiB of it are mapped";
  return note;
}

}  // namespace troupe
