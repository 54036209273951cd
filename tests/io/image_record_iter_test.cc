// ImageRecordIter (io/src/image_record_iter.cc): decoding, centre and random crops, mirroring, resize,
// mean/std/scale, grayscale, labels, shuffling, sharding, the last batch, and the errors for undecodable
// images and missing files.
//
// The suite makes its own JPEGs with libjpeg (quality 100, no chroma subsampling) from known pixel patterns:
// linear ramps, which a quality-100 JPEG reproduces within a grey level or two, so every expected value is
// computed from the pattern, never by the code under test; comparisons allow 3 grey levels (scaled by the
// normalisation). The ramps differ along x and y, so crops, mirroring and resizing are checked exactly.
//
// DISABLED_DecodeSpeed measures images/s for 256x256 JPEGs with 2 threads (run it by hand with
// --gtest_also_run_disabled_tests); it asserts nothing about speed.
#include <gmock/gmock.h>
#include <nlohmann/json.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/io.h"
#include "io/recordio.h"
#include "tests/common/jpeg_util.h"
#include "tensor/ndarray.h"

namespace troupe {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr float kTol = 3.0f;  // grey levels of JPEG error allowed

// Interleaved 8-bit pixels.
struct Image {
  int width = 0, height = 0, channels = 3;
  std::vector<unsigned char> pixels;
  unsigned char at(int y, int x, int c) const {
    return pixels[(static_cast<std::size_t>(y) * width + x) * channels + c];
  }
};

// The ramp every test image is cut from: R grows with x, G with y, B falls with both; `shift` moves the
// pattern so that images differ.
float RampValue(int y, int x, int c, int shift = 0) {
  switch (c) {
    case 0:
      return 5.0f * x + 8 + shift;
    case 1:
      return 5.0f * y + 8 + shift;
    default:
      return 200.0f - 2 * x - 2 * y - shift;
  }
}

Image RampImage(int width, int height, int shift = 0, int channels = 3) {
  Image img{width, height, channels, {}};
  img.pixels.resize(static_cast<std::size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        // The gray test image uses the G ramp (varies along y) plus R's x slope, so it is asymmetric too.
        const float v = channels == 1 ? 3.0f * x + 2.0f * y + 10 + shift : RampValue(y, x, c, shift);
        img.pixels[(static_cast<std::size_t>(y) * width + x) * channels + c] = static_cast<unsigned char>(v);
      }
    }
  }
  return img;
}

std::string EncodeJpeg(const Image& img, int quality = 100) {
  return troupe::test::EncodeJpeg(img.pixels, img.width, img.height, img.channels, quality);
}

void ExpectError(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected troupe::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected troupe::Error, nothing thrown";
}

struct Batch {
  std::vector<float> data, label;
  std::vector<std::uint64_t> index;
  int pad = 0;
};

std::vector<Batch> Epoch(DataIter* it) {
  std::vector<Batch> out;
  while (it->Next()) {
    const DataBatch& b = it->Value();
    out.push_back({b.data[0].ToVector<float>(), b.label[0].ToVector<float>(), b.index, b.num_batch_padd});
  }
  return out;
}

class ImageRecordIterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("troupe_imagerec_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Packs `payloads` (JPEG bytes) with ids 100 + i and labels i into name.rec and name.idx; returns the
  // record offsets.
  std::vector<std::uint64_t> Pack(const std::string& name, const std::vector<std::string>& payloads,
                                  const std::vector<ImageRecordHeader>& headers = {}) {
    RecordIOWriter w(Path(name + ".rec"));
    std::vector<std::pair<std::uint64_t, std::uint64_t>> index;
    std::vector<std::uint64_t> offsets;
    for (std::size_t i = 0; i < payloads.size(); ++i) {
      ImageRecordHeader h;
      if (i < headers.size()) {
        h = headers[i];
      } else {
        h.label = static_cast<float>(i);
        h.id = 100 + i;
      }
      offsets.push_back(w.Write(PackImageRecord(h, payloads[i])));
      index.emplace_back(i, offsets.back());
    }
    w.Close();
    WriteRecordIndex(Path(name + ".idx"), index);
    return offsets;
  }

  Kwargs Args(const std::string& name, const std::string& shape, int batch, Kwargs extra = {}) {
    Kwargs kw = {{"path_imgrec", Path(name + ".rec")},
                 {"path_imgidx", Path(name + ".idx")},
                 {"data_shape", shape},
                 {"batch_size", std::to_string(batch)}};
    kw.insert(kw.end(), extra.begin(), extra.end());
    return kw;
  }

  fs::path dir_;
};

