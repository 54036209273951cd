// `troupe bench train-dist`: dist_sync training across processes against training the same total batch in
// one process, in the same run (what the network costs). Models (--models): the MLP of the Fashion-MNIST
// examples (about 0.1 M parameters, 6 keys) and ResNet-18 (models::ResNet(18), the thumbnail stem for 28x28:
// about 11.2 M floats, 62 keys). Wires (--net): loopback, netns (each process in a network namespace of its
// own on a shaped bridge: bench/common/netns.h), or both in one command; servers: each S in --servers.
//
// What is measured: a step = Forward(true), Backward, Update of the Module on one preloaded Fashion-MNIST
// batch (t10k files; copying the batch in is part of the step, reading the files is not), timed over
// --steps steps per run, --repeat runs (median), after 5 warm-up steps.
//   single process:  one Module, batch --batch-size B, SGD (lr 0.05, momentum 0.9) updated in process;
//   dist_sync, W workers (for W in --workers): a scheduler, S servers and W worker processes (copies of this
//     executable), each worker a Module with batch B / W on its own batches, the server running the
//     optimizer (rescale 1 / B); a step ends when the worker has pulled every updated weight. The cluster
//     trains B images per step (the slower worker sets the pace).
// Figures: images/s = B / seconds per step; the ratio = dist images/s / single-process images/s (on 2
// cores more than 1 is not expected: what matters is what the network and the server cost).
//
// In-run checks: every worker of a run ends with the same parameters (a checksum of every weight; dist_sync
// keeps them equal), training works (accuracy over the preloaded batches above chance after the timed steps,
// except with --quick; ResNet-18 is scored with each batch's own BatchNorm statistics, its moving ones being
// young after a few steps), and every process exits 0.
#pragma once

#include <string>
#include <vector>

#include "bench/common/multi_process.h"
#include "bench/common/registry.h"

namespace troupe::bench {

struct TrainDistBenchOptions {
  std::string json_path;      // required for the coordinator
  bool quick = false;         // few steps, one run: a smoke run for CTest
  int repeat = 0;             // timed runs; 0: kTrainDistDefaultRepeat (1 with quick)
  int steps = 0;              // steps per run; 0: 100 for mlp, 5 for resnet18 (10 and 2 with quick)
  int batch_size = 100;       // the total batch of a step
  std::vector<std::string> models = {"mlp"};  // "mlp", "resnet18" (each measured in turn)
  std::vector<int> workers = {1, 2};
  std::vector<int> servers = {1};  // server counts to measure
  NetOptions net;                  // loopback, netns or both; the shaping of netns
  std::string mnist_dir = "/usr/share/datasets/fashion-mnist";
  std::string role;           // hidden: "worker" for the processes the coordinator starts
};

inline constexpr int kTrainDistDefaultRepeat = 5;

int RunTrainDistBench(const TrainDistBenchOptions& options);

// `troupe bench train-dist`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark TrainDistBenchmark();

}  // namespace troupe::bench
