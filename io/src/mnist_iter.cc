// MNISTIter: MXNet 1.9's MNIST iterator over idx files (plain or gzip-compressed).
//
// Semantics follow apache/mxnet@1.9.1:src/io/iter_mnist.cc, with the differences listed here:
//   - Pixels are scaled by 1/256 as MXNet's MNISTIter does ("img_ *= 1.0f / 256.0f"), so values lie in
//     [0, 255/256]. (Gluon's datasets and test_utils.get_mnist divide by 255 instead; a model trained with
//     MXNet's MNISTIter saw 1/256, which is what we keep.)
//   - Labels are float32, shape (batch,); data is float32 (batch, 1, rows, cols), or (batch, rows*cols) with
//     flat=True.
//   - The incomplete last batch is dropped, as MXNet does (Next() is false once fewer than batch_size samples
//     remain), so num_batch_padd is always 0.
//   - Sharding happens before shuffling: part `part_index` of `num_parts` is a contiguous range of the file
//     (ShardRange, io/io.h; MXNet's own split uses floor(n / parts * i), which differs by at most one sample
//     per boundary), and shuffle=True permutes the samples of that part only.
//   - The permutation is drawn once, at creation, from `seed` (MXNet also shuffles once in Init and not per
//     epoch, so every epoch has the same order). We use our own Fisher-Yates over std::mt19937_64 rather than
//     std::shuffle so the order is the same with every standard library; it is not MXNet's order.
//   - DataBatch::index holds each sample's index in the whole file (not in the part).
//   - MXNet reads gzip only through dmlc streams and checks nothing; we inflate .gz files (detected by the
//     gzip magic 1f 8b, not by the name) and check the idx magic, the dims, the exact file size and that the
//     image and label counts agree. Errors name the file and the byte offset (in the decompressed data for a
//     .gz file).
//   - `silent` is accepted; troupe's iterators print nothing either way.
//
// Speed: each file is read into memory once and inflated in one pass; pixels stay as bytes and are converted
// to float straight into each batch's fresh NDArray.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/internal/shuffle.h"
#include "io/io.h"

