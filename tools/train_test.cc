// `troupe train` end to end: the built command trains on the first 2000 Fashion-MNIST images written out as
// idx files, CSV files and an image RecordIO file (each must beat chance by far), writes and resumes from
// checkpoints, draws its progress bar, refuses bad usage with a message, and trains as two dist_sync workers
// under `troupe launch` whose parameters agree (the same test accuracy on both; worker 0's checkpoint), and
// as two dist_async workers. Then a user's symbol (--symbol, ending in logits, with a partial .params file):
// trained, checkpointed, scored and predicted with `troupe score` / `troupe predict` (the predictions agree
// with the accuracy), resumed, trained with fixed parameters, and refused with a message for bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "graph/symbol.h"
#include "io/io.h"
#include "io/recordio.h"
#include "proc/process.h"
#include "tests/common/jpeg_util.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

constexpr const char* kFashion = "/usr/share/datasets/fashion-mnist";
constexpr int kTrain = 2000, kTest = 500, kSide = 28, kPixels = kSide * kSide;

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr
};

Result RunShell(const std::string& command) {
  const fs::path out_file = fs::path(TROUPE_TRAIN_TEST_DIR) / "output.txt";
  const std::string cmd = command + " > '" + out_file.string() + "' 2>&1 < /dev/null";
  const int raw = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream in(out_file);
  r.out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

Result Train(const std::string& args) { return RunShell(std::string(TROUPE_CLI_PATH) + " train " + args); }

// Images (bytes) and labels of the first n samples of a Fashion-MNIST file pair, read with MNISTIter.
void ReadSamples(const std::string& prefix, int n, std::vector<unsigned char>* pixels, std::vector<int>* labels) {
  auto it = troupe::CreateDataIter("MNISTIter", {{"image", std::string(kFashion) + "/" + prefix + "-images-idx3-ubyte.gz"},
                                                 {"label", std::string(kFashion) + "/" + prefix + "-labels-idx1-ubyte.gz"},
                                                 {"batch_size", "100"},
                                                 {"shuffle", "False"},
                                                 {"flat", "True"}});
  while (static_cast<int>(labels->size()) < n && it->Next()) {
    const auto& b = it->Value();
    const std::vector<float> x = b.data[0].ToVector<float>();
    const std::vector<float> y = b.label[0].ToVector<float>();
    for (int i = 0; i < 100 && static_cast<int>(labels->size()) < n; ++i) {
      for (int p = 0; p < kPixels; ++p) {
        pixels->push_back(static_cast<unsigned char>(std::lround(x[i * kPixels + p] * 255.0f)));
      }
      labels->push_back(static_cast<int>(y[i]));
    }
  }
}

void PutBigEndian(std::ofstream& f, std::uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  f.write(reinterpret_cast<const char*>(b), 4);
}

// The formats.md layouts: idx (magic, dimensions, bytes), CSV (one sample a row), image records (JPEG).
void WriteAll(const fs::path& dir, const std::string& idx_prefix, const std::string& split,
              const std::vector<unsigned char>& px, const std::vector<int>& labels) {
  const auto n = static_cast<std::uint32_t>(labels.size());
  {
    std::ofstream img(dir / "idx" / (idx_prefix + "-images-idx3-ubyte"), std::ios::binary);
    PutBigEndian(img, 0x803);
    for (std::uint32_t v : {n, static_cast<std::uint32_t>(kSide), static_cast<std::uint32_t>(kSide)}) PutBigEndian(img, v);
    img.write(reinterpret_cast<const char*>(px.data()), static_cast<std::streamsize>(px.size()));
    std::ofstream lab(dir / "idx" / (idx_prefix + "-labels-idx1-ubyte"), std::ios::binary);
    PutBigEndian(lab, 0x801);
    PutBigEndian(lab, n);
    for (int l : labels) lab.put(static_cast<char>(l));
  }
  {
    std::ofstream data(dir / "csv" / (split + "-data.csv")), label(dir / "csv" / (split + "-label.csv"));
    for (std::uint32_t i = 0; i < n; ++i) {
      for (int p = 0; p < kPixels; ++p) data << (p ? "," : "") << px[i * kPixels + p] / 255.0f;
      data << "\n";
      label << labels[i] << "\n";
    }
  }
  troupe::RecordIOWriter rec((dir / "rec" / (split + ".rec")).string());
  for (std::uint32_t i = 0; i < n; ++i) {
    troupe::ImageRecordHeader h;
    h.label = static_cast<float>(labels[i]);
    h.id = i;
    const std::vector<unsigned char> one(px.begin() + i * kPixels, px.begin() + (i + 1) * kPixels);
    rec.Write(troupe::PackImageRecord(h, troupe::test::EncodeJpeg(one, kSide, kSide, 1, 95)));
  }
}

// "[worker R] final test accuracy X" of every worker.
std::vector<std::string> FinalAccuracies(const std::string& out) {
  std::vector<std::string> found;
  const std::regex re(R"(\[worker (\d)\] final test accuracy ([0-9.]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    found.push_back((*it)[2].str());
  }
  return found;
}

// The value of every "Epoch[E] <what>=X" line (of `who`'s lines when given, e.g. "[worker 0] "), in order;
// what: "Test-accuracy", "Validation-cross-entropy" ...
std::vector<std::string> EpochValues(const std::string& out, const std::string& what, const std::string& who = "") {
  std::vector<std::string> found;
  std::istringstream lines(out);
  const std::regex re(R"(Epoch\[\d+\] )" + what + R"(=([-0-9.a-z]+))");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.rfind(who, 0) != 0) continue;
    const std::string rest = line.substr(who.size());
    if (std::regex_match(rest, m, re)) found.push_back(m[1].str());
  }
  return found;
}

