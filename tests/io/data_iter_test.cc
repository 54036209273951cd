// The data-iterator core: the registry and CreateDataIter, ShardRange, NDArrayIter (batches, last-batch
// handling, shuffling) and the prefetcher (same batches as the base, errors surfacing at Next/BeforeFirst,
// rewinding mid-epoch, destruction with a full queue). Every wait is bounded by a condition, never a sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <numeric>
#include <set>

#include "base/error.h"
#include "io/io.h"

namespace troupe {
namespace {

// A base iterator for the prefetcher tests: batch i of epoch e has index {e * 1000 + i} and no arrays.
// It can throw at one batch of one epoch, announcing the throw through a promise.
class CountIter : public DataIter {
 public:
  explicit CountIter(int batches, int throw_at = -1, int throw_epoch = 0)
      : batches_(batches), throw_at_(throw_at), throw_epoch_(throw_epoch) {}
  void BeforeFirst() override {
    ++epoch_;
    i_ = 0;
  }
  bool Next() override {
    if (i_ >= batches_) return false;
    ++i_;
    if (epoch_ == throw_epoch_ && i_ == throw_at_) {
      thrown.set_value();
      throw Error("CountIter: broken batch " + std::to_string(i_));
    }
    batch_.index = {static_cast<std::uint64_t>(epoch_ * 1000 + i_)};
    return true;
  }
  const DataBatch& Value() const override { return batch_; }
  std::vector<TShape> DataShapes() const override { return {TShape{7, 3}}; }
  std::vector<TShape> LabelShapes() const override { return {TShape{7}}; }

  std::promise<void> thrown;

 private:
  int batches_, throw_at_, throw_epoch_, epoch_ = 0, i_ = 0;
  DataBatch batch_;
};

// Registered for the registry tests; fails if CreateDataIter passed prefetch_buffer on.
TROUPE_REGISTER_DATA_ITER(TestCountIter, [](const Kwargs& kwargs) -> std::unique_ptr<DataIter> {
  int batches = 3;
  for (const auto& [k, v] : kwargs) {
    if (k == "batches") {
      batches = std::stoi(v);
    } else {
      throw Error("TestCountIter: unexpected parameter '" + k + "'");
    }
  }
  return std::make_unique<CountIter>(batches);
}).describe("Counts batches (tests only).");

std::vector<std::uint64_t> Indices(DataIter& it) {
  std::vector<std::uint64_t> out;
  while (it.Next()) out.insert(out.end(), it.Value().index.begin(), it.Value().index.end());
  return out;
}

// ------------------------------------------------------------------------------------------- registry
TEST(DataIterRegistry, FindsAndListsSorted) {
  const auto& reg = DataIterRegistry::Get();
  const DataIterInfo* info = reg.Find("TestCountIter");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->name, "TestCountIter");
  EXPECT_EQ(info->description, "Counts batches (tests only).");
  ASSERT_FALSE(info->params.empty());
  EXPECT_EQ(info->params[0].name, "prefetch_buffer");
  EXPECT_EQ(info->params[0].default_value, "4");
  EXPECT_NE(reg.Find("CSVIter"), nullptr);
  EXPECT_EQ(reg.Find("NoSuchIter"), nullptr);
  const auto names = reg.ListNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "TestCountIter"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "CSVIter"), names.end());
}

TEST(DataIterRegistry, DuplicateNameIsAnError) {
  try {
    DataIterRegistry::Get().Register("TestCountIter", [](const Kwargs&) { return std::unique_ptr<DataIter>(); });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'TestCountIter' is registered twice"), std::string::npos) << e.what();
  }
  EXPECT_EQ(DataIterRegistry::Get().Find("TestCountIter")->description, "Counts batches (tests only).");
}

