// MakeNDArrayIter (io/io.h): MXNet 1.9's NDArrayIter over arrays in memory.
//
// The arrays are read to host memory once, at construction (so later writes to them do not change the
// batches); every batch is a fresh CPU NDArray of the source dtype. The sample order is a permutation
// (std::mt19937_64 seeded with `seed`, drawn at construction and again at every BeforeFirst() when
// shuffling). The last batch of an epoch, as MXNet does:
//   "pad"       filled with samples from the start of the (current) order; num_batch_padd counts them.
//   "discard"   the incomplete last batch is dropped.
//   "roll_over" the incomplete last batch is not returned; its samples open the first batch of the next
//               epoch, which is then completed from the new order (and the epoch continues after those).
//               MXNet reports the carried count as that batch's `pad`; here num_batch_padd stays 0,
//               since none of its samples is a repeat. A BeforeFirst() in the middle of an epoch forgets
//               any carried samples, as MXNet's reset does.
// index holds the data set row of every sample.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "base/error.h"
#include "io/io.h"

namespace troupe {
namespace {

struct HostArray {
  TShape sample_shape;  // the shape without dimension 0
  DType dtype = DType::kFloat32;
  std::size_t row_bytes = 0;
  std::vector<unsigned char> bytes;
};

class NDArrayIter : public DataIter {
 public:
  NDArrayIter(std::vector<NDArray> data, std::vector<NDArray> label, int batch_size, bool shuffle,
              const std::string& last_batch_handle, std::uint64_t seed)
      : batch_size_(batch_size), shuffle_(shuffle), handle_(last_batch_handle), rng_(seed) {
    if (handle_ != "pad" && handle_ != "discard" && handle_ != "roll_over") {
      throw Error("NDArrayIter: last_batch_handle must be 'pad', 'discard' or 'roll_over', got '" + handle_ + "'");
    }
    if (batch_size < 1) throw Error("NDArrayIter: batch_size must be >= 1, got " + std::to_string(batch_size));
    if (data.empty()) throw Error("NDArrayIter: no data arrays given (at least one is needed)");
    std::int64_t n = -1;
    auto load = [&](const std::vector<NDArray>& arrays, const char* what, std::vector<HostArray>* out) {
      for (std::size_t i = 0; i < arrays.size(); ++i) {
        const NDArray& a = arrays[i];
        const std::string name = std::string(what) + "[" + std::to_string(i) + "]";
        if (a.is_none() || a.shape().ndim() < 1) {
          throw Error("NDArrayIter: " + name + " has no first dimension (shape " +
                      (a.is_none() ? std::string("none") : a.shape().ToString()) +
                      "); batches are taken along dimension 0");
        }
        if (n < 0) {
          n = a.shape()[0];
        } else if (a.shape()[0] != n) {
          throw Error("NDArrayIter: " + name + " has " + std::to_string(a.shape()[0]) +
                      " samples along dimension 0 but data[0] has " + std::to_string(n) +
                      "; every data and label array needs the same number");
        }
        HostArray h;
        std::vector<std::int64_t> dims(a.shape().begin() + 1, a.shape().end());
        h.sample_shape = TShape(dims);
        h.dtype = a.dtype();
        h.bytes.resize(a.Bytes());
        h.row_bytes = a.shape()[0] == 0 ? 0 : a.Bytes() / static_cast<std::size_t>(a.shape()[0]);
        if (!h.bytes.empty()) a.SyncCopyToCPU(h.bytes.data(), h.bytes.size());
        out->push_back(std::move(h));
      }
    };
    load(data, "data", &data_);
    load(label, "label", &label_);
    if (n < batch_size) {
      throw Error("NDArrayIter: batch_size " + std::to_string(batch_size) + " is larger than the " + std::to_string(n) +
                  " samples given; use a smaller batch_size");
    }
    num_data_ = n;
    // "discard" never reaches the incomplete batch: the epoch ends at the last whole one.
    if (handle_ == "discard") num_data_ = n - n % batch_size;
    order_.resize(static_cast<std::size_t>(n));
    std::iota(order_.begin(), order_.end(), std::uint64_t{0});
    if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
    cursor_ = -batch_size_;
  }

