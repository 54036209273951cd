// Randomized conformance (MXNet's RandSumExpr, generalised): many random functions over many variables,
// pushed as sync functions, async functions (completed inline or from another thread) and pre-built
// operators, with random priorities and lanes; the result must equal a sequential model. See RandomWorkload
// in test_util.h for the model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "engine/engine.h"
#include "tests/engine/test_util.h"

namespace troupe {
namespace {

using engine_test::AllEngines;
using engine_test::Completer;
using engine_test::EngineParam;
using engine_test::EngineParamName;
using engine_test::MakeEngine;
using engine_test::RandomWorkload;
using engine_test::Scaled;
using engine_test::TestSeed;
using engine_test::WorkloadOptions;

std::size_t ConformanceFunctions() {
  if (const char* s = std::getenv("TROUPE_TEST_FUNCTIONS"); s != nullptr && *s != '\0') {
    char* end = nullptr;
    unsigned long long n = std::strtoull(s, &end, 10);
    if (end != s && n > 0) return static_cast<std::size_t>(n);
    ADD_FAILURE() << "TROUPE_TEST_FUNCTIONS='" << s << "' is not a positive integer";
  }
  return Scaled(100000, 1000);
}

class EngineConformance : public ::testing::TestWithParam<EngineParam> {};

TEST_P(EngineConformance, RandomFunctionsMatchSequentialModel) {
  WorkloadOptions options;
  options.num_vars = 100;
  options.num_functions = ConformanceFunctions();
  options.seed = TestSeed();
  std::cout << "engine=" << GetParam() << " functions=" << options.num_functions << " vars=" << options.num_vars
            << std::endl;
  Completer completer(1);  // outlives the engine
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  RandomWorkload(engine.get(), &completer, options).Run();
  EXPECT_TRUE(engine_test::WaitNoPending(*engine)) << "Stats().pending stays above 0 after WaitForAll";
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.skipped, 0u) << "no function failed, none may be skipped";
  EXPECT_GE(stats.pushed, options.num_functions);
  EXPECT_EQ(stats.completed, stats.pushed);
}

// Only reads and writes of a handful of variables: long writer chains and large reader groups.
TEST_P(EngineConformance, FewHotVariables) {
  WorkloadOptions options;
  options.num_vars = 4;
  options.num_functions = Scaled(20000, 500);
  options.max_reads = 3;
  options.max_writes = 2;
  options.p_hot = 0;
  options.seed = TestSeed();
  Completer completer(2);
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  RandomWorkload(engine.get(), &completer, options).Run();
}

// Mostly readers: big groups of readers between rare writers.
TEST_P(EngineConformance, ReadMostly) {
  WorkloadOptions options;
  options.num_vars = 16;
  options.num_functions = Scaled(20000, 500);
  options.max_reads = 6;
  options.max_writes = 1;
  options.seed = TestSeed();
  Completer completer(1);
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  RandomWorkload(engine.get(), &completer, options).Run();
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineConformance, ::testing::ValuesIn(AllEngines()), EngineParamName);

}  // namespace
}  // namespace troupe
