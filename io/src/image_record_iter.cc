// ImageRecordIter (MXNet 1.9's mx.io.ImageRecordIter): batches of JPEG images from a RecordIO .rec file,
// decoded with libjpeg(-turbo) and augmented on a pool of threads.
//
// A record is MXNet's image record (io/recordio.h: ImageRecordHeader, then the JPEG bytes). Per sample, as
// MXNet 1.9.1's ImageRecordIOParser2 with the default augmenter (src/io/iter_image_recordio_2.cc,
// image_aug_default.cc):
//   1. decode to RGB (data_shape C = 3) or grayscale (C = 1);
//   2. resize > 0: scale so that the shorter side is `resize` (the longer one resize * long / short,
//      integer division, as MXNet), bilinear bit for bit as OpenCV's INTER_LINEAR (ResizeBilinear);
//   2a. the affine warp of MXNet's default augmenter when any of rotate, max_rotate_angle, max_shear_ratio,
//      min/max_random_scale, max_aspect_ratio, min/max_img_size asks for one: MXNet's matrix (rotation, shear,
//      scale and aspect ratio about the centre, output size scale * size clamped to [min_img_size,
//      max_img_size]) and OpenCV's warpAffine with INTER_LINEAR and a constant border of fill_value, bit for
//      bit (WarpAffineBilinear); the random parameters are drawn as MXNet draws them, from the sample's own
//      generator (see Randomness);
//   2b. pad > 0: a border of `pad` pixels of fill_value on every side (OpenCV's copyMakeBorder);
//   3. crop H x W: with random_resized_crop, a region of random area (min/max_random_area of the image's) and
//      aspect ratio (min/max_aspect_ratio), up to ten tries, resized to H x W; with min/max_crop_size, a square
//      of random side (centred, or at a random corner with rand_crop) resized to H x W; otherwise the
//      image, first scaled up (bilinear, to height H, then to width W) where it is smaller than H x W, as
//      MXNet 1.9 does, cropped at the centre ((rows - H) / 2, (cols - W) / 2) or, with rand_crop, at a
//      uniform random corner;
//   3a. MXNet 1.9's colour augmentations on the crop: brightness, contrast and saturation jitter in a random
//      order, the HLS shift (random_h/s/l) and PCA lighting noise, each bit for bit as MXNet computes them
//      through OpenCV for given draws (io/internal/image_color.h);
//   4. mirror left-right with probability 1/2 when rand_mirror (always when mirror=True);
//   5. out = (pixel - mean_c) * (contrast * scale / std_c) + illumination * scale / std_c, float32, CHW (channels
//      R, G, B; C = 1 uses mean_r, std_r); mean_c is mean_img's value at the pixel when mean_img is given;
//      contrast is 1 + a random value in [-max_random_contrast, max_random_contrast] and illumination one in
//      [-max_random_illumination, max_random_illumination] (both 1 and 0 by default).
// Labels: header.label when header.flag is 0 (then label_width must be 1, as MXNet), else the first
// label_width of the header's labels (MXNet demands flag == label_width exactly; we accept more and take
// the first ones, fewer is an error). Batches: data (batch, C, H, W); label (batch,) for label_width 1
// (MXNet's C API reshapes (batch, 1) to (batch,)), else (batch, label_width).
//
// Record order and sharding: with path_imgidx the records are the .idx entries sorted by offset (dmlc's
// indexed_recordio reader sorts them too); without it the file is scanned once at creation to find every
// record's offset (pass the .idx for big files). Part `part_index` of `num_parts` is the contiguous range
// ShardRange gives over that list. shuffle=True permutes the part's records, anew every epoch, with a
// Fisher-Yates over std::mt19937_64(seed + epoch) (MXNet needs the .idx for a true shuffle; we have every
// offset either way, so the .idx is optional here). DataBatch::index is each record's header id
// (header.id, MXNet's image_index()), not its position in the file.
//
// Randomness: every random decision for a sample (warp parameters, crop corner, mirror) comes from its own generator seeded
// with (seed, epoch, the record's position in the file), so batches are the same for any
// preprocess_threads and any thread scheduling; the same seed gives the same batches, another seed other
// crops. (MXNet seeds one generator per thread, so its crops depend on scheduling; ours do not match it.
// Settings that draw nothing at random, such as a fixed rotate= or min_random_scale = max_random_scale, give
// MXNet's bytes.)
//
// The last batch follows MXNet 1.9's parser:
//   round_batch=True   completed with records from the start of the next epoch's order; num_batch_padd
//                      counts them, and that next epoch (after BeforeFirst) continues after them.
//   round_batch=False  completed by wrapping to the start of this epoch's order; num_batch_padd counts the
//                      repeats (MXNet leaves stale data there and reports 0 padding); the next epoch starts
//                      at its beginning.
//
// Errors: a missing or corrupt .rec/.idx file is RecordIOReader's / ReadRecordIndex's troupe::Error (file
// and byte offset / line). An image libjpeg cannot decode (including one cut short: libjpeg only warns
// "Premature end of JPEG file" and pads with grey, we refuse it), a label mismatch or an image smaller than
// the crop is a troupe::Error naming the .rec file, the record's byte offset and its id. libjpeg's
// error_exit is replaced by one that longjmps back into the decoding function, which holds no C++ objects
// with destructors between setjmp and the jump, so libjpeg never calls exit() and nothing leaks.
//
// Threads: each batch's records are read sequentially by the caller's thread (one RecordIOReader), then
// decoded and augmented by preprocess_threads threads (the caller and preprocess_threads - 1 pool threads
// kept for the iterator's life), each writing its samples straight into the batch's fresh NDArray. Like
// MXNet, preprocess_threads is capped at the number of hardware threads.
// jpeglib.h uses size_t and FILE without including their headers.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/internal/image_color.h"
#include "io/internal/shuffle.h"
#include "io/io.h"
#include "io/recordio.h"

