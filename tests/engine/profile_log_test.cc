// The actor engine's profile log (engine/internal/profile_log.h): threads record while another thread
// takes, across chunk boundaries; every record comes back exactly once, whole, with its thread.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "engine/internal/profile_log.h"

namespace troupe::internal {
namespace {

TEST(ProfileLog, EveryRecordComesBackOnceWhileThreadsRecordAndAnotherTakes) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 10000;  // about five chunks per thread
  ProfileLog log;
  std::atomic<int> running{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&log, &running, t] {
      // Thread 0 uses a name longer than the inline space (interned), the others short ones.
      const std::string name = t == 0 ? "a_rather_long_operator_name_backward" : "op" + std::to_string(t);
      for (int i = 0; i < kPerThread; ++i) log.Record(name, Context::CPU(i), t % 3, 1000 + i, 2000 + i);
      running.fetch_sub(1);
    });
  }
  std::vector<ProfileRecord> all;
  while (running.load() > 0) {
    auto some = log.Take();
    all.insert(all.end(), some.begin(), some.end());
  }
  for (auto& th : threads) th.join();
  auto rest = log.Take();
  all.insert(all.end(), rest.begin(), rest.end());
  EXPECT_TRUE(log.Take().empty());

  ASSERT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
  std::map<std::string, std::vector<int>> seen;  // name -> the dev_ids recorded under it
  std::map<std::string, int> thread_of;
  for (const ProfileRecord& r : all) {
    seen[r.name].push_back(r.ctx.dev_id);
    auto [it, fresh] = thread_of.emplace(r.name, r.thread_id);
    EXPECT_EQ(it->second, r.thread_id) << r.name << " came back from two threads";
    EXPECT_GT(r.end_ns, r.begin_ns);
  }
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kThreads));
  EXPECT_EQ(seen.count("a_rather_long_operator_name_backward"), 1u);
  for (auto& [name, ids] : seen) {
    ASSERT_EQ(ids.size(), static_cast<std::size_t>(kPerThread)) << name;
    std::vector<bool> got(kPerThread, false);
    for (int id : ids) {
      ASSERT_TRUE(id >= 0 && id < kPerThread) << name;
      EXPECT_FALSE(got[static_cast<std::size_t>(id)]) << name << " record " << id << " came back twice";
      got[static_cast<std::size_t>(id)] = true;
    }
  }
  EXPECT_EQ(thread_of.size(), static_cast<std::size_t>(kThreads));
}

TEST(ProfileLog, TakeSortsByBeginAndKeepsRecordingAfterwards) {
  ProfileLog log;
  log.Record("b", Context::CPU(0), 0, 300, 400);
  log.Record("a", Context::CPU(0), 1, 100, 200);
  auto first = log.Take();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].name, "a");
  EXPECT_EQ(first[0].lane, 1);
  EXPECT_EQ(first[1].name, "b");
  for (int i = 0; i < 5000; ++i) log.Record("c", Context::GPU(1), 0, i, i + 1);  // reuses the drained chunk
  auto second = log.Take();
  ASSERT_EQ(second.size(), 5000u);
  EXPECT_EQ(second.front().ctx, Context::GPU(1));
}

}  // namespace
}  // namespace troupe::internal
