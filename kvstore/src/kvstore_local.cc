// KVStore types "local" and "device": parameter synchronisation across the devices of one machine
// (MXNet 1.9's KVStoreLocal with CommCPU / CommDevice, src/kvstore/kvstore_local.h and comm.h).
//
// Per key the store keeps the stored value, a merge buffer on the same device and staging copies for
// values that live off the host. A push of a key is: (copies of off-host values to the reduction device),
// one engine function summing every value into the merge buffer, then the updater (which pushes its own
// work) or a swap of the merge buffer and the stored value. A pull is one CopyFromTo per output. Nothing
// here waits: the engine orders everything through the arrays' variables.
//
// With 2-bit gradient compression on ("device" only; MXNet's CommDevice::ReduceCompressed) each value of
// a push is quantized on its own device against a residual kept per (key, device, k-th value of that
// device in the push), the compressed words are copied to the reduction device, dequantized there, and
// the decoded values are summed into the merge buffer. Residuals are zeros on a slot's first push and are
// kept when compression is turned off or its threshold changes (as MXNet keeps its buffers).
//
// Every call checks all its arguments before it pushes anything, so an error leaves the store as it was.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "kvstore/gradient_compression.h"
#include "kvstore/internal/store_checks.h"
#include "kvstore/kvstore.h"

namespace troupe {
namespace {

using internal::SumOnHost;

bool OnHost(Context c) { return c.dev_type == DeviceType::kCPU || c.dev_type == DeviceType::kCPUPinned; }

class KVStoreLocal final : public KVStore {
 public:
  explicit KVStoreLocal(const std::string& type) : KVStore(type), device_mode_(type == "device") {}

  using KVStore::Init;

  void Init(const std::vector<int>& keys, const std::vector<NDArray>& values) override {
    NoteIntKeys("Init");
    internal::CheckInitArgs(keys, values, [this](int k) { return StoredOf(k); }, [this](int k) { return KeyName(k); });
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const NDArray& v = values[i];
      const Context ctx = device_mode_ ? v.ctx() : Context::CPU(0);
      Entry& e = store_[keys[i]];
      e.stored = NDArray(v.shape(), ctx, v.dtype(), v.engine());
      CopyFromTo(v, e.stored);
    }
  }


  void SetUpdater(Updater updater) override { updater_ = std::move(updater); }

 private:
  // The compression buffers of one (key, device, k-th value of that device in a push).
  struct CompressedSlot {
    NDArray residual;  // what was not sent yet, on the value's device
    NDArray send;      // the compressed words, on the value's device
    NDArray recv;      // the compressed words on the reduction device (send itself when the devices match)
    NDArray decoded;   // the dequantized value, on the reduction device
  };
  // (dev_type, dev_id, k): Context has no ordering.
  using SlotKey = std::tuple<int, int, int>;

  struct Entry {
    NDArray stored;
    NDArray merged;                // the reduction's target (swapped with stored when there is no updater)
    std::vector<NDArray> staging;  // copies of off-device values on the reduction device
    std::map<SlotKey, CompressedSlot> compressed;
  };

  const NDArray* StoredOf(int key) const override {
    const auto it = store_.find(key);
    return it == store_.end() ? nullptr : &it->second.stored;
  }

  // With compression on: every value and the reduction device must suit the CPU float32 kernels. Also
  // (re)builds the compressor when the configuration changed, so that a bad one fails here, before pushing.
  void CheckPushValues(const char* op, const KeyGroups& groups, const std::vector<NDArray>& values) override {
    if (compression_.empty()) return;
    if (gc_ == nullptr || gc_config_ != compression_) {
      gc_ = std::make_unique<GradientCompression>(compression_);
      gc_config_ = compression_;
    }
    for (const auto& [key, idx] : groups) {
      const std::string where = std::string("KVStore::") + op + ": key " + KeyName(key);
      const NDArray& s = store_.at(key).stored;
      if (s.dtype() != DType::kFloat32) {
        throw Error(where + " has dtype " + DTypeName(s.dtype()) +
                    "; 2-bit gradient compression works on float32 only (push float32 gradients or turn "
                    "compression off with {\"type\", \"none\"})");
      }
      if (s.ctx().is_gpu()) {
        throw Error(where + " is stored on " + s.ctx().ToString() +
                    "; 2-bit gradient compression is implemented for CPU arrays only (initialise the key on "
                    "the CPU or turn compression off)");
      }
      for (std::size_t i : idx) {
        if (values[i].ctx().is_gpu()) {
          throw Error(where + ": value " + std::to_string(i) + " is on " + values[i].ctx().ToString() +
                      "; 2-bit gradient compression is implemented for CPU arrays only (copy the gradients "
                      "to the CPU or turn compression off)");
        }
      }
    }
  }

  void PushGroups(const KeyGroups& groups, const std::vector<NDArray>& values, int priority) override {
    const bool compress = !compression_.empty();
    for (const auto& [key, idx] : groups) {
      Entry& e = store_.at(key);
      if (compress) {
        ReduceCompressed(&e, values, idx, priority);
      } else {
        Reduce(&e, values, idx, priority);
      }
      if (updater_) {
        updater_(key, e.merged, &e.stored);
      } else {
        // The sum becomes the stored value; the old one is the next merge buffer. Pulls pushed before read
        // it first: the engine orders the next reduction (a write) after them.
        std::swap(e.stored, e.merged);
      }
    }
  }

