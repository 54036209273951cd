// `troupe score` and `troupe predict`: see tools/score_command.h.
#include "tools/score_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/initializer.h"
#include "tools/symbol_net.h"
#include "tools/train_command.h"
#include "train/train.h"

namespace troupe::tools {
namespace {

// The net bound for inference on the data, every parameter from the file.
struct Loaded {
  SymbolNet net;
  std::unique_ptr<DataIter> data;
  std::unique_ptr<Module> mod;
};

Loaded Load(const ScoreOptions& o, const char* who) {
  Loaded l;
  l.net = LoadSymbolNet(o.symbol, o.params);
  l.data = MakeDataIter(o.data, o.split == "train", o.batch_size, 1, 0, 1, o.data_shape, false, o.images);
  const TShape data_shape = l.data->DataShapes().at(0), label_shape = l.data->LabelShapes().at(0);
  CheckInputs(l.net, data_shape, label_shape, o.data);
  std::vector<std::string> missing;
  for (const auto& p : l.net.param_names) {
    if (!l.net.arg_params.count(p) && !l.net.aux_params.count(p)) missing.push_back(p);
  }
  if (!missing.empty()) {
    std::string names;
    for (std::size_t i = 0; i < missing.size() && i < 5; ++i) names += (i ? ", " : "") + missing[i];
    if (missing.size() > 5) names += ", ...";
    throw Error(o.params + " lacks " + std::to_string(missing.size()) + " of the symbol's " +
                std::to_string(l.net.param_names.size()) + " parameters (" + names + "); " + who +
                " needs them all (a checkpoint of the same symbol)");
  }
  std::vector<std::string> labels;
  if (!l.net.label_name.empty()) labels.push_back(l.net.label_name);
  l.mod = std::make_unique<Module>(l.net.symbol, std::vector<std::string>{l.net.data_name}, labels,
                                   ParseDevices(o.devices));
  l.mod->Bind({data_shape}, labels.empty() ? std::vector<TShape>{} : std::vector<TShape>{label_shape}, false);
  l.mod->InitParams(*Initializer::Create("zero"), l.net.arg_params, l.net.aux_params, false);
  std::fprintf(stderr, "troupe %s: %s with %s on %s (%s split), %s, data '%s' %s, %s head%s\n", who,
               o.symbol.c_str(), o.params.c_str(), o.data.c_str(), o.split.c_str(), o.devices.c_str(),
               l.net.data_name.c_str(),
               data_shape.ToString().c_str(), l.net.head_op.c_str(),
               l.net.added_head ? " added (the symbol ends in scores; softmax gives the probabilities)" : "");
  return l;
}

}  // namespace

ScoreCommand::ScoreCommand(CLI::App* root, bool predict) : predict_(predict) {
  if (predict) {
    app_ = root->add_subcommand("predict", "Write the predicted class of every example of a data set");
    app_->footer(
        "Runs a symbol with its parameters (a troupe train checkpoint, or an MXNet 1.x symbol JSON and "
        ".params) over --data in order, without shuffling, and writes one line per example: its position in "
        "the data (0-based), the predicted class (the highest output), that class's probability, and the "
        "example's label, tab-separated, after a '#' header line. A symbol ending without a loss head gets "
        "SoftmaxOutput on top, so the probabilities are the softmax of its outputs. Then a summary: the "
        "number of examples, the accuracy against the labels, and the predictions per class (on stderr when "
        "the lines go to stdout).\n"
        "Data: as troupe train --data (fashion-mnist, idx:DIR, csv:DIR, rec:DIR); --split picks the test "
        "(default) or the training files.\n"
        "Exit status: 0 done, 1 on failure (missing file, shapes that do not fit, unknown operators), 2 on bad "
        "usage.\n\n"
        "Examples:\n"
        "  troupe predict --symbol lenet-symbol.json --params lenet-0005.params --output pred.tsv\n"
        "  troupe predict --symbol ft-symbol.json --params ft-0002.params --data rec:imgs --images 100\n");
  } else {
    app_ = root->add_subcommand("score", "Measure the accuracy of a checkpoint on a data set");
    app_->footer(
        "Runs a symbol with its parameters (a troupe train checkpoint, or an MXNet 1.x symbol JSON and "
        ".params) over --data and prints the accuracy and the cross-entropy as MXNet's Module.score logs "
        "them (Validation-accuracy=0.8750). Every parameter of the symbol must be in the file; a symbol "
        "ending without a loss head gets SoftmaxOutput on top.\n"
        "Data: as troupe train --data (fashion-mnist, idx:DIR, csv:DIR, rec:DIR); --split picks the test "
        "(default) or the training files.\n"
        "Exit status: 0 when the accuracy reaches --min-accuracy (default 0), 1 when it does not or on failure "
        "(missing file, shapes that do not fit, unknown operators), 2 on bad usage.\n\n"
        "Examples:\n"
        "  troupe score --symbol lenet-symbol.json --params lenet-0005.params\n"
        "  troupe score --symbol ft-symbol.json --params ft-0002.params --data rec:imgs --data-shape 1,28,28\n"
        "  troupe score --symbol net-symbol.json --params net-0010.params --split train --images 1000\n"
        "  troupe score --symbol net-symbol.json --params net-0010.params --devices gpu:0\n");
  }
  ScoreOptions& o = options_;
  app_->add_option("--symbol", o.symbol, "The symbol JSON file (PREFIX-symbol.json)")->required();
  app_->add_option("--params", o.params, "The parameters (PREFIX-EPOCH.params; arg:/aux: or plain names)")->required();
  app_->add_option("--data", o.data, "fashion-mnist, idx:DIR, csv:DIR or rec:DIR")->capture_default_str();
  app_->add_option("--split", o.split, "test or train: which files of --data")
      ->check(CLI::IsMember({"test", "train"}))
      ->capture_default_str();
  app_->add_option("--data-shape", o.data_shape, "rec: data: the images' C,H,W")->capture_default_str();
  app_->add_option("--batch-size", o.batch_size, "Examples per forward pass")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app_->add_option("--images", o.images, "Only the first N examples (0: all)")->check(CLI::NonNegativeNumber);
  app_->add_option("--devices", o.devices, "Devices, e.g. cpu:0,cpu:1 or gpu:0 (each batch is split over them)")
      ->capture_default_str();
  if (predict) {
    app_->add_option("--output", o.output, "Write the predictions to this file (default: stdout)");
  } else {
    app_->add_option("--min-accuracy", o.min_accuracy, "Exit 1 when the accuracy is below this")
        ->check(CLI::Range(0.0, 1.0));
  }
}

bool ScoreCommand::chosen() const { return app_->parsed(); }

int ScoreCommand::Run() {
  try {
    return predict_ ? RunPredict(options_) : RunScore(options_);
  } catch (const std::exception& e) {
    throw Error(ForCommandLine(e.what()));  // library fixes said in command-line terms
  }
}

int RunScore(const ScoreOptions& o) {
  Loaded l = Load(o, "score");
  auto acc = EvalMetric::Create("acc");
  auto ce = EvalMetric::Create("ce");
  const bool softmax = l.net.head_op == "SoftmaxOutput";
  l.data->BeforeFirst();
  while (l.data->Next()) {
    const DataBatch& batch = l.data->Value();
    l.mod->Forward(batch, false);
    l.mod->UpdateMetric(acc.get(), batch);
    if (softmax) l.mod->UpdateMetric(ce.get(), batch);
  }
  std::printf("Validation-accuracy=%.4f\n", acc->Get());
  if (softmax) std::printf("Validation-cross-entropy=%.4f\n", ce->Get());
  std::printf("examples %lld\n", static_cast<long long>(acc->num_samples()));
  std::fflush(stdout);
  if (acc->Get() < o.min_accuracy) {
    std::printf("below --min-accuracy %.4f\n", o.min_accuracy);
    return 1;
  }
  return 0;
}

int RunPredict(const ScoreOptions& o) {
  Loaded l = Load(o, "predict");
  std::ofstream file;
  if (!o.output.empty()) {
    file.open(o.output);
    if (!file) throw Error("cannot write " + o.output);
  }
  std::FILE* summary = o.output.empty() ? stderr : stdout;
  std::string text = "# index\tpredicted\tprobability\tlabel\n";
  auto flush = [&] {
    if (o.output.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      file << text;
    }
    text.clear();
  };
  std::int64_t n = 0, correct = 0;
  std::vector<std::int64_t> per_class;
  l.data->BeforeFirst();
  while (l.data->Next()) {
    const DataBatch& batch = l.data->Value();
    l.mod->Forward(batch, false);
    const NDArray& out = l.mod->GetOutputs().at(0);
    const std::int64_t rows = out.shape()[0];
    const std::int64_t width = rows > 0 ? out.shape().Size() / rows : 0;
    if (width < 1) throw Error("the symbol's output has shape " + out.shape().ToString() + "; no class scores");
    const std::vector<float> p = out.ToVector<float>();
    const std::vector<float> y = batch.label.empty() ? std::vector<float>() : batch.label[0].ToVector<float>();
    per_class.resize(static_cast<std::size_t>(std::max<std::int64_t>(static_cast<std::int64_t>(per_class.size()), width)));
    for (std::int64_t r = 0; r < rows - batch.num_batch_padd; ++r, ++n) {
      const float* row = p.data() + r * width;
      const std::int64_t best = std::max_element(row, row + width) - row;
      ++per_class[static_cast<std::size_t>(best)];
      char line[128];
      if (static_cast<std::size_t>(r) < y.size()) {
        const auto label = static_cast<std::int64_t>(y[static_cast<std::size_t>(r)]);
        correct += label == best;
        std::snprintf(line, sizeof(line), "%lld\t%lld\t%.6f\t%lld\n", static_cast<long long>(n),
                      static_cast<long long>(best), row[best], static_cast<long long>(label));
      } else {
        std::snprintf(line, sizeof(line), "%lld\t%lld\t%.6f\t\n", static_cast<long long>(n),
                      static_cast<long long>(best), row[best]);
      }
      text += line;
    }
    flush();
  }
  if (file.is_open()) {
    file.close();
    if (!file) throw Error("writing " + o.output + " failed");
  }
  std::fprintf(summary, "predicted %lld examples", static_cast<long long>(n));
  if (!o.output.empty()) std::fprintf(summary, " into %s", o.output.c_str());
  std::fprintf(summary, "; accuracy against the labels %.4f\n", n > 0 ? static_cast<double>(correct) / n : 0.0);
  std::fprintf(summary, "predictions per class:");
  for (std::size_t c = 0; c < per_class.size(); ++c) std::fprintf(summary, " %zu:%lld", c, static_cast<long long>(per_class[c]));
  std::fprintf(summary, "\n");
  std::fflush(summary);
  return 0;
}

}  // namespace troupe::tools
