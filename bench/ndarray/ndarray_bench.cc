// The NDArray benchmark (see ndarray_bench.h for what it measures and why).
//
// Layout of this file: small helpers (page touching, pool counters), the three workloads (dot, add, alloc)
// with their anchors and checks, and the report (JSON file, table on stdout). The measuring harness (warm-up
// that sizes the runs, then timed rounds with every series of a comparison run once per round) is shared
// with the other workloads: bench/common/measure.h.
#include "bench/ndarray/ndarray_bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/config.h"
#include "base/context.h"
#include "bench/common/bench_util.h"
#include "bench/common/measure.h"
#include "engine/engine.h"
#include "tensor/ndarray.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

constexpr Context kCpu = Context::CPU(0);
constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;
constexpr std::size_t kPageBytes = 4096;
constexpr double kQuickMinTime = 0.005;
// A run of the alloc workload's ndarray series makes at most this many arrays. The loop makes arrays faster
// than the engine runs their deferred frees, so the pool takes a fresh block from the system for most of
// the arrays still waiting: up to one per call. The cap keeps those blocks (each its own mmap for large
// sizes) well under Linux's default vm.max_map_count of 65530.
constexpr std::int64_t kNDArrayMaxCalls = 16384;
// Limits of the options (memory on a development machine, not the library's limits).
constexpr int kMaxDotN = 8192;
constexpr std::int64_t kMaxAddBytes = std::int64_t{1} << 31;
constexpr std::int64_t kMaxAllocBytes = std::int64_t{1} << 32;
// The in-run checks of dot: the NDArray result against the anchor's, and sampled entries against a
// double-precision dot product (relative to sum |a_ik| |b_kj|, the scale of float rounding errors).
constexpr double kDotTolerance = 1e-4;
constexpr int kDotSpotChecks = 16;
// The targets of the acceptance text.
constexpr double kDotTargetRatio = 0.95;
constexpr int kDotTargetN = 1024;

// Writes one byte per 4 KiB page: what filling a freshly mapped block costs in page faults, without the
// cost of writing every byte.
void TouchPages(void* p, std::size_t bytes) {
  volatile char* c = static_cast<volatile char*>(p);
  for (std::size_t i = 0; i < bytes; i += kPageBytes) c[i] = 1;
}

std::string HumanBytes(std::int64_t b) { return FormatBytes(static_cast<std::uint64_t>(b)); }

// Pool counters of the process-wide CPU storage over a measurement (what NDArrays allocated).
// The counters are differences; the byte figures are the pool's state at the end (the peak is the process's).
struct PoolDelta {
  std::uint64_t allocs = 0;
  std::uint64_t hits = 0;
  std::uint64_t system_allocs = 0;
  std::uint64_t bytes_cached = 0;
  std::uint64_t blocks_cached = 0;
  std::uint64_t peak_bytes_in_use = 0;

  static PoolDelta Between(const StorageStats& a, const StorageStats& b) {
    PoolDelta d;
    d.allocs = b.allocs - a.allocs;
    d.hits = b.hits - a.hits;
    d.system_allocs = b.system_allocs - a.system_allocs;
    d.bytes_cached = b.bytes_cached;
    d.blocks_cached = b.blocks_cached;
    d.peak_bytes_in_use = b.peak_bytes_in_use;
    return d;
  }
  void Add(const PoolDelta& d) {
    allocs += d.allocs;
    hits += d.hits;
    system_allocs += d.system_allocs;
    bytes_cached = d.bytes_cached;
    blocks_cached = d.blocks_cached;
    peak_bytes_in_use = std::max(peak_bytes_in_use, d.peak_bytes_in_use);
  }
  Json ToJson() const {
    return {{"allocs", allocs},
            {"hits", hits},
            {"system_allocs", system_allocs},
            {"hit_rate", allocs == 0 ? Json(nullptr) : Json(static_cast<double>(hits) / static_cast<double>(allocs))},
            {"bytes_cached_at_end", bytes_cached},
            {"blocks_cached_at_end", blocks_cached},
            {"process_peak_bytes_in_use", peak_bytes_in_use}};
  }
};

StorageStats GlobalCpuStats() { return Storage::Get()->Stats(kCpu); }

// ---------------------------------------------------------------------------------------------------
// dot

struct DotReport {
  int n = 0;
  int blas_threads = 0;  // openblas_get_num_threads() while measuring
  Series ndarray, ndarray_into, anchor;
  PoolDelta pool;
  double relative_error = -1;       // max |nd - anchor| / max |anchor|
  double relative_error_into = -1;  // the same for Dot into an existing array
  double spot_error = -1;           // max over sampled entries of |anchor - ref| / sum |a||b|
  std::vector<std::string> errors;  // checks on the results (the series hold their own)