namespace troupe {
namespace {

constexpr const char* kWho = "ImageRecordIter";

struct ImageRecordParam : Params<ImageRecordParam> {
  std::string path_imgrec;
  std::string path_imgidx;
  TShape data_shape;
  int batch_size = 0;
  int label_width = 1;
  bool shuffle = false;
  int seed = 0;
  bool rand_crop = false;
  bool rand_mirror = false;
  bool mirror = false;
  float mean_r = 0, mean_g = 0, mean_b = 0;
  float std_r = 1, std_g = 1, std_b = 1;
  float scale = 1;
  std::string mean_img;
  float max_random_contrast = 0, max_random_illumination = 0;
  int resize = -1;
  int rotate = -1;
  int max_rotate_angle = 0;
  float max_shear_ratio = 0;
  float min_random_scale = 1, max_random_scale = 1;
  float max_aspect_ratio = 0;
  std::optional<float> min_aspect_ratio;
  bool random_resized_crop = false;
  float min_random_area = 1, max_random_area = 1;
  int min_crop_size = -1, max_crop_size = -1;
  float brightness = 0, contrast = 0, saturation = 0, pca_noise = 0;
  int random_h = 0, random_s = 0, random_l = 0;
  float min_img_size = 0, max_img_size = 1e10f;
  int fill_value = 255;
  int pad = 0;
  int inter_method = 1;
  int preprocess_threads = 4;
  int num_parts = 1;
  int part_index = 0;
  bool round_batch = true;
  bool verbose = true;
  static void Declare(ParamSchema<ImageRecordParam>& s) {
    s.Field("path_imgrec", &ImageRecordParam::path_imgrec).Describe("Path to the image RecordIO (.rec) file.");
    s.Field("path_imgidx", &ImageRecordParam::path_imgidx)
        .Default("")
        .Describe("Path to the image RecordIO index (.idx) file; without it the .rec is scanned once.");
    s.Field("data_shape", &ImageRecordParam::data_shape)
        .Describe("The shape of one output image: (channels, height, width), channels 1 or 3.");
    s.Field("batch_size", &ImageRecordParam::batch_size).LowerBound(1).Describe("Batch size.");
    s.Field("label_width", &ImageRecordParam::label_width)
        .Default(1)
        .LowerBound(1)
        .Describe("The number of labels per image.");
    s.Field("shuffle", &ImageRecordParam::shuffle)
        .Default(false)
        .Describe("Whether to shuffle the records (anew every epoch).");
    s.Field("seed", &ImageRecordParam::seed).Default(0).Describe("Random seed of the shuffle and the augmentations.");
    s.Field("rand_crop", &ImageRecordParam::rand_crop).Default(false).Describe("Whether to crop at a random place.");
    s.Field("rand_mirror", &ImageRecordParam::rand_mirror)
        .Default(false)
        .Describe("Whether to mirror the image left-right with probability 1/2.");
    s.Field("mirror", &ImageRecordParam::mirror).Default(false).Describe("Whether to mirror every image.");
    s.Field("mean_r", &ImageRecordParam::mean_r).Default(0.0f).Describe("Mean subtracted from the R channel.");
    s.Field("mean_g", &ImageRecordParam::mean_g).Default(0.0f).Describe("Mean subtracted from the G channel.");
    s.Field("mean_b", &ImageRecordParam::mean_b).Default(0.0f).Describe("Mean subtracted from the B channel.");
    s.Field("std_r", &ImageRecordParam::std_r).Default(1.0f).Describe("Standard deviation of the R channel.");
    s.Field("std_g", &ImageRecordParam::std_g).Default(1.0f).Describe("Standard deviation of the G channel.");
    s.Field("std_b", &ImageRecordParam::std_b).Default(1.0f).Describe("Standard deviation of the B channel.");
    s.Field("scale", &ImageRecordParam::scale).Default(1.0f).Describe("Multiplier of every value after normalising.");
    s.Field("mean_img", &ImageRecordParam::mean_img)
        .Default("")
        .Describe("A file of the mean image (C, H, W), subtracted per pixel instead of mean_r/g/b; when it does not "
                  "exist it is computed over the records (of this part) and written there first.");
    s.Field("max_random_contrast", &ImageRecordParam::max_random_contrast)
        .Default(0.0f)
        .Describe("Multiply the normalised values by 1 + a random value in [-max_random_contrast, "
                  "max_random_contrast].");
    s.Field("max_random_illumination", &ImageRecordParam::max_random_illumination)
        .Default(0.0f)
        .Describe("Add a random value in [-max_random_illumination, max_random_illumination] (times scale / std) "
                  "to the normalised values.");
    s.Field("resize", &ImageRecordParam::resize)
        .Default(-1)
        .Describe("Resize the shorter edge to this size before cropping; -1: no resize.");
    s.Field("rotate", &ImageRecordParam::rotate)
        .Default(-1)
        .Describe("Rotate every image by this many degrees (anticlockwise) when > 0; -1: no fixed rotation.");
    s.Field("max_rotate_angle", &ImageRecordParam::max_rotate_angle)
        .Default(0)
        .LowerBound(0)
        .Describe("Rotate by a random whole number of degrees in [-max_rotate_angle, max_rotate_angle].");
    s.Field("max_shear_ratio", &ImageRecordParam::max_shear_ratio)
        .Default(0.0f)
        .Describe("Shear by a random ratio in [-max_shear_ratio, max_shear_ratio].");
    s.Field("min_random_scale", &ImageRecordParam::min_random_scale)
        .Default(1.0f)
        .Describe("Scale the image by a random factor of at least this (with max_random_scale).");
    s.Field("max_random_scale", &ImageRecordParam::max_random_scale)
        .Default(1.0f)
        .Describe("Scale the image by a random factor of at most this (with min_random_scale).");
    s.Field("max_aspect_ratio", &ImageRecordParam::max_aspect_ratio)
        .Default(0.0f)
        .Describe("Change the aspect ratio (width / height) by a random factor in [min_aspect_ratio, "
                  "max_aspect_ratio]; without min_aspect_ratio in [1 - max_aspect_ratio, 1 + max_aspect_ratio].");
    s.Field("min_aspect_ratio", &ImageRecordParam::min_aspect_ratio)
        .Default(std::nullopt)
        .Describe("The smallest random aspect ratio (with max_aspect_ratio).");
    s.Field("random_resized_crop", &ImageRecordParam::random_resized_crop)
        .Default(false)
        .Describe("Crop a random area (min/max_random_area) of random aspect ratio (min/max_aspect_ratio) and "
                  "resize it to data_shape, instead of the warp's scale and aspect ratio.");
    s.Field("min_random_area", &ImageRecordParam::min_random_area)
        .Default(1.0f)
        .Describe("random_resized_crop: the smallest fraction of the image's area to crop.");
    s.Field("max_random_area", &ImageRecordParam::max_random_area)
        .Default(1.0f)
        .Describe("random_resized_crop: the largest fraction of the image's area to crop.");
    s.Field("min_crop_size", &ImageRecordParam::min_crop_size)
        .Default(-1)
        .Describe("Crop a random square of side in [min_crop_size, max_crop_size] and resize it to data_shape.");
    s.Field("max_crop_size", &ImageRecordParam::max_crop_size)
        .Default(-1)
        .Describe("Crop a random square of side in [min_crop_size, max_crop_size] and resize it to data_shape.");
    s.Field("min_img_size", &ImageRecordParam::min_img_size)
        .Default(0.0f)
        .Describe("The warped image's width and height are at least this.");
    s.Field("max_img_size", &ImageRecordParam::max_img_size)
        .Default(1e10f)
        .Describe("The warped image's width and height are at most this.");
    s.Field("brightness", &ImageRecordParam::brightness)
        .Default(0.0f)
        .Describe("Multiply the pixels by 1 + a random value in [-brightness, brightness].");
    s.Field("contrast", &ImageRecordParam::contrast)
        .Default(0.0f)
        .Describe("Scale the pixels about the image's mean gray by 1 + a random value in [-contrast, contrast].");
    s.Field("saturation", &ImageRecordParam::saturation)
        .Default(0.0f)
        .Describe("Blend with the gray image by 1 + a random value in [-saturation, saturation].");
    s.Field("pca_noise", &ImageRecordParam::pca_noise)
        .Default(0.0f)
        .Describe("Add AlexNet's PCA lighting noise with this standard deviation.");
    s.Field("random_h", &ImageRecordParam::random_h)
        .Default(0)
        .Describe("Add a random value in [-random_h, random_h] to the H channel in HLS (H in [0, 180)).");
    s.Field("random_s", &ImageRecordParam::random_s)
        .Default(0)
        .Describe("Add a random value in [-random_s, random_s] to the S channel in HLS.");
    s.Field("random_l", &ImageRecordParam::random_l)
        .Default(0)
        .Describe("Add a random value in [-random_l, random_l] to the L channel in HLS.");
    s.Field("fill_value", &ImageRecordParam::fill_value)
        .Default(255)
        .Describe("The value of the pixels the warp and the padding add.");
    s.Field("pad", &ImageRecordParam::pad).Default(0).LowerBound(0).Describe("Pixels of fill_value added on every side.");
    s.Field("inter_method", &ImageRecordParam::inter_method)
        .Default(1)
        .Describe("Interpolation of the warp: 1 (bilinear) is the one supported.");
    s.Field("preprocess_threads", &ImageRecordParam::preprocess_threads)
        .Default(4)
        .LowerBound(1)
        .Describe("The number of threads that decode and augment images.");
    s.Field("num_parts", &ImageRecordParam::num_parts).Default(1).LowerBound(1).Describe("Partitions of the records.");
    s.Field("part_index", &ImageRecordParam::part_index)
        .Default(0)
        .LowerBound(0)
        .Describe("The partition this iterator reads, in [0, num_parts).");
    s.Field("round_batch", &ImageRecordParam::round_batch)
        .Default(true)
        .Describe("Whether to complete the last batch from the next epoch (round robin).");
    s.Field("verbose", &ImageRecordParam::verbose).Default(true).Describe("Accepted for MXNet; prints nothing.");
  }
};

// ------------------------------------------------------------------------------------------ JPEG decoding
struct JpegErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void JpegEmitMessage(j_common_ptr cinfo, int msg_level) {
  // Warnings (level -1) are corrupt-data notices; libjpeg goes on decoding. A premature end means a cut-off
  // image whose missing part libjpeg fills with grey: remember it and refuse the image afterwards.
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (msg_level < 0) {
    ++cinfo->err->num_warnings;
    if (cinfo->err->msg_code == JWRN_JPEG_EOF && !err->truncated) {
      err->truncated = true;
      (*cinfo->err->format_message)(cinfo, err->message);
    }
  }
}

// Decodes a JPEG into interleaved 8-bit pixels: gray (1 byte per pixel) or RGBX (4 bytes per pixel, the 4th
// unused: whole 32-bit pixels let the compiler vectorise the conversion to float planes, which it cannot do
// with 3-byte pixels; that conversion took about 1/6 of an image's time). Returns false with *message set
// when libjpeg fails. No object with a destructor lives in this frame between setjmp and a longjmp: `out` belongs to the
// caller and is resized before any libjpeg call that can fail afterwards reads into it.
bool DecodeJpeg(const unsigned char* data, std::size_t size, bool gray, std::vector<unsigned char>* out, int* width,
                int* height, std::string* message) {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = JpegErrorExit;
  err.pub.emit_message = JpegEmitMessage;
  err.message[0] = '\0';
  err.truncated = false;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    *message = err.message;
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_EXT_RGBX;
  jpeg_start_decompress(&cinfo);
  const std::size_t row_bytes = static_cast<std::size_t>(cinfo.output_width) * cinfo.output_components;
  const std::size_t bytes = row_bytes * cinfo.output_height;
  bool alloc_failed = false;
  try {
    out->resize(bytes);
  } catch (const std::bad_alloc&) {
    alloc_failed = true;
  }
  if (alloc_failed) {
    jpeg_destroy_decompress(&cinfo);
    std::snprintf(err.message, sizeof(err.message), "out of memory for a %ux%u image", cinfo.output_width,
                  cinfo.output_height);
    *message = err.message;
    return false;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->data() + row_bytes * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  *width = static_cast<int>(cinfo.output_width);
  *height = static_cast<int>(cinfo.output_height);
  jpeg_destroy_decompress(&cinfo);
  if (err.truncated) {
    *message = err.message;
    return false;
  }
  return true;
}

// One row of RGBX pixels into three float planes: (value - mean[c]) * mult[c].
void ConvertRgbxRow(const unsigned char* __restrict row, int width, const float* mean, const float* mult,
                    const float* bias, float* __restrict o0, float* __restrict o1, float* __restrict o2) {
  const float m0 = mean[0], m1 = mean[1], m2 = mean[2];
  const float s0 = mult[0], s1 = mult[1], s2 = mult[2];
  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
  for (int j = 0; j < width; ++j) {
    std::uint32_t p;
    std::memcpy(&p, row + 4 * static_cast<std::size_t>(j), 4);  // R, G, B, X in memory order
    const std::uint32_t le = std::endian::native == std::endian::little ? p : __builtin_bswap32(p);
    o0[j] = (static_cast<float>(static_cast<int>(le & 255u)) - m0) * s0 + b0;
    o1[j] = (static_cast<float>(static_cast<int>((le >> 8) & 255u)) - m1) * s1 + b1;
    o2[j] = (static_cast<float>(static_cast<int>((le >> 16) & 255u)) - m2) * s2 + b2;
  }
}

// Bilinear resize of interleaved 8-bit pixels, bit for bit what OpenCV's cv::resize(INTER_LINEAR) gives for
// 8-bit images (MXNet's ImageRecordIter resizes with it): source positions (dst + 0.5) * scale - 0.5 in
// float, weights rounded to 11 fractional bits, a horizontal pass into ints of scale 2048 and a vertical pass
// with OpenCV's rounding ((b0 * (r0 >> 4)) >> 16) + ((b1 * (r1 >> 4)) >> 16) + 2) >> 2. Columns clamp their
// position and weight at the edges; rows clamp only the row they read (as OpenCV does), so their weights may
// sum to 2048 +- 1 there.
void ResizeBilinear(const std::vector<unsigned char>& src, int sw, int sh, int channels, int dw, int dh,
                    std::vector<unsigned char>* dst) {
  dst->resize(static_cast<std::size_t>(dw) * dh * channels);
  if (sw == dw && sh == dh) {  // OpenCV copies
    std::copy(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(dst->size()), dst->begin());
    return;
  }
  constexpr int kOne = 2048;  // INTER_RESIZE_COEF_SCALE
  auto weight = [](float f) { return static_cast<int>(std::nearbyint(f * static_cast<float>(kOne))); };
  const double scale_x = 1.0 / (static_cast<double>(dw) / sw), scale_y = 1.0 / (static_cast<double>(dh) / sh);
  std::vector<int> xofs(static_cast<std::size_t>(dw)), xa(static_cast<std::size_t>(dw) * 2);
  for (int x = 0; x < dw; ++x) {
    float fx = static_cast<float>((x + 0.5) * scale_x - 0.5);
    int sx = static_cast<int>(std::floor(fx));
    fx -= static_cast<float>(sx);
    if (sx < 0) fx = 0, sx = 0;
    if (sx >= sw - 1) fx = 0, sx = sw - 1;
    xofs[static_cast<std::size_t>(x)] = sx;
    xa[2 * static_cast<std::size_t>(x)] = weight(1.f - fx);
    xa[2 * static_cast<std::size_t>(x) + 1] = weight(fx);
  }
  // Source rows resized horizontally, in ints of scale 2048; each once, when an output row first needs it
  // (neighbouring output rows share source rows).
  const std::size_t width = static_cast<std::size_t>(dw) * channels;
  std::vector<int> rows(static_cast<std::size_t>(sh) * width);
  std::vector<bool> done(static_cast<std::size_t>(sh), false);
  auto horizontal = [&](int row) -> const int* {
    int* out = rows.data() + static_cast<std::size_t>(row) * width;
    if (done[static_cast<std::size_t>(row)]) return out;
    done[static_cast<std::size_t>(row)] = true;
    const unsigned char* r = src.data() + static_cast<std::size_t>(row) * sw * channels;
    for (int x = 0; x < dw; ++x) {
      const int sx = xofs[static_cast<std::size_t>(x)];
      const int a0 = xa[2 * static_cast<std::size_t>(x)], a1 = xa[2 * static_cast<std::size_t>(x) + 1];
      for (int c = 0; c < channels; ++c) {
        const int p0 = r[sx * channels + c];
        out[static_cast<std::size_t>(x) * channels + c] =
            sx + 1 < sw ? p0 * a0 + r[(sx + 1) * channels + c] * a1 : p0 * kOne;
      }
    }
    return out;
  };
  for (int y = 0; y < dh; ++y) {
    float fy = static_cast<float>((y + 0.5) * scale_y - 0.5);
    const int sy = static_cast<int>(std::floor(fy));
    fy -= static_cast<float>(sy);
    const int b0 = weight(1.f - fy), b1 = weight(fy);
    const int* row0 = horizontal(std::clamp(sy, 0, sh - 1));
    const int* row1 = horizontal(std::clamp(sy + 1, 0, sh - 1));
    unsigned char* o = dst->data() + static_cast<std::size_t>(y) * width;
    for (std::size_t i = 0; i < width; ++i) {
      const int v = (((b0 * (row0[i] >> 4)) >> 16) + ((b1 * (row1[i] >> 4)) >> 16) + 2) >> 2;
      o[i] = static_cast<unsigned char>(std::clamp(v, 0, 255));
    }
  }
}

// ------------------------------------------------------------------------------------------ randomness
std::uint64_t Mix64(std::uint64_t z) {  // splitmix64's finaliser: a bijection that scatters every input bit
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A small generator per sample (splitmix64), seeded from (seed, epoch, record): the decisions for a sample
// never depend on which thread handles it or in which order.
// OpenCV's warpAffine(src, m, (dw, dh), INTER_LINEAR, BORDER_CONSTANT, fill) for interleaved 8-bit pixels of
// `pixel_bytes` bytes, of which the first `channels` are warped, bit for bit: the map inverted in double,
// source positions in fixed point with 1/32 pixel, and OpenCV's 2x2 bilinear weights for each of the 32x32
// sub-pixel positions, scaled by 2^15 with their sum corrected to exactly 2^15. A source pixel outside the
// image is fill.
void WarpAffineBilinear(const std::vector<unsigned char>& src, int sw, int sh, int pixel_bytes, int channels,
                        const float m32[6], int dw, int dh, int fill, std::vector<unsigned char>* dst) {
  constexpr int kTab = 32, kAbBits = 10, kAbScale = 1 << kAbBits, kCoefBits = 15;
  static const std::vector<std::array<int, 4>> weights = [] {
    std::vector<std::array<int, 4>> t(kTab * kTab);
    for (int i = 0; i < kTab; ++i) {
      for (int j = 0; j < kTab; ++j) {
        const float fy = static_cast<float>(i) * (1.0f / kTab), fx = static_cast<float>(j) * (1.0f / kTab);
        const float ly[2] = {1.0f - fy, fy}, lx[2] = {1.0f - fx, fx};
        std::array<int, 4>& w = t[static_cast<std::size_t>(i * kTab + j)];
        int sum = 0;
        for (int k = 0; k < 4; ++k) sum += w[k] = static_cast<int>(std::lrint(ly[k / 2] * lx[k % 2] * (1 << kCoefBits)));
        if (sum != (1 << kCoefBits)) {  // OpenCV moves the difference onto the largest (or smallest) weight
          int lo = 0, hi = 0;
          for (int k = 0; k < 4; ++k) {
            if (w[k] < w[lo]) lo = k;
            else if (w[k] > w[hi]) hi = k;
          }
          const int diff = sum - (1 << kCoefBits);
          w[diff < 0 ? hi : lo] -= diff;
        }
      }
    }
    return t;
  }();
  double m[6];
  for (int k = 0; k < 6; ++k) m[k] = m32[k];
  double d = m[0] * m[4] - m[1] * m[3];
  d = d != 0 ? 1.0 / d : 0.0;
  const double a11 = m[4] * d, a22 = m[0] * d;
  m[0] = a11;
  m[1] *= -d;
  m[3] *= -d;
  m[4] = a22;
  const double b1 = -m[0] * m[2] - m[1] * m[5], b2 = -m[3] * m[2] - m[4] * m[5];
  m[2] = b1;
  m[5] = b2;
  std::vector<int> adelta(static_cast<std::size_t>(dw)), bdelta(static_cast<std::size_t>(dw));
  for (int x = 0; x < dw; ++x) {
    adelta[static_cast<std::size_t>(x)] = static_cast<int>(std::lrint(m[0] * x * kAbScale));
    bdelta[static_cast<std::size_t>(x)] = static_cast<int>(std::lrint(m[3] * x * kAbScale));
  }
  dst->assign(static_cast<std::size_t>(dw) * dh * pixel_bytes, 0);
  const int round_delta = kAbScale / kTab / 2;
  for (int y = 0; y < dh; ++y) {
    const int x0 = static_cast<int>(std::lrint((m[1] * y + m[2]) * kAbScale)) + round_delta;
    const int y0 = static_cast<int>(std::lrint((m[4] * y + m[5]) * kAbScale)) + round_delta;
    unsigned char* out = dst->data() + static_cast<std::size_t>(y) * dw * pixel_bytes;
    for (int x = 0; x < dw; ++x, out += pixel_bytes) {
      const int fx = (x0 + adelta[static_cast<std::size_t>(x)]) >> (kAbBits - 5);
      const int fy = (y0 + bdelta[static_cast<std::size_t>(x)]) >> (kAbBits - 5);
      const int sx = fx >> 5, sy = fy >> 5;
      const std::array<int, 4>& w = weights[static_cast<std::size_t>((fy & (kTab - 1)) * kTab + (fx & (kTab - 1)))];
      for (int c = 0; c < channels; ++c) {
        auto at = [&](int yy, int xx) -> int {
          if (xx < 0 || yy < 0 || xx >= sw || yy >= sh) return fill;
          return src[(static_cast<std::size_t>(yy) * sw + xx) * pixel_bytes + c];
        };
        const int v = at(sy, sx) * w[0] + at(sy, sx + 1) * w[1] + at(sy + 1, sx) * w[2] + at(sy + 1, sx + 1) * w[3];
        out[c] = static_cast<unsigned char>(std::clamp((v + (1 << (kCoefBits - 1))) >> kCoefBits, 0, 255));
      }
    }
  }
}

// OpenCV's copyMakeBorder(src, pad, pad, pad, pad, BORDER_CONSTANT, fill) for interleaved 8-bit pixels.
void PadConstant(const std::vector<unsigned char>& src, int sw, int sh, int pixel_bytes, int pad, int fill,
                 std::vector<unsigned char>* dst) {
  const int dw = sw + 2 * pad;
  dst->assign(static_cast<std::size_t>(dw) * (sh + 2 * pad) * pixel_bytes, static_cast<unsigned char>(fill));
  for (int y = 0; y < sh; ++y) {
    std::copy_n(src.data() + static_cast<std::size_t>(y) * sw * pixel_bytes, static_cast<std::size_t>(sw) * pixel_bytes,
                dst->data() + (static_cast<std::size_t>(y + pad) * dw + pad) * pixel_bytes);
  }
}

class SampleRng {
 public:
  SampleRng(std::int64_t seed, std::uint64_t epoch, std::uint64_t record)
      : state_(Mix64(Mix64(Mix64(static_cast<std::uint64_t>(seed)) ^ epoch) ^ record)) {}
  std::uint64_t Next() { return Mix64(state_ += 0x9e3779b97f4a7c15ULL); }
  // Uniform in [0, n] (multiply-shift; bias below 2^-40 for image sizes).
  std::uint64_t UpTo(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(Next()) * (n + 1)) >> 64);
  }
  // Uniform in [0, 1), 24 bits (a float's precision).
  float Unit() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }

