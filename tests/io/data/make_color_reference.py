#!/usr/bin/env python3
"""Writes color_cases.params: MXNet 1.9's colour augmentations (src/io/image_aug_default.cc) computed with
OpenCV exactly as MXNet calls it, on a BGR image, for fixed parameters; image_color_test.cc runs
io/internal/image_color.h's functions on the same RGB image and requires the same bytes.

    /work/mxnet-venv/bin/python tests/io/data/make_color_reference.py     (needs cv2 and mxnet for nd.save)
"""
import os

import cv2
import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    r = np.random.RandomState(3)
    rgb = r.randint(0, 256, size=(17, 23, 3)).astype(np.uint8)
    rgb[0, :5] = [[0, 0, 0], [255, 255, 255], [128, 128, 128], [255, 0, 0], [0, 255, 0]]  # grays and primaries
    bgr = rgb[:, :, ::-1].copy()
    out = {'rgb': rgb}

    def save(name, img_bgr):
        out[name] = img_bgr[:, :, ::-1].copy()

    for alpha in (0.7, 1.3):
        save('brightness_%g' % alpha, _convert_to(bgr, alpha, 0.0))
        gray = cv2.cvtColor(bgr, cv2.COLOR_RGB2GRAY)  # MXNet's call on its BGR image
        mean = np.float32(cv2.mean(gray)[0])
        save('contrast_%g' % alpha, _convert_to(bgr, alpha, float(np.float32(1 - np.float32(alpha)) * mean)))
        g3 = cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR)
        save('saturation_%g' % alpha, cv2.addWeighted(bgr, alpha, g3, 1 - np.float32(alpha), 0.0))
    for dh, dl, ds in ((12, -20, 30), (-7, 15, -40)):
        hls = cv2.cvtColor(bgr, cv2.COLOR_BGR2HLS).astype(np.int32)
        hls[:, :, 0] = np.clip(hls[:, :, 0] + dh, 0, 180)
        hls[:, :, 1] = np.clip(hls[:, :, 1] + dl, 0, 255)
        hls[:, :, 2] = np.clip(hls[:, :, 2] + ds, 0, 255)
        save('hls_%d_%d_%d' % (dh, dl, ds), cv2.cvtColor(hls.astype(np.uint8), cv2.COLOR_HLS2BGR))
    ev = np.array([[55.46 * -0.5675, 4.794 * 0.7192, 1.148 * 0.4009],
                   [55.46 * -0.5808, 4.794 * -0.0045, 1.148 * -0.8140],
                   [55.46 * -0.5836, 4.794 * -0.6948, 1.148 * 0.4203]], np.float32)
    a = np.array([0.3, -0.8, 1.1], np.float32)
    pca_r, pca_g, pca_b = [np.float32(ev[k, 0] * a[0] + ev[k, 1] * a[1] + ev[k, 2] * a[2]) for k in range(3)]
    noisy = bgr.astype(np.float32) + np.array([pca_b, pca_g, pca_r], np.float32)
    save('pca', np.clip(np.trunc(noisy), 0, 255).astype(np.uint8))
    mx.nd.save(os.path.join(HERE, 'color_cases.params'), {k: mx.nd.array(v, dtype='uint8') for k, v in out.items()})
    print('wrote', len(out), 'arrays')


def _convert_to(bgr, alpha, beta):
    # Mat::convertTo(dst, -1, alpha, beta): numpy has no binding for it; cv2.addWeighted with a zero second
    # image computes the same saturate_cast(src * alpha + beta) in float for 8-bit images.
    return cv2.addWeighted(bgr, alpha, np.zeros_like(bgr), 0.0, beta)


if __name__ == '__main__':
    main()