namespace troupe {
namespace {

constexpr std::uint32_t kImageMagic = 0x00000803;  // u8 elements, 3 dims
constexpr std::uint32_t kLabelMagic = 0x00000801;  // u8 elements, 1 dim
constexpr const char* kWho = "MNISTIter";

struct MNISTParam : Params<MNISTParam> {
  std::string image = "./train-images-idx3-ubyte";
  std::string label = "./train-labels-idx1-ubyte";
  int batch_size = 128;
  bool shuffle = true;
  bool flat = false;
  int seed = 0;
  bool silent = false;
  int num_parts = 1;
  int part_index = 0;
  static void Declare(ParamSchema<MNISTParam>& s) {
    s.Field("image", &MNISTParam::image)
        .Default("./train-images-idx3-ubyte")
        .Describe("Dataset Param: Mnist image path (idx3-ubyte, plain or gzip).");
    s.Field("label", &MNISTParam::label)
        .Default("./train-labels-idx1-ubyte")
        .Describe("Dataset Param: Mnist label path (idx1-ubyte, plain or gzip).");
    s.Field("batch_size", &MNISTParam::batch_size).Default(128).LowerBound(1).Describe("Batch Param: Batch Size.");
    s.Field("shuffle", &MNISTParam::shuffle).Default(true).Describe("Augmentation Param: Whether to shuffle data.");
    s.Field("flat", &MNISTParam::flat).Default(false).Describe("Augmentation Param: Whether to flat the data into 1D.");
    s.Field("seed", &MNISTParam::seed).Default(0).Describe("Augmentation Param: Random Seed.");
    s.Field("silent", &MNISTParam::silent).Default(false).Describe("Auxiliary Param: Whether to print out data info.");
    s.Field("num_parts", &MNISTParam::num_parts)
        .Default(1)
        .LowerBound(1)
        .Describe("partition the data into multiple parts");
    s.Field("part_index", &MNISTParam::part_index).Default(0).LowerBound(0).Describe("the index of the part will read");
  }
};

// "MNISTIter: image file '<path>'" — the prefix of every error about one file.
std::string FileTag(const char* role, const std::string& path) {
  return std::string(kWho) + ": " + role + " file '" + path + "'";
}

std::string Hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string ReadWholeFile(const char* role, const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    throw Error(FileTag(role, path) + " cannot be opened (" + std::strerror(errno) + "); set `" + role +
                "=` to an existing idx file (plain or .gz)");
  }
  const std::streamoff size = in.tellg();
  std::string bytes(static_cast<std::size_t>(size < 0 ? 0 : size), '\0');
  in.seekg(0);
  if (!bytes.empty() && !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw Error(FileTag(role, path) + ": read failed at byte offset " + std::to_string(in.gcount()));
  }
  return bytes;
}

// Inflates a gzip file held in memory (concatenated members too, as gzip -d does). Errors name the byte
// offset in the compressed file where inflation stopped.
std::string Gunzip(const char* role, const std::string& path, const std::string& gz) {
  std::string out;
  // ISIZE (the last 4 bytes, little-endian) is the uncompressed size mod 2^32 of the last member: a good
  // first guess for one-member files, which avoids re-growing the output.
  // A truncated or corrupt file has garbage there, so the guess is capped by deflate's best ratio (1032:1).
  if (gz.size() >= 18) {
    const auto* t = reinterpret_cast<const unsigned char*>(gz.data() + gz.size() - 4);
    const std::uint32_t isize = t[0] | (t[1] << 8) | (t[2] << 16) | (static_cast<std::uint32_t>(t[3]) << 24);
    out.reserve(std::min<std::uint64_t>(isize, std::uint64_t{1032} * gz.size()));
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error(FileTag(role, path) + ": zlib inflateInit2 failed");
  // Frees the zlib state on every path out (errors included).
  auto end_guard = std::unique_ptr<z_stream, void (*)(z_stream*)>(&zs, [](z_stream* z) { inflateEnd(z); });
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  std::size_t consumed = 0;                               // bytes of gz handed to zlib so far
  constexpr std::size_t kChunkIn = std::size_t{1} << 30;  // avail_in is a uInt
  auto feed = [&] {
    if (zs.avail_in == 0 && consumed < gz.size()) {
      const std::size_t n = std::min(kChunkIn, gz.size() - consumed);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data() + consumed));
      zs.avail_in = static_cast<uInt>(n);
      consumed += n;
    }
  };
  auto offset = [&] { return consumed - zs.avail_in; };
  for (;;) {
    feed();
    if (out.size() == out.capacity() || out.capacity() - out.size() < 4096) {
      out.reserve(std::max<std::size_t>(out.capacity() * 2, 1 << 16));
    }
    const std::size_t old = out.size();
    // Grow the string in steps of at most 16 MiB: resize() zero-fills, and a huge reserved capacity must not
    // be touched before data arrives.
    const std::size_t room = std::min<std::size_t>(out.capacity() - old, std::size_t{1} << 24);
    out.resize(old + room);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + old);
    zs.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(old + room - zs.avail_out);
    if (rc == Z_STREAM_END) {
      feed();
      if (zs.avail_in == 0) break;
      // Zero padding after the last member is ignored, as gzip -d does (it warns).
      if (std::all_of(zs.next_in, zs.next_in + zs.avail_in, [](Bytef c) { return c == 0; }) && consumed == gz.size()) {
        break;
      }
      // Another member follows, unless the rest is not gzip (trailing garbage).
      if (zs.avail_in < 2 || zs.next_in[0] != 0x1f || zs.next_in[1] != 0x8b) {
        throw Error(FileTag(role, path) + ": " + std::to_string(gz.size() - offset()) +
                    " bytes that are not gzip data follow the compressed stream at byte offset " +
                    std::to_string(offset()));
      }
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && consumed == gz.size()) {
      throw Error(FileTag(role, path) + " is truncated: the gzip stream ends at compressed byte offset " +
                  std::to_string(gz.size()) + " before its end marker (" + std::to_string(out.size()) +
                  " bytes inflated); download or copy the file again");
    }
    if (rc == Z_BUF_ERROR) continue;  // output full; loop grows it
    throw Error(FileTag(role, path) + " is not valid gzip data at compressed byte offset " + std::to_string(offset()) +
                " (zlib: " + (zs.msg ? zs.msg : "error " + std::to_string(rc)) + ")");
  }
  return out;
}