  double Flops() const { return 2.0 * static_cast<double>(n) * n * n; }
  bool ok() const { return errors.empty() && ndarray.ok() && ndarray_into.ok() && anchor.ok(); }
  // NDArray GFLOP/s over the anchor's (medians); > 1 means the NDArray call is faster. A failed check (a
  // wrong result) leaves no figure to compare: null.
  std::optional<double> Ratio() const {
    if (!ndarray.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Median() / ndarray.Median();
  }
  std::optional<double> RatioBest() const {
    if (!ndarray.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Best() / ndarray.Best();
  }
  std::optional<double> RatioInto() const {
    if (!ndarray_into.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Median() / ndarray_into.Median();
  }
};

void RunDot(DotReport* r, int repeat, double min_time) {
  const int n = r->n;
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  const TShape shape({n, n});
  r->ndarray = MakeSeries("ndarray_dot", "C = Dot(A, B) (a new array per call), push + WaitToRead");
  r->ndarray_into = MakeSeries("ndarray_dot_into", "Dot(A, B, &C) into an existing array, push + WaitToRead");
  r->anchor = MakeSeries(
      "cblas_sgemm",
      "cblas_sgemm(CblasRowMajor, NoTrans, NoTrans) on std::vector<float>, called on the benchmark's thread");

  NDArray a(shape, kCpu), b(shape, kCpu);
  a.SampleUniform(-1, 1);
  b.SampleUniform(-1, 1);
  const std::vector<float> ha = a.ToVector<float>(), hb = b.ToVector<float>();
  std::vector<float> hc(nn, 0.0f);
  NDArray c;
  NDArray c_into(shape, kCpu);

  const Body nd = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      c = Dot(a, b);
      c.WaitToRead();
    });
  };
  const Body nd_into = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      Dot(a, b, &c_into);
      c_into.WaitToRead();
    });
  };
  const Body anchor = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, ha.data(), n, hb.data(), n, 0.0f, hc.data(),
                  n);
      KeepAlive(hc.data());
    });
  };

  r->blas_threads = openblas_get_num_threads();
  const StorageStats pool0 = GlobalCpuStats();
  MeasureInterleaved({{&r->ndarray, nd}, {&r->anchor, anchor}, {&r->ndarray_into, nd_into}}, repeat, min_time);
  r->pool = PoolDelta::Between(pool0, GlobalCpuStats());
  if (openblas_get_num_threads() != r->blas_threads) {
    r->errors.push_back("the OpenBLAS thread count changed while measuring (" + std::to_string(r->blas_threads) +
                        " -> " + std::to_string(openblas_get_num_threads()) + "): the comparison is not fair");
  }

  // Checks: the arrays hold the anchor's result (same inputs, same library), and the anchor is right.
  if (!c.is_none()) {
    r->relative_error = MaxRelativeError(c.ToVector<float>(), hc);
    if (!(r->relative_error < kDotTolerance)) {
      r->errors.push_back("Dot(A, B) differs from cblas_sgemm: max relative error " + Fmt("%.3g", r->relative_error) +
                          " (must be < " + Fmt("%g", kDotTolerance) + ")");
    }
  }
  if (r->ndarray_into.measured()) {
    r->relative_error_into = MaxRelativeError(c_into.ToVector<float>(), hc);
    if (!(r->relative_error_into < kDotTolerance)) {
      r->errors.push_back("Dot(A, B, &C) differs from cblas_sgemm: max relative error " +
                          Fmt("%.3g", r->relative_error_into) + " (must be < " + Fmt("%g", kDotTolerance) + ")");
    }
  }
  if (r->anchor.measured()) {
    double worst = 0;
    std::uint64_t x = 0x9e3779b97f4a7c15ULL ^ static_cast<std::uint64_t>(n);
    for (int s = 0; s < kDotSpotChecks; ++s) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const std::size_t i = static_cast<std::size_t>((x >> 33) % static_cast<std::uint64_t>(n));
      const std::size_t j = static_cast<std::size_t>((x >> 13) % static_cast<std::uint64_t>(n));
      double sum = 0, scale = 0;
      for (std::size_t k = 0; k < static_cast<std::size_t>(n); ++k) {
        const double p = static_cast<double>(ha[i * n + k]) * hb[k * n + j];
        sum += p;
        scale += std::fabs(p);
      }
      const double err = std::fabs(sum - hc[i * n + j]) / (scale > 0 ? scale : 1.0);
      worst = std::max(worst, err);
    }
    r->spot_error = worst;
    if (!(worst < kDotTolerance)) {
      r->errors.push_back("cblas_sgemm's result differs from a double-precision reference at sampled entries: " +
                          Fmt("%.3g", worst) + " (must be < " + Fmt("%g", kDotTolerance) + ")");
    }
  }
}

Json DotJson(const DotReport& r) {
  const double flops = r.Flops();
  const auto gflops = [flops](double s) { return s > 0 ? flops / s / 1e9 : 0.0; };
  Json j;
  j["n"] = r.n;
  j["shape"] = std::to_string(r.n) + "x" + std::to_string(r.n) + " times " + std::to_string(r.n) + "x" +
               std::to_string(r.n) + ", float32";
  j["flops_per_call"] = flops;
  j["blas_threads"] = r.blas_threads;
  j["ndarray"] = SeriesJson(r.ndarray, "gflops", gflops);
  j["ndarray_into"] = SeriesJson(r.ndarray_into, "gflops", gflops);
  j["anchor"] = SeriesJson(r.anchor, "gflops", gflops);
  j["ratio"] = OptNum(r.Ratio());
  j["ratio_best"] = OptNum(r.RatioBest());
  j["ratio_into"] = OptNum(r.RatioInto());
  j["ratio_meaning"] =
      "ndarray GFLOP/s / cblas_sgemm GFLOP/s (medians; ratio_best: the best runs; ratio_into: Dot into an existing "
      "array). 1 = no overhead; < 1 means the NDArray call is slower. Null when a check failed.";
  j["pool"] = r.pool.ToJson();
  j["check"] = {{"relative_error", r.relative_error},
                {"relative_error_into", r.relative_error_into},
                {"spot_check_error", r.spot_error},
                {"tolerance", kDotTolerance},
                {"meaning",
                 "relative_error: max |ndarray - cblas_sgemm| / max |cblas_sgemm| over all entries (-1: not "
                 "measured); spot_check_error: max over " +
                     std::to_string(kDotSpotChecks) +
                     " sampled entries of |cblas_sgemm - double-precision sum| / sum |a_ik b_kj|"},
                {"ok", r.errors.empty()},
                {"errors", r.errors}};
  j["ok"] = r.ok();
  return j;
}

// ---------------------------------------------------------------------------------------------------
// add

struct AddReport {
  std::int64_t bytes = 0;  // per operand
  Series add, add_inplace, memcpy_anchor;
  PoolDelta pool;
  std::vector<std::string> errors;

  bool ok() const { return errors.empty() && add.ok() && add_inplace.ok() && memcpy_anchor.ok(); }
  // GB/s of bytes touched: 3 x size for the adds (two reads, one write), 2 x size for memcpy.
  double AddGBps(double s) const { return s > 0 ? 3.0 * static_cast<double>(bytes) / s / 1e9 : 0.0; }
  double CopyGBps(double s) const { return s > 0 ? 2.0 * static_cast<double>(bytes) / s / 1e9 : 0.0; }
  std::optional<double> Ratio(const Series& s) const {
    if (!s.measured() || !memcpy_anchor.measured() || !ok()) return std::nullopt;
    return AddGBps(s.Median()) / CopyGBps(memcpy_anchor.Median());
  }
};

