// io/internal/image_color.h against OpenCV called as MXNet 1.9's default augmenter calls it (the cases of
// data/make_color_reference.py, fixed parameters): the same bytes.
#include "io/internal/image_color.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tensor/ndarray.h"

namespace troupe::internal {
namespace {

class ImageColorTest : public testing::Test {
 protected:
  void SetUp() override {
    std::vector<NDArray> arrays;
    std::vector<std::string> names;
    NDArray::Load(std::string(TROUPE_TEST_DATA_DIR) + "/color_cases.params", &arrays, &names);
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      std::vector<unsigned char> bytes;
      for (float v : arrays[i].AsType(DType::kFloat32).ToVector<float>()) bytes.push_back(static_cast<unsigned char>(v));
      cases_[names[i]] = bytes;
    }
    ASSERT_TRUE(cases_.count("rgb"));
  }
  // The input as RGBX (the iterator's 4-byte pixels), and back to RGB.
  std::vector<unsigned char> Rgbx() const {
    const auto& rgb = cases_.at("rgb");
    std::vector<unsigned char> out;
    for (std::size_t i = 0; i < rgb.size(); i += 3) out.insert(out.end(), {rgb[i], rgb[i + 1], rgb[i + 2], 77});
    return out;
  }
  static std::vector<unsigned char> Rgb(const std::vector<unsigned char>& rgbx) {
    std::vector<unsigned char> out;
    for (std::size_t i = 0; i < rgbx.size(); i += 4) {
      EXPECT_EQ(rgbx[i + 3], 77);  // the fourth byte untouched
      out.insert(out.end(), {rgbx[i], rgbx[i + 1], rgbx[i + 2]});
    }
    return out;
  }
  void Expect(const std::string& name, const std::vector<unsigned char>& rgbx) const {
    const std::vector<unsigned char> got = Rgb(rgbx), & want = cases_.at(name);
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (got[i] != want[i] && ++bad <= 5) {
        ADD_FAILURE() << name << " byte " << i << " (pixel " << i / 3 << "): " << int(got[i]) << ", OpenCV " << int(want[i]);
      }
    }
    EXPECT_EQ(bad, 0) << name << ": " << bad << " bytes differ";
  }
  std::size_t Pixels() const { return cases_.at("rgb").size() / 3; }
  std::map<std::string, std::vector<unsigned char>> cases_;
};

TEST_F(ImageColorTest, BrightnessContrastSaturationAreOpenCVs) {
  for (float alpha : {0.7f, 1.3f}) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "_%g", static_cast<double>(alpha));
    auto px = Rgbx();
    ScalePixels(px.data(), Pixels(), 4, 3, alpha, 0.0f);
    Expect(std::string("brightness") + suffix, px);
    px = Rgbx();
    ScalePixels(px.data(), Pixels(), 4, 3, alpha, (1 - alpha) * MxnetGrayMean(px.data(), Pixels(), 4));
    Expect(std::string("contrast") + suffix, px);
    px = Rgbx();
    BlendWithGray(px.data(), Pixels(), 4, alpha);
    Expect(std::string("saturation") + suffix, px);
  }
}

TEST_F(ImageColorTest, HlsShiftIsOpenCVs) {
  auto px = Rgbx();
  ShiftHls(px.data(), Pixels(), 4, 12, -20, 30);
  Expect("hls_12_-20_30", px);
  px = Rgbx();
  ShiftHls(px.data(), Pixels(), 4, -7, 15, -40);
  Expect("hls_-7_15_-40", px);
}

TEST_F(ImageColorTest, PcaNoiseIsMxnets) {
  auto px = Rgbx();
  AddPcaNoise(px.data(), Pixels(), 4, 0.3f, -0.8f, 1.1f);
  Expect("pca", px);
}

}  // namespace
}  // namespace troupe::internal
