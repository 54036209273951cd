// MXNet 1.9.1 engine anchor: the four workloads of `troupe bench engine` (bench/engine/engine_bench.cc), run
// on MXNet's dependency engine (ThreadedEnginePerDevice by default) through its C API.
//
// This is a benchmark anchor only (DESIGN.md §5 "Benchmarks"): nothing in troupe builds, links or tests against
// MXNet, and CMake never sees this file. build.sh compiles it with g++ alone; libmxnet.so is dlopen()ed at run
// time, so neither MXNet's headers nor its library are needed to compile it. The few C API functions used are
// declared below with prototypes copied from MXNet 1.9.1's include/mxnet/c_api.h.
//
// MXNet reads MXNET_CPU_WORKER_NTHREADS (and MXNET_ENGINE_TYPE, OMP_NUM_THREADS) once, when the library
// initialises, so every worker count runs in its own process: the parent forks one child per --workers value
// before anything is loaded; the child sets the environment, dlopen()s libmxnet.so, runs every workload (one
// untimed warm-up run and --repeat timed runs each, with an in-run check) and writes its part of the results;
// the parent merges the parts into one JSON file shaped like troupe's and prints a table.
//
// Per run: push all N functions with MXEnginePushSyncND (variables are NDArrays of shape {1} on cpu(0),
// created once per workload group, delay-allocated, so only their engine variable matters), then
// MXNDArrayWaitAll (Engine::WaitForAll; the C API has no MXEngineWaitAll). Timed: from the first push to
// WaitAll's return. Also recorded: the push phase alone (first push to last push returning).
//
// Thread-safety: the pushed functions run on MXNet's worker threads; their checks use the same scheme as
// troupe's (plain counters where the engine orders every access, atomics elsewhere).
#include <dlfcn.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef MXNET_BENCH_DEFAULT_LIB
#define MXNET_BENCH_DEFAULT_LIB "/work/mxnet-venv/lib/python3.11/site-packages/mxnet/libmxnet.so"
#endif

namespace {

// ---------------------------------------------------------------------------------------------------
// MXNet 1.9.1 C API (include/mxnet/c_api.h), declared here so that no MXNet header is needed.
extern "C" {
typedef void* NDArrayHandle;
typedef const void* ContextHandle;           // points to a mxnet::Context {DeviceType dev_type; int32_t dev_id;}
typedef const void* EngineFnPropertyHandle;  // points to a mxnet::FnProperty; NULL = kNormal
typedef void (*EngineSyncFunc)(void* rctx, void* func_param);  // (RunContext*, func_param)
typedef void (*EngineFuncParamDeleter)(void*);
// int MXEnginePushSyncND(EngineSyncFunc sync_func, void* func_param, EngineFuncParamDeleter deleter,
//                        ContextHandle ctx_handle, NDArrayHandle* const_nds_handle, int num_const_nds,
//                        NDArrayHandle* mutable_nds_handle, int num_mutable_nds,
//                        EngineFnPropertyHandle prop_handle DEFAULT(NULL), int priority DEFAULT(0),
//                        const char* opr_name DEFAULT(NULL));
typedef int (*MXEnginePushSyncNDFn)(EngineSyncFunc, void*, EngineFuncParamDeleter, ContextHandle, NDArrayHandle*, int,
                                    NDArrayHandle*, int, EngineFnPropertyHandle, int, const char*);
// int MXNDArrayCreate(const uint32_t* shape, uint32_t ndim, int dev_type, int dev_id, int delay_alloc,
//                     NDArrayHandle* out);
typedef int (*MXNDArrayCreateFn)(const uint32_t*, uint32_t, int, int, int, NDArrayHandle*);
typedef int (*MXNDArrayFreeFn)(NDArrayHandle);  // int MXNDArrayFree(NDArrayHandle handle);
typedef int (*MXNDArrayWaitAllFn)();            // int MXNDArrayWaitAll(); -> Engine::Get()->WaitForAll()
typedef const char* (*MXGetLastErrorFn)();      // const char* MXGetLastError();
typedef int (*MXGetVersionFn)(int*);            // int MXGetVersion(int* out);
}

// mxnet::Context as laid out in include/mxnet/base.h: an enum (int) then an int32_t. kCPU = cpu::kDevMask = 1.
struct MxContext {
  int dev_type;
  std::int32_t dev_id;
};
constexpr int kMxCpu = 1;
const MxContext kCpuContext{kMxCpu, 0};

struct MxApi {
  void* lib = nullptr;
  MXEnginePushSyncNDFn push_sync_nd = nullptr;
  MXNDArrayCreateFn nd_create = nullptr;
  MXNDArrayFreeFn nd_free = nullptr;
  MXNDArrayWaitAllFn wait_all = nullptr;
  MXGetLastErrorFn last_error = nullptr;
  MXGetVersionFn get_version = nullptr;
};
MxApi mx;

// Loads libmxnet.so and the functions above. Returns "" or what went wrong.
std::string LoadMxnet(const std::string& path) {
  mx.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (mx.lib == nullptr) {
    const char* e = dlerror();
    return "dlopen(" + path + ") failed: " + (e ? e : "?") +
           " (install MXNet with `python3 -m venv /work/mxnet-venv && /work/mxnet-venv/bin/pip install "
           "mxnet==1.9.1 \"numpy<1.24\"`, or pass --lib PATH/libmxnet.so)";
  }
  std::string missing;
  auto sym = [&](const char* name) {
    void* p = dlsym(mx.lib, name);
    if (p == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
    return p;
  };
  mx.push_sync_nd = reinterpret_cast<MXEnginePushSyncNDFn>(sym("MXEnginePushSyncND"));
  mx.nd_create = reinterpret_cast<MXNDArrayCreateFn>(sym("MXNDArrayCreate"));
  mx.nd_free = reinterpret_cast<MXNDArrayFreeFn>(sym("MXNDArrayFree"));
  mx.wait_all = reinterpret_cast<MXNDArrayWaitAllFn>(sym("MXNDArrayWaitAll"));
  mx.last_error = reinterpret_cast<MXGetLastErrorFn>(sym("MXGetLastError"));
  mx.get_version = reinterpret_cast<MXGetVersionFn>(sym("MXGetVersion"));
  if (!missing.empty()) return path + " lacks " + missing + " (is it MXNet 1.9.x?)";
  return "";
}

std::string LastError() { return mx.last_error ? mx.last_error() : "?"; }

// ---------------------------------------------------------------------------------------------------
// Helpers copied from bench/engine/engine_bench.cc, so that the checks and (d)'s plan are the same.
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr std::int64_t kDefaultFunctions = 200000;
constexpr std::int64_t kQuickFunctions = 2000;
constexpr int kDefaultRepeat = 5;
constexpr std::int64_t kIndependentVars = 1024;
constexpr int kRandomVars = 100;
constexpr int kRandomMaxVarsPerFn = 4;
constexpr int kMaxReaders = 1024;

double Seconds(Clock::time_point t0, Clock::time_point t1) { return std::chrono::duration<double>(t1 - t0).count(); }

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t Mix(std::uint64_t a, std::uint64_t b) {
  return SplitMix64(a ^ (b * 0x9e3779b97f4a7c15ULL + 0x7f4a7c15ULL + (a << 6) + (a >> 2)));
}

class CheckLog {
 public:
  void Fail(const std::string& what) {
    if (failures_.fetch_add(1, std::memory_order_relaxed) == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      first_ = what;
    }
  }
  std::string Summary() {
    const std::int64_t n = failures_.load(std::memory_order_relaxed);
    if (n == 0) return {};
    std::lock_guard<std::mutex> lock(mu_);
    return n == 1 ? first_ : first_ + " (and " + std::to_string(n - 1) + " more failed checks)";
  }

 private:
  std::atomic<std::int64_t> failures_{0};
  std::mutex mu_;
  std::string first_;
};

struct RunResult {
  double seconds = 0;       // first push to WaitAll's return
  double push_seconds = 0;  // first push to the last push's return
  // CPU time, which a busy shared machine inflates much less than wall time: the pushing thread's during the
  // push phase, and the whole process's (pusher + MXNet's threads) from the first push to WaitAll's return.
  double push_cpu_seconds = 0;
  double process_cpu_seconds = 0;
  std::int64_t functions = 0;
  std::string error;
};

// Per-thread tallies (count and hash sum) proving that every function ran exactly once.
class RunTally {
 public:
  RunTally() : id_(next_id_.fetch_add(1, std::memory_order_relaxed)) {}
  void Add(std::int64_t i) {
    Slot* slot = Local();
    ++slot->count;
    slot->hash_sum += SplitMix64(static_cast<std::uint64_t>(i));
  }
  void Verify(std::int64_t n, CheckLog* log) {
    std::int64_t count = 0;
    std::uint64_t sum = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Slot& s : slots_) {
        count += s.count;
        sum += s.hash_sum;
      }
    }
    std::uint64_t expected = 0;
    for (std::int64_t i = 0; i < n; ++i) expected += SplitMix64(static_cast<std::uint64_t>(i));
    if (count != n) {
      log->Fail(std::to_string(count) + " functions ran, expected " + std::to_string(n));
    } else if (sum != expected) {
      log->Fail("the right number of functions ran, but some ran twice and others never");
    }
  }