 private:
  std::uint64_t state_;
};

// ------------------------------------------------------------------------------------------ thread pool
// Runs fn(0 .. n-1) on the caller and `workers` pool threads, which live as long as the pool. Indices are
// handed out through an atomic counter; when several calls throw, the exception of the lowest index is
// rethrown (the same one whatever the scheduling).
class WorkPool {
 public:
  explicit WorkPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  void ParallelFor(std::size_t n, const std::function<void(std::size_t)>& fn) {
    error_ = nullptr;
    error_index_ = n;
    next_.store(0);
    if (threads_.empty() || n <= 1) {
      Work(fn, n);
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        job_ = &fn;
        n_ = n;
        next_.store(0);
        busy_ = threads_.size();
        ++generation_;
      }
      work_cv_.notify_all();
      Work(fn, n);  // the caller is one of the workers
      std::unique_lock<std::mutex> lock(mu_);
      // Every pool thread takes part in every generation (busy_ counts them), so none can still be
      // working on this job, or miss the next one, once busy_ is 0.
      done_cv_.wait(lock, [this] { return busy_ == 0; });
      job_ = nullptr;
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void Work(const std::function<void(std::size_t)>& fn, std::size_t n) {
    for (std::size_t i; (i = next_.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu_);
        if (!error_ || i < error_index_) {
          error_ = std::current_exception();
          error_index_ = i;
        }
      }
    }
  }