// Expects `out` (C*H*W at sample `s` of a batch) to be the crop at (y0, x0) of the ramp (mirrored or not).
void ExpectCrop(const std::vector<float>& out, std::size_t s, int C, int H, int W, int y0, int x0, bool mirrored,
                int shift = 0, float mean = 0, float mult = 1) {
  const std::size_t base = s * C * H * W;
  int bad = 0;
  for (int c = 0; c < C; ++c) {
    for (int i = 0; i < H; ++i) {
      for (int j = 0; j < W; ++j) {
        const int sx = x0 + (mirrored ? W - 1 - j : j);
        const float want = (RampValue(y0 + i, sx, c, shift) - mean) * mult;
        const float got = out[base + (static_cast<std::size_t>(c) * H + i) * W + j];
        if (std::fabs(got - want) > kTol * std::fabs(mult) && bad++ < 5) {
          ADD_FAILURE() << "sample " << s << " c=" << c << " y=" << i << " x=" << j << ": got " << got << ", want "
                        << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "sample " << s;
}

// Finds the crop corner and mirroring that explain sample `s`, by matching the ramp's R (x) and G (y) values at
// the sample's corners. Returns false when no crop within the image explains it.
bool FindCrop(const std::vector<float>& out, std::size_t s, int H, int W, int img_w, int img_h, int* y0, int* x0,
              bool* mirrored) {
  const std::size_t base = s * 3 * H * W;
  const float r_left = out[base + 0], r_right = out[base + W - 1];
  const float g_top = out[base + static_cast<std::size_t>(H) * W];
  *mirrored = r_left > r_right;
  const float r_min = std::min(r_left, r_right);
  *x0 = static_cast<int>(std::lround((r_min - 8) / 5));
  *y0 = static_cast<int>(std::lround((g_top - 8) / 5));
  return *x0 >= 0 && *y0 >= 0 && *x0 + W <= img_w && *y0 + H <= img_h;
}

TEST_F(ImageRecordIterTest, DecodesAndCentreCrops) {
  // 40x24 images: centre crop 16x16 at y = (24-16)/2 = 4, x = (40-16)/2 = 12.
  std::vector<std::string> jpegs;
  for (int i = 0; i < 5; ++i) jpegs.push_back(EncodeJpeg(RampImage(40, 24, i)));
  Pack("a", jpegs);
  auto it = CreateDataIter("ImageRecordIter", Args("a", "(3, 16, 16)", 5));
  EXPECT_EQ(it->DataShapes()[0], (TShape{5, 3, 16, 16}));
  EXPECT_EQ(it->LabelShapes()[0], (TShape{5}));
  it->BeforeFirst();
  const auto batches = Epoch(it.get());
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].pad, 0);
  EXPECT_EQ(batches[0].index, (std::vector<std::uint64_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(batches[0].label, (std::vector<float>{0, 1, 2, 3, 4}));
  for (int s = 0; s < 5; ++s) ExpectCrop(batches[0].data, s, 3, 16, 16, 4, 12, false, s);
  // The same values without the .idx (records found by scanning the file) and with one thread.
  auto plain = CreateDataIter("ImageRecordIter", {{"path_imgrec", Path("a.rec")},
                                                  {"data_shape", "(3, 16, 16)"},
                                                  {"batch_size", "5"},
                                                  {"preprocess_threads", "1"},
                                                  {"prefetch_buffer", "0"}});
  const auto again = Epoch(plain.get());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].data, batches[0].data);
  EXPECT_EQ(again[0].index, batches[0].index);
}

TEST_F(ImageRecordIterTest, MeanStdScale) {
  Pack("m", {EncodeJpeg(RampImage(16, 16))});
  auto it = CreateDataIter("ImageRecordIter", Args("m", "(3, 16, 16)", 1,
                                                   {{"mean_r", "10"}, {"mean_g", "20"}, {"mean_b", "30"},
                                                    {"std_r", "2"}, {"std_g", "4"}, {"std_b", "8"}, {"scale", "0.5"}}));
  const auto b = Epoch(it.get());
  ASSERT_EQ(b.size(), 1u);
  const float mean[3] = {10, 20, 30}, mult[3] = {0.25f, 0.125f, 0.0625f};
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 16; ++y) {
      for (int x = 0; x < 16; ++x) {
        const float want = (RampValue(y, x, c) - mean[c]) * mult[c];
        ASSERT_NEAR(b[0].data[(static_cast<std::size_t>(c) * 16 + y) * 16 + x], want, kTol * mult[c])
            << "c=" << c << " y=" << y << " x=" << x;
      }
    }
  }
}

