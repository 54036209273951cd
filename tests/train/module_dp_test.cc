// Data-parallel Module (train/train.h with several contexts): the batch split as MXNet's _split_input_slice,
// training over 2, 3 and 4 CPU contexts through the KVStore ("local" and "device") ending with the
// parameters of training on one context, Score / Predict over the concatenated slices equal to one context's,
// a run that learns, resuming from a checkpoint, SetParams keeping the optimizer's states, and the errors (a batch smaller than the number of
// contexts, an empty context list). Across processes' worth of workers: two dist_sync workers (a cluster in
// this process: scheduler, one server) each training on half of every batch end with the parameters of one
// module trained on the whole batches (the server runs the optimizer with the module's multipliers: no
// weight decay on biases). With loss scaling, a step that overflows on one worker is skipped on both.
//
// Tolerance: one context sums each gradient over the 32 rows of a batch in one reduction, k contexts sum
// k partial sums (each over its slice) in the store, so the float32 roundings differ. One gradient entry's
// rounding difference is at most about rows * eps = 32 * 6e-8 ~ 2e-6 of the sum of its terms' magnitudes;
// after 20 SGD steps with momentum 0.9 (a gradient counts at most 1 / (1 - 0.9) = 10 times) at learning
// rate 0.1 with rescale 1/32, a weight moves by at most ~20 * 10 * 0.1 * 2e-6 * max|per-row gradient| ~
// 1e-6 .. 1e-5 away from the one-context value (plus the drift the forward passes add). 1e-4 absolute +
// 1e-4 relative leaves a 10x margin while being far below what training moves a weight (checked: > 1e-2).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "io/io.h"
#include "kvstore/dist.h"
#include "graph/models.h"
#include "tensor/resource.h"
#include "tests/common/op_test_util.h"
#include "train/train.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;

constexpr int kDim = 20;
constexpr int kClasses = 4;
constexpr int kSamples = 640;  // 20 batches of 32
constexpr int kBatch = 32;

// Four Gaussian clusters in kDim dimensions (class c centred at +-1.5 on coordinates 2c, 2c + 1): an MLP
// separates them within a few epochs.
void ClusterData(int n, std::uint64_t seed, std::vector<float>* x, std::vector<float>* y) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::uniform_int_distribution<int> cls(0, kClasses - 1);
  x->assign(static_cast<std::size_t>(n) * kDim, 0.0f);
  y->assign(static_cast<std::size_t>(n), 0.0f);
  for (int i = 0; i < n; ++i) {
    const int c = cls(rng);
    (*y)[i] = static_cast<float>(c);
    for (int d = 0; d < kDim; ++d) (*x)[i * kDim + d] = noise(rng);
    (*x)[i * kDim + 2 * c] += 1.5f;
    (*x)[i * kDim + 2 * c + 1] += 1.5f;
  }
}

std::unique_ptr<DataIter> ClusterIter(int n, int batch, std::uint64_t seed = 42) {
  std::vector<float> x, y;
  ClusterData(n, seed, &x, &y);
  return MakeNDArrayIter({NDArray::FromVector(x, TShape{n, kDim})}, {NDArray::FromVector(y, TShape{n})}, batch, false,
                         "pad");
}

std::vector<Context> Cpus(int k) {
  std::vector<Context> c;
  for (int i = 0; i < k; ++i) c.push_back(Context::CPU(i));
  return c;
}

std::unique_ptr<Module> MakeModule(int k) {
  Symbol net = models::MLP(kClasses, {16});
  if (k == 1) return std::make_unique<Module>(net);  // the single-context constructor: the reference path
  return std::make_unique<Module>(net, std::vector<std::string>{"data"}, std::vector<std::string>{"softmax_label"},
                                  Cpus(k));
}