  void Loop() {
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const auto* job = job_;
      const std::size_t n = n_;
      lock.unlock();
      Work(*job, n);
      lock.lock();
      if (--busy_ == 0) done_cv_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t n_ = 0;
  std::size_t busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::atomic<std::size_t> next_{0};
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::size_t error_index_ = 0;
};

// ------------------------------------------------------------------------------------------ the iterator
class ImageRecordIter : public DataIter {
 public:
  explicit ImageRecordIter(const Kwargs& kwargs) {
    param_.Init(kwargs, kWho);  // CreateDataIter has taken prefetch_buffer out already
    const TShape& ds = param_.data_shape;
    if (ds.ndim() != 3 || (ds[0] != 1 && ds[0] != 3) || ds[1] < 1 || ds[2] < 1) {
      throw Error(std::string(kWho) + ": data_shape must be (channels, height, width) with channels 1 (gray) or 3 " +
                  "(RGB) and a positive height and width, got " + param_detail::PrintTuple(ds.ToVector()));
    }
    channels_ = static_cast<int>(ds[0]);
    height_ = static_cast<int>(ds[1]);
    width_ = static_cast<int>(ds[2]);
    if (param_.resize != -1 && param_.resize < 1) {
      throw Error(std::string(kWho) + ": resize must be -1 (no resize) or a positive size, got " +
                  std::to_string(param_.resize));
    }
    if (param_.inter_method != 1) {
      throw Error(std::string(kWho) + ": inter_method=" + std::to_string(param_.inter_method) +
                  " is not supported; the warp interpolates bilinearly (inter_method=1, the default)");
    }
    if (param_.min_random_scale > param_.max_random_scale || param_.min_random_scale <= 0) {
      throw Error(std::string(kWho) + ": min_random_scale (" + std::to_string(param_.min_random_scale) +
                  ") must be positive and at most max_random_scale (" + std::to_string(param_.max_random_scale) + ")");
    }
    // MXNet 1.9: with min_aspect_ratio the range is [min_aspect_ratio, max_aspect_ratio], else 1 -+ max_aspect_ratio.
    max_aspect_ = param_.min_aspect_ratio ? param_.max_aspect_ratio : 1 + param_.max_aspect_ratio;
    min_aspect_ = param_.min_aspect_ratio ? *param_.min_aspect_ratio : 1 - param_.max_aspect_ratio;
    warp_ = param_.max_rotate_angle > 0 || param_.max_shear_ratio > 0 || param_.rotate > 0 ||
            param_.max_random_scale != 1.0f || param_.min_random_scale != 1.0f ||
            (!param_.random_resized_crop && (min_aspect_ != 1.0f || max_aspect_ != 1.0f)) ||
            param_.max_img_size != 1e10f || param_.min_img_size != 0.0f;
    if (param_.random_resized_crop) {
      if (param_.min_random_scale != 1.0f || param_.max_random_scale != 1.0f || param_.min_crop_size != -1 ||
          param_.max_crop_size != -1 || param_.rand_crop) {
        throw Error(std::string(kWho) + ": random_resized_crop conflicts with min_random_scale, max_random_scale, "
                    "min_crop_size, max_crop_size and rand_crop (as in MXNet); leave those at their defaults");
      }
      if (min_aspect_ <= 0 || min_aspect_ > max_aspect_ || param_.min_random_area > param_.max_random_area) {
        throw Error(std::string(kWho) + ": random_resized_crop needs 0 < min_aspect_ratio <= max_aspect_ratio and "
                    "min_random_area <= max_random_area");
      }
    } else if ((param_.min_crop_size != -1 || param_.max_crop_size != -1) &&
               (param_.min_crop_size < 1 || param_.max_crop_size < param_.min_crop_size)) {
      throw Error(std::string(kWho) + ": min_crop_size and max_crop_size must both be set, with 1 <= min_crop_size <= "
                  "max_crop_size (got " + std::to_string(param_.min_crop_size) + ", " +
                  std::to_string(param_.max_crop_size) + ")");
    }
    if (channels_ == 1 && (param_.contrast > 0 || param_.saturation > 0 || param_.pca_noise > 0 ||
                           param_.random_h != 0 || param_.random_s != 0 || param_.random_l != 0)) {
      throw Error(std::string(kWho) + ": contrast, saturation, pca_noise and random_h/s/l need colour images "
                  "(data_shape with 3 channels); gray images take brightness only (MXNet fails on them too)");
    }
    colour_ = param_.brightness > 0 || param_.contrast > 0 || param_.saturation > 0 || param_.pca_noise > 0 ||
              param_.random_h != 0 || param_.random_s != 0 || param_.random_l != 0;
    if (param_.part_index >= param_.num_parts) {
      throw Error(std::string(kWho) + ": part_index=" + std::to_string(param_.part_index) +
                  " is not below num_parts=" + std::to_string(param_.num_parts) +
                  "; parts are numbered 0 .. num_parts-1");
    }
    const float stds[3] = {param_.std_r, param_.std_g, param_.std_b};
    const float means[3] = {param_.mean_r, param_.mean_g, param_.mean_b};
    const char* std_names[3] = {"std_r", "std_g", "std_b"};
    for (int c = 0; c < 3; ++c) {
      if (stds[c] == 0.0f) {
        throw Error(std::string(kWho) + ": " + std_names[c] + " is 0; it divides every value of its channel");
      }
      mean_[c] = means[c];
      std_[c] = stds[c];
      mult_[c] = param_.scale / stds[c];
    }

    std::vector<std::uint64_t> offsets;
    try {  // the reader's errors name the file and offset; say which iterator and parameter they concern
      reader_ = std::make_unique<RecordIOReader>(param_.path_imgrec);
      if (!param_.path_imgidx.empty()) {
        for (const auto& [key, offset] : ReadRecordIndex(param_.path_imgidx)) offsets.push_back(offset);
        std::sort(offsets.begin(), offsets.end());
      } else {
        std::string record;
        for (;;) {
          const std::uint64_t at = reader_->Tell();
          if (!reader_->Next(&record)) break;
          offsets.push_back(at);
        }
      }
    } catch (const Error& e) {
      throw Error(std::string(kWho) + " (path_imgrec='" + param_.path_imgrec + "', path_imgidx='" +
                  param_.path_imgidx + "'): " + e.what());
    }
    const auto [begin, end] = ShardRange(offsets.size(), param_.num_parts, param_.part_index, kWho);
    if (begin == end) {
      throw Error(std::string(kWho) + ": part " + std::to_string(param_.part_index) + " of " +
                  std::to_string(param_.num_parts) + " of '" + param_.path_imgrec + "' (" +
                  std::to_string(offsets.size()) + (offsets.size() == 1 ? " record" : " records") + ") is empty; use fewer parts or more records");
    }
    first_record_ = begin;
    offsets_.assign(offsets.begin() + static_cast<std::ptrdiff_t>(begin),
                    offsets.begin() + static_cast<std::ptrdiff_t>(end));
    const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    pool_ = std::make_unique<WorkPool>(std::min(param_.preprocess_threads, hw) - 1);
    if (!param_.mean_img.empty()) LoadOrMakeMeanImage();
    MakeOrder();
  }

