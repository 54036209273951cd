// The shared measuring harness (see measure.h).
#include "bench/common/measure.h"

#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>

#include "base/error.h"
#include "engine/engine.h"

namespace troupe::bench {

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

Json OptNum(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

double MaxRelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double max_diff = 0, max_abs = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(want[i])));
  }
  return max_abs > 0 ? max_diff / max_abs : max_diff;
}

Clock::time_point Deadline(double min_time) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kRunOverrun * min_time));
}

Series MakeSeries(const std::string& name, const std::string& description) {
  Series s;
  s.name = name;
  s.description = description;
  return s;
}

std::int64_t Calibrate(const Body& body, double min_time, std::int64_t max_calls) {
  body(1, Deadline(min_time));
  std::int64_t calls = 1;
  for (;;) {
    const RunResult r = body(calls, Deadline(min_time));
    if (r.seconds >= min_time / 4 || r.calls >= max_calls || r.calls < calls) {
      const double per_call = r.seconds / static_cast<double>(std::max<std::int64_t>(r.calls, 1));
      const double want = per_call > 0 ? std::ceil(min_time / per_call) : static_cast<double>(max_calls);
      return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::min(want, 1e18)), kMinCalls,
                                      std::max(kMinCalls, max_calls));
    }
    // Aim straight at a quarter of min_time (with some margin), growing at least twofold.
    const double grow = r.seconds > 0 ? (min_time / 4) / r.seconds * 1.5 : 10.0;
    calls = std::min<std::int64_t>(
        max_calls, std::max<std::int64_t>(calls * 2, static_cast<std::int64_t>(static_cast<double>(calls) * grow)));
  }
}

void MeasureInterleaved(const std::vector<Measured>& items, int repeat, double min_time) {
  std::vector<bool> alive(items.size(), true);
  for (std::size_t i = 0; i < items.size(); ++i) {
    try {
      items[i].series->calls = Calibrate(items[i].body, min_time, items[i].max_calls);
    } catch (const std::exception& e) {
      items[i].series->Fail(std::string("warm-up threw: ") + e.what());
      alive[i] = false;
    }
  }
  for (int r = 0; r < repeat; ++r) {
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!alive[i]) continue;
      Series* s = items[i].series;
      try {
        const RunResult run = items[i].body(s->calls, Deadline(min_time));
        if (run.calls < 1) throw Error("the run made no call");
        s->seconds.push_back(run.seconds / static_cast<double>(run.calls));
        s->run_calls.push_back(run.calls);
      } catch (const std::exception& e) {
        s->Fail(std::string("run ") + std::to_string(r + 1) + " threw: " + e.what());
        alive[i] = false;
      }
    }
  }
}

void Drain() {
  for (int attempt = 0; attempt < 4; ++attempt) {
    try {
      Engine::Get()->WaitForAll();
      return;
    } catch (...) {
    }
  }
}

Json SeriesJson(const Series& s, const char* derived_unit, const std::function<double(double)>& derived) {
  Json j;
  j["name"] = s.name;
  j["description"] = s.description;
  j["calls_per_run"] = s.calls;
  j["calls"] = s.run_calls;
  if (s.measured()) {
    j["seconds_per_call"] = {{"median", s.Median()}, {"best", s.Best()}, {"worst", s.Worst()}, {"runs", s.seconds}};
    if (derived_unit != nullptr) {
      std::vector<double> d;
      for (double t : s.seconds) d.push_back(derived(t));
      j[derived_unit] = {{"median", MedianOf(d)}, {"best", derived(s.Best())}, {"runs", d}};
    }
    // worst / best: how noisy the figure is (1 = perfectly steady).
    j["spread"] = s.Best() > 0 ? Json(s.Worst() / s.Best()) : Json(nullptr);
  } else {
    j["seconds_per_call"] = nullptr;
  }
  j["ok"] = s.ok();
  j["errors"] = s.errors;
  return j;
}

bool WriteJsonFile(const std::string& path, const Json& root, const char* who) {
  const std::string text = root.dump(2) + "\n";
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "%s: could not write %s\n", who, path.c_str());
    return false;
  }
  return true;
}

}  // namespace troupe::bench