TEST_F(ImageRecordIterTest, Grayscale) {
  // A gray JPEG read with C=1, and an RGB JPEG converted to luma (0.299 R + 0.587 G + 0.114 B).
  const Image gray = RampImage(20, 12, 0, 1);
  const Image rgb = RampImage(20, 12);
  Pack("g", {EncodeJpeg(gray), EncodeJpeg(rgb)});
  auto it = CreateDataIter("ImageRecordIter", Args("g", "(1, 12, 20)", 2));
  EXPECT_EQ(it->DataShapes()[0], (TShape{2, 1, 12, 20}));
  const auto b = Epoch(it.get());
  ASSERT_EQ(b.size(), 1u);
  for (int y = 0; y < 12; ++y) {
    for (int x = 0; x < 20; ++x) {
      ASSERT_NEAR(b[0].data[static_cast<std::size_t>(y) * 20 + x], gray.at(y, x, 0), kTol) << y << "," << x;
      const float luma = 0.299f * rgb.at(y, x, 0) + 0.587f * rgb.at(y, x, 1) + 0.114f * rgb.at(y, x, 2);
      ASSERT_NEAR(b[0].data[240 + static_cast<std::size_t>(y) * 20 + x], luma, kTol) << y << "," << x;
    }
  }
}

TEST_F(ImageRecordIterTest, MirrorFlipsLeftRight) {
  Pack("r", {EncodeJpeg(RampImage(24, 16))});
  auto it = CreateDataIter("ImageRecordIter", Args("r", "(3, 16, 16)", 1, {{"mirror", "True"}}));
  const auto b = Epoch(it.get());
  ASSERT_EQ(b.size(), 1u);
  ExpectCrop(b[0].data, 0, 3, 16, 16, 0, 4, /*mirrored=*/true);

  // rand_mirror: each sample is the centre crop, either plain or mirrored; both occur over 32 samples, and
  // the choice is the same for the same seed.
  std::vector<std::string> jpegs(32, EncodeJpeg(RampImage(24, 16)));
  Pack("rm", jpegs);
  auto run = [&](const std::string& seed) {
    auto rit = CreateDataIter("ImageRecordIter", Args("rm", "(3, 16, 16)", 32, {{"rand_mirror", "True"}, {"seed", seed}}));
    return Epoch(rit.get());
  };
  const auto m = run("3");
  ASSERT_EQ(m.size(), 1u);
  int flipped = 0;
  for (int s = 0; s < 32; ++s) {
    int y0, x0;
    bool mirrored;
    ASSERT_TRUE(FindCrop(m[0].data, s, 16, 16, 24, 16, &y0, &x0, &mirrored)) << s;
    ExpectCrop(m[0].data, s, 3, 16, 16, 0, 4, mirrored);
    flipped += mirrored;
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 32);
  EXPECT_EQ(run("3")[0].data, m[0].data);
}

TEST_F(ImageRecordIterTest, RandomCropIsDeterministicPerSeed) {
  // 48x40 images, 16x16 crops: corners in [0, 24] x [0, 32].
  std::vector<std::string> jpegs(12, EncodeJpeg(RampImage(48, 40)));
  Pack("c", jpegs);
  auto run = [&](const std::string& seed, const std::string& threads) {
    auto it = CreateDataIter("ImageRecordIter", Args("c", "(3, 16, 16)", 4,
                                                     {{"rand_crop", "True"}, {"rand_mirror", "True"}, {"seed", seed},
                                                      {"preprocess_threads", threads}}));
    std::vector<Batch> two_epochs = Epoch(it.get());
    it->BeforeFirst();
    for (auto& b : Epoch(it.get())) two_epochs.push_back(std::move(b));
    return two_epochs;
  };
  const auto a = run("7", "3");
  ASSERT_EQ(a.size(), 6u);
  std::set<std::pair<int, int>> corners;
  for (const auto& b : a) {
    for (int s = 0; s < 4; ++s) {
      int y0, x0;
      bool mirrored;
      ASSERT_TRUE(FindCrop(b.data, s, 16, 16, 48, 40, &y0, &x0, &mirrored));
      ExpectCrop(b.data, s, 3, 16, 16, y0, x0, mirrored);
      corners.insert({y0, x0});
    }
  }
  EXPECT_GT(corners.size(), 6u) << "random crops should vary";
  // Same seed, any thread count: the same batches. Another seed: other crops.
  const auto same = run("7", "1");
  const auto other = run("8", "3");
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(same[i].data, a[i].data) << "batch " << i;
    differs |= other[i].data != a[i].data;
  }
  EXPECT_TRUE(differs);
  // The second epoch draws new crops.
  bool epochs_differ = false;
  for (std::size_t i = 0; i < 3; ++i) epochs_differ |= a[i].data != a[i + 3].data;
  EXPECT_TRUE(epochs_differ);
}

