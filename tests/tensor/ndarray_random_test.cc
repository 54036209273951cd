// Random sequences of NDArray operations — arrays, views of views (Slice, At, Reshape), in-place updates
// (overlapping views included), scalar and array arithmetic, fills, copies and Dot — pushed asynchronously,
// compared with the same sequence run eagerly on plain vectors. Runs on the actor engine (1, 2, 4 workers;
// 4 dependency shards) and the naive engine, for float32, float64 and int32. The values are compared
// exactly: the model does the same IEEE operation per element (Dot only on small integers, where every
// summation order is exact).
//
// TROUPE_TEST_SEED replays a run (every run prints its seed); TROUPE_TEST_SCALE scales the length.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "tensor/ndarray.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace {

enum class Op { kAdd, kSub, kMul, kDiv };

// The model's arithmetic, written independently of the kernels: IEEE for floats; for int32, two's
// complement wrap-around, truncating division, x / 0 == 0 and MIN / -1 == MIN (the documented rules).
template <typename T>
T Apply(Op op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::kAdd: return a + b;
      case Op::kSub: return a - b;
      case Op::kMul: return a * b;
      case Op::kDiv: return a / b;
    }
  } else {
    const std::int64_t x = a, y = b;
    std::int64_t r = 0;
    switch (op) {
      case Op::kAdd: r = x + y; break;
      case Op::kSub: r = x - y; break;
      case Op::kMul: r = x * y; break;
      case Op::kDiv: r = y == 0 ? 0 : x / y; break;  // MIN / -1 = 2^31, wrapped below to MIN
    }
    return static_cast<T>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(r)));
  }
  return T();
}

template <typename T>
bool Same(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  }
  return a == b;
}

template <typename T>
class Sequence {
 public:
  Sequence(Engine* engine, std::uint64_t seed) : engine_(engine), rng_(seed) {}

  void Run(std::size_t steps) {
    NewArray();
    for (std::size_t step = 0; step < steps; ++step) {
      step_ = step;
      const int pick = static_cast<int>(rng_() % 100);
      if (pick < 8 || views_.size() < 3) {
        NewArray();
      } else if (pick < 26) {
        NewView();
      } else if (pick < 42) {
        BinaryOutOfPlace();
      } else if (pick < 58) {
        BinaryInPlace();
      } else if (pick < 68) {
        Scalar();
      } else if (pick < 72) {
        Fill();
      } else if (pick < 80) {
        Copy();
      } else if (pick < 86) {
        DotOp();
      } else if (pick < 92) {
        Check(Pick());
      } else if (views_.size() > 4) {
        views_.erase(views_.begin() + static_cast<std::ptrdiff_t>(rng_() % views_.size()));  // frees later
      }
      if (::testing::Test::HasFailure()) return;
    }
    for (std::size_t i = 0; i < views_.size() && !::testing::Test::HasFailure(); ++i) Check(i);
  }

 private:
  struct View {
    std::size_t base;
    std::int64_t offset;  // in elements
    NDArray array;
  };

  std::size_t Pick() { return rng_() % views_.size(); }
  std::int64_t Rand(std::int64_t lo, std::int64_t hi) {  // [lo, hi]
    return lo + static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  T RandomValue() {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(Rand(-8, 8)) / T(2);
    } else {
      const int k = static_cast<int>(rng_() % 20);
      if (k == 0) return std::numeric_limits<T>::min();
      if (k == 1) return std::numeric_limits<T>::max();
      return static_cast<T>(Rand(-9, 9));
    }
  }
  double RandomScalar() {
    const double choices[] = {-3, -2, -1, 0, 1, 2, 3, 0.5, 1.5};
    const int n = std::is_floating_point_v<T> ? 9 : 7;
    return choices[rng_() % n];
  }
  Op RandomOp() { return static_cast<Op>(rng_() % 4); }

  std::vector<T> Values(const View& v) const {
    const auto& base = bases_[v.base];
    return std::vector<T>(base.begin() + v.offset, base.begin() + v.offset + v.array.Size());
  }
  void Store(const View& v, const std::vector<T>& values) {
    std::copy(values.begin(), values.end(), bases_[v.base].begin() + v.offset);
  }
  std::string Where() const {
    std::ostringstream os;
    os << "step " << step_ << " (" << DTypeName(DTypeOf<T>()) << ")";
    return os.str();
  }

  void NewArray() {
    std::vector<std::int64_t> dims(static_cast<std::size_t>(Rand(1, 3)));
    for (auto& d : dims) d = Rand(1, 6);
    const TShape shape(dims);
    std::vector<T> values(static_cast<std::size_t>(shape.Size()));
    for (auto& x : values) x = RandomValue();
    NDArray a(shape, Context::CPU(static_cast<int>(rng_() % 2)), DTypeOf<T>(), engine_);
    a.CopyFromHost(values.data(), values.size() * sizeof(T));
    bases_.push_back(values);
    views_.push_back({bases_.size() - 1, 0, a});
  }