  void BeforeFirst() override {
    if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
    epoch_done_ = false;
    if (handle_ == "roll_over" && !carried_.empty() && reached_end_) {
      // The next Next() moves the cursor to -carried: the first batch is the carried samples and then
      // order_[0, batch - carried); the epoch goes on from there.
      cursor_ = -static_cast<std::int64_t>(carried_.size()) - batch_size_;
    } else {
      carried_.clear();
      cursor_ = -batch_size_;
    }
    reached_end_ = false;
  }

  bool Next() override {
    if (epoch_done_) return false;
    cursor_ += batch_size_;
    if (cursor_ >= num_data_) {
      epoch_done_ = reached_end_ = true;
      return false;
    }
    std::vector<std::uint64_t> rows;
    rows.reserve(static_cast<std::size_t>(batch_size_));
    int pad = 0;
    if (cursor_ < 0) {  // roll_over: the first batch after a carried remainder
      rows = std::move(carried_);
      carried_.clear();
      for (std::int64_t i = 0; i < cursor_ + batch_size_; ++i) rows.push_back(order_[i]);
    } else {
      const std::int64_t end = std::min(cursor_ + batch_size_, num_data_);
      for (std::int64_t i = cursor_; i < end; ++i) rows.push_back(order_[i]);
      if (end - cursor_ < batch_size_) {
        if (handle_ == "roll_over") {
          carried_ = std::move(rows);
          epoch_done_ = reached_end_ = true;
          return false;
        }
        // "pad" ("discard" never gets here): wrap around to the start of the order.
        pad = static_cast<int>(batch_size_ - (end - cursor_));
        for (int i = 0; i < pad; ++i) rows.push_back(order_[static_cast<std::size_t>(i)]);
      }
    }
    batch_.data = Gather(data_, rows);
    batch_.label = Gather(label_, rows);
    batch_.num_batch_padd = pad;
    batch_.index = std::move(rows);
    return true;
  }

  const DataBatch& Value() const override { return batch_; }
  std::vector<TShape> DataShapes() const override { return Shapes(data_); }
  std::vector<TShape> LabelShapes() const override { return Shapes(label_); }

 private:
  TShape BatchShape(const HostArray& h) const {
    std::vector<std::int64_t> dims{batch_size_};
    dims.insert(dims.end(), h.sample_shape.begin(), h.sample_shape.end());
    return TShape(dims);
  }

  std::vector<TShape> Shapes(const std::vector<HostArray>& arrays) const {
    std::vector<TShape> out;
    for (const auto& h : arrays) out.push_back(BatchShape(h));
    return out;
  }

  std::vector<NDArray> Gather(const std::vector<HostArray>& arrays, const std::vector<std::uint64_t>& rows) const {
    std::vector<NDArray> out;
    for (const auto& h : arrays) {
      std::vector<unsigned char> buf(h.row_bytes * rows.size());
      for (std::size_t r = 0; r < rows.size(); ++r) {
        if (h.row_bytes != 0)
          std::memcpy(buf.data() + r * h.row_bytes, h.bytes.data() + rows[r] * h.row_bytes, h.row_bytes);
      }
      NDArray a(BatchShape(h), Context::CPU(), h.dtype);
      if (!buf.empty()) a.SyncCopyFromCPU(buf.data(), buf.size());
      out.push_back(std::move(a));
    }
    return out;
  }

  const std::int64_t batch_size_;
  const bool shuffle_;
  const std::string handle_;
  std::mt19937_64 rng_;
  std::vector<HostArray> data_, label_;
  std::int64_t num_data_ = 0;           // samples an epoch walks over (trimmed for "discard")
  std::vector<std::uint64_t> order_;    // the sample order of this epoch
  std::int64_t cursor_ = 0;             // position in order_ of the current batch's start
  std::vector<std::uint64_t> carried_;  // roll_over: samples of the incomplete last batch
  bool epoch_done_ = false;             // Next() returned false; stays false until BeforeFirst()
  bool reached_end_ = false;            // this epoch was read to its end (roll_over carries only then)
  DataBatch batch_;
};

}  // namespace

std::unique_ptr<DataIter> MakeNDArrayIter(std::vector<NDArray> data, std::vector<NDArray> label, int batch_size,
                                          bool shuffle, const std::string& last_batch_handle, std::uint64_t seed) {
  return std::make_unique<NDArrayIter>(std::move(data), std::move(label), batch_size, shuffle, last_batch_handle, seed);
}

}  // namespace troupe