// The default augmenter's random warp (rotation, shear, scale, aspect ratio): drawn per sample from the seed, the
// same for any thread count, other draws for another seed or epoch; fill_value shows where the warp leaves
// the image.
TEST_F(ImageRecordIterTest, RandomWarpIsDeterministicPerSeed) {
  std::vector<std::string> jpegs(8, EncodeJpeg(RampImage(32, 32)));
  Pack("w", jpegs);
  auto run = [&](const std::string& seed, const std::string& threads) {
    auto it = CreateDataIter("ImageRecordIter",
                             Args("w", "(3, 24, 24)", 4,
                                  {{"max_rotate_angle", "30"}, {"max_shear_ratio", "0.1"}, {"min_random_scale", "0.8"},
                                   {"max_random_scale", "1.2"}, {"max_aspect_ratio", "0.2"}, {"min_img_size", "24"},
                                   {"fill_value", "0"}, {"seed", seed}, {"preprocess_threads", threads}}));
    std::vector<Batch> two_epochs = Epoch(it.get());
    it->BeforeFirst();
    for (auto& b : Epoch(it.get())) two_epochs.push_back(std::move(b));
    return two_epochs;
  };
  const auto a = run("3", "3");
  ASSERT_EQ(a.size(), 4u);
  // The same image, warped differently per sample: the samples of a batch differ, and corners show the fill.
  std::set<std::vector<float>> samples;
  int filled_corners = 0;
  const std::size_t n = 3 * 24 * 24;
  for (const auto& b : a) {
    for (int s = 0; s < 4; ++s) {
      samples.insert(std::vector<float>(b.data.begin() + s * n, b.data.begin() + (s + 1) * n));
      filled_corners += b.data[s * n] == 0.0f && b.data[s * n + 24 * 24] == 0.0f && b.data[s * n + 2 * 24 * 24] == 0.0f;
    }
  }
  EXPECT_GT(samples.size(), 12u);
  EXPECT_GT(filled_corners, 0);
  const auto same = run("3", "1");
  const auto other = run("4", "3");
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(same[i].data, a[i].data) << "batch " << i;
    differs |= other[i].data != a[i].data;
  }
  EXPECT_TRUE(differs);
  EXPECT_NE(a[0].data, a[2].data);  // the second epoch draws anew
}

// The colour augmentations: per seed, any thread count; they change the pixels; gray images take brightness only.
TEST_F(ImageRecordIterTest, ColourAugmentationsAreDeterministicPerSeed) {
  std::vector<std::string> jpegs(4, EncodeJpeg(RampImage(24, 24)));
  Pack("col", jpegs);
  auto run = [&](const std::string& threads, Kwargs extra) {
    extra.insert(extra.end(), {{"seed", "9"}, {"preprocess_threads", threads}});
    auto it = CreateDataIter("ImageRecordIter", Args("col", "(3, 16, 16)", 4, extra));
    return Epoch(it.get());
  };
  const Kwargs colour = {{"brightness", "0.3"}, {"contrast", "0.3"}, {"saturation", "0.3"}, {"random_h", "20"},
                         {"random_s", "30"}, {"random_l", "30"}, {"pca_noise", "0.1"},
                         {"max_random_contrast", "0.2"}, {"max_random_illumination", "10"}};
  const auto plain = run("1", {}), a = run("3", colour), b = run("1", colour);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].data, b[0].data);
  EXPECT_NE(a[0].data, plain[0].data);
  const std::size_t n = 3 * 16 * 16;
  EXPECT_NE(std::vector<float>(a[0].data.begin(), a[0].data.begin() + n),
            std::vector<float>(a[0].data.begin() + n, a[0].data.begin() + 2 * n));  // each sample its own draws
  ExpectError([&] { CreateDataIter("ImageRecordIter", Args("col", "(1, 16, 16)", 1, {{"contrast", "0.2"}})); },
              {"contrast", "3 channels"});
  auto gray = CreateDataIter("ImageRecordIter", Args("col", "(1, 16, 16)", 4, {{"brightness", "0.4"}}));
  EXPECT_EQ(Epoch(gray.get()).size(), 1u);
}

