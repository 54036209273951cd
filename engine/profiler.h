// The profiler (MXNet's mx.profiler): records what ran when — the engine's functions (name, device, lane,
// worker thread, begin/end) and spans of work around them (ProfileScope: KVStore pushes and pulls on the
// servers, data-iterator waits, operators inside a bulk segment of the executor) — and writes them as a
// Chrome trace (chrome://tracing, Perfetto: {"traceEvents": [...]}), with an aggregate table per name.
//
//   troupe::Profiler& p = troupe::Profiler::Get();
//   p.Start();                 // the process engine (Engine::Get()) and every ProfileScope
//   ... train ...
//   p.Stop();
//   p.Dump("profile.json");    // open in chrome://tracing or ui.perfetto.dev
//   std::puts(p.AggregateTable().c_str());
//
// Or without code: TROUPE_PROFILER_AUTOSTART=1 starts it when the process engine is created and writes
// TROUPE_PROFILER_FILE (default troupe-profile-<pid>.json) when the process exits.
//
// The trace: one process per device ("cpu(0)", "gpu(0)", ...) holding the engine's functions, one per span
// category ("kvstore", "io", ...) for the spans; a thread per worker thread (or per calling thread), named
// in metadata events. Every function and span is a "B"/"E" pair; functions that overlap on one thread (an
// asynchronous function still waiting for its completion while the thread runs others) are put on extra
// tracks of that thread ("worker 3 #2"), so that the pairs of every track nest. Times are microseconds
// since the profiler started.
//
// Cost: while stopped, a ProfileScope is one relaxed atomic load and the engine one per function.
// Thread-safety: all members are thread-safe; ProfileScope may be used from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

class Engine;

// A span recorded beside the engine's functions.
struct ProfileSpan {
  std::string category;  // the trace process it goes to: "kvstore", "io", "operator", ...
  std::string name;      // what the aggregate table counts
  std::string detail;    // shown in the trace's args (a key, a size); may be empty
  int thread_id = 0;     // the recording thread's small id
  std::int64_t begin_ns = 0;  // steady clock
  std::int64_t end_ns = 0;
};

// One name's totals: every engine function of that name, or every span of that name.
struct ProfileStats {
  std::string name;
  std::int64_t count = 0;
  double total_ms = 0;
  double mean_ms = 0;
  double max_ms = 0;
};

namespace profiler_detail {
extern std::atomic<bool> g_on;  // set while the profiler runs
std::int64_t NowNs();           // the steady clock the engine records with
int ThreadId();                 // the calling thread's small id (the engine's worker ids)
}  // namespace profiler_detail

class Profiler {
 public:
  // The process's profiler.
  static Profiler& Get();
  // Whether spans are recorded now (what ProfileScope checks).
  static bool on() { return profiler_detail::g_on.load(std::memory_order_relaxed); }

  // Clears what was recorded, then records `engine`'s functions (Engine::Get() when null) and every span
  // until Stop. Starting a running profiler restarts it.
  void Start(Engine* engine = nullptr);
  // Stops recording; what was recorded stays for TraceJson / Dump / Aggregate until the next Start.
  void Stop();
  bool running() const;
  // Called by an engine's destructor once its work has finished: its records so far are kept (for
  // TraceJson / Dump / Aggregate) and the profiler lets go of it, so that a later Start or TraceJson never
  // touches the destroyed engine. Recording goes on for spans only while the profiler runs.
  void Detach(Engine* engine);

  void Record(ProfileSpan span);  // a span (ProfileScope calls this)

  // The trace of what was recorded so far (collecting the engine's records first; a running profiler
  // goes on running).
  std::string TraceJson();
  // Writes TraceJson() to `path`. Throws troupe::Error naming the file when it cannot be written.
  void Dump(const std::string& path);
  // Per name, the engine's functions ("bulk:..." segments are left out when their operators were recorded
  // as "operator" spans) and the spans, largest total first.
  std::vector<ProfileStats> Aggregate();
  // Aggregate() as a text table: name, count, total, mean and max in milliseconds.
  std::string AggregateTable();

  // TROUPE_PROFILER_AUTOSTART=1: starts on `engine` and writes TROUPE_PROFILER_FILE at exit. Called when
  // the process engine is created; does nothing otherwise or on a second call.
  static void AutostartFromEnv(Engine* engine);

  struct Impl;

 private:
  Profiler();
  ~Profiler();
  Impl* impl_;
};

// Records the span from construction to destruction when the profiler runs (decided at construction).
class ProfileScope {
 public:
  ProfileScope(const char* category, const char* name, std::string detail = {}) {
    if (Profiler::on()) {
      on_ = true;
      category_ = category;
      name_ = name;
      detail_ = std::move(detail);
      begin_ns_ = profiler_detail::NowNs();
    }
  }
  ~ProfileScope() {
    if (on_) {
      Profiler::Get().Record({category_, name_, std::move(detail_), profiler_detail::ThreadId(), begin_ns_,
                              profiler_detail::NowNs()});
    }
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  bool on_ = false;
  const char* category_ = nullptr;
  const char* name_ = nullptr;
  std::string detail_;
  std::int64_t begin_ns_ = 0;
};

}  // namespace troupe
