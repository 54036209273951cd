// The profiler: see engine/profiler.h.
#include "engine/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/config.h"
#include "base/error.h"
#include "base/thread_id.h"
#include "engine/engine.h"

namespace troupe {

namespace profiler_detail {
std::atomic<bool> g_on{false};

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int ThreadId() { return CurrentThreadId(); }
}  // namespace profiler_detail

namespace {

constexpr int kCategoryPidBase = 100000;  // trace processes of the span categories
constexpr int kTracksPerThread = 64;      // tid = thread id * kTracksPerThread + track

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

const char* LaneName(int lane) {
  switch (lane) {
    case 0:
      return "normal";
    case 1:
      return "copy";
    case 2:
      return "priority";
    default:
      return "lane";
  }
}

// One interval on the trace: an engine function or a span.
struct Item {
  int pid = 0;
  int thread = 0;
  std::int64_t begin = 0, end = 0;
  std::string name, cat, args;  // args: a JSON object's members, may be empty
};

}  // namespace

struct Profiler::Impl {
  std::mutex mu;
  Engine* engine = nullptr;  // the engine recorded (set by Start)
  bool running = false;
  std::int64_t start_ns = 0;
  std::vector<ProfileRecord> records;  // the engine's, collected so far
  std::vector<ProfileSpan> spans;

  void Collect() {  // with mu held
    if (!engine) return;
    std::vector<ProfileRecord> more = engine->TakeProfile();
    records.insert(records.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
};

Profiler::Profiler() : impl_(new Impl) {}
Profiler::~Profiler() { delete impl_; }

Profiler& Profiler::Get() {
  // Never destroyed: engine worker threads may still record while the process exits.
  static Profiler* profiler = new Profiler();
  return *profiler;
}

void Profiler::Start(Engine* engine) {
  if (!engine) engine = Engine::Get();
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.engine && m.engine != engine) m.engine->SetProfiling(false);
  engine->TakeProfile();  // what an earlier run left
  m.engine = engine;
  m.records.clear();
  m.spans.clear();
  m.start_ns = profiler_detail::NowNs();
  m.running = true;
  engine->SetProfiling(true);
  profiler_detail::g_on.store(true, std::memory_order_relaxed);
}

void Profiler::Stop() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  profiler_detail::g_on.store(false, std::memory_order_relaxed);
  if (!m.running) return;
  m.running = false;
  if (m.engine) m.engine->SetProfiling(false);
  m.Collect();
}

void Profiler::Detach(Engine* engine) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.engine != engine) return;
  m.Collect();
  m.engine = nullptr;
}

bool Profiler::running() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->running;
}

void Profiler::Record(ProfileSpan span) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->running) impl_->spans.push_back(std::move(span));
}

std::string Profiler::TraceJson() {
  Impl& m = *impl_;
  std::vector<Item> items;
  std::map<int, std::string> process_names;
  std::int64_t origin = 0;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.Collect();
    origin = m.start_ns;
    std::map<std::string, int> category_pid;
    for (const ProfileRecord& r : m.records) {
      const int pid = static_cast<int>(r.ctx.dev_type) * 1000 + r.ctx.dev_id;
      process_names[pid] = r.ctx.ToString();
      items.push_back({pid, r.thread_id, r.begin_ns, r.end_ns, r.name, "engine",
                       std::string("\"lane\": \"") + LaneName(r.lane) + "\""});
    }
    for (const ProfileSpan& s : m.spans) {
      auto it = category_pid.find(s.category);
      if (it == category_pid.end()) {
        it = category_pid.emplace(s.category, kCategoryPidBase + static_cast<int>(category_pid.size())).first;
        process_names[it->second] = s.category;
      }
      items.push_back({it->second, s.thread_id, s.begin_ns, s.end_ns, s.name, s.category,
                       s.detail.empty() ? std::string() : "\"detail\": " + JsonString(s.detail)});
    }
  }
  // Begin order, the longer first at equal begins (so that an enclosing span opens first).
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.pid, a.thread, a.begin, b.end) < std::tie(b.pid, b.thread, b.begin, a.end);
  });
  std::ostringstream ev;
  bool first = true;
  auto emit = [&](const std::string& event) {
    ev << (first ? "\n" : ",\n") << event;
    first = false;
  };
  auto us = [&](std::int64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(ns - origin) / 1000.0);
    return std::string(buf);
  };
  // Per thread: tracks, each a stack of open intervals; an item goes on the first track where it either
  // starts after everything open has ended or nests inside the innermost open one.
  struct Open {
    std::int64_t end;
  };
  std::set<std::pair<int, int>> named_threads;  // (pid, tid)
  std::vector<std::pair<std::pair<int, int>, std::string>> thread_names;
  std::size_t i = 0;
  while (i < items.size()) {
    const int pid = items[i].pid, thread = items[i].thread;
    std::vector<std::vector<Open>> tracks;
    auto tid_of = [&](std::size_t track) { return thread * kTracksPerThread + static_cast<int>(track); };
    auto close_until = [&](std::size_t track, std::int64_t t) {
      auto& st = tracks[track];
      while (!st.empty() && st.back().end <= t) {
        emit("{\"ph\": \"E\", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(tid_of(track)) +
             ", \"ts\": " + us(st.back().end) + "}");
        st.pop_back();
      }
    };
    for (; i < items.size() && items[i].pid == pid && items[i].thread == thread; ++i) {
      const Item& it = items[i];
      std::size_t track = 0;
      for (;; ++track) {
        if (track == tracks.size()) tracks.emplace_back();
        close_until(track, it.begin);
        if (tracks[track].empty() || it.end <= tracks[track].back().end) break;
        if (track + 1 == static_cast<std::size_t>(kTracksPerThread)) break;  // more overlap than tracks: nest anyway
      }
      const int tid = tid_of(track);
      if (named_threads.insert({pid, tid}).second) {
        std::string name = (pid < kCategoryPidBase ? "worker " : "thread ") + std::to_string(thread);
        if (track > 0) name += " #" + std::to_string(track + 1);
        thread_names.push_back({{pid, tid}, name});
      }
      emit("{\"name\": " + JsonString(it.name) + ", \"cat\": " + JsonString(it.cat) + ", \"ph\": \"B\", \"pid\": " +
           std::to_string(pid) + ", \"tid\": " + std::to_string(tid) + ", \"ts\": " + us(it.begin) +
           (it.args.empty() ? std::string() : ", \"args\": {" + it.args + "}") + "}");
      tracks[track].push_back({std::max(it.end, it.begin)});
    }
    for (std::size_t t = 0; t < tracks.size(); ++t) close_until(t, INT64_MAX);
  }
  for (const auto& [pid, name] : process_names) {
    emit("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) + ", \"args\": {\"name\": " +
         JsonString(name) + "}}");
  }
  for (const auto& [key, name] : thread_names) {
    emit("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(key.first) + ", \"tid\": " +
         std::to_string(key.second) + ", \"args\": {\"name\": " + JsonString(name) + "}}");
  }
  return "{\"traceEvents\": [" + ev.str() + "\n], \"displayTimeUnit\": \"ms\"}\n";
}

