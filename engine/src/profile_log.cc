#include "engine/internal/profile_log.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_set>

#include "base/thread_id.h"
#include "engine/internal/profile_clock.h"

namespace troupe::internal {
namespace {

constexpr int kChunkRecords = 2048;
constexpr std::size_t kInlineName = 22;
constexpr std::uint8_t kInternedName = 0xff;  // name_len's mark: `name` holds a const std::string*

struct RawRecord {
  std::int64_t begin;
  std::int64_t end;
  Context ctx;
  char name[kInlineName];
  std::uint8_t name_len;
  std::uint8_t lane;
};
static_assert(sizeof(RawRecord) == 48, "one record per 48 bytes");

// Names too long to copy inline, kept for the life of the process (there are as many as distinct names).
const std::string* InternName(const std::string& name) {
  static std::mutex mu;
  static std::unordered_set<std::string>* names = new std::unordered_set<std::string>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  return &*names->insert(name).first;
}

std::atomic<std::uint64_t> next_log_id{1};

struct LocalCache {
  std::uint64_t log_id = 0;
  void* thread_log = nullptr;
};
// Initial-exec: one thread-pointer-relative load instead of a __tls_get_addr call per record (the engine's
// library is linked, not dlopen'ed).
thread_local LocalCache tl_cache __attribute__((tls_model("initial-exec")));

}  // namespace

struct ProfileLog::Chunk {
  std::atomic<int> published{0};       // records [0, published) are written
  std::atomic<Chunk*> next{nullptr};   // set once the writer has published all kChunkRecords and moved on
  RawRecord records[kChunkRecords];
};

// One writer (its thread) appends to `tail`; the reader (Take, under ProfileLog::mu_) follows from `head`
// and hands drained chunks back through `spare`, so that recording in steady state never allocates.
struct ProfileLog::ThreadLog {
  int thread_id = 0;
  // Writer's side.
  Chunk* tail = nullptr;
  int count = 0;  // records in tail
  // Reader's side.
  Chunk* head = nullptr;
  int taken = 0;  // records of head already taken
  // Shared, under spare_mu: drained chunks, and ownership of every chunk.
  std::mutex spare_mu;
  std::vector<Chunk*> spare;
  std::vector<std::unique_ptr<Chunk>> chunks;

  Chunk* NewChunk() {
    std::lock_guard<std::mutex> lock(spare_mu);
    Chunk* c;
    if (!spare.empty()) {
      c = spare.back();
      spare.pop_back();
    } else {
      chunks.push_back(std::make_unique<Chunk>());
      c = chunks.back().get();
    }
    // Unreachable by the reader until linked (with release) below the previous tail.
    c->published.store(0, std::memory_order_relaxed);
    c->next.store(nullptr, std::memory_order_relaxed);
    return c;
  }
};

ProfileLog::ProfileLog() : id_(next_log_id.fetch_add(1, std::memory_order_relaxed)) {}

ProfileLog::~ProfileLog() = default;

ProfileLog::ThreadLog* ProfileLog::Register() {
  const int thread = CurrentThreadId();
  std::lock_guard<std::mutex> lock(mu_);
  ThreadLog* log = nullptr;
  for (auto& t : threads_) {
    if (t->thread_id == thread) log = t.get();  // this thread recorded before, then used another log
  }
  if (log == nullptr) {
    threads_.push_back(std::make_unique<ThreadLog>());
    log = threads_.back().get();
    log->thread_id = thread;
    log->tail = log->head = log->NewChunk();
  }
  tl_cache = LocalCache{id_, log};
  return log;
}

void ProfileLog::Record(const std::string& name, Context ctx, int lane, std::int64_t begin, std::int64_t end) {
  ThreadLog* t = tl_cache.log_id == id_ ? static_cast<ThreadLog*>(tl_cache.thread_log) : Register();
  if (t->count == kChunkRecords) {
    Chunk* c = t->NewChunk();
    t->tail->next.store(c, std::memory_order_release);
    t->tail = c;
    t->count = 0;
  }
  RawRecord& r = t->tail->records[t->count];
  r.begin = begin;
  r.end = end;
  r.ctx = ctx;
  r.lane = static_cast<std::uint8_t>(lane);
  if (name.size() <= kInlineName) {
    std::memcpy(r.name, name.data(), name.size());
    r.name_len = static_cast<std::uint8_t>(name.size());
  } else {
    const std::string* interned = InternName(name);
    std::memcpy(r.name, &interned, sizeof interned);
    r.name_len = kInternedName;
  }
  t->tail->published.store(++t->count, std::memory_order_release);
}

std::vector<ProfileRecord> ProfileLog::Take() {
  std::vector<ProfileRecord> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& tp : threads_) {
      ThreadLog& t = *tp;
      for (;;) {
        Chunk* c = t.head;
        const int published = c->published.load(std::memory_order_acquire);
        for (int i = t.taken; i < published; ++i) {
          const RawRecord& r = c->records[i];
          std::string name;
          if (r.name_len == kInternedName) {
            const std::string* interned;
            std::memcpy(&interned, r.name, sizeof interned);
            name = *interned;
          } else {
            name.assign(r.name, r.name_len);
          }
          out.push_back(ProfileRecord{std::move(name), r.ctx, r.lane, t.thread_id, r.begin, r.end});
        }
        t.taken = published;
        Chunk* next = published == kChunkRecords ? c->next.load(std::memory_order_acquire) : nullptr;
        if (next == nullptr) break;  // the writer may still append to c
        t.head = next;
        t.taken = 0;
        std::lock_guard<std::mutex> spare_lock(t.spare_mu);
        t.spare.push_back(c);  // the writer has left c for good
      }
    }
  }
  ProfileTicksToNs(&out);
  std::sort(out.begin(), out.end(), [](const ProfileRecord& a, const ProfileRecord& b) { return a.begin_ns < b.begin_ns; });
  return out;
}

}  // namespace troupe::internal
