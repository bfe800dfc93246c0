"""A model and a data set of the user's own through both scripts on an embedded
Ray (examples/own_model.py): the sweep ends in a report whose scaling model and
answers are written for that model, and `--check-equivalence` tells GroupNorm,
which trains on k workers as on one device, from BatchNorm, which does not.
The same sweep attached to a multi-node cluster whose node lacks the user's
module: test_code_shipping.py. Bad references: tests/unit/test_own_model.py."""

import os
import re

import pandas as pd
import pytest

from helpers import run_script

OWN = ["--model", "examples.own_model:cnn", "--dataset", "examples.own_model:tops"]


def test_a_sweep_of_your_own_model_and_data(tmp_path):
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", *OWN, "--workers", "1,2", "--epochs", "2", "--batch-size", "64",
                     "--lr", "0.05", "--train-limit", "2048", "--test-limit", "500",
                     "--out", str(out_dir), "--storage", str(tmp_path / "storage"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert ("model examples.own_model:cnn (13.1k parameters, 52.4k bytes a replica in fp32), data "
            "examples.own_model:tops (1x32x32, 4 classes): "
            "2048 train / 500 test images") in run.stdout
    trials = pd.read_csv(out_dir / "trials.csv")
    assert sorted(trials["num_workers"]) == [1, 2]
    assert set(trials["dataset"]) == {"examples.own_model:tops"}
    assert (trials["final_test_acc"] > 0.4).all(), trials["final_test_acc"]  # chance: 0.25
    report = (out_dir / "report.md").read_text()
    assert "of examples.own_model:tops (1x32x32, 4 classes)" in report
    scaling = pd.read_csv(out_dir / "scaling_model.csv")
    assert set(scaling["model"]) == {"examples.own_model:cnn"}
    assert "## Scaling model" in report and "Each measured multi-worker trial predicted" in report
    answers = (out_dir / "answers.md").read_text()
    assert "### How many workers are worth it" in answers and "### 13.5.1" not in answers
    assert "**a what-if beyond the worker counts measured here (1, 2)**" in answers


def test_the_equivalence_check_tells_groupnorm_from_batchnorm(tmp_path):
    exact = run_script("train.py", *OWN, "--workers", "2", "--check-equivalence",
                       "--train-limit", "1024", "--storage", str(tmp_path))
    assert exact.returncode == 0, exact.stdout[-3000:] + exact.stderr[-3000:]
    last = exact.stdout.strip().splitlines()[-1]
    assert last.startswith("equivalence: agree. 2 workers and 1 device after 4 steps of the "
                           "same global batch (fp64)"), last
    batchnorm = run_script("train.py", "--model", "examples.own_model:cnn_batchnorm",
                           "--dataset", "examples.own_model:tops", "--workers", "2",
                           "--check-equivalence", "--train-limit", "1024",
                           "--storage", str(tmp_path))
    assert batchnorm.returncode == 1, batchnorm.stdout[-3000:] + batchnorm.stderr[-3000:]
    verdict = batchnorm.stderr.strip().splitlines()[-1]
    assert verdict.startswith("equivalence: differ: "), verdict
    assert "1 (BatchNorm2d)" in verdict.split(". ")[0]
    assert "the cause is likely its layers that look at the batch: 1 (BatchNorm2d), " \
           "5 (BatchNorm2d)" in verdict


GREEDY = '''
import torch
from torch import nn


class _Greedy(nn.Module):
    """Fine at the model check's batch of 2; at a training batch it asks for more
    memory than any machine has: the allocator's own refusal, not a stand-in."""

    def __init__(self, num_classes, input_shape):
        super().__init__()
        self.fc = nn.Linear(input_shape[0] * input_shape[1] * input_shape[2], num_classes)

    def forward(self, x):
        if x.shape[0] > 2:
            torch.empty(x.shape[0], 1 << 50, dtype=torch.uint8)
        return self.fc(x.flatten(1))


def greedy(num_classes, input_shape):
    return _Greedy(num_classes, input_shape)
'''


@pytest.mark.reliability(
    fault="a model of one's own whose training step asks for more memory than the machine has "
          "(the CPU allocator refuses), in a sweep and in train.py",
    lost="the run: the sweep writes its files and exits 1, its closing line, trials.csv and "
         "report.md naming the error once with what needs less memory; train.py's last line "
         "says the same")
def test_a_worker_out_of_memory_is_one_line_with_the_ways_out(tmp_path):
    """The sweep writes its files and names the failure and what needs less memory
    in one line, as trials.csv and report.md do; train.py's last line says the same,
    not a screen of Ray's error snippets (the rules: tests/unit/test_failures.py)."""
    (tmp_path / "greedy_model.py").write_text(GREEDY)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    small = ["--model", "greedy_model:greedy", "--workers", "2", "--batch-size", "64",
             "--epochs", "1", "--train-limit", "256", "--test-limit", "64",
             "--max-failures", "0", "--storage", str(tmp_path / "storage")]
    advice = ("(a node ran out of memory, training 32 images a step per worker: a smaller "
              "--batch-size, or fewer workers on a node{} needs less; so does "
              "--accumulation-steps N, the same step in N micro-batches)")
    out_dir = tmp_path / "out"
    run = run_script("sweep.py", *small, "--out", str(out_dir), env=env)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]
    # Both ranks, unless the controller polled between their failures.
    assert re.fullmatch(r"1 trial failed: \S+_00000: ranks? [\d, ]+: RuntimeError: .*can't "
                        r"allocate memory.* " + re.escape(advice.format(
                            " or fewer trials at a time (--max-concurrent-trials),")), last), last
    (error,) = pd.read_csv(out_dir / "trials.csv")["error"]
    assert last.endswith(error)
    assert f"no epoch finished: {error} [failed]" in (out_dir / "report.md").read_text()

    run = run_script("train.py", *small, env=env)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]
    assert re.match(r"training failed: ranks? [\d, ]+: RuntimeError: ", last), last
    assert last.endswith(advice.format(",")), last
