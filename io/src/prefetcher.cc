// MakePrefetcher (io/io.h): runs a base iterator on a background thread, keeping up to `capacity` batches
// ready in a bounded queue.
//
// One producer thread per epoch. It calls base->Next(), copies Value() (the NDArrays are handles; every
// iterator makes fresh arrays per batch, so sharing them is safe) and pushes it, waiting on a condition
// variable while the queue is full. The end of the epoch or an exception ends the thread; the exception is
// kept and thrown by the consumer's next Next()/BeforeFirst() after the batches queued before it, so it
// is never lost. BeforeFirst() and the destructor set stop_ and wake the producer (it may be waiting on a
// full queue); a producer inside base->Next() finishes that call first, so stopping waits at most one
// batch. The first producer starts at the first Next() or BeforeFirst(), not in the constructor, so the
// base sees exactly the calls it would see unwrapped (an iterator whose next epoch depends on how the last
// one ended, such as roll_over or round_batch, gives the same batches with and without prefetching when
// epochs are read to the end). The consumer thread calls the base only while no producer runs
// (BeforeFirst), so the base is never used by two threads at once.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "base/address_space.h"
#include "base/error.h"
#include "engine/profiler.h"
#include "io/io.h"

namespace troupe {
namespace {

class Prefetcher : public DataIter {
 public:
  Prefetcher(std::unique_ptr<DataIter> base, int capacity)
      : base_(std::move(base)), capacity_(static_cast<std::size_t>(capacity)) {
    // Shapes are fixed for the iterator's life; reading them now keeps DataShapes() from touching the
    // base while the producer uses it.
    data_shapes_ = base_->DataShapes();
    label_shapes_ = base_->LabelShapes();
  }

  ~Prefetcher() override { Stop(); }

  void BeforeFirst() override {
    Stop();
    std::exception_ptr error;
    {
      std::lock_guard lock(mu_);
      queue_.clear();
      error = std::exchange(error_, nullptr);
    }
    // A failure of the epoch being abandoned is still reported (never lost); the next BeforeFirst()
    // starts afresh. Until then Next() returns false: the producer is stopped and done_ is set.
    if (error) std::rethrow_exception(error);
    base_->BeforeFirst();
    Start();
  }

  bool Next() override {
    if (!started_) Start();
    std::unique_lock lock(mu_);
    if (queue_.empty() && !done_) {
      const ProfileScope span("io", "DataIter wait");  // the consumer waits for the background thread
      not_empty_.wait(lock, [this] { return !queue_.empty() || done_; });
    }
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      not_full_.notify_one();
      return true;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return false;
  }

  const DataBatch& Value() const override { return current_; }
  std::vector<TShape> DataShapes() const override { return data_shapes_; }
  std::vector<TShape> LabelShapes() const override { return label_shapes_; }

 private:
  void Start() {
    {
      std::lock_guard lock(mu_);
      stop_ = false;
      done_ = false;
    }
    try {
      producer_ = std::thread([this] { Produce(); });
    } catch (const std::system_error& e) {
      // No thread (EAGAIN: the thread limit, or no address space left for its stack): an error, not a crash.
      const std::string note = AddressSpaceNote();
      throw Error(std::string("data prefetcher: cannot start its thread (") + e.what() + ")" +
                  (note.empty() ? "" : ": " + note));
    }
    started_ = true;
  }

  // Stops and joins the producer; afterwards done_ is true, so Next() cannot wait forever.
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    not_full_.notify_all();
    if (producer_.joinable()) producer_.join();
    std::lock_guard lock(mu_);
    done_ = true;
  }

  void Produce() {
    try {
      while (true) {
        {
          std::lock_guard lock(mu_);
          if (stop_) break;
        }
        if (!base_->Next()) break;
        DataBatch batch = base_->Value();
        std::unique_lock lock(mu_);
        not_full_.wait(lock, [this] { return stop_ || queue_.size() < capacity_; });
        if (stop_) break;
        queue_.push_back(std::move(batch));
        not_empty_.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard lock(mu_);
    done_ = true;
    not_empty_.notify_all();
  }

  std::unique_ptr<DataIter> base_;
  const std::size_t capacity_;
  std::vector<TShape> data_shapes_, label_shapes_;

  std::mutex mu_;
  std::condition_variable not_empty_;  // the consumer waits for a batch or the end
  std::condition_variable not_full_;   // the producer waits for room or stop_
  std::deque<DataBatch> queue_;        // guarded by mu_
  bool stop_ = false;                  // guarded by mu_: the producer must end
  bool done_ = false;                  // guarded by mu_: no more batches this epoch
  std::exception_ptr error_;           // guarded by mu_: the producer's failure, not yet thrown
  std::thread producer_;

  DataBatch current_;     // consumer-only
  bool started_ = false;  // consumer-only: a producer has been started (see the comment at the top)
};

}  // namespace

std::unique_ptr<DataIter> MakePrefetcher(std::unique_ptr<DataIter> base, int capacity) {
  if (base == nullptr) throw Error("MakePrefetcher: base iterator is null");
  if (capacity < 1) {
    throw Error("MakePrefetcher: capacity must be >= 1 batch, got " + std::to_string(capacity) +
                " (to turn prefetching off, use the base iterator directly)");
  }
  return std::make_unique<Prefetcher>(std::move(base), capacity);
}

}  // namespace troupe