TEST(DataIterRegistry, UnknownNameSuggestsSimilar) {
  try {
    CreateDataIter("testcountiter", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown data iterator 'testcountiter'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean: TestCountIter"), std::string::npos) << msg;
  }
}

TEST(DataIterRegistry, CreateHandlesPrefetchBuffer) {
  // 0: the factory's iterator itself; default and > 0: wrapped; the factory never sees the key.
  auto plain = CreateDataIter("TestCountIter", {{"batches", "5"}, {"prefetch_buffer", "0"}});
  EXPECT_NE(dynamic_cast<CountIter*>(plain.get()), nullptr);
  EXPECT_EQ(Indices(*plain), (std::vector<std::uint64_t>{1, 2, 3, 4, 5}));
  auto wrapped = CreateDataIter("TestCountIter", {{"batches", "5"}});
  EXPECT_EQ(dynamic_cast<CountIter*>(wrapped.get()), nullptr);
  EXPECT_EQ(Indices(*wrapped), (std::vector<std::uint64_t>{1, 2, 3, 4, 5}));
  auto one = CreateDataIter("TestCountIter", {{"prefetch_buffer", "1"}, {"batches", "4"}});
  EXPECT_EQ(Indices(*one), (std::vector<std::uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(one->DataShapes(), (std::vector<TShape>{TShape{7, 3}}));
  EXPECT_EQ(one->LabelShapes(), (std::vector<TShape>{TShape{7}}));

  for (const char* bad : {"-1", "abc", "2.5"}) {
    try {
      CreateDataIter("TestCountIter", {{"prefetch_buffer", bad}});
      FAIL() << "expected an error for " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("TestCountIter"), std::string::npos) << msg;
      EXPECT_NE(msg.find("prefetch_buffer"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
  // Other bad arguments are the factory's to report.
  EXPECT_THROW(CreateDataIter("TestCountIter", {{"bogus", "1"}}), Error);
}

// ----------------------------------------------------------------------------------------- ShardRange
TEST(ShardRange, PartsCoverEverySampleOnce) {
  for (std::uint64_t n : {0ull, 1ull, 2ull, 4ull, 5ull, 7ull, 10ull, 13ull, 100ull, 1001ull}) {
    for (int k = 1; k <= 5; ++k) {
      std::uint64_t expect_begin = 0, min_size = ~0ull, max_size = 0;
      for (int p = 0; p < k; ++p) {
        const auto [b, e] = ShardRange(n, k, p, "test");
        EXPECT_EQ(b, expect_begin) << "n=" << n << " k=" << k << " p=" << p;
        ASSERT_LE(b, e);
        min_size = std::min(min_size, e - b);
        max_size = std::max(max_size, e - b);
        // The first n % k parts are the larger ones.
        EXPECT_EQ(e - b, n / k + (static_cast<std::uint64_t>(p) < n % k ? 1 : 0));
        expect_begin = e;
      }
      EXPECT_EQ(expect_begin, n) << "n=" << n << " k=" << k;
      EXPECT_LE(max_size - min_size, 1u);
    }
  }
  EXPECT_EQ(ShardRange(10, 3, 0, "t"), (std::pair<std::uint64_t, std::uint64_t>{0, 4}));
  EXPECT_EQ(ShardRange(10, 3, 1, "t"), (std::pair<std::uint64_t, std::uint64_t>{4, 7}));
  EXPECT_EQ(ShardRange(10, 3, 2, "t"), (std::pair<std::uint64_t, std::uint64_t>{7, 10}));
}

TEST(ShardRange, BadArgumentsNameTheCaller) {
  for (auto [parts, index] : std::vector<std::pair<int, int>>{{0, 0}, {-1, 0}, {3, 3}, {3, -1}, {1, 1}}) {
    try {
      ShardRange(10, parts, index, "MyIter");
      FAIL() << parts << " " << index;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("MyIter"), std::string::npos) << msg;
      EXPECT_NE(msg.find(parts < 1 ? "num_parts" : "part_index"), std::string::npos) << msg;
    }
  }
}

// ---------------------------------------------------------------------------------------- NDArrayIter
// 10 samples: data row r = {10r, 10r + 1}, label r = 100 + r.
std::unique_ptr<DataIter> TenRows(int batch, const std::string& handle, bool shuffle = false, std::uint64_t seed = 0) {
  std::vector<float> d, l;
  for (int r = 0; r < 10; ++r) {
    d.push_back(10.0f * r);
    d.push_back(10.0f * r + 1);
    l.push_back(100.0f + r);
  }
  return MakeNDArrayIter({NDArray::FromVector(d, TShape{10, 2})}, {NDArray::FromVector(l, TShape{10})}, batch, shuffle,
                         handle, seed);
}

// Checks that the batch holds the rows its index names, and returns the index.
std::vector<std::uint64_t> CheckedBatch(const DataBatch& b, int batch) {
  EXPECT_EQ(b.data.size(), 1u);
  EXPECT_EQ(b.label.size(), 1u);
  EXPECT_EQ(b.data[0].shape(), (TShape{batch, 2}));
  EXPECT_EQ(b.label[0].shape(), (TShape{batch}));
  const auto d = b.data[0].ToVector<float>();
  const auto l = b.label[0].ToVector<float>();
  EXPECT_EQ(b.index.size(), static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < b.index.size(); ++i) {
    EXPECT_EQ(d[2 * i], 10.0f * b.index[i]);
    EXPECT_EQ(d[2 * i + 1], 10.0f * b.index[i] + 1);
    EXPECT_EQ(l[i], 100.0f + b.index[i]);
  }
  return b.index;
}

struct Seen {
  std::vector<std::uint64_t> index;
  int pad;
};
std::vector<Seen> Epoch(DataIter& it, int batch) {
  std::vector<Seen> out;
  while (it.Next()) out.push_back({CheckedBatch(it.Value(), batch), it.Value().num_batch_padd});
  EXPECT_FALSE(it.Next());  // stays at the end until BeforeFirst
  return out;
}
using Idx = std::vector<std::uint64_t>;

TEST(NDArrayIter, PadWrapsAroundFromTheStart) {
  auto it = TenRows(4, "pad");
  EXPECT_EQ(it->DataShapes(), (std::vector<TShape>{TShape{4, 2}}));
  EXPECT_EQ(it->LabelShapes(), (std::vector<TShape>{TShape{4}}));
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto e = Epoch(*it, 4);
    ASSERT_EQ(e.size(), 3u);
    EXPECT_EQ(e[0].index, (Idx{0, 1, 2, 3}));
    EXPECT_EQ(e[1].index, (Idx{4, 5, 6, 7}));
    EXPECT_EQ(e[2].index, (Idx{8, 9, 0, 1}));
    EXPECT_EQ(e[0].pad, 0);
    EXPECT_EQ(e[2].pad, 2);
    it->BeforeFirst();
  }
}

TEST(NDArrayIter, DiscardDropsTheIncompleteBatch) {
  auto it = TenRows(4, "discard");
  auto e = Epoch(*it, 4);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].index, (Idx{4, 5, 6, 7}));
  EXPECT_EQ(e[1].pad, 0);
}

TEST(NDArrayIter, RollOverCarriesTheRemainder) {
  auto it = TenRows(4, "roll_over");
  auto e1 = Epoch(*it, 4);
  ASSERT_EQ(e1.size(), 2u);
  EXPECT_EQ(e1[1].index, (Idx{4, 5, 6, 7}));
  it->BeforeFirst();
  auto e2 = Epoch(*it, 4);  // 8, 9 carried, then the new epoch from 2 on
  ASSERT_EQ(e2.size(), 3u);
  EXPECT_EQ(e2[0].index, (Idx{8, 9, 0, 1}));
  EXPECT_EQ(e2[0].pad, 0);
  EXPECT_EQ(e2[1].index, (Idx{2, 3, 4, 5}));
  EXPECT_EQ(e2[2].index, (Idx{6, 7, 8, 9}));
  it->BeforeFirst();
  auto e3 = Epoch(*it, 4);  // nothing was left over
  ASSERT_EQ(e3.size(), 2u);
  EXPECT_EQ(e3[0].index, (Idx{0, 1, 2, 3}));
  // A rewind in the middle of an epoch forgets nothing that was not yet carried.
  it->BeforeFirst();
  ASSERT_TRUE(it->Next());
  it->BeforeFirst();
  auto e4 = Epoch(*it, 4);
  ASSERT_EQ(e4.size(), 2u);
  EXPECT_EQ(e4[0].index, (Idx{0, 1, 2, 3}));
}

TEST(NDArrayIter, ShuffleIsASeededPermutationPerEpoch) {
  auto a = TenRows(5, "pad", true, 42);
  auto b = TenRows(5, "pad", true, 42);
  auto c = TenRows(5, "pad", true, 43);
  std::vector<Idx> epochs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    Idx ia, ib, ic;
    for (const auto& s : Epoch(*a, 5)) ia.insert(ia.end(), s.index.begin(), s.index.end());
    for (const auto& s : Epoch(*b, 5)) ib.insert(ib.end(), s.index.begin(), s.index.end());
    for (const auto& s : Epoch(*c, 5)) ic.insert(ic.end(), s.index.begin(), s.index.end());
    EXPECT_EQ(ia, ib);  // same seed, same order
    Idx sorted = ia;
    std::sort(sorted.begin(), sorted.end());
    Idx all(10);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);  // every sample once
    if (epoch == 0) {
      EXPECT_NE(ia, ic);
    }
    epochs.push_back(ia);
    a->BeforeFirst();
    b->BeforeFirst();
    c->BeforeFirst();
  }
  // Reshuffled at every BeforeFirst (for this fixed seed the three orders differ, and none is sorted).
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(NDArrayIter, KeepsTheSourceDTypeAndSnapshotsTheArrays) {
  NDArray src = NDArray::FromVector(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, TShape{3, 2});
  auto it = MakeNDArrayIter({src}, {}, 2, false, "pad");
  src = 0.0;  // the iterator read the values at construction
  src.WaitToRead();
  ASSERT_TRUE(it->Next());
  EXPECT_EQ(it->Value().data[0].dtype(), DType::kInt32);
  EXPECT_EQ(it->Value().data[0].ToVector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 3, 4}));
  EXPECT_TRUE(it->Value().label.empty());
  ASSERT_TRUE(it->Next());
  EXPECT_EQ(it->Value().data[0].ToVector<std::int32_t>(), (std::vector<std::int32_t>{5, 6, 1, 2}));
  EXPECT_EQ(it->Value().num_batch_padd, 1);
  EXPECT_FALSE(it->Next());
}