// The Test-accuracy of every epoch (of `who`'s lines when given, e.g. "[worker 0] "), in order.
std::vector<std::string> EpochTestAccuracies(const std::string& out, const std::string& who = "") {
  std::vector<std::string> found;
  std::istringstream lines(out);
  const std::regex re(R"(Epoch\[\d+\] Test-accuracy=([0-9.]+)$)");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.rfind(who, 0) == 0 && std::regex_search(line, m, re)) found.push_back(m[1].str());
  }
  return found;
}

class TrainCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz")) return;
    dir_ = fs::path(TROUPE_TRAIN_TEST_DIR);
    fs::remove_all(dir_);
    for (const char* sub : {"idx", "csv", "rec", "ckpt"}) fs::create_directories(dir_ / sub);
    for (const auto& [prefix, split, n] : {std::tuple<std::string, std::string, int>{"train", "train", kTrain},
                                           {"t10k", "test", kTest}}) {
      std::vector<unsigned char> px;
      std::vector<int> labels;
      ReadSamples(prefix, n, &px, &labels);
      ASSERT_EQ(static_cast<int>(labels.size()), n);
      WriteAll(dir_, prefix, split, px, labels);
    }
  }
  void SetUp() override {
    if (dir_.empty()) GTEST_SKIP() << "Fashion-MNIST is not installed (dataset-fashion-mnist)";
  }
  static std::string Data(const std::string& kind) { return kind + ":" + (dir_ / kind).string(); }
  static fs::path dir_;
};
fs::path TrainCommandTest::dir_;

TEST_F(TrainCommandTest, TrainsOnIdxCsvAndRecordIO) {
  for (const std::string kind : {"idx", "csv", "rec"}) {
    SCOPED_TRACE(kind);
    // 2000 images, 3 epochs: about 0.75 for every source (chance is 0.1).
    const Result r = Train("--data " + Data(kind) + " --epochs 3 --progress none --min-accuracy 0.6");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("Epoch[2] Train-accuracy="));
    EXPECT_THAT(r.out, HasSubstr("final test accuracy"));
  }
}

TEST_F(TrainCommandTest, LenetLearns) {
  const Result r = Train("--model lenet --act relu --data " + Data("idx") + " --epochs 2 --progress none --min-accuracy 0.5");
  EXPECT_EQ(r.status, 0) << r.out;
}

// ResNet-18 (models::ResNet, CIFAR stem) trains end to end from the command line. 300 images, 2 epochs: about
// 30 s on 2 cores. The training accuracy of the second epoch is about 0.4-0.5 (chance 0.1); the test accuracy
// is not checked: 12 batches leave BatchNorm's moving statistics far from the data's.
TEST_F(TrainCommandTest, Resnet18Trains) {
  const Result r = Train("--model resnet18 --data fashion-mnist --train-images 300 --test-images 100 --epochs 2 "
                         "--batch-size 50 --lr 0.05 --seed 2 --progress none");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("troupe train: resnet18 on fashion-mnist"));
  const auto at = r.out.find("Epoch[1] Train-accuracy=");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(at + std::string("Epoch[1] Train-accuracy=").size())), 0.2) << r.out;
}

TEST_F(TrainCommandTest, CheckpointsAndResumes) {
  const std::string prefix = (dir_ / "ckpt" / "mlp").string();
  Result r = Train("--data " + Data("idx") + " --epochs 1 --progress none --checkpoint " + prefix);
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* f : {"-symbol.json", "-0001.params", "-0001.states"}) EXPECT_TRUE(fs::exists(prefix + f)) << f;
  r = Train("--data " + Data("idx") + " --epochs 2 --resume 1 --progress none --checkpoint " + prefix +
            " --min-accuracy 0.55");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("epochs 2..2"));
  EXPECT_THAT(r.out, Not(HasSubstr("Epoch[0]")));
  EXPECT_TRUE(fs::exists(prefix + "-0002.params"));
}

// --lr-factor 0 stops learning after the step epoch (plain SGD: no momentum to carry on): every later epoch
// ends with the parameters of the step epoch, so with the same test set the same accuracy.
TEST_F(TrainCommandTest, LearningRateStepsAfterTheGivenEpoch) {
  const Result r = Train("--data " + Data("idx") +
                         " --epochs 3 --momentum 0 --lr 0.1 --lr-step-epochs 1 --lr-factor 0 --progress none");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto acc = EpochTestAccuracies(r.out);
  ASSERT_EQ(acc.size(), 3u) << r.out;
  EXPECT_EQ(acc[1], acc[0]) << r.out;
  EXPECT_EQ(acc[2], acc[0]) << r.out;
}

TEST_F(TrainCommandTest, DrawsAProgressBar) {
  const Result r = Train("--data " + Data("idx") + " --epochs 1 --progress bar");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\rEpoch 1/1 ["));
  EXPECT_THAT(r.out, HasSubstr("100% 20/20"));  // 2000 images in batches of 100
  EXPECT_THAT(r.out, HasSubstr("img/s  acc "));
  EXPECT_THAT(r.out, HasSubstr("  loss "));
}

// Mixed precision from the command line: LeNet converted to bfloat16 learns; float16 trains with loss scaling
// and reports its scale; an unknown type is bad usage.
TEST_F(TrainCommandTest, MixedPrecisionTrains) {
  Result r = Train("--model lenet --act relu --data " + Data("idx") + " --epochs 2 --progress none --amp bf16 "
                   "--min-accuracy 0.5");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("mixed precision bfloat16 (--amp bf16)"));
  r = Train("--model lenet --act relu --data " + Data("idx") + " --epochs 1 --progress none --amp fp16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Epoch[0] AMP loss scale="));
  r = Train("--amp fp8");
  EXPECT_EQ(r.status, 2);
}

