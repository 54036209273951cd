// What the training benchmarks (bench/train, bench/kvstore) share: Fashion-MNIST batches preloaded into
// memory, and the accuracy of a Module over them with a check that its outputs are probabilities.
#pragma once

#include <string>
#include <vector>

#include "io/io.h"
#include "train/train.h"

namespace troupe::bench {

// The first `count` batches of the Fashion-MNIST t10k files in `dir` (MNISTIter, batch `batch`, images
// (batch, 1, 28, 28)), copied out of the iterator so that reading is not timed. Throws troupe::Error
// ("<who>: ...") when the files hold fewer batches.
std::vector<DataBatch> LoadMnistBatches(const std::string& dir, int batch, int count, const std::string& who);

// The module's accuracy over the batches (Forward(is_train) on each: false uses BatchNorm's moving statistics,
// true each batch's own). Adds to *problems (at most a few) when an output is not a probability row
// (non-finite, or not summing to 1) or has the wrong number of rows.
double BatchesAccuracy(Module* module, const std::vector<DataBatch>& batches, std::vector<std::string>* problems,
                       bool is_train = false);

}  // namespace troupe::bench
