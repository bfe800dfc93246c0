"""13.6.1 for ResNet-18: its gradient bytes (the report's constant against the built
model), the 16-GPU rows, each labelled for what it is, and the model against the
book's own 1- and 2-GPU epochs."""


import pandas as pd
import pytest

from orchestrator.report import resnet18_what_if as resnet
from orchestrator.report.answers import exercise_13_6_1
from orchestrator.report.costs import INTERCONNECTS, P2_16XLARGE
from test_answers import _summary


def test_the_constant_is_the_built_models_parameter_count():
    from orchestrator.training.models import build_model  # torch: tests only

    parameters = list(build_model("resnet18", seed=0).parameters())
    assert sum(p.numel() for p in parameters) == resnet.RESNET18_PARAMETERS
    assert len(parameters) == resnet.RESNET18_TENSORS
    assert resnet.RESNET18_GRADIENT_BYTES == sum(p.numel() * 4 for p in parameters)


def test_the_book_check_predicts_2_gpus_from_1_with_data_parallels_traffic():
    """235 steps of 256 in 13.8 s; on 2 GPUs 118 steps of 512, each the 1-GPU step plus
    NCCL's broadcast of the parameters from GPU 0 and reduce of the gradients onto it
    over PCIe; what the book's 9.5 s leaves over is DataParallel's own overhead."""
    step_s = 13.8 / 235
    comm_s = 2 * (P2_16XLARGE.alpha_s + 44_703_272 / P2_16XLARGE.beta_bytes_per_s)
    expected_s = 118 * (step_s + comm_s)
    check = resnet.book_check()
    assert check["predicted_two_gpu_epoch_s"] == pytest.approx(expected_s, rel=1e-12)
    assert check["error"] == pytest.approx((expected_s - 9.5) / 9.5, rel=1e-12)
    assert (check["one_gpu_epoch_s"], check["two_gpu_epoch_s"]) == (13.8, 9.5)
    overhead_s = 9.5 / 118 - step_s - comm_s
    assert check["overhead_s_per_step"] == pytest.approx(overhead_s, rel=1e-12)
    # With it, the model gives the book's 2-GPU epoch back: it is fitted there.
    assert 118 * (step_s + comm_s + overhead_s) == pytest.approx(9.5, rel=1e-12)


def test_sixteen_gpu_rows_use_resnets_bytes_and_say_what_they_are():
    rows = resnet.sixteen_gpu_rows(_summary(), use_gpu=False)  # no ResNet-18 trial
    # The book's DataParallel and DDP's ring on the p2.16xlarge, the ring on each named
    # link, and two 8-GPU nodes.
    assert len(rows) == 3 + len(INTERCONNECTS)
    assert rows["row"].str.startswith("what-if: the book's GPU, cited").all()
    (p2,) = rows[rows["row"].str.contains("p2.16xlarge \\(8 K80 boards, 16 GPUs\\)'s bandwidth, "
                                          "DDP's ring")
                 ].to_dict("records")
    # Two 25 MB buckets, each 2 * 15 ring steps; 2 * 15/16 of the bytes per GPU.
    comm_s = (2 * 30 * P2_16XLARGE.alpha_s
              + 30 / 16 * 44_703_272 / P2_16XLARGE.beta_bytes_per_s)
    assert p2["comm_s_per_step"] == pytest.approx(comm_s, rel=1e-12)
    # An epoch's examples over the global batch: the last, partial step counted as its
    # share, on 1 GPU as on 16, so that the speedup is a ratio of throughputs.
    steps = 60_000 / 4096
    assert p2["epoch_s"] == pytest.approx(steps * (13.8 / 235 + comm_s), rel=1e-12)
    assert p2["speedup"] == pytest.approx(60_000 / 256 * 13.8 / 235 / p2["epoch_s"], rel=1e-12)
    # The book's own program: nn.DataParallel's NCCL broadcast and reduce carry the 44.7 MB
    # once each through every link (not 30 copies through GPU 0's: torch's comm.py calls
    # nccl.reduce), and its one process's overhead, fitted at 2 GPUs, grows with 15 replicas.
    (book,) = rows[rows["row"].str.contains("the book's nn.DataParallel")].to_dict("records")
    book_comm_s = 2 * (15 * P2_16XLARGE.alpha_s + 44_703_272 / P2_16XLARGE.beta_bytes_per_s)
    assert book["comm_s_per_step"] == pytest.approx(book_comm_s, rel=1e-12)
    overhead_s = 15 * resnet.book_check()["overhead_s_per_step"]
    assert book["overhead_s_per_step"] == pytest.approx(overhead_s, rel=1e-12)
    assert book["epoch_s"] == pytest.approx(steps * (13.8 / 235 + book_comm_s + overhead_s),
                                            rel=1e-12)
    assert book["speedup"] < p2["speedup"]
    # Two 8-GPU nodes: a ring of 8 over NVLink inside, the node sums across 2 nodes.
    (nodes,) = rows[rows["row"].str.contains("two 8-GPU nodes")].to_dict("records")
    nvlink, network = INTERCONNECTS[2], INTERCONNECTS[1]
    two_level_s = (2 * 14 * nvlink.alpha_s + 14 / 8 * 44_703_272 / nvlink.beta_bytes_per_s
                   + 2 * 2 * network.alpha_s + 1 * 44_703_272 / network.beta_bytes_per_s)
    assert nodes["comm_s_per_step"] == pytest.approx(two_level_s, rel=1e-12)
    (one_node,) = rows[rows["row"].str.contains("NVLink, 8x H100 \\(NCCL\\)'s bandwidth")
                       ]["speedup"]
    assert nodes["speedup"] < one_node  # the network between the nodes costs


