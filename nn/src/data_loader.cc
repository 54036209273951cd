// ArrayDataset and DataLoader (nn/data_loader.h).
#include "nn/data_loader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <utility>

#include "base/error.h"

namespace troupe::nn {

namespace {

TShape Prepend(std::int64_t n, const TShape& s) {
  std::vector<std::int64_t> d{n};
  for (int i = 0; i < s.ndim(); ++i) d.push_back(s[i]);
  return TShape(d);
}

std::size_t Bytes(const TShape& s, DType t) { return static_cast<std::size_t>(s.Size()) * DTypeSize(t); }

}  // namespace

// ------------------------------------------------------------------------------------------ ArrayDataset

ArrayDataset::ArrayDataset(std::vector<NDArray> fields) : fields_(std::move(fields)) {
  if (fields_.empty()) throw Error("ArrayDataset: no field given");
  for (std::size_t f = 0; f < fields_.size(); ++f) {
    if (fields_[f].is_none() || fields_[f].shape().ndim() < 1) {
      throw Error("ArrayDataset: field " + std::to_string(f) + " is empty or has no sample axis");
    }
    const auto n = static_cast<std::size_t>(fields_[f].shape()[0]);
    if (f == 0) size_ = n;
    if (n != size_) {
      throw Error("ArrayDataset: field " + std::to_string(f) + " has " + std::to_string(n) + " samples, field 0 has " +
                  std::to_string(size_));
    }
  }
}

std::shared_ptr<ArrayDataset> ArrayDataset::FromIter(DataIter* iter) {
  if (iter == nullptr) throw Error("ArrayDataset::FromIter: no iterator given");
  std::vector<std::vector<char>> bytes;
  std::vector<TShape> sample;
  std::vector<DType> types;
  std::int64_t total = 0;
  for (iter->BeforeFirst(); iter->Next();) {
    const DataBatch& b = iter->Value();
    std::vector<NDArray> arrays = b.data;
    arrays.insert(arrays.end(), b.label.begin(), b.label.end());
    if (bytes.empty()) {
      bytes.resize(arrays.size());
      for (const NDArray& a : arrays) {
        std::vector<std::int64_t> d;
        for (int i = 1; i < a.shape().ndim(); ++i) d.push_back(a.shape()[i]);
        sample.emplace_back(d);
        types.push_back(a.dtype());
      }
    }
    const std::int64_t n = arrays[0].shape()[0] - b.num_batch_padd;
    for (std::size_t f = 0; f < arrays.size(); ++f) {
      const NDArray part = arrays[f].Slice(0, n);
      const std::size_t at = bytes[f].size();
      bytes[f].resize(at + Bytes(part.shape(), part.dtype()));
      part.SyncCopyToCPU(bytes[f].data() + at, bytes[f].size() - at);
    }
    total += n;
  }
  if (bytes.empty()) throw Error("ArrayDataset::FromIter: the iterator gave no batch");
  std::vector<NDArray> fields;
  for (std::size_t f = 0; f < bytes.size(); ++f) {
    NDArray a(Prepend(total, sample[f]), Context::CPU(), types[f]);
    a.SyncCopyFromCPU(bytes[f].data(), bytes[f].size());
    fields.push_back(a);
  }
  return std::make_shared<ArrayDataset>(std::move(fields));
}

std::vector<NDArray> ArrayDataset::Get(std::size_t i) const {
  if (i >= size_) throw Error("ArrayDataset: sample " + std::to_string(i) + " of " + std::to_string(size_));
  std::vector<NDArray> s;
  for (const NDArray& f : fields_) s.push_back(f.At(static_cast<std::int64_t>(i)));
  return s;
}

// ------------------------------------------------------------------------------------------ DataLoader

struct DataLoader::Impl {
  std::shared_ptr<const Dataset> ds;
  std::size_t batch = 0;
  bool shuffle = false;
  std::string last;
  int num_workers = 0;
  std::size_t prefetch = 0;
  std::mt19937_64 rng;
  std::vector<std::size_t> carry;               // rollover: the samples that start the next epoch
  std::vector<std::vector<std::size_t>> batches;  // the current epoch's
  std::size_t next = 0;                          // the batch Next returns next
  bool started = false;

  struct Result {
    std::vector<NDArray> arrays;
    std::string error;
  };
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::size_t assigned = 0;  // the next batch a worker takes
  bool stop = false;
  std::map<std::size_t, Result> done;
  std::vector<std::thread> threads;

