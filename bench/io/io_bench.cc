// The data-loading benchmark (see io_bench.h for what it measures and why).
//
// Layout of this file: the mnist workload (iterator body, zlib anchor), the imagerec workload (JPEG
// generation and packing, iterator body, libjpeg anchor), and the report (JSON file, table on stdout). The
// measuring harness is bench/common/measure.h.
#include "bench/io/io_bench.h"

#include <jpeglib.h>
#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/config.h"
#include "base/error.h"
#include "bench/common/bench_util.h"
#include "bench/common/measure.h"
#include "io/io.h"
#include "io/recordio.h"
#include "tensor/ndarray.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

// One timed run is at least kMinCalls (3) epochs anyway: an epoch is long enough that a small min_time only
// keeps the warm-up short.
constexpr double kMinTime = 0.05;
constexpr double kTargetRatio = 0.8;
constexpr int kClasses = 10;
constexpr int kMnistBatch = 128;
constexpr int kImageBatch = 64;
constexpr int kImageSide = 256;
constexpr int kCrop = 224;
constexpr int kJpegQuality = 90;
constexpr int kMaxThreads = 64;

// ---------------------------------------------------------------------------------------------------
// Shared by both workloads

// Reads one epoch of `it`: counts the samples (batch minus padding), adds their labels to `histogram`, and
// waits for every data array (a batch is only delivered when its data can be read).
std::int64_t ConsumeEpoch(DataIter* it, std::vector<std::int64_t>* histogram, std::vector<std::string>* bad) {
  std::int64_t samples = 0;
  for (it->BeforeFirst(); it->Next();) {
    const DataBatch& b = it->Value();
    const std::vector<float> labels = b.label.at(0).ToVector<float>();
    const std::int64_t real = static_cast<std::int64_t>(b.data.at(0).shape()[0]) - b.num_batch_padd;
    // A label array is (batch,) or (batch, 1) for one label per sample.
    for (std::int64_t i = 0; i < real && i < static_cast<std::int64_t>(labels.size()); ++i) {
      const int c = static_cast<int>(labels[static_cast<std::size_t>(i)]);
      if (c >= 0 && c < static_cast<int>(histogram->size()) &&
          static_cast<float>(c) == labels[static_cast<std::size_t>(i)]) {
        ++(*histogram)[static_cast<std::size_t>(c)];
      } else if (bad->size() < 3) {
        bad->push_back("label " + Fmt("%g", labels[static_cast<std::size_t>(i)]) + " is not a class in [0, 10)");
      }
    }
    for (const NDArray& d : b.data) d.WaitToRead();
    samples += real;
  }
  return samples;
}

std::string HistogramText(const std::vector<std::int64_t>& h) {
  std::string s = "[";
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(h[i]);
  }
  s += ']';
  return s;
}

// Checks of one epoch of an iterator: the count and the histogram.
void CheckEpoch(Series* s, std::int64_t got, std::int64_t want, const std::vector<std::int64_t>& hist,
                const std::vector<std::int64_t>& want_hist, const std::vector<std::string>& bad) {
  if (got != want) {
    s->Fail("samples per epoch " + std::to_string(got) + ", expected " + std::to_string(want));
  }
  if (hist != want_hist) s->Fail("label histogram " + HistogramText(hist) + ", expected " + HistogramText(want_hist));
  for (const std::string& b : bad) s->Fail(b);
}

// ---------------------------------------------------------------------------------------------------
// mnist

// Inflates a whole .gz file into *buf (kept between calls: the bound is zlib's work, not malloc's); returns
// the inflated size. Throws naming the file.
std::size_t GzReadAll(const std::string& path, std::vector<unsigned char>* buf) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw Error("can not open '" + path + "'");
  gzbuffer(f, 1 << 17);
  std::size_t size = 0;
  for (;;) {
    if (buf->size() < size + (1 << 20)) buf->resize(size + (1 << 20));
    const int n = gzread(f, buf->data() + size, 1 << 20);
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw Error("gzread failed on '" + path + "': " + msg);
    }
    if (n == 0) break;
    size += static_cast<std::size_t>(n);
  }
  gzclose(f);
  return size;
}