 private:
  struct alignas(64) Slot {
    std::int64_t count = 0;
    std::uint64_t hash_sum = 0;
  };
  Slot* Local() {
    thread_local std::uint64_t cached_id = 0;
    thread_local Slot* cached_slot = nullptr;
    if (cached_id != id_) {
      std::lock_guard<std::mutex> lock(mu_);
      cached_slot = &slots_.emplace_back();
      cached_id = id_;
    }
    return cached_slot;
  }
  static inline std::atomic<std::uint64_t> next_id_{1};
  const std::uint64_t id_;
  std::mutex mu_;
  std::deque<Slot> slots_;
};

struct alignas(64) PaddedCount {
  std::int64_t value = 0;
};
struct alignas(64) PaddedAtomic {
  std::atomic<std::uint64_t> value{0};
};

// Fires on_hang (on its own thread) when a run stays armed longer than the timeout.
class Watchdog {
 public:
  Watchdog(double timeout_s, std::function<void(const std::string&)> on_hang)
      : timeout_s_(timeout_s), on_hang_(std::move(on_hang)) {
    if (timeout_s_ > 0) thread_ = std::thread([this] { Loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Arm(const std::string& label) {
    if (timeout_s_ <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    label_ = label;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    armed_ = true;
    cv_.notify_all();
  }
  void Disarm() {
    if (timeout_s_ <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      if (Clock::now() >= deadline_) {
        const std::string label = label_;
        lock.unlock();
        on_hang_(label);  // does not return
        return;
      }
      cv_.wait_until(lock, deadline_);
    }
  }
  const double timeout_s_;
  const std::function<void(const std::string&)> on_hang_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  std::string label_;
  Clock::time_point deadline_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------------
// Workloads. A pushed function gets its index (or a packed code) as func_param, cast to a pointer, and the
// run's state through a global set before the run (every function has finished when WaitAll returns):
// the benchmark itself allocates nothing per push, and MXNet's C API wraps func_param without a deleter.

void* Param(std::uint64_t v) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v)); }
std::uint64_t Unparam(void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); }

// Pushes one function; a C API error goes to the log (and the caller stops pushing).
bool Push(EngineSyncFunc fn, std::uint64_t param, NDArrayHandle* reads, int n_reads, NDArrayHandle* writes,
          int n_writes, CheckLog* log) {
  if (mx.push_sync_nd(fn, Param(param), nullptr, &kCpuContext, reads, n_reads, writes, n_writes, nullptr, 0, nullptr) !=
      0) {
    log->Fail("MXEnginePushSyncND failed: " + LastError());
    return false;
  }
  return true;
}

// Times push_all (returns false to stop early) + MXNDArrayWaitAll.
template <typename PushAll>
RunResult TimePushes(CheckLog* log, PushAll&& push_all) {
  RunResult r;
  const double p0 = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  const double c0 = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
  const auto t0 = Clock::now();
  push_all();
  const auto t1 = Clock::now();
  const double c1 = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
  if (mx.wait_all() != 0) log->Fail("MXNDArrayWaitAll failed: " + LastError());
  const auto t2 = Clock::now();
  const double p2 = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  r.seconds = Seconds(t0, t2);
  r.push_seconds = Seconds(t0, t1);
  r.push_cpu_seconds = c1 - c0;
  r.process_cpu_seconds = p2 - p0;
  return r;
}

// (a) chain: function i asserts that exactly i functions ran before it (plain counter: one variable orders all).
struct ChainState {
  std::int64_t counter = 0;
  CheckLog log;
};
ChainState* g_chain = nullptr;
void ChainFn(void*, void* p) {
  const auto i = static_cast<std::int64_t>(Unparam(p));
  ChainState* st = g_chain;
  if (st->counter != i) {
    st->log.Fail("chain function " + std::to_string(i) + " ran when " + std::to_string(st->counter) +
                 " functions of the chain had run");
  }
  st->counter = i + 1;
}

RunResult MxChain(NDArrayHandle var, std::int64_t n) {
  ChainState st;
  g_chain = &st;
  NDArrayHandle writes[1] = {var};
  RunResult r = TimePushes(&st.log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      if (!Push(ChainFn, static_cast<std::uint64_t>(i), nullptr, 0, writes, 1, &st.log)) return;
    }
  });
  if (st.counter != n) st.log.Fail(std::to_string(st.counter) + " of " + std::to_string(n) + " chain functions ran");
  r.functions = n;
  r.error = st.log.Summary();
  return r;
}

