"""The alpha-beta scaling model on synthetic sweeps generated from known costs;
LeNet's gradient bytes as the calibration records them."""

import math

import matplotlib
import pandas as pd
import pytest

from orchestrator.config.options import TrainConfig
from orchestrator.training.calibration import gradient_bytes
from orchestrator.report.costs import INTERCONNECTS, Link, comm_s, contention, fit_link, probed_model
from orchestrator.report.plots import plot_scaling_model
from orchestrator.report.scaling_model import PREDICTED_WORKERS, fit_and_validate

PER_EXAMPLE_S, OTHER_S = 2e-4, 3e-3  # forward+backward per example; rest of a step
ALPHA_S, BETA_BYTES_PER_S = 20e-6, 2e9
CONTENTION = {1: 1.0, 2: 1.1, 4: 1.3}
GLOBAL_BATCH, STEPS = 256, 100
LENET = gradient_bytes("lenet", "fp32", TrainConfig.bucket_cap_mb)
LENET_BYTES = LENET["tensor_bytes"]


def call_s(transport: str, k: int, size: int, alpha_s: float, beta: float) -> float:
    """One call as each transport's algorithm costs it: the node's shared memory two
    barriers and (5k+1) bytes through one memory bandwidth; a ring (gloo) 2(k-1)
    steps and 2(k-1)/k bytes."""
    if transport == "shared memory":
        return 2 * alpha_s + (5 * k + 1) * size / beta
    return 2 * (k - 1) * alpha_s + 2 * (k - 1) / k * size / beta


def allreduce_samples(alpha_s: float, beta: float, transport: str = "shared memory",
                      workers: tuple[int, ...] = (2, 4)) -> list[dict]:
    return [{"transport": transport, "num_workers": k, "bytes": size,
             "seconds": call_s(transport, k, size, alpha_s, beta)}
            for k in workers for size in (1024, 16384, 262144, 4 * 1024 * 1024)]


def calibration() -> dict:
    return {"num_workers": 4, "device": "cpu", "model": "lenet", "threads_per_worker": 1,
            "allreduce": allreduce_samples(ALPHA_S, BETA_BYTES_PER_S),
            "compute": [{"num_workers": k, "batch_per_worker": 128,
                         "seconds_per_example": PER_EXAMPLE_S * c} for k, c in CONTENTION.items()],
            "gradient_bytes": [LENET]}


def comm_per_step_s(sync: str, k: int) -> float:
    """One allreduce per tensor (scratch) or of one flat bucket (LeNet's fit in 25 MB)."""
    if k == 1:
        return 0.0
    sizes = LENET_BYTES if sync == "scratch" else [sum(LENET_BYTES)]
    return sum(call_s("shared memory", k, size, ALPHA_S, BETA_BYTES_PER_S) for size in sizes)