void RunMnist(WorkloadReport* r, const IoBenchOptions& o) {
  const std::string set = o.quick ? "t10k" : "train";
  const std::string images = o.mnist_dir + "/" + set + "-images-idx3-ubyte.gz";
  const std::string labels = o.mnist_dir + "/" + set + "-labels-idx1-ubyte.gz";
  r->items = o.quick ? 10000 : 60000;
  r->details = {{"dataset", "Fashion-MNIST " + set},
                {"images", images},
                {"labels", labels},
                {"samples", r->items},
                {"batch_size", kMnistBatch},
                {"shuffle", false},
                {"prefetch_buffer", "default (4)"}};
  for (const std::string& p : {images, labels}) {
    if (!std::filesystem::exists(p)) {
      r->available = false;
      r->unavailable_reason = "'" + p + "' is missing (Debian package dataset-fashion-mnist, or --mnist-dir)";
      return;
    }
  }
  const std::int64_t n = r->items;
  // MNISTIter drops the incomplete last batch, as MXNet's does (its Next() is false once fewer than
  // batch_size samples remain): an epoch delivers the first `delivered` samples, in file order with shuffle
  // off. The histogram of those comes from the label file itself, whose whole histogram must be n / 10 per
  // class.
  const std::int64_t delivered = n - n % kMnistBatch;
  std::vector<std::int64_t> want_hist(kClasses, 0);
  {
    std::vector<unsigned char> label_bytes;
    const std::size_t size = GzReadAll(labels, &label_bytes);
    if (size != static_cast<std::size_t>(8 + n)) {
      throw Error("'" + labels + "' inflates to " + std::to_string(size) + " bytes, expected " + std::to_string(8 + n));
    }
    std::vector<std::int64_t> whole(kClasses, 0);
    for (std::int64_t i = 0; i < n; ++i) {
      const unsigned c = label_bytes[static_cast<std::size_t>(8 + i)];
      if (c >= kClasses)
        throw Error("'" + labels + "': label " + std::to_string(c) + " of sample " + std::to_string(i));
      ++whole[c];
      if (i < delivered) ++want_hist[c];
    }
    const std::vector<std::int64_t> even(kClasses, n / kClasses);
    if (whole != even) {
      r->errors.push_back("label histogram of '" + labels + "' is " + HistogramText(whole) + ", expected " +
                          HistogramText(even));
    }
    r->details["label_histogram_file"] = whole;
    r->details["label_histogram_per_epoch"] = want_hist;
  }
  r->details["samples_per_epoch"] = delivered;
  r->figure = MakeSeries("MNISTIter epoch", "create MNISTIter (reads + inflates both files) and read one epoch");
  r->anchor = MakeSeries("zlib gzread", "gzread both .gz files into a buffer");
  const Kwargs kwargs = {{"image", images},
                         {"label", labels},
                         {"batch_size", std::to_string(kMnistBatch)},
                         {"shuffle", "False"},
                         {"silent", "True"}};
  Series* iter_series = &r->figure;
  Body iter = [=](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      std::unique_ptr<DataIter> it = CreateDataIter("MNISTIter", kwargs);
      std::vector<std::int64_t> hist(kClasses, 0);
      std::vector<std::string> bad;
      const std::int64_t got = ConsumeEpoch(it.get(), &hist, &bad);
      CheckEpoch(iter_series, got, delivered, hist, want_hist, bad);
    });
  };
  auto buf = std::make_shared<std::vector<unsigned char>>();
  Series* anchor_series = &r->anchor;
  Body anchor = [=](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      const std::size_t image_bytes = GzReadAll(images, buf.get());
      const std::size_t label_bytes = GzReadAll(labels, buf.get());
      KeepAlive(buf->data());
      if (image_bytes != static_cast<std::size_t>(16 + n * 28 * 28) || label_bytes != static_cast<std::size_t>(8 + n)) {
        anchor_series->Fail("inflated " + std::to_string(image_bytes) + " + " + std::to_string(label_bytes) +
                            " bytes, expected " + std::to_string(16 + n * 784) + " + " + std::to_string(8 + n));
      }
    });
  };
  MeasureInterleaved({{&r->figure, iter}, {&r->anchor, anchor}}, o.repeat, kMinTime);
}