void RunAdd(AddReport* r, int repeat, double min_time) {
  const std::int64_t elems = r->bytes / 4;
  const std::size_t bytes = static_cast<std::size_t>(r->bytes);
  const TShape shape({elems});
  r->add = MakeSeries("ndarray_add", "C = A + B (a new array per call), push + WaitToRead");
  r->add_inplace = MakeSeries("ndarray_add_inplace", "A += B, push + WaitToRead");
  r->memcpy_anchor = MakeSeries("memcpy", "std::memcpy of one operand's bytes between two touched buffers");

  NDArray a(shape, kCpu), b(shape, kCpu);
  a.SampleUniform(-1, 1);
  b.SampleUniform(-1, 1);
  const std::vector<float> ha = a.ToVector<float>(), hb = b.ToVector<float>();
  NDArray c;
  // In place: x = 1 + 0.25 k after k additions, exact in float32 for any count this benchmark reaches.
  NDArray x = NDArray::Full(shape, 1.0, kCpu), y = NDArray::Full(shape, 0.25, kCpu);
  std::int64_t inplace_adds = 0;
  std::vector<char> src(bytes), dst(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<char>(i * 131 + 7);

  const Body add = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      c = a + b;
      c.WaitToRead();
    });
  };
  const Body inplace = [&](std::int64_t calls, Clock::time_point deadline) {
    const RunResult r = TimedLoop(calls, deadline, [&] {
      x += y;
      x.WaitToRead();
    });
    inplace_adds += r.calls;
    return r;
  };
  const Body copy = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      std::memcpy(dst.data(), src.data(), bytes);
      KeepAlive(dst.data());
    });
  };

  const StorageStats pool0 = GlobalCpuStats();
  MeasureInterleaved({{&r->add, add}, {&r->memcpy_anchor, copy}, {&r->add_inplace, inplace}}, repeat, min_time);
  r->pool = PoolDelta::Between(pool0, GlobalCpuStats());

  if (!c.is_none()) {
    const std::vector<float> hc = c.ToVector<float>();
    std::int64_t wrong = 0, first = -1;
    for (std::size_t i = 0; i < hc.size(); ++i) {
      if (hc[i] != ha[i] + hb[i]) {
        if (first < 0) first = static_cast<std::int64_t>(i);
        ++wrong;
      }
    }
    if (wrong > 0) {
      const auto f = static_cast<std::size_t>(first);
      r->errors.push_back("A + B: " + std::to_string(wrong) + " of " + std::to_string(hc.size()) +
                          " values are wrong (first at " + std::to_string(first) + ": " + Fmt("%.9g", hc[f]) +
                          ", expected " + Fmt("%.9g", ha[f] + hb[f]) + ")");
    }
  }
  if (inplace_adds > 0) {
    const float want = static_cast<float>(1.0 + 0.25 * static_cast<double>(inplace_adds));
    const std::vector<float> hx = x.ToVector<float>();
    std::int64_t wrong = 0;
    for (float v : hx) wrong += v != want ? 1 : 0;
    if (wrong > 0) {
      r->errors.push_back("A += B: " + std::to_string(wrong) + " of " + std::to_string(hx.size()) +
                          " values differ from " + Fmt("%.9g", want) + " after " + std::to_string(inplace_adds) +
                          " additions");
    }
  }
  if (r->memcpy_anchor.measured() && std::memcmp(dst.data(), src.data(), bytes) != 0) {
    r->errors.push_back("memcpy: the destination differs from the source");
  }
}

Json AddJson(const AddReport& r) {
  Json j;
  j["bytes"] = r.bytes;
  j["size"] = HumanBytes(r.bytes);
  j["elements"] = r.bytes / 4;
  j["bytes_touched"] = {{"add", 3 * r.bytes}, {"add_inplace", 3 * r.bytes}, {"memcpy", 2 * r.bytes}};
  j["add"] = SeriesJson(r.add, "gbps", [&r](double s) { return r.AddGBps(s); });
  j["add_inplace"] = SeriesJson(r.add_inplace, "gbps", [&r](double s) { return r.AddGBps(s); });
  j["anchor"] = SeriesJson(r.memcpy_anchor, "gbps", [&r](double s) { return r.CopyGBps(s); });
  j["ratio_add"] = OptNum(r.Ratio(r.add));
  j["ratio_add_inplace"] = OptNum(r.Ratio(r.add_inplace));
  j["ratio_meaning"] =
      "bandwidth of the NDArray add / memcpy's, each in GB/s of bytes touched (medians). 1 = the add streams as "
      "fast as memcpy. Null when a check failed.";
  j["pool"] = r.pool.ToJson();
  j["check"] = {{"ok", r.errors.empty()}, {"errors", r.errors}};
  j["ok"] = r.ok();
  return j;
}

// ---------------------------------------------------------------------------------------------------
// alloc

struct AllocReport {
  std::int64_t bytes = 0;
  Series pool_exact, pool_round, malloc_free;                    // untouched
  Series pool_exact_touch, pool_round_touch, malloc_free_touch;  // one byte per page written
  Series ndarray;
  PoolDelta ndarray_pool;
  std::uint64_t ndarray_pool_released = 0;  // bytes the process-wide pool released after the ndarray series

  bool ok() const {
    return pool_exact.ok() && pool_round.ok() && malloc_free.ok() && pool_exact_touch.ok() && pool_round_touch.ok() &&
           malloc_free_touch.ok() && ndarray.ok();
  }
  // malloc's time over the other's (medians): > 1 means the other is faster than malloc.
  static std::optional<double> Ratio(const Series& malloc_series, const Series& other) {
    if (!malloc_series.measured() || !other.measured() || !other.ok() || other.Median() <= 0) return std::nullopt;
    return malloc_series.Median() / other.Median();
  }
};

// Alloc + (touch) + Free on a fresh Storage with `policy`. One untimed pair first, so that every timed
// allocation is a pool hit; the check is that it was.
Body PoolBody(Series* series, PoolPolicy policy, std::size_t bytes, bool touch) {
  return [series, policy, bytes, touch](std::int64_t calls, Clock::time_point deadline) {
    StorageConfig config;
    config.cpu_policy = policy;
    const std::shared_ptr<Storage> storage = Storage::Create(config);
    StorageHandle warm = storage->Alloc(bytes, kCpu);
    if (touch) TouchPages(warm.dptr, bytes);
    storage->Free(warm);
    const RunResult r = TimedLoop(calls, deadline, [&] {
      const StorageHandle h = storage->Alloc(bytes, kCpu);
      if (touch) TouchPages(h.dptr, bytes);
      KeepAlive(h.dptr);
      storage->Free(h);
    });
    const StorageStats st = storage->Stats(kCpu);
    const auto n = static_cast<std::uint64_t>(r.calls);
    if (st.allocs != n + 1 || st.hits != n || st.system_allocs != 1) {
      series->Fail("the " + std::string(PoolPolicyName(policy)) + " pool served " + std::to_string(st.hits) + " of " +
                   std::to_string(st.allocs) + " allocations of " + std::to_string(bytes) + " bytes from its cache (" +
                   std::to_string(st.system_allocs) + " from the system); expected " + std::to_string(n) + " of " +
                   std::to_string(n + 1) + " (1 from the system)");
    }
    return r;
  };
}

