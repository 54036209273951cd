// The data-loading benchmark behind `troupe bench io` (DESIGN.md §5 "Benchmarks").
//
// Two workloads, each against the library work it cannot avoid, measured in the same run and interleaved
// with it (bench/common/measure.h: a warm-up that sizes the runs, then --repeat rounds of figure, anchor):
//   mnist     One epoch of MNISTIter over Fashion-MNIST train (60,000 samples; the t10k files with --quick),
//             batch 128, shuffle off, prefetch on (the registry's default prefetcher), per call INCLUDING
//             creating the iterator, which reads and inflates both .gz files; per batch the consumer reads
//             the labels (the check) and waits for the data. Anchor, the bound: gzread of the same two .gz
//             files into a buffer with zlib alone. Derived: samples/s (of the data set size: the work is
//             reading all of it) and ratio = bound time / iterator time. Checks: the label file's histogram
//             is 6,000 per class (1,000 with --quick); samples per epoch (batch minus padding, summed) are
//             the data set size rounded down to whole batches (MNISTIter drops the incomplete last batch,
//             as MXNet's does: 59,904 of 60,000) and their label histogram is that of the same samples in
//             the file; the anchor inflated the bytes the idx headers promise.
//   imagerec  One epoch of ImageRecordIter over a .rec of N JPEGs (default 2,000, 256 x 256, quality 90,
//             generated with libjpeg by the benchmark into a temporary folder, packed as im2rec packs
//             them), data_shape (3,224,224), batch 64, preprocess_threads T (default 2), shuffle off, per
//             call including creating the iterator. Anchor: decoding the same JPEG bytes (held in memory)
//             with libjpeg alone on T threads (jpeg_mem_src, jpeg_read_scanlines into a buffer). Derived:
//             images/s and ratio = decode time / iterator time. Checks: the data shape is (64,3,224,224);
//             images per epoch equal N; the label histogram equals the one packed; the anchor decoded N
//             images of the right size. When
//             "ImageRecordIter" is not registered in this build the workload is reported unavailable (not a
//             failure).
// Targets, reported and never asserted: both ratios >= 0.8.
//
// The result goes to one pretty-printed JSON file and a table on stdout; progress goes to stderr.
//
// Thread-safety: RunIoBench is meant to be called once at a time (it uses the process-wide engine).
#pragma once

#include <string>
#include <vector>

#include "bench/common/registry.h"

namespace troupe::bench {

struct IoBenchOptions {
  // Where the JSON goes (required).
  std::string json_path;
  // Small data (the Fashion-MNIST t10k files, 64 JPEGs), one repetition: a smoke run for CTest.
  bool quick = false;
  // Timed repetitions per figure; 0 picks the default (kIoDefaultRepeat, or 1 with `quick`).
  int repeat = 0;
  // Which workloads to run: any of IoBenchWorkloads().
  std::vector<std::string> workloads = {"mnist", "imagerec"};
  // Folder holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz (and the t10k files).
  std::string mnist_dir = "/usr/share/datasets/fashion-mnist";
  // imagerec: the number of JPEGs; 0 picks 2,000 (64 with `quick`).
  int images = 0;
  // imagerec: decoding threads of the iterator (preprocess_threads) and of the anchor.
  int threads = 2;
  // imagerec: where the temporary .rec goes (a fresh folder under it, removed at the end); empty: the
  // system's temporary folder.
  std::string temp_dir;
};

inline constexpr int kIoDefaultRepeat = 5;
inline constexpr int kIoDefaultImages = 2000;
inline constexpr int kIoQuickImages = 64;

// The workloads, in the order they run: mnist, imagerec.
const std::vector<std::string>& IoBenchWorkloads();

// Runs the benchmark. Returns the process exit status: 0 when every in-run check passed, 1 when one failed
// (the JSON then holds "ok": false and the failures) or the JSON could not be written, 2 on bad options.
// Targets that are not met, and an ImageRecordIter missing from the build, do not change the status.
int RunIoBench(const IoBenchOptions& options);

// `troupe bench io`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark IoBenchmark();

}  // namespace troupe::bench