// ---------------------------------------------------------------------------------------------------
// imagerec

// libjpeg reports errors through error_exit, which must not return: jump back to the caller's setjmp.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// A 256 x 256 RGB picture: smooth gradients that differ per image plus some noise, so that the JPEG is about
// as large and as costly to decode as a photo of that size.
std::vector<unsigned char> MakePicture(int index) {
  std::mt19937 rng(static_cast<std::uint32_t>(index) * 2654435761u + 1);
  std::uniform_int_distribution<int> noise(-24, 24);
  std::vector<unsigned char> px(static_cast<std::size_t>(kImageSide) * kImageSide * 3);
  const int phase = index * 37;
  for (int y = 0; y < kImageSide; ++y) {
    for (int x = 0; x < kImageSide; ++x) {
      const int base[3] = {(x + phase) & 255, (y * 2 + phase) & 255, ((x ^ y) + index) & 255};
      for (int c = 0; c < 3; ++c) {
        px[(static_cast<std::size_t>(y) * kImageSide + x) * 3 + c] =
            static_cast<unsigned char>(std::clamp(base[c] + noise(rng), 0, 255));
      }
    }
  }
  return px;
}

std::string EncodeJpeg(const std::vector<unsigned char>& px) {
  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegErrorExit;
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    free(out);
    throw Error(std::string("libjpeg could not encode a test image: ") + err.message);
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &out, &out_size);
  cinfo.image_width = kImageSide;
  cinfo.image_height = kImageSide;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, kJpegQuality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<unsigned char*>(px.data()) + static_cast<std::size_t>(cinfo.next_scanline) * kImageSide * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string bytes(reinterpret_cast<const char*>(out), out_size);
  free(out);  // allocated by libjpeg's jpeg_mem_dest with malloc
  return bytes;
}

// Decodes `jpeg` to RGB into *buf; returns false (with *why) on a libjpeg error or an unexpected size.
bool DecodeJpeg(const std::string& jpeg, std::vector<unsigned char>* buf, std::string* why) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegErrorExit;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    *why = err.message;
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(jpeg.data()), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const std::size_t stride = static_cast<std::size_t>(cinfo.output_width) * cinfo.output_components;
  buf->resize(stride * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = buf->data() + cinfo.output_scanline * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  const bool right = cinfo.output_width == kImageSide && cinfo.output_height == kImageSide;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (!right) *why = "decoded size is not 256 x 256";
  return right;
}