// (b) independent: function i writes vars[i % 1024]; the k-th function of a variable asserts it runs k-th there.
struct IndependentState {
  std::vector<PaddedCount> per_var = std::vector<PaddedCount>(kIndependentVars);
  CheckLog log;
};
IndependentState* g_independent = nullptr;
void IndependentFn(void*, void* p) {
  const auto i = static_cast<std::int64_t>(Unparam(p));
  IndependentState* st = g_independent;
  PaddedCount& c = st->per_var[static_cast<std::size_t>(i % kIndependentVars)];
  if (c.value != i / kIndependentVars)
    st->log.Fail("function " + std::to_string(i) + " ran out of order on its variable");
  ++c.value;
}

RunResult MxIndependent(std::vector<NDArrayHandle>& vars, std::int64_t n) {
  IndependentState st;
  g_independent = &st;
  RunResult r = TimePushes(&st.log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      if (!Push(IndependentFn, static_cast<std::uint64_t>(i), nullptr, 0,
                &vars[static_cast<std::size_t>(i % kIndependentVars)], 1, &st.log))
        return;
    }
  });
  for (std::int64_t v = 0; v < kIndependentVars; ++v) {
    const std::int64_t expected = n / kIndependentVars + (v < n % kIndependentVars ? 1 : 0);
    if (st.per_var[static_cast<std::size_t>(v)].value != expected) {
      st.log.Fail("variable " + std::to_string(v) + " saw " +
                  std::to_string(st.per_var[static_cast<std::size_t>(v)].value) + " functions, expected " +
                  std::to_string(expected));
    }
  }
  r.functions = n;
  r.error = st.log.Summary();
  return r;
}

// (b') no variables at all: the cost of a push through the C API and the engine, with nothing to order.
RunTally* g_tally = nullptr;
void NoVarsFn(void*, void* p) { g_tally->Add(static_cast<std::int64_t>(Unparam(p))); }

RunResult MxIndependentNoVars(std::int64_t n) {
  RunTally tally;
  CheckLog log;
  g_tally = &tally;
  RunResult r = TimePushes(&log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      if (!Push(NoVarsFn, static_cast<std::uint64_t>(i), nullptr, 0, nullptr, 0, &log)) return;
    }
  });
  tally.Verify(n, &log);
  r.functions = n;
  r.error = log.Summary();
  return r;
}

// (c) round r: one writer of x, then K readers of x, reader j also writing its private p_j. Same checks as troupe.
struct ReaderWriterState {
  explicit ReaderWriterState(int k) : readers(k), reads(static_cast<std::size_t>(k)) {}
  const int readers;
  std::atomic<std::uint64_t> value{0};
  std::atomic<int> writer_active{0};
  std::vector<PaddedAtomic> reads;
  CheckLog log;

  void Write(std::uint64_t round) {
    if (writer_active.exchange(1, std::memory_order_acq_rel) != 0) {
      log.Fail("writer of round " + std::to_string(round) + " overlapped another writer");
    }
    std::uint64_t done = 0;
    for (const PaddedAtomic& r : reads) done += r.value.load(std::memory_order_acquire);
    if (done != round * static_cast<std::uint64_t>(readers)) {
      log.Fail("writer of round " + std::to_string(round) + " ran when " + std::to_string(done) +
               " reads were done (expected " + std::to_string(round * static_cast<std::uint64_t>(readers)) + ")");
    }
    value.store(round + 1, std::memory_order_relaxed);
    writer_active.store(0, std::memory_order_release);
  }

  void Read(std::uint64_t round, std::size_t j) {
    if (writer_active.load(std::memory_order_acquire) != 0 || value.load(std::memory_order_relaxed) != round + 1) {
      log.Fail("reader " + std::to_string(j) + " of round " + std::to_string(round) + " saw value " +
               std::to_string(value.load()) + " or a running writer at its start (expected " +
               std::to_string(round + 1) + ")");
    }
    if (reads[j].value.load(std::memory_order_relaxed) != round) {
      log.Fail("reader " + std::to_string(j) + " of round " + std::to_string(round) +
               " ran out of order on its private variable");
    }
    reads[j].value.store(round + 1, std::memory_order_release);
    if (writer_active.load(std::memory_order_acquire) != 0 || value.load(std::memory_order_relaxed) != round + 1) {
      log.Fail("a writer ran while reader " + std::to_string(j) + " of round " + std::to_string(round) +
               " was running");
    }
  }
};
ReaderWriterState* g_rw = nullptr;
void WriterFn(void*, void* p) { g_rw->Write(Unparam(p)); }
void ReaderFn(void*, void* p) {
  const std::uint64_t code = Unparam(p);
  g_rw->Read(code >> 10, static_cast<std::size_t>(code & 1023u));
}

