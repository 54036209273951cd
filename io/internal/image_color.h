// The colour augmentations of MXNet 1.9's default image augmenter (src/io/image_aug_default.cc: brightness,
// contrast, saturation, random_h/s/l, pca_noise), on interleaved 8-bit RGB pixels of `pixel_bytes` bytes each
// (3, or 4 with an unused fourth byte), bit for bit what MXNet computes through OpenCV on its BGR images.
// MXNet's own quirks are kept: its "gray" (for contrast and saturation) is cvtColor(CV_RGB2GRAY) of a BGR
// image, so the weights 0.299 / 0.587 / 0.114 fall on B / G / R.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::internal {

// OpenCV's Mat::convertTo(dst, -1, alpha, beta) for 8-bit pixels: each of the first `channels` bytes of a
// pixel v -> round(v alpha + beta), clamped to [0, 255] (brightness: beta 0; contrast: beta (1 - alpha) *
// MxnetGrayMean). The one function here that also takes gray images (channels 1).
void ScalePixels(unsigned char* px, std::size_t pixels, int pixel_bytes, int channels, float alpha, float beta);

// MXNet's gray of one pixel, as OpenCV's fixed-point CV_RGB2GRAY on MXNet's BGR order: (4899 B + 9617 G +
// 1868 R + 8192) >> 14.
inline int MxnetGray(const unsigned char* p) { return (p[2] * 4899 + p[1] * 9617 + p[0] * 1868 + (1 << 13)) >> 14; }

// The mean of MxnetGray over the pixels (cv::mean), as MXNet uses it: rounded to float.
float MxnetGrayMean(const unsigned char* px, std::size_t pixels, int pixel_bytes);

// Saturation: cv::addWeighted(image, alpha, gray image, 1 - alpha, 0) with MxnetGray per pixel.
void BlendWithGray(unsigned char* px, std::size_t pixels, int pixel_bytes, float alpha);

// random_h/s/l: to OpenCV's 8-bit HLS (H in [0, 180)), add dh / dl / ds clamped to [0, 180] / [0, 255] /
// [0, 255], and back (cvtColor CV_BGR2HLS and CV_HLS2BGR).
void ShiftHls(unsigned char* px, std::size_t pixels, int pixel_bytes, int dh, int dl, int ds);

// pca_noise: adds MXNet's noise for the draws (alpha_r, alpha_g, alpha_b) (normal, sigma pca_noise) to every
// pixel, each sum truncated to an integer and clamped to [0, 255] as MXNet's int arithmetic does.
void AddPcaNoise(unsigned char* px, std::size_t pixels, int pixel_bytes, float alpha_r, float alpha_g, float alpha_b);

}  // namespace troupe::internal