  Result Assemble(const std::vector<std::size_t>& idx) const {
    Result r;
    try {
      std::vector<std::vector<char>> buf;
      std::vector<TShape> shapes;
      std::vector<DType> types;
      for (std::size_t k = 0; k < idx.size(); ++k) {
        const std::vector<NDArray> s = ds->Get(idx[k]);
        if (k == 0) {
          for (const NDArray& a : s) {
            shapes.push_back(a.shape());
            types.push_back(a.dtype());
            buf.emplace_back(Bytes(a.shape(), a.dtype()) * idx.size());
          }
        }
        if (s.size() != shapes.size()) {
          throw Error("DataLoader: sample " + std::to_string(idx[k]) + " has " + std::to_string(s.size()) +
                      " fields, sample " + std::to_string(idx[0]) + " " + std::to_string(shapes.size()));
        }
        for (std::size_t f = 0; f < s.size(); ++f) {
          if (s[f].shape() != shapes[f] || s[f].dtype() != types[f]) {
            throw Error("DataLoader: field " + std::to_string(f) + " of sample " + std::to_string(idx[k]) + " is " +
                        s[f].shape().ToString() + " " + DTypeName(s[f].dtype()) + ", of sample " +
                        std::to_string(idx[0]) + " " + shapes[f].ToString() + " " + DTypeName(types[f]) +
                        "; samples of one batch must have one shape");
          }
          const std::size_t n = Bytes(shapes[f], types[f]);
          s[f].SyncCopyToCPU(buf[f].data() + k * n, n);
        }
      }
      for (std::size_t f = 0; f < buf.size(); ++f) {
        NDArray a(Prepend(static_cast<std::int64_t>(idx.size()), shapes[f]), Context::CPU(), types[f]);
        a.SyncCopyFromCPU(buf[f].data(), buf[f].size());
        r.arrays.push_back(a);
      }
    } catch (const std::exception& e) {
      r.arrays.clear();
      r.error = e.what();
    }
    return r;
  }

  void Worker() {
    for (;;) {
      std::size_t b = 0;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] { return stop || assigned >= batches.size() || assigned < next + prefetch; });
        if (stop || assigned >= batches.size()) return;
        b = assigned++;
      }
      Result r = Assemble(batches[b]);
      std::lock_guard<std::mutex> lock(mu);
      done[b] = std::move(r);
      done_cv.notify_all();
    }
  }

  void StopWorkers() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    work_cv.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
    done.clear();
    stop = false;
  }

  void NewEpoch() {
    StopWorkers();
    std::vector<std::size_t> order(ds->size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    if (shuffle) std::shuffle(order.begin(), order.end(), rng);
    order.insert(order.begin(), carry.begin(), carry.end());
    carry.clear();
    batches.clear();
    for (std::size_t b = 0; b < order.size(); b += batch) {
      std::vector<std::size_t> idx(order.begin() + static_cast<std::ptrdiff_t>(b),
                                   order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), b + batch)));
      if (idx.size() < batch && last == "discard") break;
      if (idx.size() < batch && last == "rollover") {
        carry = std::move(idx);
        break;
      }
      batches.push_back(std::move(idx));
    }
    next = 0;
    assigned = 0;
    started = true;
    for (int w = 0; w < num_workers; ++w) threads.emplace_back([this] { Worker(); });
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, int batch_size, bool shuffle,
                       const std::string& last_batch, int num_workers, std::uint64_t seed, int prefetch)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (!dataset) throw Error("DataLoader: no dataset given");
  if (batch_size < 1) throw Error("DataLoader: batch_size must be at least 1, got " + std::to_string(batch_size));
  if (last_batch != "keep" && last_batch != "discard" && last_batch != "rollover") {
    throw Error("DataLoader: last_batch must be \"keep\", \"discard\" or \"rollover\", got \"" + last_batch + "\"");
  }
  if (num_workers < 0 || prefetch < 0) throw Error("DataLoader: num_workers and prefetch must not be negative");
  m.ds = std::move(dataset);
  m.batch = static_cast<std::size_t>(batch_size);
  m.shuffle = shuffle;
  m.last = last_batch;
  m.num_workers = num_workers;
  m.prefetch = static_cast<std::size_t>(prefetch > 0 ? prefetch : std::max(1, 2 * num_workers));
  m.rng.seed(seed);
}

DataLoader::~DataLoader() { impl_->StopWorkers(); }

void DataLoader::Reset() { impl_->NewEpoch(); }

std::size_t DataLoader::num_batches() const { return impl_->batches.size(); }

bool DataLoader::Next(std::vector<NDArray>* batch) {
  Impl& m = *impl_;
  if (batch == nullptr) throw Error("DataLoader::Next: no output given");
  if (!m.started) m.NewEpoch();
  if (m.next >= m.batches.size()) return false;
  Impl::Result r;
  if (m.num_workers == 0) {
    r = m.Assemble(m.batches[m.next]);
  } else {
    std::unique_lock<std::mutex> lock(m.mu);
    m.done_cv.wait(lock, [&] { return m.done.count(m.next) > 0; });
    r = std::move(m.done[m.next]);
    m.done.erase(m.next);
  }
  {
    std::lock_guard<std::mutex> lock(m.mu);
    ++m.next;
  }
  m.work_cv.notify_all();
  if (!r.error.empty()) throw Error(r.error);
  *batch = std::move(r.arrays);
  return true;
}

}  // namespace troupe::nn
