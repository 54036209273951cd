// `troupe bench <workload>` (see bench_command.h).
#include "tools/bench_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>
#include <string>

namespace troupe::tools {
namespace {

constexpr const char* kEngineDescription =
    "Measure the dependency engine. Four workloads, each run once untimed (warm-up) and then --repeat times, "
    "every run with an in-run check that all functions ran exactly once and in an order the engine's rule "
    "allows: (a) chain: a dependent chain of no-op pushes (PushSync, and one pre-built NewOperator pushed N "
    "times), in ns per function; (b) independent: no-op pushes writing one of 1024 variables (and with no "
    "variables), in functions per second; (c) reader_writer: one writer then K readers of a variable, "
    "repeated, in ns per function; (d) random_mixed: random read/write sets over 100 variables, compared "
    "with a sequential model, in functions per second. They run on the actor engine for every --workers x "
    "--shards value, on the naive engine, and, in the same run, the anchor: a oneTBB flow graph (built one "
    "node and edge per pushed function, and pre-built) and a task_group, limited to the same number of "
    "threads. The JSON holds every figure, the anchor's, their ratio and the targets ((a) <= 2x TBB, "
    "(b) >= 1e6 functions/s). Progress goes to stderr, a table to stdout. Exit status: 0 when every check "
    "passed, 1 when one failed (the JSON says which, with \"ok\": false), 2 on bad usage, 3 when a run hung "
    "longer than --timeout.";

constexpr const char* kEngineExamples =
    "Examples:\n"
    "  troupe bench engine --json engine.json\n"
    "      the full run (about 10-30 s on 2 cores)\n"
    "  troupe bench engine --quick --json /tmp/smoke.json\n"
    "      tiny sizes: checks that the harness and the in-run checks pass\n"
    "  troupe bench engine --workers 1,2,4 --shards 1,2 --repeat 7 --json sweep.json\n"
    "      sweep worker and dependency-shard counts of the actor engine\n"
    "  troupe bench engine --engines actor,tbb --workloads chain --functions 1000000 --json chain.json\n"
    "      only the chain, only the actor engine and its TBB anchor\n"
    "  TROUPE_WORKER_SPIN_US=0 troupe bench engine --json nospin.json\n"
    "      TROUPE_* settings apply to the engines (the resolved config is in the JSON)";

constexpr const char* kNDArrayDescription =
    "Measure the NDArray layer against the library calls it is built on, each anchor measured in the same run "
    "and alternated with its figure. Every figure runs once untimed (warm-up, which also sizes a run to "
    "--min-time seconds or at least 3 calls) and then --repeat times; the median and the best run are reported. "
    "(a) dot: C = Dot(A, B) on float32 n x n CPU arrays (and Dot into an existing array), push + WaitToRead per "
    "call, against cblas_sgemm (row-major, no transposes) on plain buffers with the same OpenBLAS thread count "
    "as the engine's workers, in GFLOP/s; check: the results agree (relative error < 1e-4). (b) add: C = A + B "
    "and A += B on float32 arrays against memcpy of the same size, in GB/s of bytes touched (3 x size for the "
    "add, 2 x size for memcpy); check: every value. (c) alloc: Storage::Alloc + Free of a repeated size on an "
    "independent pool (exact and round policies) against malloc + free, with and without touching one byte "
    "per 4 KiB page, and constructing + destroying an NDArray of that size, in ns per pair; check: every timed "
    "allocation was a pool hit. The JSON holds every figure, the anchors, the ratios and the targets (Dot >= "
    "0.95 x sgemm at 1024^3; pool faster than malloc). Progress goes to stderr, a table to stdout. Exit "
    "status: 0 when every check passed (targets are reported, not enforced), 1 when one failed (the JSON says "
    "which, with \"ok\": false), 2 on bad usage.";

constexpr const char* kNDArrayExamples =
    "Examples:\n"
    "  troupe bench ndarray --json ndarray.json\n"
    "      the full run (about 1-2 minutes on 2 cores)\n"
    "  troupe bench ndarray --quick --json /tmp/smoke.json\n"
    "      tiny sizes: checks that the harness and the in-run checks pass\n"
    "  troupe bench ndarray --workloads dot --sizes 512,1024,2048 --repeat 7 --json dot.json\n"
    "      only Dot against cblas_sgemm, on three sizes\n"
    "  troupe bench ndarray --workloads alloc --alloc-sizes 4KiB,32MiB,33MiB --json alloc.json\n"
    "      the pool against malloc around glibc's 32 MiB mmap threshold\n"
    "  TROUPE_CPU_WORKERS=2 TROUPE_BLAS_THREADS=1 troupe bench ndarray --json w2.json\n"
    "      TROUPE_* settings apply to the engine and its OpenBLAS thread count (both are in the JSON)";

constexpr const char* kOpsDescription =
    "Measure the dense-layer operators, run as the executor runs them (OperatorRunner: Forward and Backward "
    "pushed to the engine, then WaitToRead on the output and the gradients), against the BLAS products they "
    "are made of, each anchor measured in the same run and alternated with its figure. Every figure runs once "
    "untimed (warm-up, which also sizes a run to --min-time seconds or at least 3 calls) and then --repeat "
    "times; the median and the best run are reported. (a) fc: FullyConnected forward + backward (data, weight "
    "and bias gradients) on float32 CPU arrays, batch x in x out = 64x784x128, 128x1024x1024 and "
    "256x4096x1024, against its three raw cblas_sgemm calls (Y = X W^T, dX = dY W, dW = dY^T X) on plain "
    "buffers with the engine's OpenBLAS thread count, in GFLOP/s (6 x batch x in x out per call); check: the "
    "output and the gradients equal the anchor's (relative error < 1e-4). (b) conv: Convolution forward + "
    "backward for a LeNet-sized layer (batch 64, 1 -> 20 channels, 28x28, kernel 5) and a ResNet-sized one "
    "(batch 32, 64 -> 64 channels, 56x56, kernel 3, pad 1) against its sgemm bound: the cblas_sgemm calls of "
    "its im2col shapes alone (per image: forward, backward-data, backward-weight; no im2col), in GFLOP/s; "
    "check: sampled entries of the output and the gradients against a direct convolution in double. The "
    "ratio is anchor time / operator time; the JSON holds every figure, the anchors, the ratios and the "
    "targets (fc >= 0.9, conv >= 0.7). With --ctx gpu the same layers run on GPU 0 and only their GFLOP/s is "
    "reported. Progress goes to stderr, a table to stdout. Exit status: 0 when every check passed (targets are "
    "reported, not enforced), 1 when one failed (the JSON says which, with \"ok\": false), 2 on bad usage "
    "(and for --ctx gpu without a CUDA device).";

constexpr const char* kOpsExamples =
    "Examples:\n"
    "  troupe bench ops --json ops.json\n"
    "      the full run (about 40-60 s on 2 cores)\n"
    "  troupe bench ops --quick --json /tmp/smoke.json\n"
    "      tiny layers: checks that the harness and the in-run checks pass\n"
    "  troupe bench ops --workloads conv --resnet-batch 8 --repeat 3 --json conv.json\n"
    "      only Convolution, with a smaller batch for the ResNet-sized layer\n"
    "  troupe bench ops --ctx gpu --json gpu.json\n"
    "      the same layers on GPU 0 (GFLOP/s only; fails with a message on a machine without a GPU)\n"
    "  TROUPE_BLAS_THREADS=1 troupe bench ops --workloads fc --json fc1.json\n"
    "      TROUPE_* settings apply to the engine and its OpenBLAS thread count (both are in the JSON)";

constexpr const char* kIoDescription =
    "Measure the data iterators against the library work they cannot avoid, each anchor measured in the same "
    "run and alternated with its figure. A call is one epoch INCLUDING creating the iterator; every figure runs "
    "untimed first (warm-up), then --repeat timed runs of at least 3 calls; the median and the best run are "
    "reported. (a) mnist: MNISTIter over Fashion-MNIST train (60,000 samples from --mnist-dir; the t10k files "
    "with --quick), batch 128, shuffle off, prefetch on, against gzread of the same two .gz files with zlib "
    "alone, in samples/s; checks: the label file holds 6,000 labels per class (1,000 with --quick), an epoch "
    "delivers the data set rounded down to whole batches (MNISTIter drops the incomplete last batch, as "
    "MXNet's does: 59,904 samples) with the labels of those samples in the file. (b) imagerec: "
    "ImageRecordIter over a .rec of --images JPEGs (256x256, generated with libjpeg into a temporary folder "
    "and packed as `troupe im2rec` packs them), data_shape (3,224,224), batch 64, preprocess_threads "
    "--threads, against decoding the same JPEG bytes from memory with libjpeg alone on --threads threads, in "
    "images/s; checks: the data shape is (64,3,224,224), images per epoch equal --images, the label histogram "
    "equals the one packed. When ImageRecordIter is not in the build, imagerec is reported as unavailable "
    "(not a failure). The ratio is anchor time / iterator time; the JSON holds every figure, the anchors, the "
    "ratios and the targets (both >= 0.8). Progress goes to stderr, a table to stdout. Exit status: 0 when every "
    "check passed (targets are reported, not enforced), 1 when one failed (the JSON says which, with "
    "\"ok\": false), 2 on bad usage.";

constexpr const char* kIoExamples =
    "Examples:\n"
    "  troupe bench io --json io.json\n"
    "      the full run (about 1-2 minutes on 2 cores)\n"
    "  troupe bench io --quick --json /tmp/smoke.json\n"
    "      small data: checks that the harness and the in-run checks pass\n"
    "  troupe bench io --workloads imagerec --images 500 --threads 4 --json rec.json\n"
    "      only ImageRecordIter, 500 JPEGs, 4 decoding threads (iterator and anchor alike)\n"
    "  troupe bench io --workloads mnist --mnist-dir ~/fashion-mnist --json mnist.json\n"
    "      only MNISTIter, over the .gz files in another folder";

constexpr const char* kTrainDescription =
    "Measure training steps of the model definitions (ops/graph/models.h) through the Module against the "
    "matrix products they cannot avoid, each figure alternated with its anchor in the same run. A call is one "
    "training step on a batch of Fashion-MNIST preloaded from the t10k files in --mnist-dir (copy the batch "
    "in, Forward(true), Backward, SGD with momentum per parameter); a timed run ends by waiting for the engine. "
    "The anchor is the network's cblas_sgemm calls for one step (FullyConnected forward, weight and data "
    "gradients; Convolution the same in im2col shapes per image; no data gradient for the first layer), "
    "alone on this thread with the engine's OpenBLAS thread count: images/s if only the GEMMs counted. The "
    "ratio is anchor time / step time; the target is >= 0.8 for the MLP at batch 128 (reported, not enforced). "
    "Checks: the outputs are probabilities (finite, rows sum to 1) and, except with --quick, the training "
    "accuracy over the preloaded batches after the timed steps is above 0.5. Progress goes to stderr, a table "
    "to stdout. Exit status: 0 when every check passed, 1 when one failed (the JSON says which), 2 on bad "
    "usage.";

constexpr const char* kTrainExamples =
    "Examples:\n"
    "  troupe bench train --json train.json\n"
    "      MLP and LeNet at batch 128\n"
    "  troupe bench train --quick --json /tmp/smoke.json\n"
    "      two batches, one run: checks that the harness and the in-run checks pass\n"
    "  troupe bench train --workloads mlp --batch-size 256 --json mlp256.json\n"
    "      only the MLP, at batch 256";

constexpr const char* kKVStoreDescription =
    "Measure parameter synchronisation across the CPU devices of one machine through a \"local\" KVStore "
    "against the memory bandwidth it cannot beat, each figure alternated with its anchor in the same run. (a) "
    "push_pull: a call is one round of MXNet's tools/bandwidth/measure.py: for every key in order (priority "
    "-index), Push of one gradient per device from cpu(0) .. cpu(k-1), then Pull into one weight array per "
    "device, and the call ends by waiting for every weight. The model is the trainable parameters of ResNet-50 "
    "v1 (MXNet's Gluon model zoo: 193 arrays) with every size scaled to --model-mib MiB (64 by default). Bytes "
    "moved per call = model bytes x devices x 2 (each device pushes and pulls the whole model), in GiB/s; "
    "MXNet's own figure (model bytes x 2 x (k-1)/k per second per device) is in the JSON too. The anchor is "
    "std::memcpy of the same bytes between two touched buffers, in equal parts on as many threads as the "
    "engine has workers for the devices (cpu_workers x devices). Every figure runs once untimed (warm-up, "
    "which also sizes a run) and then --repeat times; the median and the best run are reported. The ratio is "
    "memcpy time / push+pull time; the target is >= 0.5 (reported, not enforced). Checks: every pulled array "
    "has its key's size; the pulled values equal the sum of the pushed ones (every element of the first, "
    "middle and last key, the first and last element of the others); the memcpy destination equals its source. "
    "(b) mlp: training images/s of the MLP through a Module on cpu(0), cpu(1) (data-parallel, parameters "
    "synchronised through a \"local\" KVStore) against the same Module on cpu(0), alternated; a call is one "
    "step (Forward(true), Backward, Update with SGD) on a Fashion-MNIST batch preloaded from the t10k files in "
    "--mnist-dir, a timed run ends by waiting for the engine; the ratio is the speedup; checks: the outputs "
    "are probabilities and, except with --quick, both modules' training accuracy over the preloaded batches is "
    "above 0.5. Progress goes to stderr, a table to stdout. Exit status: 0 when every check passed, 1 when one "
    "failed (the JSON says which, with \"ok\": false), 2 on bad usage.";

constexpr const char* kKVStoreExamples =
    "Examples:\n"
    "  troupe bench kvstore-local --json kvstore.json\n"
    "      64 MiB model on 2 and 4 devices (about 30-60 s on 2 cores)\n"
    "  troupe bench kvstore-local --quick --json /tmp/smoke.json\n"
    "      a 2 MiB model, one run: checks that the harness and the in-run checks pass\n"
    "  troupe bench kvstore-local --devices 2,4,8 --model-mib 128 --json big.json\n"
    "      more devices and a larger model\n"
    "  TROUPE_CPU_WORKERS=2 troupe bench kvstore-local --json w2.json\n"
    "      TROUPE_* settings apply to the engine; the anchor follows its worker count (the config is in the JSON)\n"
    "  troupe bench kvstore-local --workloads mlp --batch-size 256 --json mlp.json\n"
    "      only the MLP on 2 devices against 1, at batch 256";

constexpr const char* kKVStoreDistDescription =
    "The distributed KVStore across processes on loopback against raw TCP between two processes, measured in "
    "the same run. A scheduler, 1 server and 2 workers run as separate processes (copies of this executable). "
    "Each worker runs dist_sync rounds over a model of --model-mib MiB in keys of --key-mib MiB (float32): a "
    "round is PushPull of every key, ended when every pulled key has arrived; round 0 is a warm-up, then "
    "--repeat timed rounds; then --latency-calls PushPull calls of a 16-float key, each waited for. Figures: "
    "throughput = bytes through the server per second (2 workers x model x 2 / the slower worker's median "
    "round time), per-worker throughput, and the small key's median latency. Anchors, against a child "
    "process over TCP with TCP_NODELAY: the one-way stream throughput (256 MiB in key-sized writes), the echo "
    "of the model in key-sized chunks, the round trip of a 64-byte message, and (for reference) a lock-step "
    "round of two child clients with this process as their server, as a dist_sync round on raw TCP. Ratios: "
    "throughput / stream (target >= 0.7), latency / round trip (target <= 3); reported, not enforced. Checks: "
    "every pulled key "
    "equals the sum of both workers' gradients of its round, the echoes equal what was sent, every process "
    "exits 0. Progress goes to stderr, a table to stdout. Exit status: 0 when every check passed, 1 when one "
    "failed (the JSON says which), 2 on bad usage.";

constexpr const char* kKVStoreDistExamples =
    "Examples:\n"
    "  troupe bench kvstore-dist --json dist.json\n"
    "      64 MiB in 4 MiB keys, 10 rounds, 2000 latency calls (about half a minute on 2 cores)\n"
    "  troupe bench kvstore-dist --quick --json /tmp/smoke.json\n"
    "      a 4 MiB model, 2 rounds: checks that the processes, anchors and checks work";

constexpr const char* kTrainDistDescription =
    "dist_sync training of the MLP across processes on loopback against training the same total batch in one "
    "process, in the same run: what the network and the server cost. A step = Forward, Backward and Update of a "
    "Module on a preloaded Fashion-MNIST batch (t10k), 5 warm-up steps, then --repeat runs of --steps steps. "
    "Single process: batch --batch-size, SGD in process. dist_sync with W workers (each W in --workers): a "
    "scheduler, 1 server and W workers as processes (copies of this executable), each worker a Module of "
    "batch --batch-size / W on its own batches, the server running SGD. Figures: images/s = total batch / "
    "seconds per step (the slower worker's median), and its ratio to the single process (above 1 is not "
    "expected on 2 cores). Checks: the workers of a run end with equal parameters, training beats chance "
    "(not with --quick), every process exits 0.";
constexpr const char* kTrainDistExamples =
    "Examples:\n"
    "  troupe bench train-dist --json train-dist.json\n"
    "      batch 100, 1 and 2 workers, 5 runs of 100 steps (under a minute on 2 cores)\n"
    "  troupe bench train-dist --quick --json /tmp/smoke.json\n"
    "      10 steps, one run: checks that the processes and the checks work";

// A number as a person writes it: 0.2, not 0.200000.
std::string FormatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

BenchCommand::BenchCommand(CLI::App* root) {
  app_ = root->add_subcommand("bench", "Run a benchmark workload and write its results as JSON");
  app_->footer(
      "Runs one benchmark workload: a warm-up, timed repetitions with an in-run correctness check, a derived "
      "figure, and the anchor (the same work on an established runtime) measured in the same run, written to "
      "one JSON file. Timings are never asserted; the exit status only says whether the checks passed.\n\n"
      "Examples:\n"
      "  troupe bench engine --json engine.json\n"
      "  troupe bench ndarray --json ndarray.json\n"
      "  troupe bench ops --json ops.json\n"
      "  troupe bench io --json io.json\n"
      "  troupe bench kvstore-local --json kvstore.json\n"
      "  troupe bench kvstore-dist --json dist.json\n"
      "  troupe bench ops --help\n");

  // --- engine ---------------------------------------------------------------------------------------
  bench::EngineBenchOptions& o = engine_options_;
  CLI::App* engine = app_->add_subcommand("engine", "The dependency engine against a oneTBB flow graph");
  engine->footer(std::string(kEngineDescription) + "\n\n" + kEngineExamples + "\n");
  engine->add_option("--json", o.json_path, "Write the results to FILE (pretty-printed JSON)")
      ->required()
      ->type_name("FILE");
  engine
      ->add_option("--functions", o.functions,
                   "Functions per workload run (default " + std::to_string(bench::kDefaultFunctions) + ", " +
                       std::to_string(bench::kQuickFunctions) + " with --quick)")
      ->check(CLI::PositiveNumber)
      ->type_name("N");
  engine
      ->add_option("--workers", o.workers, "Actor engine cpu_workers values to sweep; TBB gets the same thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->type_name("LIST")
      ->capture_default_str();
  engine->add_option("--shards", o.shards, "RuntimeConfig::dependency_shards values to sweep")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->type_name("LIST")
      ->capture_default_str();
  engine->add_option("--readers", o.readers, "Readers per writer in the reader_writer workload")
      ->check(CLI::Range(1, 1024))
      ->type_name("K")
      ->capture_default_str();
  engine
      ->add_option("--repeat", o.repeat,
                   "Timed repetitions per measurement; the median is reported, with min and max (default " +
                       std::to_string(bench::kDefaultRepeat) + ", 1 with --quick)")
      ->check(CLI::Range(1, 1000))
      ->type_name("R");
  engine->add_flag("--quick", o.quick, "Tiny sizes, one repetition: a smoke run for CTest");
  engine->add_flag("--profile", o.profile,
                   "Record every function's begin/end as the profiler does (compare with a run without it)");
  engine->add_option("--seed", o.seed, "Seed of the random_mixed workload (default: drawn, printed and stored)")
      ->type_name("S");
  engine->add_option("--engines", o.engines, "What to run: any of actor, naive, tbb")
      ->delimiter(',')
      ->check(CLI::IsMember({"actor", "naive", "tbb"}))
      ->type_name("LIST")
      ->capture_default_str();
  engine
      ->add_option("--workloads", o.workloads,
                   "Which workloads: any of chain, independent, reader_writer, random_mixed")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::EngineBenchWorkloadGroups()))
      ->type_name("LIST")
      ->capture_default_str();
  engine
      ->add_option("--timeout", o.run_timeout_s,
                   "Seconds one run may take before it is reported as hung (JSON written, exit 3); 0: no limit")
      ->check(CLI::NonNegativeNumber)
      ->type_name("SEC")
      ->capture_default_str();
  engine->allow_extras(false);
  workloads_.push_back({"engine", engine, [this] { return bench::RunEngineBench(engine_options_); }});