RunResult MxReaderWriter(NDArrayHandle x, std::vector<NDArrayHandle>& priv, std::int64_t n) {
  const int k = static_cast<int>(priv.size());
  const std::int64_t rounds = std::max<std::int64_t>(1, n / (k + 1));
  ReaderWriterState st(k);
  g_rw = &st;
  NDArrayHandle x_only[1] = {x};
  RunResult r = TimePushes(&st.log, [&] {
    for (std::int64_t rr = 0; rr < rounds; ++rr) {
      const auto round = static_cast<std::uint64_t>(rr);
      if (!Push(WriterFn, round, nullptr, 0, x_only, 1, &st.log)) return;
      for (int j = 0; j < k; ++j) {
        if (!Push(ReaderFn, (round << 10) | static_cast<std::uint64_t>(j), x_only, 1,
                  &priv[static_cast<std::size_t>(j)], 1, &st.log))
          return;
      }
    }
  });
  const auto r_total = static_cast<std::uint64_t>(rounds);
  if (st.value.load() != r_total)
    st.log.Fail("the last writer's value is " + std::to_string(st.value.load()) + ", expected " +
                std::to_string(r_total));
  for (std::size_t j = 0; j < priv.size(); ++j) {
    if (st.reads[j].value.load() != r_total)
      st.log.Fail("reader " + std::to_string(j) + " ran " + std::to_string(st.reads[j].value.load()) +
                  " times, expected " + std::to_string(r_total));
  }
  r.functions = rounds * (k + 1);
  r.error = st.log.Summary();
  return r;
}

// (d) random mixed: troupe's generator and sequential model, verbatim (same seed -> same functions).
struct RandomFn {
  std::uint8_t count = 0;
  std::uint8_t write_mask = 0;
  std::uint8_t vars[kRandomMaxVarsPerFn] = {};
  std::uint32_t writes_before[kRandomMaxVarsPerFn] = {};
};

struct RandomPlan {
  std::uint64_t seed = 0;
  std::vector<RandomFn> fns;
  std::vector<std::uint64_t> initial;
  std::vector<std::uint64_t> expected;
  std::vector<std::uint64_t> writes;
};

template <typename Load, typename Store>
void ApplyRandomFn(const RandomFn& f, std::int64_t i, Load&& load, Store&& store) {
  std::uint64_t h = SplitMix64(static_cast<std::uint64_t>(i));
  for (int k = 0; k < f.count; ++k) {
    if ((f.write_mask & (1u << k)) == 0) h = Mix(h, load(f.vars[k]));
  }
  for (int k = 0; k < f.count; ++k) {
    if ((f.write_mask & (1u << k)) != 0) store(f.vars[k], Mix(load(f.vars[k]), h));
  }
}

RandomPlan MakeRandomPlan(std::uint64_t seed, std::int64_t n) {
  RandomPlan plan;
  plan.seed = seed;
  std::mt19937_64 rng(seed);
  plan.fns.resize(static_cast<std::size_t>(n));
  for (RandomFn& f : plan.fns) {
    f.count = static_cast<std::uint8_t>(1 + rng() % kRandomMaxVarsPerFn);
    for (int k = 0; k < f.count; ++k) {
      std::uint8_t v;
      bool fresh;
      do {
        v = static_cast<std::uint8_t>(rng() % kRandomVars);
        fresh = std::find(f.vars, f.vars + k, v) == f.vars + k;
      } while (!fresh);
      f.vars[k] = v;
      if (rng() & 1u) f.write_mask = static_cast<std::uint8_t>(f.write_mask | (1u << k));
    }
  }
  plan.initial.resize(kRandomVars);
  for (int v = 0; v < kRandomVars; ++v)
    plan.initial[static_cast<std::size_t>(v)] = SplitMix64(seed ^ (0x1000u + static_cast<std::uint64_t>(v)));
  plan.expected = plan.initial;
  plan.writes.assign(kRandomVars, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    RandomFn& f = plan.fns[static_cast<std::size_t>(i)];
    for (int k = 0; k < f.count; ++k) f.writes_before[k] = static_cast<std::uint32_t>(plan.writes[f.vars[k]]);
    ApplyRandomFn(
        f, i, [&](int v) { return plan.expected[static_cast<std::size_t>(v)]; },
        [&](int v, std::uint64_t x) { plan.expected[static_cast<std::size_t>(v)] = x; });
    for (int k = 0; k < f.count; ++k) {
      if ((f.write_mask & (1u << k)) != 0) ++plan.writes[f.vars[k]];
    }
  }
  return plan;
}

struct RandomState {
  const RandomPlan* plan = nullptr;
  std::vector<PaddedAtomic> values = std::vector<PaddedAtomic>(kRandomVars);
  std::vector<PaddedAtomic> writes_done = std::vector<PaddedAtomic>(kRandomVars);
  CheckLog log;

  void Run(std::int64_t i) {
    const RandomFn& f = plan->fns[static_cast<std::size_t>(i)];
    for (int k = 0; k < f.count; ++k) {
      const std::uint64_t seen = writes_done[f.vars[k]].value.load(std::memory_order_relaxed);
      if (seen != f.writes_before[k]) {
        log.Fail("random function " + std::to_string(i) + " ran when variable " + std::to_string(f.vars[k]) +
                 " (which it " + ((f.write_mask & (1u << k)) != 0 ? "writes" : "reads") + ") had seen " +
                 std::to_string(seen) + " writes; push order requires " + std::to_string(f.writes_before[k]));
      }
    }
    ApplyRandomFn(
        f, i, [&](int v) { return values[static_cast<std::size_t>(v)].value.load(std::memory_order_relaxed); },
        [&](int v, std::uint64_t x) { values[static_cast<std::size_t>(v)].value.store(x, std::memory_order_relaxed); });
    for (int k = 0; k < f.count; ++k) {
      if ((f.write_mask & (1u << k)) != 0) {
        writes_done[f.vars[k]].value.store(f.writes_before[k] + 1u, std::memory_order_relaxed);
      }
    }
  }
};
RandomState* g_random = nullptr;
void RandomFnRun(void*, void* p) { g_random->Run(static_cast<std::int64_t>(Unparam(p))); }