  void BeforeFirst() override {
    if (overflow_) {
      overflow_ = false;  // the padded batch already started the next epoch
    } else if (consumed_) {
      ++epoch_;
      MakeOrder();
      pos_ = 0;
    }
    consumed_ = false;
  }

  bool Next() override {
    const std::size_t n = offsets_.size();
    if (overflow_ || pos_ >= n) return false;
    const auto bs = static_cast<std::size_t>(param_.batch_size);
    // (record within the part, epoch whose random draws it gets)
    std::vector<std::pair<std::size_t, std::uint64_t>> slots;
    slots.reserve(bs);
    while (slots.size() < bs && pos_ < n) slots.emplace_back(order_[pos_++], epoch_);
    int pad = 0;
    if (slots.size() < bs) {
      pad = static_cast<int>(bs - slots.size());
      if (param_.round_batch) {
        ++epoch_;
        MakeOrder();
        pos_ = 0;
        while (slots.size() < bs) {
          slots.emplace_back(order_[pos_], epoch_);
          pos_ = (pos_ + 1) % n;
        }
        overflow_ = true;
      } else {
        for (std::size_t k = 0; slots.size() < bs; k = (k + 1) % n) slots.emplace_back(order_[k], epoch_);
      }
    }
    // Reading is sequential (one reader); decoding, the expensive part, is parallel.
    std::vector<std::string> raw(bs);
    for (std::size_t i = 0; i < bs; ++i) ReadRecord(offsets_[slots[i].first], &raw[i]);
    const TShape data_shape = DataShapes()[0], label_shape = LabelShapes()[0];
    NDArray data(data_shape, Context::CPU());
    NDArray label(label_shape, Context::CPU());
    // Fresh arrays with nothing pushed on them: after WaitToWrite the workers may fill their memory directly.
    data.WaitToWrite();
    label.WaitToWrite();
    float* d = data.data().dptr_as<float>();
    float* l = label.data().dptr_as<float>();
    std::vector<std::uint64_t> index(bs);
    const std::size_t sample_size = static_cast<std::size_t>(channels_) * height_ * width_;
    pool_->ParallelFor(bs, [&](std::size_t i) {
      const std::size_t local = slots[i].first;
      index[i] = Process(raw[i], offsets_[local], first_record_ + local, slots[i].second, d + i * sample_size,
                         l + i * static_cast<std::size_t>(param_.label_width));
    });
    value_.data = {std::move(data)};
    value_.label = {std::move(label)};
    value_.num_batch_padd = pad;
    value_.index = std::move(index);
    consumed_ = true;
    return true;
  }