// random_resized_crop: a random region each sample, resized to data_shape; per seed, any thread count.
TEST_F(ImageRecordIterTest, RandomResizedCropIsDeterministicPerSeed) {
  std::vector<std::string> jpegs(8, EncodeJpeg(RampImage(40, 40)));
  Pack("r", jpegs);
  auto run = [&](const std::string& threads) {
    auto it = CreateDataIter("ImageRecordIter",
                             Args("r", "(3, 16, 16)", 4,
                                  {{"random_resized_crop", "True"}, {"min_random_area", "0.2"}, {"max_random_area", "0.8"},
                                   {"min_aspect_ratio", "0.75"}, {"max_aspect_ratio", "1.33"}, {"seed", "5"},
                                   {"preprocess_threads", threads}}));
    return Epoch(it.get());
  };
  const auto a = run("3"), b = run("1");
  ASSERT_EQ(a.size(), 2u);
  std::set<std::vector<float>> samples;
  const std::size_t n = 3 * 16 * 16;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].data, b[i].data);
    for (int s = 0; s < 4; ++s) samples.insert(std::vector<float>(a[i].data.begin() + s * n, a[i].data.begin() + (s + 1) * n));
  }
  EXPECT_GT(samples.size(), 4u);  // regions differ from sample to sample
}

TEST_F(ImageRecordIterTest, ResizeShorterSideBilinear) {
  // 48x32 with resize=16: 24x16 (16 * 48 / 32 = 24). A linear ramp stays linear under bilinear resizing
  // with half-pixel centres: src x = 2 x + 0.5, so R = 5 (2 x + 0.5) + 8.
  Pack("z", {EncodeJpeg(RampImage(48, 32))});
  auto it = CreateDataIter("ImageRecordIter", Args("z", "(3, 16, 24)", 1, {{"resize", "16"}}));
  const auto b = Epoch(it.get());
  ASSERT_EQ(b.size(), 1u);
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 24; ++x) {
      for (int c = 0; c < 3; ++c) {
        const float want = RampValue(0, 0, c) + (c == 0 ? 5.0f * (2 * x + 0.5f)
                                                 : c == 1 ? 5.0f * (2 * y + 0.5f)
                                                          : -2.0f * (2 * x + 0.5f) - 2.0f * (2 * y + 0.5f));
        ASSERT_NEAR(b[0].data[(static_cast<std::size_t>(c) * 16 + y) * 24 + x], want, kTol)
            << "c=" << c << " y=" << y << " x=" << x;
      }
    }
  }
  // Without resize the 48x32 image is smaller than a 40x40 crop: scaled up to 60x40 first (MXNet 1.9), so
  // the ramp's G (y) channel still rises from top to bottom over the crop.
  Pack("small", {EncodeJpeg(RampImage(48, 32))});
  auto s = CreateDataIter("ImageRecordIter", Args("small", "(3, 40, 40)", 1));
  const auto up = Epoch(s.get());
  ASSERT_EQ(up.size(), 1u);
  EXPECT_LT(up[0].data[40 * 40], up[0].data[40 * 40 + 39 * 40]);
  // A crop size larger than the image is an error naming the file and the record.
  const auto offsets = Pack("tiny", {EncodeJpeg(RampImage(16, 16))});
  ExpectError(
      [&] {
        auto t = CreateDataIter("ImageRecordIter", Args("tiny", "(3, 8, 8)", 1,
                                                        {{"min_crop_size", "12"}, {"max_crop_size", "20"},
                                                         {"prefetch_buffer", "0"}}));
        t->Next();
      },
      {Path("tiny.rec"), "byte offset " + std::to_string(offsets[0]), "max_crop_size=20"});
}

TEST_F(ImageRecordIterTest, LabelWidth) {
  ImageRecordHeader h0;
  h0.flag = 3;
  h0.labels = {1.5f, 2.5f, 3.5f};
  h0.id = 7;
  ImageRecordHeader h1 = h0;
  h1.labels = {4, 5, 6};
  h1.id = 8;
  const auto offsets = Pack("l", {EncodeJpeg(RampImage(8, 8)), EncodeJpeg(RampImage(8, 8))}, {h0, h1});
  auto it = CreateDataIter("ImageRecordIter", Args("l", "(3, 8, 8)", 2, {{"label_width", "2"}}));
  EXPECT_EQ(it->LabelShapes()[0], (TShape{2, 2}));
  const auto b = Epoch(it.get());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].label, (std::vector<float>{1.5f, 2.5f, 4, 5}));
  EXPECT_EQ(b[0].index, (std::vector<std::uint64_t>{7, 8}));
  ExpectError(
      [&] {
        auto bad = CreateDataIter("ImageRecordIter", Args("l", "(3, 8, 8)", 2, {{"label_width", "4"}}));
        bad->Next();
      },
      {Path("l.rec"), "byte offset " + std::to_string(offsets[0]), "label_width"});
}

