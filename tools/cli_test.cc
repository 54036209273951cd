// The `troupe` command's usage errors, as a user meets them: a mistyped command or option gets the close
// names, an option given twice says so, and every usage error exits 2 and points at --help.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "proc/process.h"

namespace {

struct Result {
  int status = -1;
  std::string text;  // stdout and stderr
};

Result Troupe(const std::vector<std::string>& args) {
  std::vector<std::string> argv{TROUPE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  troupe::proc::Process p("troupe", argv, {}, /*merge_stderr=*/true);
  std::vector<std::string> lines;
  while (p.ReadSome(&lines)) {
  }
  Result r;
  for (const auto& l : lines) r.text += l + "\n";
  r.status = p.Wait(60000);
  return r;
}

TEST(Cli, AMistypedCommandGetsTheCloseOne) {
  const Result r = Troupe({"trian", "--epochs", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.text.find("troupe: unknown command 'trian' (did you mean train?)"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("Known commands: bench, im2rec, launch"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("launch-task"), std::string::npos) << "hidden commands are not offered: " << r.text;
  const Result far = Troupe({"xyzzy"});
  EXPECT_EQ(far.status, 2);
  EXPECT_EQ(far.text.find("did you mean"), std::string::npos) << far.text;
}

TEST(Cli, AMistypedOptionGetsTheCloseOne) {
  const Result r = Troupe({"train", "--epocs", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.text.find("troupe train: unknown option '--epocs'; did you mean --epochs?"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("Run 'troupe train --help'"), std::string::npos) << r.text;
  const Result sub = Troupe({"bench", "engine", "--json", "x.json", "--worker=2"});
  EXPECT_EQ(sub.status, 2);
  EXPECT_NE(sub.text.find("troupe bench engine: unknown option '--worker'; did you mean --workers, --workloads?"), std::string::npos)
      << sub.text;
}

TEST(Cli, AnOptionGivenTwiceSaysSo) {
  const Result r = Troupe({"train", "--train-images", "1", "--train-images", "2"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.text.find("troupe train: --train-images was given more than once; it takes one value"), std::string::npos)
      << r.text;
}

TEST(Cli, BenchTrainUsageErrorsExitTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--workloads", "resnet50"}, "resnet50 needs --synthetic"},
      {{"--ctx", "tpu:0"}, "--ctx must be cpu or gpu:N, not 'tpu:0'"},
      {{"--ctx", "cpu_pinned:0"}, "--ctx must be cpu or gpu:N, not 'cpu_pinned:0'"},
      // No machine has 1024 GPUs: the message for a GPU that is not there, with or without CUDA.
      {{"--ctx", "gpu:1023"}, "--ctx gpu:1023 needs CUDA device 1023"},
      {{"--dtype", "fp16"}, "--dtype"},
      {{"--amp", "bf16"}, "unknown option '--amp'"},
  };
  for (const auto& [args, want] : cases) {
    std::vector<std::string> argv{"bench", "train", "--quick", "--json", "/dev/null"};
    argv.insert(argv.end(), args.begin(), args.end());
    const Result r = Troupe(argv);
    EXPECT_EQ(r.status, 2) << args.front() << ": " << r.text;
    EXPECT_NE(r.text.find(want), std::string::npos) << r.text;
  }
}

TEST(Cli, BenchTrainHelpListsEachExampleOnItsOwnLine) {
  const Result h = Troupe({"bench", "train", "--help"});
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.text.find("one 224 x 224 image\n  troupe bench train --workloads mlp"), std::string::npos) << h.text;
  EXPECT_NE(h.text.find("--synthetic"), std::string::npos) << h.text;
}

TEST(Cli, HelpAndVersionExitZero) {
  EXPECT_EQ(Troupe({"--version"}).status, 0);
  const Result h = Troupe({"train", "--help"});
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.text.find("--epochs"), std::string::npos);
}

}  // namespace