  void PullGroups(const KeyGroups& groups, const std::vector<NDArray>& outs, int priority) override {
    for (const auto& [key, idx] : groups) {
      for (std::size_t i : idx) CopyFromTo(store_.at(key).stored, outs[i], priority);
    }
  }

  NDArray& Staging(Entry* e, std::size_t slot) {
    if (e->staging.size() <= slot) e->staging.resize(slot + 1);
    NDArray& s = e->staging[slot];
    if (s.is_none()) s = NDArray(e->stored.shape(), e->stored.ctx(), e->stored.dtype(), e->stored.engine());
    return s;
  }

  // e->merged = sum of values[idx...], pushed.
  void Reduce(Entry* e, const std::vector<NDArray>& values, const std::vector<std::size_t>& idx, int priority) {
    const Context rctx = e->stored.ctx();
    Engine* engine = e->stored.engine();
    if (e->merged.is_none()) e->merged = NDArray(e->stored.shape(), rctx, e->stored.dtype(), engine);
    std::size_t slot = 0;
    if (OnHost(rctx)) {
      // Host values (any cpu(i)) are read in place; only off-host ones are copied first.
      std::vector<TBlob> blobs;
      std::vector<VarHandle> reads;
      for (std::size_t i : idx) {
        const NDArray* src = &values[i];
        if (!OnHost(src->ctx())) {
          NDArray& st = Staging(e, slot++);
          CopyFromTo(*src, st, priority);
          src = &st;
        }
        blobs.push_back(src->data());
        if (std::find(reads.begin(), reads.end(), src->var()) == reads.end()) reads.push_back(src->var());
      }
      const TBlob out = e->merged.data();
      engine->PushSync([blobs = std::move(blobs), out](RunContext) { SumOnHost(blobs, out); }, rctx, reads,
                       {e->merged.var()}, FnProperty::kNormal, priority, "KVStoreReduce");
      return;
    }
    // A GPU reduction device: copies to it, then NDArray arithmetic there.
    std::vector<NDArray> srcs;
    for (std::size_t i : idx) {
      if (values[i].ctx() == rctx) {
        srcs.push_back(values[i]);
      } else {
        NDArray& st = Staging(e, slot++);
        CopyFromTo(values[i], st, priority);
        srcs.push_back(st);
      }
    }
    CopyFromTo(srcs[0], e->merged, priority);
    for (std::size_t j = 1; j < srcs.size(); ++j) e->merged += srcs[j];
  }

  // e->merged = sum over values[idx...] of dequantize(quantize(value + residual)), residuals updated;
  // all pushed. Every value is compressed, also one already on the reduction device, so that no device's
  // gradient is favoured (MXNet's comment in ReduceCompressed).
  void ReduceCompressed(Entry* e, const std::vector<NDArray>& values, const std::vector<std::size_t>& idx,
                        int priority) {
    const Context rctx = e->stored.ctx();
    Engine* engine = e->stored.engine();
    const TShape& shape = e->stored.shape();
    if (e->merged.is_none()) e->merged = NDArray(shape, rctx, e->stored.dtype(), engine);
    const std::int64_t words = GradientCompression::CompressedSize(shape.Size());
    std::map<std::pair<int, int>, int> seen;  // values of each device so far in this push
    std::vector<TBlob> blobs;
    std::vector<VarHandle> reads;
    for (std::size_t i : idx) {
      const NDArray& v = values[i];
      const Context vctx = v.ctx();
      const int k = seen[{static_cast<int>(vctx.dev_type), vctx.dev_id}]++;
      CompressedSlot& s = e->compressed[SlotKey{static_cast<int>(vctx.dev_type), vctx.dev_id, k}];
      if (s.residual.is_none()) {
        s.residual = NDArray::Zeros(shape, vctx, DType::kFloat32, engine);
        s.send = NDArray(TShape{words}, vctx, DType::kFloat32, engine);
        s.recv = vctx == rctx ? s.send : NDArray(TShape{words}, rctx, DType::kFloat32, engine);
        s.decoded = NDArray(shape, rctx, DType::kFloat32, engine);
      }
      gc_->Quantize(v, s.residual, s.send, priority);
      if (!(vctx == rctx)) CopyFromTo(s.send, s.recv, priority);
      gc_->Dequantize(s.recv, s.decoded, priority);
      blobs.push_back(s.decoded.data());
      reads.push_back(s.decoded.var());
    }
    const TBlob out = e->merged.data();
    engine->PushSync([blobs = std::move(blobs), out](RunContext) { SumOnHost(blobs, out); }, rctx, reads,
                     {e->merged.var()}, FnProperty::kNormal, priority, "KVStoreReduceCompressed");
  }

  const bool device_mode_;
  std::unordered_map<int, Entry> store_;
  Updater updater_;
  std::unique_ptr<GradientCompression> gc_;  // built from gc_config_, a copy of compression_
  Kwargs gc_config_;
};

}  // namespace

namespace internal {
std::unique_ptr<KVStore> CreateLocalKVStore(const std::string& type) { return std::make_unique<KVStoreLocal>(type); }
}  // namespace internal

}  // namespace troupe
