"""The example scripts (python/examples, written against MXNet 1.x's API) run unchanged through the mxnet alias
and agree with what MXNet 1.9.1 computed with them (python/compat/reference, see compat/check.py)."""
import json
import os
import subprocess
import sys

import pytest

import troupe

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
sys.path.insert(0, os.path.join(HERE, "..", "compat"))
import check  # noqa: E402


def alias_env():
    """The environment of a script run through the alias: the alias package and the troupe this test imports."""
    env = dict(os.environ)
    paths = [os.path.join(HERE, "..", "mxnet_alias"), os.path.dirname(os.path.dirname(troupe.__file__))]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    return env


def run(script, *args, tmp_path):
    out = tmp_path / (script + ".json")
    env = alias_env()
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, script + ".py"), "--json", str(out), *args],
                          cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist"), reason="dataset-fashion-mnist missing")
@pytest.mark.parametrize("script", ["module_mlp", "gluon_cnn"])
def test_training_scripts_agree_with_mxnet(script, tmp_path):
    got = run(script, tmp_path=tmp_path)
    want = json.load(open(os.path.join(HERE, "..", "compat", "reference", script + ".json")))
    assert check.compare(got, want) == []


def test_kvstore_script_agrees_with_mxnet(tmp_path):
    got = run("kvstore_push_pull", tmp_path=tmp_path)
    want = json.load(open(os.path.join(HERE, "..", "compat", "reference", "kvstore_push_pull.json")))
    assert check.compare(got, want) == []


def test_export_reimport_roundtrip(tmp_path):
    env = alias_env()
    prefix = str(tmp_path / "cnn")
    for cmd in (["gluon_cnn.py", "--epochs", "1", "--train-samples", "500", "--export", prefix], ["reimport.py", prefix]):
        proc = subprocess.run([sys.executable] + cmd, cwd=EXAMPLES, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.skipif(not os.environ.get("TROUPE_CLI"), reason="TROUPE_CLI (the troupe command) not given")
@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist"), reason="dataset-fashion-mnist missing")
def test_dist_sync_training_through_troupe_launch(tmp_path):
    """troupe launch -n 2 -s 1 -- python dist_train.py: both workers end with the same weights and learn."""
    env = alias_env()
    results = [tmp_path / ("worker%d.json" % i) for i in range(2)]
    script = os.path.join(EXAMPLES, "dist_train.py")
    # Each worker writes its own results file (TROUPE_LAUNCH_INDEX is its index in launch).
    cmd = [os.environ["TROUPE_CLI"], "launch", "-n", "2", "-s", "1", "--", "sh", "-c",
           '"$0" "$1" --train-samples 3000 --json "$2/worker$TROUPE_LAUNCH_INDEX.json"',
           sys.executable, script, str(tmp_path)]
    proc = subprocess.run(cmd, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    got = [json.loads(r.read_text()) for r in results]
    assert sorted(g["rank"] for g in got) == [0, 1] and all(g["num_workers"] == 2 for g in got)
    assert got[0]["weights_abs_sum"] == got[1]["weights_abs_sum"]
    assert got[0]["test_accuracy"] == got[1]["test_accuracy"] > 0.5  # 10 classes: chance is 0.1
