#include "actors/config.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "base/error.h"

namespace troupe {

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

int DefaultBlasThreads(int cpu_devices, int cpu_workers, int host_processes) {
  return std::max(1, AvailableCores() / std::max(1, host_processes * cpu_devices * cpu_workers));
}

bool EnvInt(const char* name, int min, int max, int* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < min || x > max) {
    std::ostringstream os;
    os << "environment variable " << name << "='" << v << "' is not an integer in [" << min << ", " << max
       << "]; unset it or give a valid number";
    throw Error(os.str());
  }
  *out = static_cast<int>(x);
  return true;
}

bool EnvDouble(const char* name, double min, double max, double* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !(x >= min && x <= max)) {
    std::ostringstream os;
    os << "environment variable " << name << "='" << v << "' is not a number in [" << min << ", " << max
       << "]; unset it or give a valid number";
    throw Error(os.str());
  }
  *out = x;
  return true;
}

bool EnvChoice(const char* name, const std::vector<std::string>& choices, std::string* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  for (const auto& c : choices) {
    if (c == v) {
      *out = c;
      return true;
    }
  }
  std::ostringstream os;
  os << "environment variable " << name << "='" << v << "' is not one of:";
  for (const auto& c : choices) os << ' ' << c;
  os << "; unset it or give one of these";
  throw Error(os.str());
}

namespace {

void CheckRange(const char* field, int value, int min, int max) {
  if (value < min || value > max) {
    std::ostringstream os;
    os << "RuntimeConfig::" << field << " = " << value << " is out of range [" << min << ", " << max << "]";
    throw Error(os.str());
  }
}

}  // namespace

RuntimeConfig RuntimeConfig::WithEnv() const {
  RuntimeConfig c = *this;
  EnvInt("TROUPE_SCHEDULER_THREADS", 0, 1024, &c.scheduler_threads);
  EnvInt("TROUPE_CPU_WORKERS", 0, 1024, &c.cpu_workers);
  EnvInt("TROUPE_CPU_PRIORITY_WORKERS", 1, 1024, &c.cpu_priority_workers);
  EnvInt("TROUPE_BLAS_THREADS", 0, 1024, &c.blas_threads);
  EnvInt("TROUPE_DEPENDENCY_SHARDS", 1, 64, &c.dependency_shards);
  int detached = 0;
  if (EnvInt("TROUPE_DETACHED_DEPS", 0, 1, &detached)) c.detached_dependency_actors = detached != 0;
  EnvInt("TROUPE_WORKER_SPIN_US", -1, 1000000, &c.worker_spin_us);
  EnvInt("TROUPE_HOST_PROCESSES", 1, 4096, &c.host_processes);
  return c;
}

RuntimeConfig RuntimeConfig::Resolved() const {
  RuntimeConfig c = *this;
  CheckRange("host_processes", c.host_processes, 1, 4096);
  const int cores = std::max(1, AvailableCores() / c.host_processes);  // this process's share
  CheckRange("scheduler_threads", c.scheduler_threads, 0, 1024);
  CheckRange("cpu_workers", c.cpu_workers, 0, 1024);
  CheckRange("cpu_priority_workers", c.cpu_priority_workers, 1, 1024);
  CheckRange("blas_threads", c.blas_threads, 0, 1024);
  CheckRange("dependency_shards", c.dependency_shards, 1, 64);
  CheckRange("worker_spin_us", c.worker_spin_us, -1, 1000000);
  if (c.scheduler_threads == 0) c.scheduler_threads = cores <= 2 ? 1 : 2;
  // Half the cores run functions; the other half is left for the pushing thread, the dependency actors
  // and the BLAS threads inside functions (MXNet defaulted to one CPU worker for the same reason).
  if (c.cpu_workers == 0) c.cpu_workers = std::max(1, cores / 2);
  if (c.blas_threads == 0) c.blas_threads = DefaultBlasThreads(1, c.cpu_workers, c.host_processes);
  // Spinning pays off only when there is a core to spare for it.
  if (c.worker_spin_us < 0) c.worker_spin_us = cores > 2 ? 50 : 10;
  return c;
}

std::string RuntimeConfig::ToString() const {
  std::ostringstream os;
  os << "scheduler_threads=" << scheduler_threads << " cpu_workers=" << cpu_workers
     << " cpu_priority_workers=" << cpu_priority_workers << " blas_threads=" << blas_threads
     << " dependency_shards=" << dependency_shards
     << " detached_dependency_actors=" << (detached_dependency_actors ? 1 : 0)
     << " worker_spin_us=" << worker_spin_us << " host_processes=" << host_processes;
  return os.str();
}

}  // namespace troupe
