// GPU paths of the actor engine: functions pushed to Context::GPU(0) get a cudaStream_t* in RunContext,
// run on the lane their property selects (compute, copy-in, copy-out, priority), and complete when their
// stream work has finished (tracked with CUDA events). Skips when the machine has no GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "actors/runtime.h"
#include "engine/engine.h"

namespace troupe {
namespace {

__global__ void AddOne(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

__global__ void Scale(int* data, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= k;
}

class EngineGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

cudaStream_t StreamOf(RunContext rctx) { return *static_cast<cudaStream_t*>(rctx.stream); }

TEST_F(EngineGpuTest, ChainOfKernelsCopiesAndWait) {
  EngineConfig cfg;
  auto engine = Engine::Create(cfg);
  const int n = 1 << 20;
  int* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(int)), cudaSuccess);
  std::vector<int> host(n, 3), out(n, 0);
  VarHandle v = engine->NewVariable();
  const Context gpu = Context::GPU(0);
  engine->PushSync(
      [&](RunContext rctx) {
        ASSERT_NE(rctx.stream, nullptr);
        cudaMemcpyAsync(dev, host.data(), n * sizeof(int), cudaMemcpyHostToDevice, StreamOf(rctx));
      },
      gpu, {}, {v}, FnProperty::kCopyToGPU, 0, "upload");
  const int kSteps = 200;
  for (int i = 0; i < kSteps; ++i) {
    engine->PushSync([&](RunContext rctx) { AddOne<<<(n + 255) / 256, 256, 0, StreamOf(rctx)>>>(dev, n); }, gpu,
                     {}, {v}, FnProperty::kNormal, 0, "add_one");
  }
  engine->PushSync([&](RunContext rctx) { Scale<<<(n + 255) / 256, 256, 0, StreamOf(rctx)>>>(dev, n, 2); }, gpu,
                   {}, {v}, FnProperty::kGPUPrioritized, 0, "scale");
  engine->PushSync(
      [&](RunContext rctx) {
        cudaMemcpyAsync(out.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost, StreamOf(rctx));
      },
      gpu, {v}, {}, FnProperty::kCopyFromGPU, 0, "download");
  engine->WaitForVar(v);  // completes only when the copy's stream work is done
  for (int i = 0; i < n; i += 4097) ASSERT_EQ(out[i], (3 + kSteps) * 2) << "at " << i;
  EXPECT_EQ(v->version(), static_cast<std::uint64_t>(kSteps + 2));
  auto stats = engine->Stats();
  bool saw_gpu = false;
  for (const auto& d : stats.devices) saw_gpu |= d.ctx == gpu;
  EXPECT_TRUE(saw_gpu);
  cudaFree(dev);
}

TEST_F(EngineGpuTest, KernelErrorPoisonsVariable) {
  auto engine = Engine::Create(EngineConfig{});
  VarHandle v = engine->NewVariable();
  engine->PushSync([](RunContext) { throw Error("launch failed on purpose"); }, Context::GPU(0), {}, {v});
  int ran = 0;
  engine->PushSync([&](RunContext) { ++ran; }, Context::GPU(0), {v}, {});
  EXPECT_THROW(engine->WaitForVar(v), Error);
  engine->WaitForAll();  // already reported through WaitForVar
  EXPECT_EQ(ran, 0);
}

TEST_F(EngineGpuTest, MatchesCpuResult) {
  // The same dependent computation on CPU and GPU gives the same numbers.
  auto engine = Engine::Create(EngineConfig{});
  const int n = 4096;
  std::vector<int> cpu(n), from_gpu(n);
  for (int i = 0; i < n; ++i) cpu[i] = i;
  int* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(int)), cudaSuccess);
  VarHandle a = engine->NewVariable(), b = engine->NewVariable();
  // The upload reads `cpu`, which the CPU functions below write under `a`: it reads `a` too, or they may change
  // the host values before the copy has read them.
  engine->PushSync([&](RunContext r) { cudaMemcpyAsync(dev, cpu.data(), n * 4, cudaMemcpyHostToDevice, StreamOf(r)); },
                   Context::GPU(0), {a}, {b}, FnProperty::kCopyToGPU);
  for (int k = 2; k < 5; ++k) {
    engine->PushSync([&, k](RunContext) { for (int& x : cpu) x = x * k + 1; }, Context::CPU(0), {}, {a});
    engine->PushSync([&, k](RunContext r) {
      Scale<<<(n + 255) / 256, 256, 0, StreamOf(r)>>>(dev, n, k);
      AddOne<<<(n + 255) / 256, 256, 0, StreamOf(r)>>>(dev, n);
    }, Context::GPU(0), {}, {b});
  }
  engine->PushSync([&](RunContext r) { cudaMemcpyAsync(from_gpu.data(), dev, n * 4, cudaMemcpyDeviceToHost, StreamOf(r)); },
                   Context::GPU(0), {b}, {}, FnProperty::kCopyFromGPU);
  engine->WaitForAll();
  EXPECT_EQ(cpu, from_gpu);
  cudaFree(dev);
}

}  // namespace
}  // namespace troupe
