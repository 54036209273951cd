// The GPU backend loaded on demand (base/gpu_module.h). Three CTest entries run this one program
// (tests/base/CMakeLists.txt), each in a fresh process, because what is loaded is process-wide:
//   GpuModuleCpuOnly.*  CPU work (NDArrays, operators, an optimizer, a local KVStore) maps no CUDA library
//                       and does not load the backend;
//   GpuModule.*         asking for a GPU loads it (in a CUDA build) and, without a GPU, fails with a clear
//                       error; the backend registers the GPU operators; its tables bind to its own code;
//   GpuModuleMissing.*  with TROUPE_GPU_MODULE naming a file that is not there, the error names the file and
//                       quotes the dynamic linker.
#include "base/gpu_module.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "base/error.h"
#include "kvstore/kvstore.h"
#include "op/imperative.h"
#include "op/operator.h"
#include "op/optimizer.h"
#include "tensor/detail/kernels.h"
#include "tensor/internal/gpu_table.h"
#include "tensor/ndarray.h"
#include "tensor/storage.h"
#include "tests/common/error_text.h"

namespace troupe {
namespace {

// The lines of /proc/self/maps that name one of the CUDA libraries (or the backend itself).
std::vector<std::string> CudaMappings() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> hits;
  for (std::string line; std::getline(maps, line);) {
    for (const char* lib : {"libcudart", "libcublas", "libcudnn", "libnccl", "libtroupe_gpu"}) {
      if (line.find(lib) != std::string::npos) {
        hits.push_back(line);
        break;
      }
    }
  }
  return hits;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// ---------------------------------------------------------------- CPU work never maps CUDA
TEST(GpuModuleCpuOnly, CpuWorkMapsNoCudaLibrary) {
  ASSERT_FALSE(GpuModuleLoaded());
  const Context cpu = Context::CPU();
  NDArray x = NDArray::FromVector<float>({1, 2, 3, 4, 5, 6}, TShape{2, 3}, cpu);
  NDArray w = NDArray::FromVector<float>({1, 0, 0, 0, 1, 0}, TShape{2, 3}, cpu);
  NDArray b = NDArray::Zeros(TShape{2}, cpu);
  std::vector<NDArray> fc = Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "2"}});
  std::vector<NDArray> act = Invoke("Activation", fc, {{"act_type", "relu"}});
  NDArray img = NDArray::Ones(TShape{1, 1, 5, 5}, cpu);
  NDArray k = NDArray::Ones(TShape{1, 1, 3, 3}, cpu);
  std::vector<NDArray> conv =
      Invoke("Convolution", {img, k}, {{"kernel", "(3,3)"}, {"num_filter", "1"}, {"no_bias", "True"}});
  NDArray prod = Dot(x, w, false, true);
  auto opt = Optimizer::Create(OptimizerConfig{"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}});
  NDArray grad = NDArray::Ones(TShape{2, 3}, cpu);
  opt->Update(0, w, grad);
  auto kv = KVStore::Create("local");
  kv->Init(std::vector<int>{0}, {NDArray::Zeros(TShape{2, 3}, cpu)});
  kv->Push(std::vector<int>{0}, {grad});
  NDArray pulled = NDArray::Zeros(TShape{2, 3}, cpu);
  kv->Pull(std::vector<int>{0}, {pulled});

  EXPECT_EQ(act[0].ToVector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(conv[0].ToVector<float>(), std::vector<float>(9, 9.0f));
  EXPECT_EQ(prod.ToVector<float>(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(pulled.ToVector<float>(), std::vector<float>(6, 1.0f));
  EXPECT_FALSE(GpuModuleLoaded());
  const std::vector<std::string> cuda = CudaMappings();
  EXPECT_TRUE(cuda.empty()) << "CPU work mapped:\n" << Joined(cuda);
}

// ---------------------------------------------------------------- asking for a GPU
TEST(GpuModule, AskingForAGpuLoadsTheBackendOrSaysThereIsNone) {
  const int gpus = Runtime::GpuCount();
  if (!GpuModuleBuilt()) {
    EXPECT_EQ(gpus, 0);
    EXPECT_FALSE(GpuModuleLoaded());
    const std::string e = ErrorText([] { LoadGpuModule(); });
    EXPECT_NE(e.find("no CUDA"), std::string::npos) << e;
    EXPECT_NE(e.find("cpu:0"), std::string::npos) << e;
    return;
  }
  ASSERT_TRUE(GpuModuleLoaded()) << GpuModuleError();
  EXPECT_EQ(GpuModuleError(), "");
  EXPECT_NE(GpuModulePath().find("libtroupe_gpu"), std::string::npos) << GpuModulePath();
  EXPECT_FALSE(CudaMappings().empty());
  if (gpus > 0) return;  // the rest is about a machine without a GPU
  const std::string storage = ErrorText([] { NDArray::Zeros(TShape{4}, Context::GPU(0)); });
  EXPECT_NE(storage.find("gpu(0)"), std::string::npos) << storage;
  EXPECT_NE(storage.find("no GPU"), std::string::npos) << storage;
  EXPECT_NE(storage.find("cpu:0"), std::string::npos) << storage;
  const std::string pinned = ErrorText([] { Storage::Get()->Alloc(16, Context::CPUPinned(0)); });
  EXPECT_NE(pinned.find("cpu_pinned(0)"), std::string::npos) << pinned;
  auto rt = Runtime::Create(RuntimeConfig{});
  const std::string device = ErrorText([&] { rt->GetDevice(Context::GPU(0)); });
  EXPECT_NE(device.find("gpu(0)"), std::string::npos) << device;
  EXPECT_NE(device.find("0 GPU"), std::string::npos) << device;
  const std::string nccl = ErrorText([] { KVStore::Create("nccl"); });
  EXPECT_NE(nccl.find("needs GPUs"), std::string::npos) << nccl;
}

TEST(GpuModule, BackendRegistersTheGpuOperators) {
  if (!GpuModuleBuilt()) {
    EXPECT_FALSE(HasGpuImplementation("FullyConnected"));
    const std::string e = ErrorText([] {
      auto prop = OperatorProperty::Create("Activation");
      prop->Init({{"act_type", "relu"}});
      prop->CreateOperator(Context::GPU(0));
    });
    EXPECT_NE(e.find("no CUDA"), std::string::npos) << e;
    return;
  }
  // The operators with a .cu file (op/CMakeLists.txt), registered by the backend's static initialisers:
  // HasGpuImplementation loads it first.
  for (const char* op : {"FullyConnected", "Convolution", "Pooling", "Activation", "LeakyReLU", "BatchNorm", "Dropout",
                         "SoftmaxOutput", "LinearRegressionOutput", "Reshape", "Concat", "Embedding", "elemwise_add",
                         "relu", "broadcast_maximum", "clip", "Cast", "where", "add_n", "transpose", "slice_axis",
                         "dot", "batch_dot", "LayerNorm", "max", "_zeros", "_arange", "argmax", "pick", "SequenceMask",
                         "_contrib_div_sqrt_dim", "take", "gather_nd", "one_hot"}) {
    EXPECT_TRUE(HasGpuImplementation(op)) << op;
  }
  EXPECT_TRUE(GpuModuleLoaded());
  // An operator without GPU code still says so, by name.
  EXPECT_FALSE(HasGpuImplementation("RNN"));
}

TEST(GpuModule, TablesBindToTheBackendNotTheForwarders) {
  if (!GpuModuleBuilt()) GTEST_SKIP() << "a build without CUDA has no backend";
  LoadGpuModule();
  using Entry = const internal::GpuKernelTable* (*)();
  const internal::GpuKernelTable* table =
      reinterpret_cast<Entry>(internal::GpuModuleSymbol(internal::kGpuKernelTableSymbol))();
  // -Bsymbolic-functions: &GpuGemm inside the backend is its own, not libtroupe_tensor's forwarder of the
  // same name (which would call itself through the table forever).
  for (void* fn : {reinterpret_cast<void*>(table->gemm), reinterpret_cast<void*>(table->malloc),
                   reinterpret_cast<void*>(table->copy)}) {
    Dl_info info;
    ASSERT_NE(dladdr(fn, &info), 0);
    EXPECT_NE(std::string(info.dli_fname).find("libtroupe_gpu"), std::string::npos) << info.dli_fname;
  }
  EXPECT_NE(reinterpret_cast<void*>(table->gemm), reinterpret_cast<void*>(&internal::GpuGemm));
  EXPECT_THROW(internal::GpuModuleSymbol("troupe_no_such_entry"), Error);
}

// ---------------------------------------------------------------- the backend cannot be loaded
TEST(GpuModuleMissing, ErrorNamesTheFileAndTheDynamicLinkersReason) {
  if (!GpuModuleBuilt()) GTEST_SKIP() << "a build without CUDA has no backend";
  const char* path = std::getenv("TROUPE_GPU_MODULE");
  ASSERT_NE(path, nullptr) << "run with TROUPE_GPU_MODULE naming a missing file (tests/base/CMakeLists.txt)";
  const std::string e = ErrorText([] { LoadGpuModule(); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("cannot open shared object file"), std::string::npos) << e;  // dlerror's text
  EXPECT_NE(e.find("cpu:0"), std::string::npos) << e;
  EXPECT_FALSE(GpuModuleLoaded());
  EXPECT_EQ(Runtime::GpuCount(), 0);
  EXPECT_EQ(GpuModuleError(), e);  // remembered, not retried
  const std::string storage = ErrorText([] { NDArray::Zeros(TShape{4}, Context::GPU(0)); });
  EXPECT_NE(storage.find("cannot open shared object file"), std::string::npos) << storage;
  const std::string op = ErrorText([] {
    auto prop = OperatorProperty::Create("Activation");
    prop->Init({{"act_type", "relu"}});
    prop->CreateOperator(Context::GPU(0));
  });
  EXPECT_NE(op.find("Activation has no implementation for gpu(0)"), std::string::npos) << op;
  EXPECT_NE(op.find("cannot open shared object file"), std::string::npos) << op;
  EXPECT_FALSE(HasGpuImplementation("FullyConnected"));
  const std::string nccl = ErrorText([] { KVStore::Create("nccl"); });
  EXPECT_NE(nccl.find("cannot open shared object file"), std::string::npos) << nccl;
}

}  // namespace
}  // namespace troupe