TEST_F(ImageRecordIterTest, ShuffleReshufflesEachEpoch) {
  std::vector<std::string> jpegs(20, EncodeJpeg(RampImage(8, 8)));
  Pack("s", jpegs);
  auto order = [](const std::vector<Batch>& batches) {
    std::vector<std::uint64_t> ids;
    for (const auto& b : batches) ids.insert(ids.end(), b.index.begin(), b.index.end() - b.pad);
    return ids;
  };
  auto it = CreateDataIter("ImageRecordIter", Args("s", "(3, 8, 8)", 5, {{"shuffle", "True"}, {"seed", "4"}}));
  const auto e0 = order(Epoch(it.get()));
  it->BeforeFirst();
  const auto e1 = order(Epoch(it.get()));
  std::vector<std::uint64_t> all(20);
  for (int i = 0; i < 20; ++i) all[i] = 100 + i;
  for (const auto* e : {&e0, &e1}) {
    auto sorted = *e;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(e0, all);
  EXPECT_NE(e0, e1);
  auto again = CreateDataIter("ImageRecordIter", Args("s", "(3, 8, 8)", 5, {{"shuffle", "True"}, {"seed", "4"}}));
  EXPECT_EQ(order(Epoch(again.get())), e0);
}

TEST_F(ImageRecordIterTest, ShardsCoverEveryRecordOnce) {
  std::vector<std::string> jpegs(13, EncodeJpeg(RampImage(8, 8)));
  Pack("p", jpegs);
  for (const bool with_idx : {true, false}) {
    for (int k = 1; k <= 5; ++k) {
      std::multiset<std::uint64_t> seen;
      for (int part = 0; part < k; ++part) {
        Kwargs kw = Args("p", "(3, 8, 8)", 2,
                         {{"num_parts", std::to_string(k)}, {"part_index", std::to_string(part)},
                          {"shuffle", with_idx ? "True" : "False"}, {"preprocess_threads", "2"}});
        if (!with_idx) kw.erase(kw.begin() + 1);  // path_imgidx
        auto it = CreateDataIter("ImageRecordIter", kw);
        for (const auto& b : Epoch(it.get())) seen.insert(b.index.begin(), b.index.end() - b.pad);
      }
      std::multiset<std::uint64_t> want;
      for (int i = 0; i < 13; ++i) want.insert(100 + i);
      EXPECT_EQ(seen, want) << "num_parts=" << k << (with_idx ? " with .idx" : " without .idx");
    }
  }
}

TEST_F(ImageRecordIterTest, LastBatch) {
  std::vector<std::string> jpegs(10, EncodeJpeg(RampImage(8, 8)));
  Pack("b", jpegs);
  auto ids = [](const std::vector<Batch>& bs) {
    std::vector<std::uint64_t> v;
    for (const auto& b : bs) v.insert(v.end(), b.index.begin(), b.index.end());
    return v;
  };
  // round_batch=True: the third batch is completed with records 0, 1; the next epoch starts at record 2.
  auto it = CreateDataIter("ImageRecordIter", Args("b", "(3, 8, 8)", 4));
  auto e0 = Epoch(it.get());
  ASSERT_EQ(e0.size(), 3u);
  EXPECT_EQ(e0[2].pad, 2);
  EXPECT_EQ(ids(e0), (std::vector<std::uint64_t>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 100, 101}));
  it->BeforeFirst();
  auto e1 = Epoch(it.get());
  ASSERT_EQ(e1.size(), 2u);
  EXPECT_EQ(e1[0].index, (std::vector<std::uint64_t>{102, 103, 104, 105}));
  EXPECT_EQ(e1[1].pad, 0);
  // round_batch=False: padded by wrapping, the next epoch starts at record 0.
  auto nr = CreateDataIter("ImageRecordIter", Args("b", "(3, 8, 8)", 4, {{"round_batch", "False"}}));
  auto f0 = Epoch(nr.get());
  ASSERT_EQ(f0.size(), 3u);
  EXPECT_EQ(f0[2].pad, 2);
  nr->BeforeFirst();
  auto f1 = Epoch(nr.get());
  ASSERT_EQ(f1.size(), 3u);
  EXPECT_EQ(f1[0].index, (std::vector<std::uint64_t>{100, 101, 102, 103}));
}