  // --- ndarray --------------------------------------------------------------------------------------
  bench::NDArrayBenchOptions& n = ndarray_options_;
  CLI::App* ndarray =
      app_->add_subcommand("ndarray", "NDArray Dot, add and allocation against cblas_sgemm, memcpy and malloc");
  ndarray->footer(std::string(kNDArrayDescription) + "\n\n" + kNDArrayExamples + "\n");
  ndarray->add_option("--json", n.json_path, "Write the results to FILE (pretty-printed JSON)")
      ->required()
      ->type_name("FILE");
  ndarray->add_flag("--quick", n.quick, "Tiny sizes, one repetition, short runs: a smoke run for CTest");
  ndarray
      ->add_option("--repeat", n.repeat,
                   "Timed runs per figure; the median and the best are reported (default " +
                       std::to_string(bench::kNDArrayDefaultRepeat) + ", 1 with --quick)")
      ->check(CLI::Range(1, 1000))
      ->type_name("R");
  ndarray->add_option("--workloads", n.workloads, "Which workloads: any of dot, add, alloc")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::NDArrayBenchWorkloads()))
      ->type_name("LIST")
      ->capture_default_str();
  ndarray
      ->add_option("--sizes", n.sizes, "dot: matrix sizes n of n x n times n x n (default 256,1024; 64 with --quick)")
      ->delimiter(',')
      ->check(CLI::Range(1, 8192))
      ->type_name("LIST");
  ndarray
      ->add_option("--add-sizes", n.add_bytes,
                   "add: bytes per operand, with units (default 1MiB,16MiB,64MiB; 64KiB with --quick)")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false))
      ->type_name("LIST");
  ndarray
      ->add_option("--alloc-sizes", n.alloc_bytes,
                   "alloc: block sizes, with units (default 4KiB,64KiB,1MiB,16MiB,64MiB; 4KiB,1MiB with --quick)")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false))
      ->type_name("LIST");
  ndarray
      ->add_option("--min-time", n.min_time_s,
                   "Seconds a timed run lasts at least (it also makes at least 3 calls; default " +
                       FormatNumber(bench::kNDArrayDefaultMinTime) + ", 0.005 with --quick)")
      ->check(CLI::Range(0.0001, 60.0))
      ->type_name("SEC");
  ndarray->allow_extras(false);
  workloads_.push_back({"ndarray", ndarray, [this] { return bench::RunNDArrayBench(ndarray_options_); }});

  // --- ops ------------------------------------------------------------------------------------------
  bench::OpsBenchOptions& p = ops_options_;
  CLI::App* ops = app_->add_subcommand(
      "ops", "FullyConnected and Convolution forward + backward against their cblas_sgemm products");
  ops->footer(std::string(kOpsDescription) + "\n\n" + kOpsExamples + "\n");
  ops->add_option("--json", p.json_path, "Write the results to FILE (pretty-printed JSON)")
      ->required()
      ->type_name("FILE");
  ops->add_flag("--quick", p.quick, "Tiny layers, one repetition, short runs: a smoke run for CTest");
  ops->add_option("--repeat", p.repeat,
                  "Timed runs per figure; the median and the best are reported (default " +
                      std::to_string(bench::kOpsDefaultRepeat) + ", 1 with --quick)")
      ->check(CLI::Range(1, 1000))
      ->type_name("R");
  ops->add_option("--workloads", p.workloads, "Which workloads: any of fc, conv")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::OpsBenchWorkloads()))
      ->type_name("LIST")
      ->capture_default_str();
  ops->add_option("--min-time", p.min_time_s,
                  "Seconds a timed run lasts at least (it also makes at least 3 calls; default " +
                      FormatNumber(bench::kOpsDefaultMinTime) + ", 0.005 with --quick)")
      ->check(CLI::Range(0.0001, 60.0))
      ->type_name("SEC");
  ops->add_option("--ctx", p.ctx,
                  "Device of the operators: cpu (against the sgemm anchors) or gpu (GPU 0, GFLOP/s only)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->type_name("DEV")
      ->capture_default_str();
  ops->add_option("--resnet-batch", p.resnet_batch,
                  "conv: batch of the ResNet-sized layer (default " + std::to_string(bench::kOpsDefaultResNetBatch) +
                      ", 2 with --quick); the JSON says when it is below the default")
      ->check(CLI::Range(1, 256))
      ->type_name("N");
  ops->allow_extras(false);
  workloads_.push_back({"ops", ops, [this] { return bench::RunOpsBench(ops_options_); }});

  // --- io -------------------------------------------------------------------------------------------
  bench::IoBenchOptions& q = io_options_;
  CLI::App* io =
      app_->add_subcommand("io", "MNISTIter and ImageRecordIter epochs against zlib inflate and libjpeg decode alone");
  io->footer(std::string(kIoDescription) + "\n\n" + kIoExamples + "\n");
  io->add_option("--json", q.json_path, "Write the results to FILE (pretty-printed JSON)")
      ->required()
      ->type_name("FILE");
  io->add_flag("--quick", q.quick,
               "Small data (t10k files, " + std::to_string(bench::kIoQuickImages) +
                   " JPEGs), one repetition: a smoke run for CTest");
  io->add_option("--repeat", q.repeat,
                 "Timed runs per figure (each at least 3 epochs); the median and the best are reported (default " +
                     std::to_string(bench::kIoDefaultRepeat) + ", 1 with --quick)")
      ->check(CLI::Range(1, 1000))
      ->type_name("R");
  io->add_option("--workloads", q.workloads, "Which workloads: any of mnist, imagerec")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::IoBenchWorkloads()))
      ->type_name("LIST")
      ->capture_default_str();
  io->add_option("--mnist-dir", q.mnist_dir, "mnist: folder of the Fashion-MNIST train-*/t10k-* .gz files")
      ->type_name("DIR")
      ->capture_default_str();
  io->add_option("--images", q.images,
                 "imagerec: JPEGs in the generated .rec (default " + std::to_string(bench::kIoDefaultImages) + ", " +
                     std::to_string(bench::kIoQuickImages) + " with --quick)")
      ->check(CLI::Range(1, 1000000))
      ->type_name("N");
  io->add_option("--threads", q.threads, "imagerec: preprocess_threads of the iterator and threads of the anchor")
      ->check(CLI::Range(1, 64))
      ->type_name("T")
      ->capture_default_str();
  io->add_option("--temp-dir", q.temp_dir, "imagerec: where the temporary .rec goes (default: the system's)")
      ->type_name("DIR");
  io->allow_extras(false);
  workloads_.push_back({"io", io, [this] { return bench::RunIoBench(io_options_); }});

  // --- train ----------------------------------------------------------------------------------------
  bench::TrainBenchOptions& t = train_options_;
  CLI::App* train = app_->add_subcommand("train", "MLP and LeNet training steps against their GEMMs alone");
  train->footer(std::string(kTrainDescription) + "\n\n" + kTrainExamples + "\n");
  train->add_option("--json", t.json_path, "Write the results to FILE (pretty-printed JSON)")
      ->required()
      ->type_name("FILE");
  train->add_flag("--quick", t.quick, "Two batches, one repetition: a smoke run for CTest");
  train->add_option("--repeat", t.repeat,
                    "Timed runs per figure; the median and the best are reported (default " +
                        std::to_string(bench::kTrainDefaultRepeat) + ", 1 with --quick)")
      ->check(CLI::Range(1, 1000))
      ->type_name("R");
  train->add_option("--workloads", t.workloads, "Which models: any of mlp, lenet")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::TrainBenchWorkloads()))
      ->type_name("LIST")
      ->capture_default_str();
  train->add_option("--batch-size", t.batch_size, "Images per training step")
      ->check(CLI::Range(1, 4096))
      ->type_name("B")
      ->capture_default_str();
  train->add_option("--mnist-dir", t.mnist_dir, "Folder of the Fashion-MNIST t10k-* .gz files")
      ->type_name("DIR")
      ->capture_default_str();
  train->allow_extras(false);
  workloads_.push_back({"train", train, [this] { return bench::RunTrainBench(train_options_); }});

  // --- kvstore-local --------------------------------------------------------------------------------
  bench::KVStoreBenchOptions& kv = kvstore_options_;
  CLI::App* kvstore = app_->add_subcommand(
      "kvstore-local", "KVStore push+pull over CPU devices against memcpy; MLP on 2 devices against 1");
  kvstore->footer(std::string(kKVStoreDescription) + "\n\n" + kKVStoreExamples + "\n");
  kvstore->add_option("--json", kv.json_path, "Write the results to FILE (pretty-printed JSON)")
      ->required()
      ->type_name("FILE");
  kvstore->add_flag("--quick", kv.quick,
                    "A " + FormatNumber(bench::kKVStoreQuickModelMiB) +
                        " MiB model, one repetition: a smoke run for CTest");
  kvstore->add_option("--repeat", kv.repeat,
                      "Timed runs per figure; the median and the best are reported (default " +
                          std::to_string(bench::kKVStoreDefaultRepeat) + ", 1 with --quick)")
      ->check(CLI::Range(1, 1000))
      ->type_name("R");
  kvstore->add_option("--devices", kv.devices, "Device counts to measure (contexts cpu(0) .. cpu(k-1))")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->type_name("LIST")
      ->capture_default_str();
  kvstore->add_option("--model-mib", kv.model_mib,
                      "Model size in MiB, the ResNet-50 key sizes scaled to it (default " +
                          FormatNumber(bench::kKVStoreDefaultModelMiB) + ", " +
                          FormatNumber(bench::kKVStoreQuickModelMiB) + " with --quick)")
      ->check(CLI::Range(0.001, 4096.0))
      ->type_name("MIB");
  kvstore->add_option("--anchor-threads", kv.anchor_threads,
                      "Threads of the memcpy anchor (default: the engine's workers, cpu_workers x devices)")
      ->check(CLI::Range(1, 1024))
      ->type_name("T");
  kvstore->add_option("--workloads", kv.workloads, "Which workloads: any of push_pull, mlp")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::KVStoreBenchWorkloads()))
      ->type_name("LIST")
      ->capture_default_str();
  kvstore->add_option("--batch-size", kv.batch_size, "mlp: images per training step (split over the devices)")
      ->check(CLI::Range(2, 4096))
      ->type_name("B")
      ->capture_default_str();
  kvstore->add_option("--mnist-dir", kv.mnist_dir, "mlp: folder of the Fashion-MNIST t10k-* .gz files")
      ->type_name("DIR")
      ->capture_default_str();
  kvstore->allow_extras(false);
  workloads_.push_back({"kvstore-local", kvstore, [this] { return bench::RunKVStoreBench(kvstore_options_); }});

  // --- kvstore-dist ---------------------------------------------------------------------------------
  bench::KVStoreDistBenchOptions& kd = kvstore_dist_options_;
  CLI::App* dist = app_->add_subcommand(
      "kvstore-dist", "Distributed KVStore (scheduler, server, 2 workers as processes) against raw TCP");
  dist->footer(std::string(kKVStoreDistDescription) + "\n\n" + kKVStoreDistExamples + "\n");
  dist->add_option("--json", kd.json_path, "Write the results to FILE (pretty-printed JSON)")->type_name("FILE");
  dist->add_flag("--quick", kd.quick, "A 4 MiB model, 2 rounds, 200 latency calls: a smoke run for CTest");
  dist->add_option("--repeat", kd.repeat,
                   "Timed rounds (and anchor runs); default " + std::to_string(bench::kDistDefaultRepeat) +
                       ", 2 with --quick")
      ->check(CLI::Range(1, 10000))
      ->type_name("R");
  dist->add_option("--model-mib", kd.model_mib, "Model size in MiB (default 64, 4 with --quick)")
      ->check(CLI::Range(0.001, 4096.0))
      ->type_name("MIB");
  dist->add_option("--key-mib", kd.key_mib, "Size of one key in MiB")
      ->check(CLI::Range(0.0001, 256.0))
      ->type_name("MIB")
      ->capture_default_str();
  dist->add_option("--latency-calls", kd.latency_calls, "Small-key PushPull calls timed (default 2000, 200 with --quick)")
      ->check(CLI::Range(1, 10000000))
      ->type_name("N");
  // The roles of the processes the benchmark starts itself (not for users; hidden from --help).
  dist->add_option("--role", kd.role, "")->check(CLI::IsMember({"worker", "tcp-peer"}))->group("");
  dist->add_option("--peer-port", kd.peer_port, "")->group("");
  dist->allow_extras(false);
  workloads_.push_back({"kvstore-dist", dist, [this] { return bench::RunKVStoreDistBench(kvstore_dist_options_); }});

  // --- train-dist -----------------------------------------------------------------------------------
  bench::TrainDistBenchOptions& td = train_dist_options_;
  CLI::App* train_dist = app_->add_subcommand(
      "train-dist", "dist_sync MLP training (1 server, 1 and 2 worker processes) against one process");
  train_dist->footer(std::string(kTrainDistDescription) + "\n\n" + kTrainDistExamples + "\n");
  train_dist->add_option("--json", td.json_path, "Write the results to FILE (pretty-printed JSON)")->type_name("FILE");
  train_dist->add_flag("--quick", td.quick, "10 steps, one run: a smoke run for CTest");
  train_dist->add_option("--repeat", td.repeat,
                         "Timed runs; the median is reported (default " +
                             std::to_string(bench::kTrainDistDefaultRepeat) + ", 1 with --quick)")
      ->check(CLI::Range(1, 1000))
      ->type_name("R");
  train_dist->add_option("--steps", td.steps, "Steps per run (default 100, 10 with --quick)")
      ->check(CLI::Range(1, 1000000))
      ->type_name("N");
  train_dist->add_option("--batch-size", td.batch_size, "The total batch of a step (split over the workers)")
      ->check(CLI::Range(2, 4096))
      ->type_name("B")
      ->capture_default_str();
  train_dist->add_option("--workers", td.workers, "Worker counts to measure")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->type_name("LIST")
      ->capture_default_str();
  train_dist->add_option("--mnist-dir", td.mnist_dir, "Folder of the Fashion-MNIST t10k-* .gz files")
      ->type_name("DIR")
      ->capture_default_str();
  train_dist->add_option("--role", td.role, "")->check(CLI::IsMember({"worker"}))->group("");  // hidden
  train_dist->allow_extras(false);
  workloads_.push_back({"train-dist", train_dist, [this] { return bench::RunTrainDistBench(train_dist_options_); }});

  // Set after the workloads were added (subcommands inherit it when created): an unknown workload name
  // is collected here and reported by Run() with the list of known ones.
  app_->allow_extras();
}

bool BenchCommand::chosen() const { return app_->parsed(); }

std::vector<std::string> BenchCommand::WorkloadNames() const {
  std::vector<std::string> names;
  for (const Workload& w : workloads_) names.push_back(w.name);
  return names;
}

int BenchCommand::Run() {
  for (const Workload& w : workloads_) {
    if (w.app->parsed()) return w.run();
  }
  std::string known;
  for (const Workload& w : workloads_) {
    if (!known.empty()) known += ", ";
    known += w.name;
  }
  const std::vector<std::string> rest = app_->remaining();
  if (rest.empty()) {
    std::fprintf(stderr, "troupe bench: name a workload. Known workloads: %s\n", known.c_str());
  } else if (rest.front().rfind('-', 0) == 0) {
    std::fprintf(stderr, "troupe bench: unknown option '%s' (options go after the workload). Known workloads: %s\n",
                 rest.front().c_str(), known.c_str());
  } else {
    std::fprintf(stderr, "troupe bench: unknown workload '%s'. Known workloads: %s\n", rest.front().c_str(),
                 known.c_str());
  }
  std::fprintf(stderr, "Run 'troupe bench --help' for more information.\n");
  return 2;
}

}  // namespace troupe::tools