def test_a_measured_resnet18_epoch_is_used_and_labelled_measured():
    summary = pd.concat([_summary(), pd.DataFrame([{
        "model": "resnet18", "num_workers": 1, "mean_epoch_time_s": 30.0,
        "steps_per_epoch": 235, "global_batch_size": 256}])], ignore_index=True)
    rows = resnet.sixteen_gpu_rows(summary, use_gpu=True)
    ours = rows[rows["row"].str.contains("this cluster's compute \\(ResNet-18 on 1 GPU, "
                                         "measured: 0.128 s a step of 256\\)")]
    assert len(ours) == 3 + len(INTERCONNECTS)
    assert ours["row"].str.startswith("what-if: ").all()
    (p2,) = ours[ours["row"].str.contains("p2.16xlarge.*DDP's ring")]["epoch_s"]
    comm_s = resnet.ring_comm_s(P2_16XLARGE, 16)
    assert p2 == pytest.approx(60_000 / 4096 * (30.0 / 235 + comm_s), rel=1e-12)


def test_the_answer_states_resnets_bytes_the_book_check_and_labels_its_rows():
    paragraphs = exercise_13_6_1.answer_13_6_1(_summary(), None, False, None)
    text = "\n".join(paragraphs)
    check = resnet.book_check()
    assert "11,175,818 parameters in 76 tensors, 44.7 MB" in text
    assert (f"predicts {check['predicted_two_gpu_epoch_s']:.1f} s per 2-GPU epoch against the "
            f"book's 9.5 s: an error of {check['error']:.0%}") in text
    assert "| what-if: the book's GPU, cited" in text
    assert "PCIe 3.0, p2.16xlarge (8 K80 boards, 16 GPUs)'s bandwidth" in text
    assert f"({1000 * check['overhead_s_per_step']:.0f} ms a step beyond its compute" in text
    # 4096 examples a step: 15 steps an epoch, 150 updates in the book's 10 epochs.
    assert "the book's 10 epochs make 150 updates where batch 256 makes 2,350" in text
    # Goyal et al.'s 90 epochs at batch 8192: 157 steps an epoch of 1,281,167 images (a
    # review found "90 epochs of 5,000 steps or more", batch 256's count).
    assert ("over 90 epochs: at batch 8192 about 14,000 updates (157 steps an epoch of "
            "ImageNet's 1.28 M images), not 10 epochs' 150") in text