TEST_F(ImageRecordIterTest, UndecodableImageNamesFileAndOffset) {
  std::vector<std::string> payloads(6, EncodeJpeg(RampImage(8, 8)));
  payloads[3] = "this is not a JPEG file at all, just some garbage bytes";
  const std::string good = EncodeJpeg(RampImage(48, 48));
  payloads[4] = good.substr(0, good.size() * 3 / 4);  // cut short inside the scan data
  const auto offsets = Pack("bad", payloads);
  for (const std::string threads : {"1", "3"}) {
    auto it = CreateDataIter("ImageRecordIter", Args("bad", "(3, 8, 8)", 2, {{"preprocess_threads", threads}}));
    ASSERT_TRUE(it->Next());
    ExpectError([&] { it->Next(); }, {Path("bad.rec"), "byte offset " + std::to_string(offsets[3]), "image id 103",
                                      "libjpeg"});
  }
  auto trunc = CreateDataIter("ImageRecordIter", Args("bad", "(3, 8, 8)", 1, {{"prefetch_buffer", "0"}}));
  for (int i = 0; i < 4; ++i) {
    if (i == 3) {
      ExpectError([&] { trunc->Next(); }, {"byte offset " + std::to_string(offsets[3])});
    } else {
      ASSERT_TRUE(trunc->Next());
    }
  }
  ExpectError([&] { trunc->Next(); }, {Path("bad.rec"), "byte offset " + std::to_string(offsets[4]), "Premature end"});
}

TEST_F(ImageRecordIterTest, MissingFilesAndBadArguments) {
  ExpectError([&] { CreateDataIter("ImageRecordIter", Args("nothere", "(3, 8, 8)", 1)); }, {Path("nothere")});
  Pack("ok", {EncodeJpeg(RampImage(8, 8))});
  ExpectError(
      [&] {
        CreateDataIter("ImageRecordIter", {{"path_imgrec", Path("ok.rec")},
                                           {"path_imgidx", Path("missing.idx")},
                                           {"data_shape", "(3, 8, 8)"},
                                           {"batch_size", "1"}});
      },
      {Path("missing.idx")});
  ExpectError([&] { CreateDataIter("ImageRecordIter", Args("ok", "(4, 8, 8)", 1)); }, {"data_shape"});
  ExpectError([&] { CreateDataIter("ImageRecordIter", Args("ok", "(3, 8, 8)", 1, {{"no_such_arg", "1"}})); },
              {"ImageRecordIter", "no_such_arg"});
  ExpectError([&] { CreateDataIter("ImageRecordIter", {{"data_shape", "(3, 8, 8)"}, {"batch_size", "1"}}); },
              {"path_imgrec"});
  ExpectError([&] { CreateDataIter("ImageRecordIter", Args("ok", "(3, 8, 8)", 1, {{"num_parts", "2"}, {"part_index", "1"}})); },
              {"empty"});
  ExpectError([&] { CreateDataIter("ImageRecordIter", Args("ok", "(3, 8, 8)", 1, {{"inter_method", "2"}})); },
              {"inter_method=2", "bilinear"});
  ExpectError([&] {
    CreateDataIter("ImageRecordIter", Args("ok", "(3, 8, 8)", 1, {{"random_resized_crop", "True"}, {"rand_crop", "True"}}));
  }, {"random_resized_crop", "rand_crop"});
  ExpectError([&] { CreateDataIter("ImageRecordIter", Args("ok", "(3, 8, 8)", 1, {{"max_crop_size", "4"}})); },
              {"min_crop_size", "max_crop_size"});
  ExpectError([&] {
    CreateDataIter("ImageRecordIter", Args("ok", "(3, 8, 8)", 1, {{"min_random_scale", "1.5"}, {"max_random_scale", "1.2"}}));
  }, {"min_random_scale", "max_random_scale"});
}