void Profiler::Dump(const std::string& path) {
  const std::string json = TraceJson();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << json;
  out.close();
  if (!out) throw Error("Profiler::Dump: cannot write " + path);
}

std::vector<ProfileStats> Profiler::Aggregate() {
  Impl& m = *impl_;
  std::map<std::string, ProfileStats> by_name;
  auto add = [&](const std::string& name, std::int64_t ns) {
    ProfileStats& s = by_name[name];
    s.name = name;
    const double ms = static_cast<double>(ns) / 1e6;
    ++s.count;
    s.total_ms += ms;
    s.max_ms = std::max(s.max_ms, ms);
  };
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.Collect();
    bool operator_spans = false;
    for (const ProfileSpan& s : m.spans) {
      operator_spans = operator_spans || s.category == "operator";
      add(s.name, s.end_ns - s.begin_ns);
    }
    for (const ProfileRecord& r : m.records) {
      // A bulk segment's operators are counted one by one through their spans.
      if (operator_spans && r.name.rfind("bulk:", 0) == 0) continue;
      add(r.name, r.end_ns - r.begin_ns);
    }
  }
  std::vector<ProfileStats> out;
  for (auto& [name, s] : by_name) {
    s.mean_ms = s.total_ms / static_cast<double>(s.count);
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const ProfileStats& a, const ProfileStats& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  return out;
}

std::string Profiler::AggregateTable() {
  const std::vector<ProfileStats> stats = Aggregate();
  std::size_t width = 4;
  for (const auto& s : stats) width = std::max(width, s.name.size());
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%-*s %10s %12s %10s %10s\n", static_cast<int>(width), "name", "count",
                "total (ms)", "mean (ms)", "max (ms)");
  out += buf;
  for (const auto& s : stats) {
    std::snprintf(buf, sizeof(buf), "%-*s %10lld %12.3f %10.4f %10.4f\n", static_cast<int>(width), s.name.c_str(),
                  static_cast<long long>(s.count), s.total_ms, s.mean_ms, s.max_ms);
    out += buf;
  }
  return out;
}

void Profiler::AutostartFromEnv(Engine* engine) {
  int on = 0;
  if (!EnvInt("TROUPE_PROFILER_AUTOSTART", 0, 1, &on) || on == 0) return;
  static std::once_flag once;
  std::call_once(once, [engine] {
    Get().Start(engine);
    std::atexit([] {
      const char* file = std::getenv("TROUPE_PROFILER_FILE");
      const std::string path = file != nullptr && *file != '\0'
                                   ? std::string(file)
                                   : "troupe-profile-" + std::to_string(::getpid()) + ".json";
      try {
        Profiler& p = Get();
        p.Stop();
        p.Dump(path);
        std::fprintf(stderr, "troupe: profile written to %s\n", path.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "troupe: the profile could not be written: %s\n", e.what());
      }
    });
  });
}

}  // namespace troupe