  void NewView() {
    View v = views_[Pick()];
    const TShape s = v.array.shape();
    const int kind = static_cast<int>(rng_() % 3);
    if (kind == 0 && s.ndim() >= 1 && s[0] > 0) {
      const std::int64_t b = Rand(0, s[0] - 1), e = Rand(b + 1, s[0]);
      const std::int64_t row = s.ProdDims(1, s.ndim());
      views_.push_back({v.base, v.offset + b * row, v.array.Slice(b, e)});
    } else if (kind == 1 && s.ndim() >= 1 && s[0] > 0) {
      const std::int64_t i = Rand(0, s[0] - 1);
      views_.push_back({v.base, v.offset + i * s.ProdDims(1, s.ndim()), v.array.At(i)});
    } else {
      // Reshape to a random factorisation of the size, using MXNet's -1 (and 0 where it fits).
      std::int64_t n = v.array.Size();
      std::vector<std::int64_t> dims;
      while (n > 1 && dims.size() < 3) {
        std::int64_t f = Rand(1, n);
        while (n % f != 0) --f;
        dims.push_back(f);
        n /= f;
      }
      dims.push_back(n);
      if (rng_() % 2) dims[rng_() % dims.size()] = -1;
      if (!dims.empty() && s.ndim() >= 1 && dims[0] == s[0] && rng_() % 2) dims[0] = 0;
      views_.push_back({v.base, v.offset, v.array.Reshape(TShape(dims))});
    }
  }

  // Another view with the same shape as views_[i] (possibly itself; often overlapping it), or a new one.
  std::size_t Partner(std::size_t i) {
    std::vector<std::size_t> same;
    for (std::size_t j = 0; j < views_.size(); ++j) {
      if (views_[j].array.shape() == views_[i].array.shape() && views_[j].array.ctx() == views_[i].array.ctx()) {
        same.push_back(j);
      }
    }
    if (same.size() > 1 || rng_() % 4 == 0) return same[rng_() % same.size()];
    // Make one: a fresh array of that shape on that device.
    std::vector<T> values(static_cast<std::size_t>(views_[i].array.Size()));
    for (auto& x : values) x = RandomValue();
    NDArray a(views_[i].array.shape(), views_[i].array.ctx(), DTypeOf<T>(), engine_);
    a.CopyFromHost(values.data(), values.size() * sizeof(T));
    bases_.push_back(values);
    views_.push_back({bases_.size() - 1, 0, a});
    return views_.size() - 1;
  }

  static NDArray Compute(Op op, const NDArray& a, const NDArray& b) {
    switch (op) {
      case Op::kAdd: return a + b;
      case Op::kSub: return a - b;
      case Op::kMul: return a * b;
      case Op::kDiv: return a / b;
    }
    return NDArray();
  }

  void BinaryOutOfPlace() {
    const std::size_t i = Pick(), j = Partner(i);
    const Op op = RandomOp();
    NDArray out = Compute(op, views_[i].array, views_[j].array);
    const auto a = Values(views_[i]), b = Values(views_[j]);
    std::vector<T> r(a.size());
    for (std::size_t k = 0; k < a.size(); ++k) r[k] = Apply(op, a[k], b[k]);
    bases_.push_back(r);
    views_.push_back({bases_.size() - 1, 0, out});
  }

  void BinaryInPlace() {
    const std::size_t i = Pick(), j = Partner(i);
    const Op op = RandomOp();
    NDArray& target = views_[i].array;
    switch (op) {
      case Op::kAdd: target += views_[j].array; break;
      case Op::kSub: target -= views_[j].array; break;
      case Op::kMul: target *= views_[j].array; break;
      case Op::kDiv: target /= views_[j].array; break;
    }
    const auto a = Values(views_[i]), b = Values(views_[j]);  // both read before the write
    std::vector<T> r(a.size());
    for (std::size_t k = 0; k < a.size(); ++k) r[k] = Apply(op, a[k], b[k]);
    Store(views_[i], r);
  }

  void Scalar() {
    const std::size_t i = Pick();
    const Op op = RandomOp();
    const double s = RandomScalar();
    const T st = static_cast<T>(s);
    const auto a = Values(views_[i]);
    std::vector<T> r(a.size());
    for (std::size_t k = 0; k < a.size(); ++k) r[k] = Apply(op, a[k], st);
    if (rng_() % 2) {
      NDArray& t = views_[i].array;
      switch (op) {
        case Op::kAdd: t += s; break;
        case Op::kSub: t -= s; break;
        case Op::kMul: t *= s; break;
        case Op::kDiv: t /= s; break;
      }
      Store(views_[i], r);
    } else {
      const NDArray& t = views_[i].array;
      NDArray out;
      switch (op) {
        case Op::kAdd: out = t + s; break;
        case Op::kSub: out = t - s; break;
        case Op::kMul: out = t * s; break;
        case Op::kDiv: out = t / s; break;
      }
      bases_.push_back(r);
      views_.push_back({bases_.size() - 1, 0, out});
    }
  }

