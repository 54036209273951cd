"""Starts an MXNet 1.9.1 dist cluster on 127.0.0.1 for the benchmarks' MXNet anchors (bench/*/mxnet/).

ps-lite's own launcher protocol: a scheduler, `servers` servers and `workers` workers, each a copy of
`node_command` told its role through the DMLC_* variables. Each process gets one engine worker
(MXNET_CPU_WORKER_NTHREADS=1) and `omp_threads` OpenMP threads. A worker prints one line "RESULT <json>";
`run` returns those documents in worker order and exits the benchmark, naming the exit status, when a worker
fails or prints none. MXNet is an anchor only: nothing builds or tests against it.
"""
import json
import os
import socket
import subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(node_command, servers, workers, omp_threads, timeout=1800):
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
                DMLC_NUM_SERVER=str(servers), DMLC_NUM_WORKER=str(workers), MXNET_CPU_WORKER_NTHREADS="1",
                OMP_NUM_THREADS=str(omp_threads))
    procs = [subprocess.Popen(node_command, env=dict(base, DMLC_ROLE="scheduler"))]
    procs += [subprocess.Popen(node_command, env=dict(base, DMLC_ROLE="server")) for _ in range(servers)]
    ws = [subprocess.Popen(node_command, env=dict(base, DMLC_ROLE="worker"), stdout=subprocess.PIPE, text=True)
          for _ in range(workers)]
    results = []
    for w in ws:
        out, _ = w.communicate(timeout=timeout)
        line = [l for l in out.splitlines() if l.startswith("RESULT ")]
        if w.returncode != 0 or not line:
            raise SystemExit("an MXNet worker failed (exit %d)" % w.returncode)
        results.append(json.loads(line[-1][7:]))
    for p in procs:
        p.wait(timeout=120)
    return results
