// The bench registry (bench/common/registry.h, bench/benchmarks.h): every workload of `troupe bench` is
// listed once, in help order, with a summary, a help text and options whose names do not clash, each bound
// to a fresh options struct per binding. (The command line built from it is checked end to end by the
// bench_*_smoke tests, which run `troupe bench <workload> --quick`.)
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <variant>
#include <vector>

#include "bench/benchmarks.h"
#include "bench/common/registry.h"

namespace troupe::bench {
namespace {

TEST(BenchRegistryTest, EveryWorkloadOnceInHelpOrder) {
  std::vector<std::string> names;
  for (const Benchmark& b : AllBenchmarks()) names.push_back(b.name);
  EXPECT_EQ(names, (std::vector<std::string>{"engine", "ndarray", "ops", "io", "train", "kvstore-local",
                                             "kvstore-dist", "train-dist", "nn"}));
}

TEST(BenchRegistryTest, EachDeclaresHelpAndDistinctOptions) {
  for (const Benchmark& b : AllBenchmarks()) {
    SCOPED_TRACE(b.name);
    EXPECT_FALSE(b.summary.empty());
    EXPECT_NE(b.description.find("Examples:\n  troupe bench " + b.name), std::string::npos);
    BenchOptionList options;
    const std::function<int()> run = b.bind(&options);
    EXPECT_TRUE(run);
    std::set<std::string> flags;
    bool json = false;
    for (const BenchOption& o : options.options()) {
      EXPECT_TRUE(flags.insert(o.flags()).second) << o.flags() << " declared twice";
      EXPECT_EQ(o.flags().rfind("--", 0), 0U) << o.flags();
      EXPECT_TRUE(o.hidden() || !o.help().empty()) << o.flags() << " has no help";
      if (o.flags() == "--json") json = std::holds_alternative<std::string*>(o.target());
      // Lists, and only lists, split at a delimiter.
      const bool list = std::holds_alternative<std::vector<int>*>(o.target()) ||
                        std::holds_alternative<std::vector<std::int64_t>*>(o.target()) ||
                        std::holds_alternative<std::vector<std::string>*>(o.target());
      if (!list) {
        EXPECT_EQ(o.delimiter(), '\0') << o.flags();
      }
    }
    EXPECT_TRUE(json) << "no --json FILE option";
    EXPECT_EQ(flags.count("--quick"), 1U);
  }
}

TEST(BenchRegistryTest, EachBindingHasItsOwnOptions) {
  const Benchmark b = AllBenchmarks().front();
  BenchOptionList first, second;
  // The run function owns its options struct: the declared fields live as long as it does.
  const std::function<int()> run_first = b.bind(&first);
  const std::function<int()> run_second = b.bind(&second);
  ASSERT_EQ(first.options().size(), second.options().size());
  EXPECT_NE(std::get<std::string*>(first.options().front().target()),
            std::get<std::string*>(second.options().front().target()));
}

TEST(BenchRegistryTest, OptionDeclarations) {
  struct Options {
    int n = 3;
    double x = 0.5;
    std::vector<std::string> names;
    bool flag = false;
  } o;
  BenchOptionList list;
  list.Add("--n", &o.n, "N").Range(1, 10).TypeName("N").ShowDefault().Required();
  list.Add("--x", &o.x, "X").Range(0.1, 1.0);
  list.Add("--names", &o.names, "Names").Delimiter(',').Choices({"a", "b"});
  list.Add("--flag", &o.flag, "Flag").Hidden();
  const auto& opts = list.options();
  ASSERT_EQ(opts.size(), 4U);
  EXPECT_EQ(opts[0].check(), BenchOption::Check::kIntRange);
  EXPECT_TRUE(opts[0].required() && opts[0].show_default());
  EXPECT_EQ(opts[0].type_name(), "N");
  EXPECT_EQ(opts[1].check(), BenchOption::Check::kRange);
  EXPECT_DOUBLE_EQ(opts[1].hi(), 1.0);
  EXPECT_EQ(opts[2].check(), BenchOption::Check::kChoices);
  EXPECT_EQ(opts[2].choices(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(opts[2].delimiter(), ',');
  EXPECT_TRUE(opts[3].hidden());
  EXPECT_EQ(std::get<int*>(opts[0].target()), &o.n);
  EXPECT_EQ(std::get<bool*>(opts[3].target()), &o.flag);
}

}  // namespace
}  // namespace troupe::bench
