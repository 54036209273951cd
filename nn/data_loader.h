// Data sets and batches for imperative training (Gluon's gluon.data): a Dataset gives samples by index, a
// DataLoader stacks them into batches, in order or shuffled, assembled ahead by background workers.
//
//   auto train = nn::ArrayDataset::FromIter(CreateDataIter("MNISTIter", {...}).get());   // (image, label)
//   nn::DataLoader loader(train, 64, /*shuffle=*/true, "keep", /*num_workers=*/2);
//   std::vector<NDArray> batch;                        // batch[0]: (64, 1, 28, 28), batch[1]: (64,)
//   for (loader.Reset(); loader.Next(&batch);) { ... }
//
// Thread-safety: a DataLoader is driven by one thread (its workers are its own); a Dataset's Get is called
// from several workers at once and must be thread-safe (ArrayDataset's is).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/io.h"
#include "tensor/ndarray.h"

namespace troupe::nn {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::size_t size() const = 0;
  // Sample i (i < size()): one CPU array per field (data, label, ...), each field of one shape throughout.
  virtual std::vector<NDArray> Get(std::size_t i) const = 0;
};

// Samples along the first axis of arrays (Gluon's ArrayDataset): sample i is field[i] of every field.
class ArrayDataset : public Dataset {
 public:
  // Throws troupe::Error for no field, an array of no dimension, or fields of different lengths.
  explicit ArrayDataset(std::vector<NDArray> fields);
  // One pass of an iterator (rewound first), padding left out: fields data[0..], then label[0..], on the CPU.
  static std::shared_ptr<ArrayDataset> FromIter(DataIter* iter);
  std::size_t size() const override { return size_; }
  std::vector<NDArray> Get(std::size_t i) const override;
  const std::vector<NDArray>& fields() const { return fields_; }

 private:
  std::vector<NDArray> fields_;
  std::size_t size_ = 0;
};

class DataLoader {
 public:
  // batch_size >= 1. shuffle: a new order every epoch (from seed, reproducible). last_batch: "keep" (a
  // smaller last batch), "discard" (dropped) or "rollover" (its samples start the next epoch). num_workers:
  // background threads assembling batches (0: on the calling thread, in Next); prefetch: batches assembled
  // ahead (0: 2 * num_workers). Throws troupe::Error for a bad argument.
  DataLoader(std::shared_ptr<const Dataset> dataset, int batch_size, bool shuffle = false,
             const std::string& last_batch = "keep", int num_workers = 0, std::uint64_t seed = 0, int prefetch = 0);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch (the first one starts by itself).
  void Reset();
  // The next batch: one array per field, samples stacked along a new first axis, on the CPU. false at the end
  // of the epoch. An error of Get (in a worker too) is thrown here as troupe::Error.
  bool Next(std::vector<NDArray>* batch);
  // Batches in the current epoch.
  std::size_t num_batches() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::nn