TEST_F(TrainCommandTest, RefusesBadUsageWithAMessage) {
  Result r = Train("--data nope:/x");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("unknown source 'nope'"));
  r = Train("--data csv:" + (dir_ / "missing").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("cannot read"));
  r = Train("--data " + Data("idx") + " --devices cpu:x");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("bad device 'cpu:x'"));
  r = Train("--resume 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--resume needs --checkpoint"));
  r = Train("--model resnet");
  EXPECT_EQ(r.status, 2);
  r = Train("--model lenet --act sigmoid");
  EXPECT_EQ(r.status, 2);
  r = RunShell("env -u DMLC_PS_ROOT_PORT " + std::string(TROUPE_CLI_PATH) + " train --kvstore dist_sync");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("start it with troupe launch"));
}

TEST_F(TrainCommandTest, DistSyncWorkersAgreeAndWorkerZeroCheckpoints) {
  const std::string prefix = (dir_ / "ckpt" / "dist").string();
  const std::string cli = TROUPE_CLI_PATH;
  const Result r = RunShell(cli + " launch -n 2 -s 1 -- " + cli + " train --kvstore dist_sync --batch-size 50 --data " +
                       Data("idx") + " --epochs 2 --progress none --min-accuracy 0.6 --checkpoint " + prefix);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("dist_sync worker 0 of 2"));
  EXPECT_THAT(r.out, HasSubstr("dist_sync worker 1 of 2"));
  // Both workers evaluate the same parameters (the servers' after the last round) on the same test set.
  const auto acc = FinalAccuracies(r.out);
  ASSERT_EQ(acc.size(), 2u) << r.out;
  EXPECT_EQ(acc[0], acc[1]) << r.out;
  EXPECT_TRUE(fs::exists(prefix + "-0002.params"));
  EXPECT_FALSE(fs::exists(prefix + "-0002.states"));  // the optimizer's states live on the server
}

// A server killed with SIGKILL mid-epoch: launch starts it again from its checkpoint (--restart-servers,
// on by default), the workers resend what the checkpoint lacks, and the job ends as an uninterrupted run
// with the same seed does (final accuracy within 0.005).
TEST_F(TrainCommandTest, DistSyncSurvivesAServerKilledMidEpoch) {
  const std::string cli = TROUPE_CLI_PATH;
  const std::string train = " train --kvstore dist_sync --batch-size 50 --data " + Data("idx") +
                            " --epochs 4 --progress none --seed 3";
  const Result plain = RunShell(cli + " launch -n 2 -s 1 -- " + cli + train);
  ASSERT_EQ(plain.status, 0) << plain.out;
  const auto want = FinalAccuracies(plain.out);
  ASSERT_EQ(want.size(), 2u) << plain.out;

  std::vector<std::string> argv{cli, "launch", "-n", "2", "-s", "1", "--", cli};
  std::istringstream words(train);
  for (std::string w; words >> w;) argv.push_back(w);
  troupe::proc::Process launch("troupe launch", argv, {}, /*merge_stderr=*/true);
  const auto started = launch.ReadLine("troupe launch: started", 60000);
  ASSERT_TRUE(started.has_value());
  std::istringstream pids(started->substr(started->find("pids") + 4));
  int scheduler_pid = 0, server_pid = 0;
  pids >> scheduler_pid >> server_pid;
  ASSERT_GT(server_pid, 0) << *started;
  // Once worker 0 has finished epoch 0 the next epoch's rounds are under way: kill the server now.
  ASSERT_TRUE(launch.ReadLine("[worker 0] Epoch[0]", 120000).has_value());
  ASSERT_EQ(::kill(server_pid, SIGKILL), 0);
  std::vector<std::string> lines;
  while (launch.ReadSome(&lines)) {
  }
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  EXPECT_EQ(launch.Wait(120000), 0) << out;
  EXPECT_THAT(out, HasSubstr("killed by signal 9; starting it again from its checkpoint (restart 1 of 3"));
  EXPECT_THAT(out, HasSubstr("troupe server 0: resumed from its checkpoint"));
  const auto got = FinalAccuracies(out);
  ASSERT_EQ(got.size(), 2u) << out;
  for (int w = 0; w < 2; ++w) {
    EXPECT_NEAR(std::stod(got[w]), std::stod(want[w]), 0.005) << "worker " << w << "\n" << out;
  }
  EXPECT_THAT(out, HasSubstr("is back; resent "));
  std::printf("final test accuracy: uninterrupted %s, with the server killed mid-epoch and restarted %s\n",
              want[0].c_str(), got[0].c_str());
  std::istringstream all(out);
  for (std::string l; std::getline(all, l);) {
    if (l.find("resent") != std::string::npos || l.find("resumed") != std::string::npos ||
        l.find("again") != std::string::npos || l.find("Epoch[1]") != std::string::npos) {
      std::printf("  %s\n", l.c_str());
    }
  }
}