RunResult MxRandom(std::vector<NDArrayHandle>& vars, const RandomPlan& plan) {
  const auto n = static_cast<std::int64_t>(plan.fns.size());
  RandomState st;
  st.plan = &plan;
  g_random = &st;
  for (int v = 0; v < kRandomVars; ++v)
    st.values[static_cast<std::size_t>(v)].value.store(plan.initial[static_cast<std::size_t>(v)]);
  NDArrayHandle reads[kRandomMaxVarsPerFn];
  NDArrayHandle writes[kRandomMaxVarsPerFn];
  RunResult r = TimePushes(&st.log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      const RandomFn& f = plan.fns[static_cast<std::size_t>(i)];
      int nr = 0;
      int nw = 0;
      for (int k = 0; k < f.count; ++k) {
        if ((f.write_mask & (1u << k)) != 0) {
          writes[nw++] = vars[f.vars[k]];
        } else {
          reads[nr++] = vars[f.vars[k]];
        }
      }
      if (!Push(RandomFnRun, static_cast<std::uint64_t>(i), reads, nr, writes, nw, &st.log)) return;
    }
  });
  int wrong = 0;
  int first_wrong = -1;
  for (int v = 0; v < kRandomVars; ++v) {
    if (st.values[static_cast<std::size_t>(v)].value.load() != plan.expected[static_cast<std::size_t>(v)]) {
      if (wrong++ == 0) first_wrong = v;
    }
  }
  if (wrong > 0) {
    st.log.Fail(std::to_string(wrong) + " of " + std::to_string(kRandomVars) +
                " variables differ from the sequential model (the first: variable " + std::to_string(first_wrong) +
                "; seed " + std::to_string(plan.seed) + ", " + std::to_string(n) + " functions)");
  }
  r.functions = n;
  r.error = st.log.Summary();
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Harness.

struct WorkloadDef {
  const char* name;
  const char* group;
  const char* description;
  const char* unit;  // troupe's unit for this workload (the JSON "value"); ns_per_function is always there too
  bool lower_is_better;
  const char* notes;
};

const WorkloadDef kWorkloadDefs[] = {
    {"chain", "chain", "(a) dependent chain: N no-op MXEnginePushSyncND functions, all writing one variable",
     "ns/function", true,
     "figure = wall time from the first push to MXNDArrayWaitAll's return / N. Check: function i asserts that "
     "exactly i functions ran before it."},
    {"independent", "independent",
     "(b) independent no-op MXEnginePushSyncND functions, function i writing variable i mod 1024", "functions/s", false,
     "1024 NDArrays cycled over (functions i and i+1024 are ordered). figure = N / wall time. Check: the k-th "
     "function of each variable asserts it runs k-th there."},
    {"independent_novars", "independent", "(b) independent no-op MXEnginePushSyncND functions with no variables at all",
     "functions/s", false,
     "figure as for independent: the cost of a C API push through the engine with nothing to order. Check: "
     "per-thread tallies (count and hash sum)."},
    {"reader_writer", "reader_writer",
     "(c) one writer then K readers of one variable, repeated (each reader also writes its own private variable)",
     "ns/function", true,
     "rounds = N / (K+1); figure = wall time / (rounds * (K+1)). Check: as troupe's (readers see their round's "
     "value and no running writer; a writer sees all K reads of the previous round done)."},
    {"random_mixed", "random_mixed",
     "(d) random mixed workload: N functions reading/writing 1-4 distinct of 100 variables (seeded)", "functions/s",
     false,
     "troupe's generator verbatim (same seed -> same functions); final values compared with the sequential model, "
     "and each function checks the writes its variables have seen."},
};

struct Options {
  std::string json_path;
  std::int64_t functions = 0;
  int repeat = 0;
  int readers = 8;
  bool quick = false;
  std::uint64_t seed = 0;
  std::vector<int> workers = {1, 2};
  std::vector<std::string> workloads = {"chain", "independent", "reader_writer", "random_mixed"};
  std::string lib = MXNET_BENCH_DEFAULT_LIB;
  std::string engine_type = "ThreadedEnginePerDevice";
  double timeout_s = 300;
  // Internal: set in a forked child (one worker count).
  int child_workers = 0;
  std::string part_path;
};

bool Selected(const Options& o, const std::string& group) {
  return std::find(o.workloads.begin(), o.workloads.end(), group) != o.workloads.end();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

std::string Fmt(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f", v);
  }
  return buf;
}

// One workload's measurements in one child.
Json Measure(const Options& o, int workers, const WorkloadDef& def, std::int64_t n, Watchdog& dog,
             const std::function<RunResult(std::int64_t)>& run, Json* failures) {
  std::fprintf(stderr, "[mxnet bench] w=%d %-19s ", workers, def.name);
  std::fflush(stderr);
  std::vector<double> values;
  std::vector<double> ns;
  std::vector<double> push_ns;
  std::vector<double> push_cpu_ns;
  std::vector<double> cpu_ns;
  Json errors = Json::array();
  std::int64_t functions = 0;
  for (int rep = -1; rep < o.repeat; ++rep) {
    const std::string label = std::string("mxnet w=") + std::to_string(workers) + " " + def.name +
                              (rep < 0 ? " warm-up" : " repetition " + std::to_string(rep + 1));
    dog.Arm(label);
    RunResult r = run(n);
    dog.Disarm();
    functions = r.functions;
    if (!r.error.empty()) {
      errors.push_back(label + ": " + r.error);
      continue;
    }
    if (rep < 0) continue;
    const double f = static_cast<double>(r.functions);
    ns.push_back(r.seconds * 1e9 / f);
    push_ns.push_back(r.push_seconds * 1e9 / f);
    push_cpu_ns.push_back(r.push_cpu_seconds * 1e9 / f);
    cpu_ns.push_back(r.process_cpu_seconds * 1e9 / f);
    values.push_back(def.lower_is_better ? r.seconds * 1e9 / f : f / r.seconds);
  }
  Json j;
  j["engine"] = "mxnet";
  j["workers"] = workers;
  j["shards"] = nullptr;
  j["functions"] = functions;
  if (values.empty()) {
    std::fprintf(stderr, "no valid sample\n");
    for (const char* k : {"value", "min", "max", "spread"}) j[k] = nullptr;
    j["samples"] = Json::array();
    j["ns_per_function"] = nullptr;
    j["push_ns_per_function"] = nullptr;
    j["push_cpu_ns_per_function"] = nullptr;
    j["cpu_ns_per_function"] = nullptr;
  } else {
    const double mn = *std::min_element(values.begin(), values.end());
    const double mx_ = *std::max_element(values.begin(), values.end());
    j["value"] = Median(values);
    j["min"] = mn;
    j["max"] = mx_;
    j["spread"] = mn > 0 ? Json(mx_ / mn) : Json(nullptr);
    j["samples"] = values;
    j["ns_per_function"] = {{"median", Median(ns)},
                            {"min", *std::min_element(ns.begin(), ns.end())},
                            {"max", *std::max_element(ns.begin(), ns.end())},
                            {"samples", ns}};
    j["push_ns_per_function"] = {{"median", Median(push_ns)},
                                 {"min", *std::min_element(push_ns.begin(), push_ns.end())},
                                 {"max", *std::max_element(push_ns.begin(), push_ns.end())}};
    j["push_cpu_ns_per_function"] = {{"median", Median(push_cpu_ns)},
                                     {"min", *std::min_element(push_cpu_ns.begin(), push_cpu_ns.end())},
                                     {"max", *std::max_element(push_cpu_ns.begin(), push_cpu_ns.end())}};
    j["cpu_ns_per_function"] = {{"median", Median(cpu_ns)},
                                {"min", *std::min_element(cpu_ns.begin(), cpu_ns.end())},
                                {"max", *std::max_element(cpu_ns.begin(), cpu_ns.end())}};
    std::fprintf(stderr,
                 "median %10s  min %10s  max %10s %s   (%.1f ns/function; push phase %.1f ns wall, %.1f ns pusher "
                 "CPU; %.1f ns process CPU)\n",
                 Fmt(Median(values)).c_str(), Fmt(mn).c_str(), Fmt(mx_).c_str(), def.unit, Median(ns), Median(push_ns),
                 Median(push_cpu_ns), Median(cpu_ns));
  }
  j["ok"] = errors.empty();
  j["errors"] = errors;
  for (const auto& e : errors) {
    std::fprintf(stderr, "[mxnet bench] CHECK FAILED: %s\n", e.get<std::string>().c_str());
    failures->push_back(e);
  }
  return j;
}

