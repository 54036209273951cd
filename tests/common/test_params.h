// Test parameters shared by the suites of every module: sizes scaled by TROUPE_TEST_SCALE, seeds from
// TROUPE_TEST_SEED (always printed, so a failing randomized run can be replayed), bounded waits, and the
// engine configurations suites sweep (the actor engine with 1, 2 and 4 workers and with several dependency
// shards, and the naive engine).
//
// Environment:
//   TROUPE_TEST_SEED   seed of every randomized test (default: random; always printed as "seed=...")
//   TROUPE_TEST_SCALE  multiplier on test sizes (default 1; the TSan pass uses 0.2)
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "actors/config.h"
#include "engine/engine.h"

namespace troupe::test {

// Upper bound for any wait on something that must happen. Never reached unless the engine hangs; reaching
// it fails the test instead of hanging it until the CTest timeout.
inline constexpr std::chrono::seconds kLongWait{30};

// ---------------------------------------------------------------------------------------------- sizes
inline double TestScale() {
  const char* s = std::getenv("TROUPE_TEST_SCALE");
  if (s == nullptr || *s == '\0') return 1.0;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || !(v > 0.0) || !std::isfinite(v)) {
    ADD_FAILURE() << "TROUPE_TEST_SCALE='" << s << "' is not a positive number";
    return 1.0;
  }
  return v;
}

// n scaled by TROUPE_TEST_SCALE, at least min_value.
inline std::size_t Scaled(std::size_t n, std::size_t min_value = 1) {
  auto v = static_cast<std::size_t>(std::llround(static_cast<double>(n) * TestScale()));
  return std::max(v, min_value);
}

inline std::uint64_t TestSeed() {
  std::uint64_t seed;
  const char* s = std::getenv("TROUPE_TEST_SEED");
  if (s != nullptr && *s != '\0') {
    seed = std::strtoull(s, nullptr, 0);
  } else {
    std::random_device rd;
    seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << "seed=" << seed << "  (" << (info ? info->test_suite_name() : "") << "." << (info ? info->name() : "")
            << "; rerun with TROUPE_TEST_SEED=" << seed << ")" << std::endl;
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

// -------------------------------------------------------------------------------------------- engines
struct EngineParam {
  EngineType type = EngineType::kActor;
  int workers = 1;  // RuntimeConfig::cpu_workers (the naive engine ignores it)
  int shards = 0;   // RuntimeConfig::dependency_shards; 0: leave the default / TROUPE_DEPENDENCY_SHARDS
};

inline std::ostream& operator<<(std::ostream& os, const EngineParam& p) {
  os << EngineTypeName(p.type);
  if (p.type == EngineType::kActor) {
    os << " cpu_workers=" << p.workers;
    if (p.shards > 0) os << " dependency_shards=" << p.shards;
  }
  return os;
}

inline std::string EngineParamName(const ::testing::TestParamInfo<EngineParam>& info) {
  const EngineParam& p = info.param;
  if (p.type == EngineType::kNaive) return "Naive";
  std::string name = "Actor" + std::to_string(p.workers) + (p.workers == 1 ? "Worker" : "Workers");
  if (p.shards > 0) name += std::to_string(p.shards) + "Shards";
  return name;
}

// Every engine configuration the suites sweep: the actor engine with 1, 2 and 4 CPU workers (and once with
// several dependency shards, so that functions spanning shards are covered), and the naive engine.
inline std::vector<EngineParam> AllEngines() {
  return {{EngineType::kActor, 1, 0},
          {EngineType::kActor, 2, 0},
          {EngineType::kActor, 4, 0},
          {EngineType::kActor, 2, 4},
          {EngineType::kNaive, 1, 0}};
}

inline std::vector<EngineParam> ActorEngines() {
  std::vector<EngineParam> v;
  for (const auto& p : AllEngines())
    if (p.type == EngineType::kActor) v.push_back(p);
  return v;
}

inline EngineConfig MakeConfig(const EngineParam& p) {
  EngineConfig config;
  config.type = p.type;
  config.runtime = RuntimeConfig{}.WithEnv();  // lets a CI pass vary the other knobs
  config.runtime.cpu_workers = p.workers;
  if (p.shards > 0) config.runtime.dependency_shards = p.shards;
  return config;
}

inline std::unique_ptr<Engine> MakeEngine(const EngineParam& p) {
  auto engine = Engine::Create(MakeConfig(p));
  EXPECT_NE(engine, nullptr);
  if (engine != nullptr) {
    EXPECT_EQ(engine->type(), p.type);
  }
  return engine;
}

}  // namespace troupe::test
