// NDArray: values of every operation against hand-computed results, views, copies, errors at the call,
// errors travelling through the engine, and that no operation blocks its caller. Every test runs on the
// actor engine (1, 2, 4 workers; 4 dependency shards) and on the naive engine.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

#include "tensor/ndarray.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace {

constexpr Context kCpu = Context::CPU(0);

class NDArrayTest : public ::testing::TestWithParam<test::EngineParam> {
 protected:
  void SetUp() override { engine_ = test::MakeEngine(GetParam()); }
  void TearDown() override {
    if (engine_) engine_->WaitForAll();
    engine_.reset();
  }
  template <typename T>
  NDArray Make(const std::vector<T>& v, const TShape& shape, Context ctx = kCpu) {
    return NDArray::FromVector(v, shape, ctx, engine_.get());
  }
  Engine* engine() { return engine_.get(); }
  std::unique_ptr<Engine> engine_;
};

void ExpectErrorContains(const std::function<void()>& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST_P(NDArrayTest, CreationFillsAndProperties) {
  NDArray none;
  EXPECT_TRUE(none.is_none());
  EXPECT_EQ(none.Size(), 0);
  NDArray z = NDArray::Zeros(TShape({2, 3}), kCpu, DType::kFloat32, engine());
  EXPECT_EQ(z.shape(), TShape({2, 3}));
  EXPECT_EQ(z.dtype(), DType::kFloat32);
  EXPECT_EQ(z.ctx(), kCpu);
  EXPECT_EQ(z.engine(), engine());
  EXPECT_EQ(z.Bytes(), 24u);
  EXPECT_EQ(z.ToVector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(NDArray::Ones(TShape({4}), kCpu, DType::kInt64, engine()).ToVector<std::int64_t>(),
            std::vector<std::int64_t>(4, 1));
  EXPECT_EQ(NDArray::Full(TShape({3}), 2.5, kCpu, DType::kFloat64, engine()).ToVector<double>(),
            std::vector<double>(3, 2.5));
  EXPECT_EQ(NDArray::Full(TShape({2}), 300, kCpu, DType::kUint8, engine()).ToVector<std::uint8_t>(),
            std::vector<std::uint8_t>(2, 255));  // saturates
  NDArray s = NDArray::Full(TShape::Scalar(), 7, kCpu, DType::kInt32, engine());
  EXPECT_EQ(s.Size(), 1);
  EXPECT_EQ(s.ToVector<std::int32_t>(), std::vector<std::int32_t>{7});
  NDArray empty = NDArray::Ones(TShape({0, 5}), kCpu, DType::kFloat32, engine());
  EXPECT_EQ(empty.Size(), 0);
  EXPECT_TRUE(empty.ToVector<float>().empty());
  NDArray h = NDArray::Full(TShape({2}), 1.5, kCpu, DType::kFloat16, engine());
  auto hv = h.ToVector<half_t>();
  EXPECT_EQ(static_cast<float>(hv[0]), 1.5f);
  EXPECT_THROW(NDArray(TShape({2, -1}), kCpu, DType::kFloat32, engine()), Error);
  EXPECT_THROW(NDArray(TShape(), kCpu, DType::kFloat32, engine()), Error);
}

TEST_P(NDArrayTest, ArithmeticMatchesHandComputedValues) {
  NDArray a = Make<float>({1, 2, 3, 4, 5, 6}, TShape({2, 3}));
  NDArray b = Make<float>({6, 5, 4, 3, 2, 1}, TShape({2, 3}));
  EXPECT_EQ((a + b).ToVector<float>(), (std::vector<float>{7, 7, 7, 7, 7, 7}));
  EXPECT_EQ((a - b).ToVector<float>(), (std::vector<float>{-5, -3, -1, 1, 3, 5}));
  EXPECT_EQ((a * b).ToVector<float>(), (std::vector<float>{6, 10, 12, 12, 10, 6}));
  EXPECT_EQ((a / b).ToVector<float>(), (std::vector<float>{1.f / 6, 2.f / 5, 3.f / 4, 4.f / 3, 5.f / 2, 6.f}));
  EXPECT_EQ((a + 1).ToVector<float>(), (std::vector<float>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ((a - 1).ToVector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ((a * 2).ToVector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ((a / 4).ToVector<float>(), (std::vector<float>{0.25, 0.5, 0.75, 1, 1.25, 1.5}));
  NDArray c = a * 2 + 1;  // a chain: a*2 is a temporary whose memory outlives it until c is computed
  EXPECT_EQ(c.ToVector<float>(), (std::vector<float>{3, 5, 7, 9, 11, 13}));
  // In-place forms.
  c += b;
  c -= 1;
  c *= a;
  c /= 2;
  EXPECT_EQ(c.ToVector<float>(), (std::vector<float>{4, 9, 15, 22, 30, 39}));
  a += a;  // the same array on both sides
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  a *= 0.5;
  a -= b;
  a /= b;
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>{-5.f / 6, -3.f / 5, -1.f / 4, 1.f / 3, 3.f / 2, 5.f}));
  // float64 and float16 (computed in float, rounded to half).
  NDArray d = Make<double>({0.1, 0.2}, TShape({2}));
  EXPECT_EQ((d + d).ToVector<double>(), (std::vector<double>{0.2, 0.4}));
  NDArray h = NDArray::Full(TShape({2}), 1000, kCpu, DType::kFloat16, engine());
  h += 0.3;  // 1000.3 is not a half: 1000.5 is the nearest (spacing 0.5)
  EXPECT_EQ(static_cast<float>(h.ToVector<half_t>()[0]), 1000.5f);
}

TEST_P(NDArrayTest, IntegerArithmeticWrapsAndDivisionByZeroGivesZero) {
  const std::int32_t kMin = std::numeric_limits<std::int32_t>::min(), kMax = std::numeric_limits<std::int32_t>::max();
  NDArray a = Make<std::int32_t>({7, -7, kMax, kMin, 9}, TShape({5}));
  NDArray b = Make<std::int32_t>({2, 2, 1, -1, 0}, TShape({5}));
  EXPECT_EQ((a / b).ToVector<std::int32_t>(), (std::vector<std::int32_t>{3, -3, kMax, kMin, 0}));
  EXPECT_EQ((a + b).ToVector<std::int32_t>(), (std::vector<std::int32_t>{9, -5, kMin, kMax, 9}));
  EXPECT_EQ((a * 2).ToVector<std::int32_t>(), (std::vector<std::int32_t>{14, -14, -2, 0, 18}));
  EXPECT_EQ((a / 0).ToVector<std::int32_t>(), (std::vector<std::int32_t>{0, 0, 0, 0, 0}));
  NDArray u = Make<std::uint8_t>({250, 3}, TShape({2}));
  EXPECT_EQ((u + 10).ToVector<std::uint8_t>(), (std::vector<std::uint8_t>{4, 13}));
  NDArray flags = NDArray::Ones(TShape({2}), kCpu, DType::kBool, engine());
  ExpectErrorContains([&] { flags + flags; }, "bool");
  ExpectErrorContains([&] { flags += 1; }, "bool");
}

TEST_P(NDArrayTest, ViewsShareMemoryAndOrdering) {
  NDArray a = Make<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, TShape({4, 3}));
  NDArray rows = a.Slice(1, 3);
  EXPECT_EQ(rows.shape(), TShape({2, 3}));
  EXPECT_TRUE(rows.SharesChunkWith(a));
  EXPECT_EQ(rows.var(), a.var());
  EXPECT_EQ(rows.ToVector<float>(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  rows += 100;  // writes through to a
  NDArray row = a.At(3);
  EXPECT_EQ(row.shape(), TShape({3}));
  row = -1;
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>{0, 1, 2, 103, 104, 105, 106, 107, 108, -1, -1, -1}));
  NDArray flat = a.Reshape(TShape({-1}));
  EXPECT_EQ(flat.shape(), TShape({12}));
  EXPECT_EQ(a.Reshape(TShape({0, -1, 1})).shape(), TShape({4, 3, 1}));
  EXPECT_EQ(a.Reshape(TShape({2, 0, 2})).shape(), TShape({2, 3, 2}));
  NDArray scalar = a.At(0).At(2);
  EXPECT_EQ(scalar.shape(), TShape::Scalar());
  EXPECT_EQ(scalar.ToVector<float>(), std::vector<float>{2});
  flat.Slice(0, 2) *= 10;  // a slice of a reshape of the array
  EXPECT_EQ(a.At(0).ToVector<float>(), (std::vector<float>{0, 10, 2}));
  // Copies between overlapping views of one array behave as if the source was read first.
  NDArray v = Make<float>({1, 2, 3, 4, 5}, TShape({5}));
  CopyFromTo(v.Slice(0, 4), v.Slice(1, 5));
  EXPECT_EQ(v.ToVector<float>(), (std::vector<float>{1, 1, 2, 3, 4}));
  NDArray w = Make<float>({1, 2, 3, 4, 5}, TShape({5}));
  NDArray w_tail = w.Slice(1, 5);
  w_tail += w.Slice(0, 4);  // partial overlap: the right side is read before it is written
  EXPECT_EQ(w.ToVector<float>(), (std::vector<float>{1, 3, 5, 7, 9}));
  // Errors.
  ExpectErrorContains([&] { a.Slice(2, 5); }, "out of range");
  ExpectErrorContains([&] { a.Slice(3, 2); }, "out of range");
  ExpectErrorContains([&] { a.At(4); }, "out of range");
  ExpectErrorContains([&] { scalar.At(0); }, "scalar");
  ExpectErrorContains([&] { a.Reshape(TShape({5, -1})); }, "infer");
  ExpectErrorContains([&] { a.Reshape(TShape({5, 2})); }, "sizes differ");
  ExpectErrorContains([&] { a.Reshape(TShape({-1, -1})); }, "at most one");
  ExpectErrorContains([&] { a.Reshape(TShape({1, 1, 0})); }, "0 at position 2");
}

TEST_P(NDArrayTest, CopiesBetweenDevicesAndTypes) {
  NDArray a = Make<float>({1.5f, -2.7f, 300.f, std::nanf("")}, TShape({2, 2}));
  NDArray b = a.CopyTo(Context::CPU(1));
  EXPECT_EQ(b.ctx(), Context::CPU(1));
  a = 0;  // ordered after the copy's read
  auto bv = b.ToVector<float>();
  EXPECT_EQ(bv[0], 1.5f);
  EXPECT_EQ(bv[2], 300.f);
  EXPECT_TRUE(std::isnan(bv[3]));
  NDArray i = b.AsType(DType::kInt8);
  EXPECT_EQ(i.ToVector<std::int8_t>(), (std::vector<std::int8_t>{1, -2, 127, 0}));
  NDArray d = i.AsType(DType::kFloat64);
  EXPECT_EQ(d.ToVector<double>(), (std::vector<double>{1, -2, 127, 0}));
  NDArray bf = d.AsType(DType::kBfloat16).AsType(DType::kFloat32);
  EXPECT_EQ(bf.ToVector<float>(), (std::vector<float>{1, -2, 127, 0}));
  std::vector<float> host(4);
  b.SyncCopyToCPU(host.data(), host.size() * sizeof(float));
  EXPECT_EQ(host[0], 1.5f);
  std::vector<float> in = {9, 8, 7, 6};
  b.SyncCopyFromCPU(in.data(), in.size() * sizeof(float));
  EXPECT_EQ(b.ToVector<float>(), in);
  ExpectErrorContains([&] { b.SyncCopyFromCPU(in.data(), 8); }, "holds 16");
  ExpectErrorContains([&] { b.SyncCopyToCPU(host.data(), 20); }, "holds 16");
  ExpectErrorContains([&] { b.ToVector<double>(); }, "element type differs");
  NDArray wrong(TShape({4}), kCpu, DType::kFloat32, engine());
  ExpectErrorContains([&] { CopyFromTo(a, wrong); }, "differ");
}

TEST_P(NDArrayTest, MistakesAreReportedAtTheCall) {
  NDArray a = NDArray::Ones(TShape({2, 3}), kCpu, DType::kFloat32, engine());
  NDArray b = NDArray::Ones(TShape({3, 2}), kCpu, DType::kFloat32, engine());
  NDArray c = NDArray::Ones(TShape({2, 3}), kCpu, DType::kFloat64, engine());
  NDArray d = NDArray::Ones(TShape({2, 3}), Context::CPU(1), DType::kFloat32, engine());
  auto other_engine = Engine::Create(test::MakeConfig(GetParam()));
  NDArray e = NDArray::Ones(TShape({2, 3}), kCpu, DType::kFloat32, other_engine.get());
  ExpectErrorContains([&] { a + b; }, "shapes differ: (2,3) and (3,2)");
  ExpectErrorContains([&] { a += c; }, "dtypes differ: float32 and float64");
  ExpectErrorContains([&] { a * d; }, "different devices: cpu(0) and cpu(1)");
  ExpectErrorContains([&] { a - e; }, "different engines");
  NDArray none;
  ExpectErrorContains([&] { a + none; }, "none");
  ExpectErrorContains([&] { none += 1; }, "none");
  // Nothing was pushed by the failed calls: a is still all ones.
  EXPECT_EQ(a.ToVector<float>(), std::vector<float>(6, 1.f));
  e.WaitToRead();
}

// CopyTo onto another engine (which CopyFromTo refuses) waits for the array's pending writer and copies its
// values; the copy belongs to the other engine.
TEST_P(NDArrayTest, CopyToAnotherEngineWaitsForTheValue) {
  auto other_engine = Engine::Create(test::MakeConfig(GetParam()));  // outlives the copy
  NDArray a = Make<float>({1, 2, 3, 4}, TShape({4}));
  a += 1;
  NDArray b = a.CopyTo(kCpu, other_engine.get());
  EXPECT_EQ(b.engine(), other_engine.get());
  EXPECT_EQ(b.ToVector<float>(), (std::vector<float>{2, 3, 4, 5}));
  NDArray c = a.CopyTo(Context::CPU(1), engine());  // the same engine: an ordinary pushed copy
  EXPECT_EQ(c.ToVector<float>(), (std::vector<float>{2, 3, 4, 5}));
}

TEST_P(NDArrayTest, DotMatchesHandComputedProducts) {
  NDArray a = Make<float>({1, 2, 3, 4, 5, 6}, TShape({2, 3}));
  NDArray b = Make<float>({7, 8, 9, 10, 11, 12}, TShape({3, 2}));
  EXPECT_EQ(Dot(a, b).ToVector<float>(), (std::vector<float>{58, 64, 139, 154}));
  EXPECT_EQ(Dot(a, a, false, true).ToVector<float>(), (std::vector<float>{14, 32, 32, 77}));  // a a^T
  EXPECT_EQ(Dot(a, a, true, false).shape(), TShape({3, 3}));                                   // a^T a
  EXPECT_EQ(Dot(a, a, true, false).ToVector<float>(), (std::vector<float>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
  EXPECT_EQ(Dot(b, a, true, true).ToVector<float>(), (std::vector<float>{58, 139, 64, 154}));  // (ab)^T
  NDArray out = NDArray::Ones(TShape({2, 2}), kCpu, DType::kFloat32, engine());
  Dot(a, b, &out, false, false, true);  // accumulate
  EXPECT_EQ(out.ToVector<float>(), (std::vector<float>{59, 65, 140, 155}));
  NDArray sq = Make<double>({1, 2, 3, 4}, TShape({2, 2}));
  Dot(sq, sq, &sq);  // the output is an input: computed aside
  EXPECT_EQ(sq.ToVector<double>(), (std::vector<double>{7, 10, 15, 22}));
  ExpectErrorContains([&] { Dot(a, a); }, "inner dimensions differ");
  ExpectErrorContains([&] { Dot(a.Reshape(TShape({6})), b); }, "2-D");
  NDArray ints = NDArray::Ones(TShape({2, 2}), kCpu, DType::kInt32, engine());
  ExpectErrorContains([&] { Dot(ints, ints); }, "int32");
  ExpectErrorContains([&] { Dot(a, b, &sq); }, "output");
}

// A function that fails poisons what it writes: operations that read the array fail the same way, and the
// error surfaces where the user waits.
TEST_P(NDArrayTest, ErrorsTravelThroughTheEngineToWhereTheUserWaits) {
  NDArray a = NDArray::Ones(TShape({4}), kCpu, DType::kFloat32, engine());
  engine()->PushSync([](RunContext) { throw Error("sensor unplugged"); }, kCpu, {}, {a.var()});
  NDArray b = a + 1;  // skipped: a is poisoned
  ExpectErrorContains([&] { b.WaitToRead(); }, "sensor unplugged");
  ExpectErrorContains([&] { a.ToVector<float>(); }, "sensor unplugged");
  // WaitToRead rethrows a's error once and clears it: after that the array is usable again.
  ExpectErrorContains([&] { a.WaitToRead(); }, "sensor unplugged");
  a = 3;
  EXPECT_EQ((a + 1).ToVector<float>(), std::vector<float>(4, 4.f));
}

// Operations push and return: with the array's variable held by an unfinished function, a chain of
// operations is pushed without waiting, and runs once the function completes.
TEST_P(NDArrayTest, OperationsNeverBlockTheCaller) {
  if (GetParam().type == EngineType::kNaive) GTEST_SKIP() << "the naive engine runs every function at its push";
  NDArray a = NDArray::Ones(TShape({1000}), kCpu, DType::kFloat32, engine());
  std::mutex mu;
  std::condition_variable cv;
  CallbackOnComplete pending;
  bool started = false;
  engine()->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        std::lock_guard<std::mutex> lock(mu);
        pending = cb;
        started = true;
        cv.notify_all();
      },
      kCpu, {}, {a.var()}, FnProperty::kAsync);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, test::kLongWait, [&] { return started; }));
  }
  const std::uint64_t completed_before = engine()->Stats().completed;
  NDArray b = a * 3 + 2;  // each step is pushed behind the held variable
  b += a;
  NDArray c = Dot(b.Reshape(TShape({1, 1000})), a.Reshape(TShape({1000, 1})));
  NDArray d = c.CopyTo(Context::CPU(1));
  d.SampleUniform(0, 1);
  d = 5;
  // Every call returned, and nothing could run yet: a's writer has not completed.
  EXPECT_EQ(engine()->Stats().completed, completed_before);
  EXPECT_GE(engine()->Stats().pending, 7u);
  pending();
  EXPECT_EQ(b.ToVector<float>(), std::vector<float>(1000, 6.f));
  EXPECT_EQ(c.ToVector<float>(), std::vector<float>{6000.f});
  EXPECT_EQ(d.ToVector<float>(), std::vector<float>{5.f});
}

TEST_P(NDArrayTest, ManyArraysComeAndGo) {
  // Arrays destroyed while their functions are still queued: memory is freed after them, never before.
  NDArray acc = NDArray::Zeros(TShape({256}), kCpu, DType::kFloat64, engine());
  for (int i = 0; i < 500; ++i) {
    NDArray t = NDArray::Full(TShape({256}), i, kCpu, DType::kFloat64, engine());
    acc += t * 2;
  }
  EXPECT_EQ(acc.ToVector<double>(), std::vector<double>(256, 499.0 * 500.0));
}

INSTANTIATE_TEST_SUITE_P(Engines, NDArrayTest, ::testing::ValuesIn(test::AllEngines()), test::EngineParamName);

}  // namespace
}  // namespace troupe