TEST(NDArrayIter, BadArgumentsAreErrors) {
  auto expect_error = [](auto make, const std::string& part) {
    try {
      make();
      FAIL() << "expected an error containing " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  NDArray ten = NDArray::Zeros(TShape{10, 2}, Context::CPU());
  NDArray nine = NDArray::Zeros(TShape{9}, Context::CPU());
  expect_error([&] { MakeNDArrayIter({ten}, {nine}, 2); }, "label[0] has 9 samples");
  expect_error([&] { MakeNDArrayIter({ten}, {}, 11); }, "batch_size 11");
  expect_error([&] { MakeNDArrayIter({ten}, {}, 0); }, "batch_size");
  expect_error([&] { MakeNDArrayIter({ten}, {}, 2, false, "wrap"); }, "last_batch_handle");
  expect_error([&] { MakeNDArrayIter({}, {}, 2); }, "no data arrays");
}

// ----------------------------------------------------------------------------------------- prefetcher
TEST(Prefetcher, GivesTheSameBatchesAsTheBase) {
  for (const char* handle : {"pad", "roll_over", "discard"}) {
    for (int capacity : {1, 2, 4}) {
      auto plain = TenRows(3, handle, true, 7);
      auto fetched = MakePrefetcher(TenRows(3, handle, true, 7), capacity);
      EXPECT_EQ(fetched->DataShapes(), plain->DataShapes());
      EXPECT_EQ(fetched->LabelShapes(), plain->LabelShapes());
      for (int epoch = 0; epoch < 3; ++epoch) {
        auto want = Epoch(*plain, 3);
        auto got = Epoch(*fetched, 3);
        ASSERT_EQ(got.size(), want.size()) << handle << " capacity " << capacity;
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].index, want[i].index);
          EXPECT_EQ(got[i].pad, want[i].pad);
        }
        plain->BeforeFirst();
        fetched->BeforeFirst();
      }
    }
  }
}