FitOptions Options(int epochs, const std::string& kvstore = "local", UpdatePlace place = UpdatePlace::kAuto) {
  FitOptions o;
  o.update_place = place;
  o.optimizer.type = "sgd";
  o.optimizer.params = {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.0001"}};
  o.num_epoch = epochs;
  o.seed = 11;
  o.kvstore = kvstore;
  return o;
}

std::map<std::string, NDArray> Params(const Module& mod) {
  std::map<std::string, NDArray> args, aux;
  mod.GetParams(&args, &aux);
  return args;
}

constexpr double kAtol = 1e-4, kRtol = 1e-4;

// max |a - b| over every parameter; expects both to have the same names and shapes.
double MaxDiff(const std::map<std::string, NDArray>& a, const std::map<std::string, NDArray>& b, bool check_tol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  int failures = 0;
  for (const auto& [name, arr] : a) {
    const auto va = arr.ToVector<float>(), vb = b.at(name).ToVector<float>();
    EXPECT_EQ(va.size(), vb.size()) << name;
    for (std::size_t i = 0; i < va.size() && i < vb.size(); ++i) {
      const double d = std::abs(double(va[i]) - vb[i]);
      worst = std::max(worst, d);
      if (check_tol && d > kAtol + kRtol * std::abs(double(vb[i])) && ++failures <= 5) {
        ADD_FAILURE() << name << "[" << i << "]: " << va[i] << " vs " << vb[i] << " (tolerance " << kAtol << " + "
                      << kRtol << " * |value|)";
      }
    }
  }
  return worst;
}

TEST(ModuleDpTest, SplitsTheBatchAsMxnet) {
  auto mod = MakeModule(3);
  mod->Bind({TShape{32, kDim}}, {TShape{32}});
  ASSERT_EQ(mod->contexts().size(), 3u);
  // _split_input_slice(32, 3): 11, 11, 10.
  const std::int64_t rows[] = {11, 11, 10};
  for (int i = 0; i < 3; ++i) {
    Executor* e = mod->executor(i);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->arg_dict().at("data").shape(), (TShape{rows[i], kDim})) << i;
    EXPECT_EQ(e->arg_dict().at("softmax_label").shape(), (TShape{rows[i]})) << i;
  }
  EXPECT_EQ(mod->executor(), mod->executor(0));
  EXPECT_THROW(mod->executor(3), Error);
}

TEST(ModuleDpTest, ParametersMatchOneContext) {
  auto ref = MakeModule(1);
  auto it = ClusterIter(kSamples, kBatch);
  ref->Fit(it.get(), nullptr, Options(1));
  const auto want = Params(*ref);

  // Training moved the parameters far beyond the tolerance (else the comparison would say nothing).
  auto untrained = MakeModule(1);
  untrained->Bind({TShape{kBatch, kDim}}, {TShape{kBatch}});
  ResourceManager::Get(Engine::Get())->SeedRandom(11);
  untrained->InitParams(*Initializer::Create("xavier"));
  EXPECT_GT(MaxDiff(Params(*untrained), want, false), 1e-2);

  struct Case {
    int k;
    const char* kvstore;
    UpdatePlace place;
  };
  const UpdatePlace kStore = UpdatePlace::kStore, kDevices = UpdatePlace::kDevices;
  for (const Case c : {Case{2, "local", UpdatePlace::kAuto}, Case{3, "local", kStore}, Case{4, "local", kStore},
                       Case{4, "device", kStore}, Case{2, "local", kDevices}, Case{4, "local", kDevices},
                       Case{3, "device", kDevices}}) {
    const char* where = c.place == kDevices ? "update on the devices" : "update on the store";
    SCOPED_TRACE(std::to_string(c.k) + " contexts, kvstore " + c.kvstore + ", " + where);
    auto mod = MakeModule(c.k);
    auto it2 = ClusterIter(kSamples, kBatch);
    mod->Fit(it2.get(), nullptr, Options(1, c.kvstore, c.place));
    ASSERT_NE(mod->kvstore(), nullptr);
    EXPECT_EQ(mod->kvstore()->type(), c.kvstore);
    // kAuto: MXNet's size rule picks the store for parameters this small.
    EXPECT_EQ(mod->update_place(), c.place == kDevices ? kDevices : kStore);
    const double d = MaxDiff(Params(*mod), want, true);
    std::printf("%d contexts (%s, %s): max |difference| to one context %.3g\n", c.k, c.kvstore, where, d);
    // Every context holds the same weights.
    for (int i = 1; i < c.k; ++i) {
      for (const auto& [name, arr] : mod->executor(i)->arg_dict()) {
        if (name == "data" || name == "softmax_label") continue;
        EXPECT_EQ(arr.ToVector<float>(), mod->executor(0)->arg_dict().at(name).ToVector<float>()) << name << " on " << i;
      }
    }
  }
}