  void Fill() {
    const std::size_t i = Pick();
    const T v = RandomValue();
    views_[i].array = static_cast<double>(v);
    Store(views_[i], std::vector<T>(static_cast<std::size_t>(views_[i].array.Size()), v));
  }

  void Copy() {
    const std::size_t i = Pick(), j = Partner(i);
    CopyFromTo(views_[j].array, views_[i].array);
    Store(views_[i], Values(views_[j]));
  }

  // Dot on 2-D float arrays holding small integers, where the result is exact in any summation order.
  void DotOp() {
    if constexpr (std::is_floating_point_v<T>) {
      std::vector<std::size_t> mats;
      for (std::size_t i = 0; i < views_.size(); ++i) {
        if (views_[i].array.shape().ndim() != 2) continue;
        bool small_ints = true;
        for (T x : Values(views_[i])) small_ints = small_ints && std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1000;
        if (small_ints) mats.push_back(i);
      }
      if (mats.empty()) return;
      const std::size_t i = mats[rng_() % mats.size()];
      const bool ta = rng_() % 2;
      const TShape sa = views_[i].array.shape();
      const std::int64_t m = ta ? sa[1] : sa[0], k = ta ? sa[0] : sa[1];
      std::vector<std::pair<std::size_t, bool>> partners;
      for (std::size_t j : mats) {
        const TShape sb = views_[j].array.shape();
        if (views_[j].array.ctx() != views_[i].array.ctx()) continue;
        if (sb[0] == k) partners.push_back({j, false});
        if (sb[1] == k) partners.push_back({j, true});
      }
      if (partners.empty()) return;
      const auto [j, tb] = partners[rng_() % partners.size()];
      const TShape sb = views_[j].array.shape();
      const std::int64_t n = tb ? sb[0] : sb[1];
      NDArray out = Dot(views_[i].array, views_[j].array, ta, tb);
      const auto a = Values(views_[i]), b = Values(views_[j]);
      std::vector<T> r(static_cast<std::size_t>(m * n), T(0));
      for (std::int64_t x = 0; x < m; ++x) {
        for (std::int64_t y = 0; y < n; ++y) {
          T sum = 0;
          for (std::int64_t z = 0; z < k; ++z) {
            const T av = ta ? a[z * sa[1] + x] : a[x * sa[1] + z];
            const T bv = tb ? b[y * sb[1] + z] : b[z * sb[1] + y];
            sum += av * bv;
          }
          r[x * n + y] = sum;
        }
      }
      bases_.push_back(r);
      views_.push_back({bases_.size() - 1, 0, out});
    }
  }

  void Check(std::size_t i) {
    const View& v = views_[i];
    const auto got = v.array.template ToVector<T>();
    const auto want = Values(v);
    ASSERT_EQ(got.size(), want.size()) << Where();
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_TRUE(Same(got[k], want[k])) << Where() << ": view " << i << " " << v.array.shape().ToString()
                                         << " element " << k << ": got " << +got[k] << ", model " << +want[k];
    }
    ++checks_;
  }

  Engine* engine_;
  std::mt19937_64 rng_;
  std::vector<std::vector<T>> bases_;
  std::vector<View> views_;
  std::size_t step_ = 0;
  std::size_t checks_ = 0;
};

class NDArrayRandomTest : public ::testing::TestWithParam<test::EngineParam> {};

TEST_P(NDArrayRandomTest, AsyncSequencesMatchEagerVectors) {
  const std::uint64_t seed = test::TestSeed();
  auto engine = test::MakeEngine(GetParam());
  const std::size_t steps = test::Scaled(3000, 50);
  for (int round = 0; round < 3 && !HasFailure(); ++round) {
    Sequence<float>(engine.get(), seed + 3 * round).Run(steps);
    if (HasFailure()) break;
    Sequence<double>(engine.get(), seed + 3 * round + 1).Run(steps);
    if (HasFailure()) break;
    Sequence<std::int32_t>(engine.get(), seed + 3 * round + 2).Run(steps);
  }
  engine->WaitForAll();
}

INSTANTIATE_TEST_SUITE_P(Engines, NDArrayRandomTest, ::testing::ValuesIn(test::AllEngines()), test::EngineParamName);

}  // namespace
}  // namespace troupe