// The schedule runs where the optimizer does: on the server, counting rounds.
TEST_F(TrainCommandTest, DistSyncServersFollowTheLearningRateSchedule) {
  const std::string cli = TROUPE_CLI_PATH;
  const Result r = RunShell(cli + " launch -n 2 -s 1 -- " + cli + " train --kvstore dist_sync --batch-size 50 --data " +
                            Data("idx") + " --epochs 2 --momentum 0 --lr 0.1 --lr-step-epochs 1 --lr-factor 0 "
                            "--progress none");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto acc = EpochTestAccuracies(r.out, "[worker 0] ");
  ASSERT_EQ(acc.size(), 2u) << r.out;
  EXPECT_EQ(acc[1], acc[0]) << r.out;
}

// Plain SGD: on 2000 images, momentum 0.9 with the one-step staleness of two async workers makes the first
// epochs erratic (test accuracy 0.4 to 0.64 after 2 epochs in 3 runs, against 0.60 to 0.75 without momentum);
// the full-data run with momentum reaches 0.877 (the issue's note).
TEST_F(TrainCommandTest, DistAsyncTrains) {
  const std::string cli = TROUPE_CLI_PATH;
  const Result r = RunShell(cli + " launch -n 2 -s 1 -- " + cli + " train --kvstore dist_async --batch-size 50 --data " +
                            Data("idx") + " --epochs 2 --momentum 0 --lr 0.1 --progress none --min-accuracy 0.5");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(FinalAccuracies(r.out).size(), 2u) << r.out;
}


// ------------------------------------------------------------------------------------------ MXNet's options
// Issue 25: the optimizers, schedules, metrics, validation split, save period and log lines an MXNet user knows.

// Every optimizer by MXNet's name with its own parameters (--optimizer-param), and a schedule with a warm-up:
// each learns (chance is 0.1), and the start-up line shows the configuration the Module got, with epochs
// converted to update counts (20 batches of 100 per epoch).
TEST_F(TrainCommandTest, EveryOptimizerAndScheduleByMXNetsNames) {
  Result r = Train("--data " + Data("idx") + " --optimizer nag --momentum 0.9 --wd 1e-4 --lr-scheduler cosine "
                   "--warmup-epochs 1 --epochs 2 --progress none --min-accuracy 0.5");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("optimizer nag learning_rate=0.05 wd=0.0001 momentum=0.9; lr_scheduler cosine "
                               "max_update=40 warmup_steps=20 warmup_begin_lr=0 warmup_mode=linear (update counts, "
                               "20 per epoch)"));
  r = Train("--data " + Data("idx") + " --lr-scheduler factor --lr-step-epochs 1 --lr-factor 0.5 "
            "--lr-scheduler-param stop_factor_lr=0.001 --epochs 1 --progress none");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("lr_scheduler factor step=20 factor=0.5 stop_factor_lr=0.001"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"adam --optimizer-param beta1=0.8 --optimizer-param epsilon=1e-6", "beta1=0.8 epsilon=1e-6"},
      {"adagrad --optimizer-param eps=1e-6", "eps=1e-6"},
      {"rmsprop --optimizer-param centered=True --optimizer-param gamma2=0.95", "centered=True gamma2=0.95"},
  };
  for (const auto& [args, shown] : cases) {
    SCOPED_TRACE(args);
    r = Train("--data " + Data("idx") + " --epochs 1 --progress none --min-accuracy 0.5 --optimizer " + args);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr(shown)) << r.out;
  }
}

// The settings reach the update: clip_gradient 0 (and no weight decay) leaves every weight where it started,
// so both epochs end with the initial parameters' test accuracy. A constant warm-up from rate 0 over two
// epochs does the same for epoch 0 (the same seed: the same initial parameters; MXNet counts updates from 1,
// so the warm-up's last update, the 40th, already has the full rate), then the last epoch learns.
TEST_F(TrainCommandTest, OptimizerAndScheduleSettingsReachTheUpdate) {
  const Result frozen = Train("--data " + Data("idx") + " --epochs 2 --momentum 0 --wd 0 --optimizer-param "
                              "clip_gradient=0 --progress none --seed 4");
  ASSERT_EQ(frozen.status, 0) << frozen.out;
  const auto still = EpochTestAccuracies(frozen.out);
  ASSERT_EQ(still.size(), 2u) << frozen.out;
  EXPECT_EQ(still[1], still[0]) << frozen.out;
  const Result warm = Train("--data " + Data("idx") + " --epochs 3 --momentum 0 --lr-step-epochs 5 --warmup-epochs 2 "
                            "--warmup-mode constant --warmup-begin-lr 0 --progress none --seed 4");
  ASSERT_EQ(warm.status, 0) << warm.out;
  EXPECT_THAT(warm.out, HasSubstr("warmup_steps=40 warmup_begin_lr=0 warmup_mode=constant"));
  const auto acc = EpochTestAccuracies(warm.out);
  ASSERT_EQ(acc.size(), 3u) << warm.out;
  EXPECT_EQ(acc[0], still[0]) << warm.out;
  EXPECT_GT(std::stod(acc[2]), 0.4) << warm.out;
}