// A fresh folder for the .rec, removed when the workload ends.
class TempDir {
 public:
  explicit TempDir(const std::string& under) {
    const std::filesystem::path base =
        under.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(under);
    std::string templ = (base / "troupe-bench-io-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw Error("can not make a temporary folder under '" + base.string() + "'");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void RunImageRec(WorkloadReport* r, const IoBenchOptions& o, const std::function<void(const std::string&)>& log) {
  const int n = o.images;
  const int threads = o.threads;
  r->items = n;
  r->details = {{"images", n},
                {"image_size", std::to_string(kImageSide) + "x" + std::to_string(kImageSide)},
                {"jpeg_quality", kJpegQuality},
                {"data_shape", "(3," + std::to_string(kCrop) + "," + std::to_string(kCrop) + ")"},
                {"batch_size", kImageBatch},
                {"preprocess_threads", threads},
                {"anchor_threads", threads},
                {"shuffle", false}};
  if (DataIterRegistry::Get().Find("ImageRecordIter") == nullptr) {
    r->available = false;
    r->unavailable_reason = "ImageRecordIter is not registered in this build";
    return;
  }
  TempDir dir(o.temp_dir);
  const std::string rec = dir.path() + "/bench.rec";
  const std::string idx = dir.path() + "/bench.idx";
  auto jpegs = std::make_shared<std::vector<std::string>>();
  std::vector<std::int64_t> want_hist(kClasses, 0);
  {
    log("imagerec: encoding " + std::to_string(n) + " JPEGs and packing " + rec);
    RecordIOWriter writer(rec);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> index;
    std::size_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      jpegs->push_back(EncodeJpeg(MakePicture(i)));
      bytes += jpegs->back().size();
      ImageRecordHeader h;
      h.id = static_cast<std::uint64_t>(i);
      h.label = static_cast<float>(i % kClasses);
      ++want_hist[static_cast<std::size_t>(i % kClasses)];
      index.emplace_back(h.id, writer.Write(PackImageRecord(h, jpegs->back())));
    }
    writer.Close();
    WriteRecordIndex(idx, index);
    r->details["jpeg_bytes_mean"] = n > 0 ? static_cast<double>(bytes) / n : 0.0;
  }
  r->figure = MakeSeries("ImageRecordIter epoch", "create ImageRecordIter and read one epoch (decode, crop, convert)");
  r->anchor = MakeSeries("libjpeg decode", "decode the same JPEG bytes (in memory) with libjpeg on T threads");
  const Kwargs kwargs = {{"path_imgrec", rec},
                         {"path_imgidx", idx},
                         {"data_shape", "(3," + std::to_string(kCrop) + "," + std::to_string(kCrop) + ")"},
                         {"batch_size", std::to_string(kImageBatch)},
                         {"preprocess_threads", std::to_string(threads)},
                         {"shuffle", "False"}};
  Series* iter_series = &r->figure;
  Body iter = [=](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      std::unique_ptr<DataIter> it = CreateDataIter("ImageRecordIter", kwargs);
      const TShape want_shape({kImageBatch, 3, kCrop, kCrop});
      if (it->DataShapes().at(0) != want_shape) {
        iter_series->Fail("data shape " + it->DataShapes().at(0).ToString() + ", expected " + want_shape.ToString());
      }
      std::vector<std::int64_t> hist(kClasses, 0);
      std::vector<std::string> bad;
      const std::int64_t got = ConsumeEpoch(it.get(), &hist, &bad);
      CheckEpoch(iter_series, got, n, hist, want_hist, bad);
    });
  };
  Series* anchor_series = &r->anchor;
  Body anchor = [=](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      // Threads started per epoch, as the iterator starts its decoders when it is created.
      std::vector<std::int64_t> decoded(static_cast<std::size_t>(threads), 0);
      std::vector<std::string> why(static_cast<std::size_t>(threads));
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          std::vector<unsigned char> buf;
          for (int i = t; i < n; i += threads) {
            if (DecodeJpeg((*jpegs)[static_cast<std::size_t>(i)], &buf, &why[static_cast<std::size_t>(t)])) {
              ++decoded[static_cast<std::size_t>(t)];
            }
            KeepAlive(buf.data());
          }
        });
      }
      for (std::thread& th : pool) th.join();
      std::int64_t total = 0;
      for (std::int64_t d : decoded) total += d;
      if (total != n) {
        std::string reason;
        for (const std::string& w : why) {
          if (!w.empty()) reason = w;
        }
        anchor_series->Fail("libjpeg decoded " + std::to_string(total) + " of " + std::to_string(n) +
                            " images: " + reason);
      }
    });
  };
  MeasureInterleaved({{&r->figure, iter}, {&r->anchor, anchor}}, o.repeat, kMinTime);
}

// ---------------------------------------------------------------------------------------------------
// The run and its report

class IoBench {
 public:
  explicit IoBench(IoBenchOptions o) : opt_(std::move(o)), t0_(Clock::now()) {}
  int Run();

