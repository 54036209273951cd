// The `troupe` command's usage errors, as a user meets them: a mistyped command or option gets the close
// names, an option given twice says so, and every usage error exits 2 and points at --help.
#include <gtest/gtest.h>

#include <string>
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

TEST(Cli, HelpAndVersionExitZero) {
  EXPECT_EQ(Troupe({"--version"}).status, 0);
  const Result h = Troupe({"train", "--help"});
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.text.find("--epochs"), std::string::npos);
}

}  // namespace