  const DataBatch& Value() const override { return value_; }

  std::vector<TShape> DataShapes() const override {
    return {TShape{param_.batch_size, channels_, height_, width_}};
  }
  std::vector<TShape> LabelShapes() const override {
    if (param_.label_width == 1) return {TShape{param_.batch_size}};
    return {TShape{param_.batch_size, param_.label_width}};
  }

 private:
  void MakeOrder() {
    order_.resize(offsets_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    if (!param_.shuffle) return;
    internal::ShuffleOrder(&order_, static_cast<std::uint64_t>(static_cast<std::int64_t>(param_.seed)) + epoch_);
  }

  // Decodes and augments one record into out (C*H*W floats) and label (label_width floats); returns the
  // record's header id. Runs on pool threads: touches only its arguments and read-only members.
  std::uint64_t Process(const std::string& raw, std::uint64_t offset, std::uint64_t record, std::uint64_t epoch,
                        float* out, float* label) const {
    const std::string where =
        std::string(kWho) + ": '" + param_.path_imgrec + "' record at byte offset " + std::to_string(offset);
    std::string payload;
    const ImageRecordHeader header = UnpackImageRecord(raw, &payload, where);
    const std::string what = where + " (image id " + std::to_string(header.id) + ")";
    const auto lw = static_cast<std::size_t>(param_.label_width);
    if (header.flag == 0) {
      if (lw != 1) {
        throw Error(what + " has one label but label_width=" + std::to_string(lw) +
                    "; pack label_width labels per image or set label_width=1");
      }
      label[0] = header.label;
    } else {
      if (header.labels.size() < lw) {
        throw Error(what + " has " + std::to_string(header.labels.size()) + " labels but label_width=" +
                    std::to_string(lw) + "; set label_width to at most the labels packed per image");
      }
      std::copy_n(header.labels.begin(), lw, label);
    }

    thread_local std::vector<unsigned char> pixels, resized, warped, padded;
    const int pixel_bytes = channels_ == 1 ? 1 : 4;  // gray or RGBX, as DecodeJpeg writes them
    int w = 0, h = 0;
    std::string message;
    if (!DecodeJpeg(reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), channels_ == 1, &pixels,
                    &w, &h, &message)) {
      throw Error(what + ": cannot decode the JPEG image (" + std::to_string(payload.size()) +
                  " bytes): libjpeg: " + message + "; re-encode the image and pack the .rec again");
    }
    const std::vector<unsigned char>* img = &pixels;
    if (param_.resize > 0) {
      int nw, nh;
      // As MXNet: the shorter side becomes `resize`, the other scales with integer division.
      if (h > w) {
        nw = param_.resize;
        nh = static_cast<int>(static_cast<std::int64_t>(param_.resize) * h / w);
      } else {
        nh = param_.resize;
        nw = static_cast<int>(static_cast<std::int64_t>(param_.resize) * w / h);
      }
      ResizeBilinear(pixels, w, h, pixel_bytes, nw, nh, &resized);
      img = &resized;
      w = nw;
      h = nh;
    }
    SampleRng rng(param_.seed, epoch, record);
    if (warp_) {
      // MXNet's DefaultImageAugmenter: shear, angle, scale and aspect ratio, drawn in this order.
      const float shear = rng.Unit() * param_.max_shear_ratio * 2 - param_.max_shear_ratio;
      int angle = static_cast<int>(rng.UpTo(2 * static_cast<std::uint64_t>(param_.max_rotate_angle))) -
                  param_.max_rotate_angle;
      if (param_.rotate > 0) angle = param_.rotate;
      const float a = static_cast<float>(std::cos(angle / 180.0 * M_PI));
      const float b = static_cast<float>(std::sin(angle / 180.0 * M_PI));
      // Scale and aspect ratio are random_resized_crop's business when it is on.
      const float scale = param_.random_resized_crop
                              ? 1.0f
                              : rng.Unit() * (param_.max_random_scale - param_.min_random_scale) + param_.min_random_scale;
      const float ratio = param_.random_resized_crop ? 1.0f : rng.Unit() * (max_aspect_ - min_aspect_) + min_aspect_;
      const float hs = 2 * scale / (1 + ratio);
      const float ws = ratio * hs;
      const float new_width = std::max(param_.min_img_size, std::min(param_.max_img_size, scale * w));
      const float new_height = std::max(param_.min_img_size, std::min(param_.max_img_size, scale * h));
      float m[6];
      m[0] = hs * a - shear * b * ws;
      m[3] = -b * ws;
      m[1] = hs * b + shear * a * ws;
      m[4] = a * ws;
      const float centre_w = m[0] * w + m[1] * h;
      const float centre_h = m[3] * w + m[4] * h;
      m[2] = (new_width - centre_w) / 2;
      m[5] = (new_height - centre_h) / 2;
      const int nw = static_cast<int>(new_width), nh = static_cast<int>(new_height);
      if (nw < 1 || nh < 1) {
        throw Error(what + ": the warp makes the " + std::to_string(w) + "x" + std::to_string(h) + " image " +
                    std::to_string(nw) + "x" + std::to_string(nh) + "; raise min_img_size or min_random_scale");
      }
      WarpAffineBilinear(*img, w, h, pixel_bytes, channels_, m, nw, nh, param_.fill_value, &warped);
      img = &warped;
      w = nw;
      h = nh;
    }
    if (param_.pad > 0) {
      PadConstant(*img, w, h, pixel_bytes, param_.pad, param_.fill_value, &padded);
      img = &padded;
      w += 2 * param_.pad;
      h += 2 * param_.pad;
    }
    thread_local std::vector<unsigned char> resized_crop, upscaled;
    // A region (x, y, cw, ch) of the image resized to data_shape (MXNet's random crops).
    auto crop_resized = [&](std::uint64_t rx, std::uint64_t ry, int cw, int ch) {
      thread_local std::vector<unsigned char> region;
      region.resize(static_cast<std::size_t>(cw) * ch * pixel_bytes);
      for (int i = 0; i < ch; ++i) {
        std::copy_n(img->data() + ((ry + i) * w + rx) * pixel_bytes, static_cast<std::size_t>(cw) * pixel_bytes,
                    region.data() + static_cast<std::size_t>(i) * cw * pixel_bytes);
      }
      ResizeBilinear(region, cw, ch, pixel_bytes, width_, height_, &resized_crop);
      img = &resized_crop;
      w = width_;
      h = height_;
    };
    bool cropped = false;
    if (param_.random_resized_crop) {
      if (param_.max_random_area != 1.0f || param_.min_random_area != 1.0f || max_aspect_ != 1.0f || min_aspect_ != 1.0f) {
        const float area = static_cast<float>(h) * static_cast<float>(w);
        for (int attempt = 0; attempt < 10 && !cropped; ++attempt) {  // MXNet's ten tries
          const float target = area * (rng.Unit() * (param_.max_random_area - param_.min_random_area) + param_.min_random_area);
          const float ratio = rng.Unit() * (max_aspect_ - min_aspect_) + min_aspect_;
          int ch = static_cast<int>(std::round(std::sqrt(target / ratio)));
          int cw = static_cast<int>(std::round(std::sqrt(target * ratio)));
          if (rng.Unit() > 0.5f) std::swap(ch, cw);
          if (ch <= h && cw <= w && ch > 0 && cw > 0) {
            const std::uint64_t ry = rng.UpTo(static_cast<std::uint64_t>(h - ch));
            const std::uint64_t rx = rng.UpTo(static_cast<std::uint64_t>(w - cw));
            crop_resized(rx, ry, cw, ch);
            cropped = true;
          }
        }
      }
    } else if (param_.min_crop_size != -1) {
      if (w < param_.max_crop_size || h < param_.max_crop_size) {
        throw Error(what + ": the image is " + std::to_string(w) + "x" + std::to_string(h) +
                    " (width x height), smaller than max_crop_size=" + std::to_string(param_.max_crop_size));
      }
      const int side = param_.min_crop_size +
                       static_cast<int>(rng.UpTo(static_cast<std::uint64_t>(param_.max_crop_size - param_.min_crop_size)));
      std::uint64_t ry = static_cast<std::uint64_t>(h - side), rx = static_cast<std::uint64_t>(w - side);
      if (param_.rand_crop) {
        ry = rng.UpTo(ry);
        rx = rng.UpTo(rx);
      } else {
        ry /= 2;
        rx /= 2;
      }
      crop_resized(rx, ry, side, side);
      cropped = true;
    }
    if (!cropped) {
      // MXNet 1.9: an image smaller than data_shape is scaled up first, to the height, then to the width.
      if (h < height_) {
        const int nw = static_cast<int>(static_cast<float>(height_) / static_cast<float>(h) * static_cast<float>(w));
        ResizeBilinear(*img, w, h, pixel_bytes, nw, height_, &upscaled);
        img = &upscaled;
        w = nw;
        h = height_;
      }
      if (w < width_) {
        const int nh = static_cast<int>(static_cast<float>(width_) / static_cast<float>(w) * static_cast<float>(h));
        ResizeBilinear(*img, w, h, pixel_bytes, width_, nh, &resized_crop);
        img = &resized_crop;
        w = width_;
        h = nh;
      }
    }
    std::size_t y = static_cast<std::size_t>(h - height_), x = static_cast<std::size_t>(w - width_);
    if (param_.rand_crop && !cropped) {
      y = rng.UpTo(y);
      x = rng.UpTo(x);
    } else {
      y /= 2;
      x /= 2;
    }
    if (colour_) {
      // The crop, then MXNet's colour augmentations on it (io/internal/image_color.h), drawn in its order.
      thread_local std::vector<unsigned char> coloured;
      coloured.resize(static_cast<std::size_t>(height_) * width_ * pixel_bytes);
      for (int i = 0; i < height_; ++i) {
        std::copy_n(img->data() + ((y + i) * w + x) * pixel_bytes, static_cast<std::size_t>(width_) * pixel_bytes,
                    coloured.data() + static_cast<std::size_t>(i) * width_ * pixel_bytes);
      }
      Colour(&rng, coloured.data(), static_cast<std::size_t>(height_) * width_, pixel_bytes);
      img = &coloured;
      w = width_;
      h = height_;
      x = y = 0;
    }
    const bool mirrored = (param_.rand_mirror && (rng.Next() >> 63) != 0) || param_.mirror;
    // out = (pixel - mean) * contrast * scale / std + illumination * scale / std, as MXNet's parser.
    float mult[3] = {mult_[0], mult_[1], mult_[2]}, bias[3] = {0, 0, 0};
    if (param_.max_random_contrast > 0 || param_.max_random_illumination > 0) {
      const float rc = param_.max_random_contrast, ri = param_.max_random_illumination;
      const float contrast = (rng.Unit() * rc * 2 - rc + 1) * param_.scale;
      const float illumination = (rng.Unit() * ri * 2 - ri) * param_.scale;
      for (int c = 0; c < 3; ++c) {
        mult[c] = contrast / std_[c];
        bias[c] = illumination / std_[c];
      }
    }
    const std::size_t plane = static_cast<std::size_t>(height_) * width_;
    const std::size_t stride = static_cast<std::size_t>(w) * pixel_bytes;
    for (int i = 0; i < height_; ++i) {
      const unsigned char* row = img->data() + (y + i) * stride + x * pixel_bytes;
      if (channels_ == 3 && !mirrored && mean_image_.empty()) {
        // The common case: one pass over the row for all three planes, a whole RGBX pixel per load (the
        // compiler vectorises this loop; it does not vectorise one over 3-byte pixels).
        ConvertRgbxRow(row, width_, mean_, mult, bias, out + static_cast<std::size_t>(i) * width_,
                       out + plane + static_cast<std::size_t>(i) * width_,
                       out + 2 * plane + static_cast<std::size_t>(i) * width_);
        continue;
      }
      for (int c = 0; c < channels_; ++c) {
        float* o = out + c * plane + static_cast<std::size_t>(i) * width_;
        // The mean image's value is the one at the pixel's place before mirroring, as MXNet subtracts it.
        const float* mean_row = mean_image_.empty() ? nullptr : mean_image_.data() + c * plane + static_cast<std::size_t>(i) * width_;
        const float mean = mean_[c], m = mult[c], b = bias[c];
        for (int j = 0; j < width_; ++j) {
          const float v = (row[j * pixel_bytes + c] - (mean_row != nullptr ? mean_row[j] : mean)) * m + b;
          o[mirrored ? width_ - 1 - j : j] = v;
        }
      }
    }
    return header.id;
  }