Body MallocBody(std::size_t bytes, bool touch) {
  return [bytes, touch](std::int64_t calls, Clock::time_point deadline) {
    void* warm = std::malloc(bytes);
    if (warm == nullptr) throw Error("malloc(" + std::to_string(bytes) + ") returned null");
    if (touch) TouchPages(warm, bytes);
    std::free(warm);
    return TimedLoop(calls, deadline, [&] {
      void* p = std::malloc(bytes);
      if (p == nullptr) throw Error("malloc(" + std::to_string(bytes) + ") returned null");
      if (touch) TouchPages(p, bytes);
      KeepAlive(p);
      std::free(p);
    });
  };
}

// Constructs and destroys a uint8 NDArray of `bytes` elements per call (the process-wide engine and storage:
// an engine variable, and the deferred free pushed when the array goes), then waits for the engine.
Body NDArrayAllocBody(Series* series, std::size_t bytes, PoolDelta* pool) {
  return [series, bytes, pool](std::int64_t calls, Clock::time_point deadline) {
    Engine* engine = Engine::Get();
    const TShape shape({static_cast<std::int64_t>(bytes)});
    { NDArray warm(shape, kCpu, DType::kUint8); }
    engine->WaitForAll();
    const StorageStats before = GlobalCpuStats();
    const RunResult r = TimedLoop(
        calls, deadline,
        [&] {
          NDArray arr(shape, kCpu, DType::kUint8);
          KeepAlive(&arr);
        },
        [engine] { engine->WaitForAll(); });
    const StorageStats after = GlobalCpuStats();
    const PoolDelta d = PoolDelta::Between(before, after);
    pool->Add(d);
    if (after.blocks_in_use != before.blocks_in_use) {
      series->Fail("after WaitForAll the pool holds " + std::to_string(after.blocks_in_use) +
                   " blocks in use, it held " + std::to_string(before.blocks_in_use) +
                   " before the run: a deferred free did not run");
    }
    if (d.allocs != static_cast<std::uint64_t>(r.calls)) {
      series->Fail(std::to_string(r.calls) + " arrays made " + std::to_string(d.allocs) + " allocations");
    }
    return r;
  };
}

// The pool against malloc for one size.
void RunAllocBare(AllocReport* r, int repeat, double min_time) {
  const auto bytes = static_cast<std::size_t>(r->bytes);
  r->pool_exact = MakeSeries("pool_exact", "Storage::Alloc + Free on an independent storage, exact policy");
  r->pool_round = MakeSeries("pool_round", "Storage::Alloc + Free on an independent storage, round policy");
  r->malloc_free = MakeSeries("malloc", "std::malloc + std::free");
  r->pool_exact_touch = MakeSeries("pool_exact_touch", "as pool_exact, writing one byte per 4 KiB page");
  r->pool_round_touch = MakeSeries("pool_round_touch", "as pool_round, writing one byte per 4 KiB page");
  r->malloc_free_touch = MakeSeries("malloc_touch", "as malloc, writing one byte per 4 KiB page");
  MeasureInterleaved({{&r->pool_exact, PoolBody(&r->pool_exact, PoolPolicy::kExact, bytes, false)},
                      {&r->pool_round, PoolBody(&r->pool_round, PoolPolicy::kRound, bytes, false)},
                      {&r->malloc_free, MallocBody(bytes, false)},
                      {&r->pool_exact_touch, PoolBody(&r->pool_exact_touch, PoolPolicy::kExact, bytes, true)},
                      {&r->pool_round_touch, PoolBody(&r->pool_round_touch, PoolPolicy::kRound, bytes, true)},
                      {&r->malloc_free_touch, MallocBody(bytes, true)}},
                     repeat, min_time);
}

// The NDArray's life for one size. Run after every RunAllocBare: the blocks this series piles up in the
// process-wide pool come from malloc, and would change what malloc does for the bare series that follow.
void RunAllocNDArray(AllocReport* r, int repeat, double min_time) {
  const auto bytes = static_cast<std::size_t>(r->bytes);
  r->ndarray =
      MakeSeries("ndarray",
                 "construct + destroy a uint8 NDArray of this size (engine variable, deferred free), WaitForAll at "
                 "the end of the run");
  MeasureInterleaved({{&r->ndarray, NDArrayAllocBody(&r->ndarray, bytes, &r->ndarray_pool), kNDArrayMaxCalls}}, repeat,
                     min_time);
  // What the series left cached (see ndarray_pool_meaning) goes back to the system, so that the next size
  // starts from the same state and the process does not keep the blocks.
  Drain();
  r->ndarray_pool_released = Storage::Get()->ReleaseAll(kCpu);
}

Json AllocJson(const AllocReport& r) {
  const auto ns = [](double s) { return s * 1e9; };
  Json j;
  j["bytes"] = r.bytes;
  j["size"] = HumanBytes(r.bytes);
  j["pages"] = (r.bytes + static_cast<std::int64_t>(kPageBytes) - 1) / static_cast<std::int64_t>(kPageBytes);
  Json series = Json::array();
  for (const Series* s : {&r.pool_exact, &r.pool_round, &r.malloc_free, &r.pool_exact_touch, &r.pool_round_touch,
                          &r.malloc_free_touch, &r.ndarray}) {
    series.push_back(SeriesJson(*s, "ns_per_pair", ns));
  }
  j["series"] = series;
  j["anchor"] = {{"untouched", r.malloc_free.name}, {"touched", r.malloc_free_touch.name}};
  j["ratios"] = {{"malloc_over_pool_exact", OptNum(AllocReport::Ratio(r.malloc_free, r.pool_exact))},
                 {"malloc_over_pool_round", OptNum(AllocReport::Ratio(r.malloc_free, r.pool_round))},
                 {"malloc_over_pool_exact_touch", OptNum(AllocReport::Ratio(r.malloc_free_touch, r.pool_exact_touch))},
                 {"malloc_over_pool_round_touch", OptNum(AllocReport::Ratio(r.malloc_free_touch, r.pool_round_touch))},
                 {"malloc_over_ndarray", OptNum(AllocReport::Ratio(r.malloc_free, r.ndarray))}};
  j["ratio_meaning"] =
      "malloc's ns per alloc/free pair / the pool's (medians), untouched and touched alike: > 1 means the pool is "
      "faster than malloc. malloc_over_ndarray compares a whole NDArray's life (engine variable, deferred free "
      "through the engine) with a bare malloc + free.";
  j["ndarray_pool"] = r.ndarray_pool.ToJson();
  j["ndarray_pool_released_bytes"] = r.ndarray_pool_released;
  j["ndarray_pool_meaning"] =
      "the process-wide CPU pool over the ndarray series (warm-up included): an array's block goes back to the "
      "pool only when the engine has run its deferred free, so a loop that makes arrays faster than the engine "
      "frees them misses the cache and takes fresh blocks from the system (system_allocs); they stay cached until "
      "the benchmark releases them after the series (ndarray_pool_released_bytes).";
  j["ok"] = r.ok();
  return j;
}