// MXNet 1.9.1's own batches (data/make_image_reference.py: JPEGs of several sizes packed by MXNet, the first
// batch of its ImageRecordIter for each setting): the same settings give the same float32 bytes here —
// decoding, the shorter-side resize (OpenCV's fixed-point bilinear), the affine warp with fixed parameters
// (OpenCV's warpAffine), padding with fill_value, centre crop, mirror, mean/std, scale.
TEST(ImageRecordIterMxnet, BatchesAreMxnetsBitForBit) {
  const std::string dir = TROUPE_TEST_DATA_DIR;
  std::ifstream f(dir + "/image_batches.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json index = nlohmann::json::parse(f);
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(dir + "/image_batches.params", &arrays, &names);
  std::map<std::string, NDArray> want;
  for (std::size_t i = 0; i < arrays.size(); ++i) want[names[i]] = arrays[i];
  for (const auto& c : index["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    Kwargs kw = {{"path_imgrec", dir + "/images.rec"},
                 {"path_imgidx", dir + "/images.idx"},
                 {"batch_size", std::to_string(c["batch_size"].get<int>())},
                 {"shuffle", "False"}};
    std::string made_mean;  // mean_img: a fresh path, so that troupe computes the mean image as MXNet did
    for (const auto& [k, v] : c["settings"].items()) {
      if (k == "mean_img") {
        made_mean = testing::TempDir() + "/troupe_mean_" + name + ".params";
        std::remove(made_mean.c_str());
        kw.emplace_back(k, made_mean);
      } else if (v.is_string()) kw.emplace_back(k, v.get<std::string>());
      else if (v.is_boolean()) kw.emplace_back(k, v.get<bool>() ? "True" : "False");
      else if (v.is_number_integer()) kw.emplace_back(k, std::to_string(v.get<long long>()));
      else kw.emplace_back(k, nlohmann::json(v).dump());  // a float, as JSON writes it (round-trips)
    }
    auto it = CreateDataIter("ImageRecordIter", kw);
    ASSERT_TRUE(it->Next());
    const DataBatch& b = it->Value();
    const std::vector<float> got = b.data[0].ToVector<float>();
    const std::vector<float> expected = want.at(name + "/data").ToVector<float>();
    ASSERT_EQ(b.data[0].shape(), want.at(name + "/data").shape());
    int bad = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (got[i] != expected[i] && ++bad <= 5) {
        ADD_FAILURE() << name << " [" << i << "]: troupe " << got[i] << ", MXNet " << expected[i];
      }
    }
    EXPECT_EQ(bad, 0) << name << ": " << bad << " of " << expected.size() << " values differ";
    EXPECT_EQ(b.label[0].ToVector<float>(), want.at(name + "/label").ToVector<float>());
    if (!made_mean.empty()) {  // the mean image troupe wrote is MXNet's, value for value
      std::vector<NDArray> ours, theirs;
      std::vector<std::string> our_names, their_names;
      NDArray::Load(made_mean, &ours, &our_names);
      NDArray::Load(dir + "/" + c["settings"]["mean_img"].get<std::string>(), &theirs, &their_names);
      ASSERT_EQ(ours.size(), 1u);
      ASSERT_EQ(theirs.size(), 1u);
      EXPECT_EQ(our_names, their_names);
      EXPECT_EQ(ours[0].shape(), theirs[0].shape());
      EXPECT_EQ(ours[0].ToVector<float>(), theirs[0].ToVector<float>());
      std::remove(made_mean.c_str());
    }
  }
}

TEST_F(ImageRecordIterTest, DISABLED_DecodeSpeed) {
  // Not a test: prints images/s for 256x256 JPEGs (quality 90, 4:4:4) with 2 threads.
  std::mt19937 rng(1);
  Image img{256, 256, 3, {}};
  img.pixels.resize(256 * 256 * 3);
  for (int y = 0; y < 256; ++y)
    for (int x = 0; x < 256; ++x)
      for (int c = 0; c < 3; ++c)
        img.pixels[(y * 256 + x) * 3 + c] = static_cast<unsigned char>((x * (c + 1) + y * (3 - c) + rng() % 16) & 0xff);
  const int n = 512;
  std::vector<std::string> jpegs;
  jpegs.reserve(n);
  for (int i = 0; i < n; ++i) jpegs.push_back(EncodeJpeg(img, 90));
  Pack("speed", jpegs);
  for (const std::string threads : {"1", "2"}) {
    auto it = CreateDataIter("ImageRecordIter", Args("speed", "(3, 224, 224)", 64,
                                                     {{"rand_crop", "True"}, {"rand_mirror", "True"},
                                                      {"preprocess_threads", threads}, {"prefetch_buffer", "0"}}));
    Epoch(it.get());  // warm-up
    it->BeforeFirst();
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t images = 0;
    while (it->Next()) images += 64;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("preprocess_threads=%s: %.0f images/s (256x256 JPEG -> 3x224x224)\n", threads.c_str(), images / s);
  }
}

}  // namespace
}  // namespace troupe