  // The record at `offset` of the .rec (one reader: the caller's thread only).
  void ReadRecord(std::uint64_t offset, std::string* out) {
    if (reader_->Tell() != offset) reader_->Seek(offset);
    if (!reader_->Next(out)) {
      throw Error(std::string(kWho) + ": '" + param_.path_imgrec + "' ends before the record at byte offset " +
                  std::to_string(offset) + (param_.path_imgidx.empty() ? "" : " listed in '" + param_.path_imgidx + "'") +
                  "; the .idx does not belong to this .rec or the file is truncated");
    }
  }

  // mean_img: read the file, or (as MXNet) compute the mean of every record's output (this part's, in file
  // order, summed in float32 and multiplied by 1 / count) and write it there as MXNet's one-array file.
  void LoadOrMakeMeanImage() {
    const std::size_t n = static_cast<std::size_t>(channels_) * height_ * width_;
    const TShape shape{channels_, height_, width_};
    if (std::FILE* f = std::fopen(param_.mean_img.c_str(), "rb")) {
      std::fclose(f);
      std::vector<NDArray> arrays;
      std::vector<std::string> names;
      NDArray::Load(param_.mean_img, &arrays, &names);
      if (arrays.size() != 1 || arrays[0].shape() != shape) {
        throw Error(std::string(kWho) + ": mean_img '" + param_.mean_img + "' must hold one array of shape " +
                    shape.ToString() + " (data_shape); it holds " + std::to_string(arrays.size()) +
                    (arrays.size() == 1 ? " of shape " + arrays[0].shape().ToString() : " arrays"));
      }
      mean_image_ = arrays[0].AsType(DType::kFloat32).ToVector<float>();
      return;
    }
    std::fprintf(stderr, "%s: mean_img '%s' not found: computing the mean of %zu images\n", kWho,
                 param_.mean_img.c_str(), offsets_.size());
    std::vector<float> sum(n, 0.0f), sample(n);
    std::vector<float> label(static_cast<std::size_t>(param_.label_width));
    std::string raw;
    for (std::size_t k = 0; k < offsets_.size(); ++k) {
      ReadRecord(offsets_[k], &raw);
      Process(raw, offsets_[k], first_record_ + k, 0, sample.data(), label.data());
      for (std::size_t i = 0; i < n; ++i) sum[i] += sample[i];
    }
    const float inv = 1.0f / static_cast<float>(offsets_.size());
    for (float& v : sum) v *= inv;
    NDArray::Save(param_.mean_img, {NDArray::FromVector<float>(sum, shape, Context::CPU())}, {"mean_img"});
    std::fprintf(stderr, "%s: wrote the mean image to '%s'\n", kWho, param_.mean_img.c_str());
    mean_image_ = std::move(sum);
  }