// ---------------------------------------------------------------------------------------------------
// The benchmark: options, the workloads in order, the report.

std::string NsCell(const Series& s) { return s.measured() ? Fmt("%.0f", s.Median() * 1e9) : "-"; }

class NDArrayBench {
 public:
  explicit NDArrayBench(const NDArrayBenchOptions& options) : opt_(options) {}
  int Run();

 private:
  bool Selected(const std::string& w) const {
    return std::find(opt_.workloads.begin(), opt_.workloads.end(), w) != opt_.workloads.end();
  }
  void Log(const std::string& line) const {
    std::fprintf(stderr, "[bench ndarray %6.1f s] %s\n", Seconds(t0_, Clock::now()), line.c_str());
  }
  void CollectFailures();
  Json Targets() const;
  Json BuildJson() const;
  bool WriteJson() const;
  void PrintTable() const;

  NDArrayBenchOptions opt_;
  Clock::time_point t0_ = Clock::now();
  std::string started_;
  std::string runtime_config_;
  std::string engine_type_;
  int blas_threads_ = 0;
  std::vector<DotReport> dots_;
  std::vector<AddReport> adds_;
  std::vector<AllocReport> allocs_;
  std::vector<std::string> failures_;
};

void NDArrayBench::CollectFailures() {
  auto add = [this](const std::string& where, const Series& s) {
    for (const std::string& e : s.errors) failures_.push_back(where + " " + s.name + ": " + e);
  };
  for (const DotReport& r : dots_) {
    const std::string where = "dot n=" + std::to_string(r.n);
    for (const Series* s : {&r.ndarray, &r.ndarray_into, &r.anchor}) add(where, *s);
    for (const std::string& e : r.errors) failures_.push_back(where + ": " + e);
  }
  for (const AddReport& r : adds_) {
    const std::string where = "add " + HumanBytes(r.bytes);
    for (const Series* s : {&r.add, &r.add_inplace, &r.memcpy_anchor}) add(where, *s);
    for (const std::string& e : r.errors) failures_.push_back(where + ": " + e);
  }
  for (const AllocReport& r : allocs_) {
    const std::string where = "alloc " + HumanBytes(r.bytes);
    for (const Series* s : {&r.pool_exact, &r.pool_round, &r.malloc_free, &r.pool_exact_touch, &r.pool_round_touch,
                            &r.malloc_free_touch, &r.ndarray}) {
      add(where, *s);
    }
  }
}

Json NDArrayBench::Targets() const {
  Json targets = Json::array();
  for (const DotReport& r : dots_) {
    if (r.n != kDotTargetN) continue;
    const auto ratio = r.Ratio();
    targets.push_back({{"name", "dot_1024_ratio >= 0.95"},
                       {"description", "NDArray Dot GFLOP/s >= 0.95 x cblas_sgemm's at 1024^3 (medians)"},
                       {"threshold", kDotTargetRatio},
                       {"ratio", OptNum(ratio)},
                       {"met", ratio.has_value() && *ratio >= kDotTargetRatio}});
  }
  if (!allocs_.empty()) {
    bool met = true;
    std::vector<std::string> not_met;
    Json per_size = Json::array();
    for (const AllocReport& r : allocs_) {
      const auto untouched = AllocReport::Ratio(r.malloc_free, r.pool_exact);
      const auto touched = AllocReport::Ratio(r.malloc_free_touch, r.pool_exact_touch);
      const bool ok = untouched && touched && *untouched > 1 && *touched > 1;
      if (!ok) {
        met = false;
        not_met.push_back(HumanBytes(r.bytes));
      }
      per_size.push_back({{"size", HumanBytes(r.bytes)},
                          {"malloc_over_pool_exact", OptNum(untouched)},
                          {"malloc_over_pool_exact_touch", OptNum(touched)},
                          {"met", ok}});
    }
    targets.push_back({{"name", "pool faster than malloc"},
                       {"description",
                        "for every size: malloc + free takes longer than Storage::Alloc + Free with the exact "
                        "policy on a repeated size, untouched and touched (ratio malloc/pool > 1, medians)"},
                       {"threshold", 1.0},
                       {"per_size", per_size},
                       {"not_met_for", not_met},
                       {"met", met}});
  }
  return targets;
}

Json NDArrayBench::BuildJson() const {
  Json root;
  root["benchmark"] = "ndarray";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started_;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()},
                     {"hardware_concurrency", std::thread::hardware_concurrency()},
                     {"cpu_model", CpuModel()},
                     {"compiler", __VERSION__},
                     {"openblas_config", openblas_get_config()},
                     {"openblas_corename", openblas_get_corename()},
                     {"openblas_threads", blas_threads_}};
  root["engine"] = {{"type", engine_type_},
                    {"runtime", runtime_config_},
                    {"storage_policy", PoolPolicyName(Storage::Get()->config().cpu_policy)}};
  std::vector<std::string> add_sizes, alloc_sizes;
  for (std::int64_t b : opt_.add_bytes) add_sizes.push_back(HumanBytes(b));
  for (std::int64_t b : opt_.alloc_bytes) alloc_sizes.push_back(HumanBytes(b));
  root["config"] = {
      {"quick", opt_.quick},
      {"repeat", opt_.repeat},
      {"min_time_s", opt_.min_time_s},
      {"min_calls", kMinCalls},
      {"max_seconds_per_run", "min_time_s x " + Fmt("%g", kRunOverrun) +
                                  " (a run sized by a much faster warm-up is cut short, never below min_calls)"},
      {"alloc_ndarray_max_calls", kNDArrayMaxCalls},
      {"workloads", opt_.workloads},
      {"dot_sizes", opt_.sizes},
      {"add_bytes", opt_.add_bytes},
      {"add_sizes", add_sizes},
      {"alloc_bytes", opt_.alloc_bytes},
      {"alloc_sizes", alloc_sizes},
      {"warmup",
       "per series: one untimed call, then untimed runs of growing length that size a timed run to min_time_s "
       "(at least min_calls calls)"},
      {"order", "in each of the repeat rounds every series of a comparison runs once (figure and anchor alternate)"},
      {"value", "median of the timed runs (seconds per call, and the derived figure of each run); best = fastest run"},
      {"fairness",
       "the engine is started before anything is timed, so OpenBLAS already runs with the thread count the runtime "
       "set (RuntimeConfig::blas_threads); cblas_sgemm is called on the benchmark's thread with that same count"}};
  Json dots = Json::array();
  for (const DotReport& r : dots_) dots.push_back(DotJson(r));
  Json adds = Json::array();
  for (const AddReport& r : adds_) adds.push_back(AddJson(r));
  Json allocs = Json::array();
  for (const AllocReport& r : allocs_) allocs.push_back(AllocJson(r));
  root["dot"] = dots;
  root["add"] = adds;
  root["alloc"] = allocs;
  root["notes"] = {
      "dot: the NDArray figure includes the push, the engine's hand-off to a worker thread, the allocation of C "
      "from the pool (ndarray_dot) and the wake-up of the waiting thread; the kernel is the same cblas_sgemm.",
      "add: the NDArray add is one thread's vectorised loop; memcpy is glibc's (non-temporal stores for large "
      "sizes, so it avoids the read-for-ownership of the destination that the add's stores pay).",
      "alloc: glibc's malloc serves a size from its heap once a free of that size raised its mmap threshold "
      "(dynamic, up to 32 MiB on 64-bit); larger blocks are mmap'ed and unmapped on every call, so touching "
      "them costs page faults every time. The pool keeps its blocks mapped."};
  root["targets"] = Targets();
  root["failures"] = failures_;
  root["ok"] = failures_.empty();
  return root;
}

