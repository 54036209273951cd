// The measuring harness the benchmark workloads share (bench/ndarray, bench/ops): timed loops, a warm-up
// that sizes the timed runs, interleaved rounds of a figure and its anchor, the per-series record and its
// JSON, and a few formatting helpers.
//
// How a figure is measured: a Body makes up to `calls` calls of the thing measured and returns the seconds
// its timed part took and the calls it made (TimedLoop does both). MeasureInterleaved first warms up every
// body (one untimed call, then untimed runs of growing length, which size a timed run to last `min_time`
// seconds or at least kMinCalls calls), then runs `repeat` rounds in which every body runs once, in order: a
// figure and its anchor alternate, so that a change in the machine's state (another process, the clock
// frequency) affects both alike. A run that takes kRunOverrun times longer than its warm-up said it would is
// cut short (after at least kMinCalls calls). A Series keeps the seconds per call of each timed run and the
// failures of the in-run checks; its median and best run are what the reports show.
//
// Thread-safety: none; a benchmark measures one thing at a time, on one thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace troupe::bench {

using Clock = std::chrono::steady_clock;
// Ordered: the JSON keeps the order in which a report writes its fields.
using Json = nlohmann::ordered_json;

// A timed run does at least this many calls, however long they take.
inline constexpr std::int64_t kMinCalls = 3;
inline constexpr std::int64_t kMaxCalls = std::int64_t{1} << 26;
// A run may last this many times min_time before TimedLoop ends it.
inline constexpr double kRunOverrun = 5.0;

inline double Seconds(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

// Keeps the compiler from proving a pointer unused (and so from removing a malloc/free pair or a copy).
inline void KeepAlive(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// One number through a printf format ("%.2f"), as a string.
std::string Fmt(const char* format, double v);
// The median (the mean of the middle two for an even count); 0 for none.
double MedianOf(std::vector<double> v);
// A number, or JSON null for none.
Json OptNum(std::optional<double> v);
// Writes `root` pretty-printed (2 spaces) to `path`; on failure prints "<who>: could not write <path>" to
// stderr and returns false.
bool WriteJsonFile(const std::string& path, const Json& root, const char* who);
// max |got - want| / max |want| over all entries (infinity when the sizes differ): the relative error of a
// float result against a reference computed by the same library.
double MaxRelativeError(const std::vector<float>& got, const std::vector<float>& want);

// What one run of a body did.
struct RunResult {
  double seconds = 0;
  std::int64_t calls = 0;
};

// Makes up to `calls` calls and returns the seconds its timed part took and the calls it made; it stops
// early (see TimedLoop) once `deadline` has passed. What a body sets up outside its timed part is its own
// business; its in-run checks go to the series' errors.
using Body = std::function<RunResult(std::int64_t calls, Clock::time_point deadline)>;

// Times up to `calls` calls of `call`, then `finish` (inside the timed part: waiting for the engine, say).
// The clock is read once every stride of calls (at most 64, so that it costs nothing next to a call) and
// the loop stops when it is past `deadline` (never before kMinCalls calls).
template <typename Call, typename Finish>
RunResult TimedLoop(std::int64_t calls, Clock::time_point deadline, Call&& call, Finish&& finish) {
  const std::int64_t stride = std::clamp<std::int64_t>(calls / 16, 1, 64);
  const auto t0 = Clock::now();
  std::int64_t done = 0;
  while (done < calls) {
    const std::int64_t end = std::min(calls, done + stride);
    for (; done < end; ++done) call();
    if (done < calls && done >= kMinCalls && Clock::now() > deadline) break;
  }
  finish();
  return {Seconds(t0, Clock::now()), done};
}

template <typename Call>
RunResult TimedLoop(std::int64_t calls, Clock::time_point deadline, Call&& call) {
  return TimedLoop(calls, deadline, std::forward<Call>(call), [] {});
}

// The deadline of a run that should last `min_time` seconds: kRunOverrun times that from now.
Clock::time_point Deadline(double min_time);

// One measured figure: the seconds per call of each timed run, and what went wrong.
struct Series {
  std::string name;
  std::string description;
  std::int64_t calls = 0;       // per timed run, as sized by the warm-up
  std::vector<double> seconds;  // per call, one entry per timed run
  std::vector<std::string> errors;
  std::vector<std::int64_t> run_calls;  // calls each timed run made (fewer than `calls` when cut short)

  bool ok() const { return errors.empty(); }
  bool measured() const { return !seconds.empty(); }
  double Median() const { return MedianOf(seconds); }
  double Best() const { return seconds.empty() ? 0 : *std::min_element(seconds.begin(), seconds.end()); }
  double Worst() const { return seconds.empty() ? 0 : *std::max_element(seconds.begin(), seconds.end()); }
  // Records a failed check. The first few are enough to diagnose; a check that fails on every call must not
  // flood the JSON.
  void Fail(const std::string& what) {
    if (errors.size() < 5) errors.push_back(what);
  }
};

Series MakeSeries(const std::string& name, const std::string& description);

// One workload's report: a figure, its anchor, the checks that are not a series' own, and the workload's
// configuration for the JSON. The ratio is anchor time / figure time: 1 = the figure costs what its anchor
// costs.
struct WorkloadReport {
  bool selected = false;
  bool available = true;
  std::string unavailable_reason;
  std::int64_t items = 0;  // what one call processes (samples, images), for the per-second figures
  Series figure, anchor;
  std::vector<std::string> errors;
  Json details = Json::object();

  bool ok() const { return errors.empty() && figure.ok() && anchor.ok(); }
  std::optional<double> Ratio() const {
    if (!figure.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Median() / figure.Median();
  }
  std::optional<double> RatioBest() const {
    if (!figure.measured() || !anchor.measured() || !ok()) return std::nullopt;
    return anchor.Best() / figure.Best();
  }
  std::optional<double> ItemsPerSecond(const Series& s) const {
    return s.measured() ? std::optional<double>(static_cast<double>(items) / s.Median()) : std::nullopt;
  }
  // Appends every failed check as "<name>: <error>" or "<name> <series>: <error>".
  void CollectFailures(const std::string& name, std::vector<std::string>* out) const {
    for (const std::string& e : errors) out->push_back(name + ": " + e);
    for (const Series* s : {&figure, &anchor}) {
      for (const std::string& e : s->errors) out->push_back(name + " " + s->name + ": " + e);
    }
  }
};

// A series and the body that measures it, with the most calls one run of it may make.
struct Measured {
  Series* series;
  Body body;
  std::int64_t max_calls = kMaxCalls;
};

// The warm-up of one body: one untimed call (first touch of the memory, pool and BLAS buffers, thread
// wake-up), then growing runs until one lasts a quarter of `min_time`; returns the calls a timed run needs
// to last `min_time` (at least kMinCalls, at most `max_calls`).
std::int64_t Calibrate(const Body& body, double min_time, std::int64_t max_calls);

// Warms up and sizes every body, then runs `repeat` rounds in which each body runs once, in order (see the
// top of this file). An exception from a body fails that series and stops measuring it.
void MeasureInterleaved(const std::vector<Measured>& items, int repeat, double min_time);

// Waits until the engine is idle, swallowing the errors WaitForAll rethrows (they were reported already).
void Drain();

// Figures of one series as JSON: seconds per call (median, best, worst, every run) and the derived metric
// computed from each run (its median and best; best = the fastest run) under the key `derived_unit` (none
// when it is null), the spread (worst / best), and the series' check results.
Json SeriesJson(const Series& s, const char* derived_unit, const std::function<double(double)>& derived);

}  // namespace troupe::bench