 private:
  void Log(const std::string& line) const {
    std::fprintf(stderr, "[bench io %6.1f s] %s\n", Seconds(t0_, Clock::now()), line.c_str());
  }
  bool Selected(const std::string& w) const {
    return std::find(opt_.workloads.begin(), opt_.workloads.end(), w) != opt_.workloads.end();
  }
  Json WorkloadJson(const WorkloadReport& r, const char* unit) const;
  Json Targets() const;
  Json BuildJson() const;
  void PrintTable() const;
  void CollectFailures();

  IoBenchOptions opt_;
  Clock::time_point t0_;
  std::string started_;
  WorkloadReport mnist_, imagerec_;
  std::vector<std::string> failures_;
};

Json IoBench::WorkloadJson(const WorkloadReport& r, const char* unit) const {
  Json j;
  j["available"] = r.available;
  if (!r.available) j["unavailable_reason"] = r.unavailable_reason;
  j["config"] = r.details;
  if (r.available) {
    const double items = static_cast<double>(r.items);
    const auto per_s = [items](double t) { return items / t; };
    j["iterator"] = SeriesJson(r.figure, unit, per_s);
    j["anchor"] = SeriesJson(r.anchor, unit, per_s);
    j["ratio"] = OptNum(r.Ratio());
    j["ratio_best"] = OptNum(r.RatioBest());
    j["target_ratio"] = kTargetRatio;
    j["errors"] = r.errors;
    j["ok"] = r.ok();
  }
  return j;
}

Json IoBench::Targets() const {
  Json t = Json::array();
  const auto add = [&](const WorkloadReport& r, const std::string& name) {
    if (!r.selected || !r.available) return;
    const std::optional<double> ratio = r.Ratio();
    t.push_back({{"name", name},
                 {"ratio", OptNum(ratio)},
                 {"target", kTargetRatio},
                 {"met", ratio.has_value() && *ratio >= kTargetRatio}});
  };
  add(mnist_, "mnist: zlib time / MNISTIter time >= 0.8");
  add(imagerec_, "imagerec: libjpeg time / ImageRecordIter time >= 0.8");
  return t;
}

Json IoBench::BuildJson() const {
  Json root;
  root["benchmark"] = "io";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started_;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()}, {"cpu", CpuModel()}};
  root["config"] = {{"quick", opt_.quick},         {"repeat", opt_.repeat},       {"min_time_s", kMinTime},
                    {"workloads", opt_.workloads}, {"mnist_dir", opt_.mnist_dir}, {"images", opt_.images},
                    {"threads", opt_.threads}};
  if (mnist_.selected) root["mnist"] = WorkloadJson(mnist_, "samples_per_s");
  if (imagerec_.selected) root["imagerec"] = WorkloadJson(imagerec_, "images_per_s");
  Json notes = Json::array();
  notes.push_back(
      "A call is one epoch including creating the iterator; a timed run makes at least 3 calls. The consumer "
      "reads every batch's labels (the histogram check) and waits for its data.");
  notes.push_back(
      "ratio = anchor time / iterator time (medians): 1 = the iterator costs what the unavoidable library work "
      "costs. The MNISTIter anchor is inflating only; the iterator also converts bytes to float and batches. "
      "The ImageRecordIter anchor is decoding only, from memory; the iterator also reads the .rec, crops, "
      "converts to float CHW and batches.");
  if (opt_.quick) notes.push_back("quick: small data; the figures and the targets say nothing about speed.");
  root["notes"] = notes;
  root["targets"] = Targets();
  root["failures"] = failures_;
  root["ok"] = failures_.empty();
  return root;
}

void IoBench::CollectFailures() {
  const auto add = [this](const WorkloadReport& r, const std::string& name) {
    if (!r.selected) return;
    r.CollectFailures(name, &failures_);
  };
  add(mnist_, "mnist");
  add(imagerec_, "imagerec");
}