bool NDArrayBench::WriteJson() const { return WriteJsonFile(opt_.json_path, BuildJson(), "troupe bench ndarray"); }

void NDArrayBench::PrintTable() const {
  const auto cell = [](std::optional<double> v, const char* format) { return v ? Fmt(format, *v) : std::string("-"); };
  const auto ok = [](bool good) { return good ? "ok" : "FAILED"; };
  std::printf("troupe bench ndarray: %d timed runs per figure (medians), machine: %d cores, OpenBLAS threads %d\n",
              opt_.repeat, AvailableCores(), blas_threads_);
  if (!dots_.empty()) {
    std::printf("\ndot  [GFLOP/s, higher is better; ratio = ndarray / cblas_sgemm]\n");
    std::printf("  %6s %12s %12s %12s %8s %8s %12s  %s\n", "n", "ndarray", "nd_into", "cblas_sgemm", "ratio", "r_into",
                "rel_error", "check");
    for (const DotReport& r : dots_) {
      const auto g = [&r](const Series& s) {
        return s.measured() ? std::optional<double>(r.Flops() / s.Median() / 1e9) : std::nullopt;
      };
      std::printf("  %6d %12s %12s %12s %8s %8s %12s  %s\n", r.n, cell(g(r.ndarray), "%.2f").c_str(),
                  cell(g(r.ndarray_into), "%.2f").c_str(), cell(g(r.anchor), "%.2f").c_str(),
                  cell(r.Ratio(), "%.3f").c_str(), cell(r.RatioInto(), "%.3f").c_str(),
                  Fmt("%.2g", r.relative_error).c_str(), ok(r.ok()));
    }
  }
  if (!adds_.empty()) {
    std::printf("\nadd  [GB/s of bytes touched, higher is better; ratio = add / memcpy]\n");
    std::printf("  %10s %10s %10s %10s %9s %9s  %s\n", "size", "add", "add_inpl", "memcpy", "r_add", "r_inpl", "check");
    for (const AddReport& r : adds_) {
      const auto add_g = [&r](const Series& s) {
        return s.measured() ? std::optional<double>(r.AddGBps(s.Median())) : std::nullopt;
      };
      const std::optional<double> copy_g =
          r.memcpy_anchor.measured() ? std::optional<double>(r.CopyGBps(r.memcpy_anchor.Median())) : std::nullopt;
      std::printf("  %10s %10s %10s %10s %9s %9s  %s\n", HumanBytes(r.bytes).c_str(),
                  cell(add_g(r.add), "%.2f").c_str(), cell(add_g(r.add_inplace), "%.2f").c_str(),
                  cell(copy_g, "%.2f").c_str(), cell(r.Ratio(r.add), "%.3f").c_str(),
                  cell(r.Ratio(r.add_inplace), "%.3f").c_str(), ok(r.ok()));
    }
  }
  if (!allocs_.empty()) {
    std::printf("\nalloc  [ns per alloc/free pair, lower is better; ratio = malloc / pool, > 1: pool faster]\n");
    std::printf("  %10s %10s %10s %10s %10s | %10s %10s %10s | %8s %8s %8s  %s\n", "size", "exact", "round", "malloc",
                "ndarray", "exact+t", "round+t", "malloc+t", "r_exact", "r_ex+t", "r_nd", "check");
    for (const AllocReport& r : allocs_) {
      const auto ns = [](const Series& s) {
        return s.measured() ? std::optional<double>(s.Median() * 1e9) : std::nullopt;
      };
      std::printf("  %10s %10s %10s %10s %10s | %10s %10s %10s | %8s %8s %8s  %s\n", HumanBytes(r.bytes).c_str(),
                  cell(ns(r.pool_exact), "%.0f").c_str(), cell(ns(r.pool_round), "%.0f").c_str(),
                  cell(ns(r.malloc_free), "%.0f").c_str(), cell(ns(r.ndarray), "%.0f").c_str(),
                  cell(ns(r.pool_exact_touch), "%.0f").c_str(), cell(ns(r.pool_round_touch), "%.0f").c_str(),
                  cell(ns(r.malloc_free_touch), "%.0f").c_str(),
                  cell(AllocReport::Ratio(r.malloc_free, r.pool_exact), "%.2f").c_str(),
                  cell(AllocReport::Ratio(r.malloc_free_touch, r.pool_exact_touch), "%.2f").c_str(),
                  cell(AllocReport::Ratio(r.malloc_free, r.ndarray), "%.2f").c_str(), ok(r.ok()));
    }
  }
  const Json targets = Targets();
  if (!targets.empty()) {
    std::printf("\ntargets:\n");
    for (const Json& t : targets) {
      std::string figure;
      if (t.contains("ratio")) {
        figure = t["ratio"].is_null() ? "ratio n/a" : "ratio " + Fmt("%.3f", t["ratio"].get<double>());
      } else if (!t["not_met_for"].empty()) {
        figure = "not met for:";
        for (const Json& s : t["not_met_for"]) {
          figure += ' ';
          figure += s.get<std::string>();
        }
      } else {
        figure = "every size";
      }
      std::printf("  %-26s %-40s %s\n", t["name"].get<std::string>().c_str(), figure.c_str(),
                  t["met"].get<bool>() ? "met" : "NOT met");
    }
  }
  std::printf("\nin-run checks: %s\n", failures_.empty() ? "all passed" : "FAILED (see stderr and the JSON)");
  std::fflush(stdout);
}