// A resumed run's schedule: a checkpoint's optimizer states keep no update count, so the count restarts at
// the resumed epoch and the decays before it apply to the starting rate (MXNet's fit.py). With --lr-factor 0
// after epoch 1, the run resumed from epoch 1 trains at rate 0: its epochs end with the checkpoint's
// accuracy. (Steps counted from update 0 would train 20 more updates at the full rate.)
TEST_F(TrainCommandTest, ResumedScheduleCountsFromTheResumedEpoch) {
  const std::string prefix = (dir_ / "ckpt" / "sched").string();
  const std::string args = "--data " + Data("idx") + " --momentum 0 --lr 0.1 --lr-step-epochs 1 --lr-factor 0 "
                           "--progress none --checkpoint " + prefix;
  Result r = Train(args + " --epochs 1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto first = EpochTestAccuracies(r.out);
  ASSERT_EQ(first.size(), 1u) << r.out;
  r = Train(args + " --epochs 3 --resume 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("optimizer sgd learning_rate=0 "));
  const auto later = EpochTestAccuracies(r.out);
  EXPECT_EQ(later, (std::vector<std::string>{first[0], first[0]})) << r.out;
}

// Bad combinations are refused with a message and the usage status before anything is trained.
TEST_F(TrainCommandTest, RefusesBadOptimizerSettingsBeforeTraining) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--optimizer adam --momentum 0.9", "--momentum is a parameter of sgd and nag, not of adam"},
      {"--optimizer-param bogus=1", "bogus"},
      {"--optimizer adam --optimizer-param beta1=2", "beta1"},
      {"--optimizer-param beta1", "want key=value"},
      {"--optimizer-param learning_rate=0.1", "use --lr instead"},
      {"--lr-scheduler cosine --lr-step-epochs 2", "not cosine"},
      {"--lr-scheduler factor", "--lr-scheduler factor needs --lr-step-epochs N"},
      {"--lr-scheduler multifactor", "--lr-scheduler multifactor needs --lr-step-epochs"},
      {"--warmup-epochs 1", "--warmup-epochs needs a schedule"},
      {"--lr-scheduler cosine --warmup-epochs 3 --epochs 2", "must be below --epochs 2"},
      {"--lr-scheduler-param final_lr=0.1", "needs --lr-scheduler"},
      {"--lr-scheduler cosine --lr-scheduler-param max_update=5", "--lr-scheduler-param max_update: set by"},
      {"--lr-scheduler cosine --lr-scheduler-param bogus=5", "bogus"},
      {"--lr-scheduler cosine --checkpoint x --resume 1 --epochs 3", "cosine cannot continue"},
      {"--metric acc,bogus", "--metric bogus: unknown"},
      {"--metric acc --metric accuracy", "given twice"},
      {"--save-period 2", "--save-period needs --checkpoint"},
      {"--optimizer sgdd", "sgdd"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    const Result r = Train("--data " + Data("idx") + " --progress none " + args);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr(message));
    EXPECT_THAT(r.out, Not(HasSubstr("Epoch[")));
  }
}

// A cluster's servers run the optimizer: the settings travel in its configuration. rmsprop with
// clip_gradient 0 on the servers leaves the weights alone (the same test accuracy after both epochs), and
// nag with a warmed-up cosine schedule learns.
TEST_F(TrainCommandTest, DistServersGetEveryOptimizerSetting) {
  const std::string cli = TROUPE_CLI_PATH;
  const std::string job = cli + " launch -n 2 -s 1 -- " + cli + " train --kvstore dist_sync --batch-size 50 --data " +
                          Data("idx") + " --epochs 2 --progress none ";
  Result r = RunShell(job + "--optimizer rmsprop --wd 0 --optimizer-param clip_gradient=0 --lr-scheduler cosine");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto acc = EpochTestAccuracies(r.out, "[worker 0] ");
  ASSERT_EQ(acc.size(), 2u) << r.out;
  EXPECT_EQ(acc[1], acc[0]) << r.out;
  r = RunShell(job + "--optimizer nag --lr-scheduler cosine --warmup-epochs 1 --min-accuracy 0.5");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("lr_scheduler cosine max_update=40 warmup_steps=20"));  // rounds of 2 x 50
}

double Value(const std::vector<std::string>& v, std::size_t i) { return i < v.size() ? std::stod(v[i]) : std::nan(""); }

