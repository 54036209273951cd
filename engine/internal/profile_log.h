// The actor engine's record of the functions it ran while profiling (engine/profiler.h): one log per
// thread that finishes functions, appended to without locks, drained by TakeProfile. Recording costs a
// thread-local lookup and one 48-byte store (the name's characters are copied inline; names longer than
// the inline space are interned once). Kept separate from the engine so that its concurrency is testable.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace troupe::internal {

class ProfileLog {
 public:
  ProfileLog();
  ~ProfileLog();
  ProfileLog(const ProfileLog&) = delete;
  ProfileLog& operator=(const ProfileLog&) = delete;

  // Records one function on the calling thread's log; `begin` and `end` are ProfileTicks. Wait-free
  // except once per 2048 records of a thread (a new or recycled chunk) and on a thread's first record.
  void Record(const std::string& name, Context ctx, int lane, std::int64_t begin, std::int64_t end);

  // Everything recorded since the last Take, converted to steady-clock nanoseconds and sorted by begin.
  // Safe while other threads record: a record is either taken now or by the next Take.
  std::vector<ProfileRecord> Take();

 private:
  struct Chunk;
  struct ThreadLog;
  ThreadLog* Register();

  const std::uint64_t id_;  // unique per log in the process: the thread-local cache's key
  std::mutex mu_;           // threads_ and the reading side of every thread log
  std::vector<std::unique_ptr<ThreadLog>> threads_;
};

}  // namespace troupe::internal