int NDArrayBench::Run() {
  // Validate (the CLI checks these too; a library caller may not).
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "troupe bench ndarray: %s\n", what.c_str());
    return 2;
  };
  if (opt_.json_path.empty()) return bad("--json FILE is required");
  if (opt_.repeat < 0 || opt_.repeat > 1000) return bad("--repeat must be in 1..1000");
  if (!(opt_.min_time_s >= 0 && opt_.min_time_s <= 60)) return bad("--min-time must be in (0, 60] seconds");
  for (const std::string& w : opt_.workloads) {
    const auto& known = NDArrayBenchWorkloads();
    if (std::find(known.begin(), known.end(), w) == known.end()) {
      return bad("unknown workload '" + w + "' (known: dot, add, alloc)");
    }
  }
  if (opt_.workloads.empty()) return bad("--workloads needs one or more of dot, add, alloc");
  for (int n : opt_.sizes) {
    if (n < 1 || n > kMaxDotN)
      return bad("--sizes: " + std::to_string(n) + " is not in 1.." + std::to_string(kMaxDotN));
  }
  for (std::int64_t b : opt_.add_bytes) {
    if (b < 4 || b > kMaxAddBytes || b % 4 != 0) {
      return bad("--add-sizes: " + std::to_string(b) + " bytes is not a multiple of 4 in 4.." +
                 std::to_string(kMaxAddBytes));
    }
  }
  for (std::int64_t b : opt_.alloc_bytes) {
    if (b < 1 || b > kMaxAllocBytes) {
      return bad("--alloc-sizes: " + std::to_string(b) + " bytes is not in 1.." + std::to_string(kMaxAllocBytes));
    }
  }
  if (opt_.repeat == 0) opt_.repeat = opt_.quick ? 1 : kNDArrayDefaultRepeat;
  if (opt_.min_time_s == 0) opt_.min_time_s = opt_.quick ? kQuickMinTime : kNDArrayDefaultMinTime;
  if (opt_.sizes.empty()) opt_.sizes = opt_.quick ? std::vector<int>{64} : std::vector<int>{256, 1024};
  if (opt_.add_bytes.empty()) {
    opt_.add_bytes =
        opt_.quick ? std::vector<std::int64_t>{64 * kKiB} : std::vector<std::int64_t>{kMiB, 16 * kMiB, 64 * kMiB};
  }
  if (opt_.alloc_bytes.empty()) {
    opt_.alloc_bytes = opt_.quick ? std::vector<std::int64_t>{4 * kKiB, kMiB}
                                  : std::vector<std::int64_t>{4 * kKiB, 64 * kKiB, kMiB, 16 * kMiB, 64 * kMiB};
  }
  {
    // Fail before a minute of measuring if the file can not be written.
    std::ofstream probe(opt_.json_path, std::ios::trunc);
    if (!probe) return bad("can not write " + opt_.json_path);
  }
  started_ = UtcNow();

  // Start the engine before anything is timed: the runtime sets OpenBLAS's thread count when it starts,
  // and the anchor must run with the count the engine's workers use.
  try {
    const EngineConfig config = EngineConfig::FromEnv();
    runtime_config_ = config.runtime.Resolved().ToString();
    engine_type_ = EngineTypeName(config.type);
    NDArray probe = NDArray::Full(TShape({4}), 1.0, kCpu);
    probe += 1.0;
    probe.WaitToRead();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe bench ndarray: could not start the engine: %s\n", e.what());
    return 1;
  }
  blas_threads_ = openblas_get_num_threads();
  Log("warm-up + " + std::to_string(opt_.repeat) + " timed runs of >= " + Fmt("%g", opt_.min_time_s) +
      " s per figure; " + std::to_string(AvailableCores()) + " cores (" + CpuModel() + "), OpenBLAS threads " +
      std::to_string(blas_threads_) + ", engine " + engine_type_ + " (" + runtime_config_ + ")");

  // Runs one item, turning an exception into a failure of that item (and draining the engine, so that no
  // pushed function outlives the arrays of the item).
  auto guarded = [this](const std::string& what, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      failures_.push_back(what + ": threw: " + e.what());
      Log(what + ": FAILED: " + e.what());
      Drain();
    }
  };

  if (Selected("dot")) {
    for (int n : opt_.sizes) {
      DotReport& r = dots_.emplace_back();
      r.n = n;
      guarded("dot n=" + std::to_string(n), [&] { RunDot(&r, opt_.repeat, opt_.min_time_s); });
      const auto g = [&r](const Series& s) { return s.measured() ? Fmt("%.2f", r.Flops() / s.Median() / 1e9) : "-"; };
      Log("dot n=" + std::to_string(n) + ": ndarray " + g(r.ndarray) + " GFLOP/s, into " + g(r.ndarray_into) +
          ", cblas_sgemm " + g(r.anchor) + " (ratio " + (r.Ratio() ? Fmt("%.3f", *r.Ratio()) : "-") + "), rel. error " +
          Fmt("%.2g", r.relative_error) + (r.ok() ? "" : "  FAILED"));
    }
  }
  if (Selected("add")) {
    for (std::int64_t b : opt_.add_bytes) {
      AddReport& r = adds_.emplace_back();
      r.bytes = b;
      guarded("add " + HumanBytes(b), [&] { RunAdd(&r, opt_.repeat, opt_.min_time_s); });
      Log("add " + HumanBytes(b) + ": A + B " +
          (r.add.measured() ? Fmt("%.2f", r.AddGBps(r.add.Median())) : std::string("-")) + " GB/s, A += B " +
          (r.add_inplace.measured() ? Fmt("%.2f", r.AddGBps(r.add_inplace.Median())) : std::string("-")) + ", memcpy " +
          (r.memcpy_anchor.measured() ? Fmt("%.2f", r.CopyGBps(r.memcpy_anchor.Median())) : std::string("-")) +
          (r.ok() ? "" : "  FAILED"));
    }
  }
  if (Selected("alloc")) {
    for (std::int64_t b : opt_.alloc_bytes) {
      AllocReport& r = allocs_.emplace_back();
      r.bytes = b;
      guarded("alloc " + HumanBytes(b), [&] { RunAllocBare(&r, opt_.repeat, opt_.min_time_s); });
      Log("alloc " + HumanBytes(b) + " [ns/pair]: pool exact " + NsCell(r.pool_exact) + ", round " +
          NsCell(r.pool_round) + ", malloc " + NsCell(r.malloc_free) + "; touched: exact " +
          NsCell(r.pool_exact_touch) + ", round " + NsCell(r.pool_round_touch) + ", malloc " +
          NsCell(r.malloc_free_touch) + (r.ok() ? "" : "  FAILED"));
    }
    for (AllocReport& r : allocs_) {
      guarded("alloc ndarray " + HumanBytes(r.bytes), [&] { RunAllocNDArray(&r, opt_.repeat, opt_.min_time_s); });
      Log("alloc ndarray " + HumanBytes(r.bytes) + ": " + NsCell(r.ndarray) + " ns per array, pool hit rate " +
          (r.ndarray_pool.allocs > 0
               ? Fmt("%.3f", static_cast<double>(r.ndarray_pool.hits) / static_cast<double>(r.ndarray_pool.allocs))
               : std::string("-")) +
          ", " + std::to_string(r.ndarray_pool.system_allocs) + " blocks from the system" +
          (r.ndarray.ok() ? "" : "  FAILED"));
    }
  }
  Drain();

  CollectFailures();
  for (const std::string& f : failures_) Log("check failed: " + f);
  const bool written = WriteJson();
  PrintTable();
  Log("wrote " + opt_.json_path);
  return (failures_.empty() && written) ? 0 : 1;
}

}  // namespace

