#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <sys/syscall.h>
#include <unistd.h>

#include "engine/internal/engines.h"
#include "engine/profiler.h"

namespace troupe {

std::uint64_t Var::NextId() noexcept {
  static std::atomic<std::uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

namespace internal {
void LogCallbackMisuse(const char* name) {
  std::fprintf(stderr,
               "troupe: the completion callback of function '%s' was called more than once (or after the "
               "engine finished it); the extra call is ignored\n",
               name != nullptr && *name != '\0' ? name : "unnamed");
}
}  // namespace internal

const char* FnPropertyName(FnProperty prop) {
  switch (prop) {
    case FnProperty::kNormal:
      return "kNormal";
    case FnProperty::kCopyFromGPU:
      return "kCopyFromGPU";
    case FnProperty::kCopyToGPU:
      return "kCopyToGPU";
    case FnProperty::kCPUPrioritized:
      return "kCPUPrioritized";
    case FnProperty::kAsync:
      return "kAsync";
    case FnProperty::kDeleteVar:
      return "kDeleteVar";
    case FnProperty::kGPUPrioritized:
      return "kGPUPrioritized";
    case FnProperty::kNoSkip:
      return "kNoSkip";
  }
  return "unknown";
}

const char* EngineTypeName(EngineType type) { return type == EngineType::kNaive ? "naive" : "actor"; }

EngineConfig EngineConfig::FromEnv() {
  EngineConfig c;
  if (const char* t = std::getenv("TROUPE_ENGINE"); t != nullptr && *t != '\0') {
    if (std::strcmp(t, "actor") == 0) {
      c.type = EngineType::kActor;
    } else if (std::strcmp(t, "naive") == 0) {
      c.type = EngineType::kNaive;
    } else {
      throw Error(std::string("TROUPE_ENGINE='") + t + "' is not an engine: use 'actor' (default) or 'naive'");
    }
  }
  c.runtime = c.runtime.WithEnv();
  return c;
}

std::unique_ptr<Engine> Engine::Create(const EngineConfig& config) {
  if (config.type == EngineType::kNaive) return internal::MakeNaiveEngine(config);
  return internal::MakeActorEngine(config);
}

std::shared_ptr<void> Engine::GetExtension(const void* key, const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> lock(extensions_mu_);
  for (const auto& [k, ext] : extensions_) {
    if (k == key) return ext;
  }
  // make() runs under the lock: two threads asking at once get one object. It must not ask for another
  // extension of this engine.
  std::shared_ptr<void> ext = make();
  extensions_.emplace_back(key, ext);
  return ext;
}

void Engine::DestroyExtensions() {
  for (;;) {
    std::shared_ptr<void> last;
    {
      std::lock_guard<std::mutex> lock(extensions_mu_);
      if (extensions_.empty()) return;
      last = std::move(extensions_.back().second);
      extensions_.pop_back();
    }
    // Pending work first: it may still use the extension (a function holding a resource's variable).
    try {
      WaitForAll();
    } catch (...) {
      // Errors are dropped here: nobody is left to see them (the engine's destructor drops them too).
    }
    last.reset();
  }
}

namespace {

// Finishes the process-wide engine's pending work when the main thread ends (main returns, or it calls exit):
// the main thread's thread-local objects are destroyed before any object of static storage duration. Without
// it the work would run in the engine's own destructor, after the statics that libraries create on first use
// (after the engine: oneDNN's generated kernels, for one) were destroyed, so a program that ends without
// reading its last results would run freed code.
struct DrainAtMainExit {
  Engine* engine;
  ~DrainAtMainExit() {
    try {
      engine->WaitForAll();
    } catch (...) {
      // Errors are dropped here: nobody is left to see them (the engine's destructor drops them too).
    }
  }
};

bool IsMainThread() { return static_cast<pid_t>(::syscall(SYS_gettid)) == ::getpid(); }

}  // namespace

Engine* Engine::Get() {
  // Destroyed at exit, after main returns: its destructor stops its actors (DrainAtMainExit has finished the
  // pending work by then when the main thread used the engine).
  static std::unique_ptr<Engine> engine = Create(EngineConfig::FromEnv());
  // After the engine (so that the profile is written at exit before the engine is destroyed).
  static const bool autostart = (Profiler::AutostartFromEnv(engine.get()), true);
  (void)autostart;
  thread_local const bool main_thread = IsMainThread();
  if (main_thread) {
    thread_local DrainAtMainExit drain{engine.get()};
    (void)drain;
  }
  return engine.get();
}

}  // namespace troupe
