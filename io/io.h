// Data iterators (MXNet's IO module): read standard data formats into batches of NDArrays, in the
// background, and split a data set across the workers of a distributed job.
//
//   auto it = troupe::CreateDataIter("MNISTIter", {{"image", ".../train-images-idx3-ubyte.gz"},
//                                                 {"label", ".../train-labels-idx1-ubyte.gz"},
//                                                 {"batch_size", "128"}, {"shuffle", "True"}});
//   for (it->BeforeFirst(); it->Next();) {
//     const troupe::DataBatch& b = it->Value();   // b.data[0]: (128, 1, 28, 28), b.label[0]: (128,)
//   }
//
// Iterators are created by MXNet's names with MXNet's keyword arguments (the same typed parameters as
// operators, op/param.h: an unknown key or a bad value is a troupe::Error naming the iterator and the
// parameter). Every registered iterator is wrapped in a prefetcher (parameter `prefetch_buffer`, default 4
// batches; 0 turns it off) that prepares batches on a background thread.
//
// Batches: every Next() makes fresh NDArrays (from the storage pool) on the CPU, so a batch stays valid as
// long as the caller holds its arrays; the last batch of an epoch is padded (num_batch_padd says how many
// samples at its end are repeats) unless the iterator's parameters say otherwise.
//
// Errors: bad input (a missing file, a wrong magic, a truncated file, a malformed row) is a troupe::Error
// naming the file and the line, record or byte offset. With prefetching, an error raised in the background
// is thrown by the next Next() or BeforeFirst() — never lost, never a hang.
//
// Thread-safety: one iterator is used by one thread at a time. The registry is filled during static
// initialisation and read-only afterwards.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/ndarray.h"
#include "op/param.h"

namespace troupe {

// One batch, as MXNet's DataBatch.
struct DataBatch {
  std::vector<NDArray> data;   // one per data input; dimension 0 is the batch
  std::vector<NDArray> label;  // one per label input
  int num_batch_padd = 0;      // samples at the end of this batch that are padding (repeats), 0 usually
  std::vector<std::uint64_t> index;  // the data set index of every sample in the batch
};

class DataIter {
 public:
  virtual ~DataIter() = default;
  // Rewinds to the first batch of a new epoch. Whether the order changes per epoch is the iterator's
  // (NDArrayIter reshuffles here; MNISTIter, as MXNet's, shuffles once when it is created).
  virtual void BeforeFirst() = 0;
  // Advances to the next batch; false at the end of the epoch.
  virtual bool Next() = 0;
  // The current batch (valid after Next() returned true).
  virtual const DataBatch& Value() const = 0;
  // Shapes of data[i] / label[i] in every batch (MXNet's provide_data / provide_label).
  virtual std::vector<TShape> DataShapes() const = 0;
  virtual std::vector<TShape> LabelShapes() const = 0;
};

// Splits `n` samples into `num_parts` contiguous parts as evenly as possible (the first n % num_parts
// parts get one more); returns [begin, end) of part `part_index`. Throws troupe::Error naming `who` for
// num_parts < 1 or part_index outside [0, num_parts).
std::pair<std::uint64_t, std::uint64_t> ShardRange(std::uint64_t n, int num_parts, int part_index,
                                                   const std::string& who);

// Runs `base` on a background thread, keeping up to `capacity` batches ready. Errors from the background
// surface at the next Next()/BeforeFirst().
std::unique_ptr<DataIter> MakePrefetcher(std::unique_ptr<DataIter> base, int capacity);

// An iterator over arrays in memory (MXNet's NDArrayIter): batches along dimension 0; shuffle; last batch
// "pad" (fill from the start, num_batch_padd set), "discard" or "roll_over" (the remainder starts the next
// epoch).
std::unique_ptr<DataIter> MakeNDArrayIter(std::vector<NDArray> data, std::vector<NDArray> label, int batch_size,
                                          bool shuffle = false, const std::string& last_batch_handle = "pad",
                                          std::uint64_t seed = 0);

// ------------------------------------------------------------------------------------------ registry
struct DataIterInfo {
  std::string name;
  std::string description;  // one line
  std::vector<ParamDoc> params;
  std::function<std::unique_ptr<DataIter>(const Kwargs&)> factory;  // parses kwargs itself

  DataIterInfo& describe(const std::string& text) {
    description = text;
    return *this;
  }
  DataIterInfo& add_arguments(const std::vector<ParamDoc>& docs) {
    params.insert(params.end(), docs.begin(), docs.end());
    return *this;
  }
};

class DataIterRegistry {
 public:
  static DataIterRegistry& Get();
  // A second registration of a name throws troupe::Error. The reference stays valid.
  DataIterInfo& Register(const std::string& name, std::function<std::unique_ptr<DataIter>(const Kwargs&)> factory);
  const DataIterInfo* Find(const std::string& name) const;
  std::vector<std::string> ListNames() const;  // sorted

  struct Impl;

 private:
  DataIterRegistry();
  std::unique_ptr<Impl> impl_;
};

// Where Debian's dataset-fashion-mnist puts Fashion-MNIST ({train,t10k}-{images-idx3,labels-idx1}-ubyte.gz).
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Creates a registered iterator ("MNISTIter", "CSVIter", ...) from MXNet's keyword arguments, wrapped in a
// prefetcher unless prefetch_buffer=0. Throws troupe::Error for an unknown name or a bad argument.
std::unique_ptr<DataIter> CreateDataIter(const std::string& name, const Kwargs& kwargs);

#define TROUPE_IO_CONCAT_(a, b) a##b
#define TROUPE_IO_CONCAT(a, b) TROUPE_IO_CONCAT_(a, b)
// TROUPE_REGISTER_DATA_ITER(MNISTIter, factory).describe("...").add_arguments(MNISTParam::Docs());
#define TROUPE_REGISTER_DATA_ITER(Name, factory)                                                         \
  [[maybe_unused]] static ::troupe::DataIterInfo& TROUPE_IO_CONCAT(troupe_data_iter_registration_,      \
                                                                   __COUNTER__) =                      \
      ::troupe::DataIterRegistry::Get().Register(#Name, factory)

}  // namespace troupe