const std::vector<std::string>& NDArrayBenchWorkloads() {
  static const std::vector<std::string> kWorkloads = {"dot", "add", "alloc"};
  return kWorkloads;
}

int RunNDArrayBench(const NDArrayBenchOptions& options) {
  NDArrayBench bench(options);
  return bench.Run();
}

// --- `troupe bench ndarray`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kNDArrayBenchmarkDescription =
    "Measure the NDArray layer against the library calls it is built on, each anchor measured in the same run "
    "and alternated with its figure. Every figure runs once untimed (warm-up, which also sizes a run to "
    "--min-time seconds or at least 3 calls) and then --repeat times; the median and the best run are reported. "
    "(a) dot: C = Dot(A, B) on float32 n x n CPU arrays (and Dot into an existing array), push + WaitToRead per "
    "call, against cblas_sgemm (row-major, no transposes) on plain buffers with the same OpenBLAS thread count "
    "as the engine's workers, in GFLOP/s; check: the results agree (relative error < 1e-4). (b) add: C = A + B "
    "and A += B on float32 arrays against memcpy of the same size, in GB/s of bytes touched (3 x size for the "
    "add, 2 x size for memcpy); check: every value. (c) alloc: Storage::Alloc + Free of a repeated size on an "
    "independent pool (exact and round policies) against malloc + free, with and without touching one byte "
    "per 4 KiB page, and constructing + destroying an NDArray of that size, in ns per pair; check: every timed "
    "allocation was a pool hit. The JSON holds every figure, the anchors, the ratios and the targets (Dot >= "
    "0.95 x sgemm at 1024^3; pool faster than malloc). Progress goes to stderr, a table to stdout. Exit "
    "status: 0 when every check passed (targets are reported, not enforced), 1 when one failed (the JSON says "
    "which, with \"ok\": false), 2 on bad usage.";

constexpr const char* kNDArrayBenchmarkExamples =
    "Examples:\n"
    "  troupe bench ndarray --json ndarray.json\n"
    "      the full run (about 1-2 minutes on 2 cores)\n"
    "  troupe bench ndarray --quick --json /tmp/smoke.json\n"
    "      tiny sizes: checks that the harness and the in-run checks pass\n"
    "  troupe bench ndarray --workloads dot --sizes 512,1024,2048 --repeat 7 --json dot.json\n"
    "      only Dot against cblas_sgemm, on three sizes\n"
    "  troupe bench ndarray --workloads alloc --alloc-sizes 4KiB,32MiB,33MiB --json alloc.json\n"
    "      the pool against malloc around glibc's 32 MiB mmap threshold\n"
    "  TROUPE_CPU_WORKERS=2 TROUPE_BLAS_THREADS=1 troupe bench ndarray --json w2.json\n"
    "      TROUPE_* settings apply to the engine and its OpenBLAS thread count (both are in the JSON)";

void DeclareNDArrayBenchmarkOptions(NDArrayBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").Required().TypeName("FILE");
  options->Add("--quick", &o->quick, "Tiny sizes, one repetition, short runs: a smoke run for CTest");
  options
      ->Add("--repeat", &o->repeat,
            "Timed runs per figure; the median and the best are reported (default " +
                std::to_string(kNDArrayDefaultRepeat) + ", 1 with --quick)")
      .Range(1, 1000)
      .TypeName("R");
  options->Add("--workloads", &o->workloads, "Which workloads: any of dot, add, alloc")
      .Delimiter(',')
      .Choices(NDArrayBenchWorkloads())
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--sizes", &o->sizes, "dot: matrix sizes n of n x n times n x n (default 256,1024; 64 with --quick)")
      .Delimiter(',')
      .Range(1, 8192)
      .TypeName("LIST");
  options
      ->Add("--add-sizes", &o->add_bytes,
            "add: bytes per operand, with units (default 1MiB,16MiB,64MiB; 64KiB with --quick)")
      .Delimiter(',')
      .SizeUnits()
      .TypeName("LIST");
  options
      ->Add("--alloc-sizes", &o->alloc_bytes,
            "alloc: block sizes, with units (default 4KiB,64KiB,1MiB,16MiB,64MiB; 4KiB,1MiB with --quick)")
      .Delimiter(',')
      .SizeUnits()
      .TypeName("LIST");
  options
      ->Add("--min-time", &o->min_time_s,
            "Seconds a timed run lasts at least (it also makes at least 3 calls; default " +
                FormatNumber(kNDArrayDefaultMinTime) + ", 0.005 with --quick)")
      .Range(0.0001, 60.0)
      .TypeName("SEC");
}

}  // namespace

Benchmark NDArrayBenchmark() {
  return MakeBenchmark<NDArrayBenchOptions>(
      "ndarray", "NDArray Dot, add and allocation against cblas_sgemm, memcpy and malloc",
      std::string(kNDArrayBenchmarkDescription) + "\n\n" + kNDArrayBenchmarkExamples + "\n",
      &DeclareNDArrayBenchmarkOptions, &RunNDArrayBench);
}

}  // namespace troupe::bench