// Several metrics by MXNet's names, on the training, validation and test data; the figures agree with
// each other as their definitions say (top-3 accuracy >= accuracy; perplexity = exp(cross-entropy)).
TEST_F(TrainCommandTest, MetricsByMXNetsNames) {
  const Result r = Train("--data " + Data("idx") + " --epochs 1 --progress none --val-fraction 0.2 "
                         "--metric acc,ce --metric mse,mae,rmse --metric perplexity --top-k 3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("metrics accuracy, cross-entropy, mse, mae, rmse, perplexity, top_k_accuracy_3"));
  for (const std::string split : {"Train", "Validation", "Test"}) {
    SCOPED_TRACE(split);
    for (const char* name : {"accuracy", "cross-entropy", "mse", "mae", "rmse", "perplexity", "top_k_accuracy_3"}) {
      EXPECT_EQ(EpochValues(r.out, split + "-" + name).size(), 1u) << name << "\n" << r.out;
    }
    const double acc = Value(EpochValues(r.out, split + "-accuracy"), 0);
    EXPECT_GE(Value(EpochValues(r.out, split + "-top_k_accuracy_3"), 0), acc);
    const double ce = Value(EpochValues(r.out, split + "-cross-entropy"), 0);
    EXPECT_NEAR(Value(EpochValues(r.out, split + "-perplexity"), 0), std::exp(ce), 1e-4 * std::exp(ce));
    EXPECT_GT(Value(EpochValues(r.out, split + "-mse"), 0), 0);
  }
  // f1 is binary: the 10 classes of the built-in models are refused before training.
  const Result f1 = Train("--data " + Data("idx") + " --epochs 1 --progress none --metric f1");
  EXPECT_EQ(f1.status, 1) << f1.out;
  EXPECT_THAT(f1.out, HasSubstr("--metric f1 is binary"));
  EXPECT_THAT(f1.out, Not(HasSubstr("Epoch[")));
}

// --val-fraction holds training images out (the same ones for the same seed), validates on them every epoch,
// and leaves the test set for the test lines and the final test accuracy.
TEST_F(TrainCommandTest, ValidationSplitIsHeldOutOfTraining) {
  const std::string args = "--data " + Data("idx") + " --epochs 2 --progress none --val-fraction 0.25 --seed 5";
  const Result a = Train(args);
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_THAT(a.out, HasSubstr("validation: 500 of 2000 training images held out (--val-fraction 0.25)"));
  const auto val = EpochValues(a.out, "Validation-accuracy");
  ASSERT_EQ(val.size(), 2u) << a.out;
  const auto test = EpochTestAccuracies(a.out);
  ASSERT_EQ(test.size(), 2u) << a.out;
  std::smatch final_line;
  ASSERT_TRUE(std::regex_search(a.out, final_line, std::regex(R"(final test accuracy ([0-9.]+))"))) << a.out;
  EXPECT_NEAR(std::stod(final_line[1].str()), std::stod(test[1]), 5e-5);
  const Result b = Train(args);
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_EQ(EpochValues(b.out, "Validation-accuracy"), val) << b.out;
  // Without it: no validation lines.
  const Result none = Train("--data " + Data("idx") + " --epochs 1 --progress none");
  EXPECT_THAT(none.out, Not(HasSubstr("Validation-")));
  const Result tiny = Train("--data " + Data("idx") + " --epochs 1 --progress none --val-fraction 0.0001");
  EXPECT_EQ(tiny.status, 1) << tiny.out;
  EXPECT_THAT(tiny.out, HasSubstr("want at least one image for validation"));
}

// --save-period 2 over 3 epochs: checkpoints 2 and 3 (the last), not 1.
TEST_F(TrainCommandTest, SavePeriodAndTheLastEpoch) {
  const std::string prefix = (dir_ / "ckpt" / "period").string();
  const Result r = Train("--data " + Data("idx") + " --epochs 3 --progress none --save-period 2 --checkpoint " + prefix);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(fs::exists(prefix + "-0001.params"));
  for (const char* f : {"-0002.params", "-0002.states", "-0003.params", "-0003.states", "-symbol.json"}) {
    EXPECT_TRUE(fs::exists(prefix + f)) << f;
  }
  EXPECT_THAT(r.out, HasSubstr("Saved checkpoint to \"" + prefix + "-0002.params\""));
  EXPECT_THAT(r.out, HasSubstr("Saved checkpoint to \"" + prefix + "-0003.params\""));
}

// MXNet 1.9.1's lines, byte for byte in their format: Speedometer (auto_reset, as fit.py) every
// --log-interval batches, then Train-<metric>, Time cost and the test lines; the Train lines read by MXNet's
// tools/parse_log.py regular expression give the metric's value.
TEST_F(TrainCommandTest, LogLinesInMXNetsFormat) {
  const Result r = Train("--data " + Data("idx") + " --epochs 1 --progress lines --log-interval 5");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<std::string> batch_lines, train_lines;
  std::istringstream lines(r.out);
  const std::regex speedometer(
      R"(Epoch\[0\] Batch \[(\d+)-(\d+)\]\tSpeed: \d+\.\d\d samples/sec\taccuracy=\d\.\d{6}\tcross-entropy=\d+\.\d{6})");
  const std::regex parse_log_train(R"(.*Epoch\[(\d+)\] Train.*=([.\d]+))");  // tools/parse_log.py
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (line.find("Batch [") != std::string::npos) {
      EXPECT_TRUE(std::regex_match(line, m, speedometer)) << line;
      batch_lines.push_back(m[1].str() + "-" + m[2].str());
    }
    if (std::regex_match(line, m, parse_log_train)) {
      train_lines.push_back(line);
      const auto eq = line.find('=');
      EXPECT_EQ(m[2].str(), line.substr(eq + 1)) << line;  // the whole value, nothing after it
    }
  }
  // 20 batches: MXNet counts from 0 and logs at 5, 10, 15.
  EXPECT_EQ(batch_lines, (std::vector<std::string>{"0-5", "5-10", "10-15"})) << r.out;
  EXPECT_EQ(train_lines.size(), 2u) << r.out;  // accuracy, cross-entropy
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nEpoch\[0\] Train-accuracy=\d\.\d{6}\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nEpoch\[0\] Time cost=\d+\.\d{3}\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nEpoch\[0\] Test-accuracy=\d\.\d{6}\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nEpoch\[0\] Speed: \d+\.\d\d samples/sec\n)"))) << r.out;
}

// --progress none (scripts/demo): no bar and no batch lines, but every per-epoch line.
TEST_F(TrainCommandTest, ProgressNoneKeepsTheEpochLines) {
  const Result r = Train("--data " + Data("idx") + " --epochs 1 --progress none --log-interval 5");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* line : {"Epoch[0] Train-accuracy=", "Epoch[0] Train-cross-entropy=", "Epoch[0] Time cost=",
                           "Epoch[0] Test-accuracy=", "Epoch[0] Test-cross-entropy="}) {
    EXPECT_THAT(r.out, HasSubstr(line));
  }
  EXPECT_THAT(r.out, Not(HasSubstr("Batch [")));
  EXPECT_THAT(r.out, Not(HasSubstr("\r")));
}

