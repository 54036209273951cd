"""Ctrl-C (SIGINT) interrupts a wait for the engine (waitall, asnumpy), Module.fit and a DataLoader with workers: the script
gets KeyboardInterrupt while the work is still running, and nothing hangs. DLPack both ways."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np

import troupe as mx

CHILD = textwrap.dedent("""
    import os, sys, time
    import troupe as mx
    mode = sys.argv[1]
    try:
        if mode == "waitall" or mode == "asnumpy":
            a, b = mx.nd.ones((1000, 1000)), mx.nd.ones((1000, 1000))
            # Hours of matrix products (in place: no memory grows): running long after the signal comes.
            for _ in range(20000):
                mx.nd.dot(a, a, out=b)
                mx.nd.dot(b, b, out=a)
            print("waiting", flush=True)
            mx.nd.waitall() if mode == "waitall" else a.asnumpy()
        elif mode == "fit":
            import numpy as np
            data = mx.sym.var("data")
            net = mx.sym.FullyConnected(data, num_hidden=2048)
            net = mx.sym.FullyConnected(net, num_hidden=2048)
            net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(net, num_hidden=10), name="softmax")
            x = np.random.rand(256 * 1000, 64).astype(np.float32)
            it = mx.io.NDArrayIter(x, np.zeros(len(x), np.float32), batch_size=256)
            started = []
            def first_batch(param):
                if not started:
                    started.append(1)
                    print("waiting", flush=True)
            mx.mod.Module(net).fit(it, num_epoch=100, batch_end_callback=first_batch)
        else:
            from troupe import gluon
            class Slow(gluon.data.Dataset):
                def __len__(self):
                    return 10000
                def __getitem__(self, i):
                    if i == 0:
                        print("waiting", flush=True)
                    time.sleep(0.2)  # a slow sample source (disk, decoding)
                    return i
            for batch in gluon.data.DataLoader(Slow(), batch_size=2, num_workers=2):
                pass
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    os._exit(0)  # the engine's remaining work is not waited for
""")


def run_and_interrupt(mode):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy())
    try:
        assert proc.stdout.readline().strip() == "waiting"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.strip() == "interrupted", (out, err)


def test_ctrl_c_interrupts_waitall():
    run_and_interrupt("waitall")


def test_ctrl_c_interrupts_asnumpy():
    run_and_interrupt("asnumpy")


def test_ctrl_c_interrupts_module_fit():
    run_and_interrupt("fit")


def test_ctrl_c_interrupts_a_dataloader_with_workers():
    run_and_interrupt("dataloader")


def test_dlpack_both_ways():
    a = mx.nd.arange(6).reshape((2, 3))
    view = np.from_dlpack(a)  # no copy: the array's memory
    np.testing.assert_array_equal(view, np.arange(6, dtype=np.float32).reshape(2, 3))
    b = mx.nd.from_dlpack(np.arange(4.0))
    assert b.dtype == np.float64
    np.testing.assert_array_equal(b.asnumpy(), np.arange(4.0))
    c = mx.nd.from_dlpack(a.to_dlpack_for_read())
    np.testing.assert_array_equal(c.asnumpy(), a.asnumpy())
    assert a.__dlpack_device__() == (1, 0)
