// The profiler (engine/profiler.h) over real work: the trace of a training epoch parses as JSON, every
// track's begin/end events pair up and nest, every process and thread is named, and the aggregate table
// counts exactly the operator calls the epoch made (bulk segments counted operator by operator); nothing is
// recorded while it is stopped; overlapping spans on one thread go to separate tracks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/profiler.h"
#include "io/io.h"
#include "graph/models.h"
#include "train/train.h"

namespace troupe {
namespace {

using Json = nlohmann::json;

constexpr int kDim = 12, kClasses = 3, kSamples = 240, kBatch = 24;  // 10 batches

std::unique_ptr<DataIter> Data() {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.f, 1.f);
  std::vector<float> x(kSamples * kDim), y(kSamples);
  for (int i = 0; i < kSamples; ++i) {
    y[i] = static_cast<float>(i % kClasses);
    for (int d = 0; d < kDim; ++d) x[i * kDim + d] = noise(rng) + (d == i % kClasses ? 2.f : 0.f);
  }
  return MakeNDArrayIter({NDArray::FromVector(x, TShape{kSamples, kDim})}, {NDArray::FromVector(y, TShape{kSamples})},
                         kBatch);
}

// Checks the trace's structure; returns the number of "B" events per name.
std::map<std::string, int> CheckTrace(const std::string& text) {
  const Json trace = Json::parse(text);  // throws on malformed JSON
  EXPECT_TRUE(trace.contains("traceEvents"));
  std::map<std::pair<int, int>, std::vector<std::string>> open;  // (pid, tid) -> names of open events
  std::set<int> pids, named_pids;
  std::set<std::pair<int, int>> tracks, named_tracks;
  std::map<std::string, int> begins;
  for (const Json& e : trace["traceEvents"]) {
    const std::string ph = e.at("ph");
    const int pid = e.at("pid");
    if (ph == "M") {
      if (e.at("name") == "process_name") named_pids.insert(pid);
      if (e.at("name") == "thread_name") named_tracks.insert({pid, e.at("tid").get<int>()});
      EXPECT_FALSE(e.at("args").at("name").get<std::string>().empty());
      continue;
    }
    const std::pair<int, int> track{pid, e.at("tid").get<int>()};
    pids.insert(pid);
    tracks.insert(track);
    if (ph == "B") {
      open[track].push_back(e.at("name"));
      ++begins[e.at("name")];
    } else {
      EXPECT_EQ(ph, "E");
      EXPECT_FALSE(open[track].empty()) << "an end without a begin on pid " << pid << " tid " << track.second;
      if (!open[track].empty()) open[track].pop_back();
    }
  }
  for (const auto& [track, names] : open) EXPECT_TRUE(names.empty()) << "unclosed events on tid " << track.second;
  EXPECT_EQ(pids, named_pids);
  EXPECT_EQ(tracks, named_tracks);
  return begins;
}

TEST(ProfilerTest, TraceOfATrainingEpochIsWellFormedAndCountsEveryOperatorCall) {
  Module mod(models::MLP(kClasses, {16}));  // fc1 -> relu1 -> fc2 -> softmax: 2 FullyConnected
  auto data = Data();
  FitOptions o;
  o.optimizer = {"sgd", {{"learning_rate", "0.1"}}};
  mod.Fit(data.get(), nullptr, o);  // binds and warms up outside the profile
  Engine::Get()->WaitForAll();

  Profiler& p = Profiler::Get();
  p.Start();
  EXPECT_TRUE(p.running());
  o.begin_epoch = 0;
  mod.Fit(data.get(), nullptr, o);  // one more epoch: 10 batches
  Engine::Get()->WaitForAll();
  p.Stop();
  EXPECT_FALSE(p.running());

  const std::map<std::string, int> begins = CheckTrace(p.TraceJson());
  // Per batch, forward and backward of each FullyConnected layer: 4 calls.
  std::int64_t fc = -1, softmax = -1;
  for (const ProfileStats& s : p.Aggregate()) {
    if (s.name == "FullyConnected") fc = s.count;
    if (s.name == "SoftmaxOutput") softmax = s.count;
    EXPECT_GT(s.count, 0);
    EXPECT_GE(s.max_ms, s.mean_ms) << s.name;
    EXPECT_NEAR(s.total_ms, s.mean_ms * static_cast<double>(s.count), 1e-6 * (1 + s.total_ms)) << s.name;
  }
  EXPECT_EQ(fc, 4 * kSamples / kBatch);
  EXPECT_EQ(softmax, 2 * kSamples / kBatch);  // forward and backward
  EXPECT_GT(begins.count("FullyConnected") + begins.count("multi_sgd_update") + begins.count("sgd_update"), 0u);
  const std::string table = p.AggregateTable();
  EXPECT_THAT(table, ::testing::HasSubstr("FullyConnected"));
  EXPECT_THAT(table, ::testing::HasSubstr("mean (ms)"));
}

TEST(ProfilerTest, StoppedRecordsNothing) {
  Profiler& p = Profiler::Get();
  p.Start();
  p.Stop();
  std::int64_t before = 0;
  for (const ProfileStats& s : p.Aggregate()) before += s.count;
  {
    const ProfileScope span("test", "while stopped");
  }
  NDArray a = NDArray::Full(TShape{8}, 1.f, Context::CPU(0));
  (a + a).WaitToRead();
  std::int64_t after = 0;
  for (const ProfileStats& s : p.Aggregate()) after += s.count;
  EXPECT_EQ(after, before);
  EXPECT_FALSE(Profiler::on());
}

// An engine of its own (tests, several nodes in one process) may be destroyed while the profiler recorded
// it: what it recorded stays, and a later Start, Stop or trace never touches it.
TEST(ProfilerTest, AnEngineDestroyedAfterRecordingLeavesItsRecordsAndNoDanglingPointer) {
  Profiler& p = Profiler::Get();
  for (EngineType type : {EngineType::kActor, EngineType::kNaive}) {
    EngineConfig config;
    config.type = type;
    std::unique_ptr<Engine> engine = Engine::Create(config);
    p.Start(engine.get());
    VarHandle v = engine->NewVariable();
    engine->PushSync([](RunContext) {}, Context::CPU(0), {}, {v}, FnProperty::kNormal, 0, "recorded_before_exit");
    engine->WaitForVar(v);
    engine.reset();  // while the profiler runs
    std::int64_t calls = 0;
    for (const ProfileStats& s : p.Aggregate()) calls += s.name == "recorded_before_exit" ? s.count : 0;
    EXPECT_EQ(calls, 1) << EngineTypeName(type) << ": the destroyed engine's record is kept";
    EXPECT_NO_THROW(CheckTrace(p.TraceJson()));
    p.Stop();
    p.Start();  // the process engine now
    p.Stop();
  }
}

TEST(ProfilerTest, OverlappingSpansOnOneThreadGetTheirOwnTracks) {
  Profiler& p = Profiler::Get();
  p.Start();
  const int tid = profiler_detail::ThreadId();
  const std::int64_t t0 = profiler_detail::NowNs();
  // a: [0, 100); b: [10, 50) nested in a; c: [60, 200) overlaps a's end; d: [120, 130) inside c.
  p.Record({"test", "a", "", tid, t0, t0 + 100});
  p.Record({"test", "b", "", tid, t0 + 10, t0 + 50});
  p.Record({"test", "c", "", tid, t0 + 60, t0 + 200});
  p.Record({"test", "d", "", tid, t0 + 120, t0 + 130});
  {
    const ProfileScope span("test", "scoped", "detail \"quoted\"");
  }
  p.Stop();
  const std::string json = p.TraceJson();
  const auto begins = CheckTrace(json);
  EXPECT_EQ(begins.at("a"), 1);
  EXPECT_EQ(begins.at("scoped"), 1);
  EXPECT_THAT(json, ::testing::HasSubstr("#2"));  // c went to a second track of the thread
  EXPECT_THAT(json, ::testing::HasSubstr("detail \\\"quoted\\\""));
}

// Asynchronous functions completing on another thread while their worker runs others.
TEST(ProfilerTest, AsynchronousFunctionsKeepTheTraceBalanced) {
  Engine* engine = Engine::Get();
  Profiler& p = Profiler::Get();
  p.Start();
  std::vector<std::thread> completers;
  std::mutex mu;
  for (int i = 0; i < 8; ++i) {
    engine->PushAsync(
        [&](RunContext, CallbackOnComplete done) {
          std::lock_guard<std::mutex> lock(mu);
          completers.emplace_back([done]() mutable { done(); });
        },
        Context::CPU(0), {}, {engine->NewVariable()}, FnProperty::kNormal, 0, "async");
    engine->PushSync([](RunContext) {}, Context::CPU(0), {}, {}, FnProperty::kNormal, 0, "sync");
  }
  engine->WaitForAll();
  p.Stop();
  // A completer may call done() (and so end WaitForAll) before the function that started it has finished
  // adding it to `completers`: taking `mu` waits for that function to let go.
  std::lock_guard<std::mutex> lock(mu);
  for (auto& t : completers) t.join();
  const auto begins = CheckTrace(p.TraceJson());
  EXPECT_EQ(begins.at("async"), 8);
  EXPECT_EQ(begins.at("sync"), 8);
}

}  // namespace
}  // namespace troupe