// Output paths are checked before any work: a checkpoint prefix in a missing directory, or under a file.
TEST_F(TrainCommandTest, RefusesAnUnwritableCheckpointBeforeTraining) {
  const std::string missing = (dir_ / "no-such-dir" / "mlp").string();
  Result r = Train("--data " + Data("idx") + " --epochs 1 --progress none --checkpoint " + missing);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("the directory " + (dir_ / "no-such-dir").string() + " does not exist"));
  EXPECT_THAT(r.out, Not(HasSubstr("Epoch[")));
  const std::string file = (dir_ / "a-file").string();
  std::ofstream(file) << "x";
  r = Train("--data " + Data("idx") + " --epochs 1 --progress none --checkpoint " + file + "/mlp");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr(file + " is not a directory"));
  EXPECT_THAT(r.out, Not(HasSubstr("Epoch[")));
}

// A library error that reaches the command line names no C++ call as its fix: resuming a LeNet from an
// MLP's checkpoint.
TEST_F(TrainCommandTest, ErrorsSpeakCommandLine) {
  const std::string prefix = (dir_ / "ckpt" / "other").string();
  Result r = Train("--data " + Data("idx") + " --epochs 1 --progress none --checkpoint " + prefix);
  ASSERT_EQ(r.status, 0) << r.out;
  r = Train("--model lenet --data " + Data("idx") + " --epochs 2 --resume 1 --progress none --checkpoint " + prefix);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("the file holds arrays of another network"));
  EXPECT_THAT(r.out, Not(HasSubstr("allow_extra")));
  EXPECT_THAT(r.out, Not(HasSubstr("Module::")));
}


// ------------------------------------------------------------------------------------------ --symbol
// A user's network: a small convolutional net written with troupe's Symbol API and saved as MXNet symbol
// JSON, ending in the logits (no loss head, as a Gluon export), and a .params file that gives some of its
// parameters, in both of the name styles: MXNet's "arg:NAME" and Gluon's plain NAME.

Result Tool(const std::string& command, const std::string& args) {
  return RunShell(std::string(TROUPE_CLI_PATH) + " " + command + " " + args);
}

// The value after `key` in `out` ("Validation-accuracy=" -> 0.8750), or -1 when absent.
double ValueAfter(const std::string& out, const std::string& key) {
  const auto at = out.find(key);
  return at == std::string::npos ? -1 : std::stod(out.substr(at + key.size()));
}

// Deterministic values in [-a, a): a Weyl sequence (the test needs fixed starting weights, not good ones).
std::vector<float> Spread(std::size_t n, float a) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = a * (2.0f * static_cast<float>(std::fmod(0.6180339887 * (i + 1), 1.0)) - 1.0f);
  return v;
}

class SymbolCommandTest : public TrainCommandTest {
 protected:
  void SetUp() override {
    TrainCommandTest::SetUp();
    if (IsSkipped()) return;
    sym_dir_ = dir_ / "sym";
    fs::create_directories(sym_dir_);
    using troupe::Symbol;
    Symbol x = Symbol::Variable("data");
    x = Symbol::Create("Convolution", {{"kernel", "(3,3)"}, {"num_filter", "8"}}, {x}, "conv0");
    x = Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu0");
    x = Symbol::Create("Pooling", {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "max"}}, {x}, "pool0");
    x = Symbol::Create("Flatten", {}, {x}, "flat0");
    x = Symbol::Create("FullyConnected", {{"num_hidden", "10"}}, {x}, "fc1");
    x.Save(Symbol_());
    const troupe::Context cpu = troupe::Context::CPU();
    conv0_weight_ = Spread(8 * 9, 0.3f);
    troupe::NDArray::Save(Params(),
                          {troupe::NDArray::FromVector(conv0_weight_, troupe::TShape{8, 1, 3, 3}, cpu),
                           troupe::NDArray::Zeros(troupe::TShape{8}, cpu), troupe::NDArray::Zeros(troupe::TShape{10}, cpu)},
                          {"conv0_weight", "arg:conv0_bias", "fc1_bias"});
  }
  std::string Symbol_() const { return (sym_dir_ / "net-symbol.json").string(); }
  std::string Params() const { return (sym_dir_ / "net-0000.params").string(); }
  fs::path sym_dir_;
  std::vector<float> conv0_weight_;
};