void IoBench::PrintTable() const {
  const auto cell = [](std::optional<double> v, const char* format) { return v ? Fmt(format, *v) : std::string("-"); };
  std::printf("troupe bench io: %d timed runs per figure (medians), machine: %d cores\n", opt_.repeat,
              AvailableCores());
  std::printf("\n  %-10s %14s %14s %8s %8s  %s\n", "workload", "iterator/s", "anchor/s", "ratio", "best", "check");
  const auto row = [&](const WorkloadReport& r, const char* name) {
    if (!r.selected) return;
    if (!r.available) {
      std::printf("  %-10s unavailable: %s\n", name, r.unavailable_reason.c_str());
      return;
    }
    std::printf("  %-10s %14s %14s %8s %8s  %s\n", name, cell(r.ItemsPerSecond(r.figure), "%.0f").c_str(),
                cell(r.ItemsPerSecond(r.anchor), "%.0f").c_str(), cell(r.Ratio(), "%.3f").c_str(),
                cell(r.RatioBest(), "%.3f").c_str(), r.ok() ? "ok" : "FAILED");
  };
  row(mnist_, "mnist");
  row(imagerec_, "imagerec");
  std::printf(
      "  (mnist: samples/s, anchor = zlib gzread; imagerec: images/s, anchor = libjpeg decode on %d thread(s))\n",
      opt_.threads);
  const Json targets = Targets();
  if (!targets.empty()) {
    std::printf("\ntargets:\n");
    for (const Json& t : targets) {
      const std::string figure = t["ratio"].is_null() ? "ratio n/a" : "ratio " + Fmt("%.3f", t["ratio"].get<double>());
      std::printf("  %-52s %-16s %s\n", t["name"].get<std::string>().c_str(), figure.c_str(),
                  t["met"].get<bool>() ? "met" : "NOT met");
    }
  }
  std::printf("\nin-run checks: %s\n", failures_.empty() ? "all passed" : "FAILED (see stderr and the JSON)");
  std::fflush(stdout);
}

int IoBench::Run() {
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "troupe bench io: %s\n", what.c_str());
    return 2;
  };
  if (opt_.json_path.empty()) return bad("--json FILE is required");
  if (opt_.repeat < 0 || opt_.repeat > 1000) return bad("--repeat must be in 1..1000");
  if (opt_.workloads.empty()) return bad("--workloads needs one or more of mnist, imagerec");
  for (const std::string& w : opt_.workloads) {
    const auto& known = IoBenchWorkloads();
    if (std::find(known.begin(), known.end(), w) == known.end()) {
      return bad("unknown workload '" + w + "' (known: mnist, imagerec)");
    }
  }
  if (opt_.threads < 1 || opt_.threads > kMaxThreads)
    return bad("--threads must be in 1.." + std::to_string(kMaxThreads));
  if (opt_.images < 0) return bad("--images must be positive");
  if (opt_.repeat == 0) opt_.repeat = opt_.quick ? 1 : kIoDefaultRepeat;
  if (opt_.images == 0) opt_.images = opt_.quick ? kIoQuickImages : kIoDefaultImages;
  {
    // Fail before minutes of measuring if the file can not be written.
    std::ofstream probe(opt_.json_path, std::ios::trunc);
    if (!probe) return bad("can not write " + opt_.json_path);
  }
  started_ = UtcNow();
  Log("warm-up + " + std::to_string(opt_.repeat) + " timed runs (>= 3 epochs each) per figure; " +
      std::to_string(AvailableCores()) + " cores (" + CpuModel() + ")");

  // Runs one workload, turning an exception (outside the measured bodies, which the harness guards) into a
  // failure of that workload.
  auto guarded = [this](WorkloadReport* r, const std::string& what, const std::function<void()>& fn) {
    r->selected = true;
    try {
      fn();
    } catch (const std::exception& e) {
      r->errors.push_back(std::string("threw: ") + e.what());
      Log(what + ": FAILED: " + e.what());
      Drain();
    }
  };
  const auto summary = [this](const WorkloadReport& r, const std::string& name, const char* unit) {
    if (!r.available) {
      Log(name + ": unavailable: " + r.unavailable_reason);
      return;
    }
    const auto f = [&r](const Series& s) {
      return s.measured() ? Fmt("%.0f", static_cast<double>(r.items) / s.Median()) : std::string("-");
    };
    Log(name + ": iterator " + f(r.figure) + " " + unit + ", anchor " + f(r.anchor) + " (ratio " +
        (r.Ratio() ? Fmt("%.3f", *r.Ratio()) : "-") + ")" + (r.ok() ? "" : "  FAILED"));
  };
  if (Selected("mnist")) {
    guarded(&mnist_, "mnist", [&] { RunMnist(&mnist_, opt_); });
    summary(mnist_, "mnist", "samples/s");
  }
  if (Selected("imagerec")) {
    guarded(&imagerec_, "imagerec", [&] { RunImageRec(&imagerec_, opt_, [this](const std::string& l) { Log(l); }); });
    summary(imagerec_, "imagerec", "images/s");
  }
  Drain();

  CollectFailures();
  for (const std::string& f : failures_) Log("check failed: " + f);
  const bool written = WriteJsonFile(opt_.json_path, BuildJson(), "troupe bench io");
  PrintTable();
  Log("wrote " + opt_.json_path);
  return (failures_.empty() && written) ? 0 : 1;
}

}  // namespace

