#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "engine/internal/engines.h"

namespace troupe {

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

Engine* Engine::Get() {
  // Destroyed at exit, after main returns: its destructor finishes pending work and stops its actors.
  static std::unique_ptr<Engine> engine = Create(EngineConfig::FromEnv());
  return engine.get();
}

}  // namespace troupe