TEST(Prefetcher, BackgroundErrorSurfacesAtNext) {
  auto it = MakePrefetcher(std::make_unique<CountIter>(6, 3), 4);
  ASSERT_TRUE(it->Next());
  EXPECT_EQ(it->Value().index, (Idx{1}));
  ASSERT_TRUE(it->Next());
  EXPECT_EQ(it->Value().index, (Idx{2}));
  try {
    it->Next();
    FAIL() << "expected the base's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken batch 3"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(it->Next());  // thrown once, then the epoch is over
  it->BeforeFirst();         // and the iterator starts again
  EXPECT_EQ(Indices(*it), (Idx{1001, 1002, 1003, 1004, 1005, 1006}));
}

TEST(Prefetcher, BackgroundErrorSurfacesAtBeforeFirst) {
  auto base = std::make_unique<CountIter>(6, 1, /*throw_epoch=*/1);
  std::future<void> thrown = base->thrown.get_future();
  auto it = MakePrefetcher(std::move(base), 2);
  it->BeforeFirst();  // starts the producer, which fails at once
  thrown.wait();
  try {
    it->BeforeFirst();
    FAIL() << "expected the base's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken batch 1"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(it->Next());
  it->BeforeFirst();
  EXPECT_EQ(Indices(*it), (Idx{2001, 2002, 2003, 2004, 2005, 2006}));
}

TEST(Prefetcher, BeforeFirstMidEpochRestartsCleanly) {
  auto it = MakePrefetcher(TenRows(2, "pad"), 3);
  for (int round = 0; round < 20; ++round) {
    it->BeforeFirst();
    for (int i = 0; i < round % 6; ++i) ASSERT_TRUE(it->Next());
    if (round % 6 != 0) {
      EXPECT_EQ(it->Value().index[0], static_cast<std::uint64_t>(2 * (round % 6 - 1)));
    }
  }
  it->BeforeFirst();
  auto e = Epoch(*it, 2);
  ASSERT_EQ(e.size(), 5u);
  for (std::size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i].index, (Idx{2 * i, 2 * i + 1}));
}

TEST(Prefetcher, DestroyingWithAFullQueueDoesNotHang) {
  // The producer has far more batches than the queue holds, so it is blocked on a full queue (or about to
  // be) when the iterator is destroyed.
  for (int capacity : {1, 2, 8}) {
    auto it = MakePrefetcher(std::make_unique<CountIter>(1000000), capacity);
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(it->Value().index, (Idx{1}));
  }
  { auto never_started = MakePrefetcher(std::make_unique<CountIter>(1000000), 2); }
  {
    auto it = MakePrefetcher(std::make_unique<CountIter>(1000000), 2);
    it->BeforeFirst();
    ASSERT_TRUE(it->Next());
    it->BeforeFirst();  // stopping a producer blocked on the full queue
    ASSERT_TRUE(it->Next());
    EXPECT_EQ(it->Value().index, (Idx{2001}));
  }
}

TEST(Prefetcher, BadArguments) {
  EXPECT_THROW(MakePrefetcher(nullptr, 2), Error);
  EXPECT_THROW(MakePrefetcher(std::make_unique<CountIter>(1), 0), Error);
}

}  // namespace
}  // namespace troupe