  // MXNet 1.9's colour jitter (brightness, contrast, saturation in a random order), HLS shift and PCA noise.
  void Colour(SampleRng* rng, unsigned char* px, std::size_t n, int pixel_bytes) const {
    const int ch = channels_;
    if (param_.brightness > 0 || param_.contrast > 0 || param_.saturation > 0) {
      auto jitter = [&](float r) { return 1.0f + (rng->Unit() * 2 * r - r); };
      const float alpha_b = jitter(param_.brightness), alpha_c = jitter(param_.contrast),
                  alpha_s = jitter(param_.saturation);
      int order[3] = {0, 1, 2};
      for (int i = 2; i > 0; --i) std::swap(order[i], order[rng->UpTo(static_cast<std::uint64_t>(i))]);
      for (int step : order) {
        if (step == 0) internal::ScalePixels(px, n, pixel_bytes, ch, alpha_b, 0.0f);
        if (step == 1 && ch == 3) {
          internal::ScalePixels(px, n, pixel_bytes, ch, alpha_c, (1 - alpha_c) * internal::MxnetGrayMean(px, n, pixel_bytes));
        }
        if (step == 2 && ch == 3) internal::BlendWithGray(px, n, pixel_bytes, alpha_s);
      }
    }
    if (param_.random_h != 0 || param_.random_s != 0 || param_.random_l != 0) {
      // MXNet's near-Gaussian draw: (u + 4 v) / 5.
      auto draw = [&](int range) {
        float r = rng->Unit();
        r += 4 * rng->Unit();
        r = r / 5;
        return static_cast<int>(r * range * 2 - range);
      };
      const int dh = draw(param_.random_h), ds = draw(param_.random_s), dl = draw(param_.random_l);
      internal::ShiftHls(px, n, pixel_bytes, dh, dl, ds);
    }
    if (param_.pca_noise > 0) {
      auto normal = [&] {  // Box-Muller
        const float u1 = 1.0f - rng->Unit(), u2 = rng->Unit();
        return param_.pca_noise * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
      };
      const float ar = normal(), ag = normal(), ab = normal();
      internal::AddPcaNoise(px, n, pixel_bytes, ar, ag, ab);
    }
  }

  ImageRecordParam param_;
  bool warp_ = false;  // the default augmenter's affine warp is on (step 2a)
  float min_aspect_ = 1, max_aspect_ = 1;  // the random aspect ratio's range
  bool colour_ = false;  // a colour augmentation is on (step 3a)
  int channels_ = 3, height_ = 0, width_ = 0;
  float mean_[3] = {0, 0, 0};
  float mult_[3] = {1, 1, 1};  // scale / std per channel
  float std_[3] = {1, 1, 1};
  std::vector<float> mean_image_;  // mean_img's (C, H, W) values, or empty
  std::unique_ptr<RecordIOReader> reader_;
  std::vector<std::uint64_t> offsets_;  // this part's records, in file order
  std::uint64_t first_record_ = 0;      // position in the file's record list of offsets_[0]
  std::vector<std::size_t> order_;      // this epoch's order of offsets_
  std::uint64_t epoch_ = 0;
  std::size_t pos_ = 0;                 // next position in order_
  bool overflow_ = false;               // the last batch was completed from the next epoch (round_batch)
  bool consumed_ = false;               // a batch was returned since the last BeforeFirst()
  std::unique_ptr<WorkPool> pool_;
  DataBatch value_;
};

TROUPE_REGISTER_DATA_ITER(ImageRecordIter,
                          [](const Kwargs& kwargs) -> std::unique_ptr<DataIter> {
                            return std::make_unique<ImageRecordIter>(kwargs);
                          })
    .describe("Iterates on image RecordIO files (JPEG), decoding and augmenting on a pool of threads.")
    .add_arguments(ImageRecordParam::Docs());

}  // namespace
}  // namespace troupe
