#!/usr/bin/env python3
"""Writes images.rec / images.idx (JPEG images of several sizes, packed by MXNet) and image_batches.json /
image_batches.params: the first batch of MXNet 1.9.1's ImageRecordIter for several settings (resize down and
up, crop, mirror, mean/std, grayscale, rotation, scale, aspect ratio, image size limits, padding and fill
value, fixed-size crops resized, images smaller than data_shape). image_record_iter_test.cc runs troupe's ImageRecordIter with the same
settings and requires the same bytes.

    /work/mxnet-venv/bin/python tests/io/data/make_image_reference.py     (needs MXNet 1.9.1 and cv2)
"""
import json
import os

import cv2
import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [(37, 29), (50, 64), (23, 40), (64, 48), (31, 31), (45, 33)]  # (height, width)

# name -> ImageRecordIter settings (besides the files, batch_size and shuffle=False)
VARIANTS = {
    'resize_down': dict(data_shape=(3, 20, 20), resize=24),
    'resize_up': dict(data_shape=(3, 40, 40), resize=44),
    'resize_mean_std_mirror': dict(data_shape=(3, 16, 18), resize=20, mirror=True, mean_r=123.7, mean_g=116.3,
                                   mean_b=103.5, std_r=58.4, std_g=57.1, std_b=57.4),
    'resize_gray': dict(data_shape=(1, 22, 22), resize=25),
    'no_resize_crop': dict(data_shape=(3, 20, 20)),
    'resize_scale': dict(data_shape=(3, 24, 24), resize=30, scale=1.0 / 255),
    # The affine warp and the padding, with settings that draw nothing at random (MXNet draws its random
    # parameters from a generator per thread, troupe per sample: only fixed parameters compare).
    'rotate_fill': dict(data_shape=(3, 20, 20), resize=28, rotate=30, fill_value=200),
    'pad_fill': dict(data_shape=(3, 30, 30), resize=24, pad=4, fill_value=50),
    'rotate_scale_gray': dict(data_shape=(1, 20, 20), resize=20, rotate=315, min_random_scale=1.25,
                              max_random_scale=1.25, fill_value=0),
    'small_upscaled': dict(data_shape=(3, 48, 48)),  # every image smaller: MXNet 1.9 scales it up first
    'crop_size_fixed': dict(data_shape=(3, 16, 16), resize=28, min_crop_size=20, max_crop_size=20),
    'aspect_range_fixed': dict(data_shape=(3, 20, 20), resize=26, min_aspect_ratio=1.25, max_aspect_ratio=1.25,
                               fill_value=10),
    # MXNet computes the mean image (absent file) and writes it to mean_img.params, then subtracts it.
    'mean_img_mirror': dict(data_shape=(3, 20, 20), resize=24, mean_img='mean_img.params', mirror=True, scale=0.5),
    'scale_img_size_pad': dict(data_shape=(3, 26, 26), resize=30, min_random_scale=0.8, max_random_scale=0.8,
                               min_img_size=22, max_img_size=23, pad=2, fill_value=128),
}


def image(h, w, seed):
    r = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(1, w - 1), y * 255 // max(1, h - 1), (x + y) * 255 // max(1, w + h - 2)], -1)
    return np.clip(base + r.randint(-40, 40, size=(h, w, 3)), 0, 255).astype(np.uint8)


def main():
    rec_path, idx_path = os.path.join(HERE, 'images.rec'), os.path.join(HERE, 'images.idx')
    rec = mx.recordio.MXIndexedRecordIO(idx_path, rec_path, 'w')
    for i, (h, w) in enumerate(SIZES):
        ok, jpg = cv2.imencode('.jpg', image(h, w, i), [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        rec.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i), i, 0), jpg.tobytes()))
    rec.close()

    arrays, cases = {}, []
    for name, settings in VARIANTS.items():
        run = dict(settings)
        if 'mean_img' in run:  # relative to this folder; removed first so that MXNet computes it
            run['mean_img'] = os.path.join(HERE, run['mean_img'])
            if os.path.exists(run['mean_img']):
                os.remove(run['mean_img'])
        it = mx.io.ImageRecordIter(path_imgrec=rec_path, path_imgidx=idx_path, batch_size=len(SIZES), shuffle=False,
                                   preprocess_threads=1, **run)
        batch = it.next()
        arrays[name + '/data'] = batch.data[0].copy()
        arrays[name + '/label'] = batch.label[0].copy()
        cases.append(dict(name=name, batch_size=len(SIZES),
                          settings={k: (str(v) if isinstance(v, tuple) else v) for k, v in settings.items()}))
    mx.nd.save(os.path.join(HERE, 'image_batches.params'), arrays)
    with open(os.path.join(HERE, 'image_batches.json'), 'w') as f:
        json.dump(dict(mxnet=mx.__version__, opencv=cv2.__version__, cases=cases), f, indent=1, sort_keys=True)
        f.write('\n')
    print('wrote', len(cases), 'cases')


if __name__ == '__main__':
    main()