std::uint32_t BigEndian32(const std::string& b, std::size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + at);
  return (static_cast<std::uint32_t>(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
}

// One idx file in memory, checked: `dims` are its sizes, its elements start at `data_offset`.
struct IdxFile {
  std::string bytes;
  std::vector<std::uint64_t> dims;
  std::size_t data_offset = 0;
  bool gzipped = false;
};

IdxFile ReadIdx(const char* role, const std::string& path, std::uint32_t magic, int ndim) {
  IdxFile f;
  f.bytes = ReadWholeFile(role, path);
  if (f.bytes.size() >= 2 && static_cast<unsigned char>(f.bytes[0]) == 0x1f &&
      static_cast<unsigned char>(f.bytes[1]) == 0x8b) {
    f.bytes = Gunzip(role, path, f.bytes);
    f.gzipped = true;
  }
  const std::string where = f.gzipped ? " of the decompressed data" : "";
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndim);
  if (f.bytes.size() < 4) {
    throw Error(FileTag(role, path) + " is truncated: it has " + std::to_string(f.bytes.size()) + " bytes, the magic " +
                Hex32(magic) + " needs 4 at byte offset 0" + where);
  }
  const std::uint32_t got = BigEndian32(f.bytes, 0);
  if (got != magic) {
    throw Error(FileTag(role, path) + " has magic " + Hex32(got) + " at byte offset 0" + where + ", expected " +
                Hex32(magic) + " (an idx" + std::to_string(ndim) + "-ubyte " + role + " file); check that `" + role +
                "=` names the right file");
  }
  if (f.bytes.size() < header) {
    throw Error(FileTag(role, path) + " is truncated: the header needs " + std::to_string(header) +
                " bytes (magic and " + std::to_string(ndim) + " big-endian sizes), the data ends at byte offset " +
                std::to_string(f.bytes.size()) + where);
  }
  unsigned __int128 total = 1, per_sample = 1;  // up to 2^96: no overflow for any three u32 sizes
  for (int d = 0; d < ndim; ++d) {
    const std::size_t at = 4 + 4 * static_cast<std::size_t>(d);
    const std::uint64_t v = BigEndian32(f.bytes, at);
    if (v == 0 && d > 0) {
      throw Error(FileTag(role, path) + ": dimension " + std::to_string(d) + " at byte offset " + std::to_string(at) +
                  where + " is 0; an image needs at least one row and column");
    }
    f.dims.push_back(v);
    total *= v;
    if (d > 0) per_sample *= v;
  }
  f.data_offset = header;
  if (total > (std::uint64_t{1} << 62) || per_sample > (std::uint64_t{1} << 62)) {
    throw Error(FileTag(role, path) + ": the sizes at byte offset 4" + where + " describe more than 2^62 bytes");
  }
  const std::uint64_t expected = header + static_cast<std::uint64_t>(total);
  if (f.bytes.size() < expected) {
    const std::uint64_t sample = static_cast<std::uint64_t>(total) / std::max<std::uint64_t>(f.dims[0], 1);
    const std::uint64_t complete = (f.bytes.size() - header) / std::max<std::uint64_t>(sample, 1);
    throw Error(FileTag(role, path) + " is truncated: " + std::to_string(f.dims[0]) + " " + role + "s need " +
                std::to_string(expected) + " bytes, the data ends at byte offset " + std::to_string(f.bytes.size()) +
                where + " (" + role + " " + std::to_string(complete) + " is incomplete)");
  }
  if (f.bytes.size() > expected) {
    throw Error(FileTag(role, path) + " has " + std::to_string(f.bytes.size() - expected) +
                " extra bytes after byte offset " + std::to_string(expected) + where + " (the end of " +
                std::to_string(f.dims[0]) + " " + role + "s)");
  }
  return f;
}