def expected_epoch_s(sync: str, k: int) -> float:
    compute_s = PER_EXAMPLE_S * (GLOBAL_BATCH // k) * CONTENTION[k]
    return STEPS * (compute_s + OTHER_S + comm_per_step_s(sync, k))


def trial(trial_id: str, sync: str, k: int, *, split: str = "even", straggler: float = 1.0,
          status: str = "finished") -> tuple[dict, list[dict]]:
    """A summary row and its three epochs (the first one slowed by warm-up)."""
    compute_s = STEPS * PER_EXAMPLE_S * (GLOBAL_BATCH // k) * CONTENTION[k]
    epoch_s = expected_epoch_s(sync, k)
    row = {"trial_id": trial_id, "model": "lenet", "sync": sync, "split": split,
           "precision": "fp32", "momentum": 0.0, "batch_scaling": "global",
           "batch_size": GLOBAL_BATCH, "base_lr": 0.1, "num_workers": k,
           "global_batch_size": GLOBAL_BATCH, "batch_size_per_worker": GLOBAL_BATCH // k,
           "steps_per_epoch": STEPS, "status": status, "threads_per_worker": 1,
           "straggler_slowdown": straggler, "mean_epoch_time_s": epoch_s,
           "train_size": STEPS * GLOBAL_BATCH}  # every epoch the whole (synthetic) data set
    workers = ", ".join(f"{compute_s * (1 - 0.01 * r):.9g}" for r in range(k))
    epochs = [{"trial_id": trial_id, "epoch": epoch,
               "epoch_time_s": epoch_s * (1.5 if epoch == 1 else 1.0),
               "sync_time_s": STEPS * comm_per_step_s(sync, k),
               "worker_compute_s": f"[{workers}]",
               "transport": "shared memory" if k > 1 else "none", "num_workers": k,
               "global_batch_size": GLOBAL_BATCH, "model": "lenet", "sync": sync}
              for epoch in (1, 2, 3)]
    return row, epochs


def sweep(*trials: tuple[dict, list[dict]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (pd.DataFrame([row for row, _ in trials]),
            pd.DataFrame([epoch for _, epochs in trials for epoch in epochs]))


@pytest.fixture(scope="module")
def result():
    trials = [trial(f"{sync}-{k}", sync, k) for sync in ("scratch", "bucketed") for k in (1, 2, 4)]
    summary, epochs = sweep(*trials)
    return fit_and_validate(summary, epochs, calibration())


def test_a_forecast_epoch_is_the_whole_training_set_whatever_subset_the_trials_ran(result):
    """The exercises' ResNet-18 trains 2,048 images an epoch on CPUs: at 16 workers of
    256 its global batch would be 2 epochs, half a step. Trials of a tenth of their data
    set are predicted over all of it: 10x the seconds, the same speedups."""
    trials = [trial(f"{sync}-{k}", sync, k) for sync in ("scratch", "bucketed") for k in (1, 2, 4)]
    for row, _ in trials:
        row["train_size"] = 10 * STEPS * GLOBAL_BATCH
    summary, epochs = sweep(*trials)
    subset = fit_and_validate(summary, epochs, calibration()).predictions
    assert (subset["epoch_examples"] == 10 * STEPS * GLOBAL_BATCH).all()
    assert (result.predictions["epoch_examples"] == STEPS * GLOBAL_BATCH).all()
    assert subset["epoch_s"].tolist() == pytest.approx((10 * result.predictions["epoch_s"]).tolist())
    assert subset["speedup"].tolist() == pytest.approx(result.predictions["speedup"].tolist())
    # A sweep recorded before trials.csv kept the data set's size: Fashion-MNIST's where the
    # trial names that data set, else the trial's own epoch.
    from orchestrator.report.scaling_model import whole_epoch_examples
    old = pd.Series({"steps_per_epoch": 8, "global_batch_size": 256})
    assert whole_epoch_examples(old) == 60_000
    assert whole_epoch_examples(pd.concat([old, pd.Series({"dataset": "my-images"})])) == 8 * 256


def test_fit_link_recovers_alpha_and_beta():
    link = fit_link("gloo", allreduce_samples(50e-6, 1.5e9, "gloo")
                    + allreduce_samples(1e-6, 9e9, "shared memory"))
    assert link.name == "gloo (measured)"
    assert link.alpha_s == pytest.approx(50e-6, rel=0.01)
    assert link.beta_bytes_per_s == pytest.approx(1.5e9, rel=0.01)


def test_the_bandwidth_comes_from_the_large_sizes_where_small_ones_burst_through():
    """A token-bucket link passes a message within its burst at line rate: the book's
    root funnel took n/R up to 16 KB and 2n/R from 64 KB on (50 Mbit/s, netns). beta
    is read where bytes set the time, alpha where they do not."""
    rate, alpha_s = 6.25e6, 30e-6
    samples = [{"transport": "gloo root", "num_workers": 2, "bytes": size,
                "seconds": 2 * alpha_s + (1 if size <= 16384 else 2) * size / rate}
               for size in (1024, 4096, 16384, 65536, 262144, 1048576)]
    link = fit_link("gloo root", samples)
    assert link.beta_bytes_per_s == pytest.approx(rate, rel=0.01)
    assert link.alpha_s == pytest.approx(0.0, abs=alpha_s)  # bursts read as no latency


def test_contention_interpolates_and_holds_the_largest_measured():
    assert contention(calibration(), 1) == 1.0
    assert contention(calibration(), 3) == pytest.approx(1.2)
    assert contention(calibration(), 64) == pytest.approx(1.3)
    assert contention({}, 8) == 1.0


def test_validation_errors_are_small(result):
    assert sorted(result.validation["trial_id"]) == ["bucketed-2", "bucketed-4",
                                                     "scratch-2", "scratch-4"]
    assert result.validation["error"].abs().max() < 0.01
    assert set(result.validation["transport"]) == {"shared memory"}


def test_predictions_reproduce_the_measured_epochs(result):
    predictions = result.predictions[result.predictions["batch_scaling"] == "global"]
    measured = predictions[predictions["link"] == "shared memory (measured)"]
    for sync in ("scratch", "bucketed"):
        for k in (1, 2, 4):
            (epoch_s,) = measured[(measured["sync"] == sync) & (measured["num_workers"] == k)][
                "epoch_s"]
            assert epoch_s == pytest.approx(expected_epoch_s(sync, k), rel=0.01)


def test_predictions_cover_every_link_and_worker_count(result):
    links = {"shared memory (measured)", *(link.name for link in INTERCONNECTS)}
    assert set(result.links["link"]) == links
    for (link, _, _, _), curve in result.predictions.groupby(["link", "model", "sync",
                                                                "batch_scaling"]):
        # This cluster's own transport no further than the 4 workers it measured at
        # once (its contention beyond is unknown); a named link to 64.
        assert tuple(curve["num_workers"]) == (
            (1, 2, 4) if link == "shared memory (measured)" else PREDICTED_WORKERS)
        assert curve["speedup"].iloc[0] == 1.0
    assert set(result.predictions["link"]) == links
    # The measured link's workers contend as calibrated (1.3 at 4); each on a named
    # interconnect has a device of its own.
    at_4 = result.predictions[result.predictions["num_workers"] == 4].set_index(
        ["link", "model", "sync", "batch_scaling"])["compute_s"]
    for (link, *curve), compute_s in at_4.items():
        if link != "shared memory (measured)":
            own = at_4[("shared memory (measured)", *curve)]
            assert own == pytest.approx(1.3 * compute_s)


def test_a_batch_per_worker_makes_fewer_larger_steps(result):
    """k workers of b each: 1/k of the steps, each of b examples per worker."""
    predictions = result.predictions
    curve = predictions[(predictions["batch_scaling"] == "per-worker")
                        & (predictions["link"] == "shared memory (measured)")
                        & (predictions["sync"] == "bucketed")].set_index("num_workers")
    assert list(curve["global_batch_size"]) == [GLOBAL_BATCH * k for k in (1, 2, 4)]
    compute_s = PER_EXAMPLE_S * GLOBAL_BATCH * CONTENTION[4]
    step_s = compute_s + OTHER_S + comm_per_step_s("bucketed", 4)
    assert curve.loc[4, "epoch_s"] == pytest.approx(STEPS / 4 * step_s, rel=0.01)


def test_only_even_unslowed_finished_trials_are_validated():
    summary, epochs = sweep(trial("one", "scratch", 1), trial("even", "scratch", 2),
                            trial("proportional", "scratch", 2, split="proportional"),
                            trial("straggler", "scratch", 2, straggler=2.0),
                            trial("failed", "scratch", 4, status="failed"))
    result = fit_and_validate(summary, epochs, calibration())
    assert list(result.validation["trial_id"]) == ["even"]


def test_the_contention_is_the_probes_and_the_trials_own_only_check_it():
    """Two 4-worker trials that computed 1.6x slower than alone, where the probe read
    1.3: each is predicted from the probe, never from its own seconds or the other's;
    their own contention is printed beside it, and the compute's error shows the gap."""
    single = trial("one", "bucketed", 1)
    fours = [trial(name, "bucketed", 4) for name in ("four", "four-b")]
    slower = STEPS * PER_EXAMPLE_S * (GLOBAL_BATCH // 4) * 1.6
    for _, history in fours:
        for epoch in history:
            epoch["worker_compute_s"] = f"[{', '.join([f'{slower:.9g}'] * 4)}]"
    summary, epochs = sweep(single, *fours)
    for row in fit_and_validate(summary, epochs, calibration()).validation.itertuples():
        assert (row.contention_source, row.contention) == ("probe", pytest.approx(1.3))
        assert row.measured_contention == pytest.approx(1.6)
        assert row.compute_error == pytest.approx(1.3 / 1.6 - 1)
        assert row.predicted_compute_s == pytest.approx(
            STEPS * PER_EXAMPLE_S * (GLOBAL_BATCH // 4) * 1.3)


def test_each_model_takes_its_own_probe_and_another_where_it_was_not_probed():
    measured = calibration()
    measured["compute"] += [{"num_workers": k, "model": "resnet18", "batch_per_worker": 64,
                             "seconds_per_example": 0.01 * c}
                            for k, c in {1: 1.0, 2: 1.05, 4: 1.2}.items()]
    assert contention(measured, 2, "resnet18") == pytest.approx(1.05)
    assert contention(measured, 2, "lenet") == pytest.approx(1.1)
    # A model the calibration did not probe (or an older calibration): its own model's.
    assert probed_model(measured, "mine") == "lenet"
    assert contention(measured, 2, "mine") == pytest.approx(1.1)


def test_one_worker_trials_alone_still_predict():
    summary, epochs = sweep(trial("one", "bucketed", 1))
    result = fit_and_validate(summary, epochs, calibration())
    assert result.validation.empty
    assert set(result.predictions["sync"]) == {"bucketed"}


def test_no_one_worker_trial_allreduce_sample_or_gradient_bytes_gives_none():
    summary, epochs = sweep(trial("two", "scratch", 2))
    assert fit_and_validate(summary, epochs, calibration()) is None
    summary, epochs = sweep(trial("one", "scratch", 1))
    assert fit_and_validate(summary, epochs, {**calibration(), "allreduce": []}) is None
    earlier = {key: value for key, value in calibration().items() if key != "gradient_bytes"}
    assert fit_and_validate(summary, epochs, earlier) is None


def test_trials_that_ended_no_epoch_give_none():
    """Every trial stopped in its first epoch (--stop-at-target reached at epoch
    0.5): epochs.csv is empty, and the report is still written (a mask of no rows
    once took the frame's columns and raised KeyError: 'trial_id')."""
    summary, epochs = sweep(trial("one", "scratch", 1), trial("two", "scratch", 2))
    empty = pd.DataFrame({column: pd.Series(dtype=object) for column in epochs.columns})
    assert fit_and_validate(summary, empty, calibration()) is None


def test_gradient_bytes_are_the_models_tensors_and_buckets():
    """LeNet's 8 tensors fit one 25 MB bucket; ResNet-18's 44.7 MB take two, each a
    run of whole tensors of at most the cap unless one tensor alone is larger."""
    assert len(LENET["tensor_bytes"]) == 8 and LENET["bucket_bytes"] == [sum(LENET_BYTES)]
    resnet = gradient_bytes("resnet18", "fp64", 25.0)
    assert sum(resnet["bucket_bytes"]) == sum(resnet["tensor_bytes"])
    assert max(resnet["bucket_bytes"]) <= 25 * 1024 * 1024 < sum(resnet["bucket_bytes"])


def test_plot_draws(result, tmp_path):
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots()
    plot_scaling_model(axes, result)
    figure.savefig(tmp_path / "scaling_model.png")
    plt.close(figure)
    assert (tmp_path / "scaling_model.png").stat().st_size > 0


def test_sharded_is_predicted_from_its_own_two_collectives_where_they_were_timed():
    """gloo's reduce-scatter is no ring: the calibration times sharded's pair of
    collectives, and sharded's trials and curves use that, not the allreduce."""
    pair_alpha_s, pair_beta = 400e-6, 0.5e9
    measured = calibration()
    measured["allreduce"] = (allreduce_samples(ALPHA_S, BETA_BYTES_PER_S, "gloo")
                             + allreduce_samples(pair_alpha_s, pair_beta,
                                                 "gloo reduce-scatter + all-gather"))
    pair_s = call_s("gloo reduce-scatter + all-gather", 2, sum(LENET_BYTES), pair_alpha_s,
                    pair_beta)
    single, single_epochs = trial("one", "sharded", 1)
    row, epochs = trial("two", "sharded", 2)
    epoch_s = STEPS * (PER_EXAMPLE_S * (GLOBAL_BATCH // 2) * CONTENTION[2] + OTHER_S + pair_s)
    row["mean_epoch_time_s"] = epoch_s
    for epoch in epochs:
        epoch.update(epoch_time_s=epoch_s, transport="gloo")
    summary, frames = sweep((single, single_epochs), (row, epochs))
    result = fit_and_validate(summary, frames, measured)
    assert result.validation["error"].abs().max() < 0.01
    own = result.predictions[~result.predictions["link"].isin([link.name for link in INTERCONNECTS])]
    assert set(own["link"]) == {"gloo reduce-scatter + all-gather (measured)"}


def test_the_book_allreduce_moves_k_times_a_rings_bytes_through_worker_0():
    """Root: per tensor worker 0's k-1 receives and k-1 sends, 2(k-1) messages and
    2(k-1) copies of the bytes; a ring 2(k-1)/k copies: k times fewer bytes."""
    bytes_only = Link("bytes only", 0.0, BETA_BYTES_PER_S, "test")
    calls_only = Link("calls only", ALPHA_S, math.inf, "test")
    for k in (2, 3, 4):
        ring_s = comm_s(bytes_only, "scratch", LENET, k)
        assert comm_s(bytes_only, "root", LENET, k) == pytest.approx(k * ring_s, rel=1e-12)
        assert comm_s(bytes_only, "root", LENET, k) == pytest.approx(
            2 * (k - 1) * sum(LENET_BYTES) / BETA_BYTES_PER_S, rel=1e-12)
        assert comm_s(calls_only, "root", LENET, k) == pytest.approx(
            2 * (k - 1) * len(LENET_BYTES) * ALPHA_S, rel=1e-12)
    assert comm_s(bytes_only, "root", LENET, 1) == 0.0


def test_the_root_funnel_is_fitted_per_message():
    samples = [{"transport": "gloo root", "num_workers": k, "bytes": size,
                "seconds": 2 * (k - 1) * (ALPHA_S + size / BETA_BYTES_PER_S)}
               for k in (2, 3) for size in (1024, 16384, 262144)]
    link = fit_link("gloo root", samples)
    assert link.alpha_s == pytest.approx(ALPHA_S, rel=1e-6)
    assert link.beta_bytes_per_s == pytest.approx(BETA_BYTES_PER_S, rel=1e-6)


def test_a_rings_latency_grows_2_k_minus_1_and_shared_memorys_does_not():
    """The per-step alpha is fitted at the calibration's k; how many steps a call takes
    at other k is the algorithm's: gloo's ring 2(k-1), the shared memory 2 barriers,
    its bytes (5k+1) through the node's one memory bandwidth."""
    ring = Link("gloo (measured)", ALPHA_S, math.inf, "test")
    buckets = len(LENET["bucket_bytes"])
    assert comm_s(ring, "bucketed", LENET, 4) - comm_s(ring, "bucketed", LENET, 2) == (
        pytest.approx((6 - 2) * buckets * ALPHA_S, rel=1e-12))
    assert comm_s(ring, "bucketed", LENET, 16) == pytest.approx(30 * buckets * ALPHA_S)
    shm_calls = Link("shared memory (measured)", ALPHA_S, math.inf, "test")
    assert comm_s(shm_calls, "bucketed", LENET, 16) == pytest.approx(2 * buckets * ALPHA_S)
    shm_bytes = Link("shared memory (measured)", 0.0, BETA_BYTES_PER_S, "test")
    assert comm_s(shm_bytes, "bucketed", LENET, 4) == pytest.approx(
        21 * sum(LENET_BYTES) / BETA_BYTES_PER_S)


def test_a_ring_fitted_at_2_workers_predicts_4():
    link = fit_link("gloo", allreduce_samples(ALPHA_S, BETA_BYTES_PER_S, "gloo", workers=(2,)))
    assert link.alpha_s == pytest.approx(ALPHA_S, rel=1e-3)
    size = sum(LENET_BYTES)
    assert comm_s(link, "bucketed", LENET, 4) == pytest.approx(
        call_s("gloo", 4, size, ALPHA_S, BETA_BYTES_PER_S), rel=1e-3)


def test_one_outlier_sample_does_not_set_the_fit():
    """The issue's case: a 1 KB call of 1.15 ms among ones of tens of microseconds."""
    samples = [{"transport": "shared memory", "num_workers": 2, "bytes": 1024 * 4 ** i,
                "seconds": call_s("shared memory", 2, 1024 * 4 ** i, ALPHA_S, BETA_BYTES_PER_S)}
               for i in range(8)]
    samples[0]["seconds"] = 1.15e-3
    link = fit_link("shared memory", samples)
    assert link.alpha_s == pytest.approx(ALPHA_S, rel=0.05)
    assert link.beta_bytes_per_s == pytest.approx(BETA_BYTES_PER_S, rel=0.05)


def test_points_at_a_k_the_calibration_did_not_run_are_labelled_held_out():
    measured = calibration()
    measured["allreduce"] = allreduce_samples(ALPHA_S, BETA_BYTES_PER_S, workers=(2,))
    summary, epochs = sweep(*(trial(f"bucketed-{k}", "bucketed", k) for k in (1, 2, 4)))
    result = fit_and_validate(summary, epochs, measured)
    held_out = result.validation.set_index("num_workers")["held_out"]
    assert held_out.to_dict() == {2: False, 4: True}
    # Fitted at 2 workers, the model predicts 4 (the sweep was generated by it).
    assert result.validation["error"].abs().max() < 0.01


def test_a_measured_speedup_is_a_ratio_of_throughputs_not_of_epochs():
    # ResNet-18 on CPUs trains k times the examples an epoch on k workers (8 steps of
    # 256 per worker): its 2-worker epoch of 2x the examples took about its 1-worker
    # one's time, a speedup near 2, which the epoch ratio read as 0.94.
    one, two = trial("one", "scratch", 1), trial("two", "scratch", 2)
    two[0].update(global_batch_size=2 * GLOBAL_BATCH, batch_size_per_worker=GLOBAL_BATCH,
                  batch_scaling="per-worker")
    summary, epochs = sweep(one, two)
    validation = fit_and_validate(summary, epochs, calibration()).validation.set_index("trial_id")
    one_s, two_s = expected_epoch_s("scratch", 1), expected_epoch_s("scratch", 2)
    assert validation.loc["two", "measured_speedup"] == pytest.approx(
        (STEPS * 2 * GLOBAL_BATCH / two_s) / (STEPS * GLOBAL_BATCH / one_s))


def test_the_communication_is_checked_against_the_sums_own_time_as_recorded():
    """Rank 0 waited 0.5 s an epoch for the slower rank, rank 1 0.2 s for rank 0, on
    top of the sums' own time: against rank 0's sync the model's communication reads
    far too low, against the least rank's epoch nearer, against the least any rank
    waited step by step (`sync_least_s`) right."""
    one, two = trial("one", "bucketed", 1), trial("two", "bucketed", 2)
    comm_s = STEPS * comm_per_step_s("bucketed", 2)
    for epoch in two[1]:
        epoch["sync_time_s"] = comm_s + 0.5
        epoch["worker_sync_s"] = f"[{comm_s + 0.5:.9g}, {comm_s + 0.2:.9g}]"
        epoch["sync_least_s"] = comm_s
    summary, epochs = sweep(one, two)
    for dropped, measured_as, seconds in (
            ([], "sync_least_s", comm_s),
            (["sync_least_s"], "worker_sync_s", comm_s + 0.2),
            (["sync_least_s", "worker_sync_s"], "sync_time_s", comm_s + 0.5)):
        row = fit_and_validate(summary, epochs.drop(columns=dropped),
                               calibration()).validation.iloc[0]
        assert row["sync_measured_as"] == measured_as
        assert row["measured_sync_least_s"] == pytest.approx(seconds)
        assert row["comm_error"] == pytest.approx(comm_s / seconds - 1, abs=0.01)


def test_a_steps_first_sum_costs_what_it_cost_right_after_a_backward():
    """Two regimes: calibrations that time each size right after a backward too
    ("first_call") price a step's first message so and the rest back to back;
    older ones, every message back to back."""
    cold_alpha_s = 10 * ALPHA_S
    measured = {**calibration(), "first_call": allreduce_samples(cold_alpha_s, BETA_BYTES_PER_S)}
    link = fit_link("shared memory", measured["allreduce"])
    summary, epochs = sweep(*[trial(f"{sync}-{k}", sync, k) for sync in ("scratch", "bucketed")
                              for k in (1, 2, 4)])
    two = fit_and_validate(summary, epochs, measured)
    one = fit_and_validate(summary, epochs, calibration())
    fitted = two.links.set_index("link").loc["shared memory (measured)"]
    assert fitted["first_alpha_s"] == pytest.approx(cold_alpha_s, rel=1e-6)
    assert math.isnan(one.links.set_index("link").loc["shared memory (measured)",
                                                       "first_alpha_s"])
    # scratch's 8 sums: the first 2 * 9 alpha dearer, the 7 others as before; bucketed's one.
    extra_s = 2 * (cold_alpha_s - ALPHA_S)
    for sync, k in (("scratch", 2), ("bucketed", 4)):
        predicted = {result: frame[(frame["sync"] == sync) & (frame["num_workers"] == k)
                                   & (frame["link"] == link.name)
                                   & (frame["batch_scaling"] == "global")]["comm_s"].item()
                     for result, frame in (("one", one.predictions), ("two", two.predictions))}
        assert predicted["two"] - predicted["one"] == pytest.approx(STEPS * extra_s, rel=1e-4)
    # Named interconnects have no first-call regime: their predictions do not move.
    nvlink = [frame[(frame["link"] == INTERCONNECTS[-1].name)]["comm_s"].tolist()
              for frame in (one.predictions, two.predictions)]
    assert nvlink[0] == nvlink[1]


FIXED_S = 0.02  # a step's launches on a GPU: no smaller shard saves them


def _with_fixed_part(made: tuple[dict, list[dict]], k: int, graphed: bool = False,
                     passes: int = 1) -> tuple[dict, list[dict]]:
    """`trial`'s row and epochs with FIXED_S more compute a forward and backward on
    every worker, as an eager GPU step pays its launches whatever its shard; `passes`
    of them a step (--accumulation-steps)."""
    row, epochs = made
    extra_s = STEPS * passes * FIXED_S * CONTENTION[k]
    row = {**row, "mean_epoch_time_s": row["mean_epoch_time_s"] + extra_s,
           **({"accumulation_steps": passes} if passes > 1 else {})}
    for epoch in epochs:
        computes = [float(value) + extra_s
                    for value in epoch["worker_compute_s"].strip("[]").split(",")]
        epoch.update(epoch_time_s=epoch["epoch_time_s"] + extra_s * (1.5 if epoch["epoch"] == 1
                                                                    else 1.0),
                     worker_compute_s="[" + ", ".join(f"{value:.9g}" for value in computes) + "]",
                     step_graph="on" if graphed else "off: several workers",
                     memory_format="nchw")
    return row, epochs


def test_each_micro_batch_of_an_accumulated_step_pays_the_fixed_part():
    """--accumulation-steps 4: a step is 4 forward and backward passes, each with its
    launches; read as one step's, the 3 more would pass for seconds per example, and
    k workers would be forecast faster than they ran."""
    summary, epochs = sweep(*(_with_fixed_part(trial(f"scratch-{k}", "scratch", k), k,
                                               passes=4) for k in (1, 2, 4)))
    probed = {**calibration(), "step_fixed": [
        {"model": "lenet", "precision": "fp32", "memory_format": "nchw",
         "batch_per_worker": 32, "fixed_s": FIXED_S}]}
    result = fit_and_validate(summary, epochs, probed)
    assert result.validation["error"].abs().max() < 0.01
    nvlink = result.predictions[(result.predictions["link"] == INTERCONNECTS[2].name)
                                & (result.predictions["batch_scaling"] == "global")]
    at_64 = nvlink.set_index("num_workers").loc[64, "compute_s"]
    assert at_64 == pytest.approx(STEPS * (4 * FIXED_S + PER_EXAMPLE_S * 4), rel=1e-6)


def test_a_gpu_steps_fixed_part_is_not_divided_among_the_workers():
    """On a GPU a step's launches do not shrink with its shard (calibration's
    `step_fixed`): the model keeps them whole on every worker, and so validates
    the trials that paid them; read as seconds per example, it would forecast
    k workers k times faster than the launches allow."""
    summary, epochs = sweep(*(_with_fixed_part(trial(f"scratch-{k}", "scratch", k), k)
                              for k in (1, 2, 4)))
    entry = {"model": "lenet", "precision": "fp32", "memory_format": "nchw",
             "batch_per_worker": 128, "fixed_s": FIXED_S}
    probed = {**calibration(), "step_fixed": [entry]}
    result = fit_and_validate(summary, epochs, probed)
    assert result.validation["error"].abs().max() < 0.01
    assert result.validation["measured_contention"].tolist() == pytest.approx(
        result.validation["contention"].tolist(), rel=0.01)
    # Without the probe, its 2 and 4 workers are forecast faster than they ran.
    unprobed = fit_and_validate(summary, epochs, calibration())
    assert (unprobed.validation["error"] < -0.1).all()
    nvlink = result.predictions[(result.predictions["link"] == INTERCONNECTS[2].name)
                                & (result.predictions["batch_scaling"] == "global")]
    at_64 = nvlink.set_index("num_workers").loc[64, "compute_s"]
    assert at_64 == pytest.approx(STEPS * (FIXED_S + PER_EXAMPLE_S * 4), rel=1e-6)
    # Probed in another precision or layout only: it says nothing of these steps; nor
    # does an entry that names neither (a calibration of the hour before they were kept).
    legacy = {key: value for key, value in entry.items()
              if key not in ("precision", "memory_format")}
    for other in ({"precision": "bf16"}, {"memory_format": "channels-last"}, None):
        elsewhere = {**calibration(), "step_fixed": [legacy if other is None
                                                     else {**entry, **other}]}
        assert fit_and_validate(summary, epochs, elsewhere).validation[
            "predicted_epoch_s"].tolist() == pytest.approx(
            unprobed.validation["predicted_epoch_s"].tolist())
    # A baseline whose step was replayed as a CUDA graph: the probe's eager steps say
    # nothing of it, and its compute is read per example, as before.
    summary, epochs = sweep(*(_with_fixed_part(trial(f"scratch-{k}", "scratch", k), k,
                                               graphed=(k == 1)) for k in (1, 2, 4)))
    graphed = fit_and_validate(summary, epochs, probed)
    assert graphed.validation["predicted_epoch_s"].tolist() == pytest.approx(
        fit_and_validate(summary, epochs, calibration()).validation["predicted_epoch_s"].tolist())
