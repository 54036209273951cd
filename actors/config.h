// RuntimeConfig — every thread count and tuning knob of the runtime in one place.
//
// A default-constructed config means "pick sane values for this machine's core count"; Resolved() turns
// zeros into those values. FromEnv() applies the TROUPE_* environment overrides listed in docs/settings.md
// (a test checks that table against the code).
#pragma once

#include <string>
#include <vector>

namespace troupe {

struct RuntimeConfig {
  // CAF scheduler threads when troupe owns the actor system (0: 1 on <= 2 cores, else 2).
  int scheduler_threads = 0;
  // Worker threads of each CPU device's normal lane (0: half the cores, at least 1).
  int cpu_workers = 0;
  // Worker threads of each CPU device's priority lane (kCPUPrioritized); started on first use.
  int cpu_priority_workers = 1;
  // OpenBLAS threads (0: cores / cpu_workers, at least 1), so that workers x BLAS threads <= cores.
  int blas_threads = 0;
  // Number of dependency actors; each owns the queues of the variables whose id maps to it.
  int dependency_shards = 1;
  // Run each dependency actor on its own thread (CAF 'detached') instead of the CAF scheduler.
  bool detached_dependency_actors = true;
  // How long an idle worker polls its queue before it sleeps until woken (microseconds; -1: default).
  int worker_spin_us = -1;
  // Processes that share this host's cores (launchers that start several on one host say how many, e.g.
  // `troupe launch`'s local launcher): the defaults above take this process's share, cores / host_processes.
  int host_processes = 1;

  // Applies TROUPE_SCHEDULER_THREADS, TROUPE_CPU_WORKERS, TROUPE_CPU_PRIORITY_WORKERS, TROUPE_BLAS_THREADS,
  // TROUPE_DEPENDENCY_SHARDS, TROUPE_DETACHED_DEPS, TROUPE_WORKER_SPIN_US, TROUPE_HOST_PROCESSES on top of *this.
  // Throws troupe::Error naming the variable when a value is not a valid number in range.
  RuntimeConfig WithEnv() const;
  // Replaces every "0 / -1 = default" with the value for this machine. Throws troupe::Error on values
  // out of range (negative thread counts, zero shards, ...).
  RuntimeConfig Resolved() const;
  std::string ToString() const;
};

// Environment helpers shared by every module's config (the names they read are listed in docs/settings.md).
// Each returns false when the variable is unset or empty, true after storing its value in *out, and
// throws troupe::Error naming the variable, its value and what is accepted otherwise.
bool EnvInt(const char* name, int min, int max, int* out);
bool EnvDouble(const char* name, double min, double max, double* out);
bool EnvChoice(const char* name, const std::vector<std::string>& choices, std::string* out);

// Number of cores this process may use (sched_getaffinity, falling back to hardware_concurrency).
int AvailableCores();

// The OpenBLAS thread count troupe uses when TROUPE_BLAS_THREADS / RuntimeConfig::blas_threads is left at 0,
// with `cpu_devices` CPU devices of `cpu_workers` workers each started in one of `host_processes` processes
// sharing the host: cores / (processes x devices x workers), at least 1, so that every worker's BLAS calls
// together use the cores once (DESIGN.md §6).
int DefaultBlasThreads(int cpu_devices, int cpu_workers, int host_processes = 1);

}  // namespace troupe