const std::vector<std::string>& IoBenchWorkloads() {
  static const std::vector<std::string> kWorkloads = {"mnist", "imagerec"};
  return kWorkloads;
}

int RunIoBench(const IoBenchOptions& options) {
  IoBench bench(options);
  return bench.Run();
}

// --- `troupe bench io`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kIoBenchmarkDescription =
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

constexpr const char* kIoBenchmarkExamples =
    "Examples:\n"
    "  troupe bench io --json io.json\n"
    "      the full run (about 1-2 minutes on 2 cores)\n"
    "  troupe bench io --quick --json /tmp/smoke.json\n"
    "      small data: checks that the harness and the in-run checks pass\n"
    "  troupe bench io --workloads imagerec --images 500 --threads 4 --json rec.json\n"
    "      only ImageRecordIter, 500 JPEGs, 4 decoding threads (iterator and anchor alike)\n"
    "  troupe bench io --workloads mnist --mnist-dir ~/fashion-mnist --json mnist.json\n"
    "      only MNISTIter, over the .gz files in another folder";

void DeclareIoBenchmarkOptions(IoBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").Required().TypeName("FILE");
  options->Add(
      "--quick", &o->quick,
      "Small data (t10k files, " + std::to_string(kIoQuickImages) + " JPEGs), one repetition: a smoke run for CTest");
  options
      ->Add("--repeat", &o->repeat,
            "Timed runs per figure (each at least 3 epochs); the median and the best are reported (default " +
                std::to_string(kIoDefaultRepeat) + ", 1 with --quick)")
      .Range(1, 1000)
      .TypeName("R");
  options->Add("--workloads", &o->workloads, "Which workloads: any of mnist, imagerec")
      .Delimiter(',')
      .Choices(IoBenchWorkloads())
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--mnist-dir", &o->mnist_dir, "mnist: folder of the Fashion-MNIST train-*/t10k-* .gz files")
      .TypeName("DIR")
      .ShowDefault();
  options
      ->Add("--images", &o->images,
            "imagerec: JPEGs in the generated .rec (default " + std::to_string(kIoDefaultImages) + ", " +
                std::to_string(kIoQuickImages) + " with --quick)")
      .Range(1, 1000000)
      .TypeName("N");
  options->Add("--threads", &o->threads, "imagerec: preprocess_threads of the iterator and threads of the anchor")
      .Range(1, 64)
      .TypeName("T")
      .ShowDefault();
  options->Add("--temp-dir", &o->temp_dir, "imagerec: where the temporary .rec goes (default: the system's)")
      .TypeName("DIR");
}

}  // namespace

Benchmark IoBenchmark() {
  return MakeBenchmark<IoBenchOptions>(
      "io", "MNISTIter and ImageRecordIter epochs against zlib inflate and libjpeg decode alone",
      std::string(kIoBenchmarkDescription) + "\n\n" + kIoBenchmarkExamples + "\n", &DeclareIoBenchmarkOptions,
      &RunIoBench);
}

}  // namespace troupe::bench