class MNISTIter : public DataIter {
 public:
  explicit MNISTIter(const Kwargs& kwargs) {
    param_.Init(kwargs, kWho);  // CreateDataIter has taken prefetch_buffer out already
    if (param_.part_index >= param_.num_parts) {
      throw Error(std::string(kWho) + ": part_index=" + std::to_string(param_.part_index) + " is not below num_parts=" +
                  std::to_string(param_.num_parts) + "; parts are numbered 0 .. num_parts-1");
    }
    IdxFile images = ReadIdx("image", param_.image, kImageMagic, 3);
    IdxFile labels = ReadIdx("label", param_.label, kLabelMagic, 1);
    if (images.dims[0] != labels.dims[0]) {
      throw Error(std::string(kWho) + ": image file '" + param_.image + "' holds " + std::to_string(images.dims[0]) +
                  " images (count at byte offset 4) but label file '" + param_.label + "' holds " +
                  std::to_string(labels.dims[0]) + " labels (count at byte offset 4); pass matching files");
    }
    rows_ = static_cast<std::int64_t>(images.dims[1]);
    cols_ = static_cast<std::int64_t>(images.dims[2]);
    const auto [begin, end] = ShardRange(images.dims[0], param_.num_parts, param_.part_index, kWho);
    begin_ = begin;
    const std::size_t pixels = static_cast<std::size_t>(rows_ * cols_);
    if (param_.num_parts == 1) {
      // The whole set: keep the inflated buffers as they are (a copy would be one more pass over 47 MB).
      pixels_ = std::move(images.bytes);
      labels_ = std::move(labels.bytes);
      pixel_base_ = images.data_offset;
      label_base_ = labels.data_offset;
    } else {
      // Keep only this part's bytes: a worker of a sharded job holds 1/num_parts of the set.
      pixels_.assign(images.bytes, images.data_offset + begin * pixels, (end - begin) * pixels);
      labels_.assign(labels.bytes, labels.data_offset + begin, end - begin);
    }
    order_.resize(end - begin);
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    if (param_.shuffle) internal::ShuffleOrder(&order_, static_cast<std::uint64_t>(static_cast<std::int64_t>(param_.seed)));
  }

  void BeforeFirst() override { loc_ = 0; }

  bool Next() override {
    const auto batch = static_cast<std::size_t>(param_.batch_size);
    if (loc_ + batch > order_.size()) return false;
    const std::size_t pixels = static_cast<std::size_t>(rows_ * cols_);
    NDArray data(DataShapes()[0], Context::CPU());
    NDArray label(LabelShapes()[0], Context::CPU());
    // Fresh arrays with nothing pushed on them: after WaitToWrite we may fill their memory directly, which
    // saves a host copy per batch.
    data.WaitToWrite();
    label.WaitToWrite();
    float* d = data.data().dptr_as<float>();
    float* l = label.data().dptr_as<float>();
    value_.index.resize(batch);
    for (std::size_t b = 0; b < batch; ++b) {
      const std::size_t s = order_[loc_ + b];
      const auto* src = reinterpret_cast<const unsigned char*>(pixels_.data()) + pixel_base_ + s * pixels;
      float* dst = d + b * pixels;
      for (std::size_t k = 0; k < pixels; ++k) dst[k] = static_cast<float>(src[k]) * (1.0f / 256.0f);
      l[b] = static_cast<float>(static_cast<unsigned char>(labels_[label_base_ + s]));
      value_.index[b] = begin_ + s;
    }
    value_.data = {std::move(data)};
    value_.label = {std::move(label)};
    value_.num_batch_padd = 0;
    loc_ += batch;
    return true;
  }

  const DataBatch& Value() const override { return value_; }

  std::vector<TShape> DataShapes() const override {
    if (param_.flat) return {TShape{param_.batch_size, rows_ * cols_}};
    return {TShape{param_.batch_size, 1, rows_, cols_}};
  }
  std::vector<TShape> LabelShapes() const override { return {TShape{param_.batch_size}}; }

 private:
  MNISTParam param_;
  std::int64_t rows_ = 0, cols_ = 0;
  std::uint64_t begin_ = 0;            // index of this part's first sample in the file
  // This part's images and labels in file order, from byte pixel_base_ / label_base_ on (the whole
  // inflated file when there is one part, only the part's bytes otherwise).
  std::string pixels_;
  std::string labels_;
  std::size_t pixel_base_ = 0, label_base_ = 0;
  std::vector<std::size_t> order_;     // sample order within the part (a permutation when shuffling)
  std::size_t loc_ = 0;                // position in order_ of the next batch
  DataBatch value_;
};

TROUPE_REGISTER_DATA_ITER(MNISTIter,
                          [](const Kwargs& kwargs) -> std::unique_ptr<DataIter> {
                            return std::make_unique<MNISTIter>(kwargs);
                          })
    .describe("Iterating on the MNIST dataset (idx files, plain or gzip).")
    .add_arguments(MNISTParam::Docs());

}  // namespace
}  // namespace troupe