const WorkloadDef& Def(const std::string& name) {
  for (const WorkloadDef& d : kWorkloadDefs) {
    if (name == d.name) return d;
  }
  std::abort();
}

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

// The child: one worker count, one process. Writes its part (JSON) to o.part_path; returns the exit status.
int RunChild(const Options& o, std::int64_t n, std::uint64_t seed) {
  const int w = o.child_workers;
  // MXNet reads these when the library initialises (dmlc::GetEnv in LibraryInitializer / Engine::Create).
  setenv("MXNET_CPU_WORKER_NTHREADS", std::to_string(w).c_str(), 1);
  setenv("MXNET_ENGINE_TYPE", o.engine_type.c_str(), 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  Json part;
  part["workers"] = w;
  Json failures = Json::array();
  Json process;
  process["env"] = {{"MXNET_CPU_WORKER_NTHREADS", std::to_string(w)},
                    {"MXNET_ENGINE_TYPE", o.engine_type},
                    {"OMP_NUM_THREADS", "1"},
                    {"MXNET_CPU_PRIORITY_NTHREADS", getenv("MXNET_CPU_PRIORITY_NTHREADS")
                                                        ? Json(getenv("MXNET_CPU_PRIORITY_NTHREADS"))
                                                        : Json("unset (MXNet default 4, idle here)")}};
  const auto load0 = Clock::now();
  const std::string load_error = LoadMxnet(o.lib);
  if (!load_error.empty()) {
    std::fprintf(stderr, "[mxnet bench] %s\n", load_error.c_str());
    failures.push_back(load_error);
    part["process"] = process;
    part["series"] = Json::object();
    part["failures"] = failures;
    WriteText(o.part_path, part.dump());
    return 1;
  }
  int version = 0;
  mx.get_version(&version);
  process["mxnet_version"] = version;
  process["library"] = o.lib;
  process["load_seconds"] = Seconds(load0, Clock::now());
  process["threads_after_load"] = ThreadCount();

  Watchdog dog(o.timeout_s, [&](const std::string& label) {
    std::fprintf(stderr, "\n[mxnet bench] HUNG: %s did not finish within %g s\n", label.c_str(), o.timeout_s);
    Json hung = part;
    hung["process"] = process;
    hung["hung"] = label;
    if (!hung.contains("series")) hung["series"] = Json::object();
    Json f = failures;
    f.push_back("hung: " + label);
    hung["failures"] = f;
    WriteText(o.part_path, hung.dump());
    std::fflush(nullptr);
    std::_Exit(3);
  });

  auto new_vars = [&](std::size_t count) {
    std::vector<NDArrayHandle> vars;
    const std::uint32_t shape[1] = {1};
    for (std::size_t i = 0; i < count; ++i) {
      NDArrayHandle h = nullptr;
      if (mx.nd_create(shape, 1, kMxCpu, 0, /*delay_alloc=*/1, &h) != 0) {
        std::fprintf(stderr, "[mxnet bench] MXNDArrayCreate failed: %s\n", LastError().c_str());
        std::_Exit(1);
      }
      vars.push_back(h);
    }
    return vars;
  };
  auto free_vars = [&](std::vector<NDArrayHandle>& vars) {
    for (NDArrayHandle h : vars) mx.nd_free(h);
    mx.wait_all();
    vars.clear();
  };

  Json series = Json::object();
  if (Selected(o, "chain")) {
    auto var = new_vars(1);
    series["chain"] = Measure(
        o, w, Def("chain"), n, dog, [&](std::int64_t k) { return MxChain(var[0], k); }, &failures);
    process["threads_after_first_workload"] = ThreadCount();
    free_vars(var);
  }
  if (Selected(o, "independent")) {
    auto vars = new_vars(kIndependentVars);
    series["independent"] = Measure(
        o, w, Def("independent"), n, dog, [&](std::int64_t k) { return MxIndependent(vars, k); }, &failures);
    series["independent_novars"] = Measure(
        o, w, Def("independent_novars"), n, dog, [&](std::int64_t k) { return MxIndependentNoVars(k); }, &failures);
    free_vars(vars);
  }
  if (Selected(o, "reader_writer")) {
    auto x = new_vars(1);
    auto priv = new_vars(static_cast<std::size_t>(o.readers));
    series["reader_writer"] = Measure(
        o, w, Def("reader_writer"), n, dog, [&](std::int64_t k) { return MxReaderWriter(x[0], priv, k); }, &failures);
    free_vars(x);
    free_vars(priv);
  }
  if (Selected(o, "random_mixed")) {
    const RandomPlan plan = MakeRandomPlan(seed, n);
    auto vars = new_vars(kRandomVars);
    series["random_mixed"] = Measure(
        o, w, Def("random_mixed"), n, dog, [&](std::int64_t) { return MxRandom(vars, plan); }, &failures);
    free_vars(vars);
  }
  if (!process.contains("threads_after_first_workload")) process["threads_after_first_workload"] = ThreadCount();
  part["process"] = process;
  part["series"] = series;
  part["failures"] = failures;
  if (!WriteText(o.part_path, part.dump())) {
    std::fprintf(stderr, "[mxnet bench] could not write %s\n", o.part_path.c_str());
    return 1;
  }
  return failures.empty() ? 0 : 1;
}

void Usage(FILE* f) {
  std::fprintf(f,
               "mxnet_engine_bench: MXNet 1.9.1's dependency engine on the workloads of `troupe bench engine`\n"
               "Usage: mxnet_engine_bench --json FILE [options]\n"
               "  --json FILE          write the results (pretty-printed JSON, shaped like troupe's) [required]\n"
               "  --functions N        functions per workload run (default %lld, %lld with --quick)\n"
               "  --repeat R           timed repetitions, after one untimed warm-up (default %d, 1 with --quick)\n"
               "  --readers K          readers per writer in reader_writer (default 8)\n"
               "  --workers LIST       MXNET_CPU_WORKER_NTHREADS values, one process each (default 1,2)\n"
               "  --workloads LIST     any of chain,independent,reader_writer,random_mixed (default all)\n"
               "  --seed S             seed of random_mixed (troupe's generator: pass troupe's seed to compare)\n"
               "  --quick              tiny sizes, one repetition\n"
               "  --lib PATH           libmxnet.so (default %s)\n"
               "  --engine-type NAME   MXNET_ENGINE_TYPE (default ThreadedEnginePerDevice)\n"
               "  --timeout SEC        seconds one run may take before it is reported as hung (default 300; 0: none)\n"
               "Exit status: 0 all checks passed, 1 a check failed, 2 bad usage, 3 a run hung.\n",
               static_cast<long long>(kDefaultFunctions), static_cast<long long>(kQuickFunctions), kDefaultRepeat,
               MXNET_BENCH_DEFAULT_LIB);
}

template <typename T, typename Parse>
bool ParseList(const std::string& s, std::vector<T>* out, Parse&& parse) {
  out->clear();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) return false;
    out->push_back(parse(item));
  }
  return !out->empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    auto value = [&]() -> std::string {
      if (a + 1 >= argc) {
        std::fprintf(stderr, "mxnet_engine_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++a];
    };
    try {
      if (arg == "-h" || arg == "--help") {
        Usage(stdout);
        return 0;
      } else if (arg == "--json") {
        o.json_path = value();
      } else if (arg == "--functions") {
        o.functions = std::stoll(value());
      } else if (arg == "--repeat") {
        o.repeat = std::stoi(value());
      } else if (arg == "--readers") {
        o.readers = std::stoi(value());
      } else if (arg == "--workers") {
        if (!ParseList(value(), &o.workers, [](const std::string& s) { return std::stoi(s); })) throw 0;
      } else if (arg == "--workloads") {
        if (!ParseList(value(), &o.workloads, [](const std::string& s) { return s; })) throw 0;
      } else if (arg == "--seed") {
        o.seed = std::stoull(value());
      } else if (arg == "--quick") {
        o.quick = true;
      } else if (arg == "--lib") {
        o.lib = value();
      } else if (arg == "--engine-type") {
        o.engine_type = value();
      } else if (arg == "--timeout") {
        o.timeout_s = std::stod(value());
      } else if (arg == "--child-workers") {  // internal
        o.child_workers = std::stoi(value());
      } else if (arg == "--part") {  // internal
        o.part_path = value();
      } else {
        std::fprintf(stderr, "mxnet_engine_bench: unknown option %s\n", arg.c_str());
        Usage(stderr);
        return 2;
      }
    } catch (...) {
      std::fprintf(stderr, "mxnet_engine_bench: bad value for %s\n", arg.c_str());
      return 2;
    }
  }
  if (o.json_path.empty()) {
    std::fprintf(stderr, "mxnet_engine_bench: --json FILE is required\n");
    Usage(stderr);
    return 2;
  }
  if (o.functions < 0 || o.repeat < 0 || o.readers < 1 || o.readers > kMaxReaders) {
    std::fprintf(stderr, "mxnet_engine_bench: --functions, --repeat must be positive; --readers in 1..%d\n",
                 kMaxReaders);
    return 2;
  }
  for (int w : o.workers) {
    if (w < 1) {
      std::fprintf(stderr, "mxnet_engine_bench: --workers needs counts >= 1\n");
      return 2;
    }
  }
  for (const std::string& w : o.workloads) {
    if (w != "chain" && w != "independent" && w != "reader_writer" && w != "random_mixed") {
      std::fprintf(stderr,
                   "mxnet_engine_bench: unknown workload '%s' (known: chain, independent, reader_writer, "
                   "random_mixed)\n",
                   w.c_str());
      return 2;
    }
  }
  const std::int64_t n = o.functions > 0 ? o.functions : (o.quick ? kQuickFunctions : kDefaultFunctions);
  if (o.repeat == 0) o.repeat = o.quick ? 1 : kDefaultRepeat;
  std::uint64_t seed = o.seed;
  while (seed == 0) seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();

  if (o.child_workers > 0) {
    // Leave without MXNet's static teardown (the results are written; its exit path is not what we measure).
    const int rc = RunChild(o, n, seed);
    std::fflush(nullptr);
    std::_Exit(rc);
  }

  // The parent: nothing of MXNet is loaded here and no thread is started before the forks.
  {
    std::ofstream probe(o.json_path, std::ios::trunc);
    if (!probe) {
      std::fprintf(stderr, "mxnet_engine_bench: can not write %s\n", o.json_path.c_str());
      return 2;
    }
  }
  const std::string started = UtcNow();
  std::fprintf(stderr, "[mxnet bench] %lld functions per run, warm-up + %d repetitions, workers {",
               static_cast<long long>(n), o.repeat);
  for (std::size_t i = 0; i < o.workers.size(); ++i) std::fprintf(stderr, "%s%d", i ? "," : "", o.workers[i]);
  std::fprintf(stderr, "}, readers %d, seed %llu, %d cores (%s), engine %s, lib %s\n", o.readers,
               static_cast<unsigned long long>(seed), AvailableCores(), CpuModel().c_str(), o.engine_type.c_str(),
               o.lib.c_str());

  Json processes = Json::array();
  Json failures = Json::array();
  std::map<std::string, std::vector<Json>> by_workload;
  Json mxnet_version = nullptr;
  bool hung = false;
  for (int w : o.workers) {
    const std::string part_path = o.json_path + ".w" + std::to_string(w) + ".part";
    std::remove(part_path.c_str());
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      // Re-exec (not just continue) so that the child starts from a clean process image.
      std::vector<std::string> args = {"/proc/self/exe"};
      for (int a = 1; a < argc; ++a) args.push_back(argv[a]);
      for (const std::string& s : {std::string("--child-workers"), std::to_string(w), std::string("--part"), part_path,
                                   std::string("--seed"), std::to_string(seed)})
        args.push_back(s);
      std::vector<char*> cargs;
      for (std::string& s : args) cargs.push_back(s.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      std::perror("execv /proc/self/exe");
      std::_Exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (code == 3) hung = true;
    std::ifstream in(part_path);
    std::stringstream text;
    text << in.rdbuf();
    Json part;
    try {
      part = Json::parse(text.str());
    } catch (...) {
      failures.push_back("workers=" + std::to_string(w) + ": the child exited with status " + std::to_string(code) +
                         " and left no readable results in " + part_path);
      processes.push_back({{"workers", w}, {"exit_status", code}});
      continue;
    }
    std::remove(part_path.c_str());
    Json proc = part["process"];
    proc["workers"] = w;
    proc["exit_status"] = code;
    if (proc.contains("mxnet_version")) mxnet_version = proc["mxnet_version"];
    processes.push_back(proc);
    for (const auto& f : part["failures"])
      failures.push_back("workers=" + std::to_string(w) + ": " + f.get<std::string>());
    for (auto it = part["series"].begin(); it != part["series"].end(); ++it)
      by_workload[it.key()].push_back(it.value());
  }

  Json root;
  root["benchmark"] = "engine";
  root["anchor"] = "mxnet";
  root["mxnet_version"] = mxnet_version;
  root["started"] = started;
  root["finished"] = !hung;
  root["machine"] = {{"cores", AvailableCores()},
                     {"hardware_concurrency", std::thread::hardware_concurrency()},
                     {"cpu_model", CpuModel()},
                     {"compiler", __VERSION__}};
  root["config"] = {{"functions", n},
                    {"warmup", "one untimed run of the same size before the timed repetitions"},
                    {"repeat", o.repeat},
                    {"workers", o.workers},
                    {"readers", o.readers},
                    {"quick", o.quick},
                    {"seed", seed},
                    {"workloads", o.workloads},
                    {"independent_vars", kIndependentVars},
                    {"random_vars", kRandomVars},
                    {"engine_type", o.engine_type},
                    {"library", o.lib},
                    {"api",
                     "C API via dlopen: MXEnginePushSyncND (no deleter, cpu(0), FnProperty kNormal, priority 0), "
                     "variables = NDArrays of shape {1} (MXNDArrayCreate, delay_alloc), MXNDArrayWaitAll"},
                    {"timing",
                     "wall clock from the first push to MXNDArrayWaitAll's return; push_ns_per_function: "
                     "first push to the last push's return; push_cpu_ns_per_function: the pushing thread's "
                     "CPU time in the push phase; cpu_ns_per_function: the process's CPU time (all threads) "
                     "from the first push to WaitAll's return"},
                    {"value",
                     "median of the timed repetitions in troupe's unit for the workload; min and max "
                     "alongside; ns_per_function always given too"}};
  root["processes"] = processes;
  Json workloads = Json::array();
  for (const WorkloadDef& def : kWorkloadDefs) {
    if (!Selected(o, def.group)) continue;
    Json j;
    j["name"] = def.name;
    j["description"] = def.description;
    j["unit"] = def.unit;
    j["lower_is_better"] = def.lower_is_better;
    j["functions"] = n;
    Json results = Json::array();
    for (const Json& s : by_workload[def.name]) results.push_back(s);
    j["results"] = results;
    j["notes"] = def.notes;
    workloads.push_back(j);
  }
  root["workloads"] = workloads;
  root["failures"] = failures;
  root["ok"] = failures.empty() && !hung;
  if (!WriteText(o.json_path, root.dump(2) + "\n")) {
    std::fprintf(stderr, "mxnet_engine_bench: could not write %s\n", o.json_path.c_str());
    return 1;
  }

  std::printf("mxnet_engine_bench: MXNet %s, %s, %lld functions per run, %d timed repetitions (median), %d cores\n",
              mxnet_version.is_null() ? "?" : std::to_string(mxnet_version.get<int>()).c_str(), o.engine_type.c_str(),
              static_cast<long long>(n), o.repeat, AvailableCores());
  std::printf("  %-20s %7s %12s %10s %10s %11s %11s %11s  %s\n", "workload", "workers", "ns/function", "min", "max",
              "push ns/fn", "push CPU", "proc CPU", "check");
  for (const Json& wl : root["workloads"]) {
    for (const Json& s : wl["results"]) {
      const Json& ns = s["ns_per_function"];
      if (ns.is_null()) {
        std::printf("  %-20s %7d %12s %10s %10s %11s %11s %11s  %s\n", wl["name"].get<std::string>().c_str(),
                    s["workers"].get<int>(), "-", "-", "-", "-", "-", "-", "FAILED");
        continue;
      }
      std::printf("  %-20s %7d %12.1f %10.1f %10.1f %11.1f %11.1f %11.1f  %s\n", wl["name"].get<std::string>().c_str(),
                  s["workers"].get<int>(), ns["median"].get<double>(), ns["min"].get<double>(), ns["max"].get<double>(),
                  s["push_ns_per_function"]["median"].get<double>(),
                  s["push_cpu_ns_per_function"]["median"].get<double>(),
                  s["cpu_ns_per_function"]["median"].get<double>(), s["ok"].get<bool>() ? "ok" : "FAILED");
    }
  }
  std::printf("in-run checks: %s\n", failures.empty() ? "all passed" : "FAILED (see stderr and the JSON)");
  std::fprintf(stderr, "[mxnet bench] wrote %s\n", o.json_path.c_str());
  if (hung) return 3;
  return failures.empty() ? 0 : 1;
}