TEST(ModuleDpTest, LearnsAndScoresLikeOneContext) {
  auto mod = MakeModule(4);
  auto train = ClusterIter(kSamples, kBatch, 42);
  auto test = ClusterIter(200, 50, 43);  // another batch size: evaluated on the first context
  std::vector<double> eval_acc;
  FitOptions o = Options(4);
  o.epoch_end_callbacks.push_back(
      [&](int, const EvalMetric&, const EvalMetric* eval) { eval_acc.push_back(eval ? eval->Get() : -1); });
  mod->Fit(train.get(), test.get(), o);
  ASSERT_EQ(eval_acc.size(), 4u);
  // Chance is 25 %; the clusters are 1.5 sigma apart on two coordinates.
  EXPECT_GT(eval_acc.back(), 0.8);
  const auto [name, acc] = mod->Score(train.get(), "acc");
  EXPECT_EQ(name, "accuracy");
  EXPECT_GT(acc, 0.8);

  // The same parameters on one context must give the same predictions and score (the data-parallel path
  // concatenates the slices' outputs in order; a last batch with padding: 200 rows in batches of 32).
  auto one = MakeModule(1);
  auto pred_it = ClusterIter(200, kBatch, 43);
  one->Bind(pred_it->DataShapes(), pred_it->LabelShapes(), false);
  std::map<std::string, NDArray> args, aux;
  mod->GetParams(&args, &aux);
  one->SetParams(args, aux);
  auto dp = MakeModule(4);
  dp->Bind(pred_it->DataShapes(), pred_it->LabelShapes(), false);
  dp->SetParams(args, aux);
  const auto p1 = one->Predict(pred_it.get());
  const auto p4 = dp->Predict(pred_it.get());
  ASSERT_EQ(p1.size(), 1u);
  ASSERT_EQ(p4.size(), 1u);
  EXPECT_EQ(p4[0].shape(), (TShape{200, kClasses}));
  const auto v1 = p1[0].ToVector<float>(), v4 = p4[0].ToVector<float>();
  ASSERT_EQ(v1.size(), v4.size());
  // Each row is computed by the same operators on the same values on either path.
  for (std::size_t i = 0; i < v1.size(); ++i) EXPECT_NEAR(v1[i], v4[i], 1e-6) << i;
  EXPECT_NEAR(one->Score(pred_it.get(), "ce").second, dp->Score(pred_it.get(), "ce").second, 1e-6);
}

TEST(ModuleDpTest, UpdatePlaceFollowsMxnetsSizeRule) {
  const std::int64_t big = std::int64_t{1} << 24;  // 16M elements: MXNet's threshold
  EXPECT_EQ(ResolveUpdatePlace(UpdatePlace::kAuto, "local", big), UpdatePlace::kStore);
  EXPECT_EQ(ResolveUpdatePlace(UpdatePlace::kAuto, "local", big + 1), UpdatePlace::kDevices);
  EXPECT_EQ(ResolveUpdatePlace(UpdatePlace::kAuto, "device", big + 1), UpdatePlace::kStore);
  EXPECT_EQ(ResolveUpdatePlace(UpdatePlace::kStore, "local", big + 1), UpdatePlace::kStore);
  EXPECT_EQ(ResolveUpdatePlace(UpdatePlace::kDevices, "device", 1), UpdatePlace::kDevices);
}

