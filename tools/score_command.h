// `troupe score` and `troupe predict`: a symbol and its parameters (a checkpoint of `troupe train`, or any
// MXNet 1.x symbol JSON and .params, tools/symbol_net.h) run over a data set (the --data sources of
// `troupe train`).
//
// score prints the accuracy and the cross-entropy MXNet-style ("Validation-accuracy=0.8750").
// predict writes one line per example (its position in the data, the predicted class, that class's
// probability, the example's label) to --output or stdout and prints a summary (examples, accuracy against
// the labels, predictions per class).
//
// Exit status: 0 done (score: and the accuracy reaches --min-accuracy), 1 a failure (the message names the
// cause) or an accuracy below --min-accuracy, 2 bad usage.
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace troupe::tools {

struct ScoreOptions {
  std::string symbol;
  std::string params;
  std::string data = "fashion-mnist";
  std::string split = "test";          // test | train
  std::string data_shape = "1,28,28";
  int batch_size = 100;
  std::int64_t images = 0;             // 0: all
  std::string devices = "cpu:0";       // each batch split over these (as troupe train --devices)
  std::string output;                  // predict: the file of predictions (empty: stdout)
  double min_accuracy = 0;             // score: exit 1 below this
};

class ScoreCommand {
 public:
  // Adds `score` (predict = false) or `predict` to `root`.
  ScoreCommand(CLI::App* root, bool predict);
  bool chosen() const;
  int Run();

 private:
  CLI::App* app_ = nullptr;
  bool predict_ = false;
  ScoreOptions options_;
};

// What the commands do after parsing. Return the exit status; throw troupe::Error on failure.
int RunScore(const ScoreOptions& options);
int RunPredict(const ScoreOptions& options);

}  // namespace troupe::tools
