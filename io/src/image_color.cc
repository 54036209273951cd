#include "io/internal/image_color.h"

#include <algorithm>
#include <cmath>

namespace troupe::internal {
namespace {

// OpenCV's saturate_cast<uchar>(float): round to nearest (ties to even), clamp.
unsigned char SaturateU8(float v) {
  const long r = std::lrint(v);
  return static_cast<unsigned char>(r < 0 ? 0 : (r > 255 ? 255 : r));
}

}  // namespace

// OpenCV's vector loops compute v * alpha + beta with one rounding (a fused multiply-add); so does std::fma,
// in one instruction where the processor has FMA (the clone the loader picks), else in the C library.
__attribute__((target_clones("fma", "default"))) void ScalePixels(unsigned char* px, std::size_t pixels,
                                                                    int pixel_bytes, int channels, float alpha,
                                                                    float beta) {
  for (std::size_t i = 0; i < pixels; ++i, px += pixel_bytes) {
    for (int c = 0; c < channels; ++c) px[c] = SaturateU8(std::fma(static_cast<float>(px[c]), alpha, beta));
  }
}

float MxnetGrayMean(const unsigned char* px, std::size_t pixels, int pixel_bytes) {
  double sum = 0;
  for (std::size_t i = 0; i < pixels; ++i, px += pixel_bytes) sum += MxnetGray(px);
  return pixels == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(pixels));
}

// addWeighted: fma(src1, alpha, fma(src2, beta, gamma)) with gamma 0, as OpenCV's vector loop.
__attribute__((target_clones("fma", "default"))) void BlendWithGray(unsigned char* px, std::size_t pixels,
                                                                      int pixel_bytes, float alpha) {
  const float beta = 1 - alpha;
  for (std::size_t i = 0; i < pixels; ++i, px += pixel_bytes) {
    const float g = static_cast<float>(MxnetGray(px)) * beta;
    for (int c = 0; c < 3; ++c) px[c] = SaturateU8(std::fma(static_cast<float>(px[c]), alpha, g));
  }
}

void ShiftHls(unsigned char* px, std::size_t pixels, int pixel_bytes, int dh, int dl, int ds) {
  for (std::size_t i = 0; i < pixels; ++i, px += pixel_bytes) {
    // To HLS (OpenCV's RGB2HLS_f on values / 255, H scaled to [0, 180)).
    const float r = px[0] * (1.0f / 255.0f), g = px[1] * (1.0f / 255.0f), b = px[2] * (1.0f / 255.0f);
    const float vmax = std::max(std::max(r, g), b), vmin = std::min(std::min(r, g), b);
    float diff = vmax - vmin;
    const float l = (vmax + vmin) * 0.5f;
    float h = 0.0f, s = 0.0f;
    if (diff > 1.1920929e-7f) {  // FLT_EPSILON
      s = l < 0.5f ? diff / (vmax + vmin) : diff / (2 - vmax - vmin);
      diff = 60.0f / diff;
      if (vmax == r) {
        h = (g - b) * diff;
      } else if (vmax == g) {
        h = (b - r) * diff + 120.0f;
      } else {
        h = (r - g) * diff + 240.0f;
      }
      if (h < 0.0f) h += 360.0f;
    }
    int hls[3] = {SaturateU8(h * 0.5f), SaturateU8(l * 255.0f), SaturateU8(s * 255.0f)};
    // MXNet's shift, clamped to H's 180 and L's and S's 255.
    hls[0] = std::clamp(hls[0] + dh, 0, 180);
    hls[1] = std::clamp(hls[1] + dl, 0, 255);
    hls[2] = std::clamp(hls[2] + ds, 0, 255);
    // Back (OpenCV's HLS2RGB_f: H * 6 / 180, L and S / 255).
    float hh = static_cast<float>(hls[0]), ll = hls[1] * (1.0f / 255.0f), ss = hls[2] * (1.0f / 255.0f);
    float rgb[3];
    if (ss == 0.0f) {
      rgb[0] = rgb[1] = rgb[2] = ll;
    } else {
      static const int kSector[6][3] = {{1, 3, 0}, {1, 0, 2}, {3, 0, 1}, {0, 2, 1}, {0, 1, 3}, {2, 1, 0}};
      const float p2 = ll <= 0.5f ? ll * (1 + ss) : ll + ss - ll * ss;
      const float p1 = 2 * ll - p2;
      hh *= 6.0f / 180.0f;
      while (hh < 0) hh += 6;
      while (hh >= 6) hh -= 6;
      const int sector = static_cast<int>(std::floor(hh));
      hh -= static_cast<float>(sector);
      const float tab[4] = {p2, p1, p1 + (p2 - p1) * (1 - hh), p1 + (p2 - p1) * hh};
      const float bb = tab[kSector[sector][0]], gg = tab[kSector[sector][1]], rr = tab[kSector[sector][2]];
      rgb[0] = rr;
      rgb[1] = gg;
      rgb[2] = bb;
    }
    for (int c = 0; c < 3; ++c) px[c] = SaturateU8(rgb[c] * 255.0f);
  }
}

void AddPcaNoise(unsigned char* px, std::size_t pixels, int pixel_bytes, float alpha_r, float alpha_g, float alpha_b) {
  // MXNet's eigen vectors scaled by their eigen values (image_aug_default.cc), rows R, G, B.
  static const float kEig[3][3] = {{55.46f * -0.5675f, 4.794f * 0.7192f, 1.148f * 0.4009f},
                                   {55.46f * -0.5808f, 4.794f * -0.0045f, 1.148f * -0.8140f},
                                   {55.46f * -0.5836f, 4.794f * -0.6948f, 1.148f * 0.4203f}};
  float pca[3];
  for (int k = 0; k < 3; ++k) pca[k] = kEig[k][0] * alpha_r + kEig[k][1] * alpha_g + kEig[k][2] * alpha_b;
  // MXNet adds {pca_b, pca_g, pca_r} to its B, G, R: pca[0] (its pca_r) to R.
  const float add[3] = {pca[0], pca[1], pca[2]};
  for (std::size_t i = 0; i < pixels; ++i, px += pixel_bytes) {
    for (int c = 0; c < 3; ++c) {
      int v = px[c];
      v = static_cast<int>(static_cast<float>(v) + add[c]);
      px[c] = static_cast<unsigned char>(std::clamp(v, 0, 255));
    }
  }
}

}  // namespace troupe::internal