// Updates on the devices keep one optimizer state per parameter and device (MXNet's index * devices + k);
// a checkpoint of them resumes exactly.
TEST(ModuleDpTest, UpdateOnTheDevicesResumesExactly) {
  const fs::path dir = fs::temp_directory_path() / ("troupe_module_dp_dev_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string prefix = (dir / "mlp").string();
  FitOptions o = Options(2, "local", UpdatePlace::kDevices);
  o.checkpoint_prefix = prefix;
  auto full = MakeModule(2);
  auto it = ClusterIter(kSamples / 2, kBatch);
  full->Fit(it.get(), nullptr, o);
  auto resumed = MakeModule(2);
  o.begin_epoch = 1;
  auto it2 = ClusterIter(kSamples / 2, kBatch);
  resumed->Fit(it2.get(), nullptr, o);
  EXPECT_EQ(resumed->update_place(), UpdatePlace::kDevices);
  EXPECT_EQ(MaxDiff(Params(*resumed), Params(*full), true), 0.0);
  fs::remove_all(dir);
}

TEST(ModuleDpTest, ResumeMatchesUninterrupted) {
  const fs::path dir = fs::temp_directory_path() / ("troupe_module_dp_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string prefix = (dir / "mlp").string();
  auto full = MakeModule(2);
  auto it = ClusterIter(kSamples / 2, kBatch);
  FitOptions o = Options(2);
  o.checkpoint_prefix = prefix;
  full->Fit(it.get(), nullptr, o);
  ASSERT_TRUE(fs::exists(prefix + "-0001.params"));
  ASSERT_TRUE(fs::exists(prefix + "-0001.states"));

  auto resumed = MakeModule(2);
  o.begin_epoch = 1;
  o.checkpoint_prefix = prefix;
  auto it2 = ClusterIter(kSamples / 2, kBatch);
  resumed->Fit(it2.get(), nullptr, o);
  // Same operations in the same order on the same values: equal.
  EXPECT_EQ(MaxDiff(Params(*resumed), Params(*full), true), 0.0);
  fs::remove_all(dir);
}

// SetParams after training replaces the store (its weights can only be set by Init); the optimizer's states
// (momentum) must survive that, so training on continues exactly as without the SetParams.
TEST(ModuleDpTest, SetParamsKeepsTheOptimizerStates) {
  auto straight = MakeModule(2);
  auto it = ClusterIter(kSamples / 2, kBatch);
  straight->Fit(it.get(), nullptr, Options(2));

  auto split = MakeModule(2);
  split->Fit(it.get(), nullptr, Options(1));
  KVStore* first_store = split->kvstore();
  ASSERT_NE(first_store, nullptr);
  std::map<std::string, NDArray> args, aux;
  split->GetParams(&args, &aux);
  split->SetParams(args, aux);
  EXPECT_EQ(split->kvstore(), nullptr);
  // Epoch 0 again (no Dropout: the seed does not matter) on the parameters and momentum after epoch 0.
  split->Fit(it.get(), nullptr, Options(1));
  ASSERT_NE(split->kvstore(), nullptr);
  EXPECT_EQ(MaxDiff(Params(*split), Params(*straight), true), 0.0);
}

TEST(ModuleDpTest, Errors) {
  auto mod = MakeModule(4);
  test::ExpectError([&] { mod->Bind({TShape{3, kDim}}, {TShape{3}}); }, {"batch size 3", "4"});
  EXPECT_FALSE(mod->bound());
  test::ExpectError(
      [] {
        Module m(models::MLP(kClasses, {16}), {"data"}, {"softmax_label"}, std::vector<Context>{});
      },
      {"empty context list"});
  // A batch of exactly the number of contexts works (one row each).
  mod->Bind({TShape{4, kDim}}, {TShape{4}});
  EXPECT_TRUE(mod->bound());
  EXPECT_EQ(mod->executor(3)->arg_dict().at("data").shape(), (TShape{1, kDim}));
}

// Two dist_sync workers, each with half of every batch (rows [16 r, 16 r + 16) of each batch of 32), against
// one module on the whole batches: the same parameters after an epoch (the tolerance of the file comment:
// two partial sums of 16 rows against one of 32). Weight decay 0.05 makes the multipliers matter: a server
// that decayed the biases too would end elsewhere.
TEST(ModuleDpTest, DistSyncWorkersEndWithOneProcessParameters) {
  FitOptions o = Options(1);
  o.optimizer.params = {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.05"}};
  std::vector<float> x, y;
  ClusterData(kSamples, 42, &x, &y);

  auto ref = MakeModule(1);
  ref->Bind({TShape{kBatch, kDim}}, {TShape{kBatch}});
  ref->InitParams(*Initializer::Create("xavier"));
  const auto init = Params(*ref);
  auto ref_iter = ClusterIter(kSamples, kBatch);
  ref->Fit(ref_iter.get(), nullptr, o);
  const auto want = Params(*ref);
  ASSERT_GT(MaxDiff(want, init, false), 1e-2);  // training moved the weights

  DistConfig config;
  config.num_servers = 1;
  config.num_workers = 2;
  config.token = "module-dist-test";
  config.heartbeat_interval_ms = 200;
  config.heartbeat_timeout_ms = 30000;
  config.connect_timeout_ms = 30000;
  auto scheduler = DistNode::StartScheduler(config);
  config.root_port = scheduler->port();
  auto server = DistNode::StartServer(config);
  std::vector<std::map<std::string, NDArray>> got(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      try {
        std::shared_ptr<KVStore> kv = CreateDistKVStore("dist_sync", config);
        const int r = kv->rank();
        constexpr int kHalf = kBatch / 2;
        std::vector<float> xs, ys;
        for (int row = 0; row < kSamples; ++row) {
          if ((row % kBatch) / kHalf != r) continue;
          xs.insert(xs.end(), x.begin() + row * kDim, x.begin() + (row + 1) * kDim);
          ys.push_back(y[static_cast<std::size_t>(row)]);
        }
        const int n = static_cast<int>(ys.size());
        auto iter = MakeNDArrayIter({NDArray::FromVector(xs, TShape{n, kDim})}, {NDArray::FromVector(ys, TShape{n})},
                                    kHalf, false, "pad");
        auto mod = MakeModule(1);
        mod->Bind({TShape{kHalf, kDim}}, {TShape{kHalf}});
        mod->InitParams(*Initializer::Create("zero"), init);  // worker 0's are the servers' anyway
        FitOptions wo = o;
        wo.store = kv;
        mod->Fit(iter.get(), nullptr, wo);
        got[static_cast<std::size_t>(r)] = Params(*mod);
        // The servers hold the parameters now: replacing them here would split the cluster.
        try {
          mod->SetParams(init, {});
          errors[static_cast<std::size_t>(r)] = "SetParams after training did not throw";
        } catch (const Error& e) {
          if (std::string(e.what()).find("cannot be replaced") == std::string::npos) {
            errors[static_cast<std::size_t>(r)] = std::string("SetParams: unexpected message: ") + e.what();
          }
        }
        kv->Finalize();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (auto& w : workers) w.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("worker " + std::to_string(r));
    ASSERT_FALSE(got[static_cast<std::size_t>(r)].empty());
    MaxDiff(got[static_cast<std::size_t>(r)], want, true);
  }
  EXPECT_EQ(scheduler->Wait(), 0) << scheduler->message();
  EXPECT_EQ(server->Wait(), 0) << server->message();
}

// Loss scaling on a cluster: two dist_sync workers, each with its own LossScaler. A step where only worker
// 1's gradients overflow (a NaN in its batch) is skipped on both, because each checks the summed gradients:
// neither moves a parameter and both halve their scale; the steps around it are taken, and the workers'
// parameters stay identical.
TEST(ModuleDpTest, DistSyncLossScalingSkipsAnOverflowOnEveryWorker) {
  std::vector<float> x, y;
  ClusterData(2 * kBatch, 5, &x, &y);
  DistConfig config;
  config.num_servers = 1;
  config.num_workers = 2;
  config.token = "module-dist-loss-scale";
  config.heartbeat_interval_ms = 200;
  config.heartbeat_timeout_ms = 30000;
  config.connect_timeout_ms = 30000;
  auto scheduler = DistNode::StartScheduler(config);
  config.root_port = scheduler->port();
  auto server = DistNode::StartServer(config);
  struct Seen {
    std::map<std::string, NDArray> after[3];
    double scale[3] = {0, 0, 0};
    bool own_grads_finite_at_overflow = false;
    UpdatePlace place = UpdatePlace::kAuto;
    std::string error;
  };
  std::vector<Seen> seen(2);
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      Seen& me = seen[static_cast<std::size_t>(t)];
      try {
        std::shared_ptr<KVStore> kv = CreateDistKVStore("dist_sync", config);
        const int r = kv->rank();
        Seen& out = seen[static_cast<std::size_t>(r)];
        auto mod = MakeModule(1);
        mod->Bind({TShape{kBatch, kDim}}, {TShape{kBatch}});
        ResourceManager::Get()->SeedRandom(3);
        mod->InitParams(*Initializer::Create("xavier"));
        mod->SetKVStore(kv);
        LossScaler::Options lo;
        lo.init_scale = 1024;
        mod->SetLossScaler(std::make_shared<LossScaler>(lo));
        mod->InitOptimizer({"sgd", {{"learning_rate", "0.1"}, {"rescale_grad", "0.015625"}}});
        for (int step = 0; step < 3; ++step) {
          std::vector<float> xs(x.begin() + r * kBatch * kDim, x.begin() + (r + 1) * kBatch * kDim);
          std::vector<float> ys(y.begin() + r * kBatch, y.begin() + (r + 1) * kBatch);
          if (step == 1 && r == 1) xs[7] = std::nanf("");
          DataBatch batch;
          batch.data = {NDArray::FromVector(xs, TShape{kBatch, kDim})};
          batch.label = {NDArray::FromVector(ys, TShape{kBatch})};
          mod->Forward(batch, true);
          mod->Backward();
          if (step == 1 && r == 0) {
            bool finite = true;
            for (const NDArray& g : mod->executor()->grad_arrays()) {
              if (g.is_none()) continue;
              for (float v : g.ToVector<float>()) finite = finite && std::isfinite(v);
            }
            out.own_grads_finite_at_overflow = finite;
          }
          mod->Update();
          out.after[step] = Params(*mod);
          out.scale[step] = mod->loss_scaler()->scale();
        }
        out.place = mod->update_place();
        kv->Finalize();
      } catch (const std::exception& e) {
        me.error = e.what();
      }
    });
  }
  for (auto& w : workers) w.join();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("worker " + std::to_string(r));
    const Seen& s = seen[static_cast<std::size_t>(r)];
    ASSERT_EQ(s.error, "");
    EXPECT_EQ(s.place, UpdatePlace::kDevices);  // the workers run the optimizer
    EXPECT_EQ(s.scale[0], 1024.0);
    EXPECT_EQ(s.scale[1], 512.0);  // halved on both workers
    EXPECT_EQ(s.scale[2], 512.0);
    EXPECT_EQ(MaxDiff(s.after[1], s.after[0], false), 0.0);  // the overflowing step moved nothing
    EXPECT_GT(MaxDiff(s.after[2], s.after[1], false), 1e-4);  // the next one trains
    EXPECT_EQ(MaxDiff(s.after[2], seen[0].after[2], false), 0.0);
  }
  EXPECT_TRUE(seen[0].own_grads_finite_at_overflow);  // worker 0 skipped for worker 1's overflow
  EXPECT_EQ(scheduler->Wait(), 0) << scheduler->message();
  EXPECT_EQ(server->Wait(), 0) << server->message();
}

}  // namespace
}  // namespace troupe