TEST_F(SymbolCommandTest, TrainsScoresAndPredictsAUserSymbol) {
  const std::string prefix = (sym_dir_ / "ft").string();
  Result r = Train("--symbol " + Symbol_() + " --params " + Params() + " --data " + Data("idx") +
                   " --epochs 2 --progress none --checkpoint " + prefix + " --min-accuracy 0.55");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("data input 'data' (100,1,28,28), SoftmaxOutput head added"));
  EXPECT_THAT(r.out, HasSubstr("3 of 4 parameters loaded from " + Params() + ", 1 initialised"));
  const double trained = ValueAfter(r.out, "final test accuracy ");
  for (const char* f : {"-symbol.json", "-0002.params", "-0002.states"}) EXPECT_TRUE(fs::exists(prefix + f)) << f;

  // score: the checkpoint's symbol has the loss head now; the accuracy is the one training ended with.
  const std::string ckpt = " --symbol " + prefix + "-symbol.json --params " + prefix + "-0002.params --data " + Data("idx");
  r = Tool("score", ckpt);
  ASSERT_EQ(r.status, 0) << r.out;
  const double scored = ValueAfter(r.out, "Validation-accuracy=");
  EXPECT_GT(scored, 0.55) << r.out;
  EXPECT_NEAR(scored, trained, 1e-4) << r.out;
  EXPECT_GT(ValueAfter(r.out, "Validation-cross-entropy="), 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("examples 500"));
  // Each batch split over two devices: the same examples, the same predictions.
  r = Tool("score", ckpt + " --devices cpu:0,cpu:1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cpu:0,cpu:1"));
  EXPECT_NEAR(ValueAfter(r.out, "Validation-accuracy="), scored, 1e-4) << r.out;
  EXPECT_THAT(r.out, HasSubstr("examples 500"));
  r = Tool("score", ckpt + " --devices tpu:0");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--devices: bad device 'tpu:0'"));

  // predict: one line per test example whose predictions agree with score's accuracy.
  const std::string tsv = (sym_dir_ / "pred.tsv").string();
  r = Tool("predict", ckpt + " --output " + tsv);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("predicted 500 examples into " + tsv));
  std::ifstream in(tsv);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "# index\tpredicted\tprobability\tlabel");
  int rows = 0, correct = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    int index = -1, predicted = -1, label = -1;
    double prob = -1;
    f >> index >> predicted >> prob >> label;
    EXPECT_EQ(index, rows);
    EXPECT_GE(predicted, 0);
    EXPECT_LT(predicted, 10);
    EXPECT_GE(prob, 0.1 - 1e-6);  // the top of 10 probabilities
    EXPECT_LE(prob, 1.0 + 1e-6);
    correct += predicted == label;
    ++rows;
  }
  EXPECT_EQ(rows, 500);
  EXPECT_NEAR(correct / 500.0, scored, 1e-4);
  EXPECT_NEAR(ValueAfter(r.out, "accuracy against the labels "), scored, 1e-4) << r.out;
  const std::string tsv2 = (sym_dir_ / "pred2.tsv").string();
  r = Tool("predict", ckpt + " --output " + tsv2 + " --devices cpu:0,cpu:1");
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream a(tsv), b(tsv2);
  const std::string one((std::istreambuf_iterator<char>(a)), {}), two((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(one, two);  // two devices predict every example as one does

  // The same symbol resumes from its checkpoint.
  r = Train("--symbol " + Symbol_() + " --data " + Data("idx") + " --epochs 3 --resume 2 --progress none --checkpoint " +
            prefix + " --min-accuracy 0.55");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("epochs 3..3"));
  EXPECT_TRUE(fs::exists(prefix + "-0003.params"));
}

TEST_F(SymbolCommandTest, FixedParamsDoNotChange) {
  const std::string prefix = (sym_dir_ / "fixed").string();
  const Result r = Train("--symbol " + Symbol_() + " --params " + Params() + " --fixed-params '^conv0_' --data " +
                         Data("idx") + " --epochs 1 --progress none --checkpoint " + prefix);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2 parameters fixed"));
  std::vector<troupe::NDArray> arrays;
  std::vector<std::string> names;
  troupe::NDArray::Load(prefix + "-0001.params", &arrays, &names);
  bool seen = false;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "arg:conv0_weight") {
      EXPECT_EQ(arrays[i].ToVector<float>(), conv0_weight_);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST_F(SymbolCommandTest, RefusesBadInputWithAMessage) {
  Result r = Train("--symbol " + (sym_dir_ / "missing.json").string() + " --data " + Data("idx"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("cannot read the symbol file"));
  r = Train("--params " + Params());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("go with --symbol"));
  // A parameter whose shape does not fit the data: named, with both shapes.
  const std::string bad = (sym_dir_ / "bad.params").string();
  troupe::NDArray::Save(bad, {troupe::NDArray::Zeros(troupe::TShape{10, 5}, troupe::Context::CPU())}, {"arg:fc1_weight"});
  r = Train("--symbol " + Symbol_() + " --params " + bad + " --data " + Data("idx") + " --epochs 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("parameter 'fc1_weight' has shape (10,5)"));
  EXPECT_THAT(r.out, HasSubstr("the symbol needs (10,1352)"));
  // RGB images for a net whose first convolution takes one channel.
  r = Train("--symbol " + Symbol_() + " --params " + Params() + " --data " + Data("rec") + " --data-shape 3,28,28");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("parameter 'conv0_weight' has shape (8,1,3,3)"));
  EXPECT_THAT(r.out, HasSubstr("(100,3,28,28)"));
  // score needs every parameter.
  r = Tool("score", "--symbol " + Symbol_() + " --params " + Params() + " --data " + Data("idx"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("lacks 1 of the symbol's 4 parameters (fc1_weight)"));
  // Unknown operators are named by the loader.
  std::string json;
  {
    std::ifstream in(Symbol_());
    json.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto at = json.find("\"Activation\"");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, std::string("\"Activation\"").size(), "\"NoSuchActivation\"");
  const std::string unknown = (sym_dir_ / "unknown-symbol.json").string();
  std::ofstream(unknown) << json;
  r = Tool("predict", "--symbol " + unknown + " --params " + Params() + " --data " + Data("idx"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("NoSuchActivation"));
  r = Tool("score", "--params " + Params());
  EXPECT_EQ(r.status, 2);
}

}  // namespace
