"""The --out folder and the sweep's names in a shared storage: one sweep each."""

import json
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from helpers import run_script
from orchestrator.config import cli
from orchestrator.driver import checks, plan, sweep_files
from orchestrator.driver.cluster import Cluster
from orchestrator.config.grid import SweepConfig
from orchestrator.errors import UserError
from orchestrator.driver.rundir import (CALIBRATION_FILE, SWEEP_FILE, TUNER_STATE, claim_out_dir,
                                        release_claim, tune_began)
from orchestrator.driver.tune_experiment import train_runs_path


def _tune_began(storage: str, sweep_id: str) -> None:
    """What Tune leaves in the storage as a sweep's trials begin, for --resume to
    restore: the experiment's folder and its tuner state (here an empty one)."""
    (Path(storage) / sweep_id).mkdir(parents=True, exist_ok=True)
    (Path(storage) / sweep_id / TUNER_STATE).write_bytes(b"")


def _claimed(out_dir: Path, *argv: str):
    """A sweep of `argv` claimed in `out_dir` as sweep.py claims one on a 2-CPU
    node, its Tune state begun in its default storage, out/ray."""
    request = checks.sweep_request(cli.sweep_parser("").parse_args(["--out", str(out_dir), *argv]))
    fitted = plan.fit_to_cluster(request, Cluster(address=None, dashboard_url=None,
                                                  node_resources=({"CPU": 2.0},)))
    claim_out_dir(out_dir, fitted.sweep, request.storage, request.sweep_id)
    _tune_began(request.storage, request.sweep_id)
    return request


@pytest.mark.reliability(fault="two sweeps claiming one empty --out at the same moment",
                         lost="nothing: one claims it, the others stop with one line")
def test_of_sweeps_claiming_one_folder_at_once_exactly_one_wins(tmp_path):
    out_dir = tmp_path / "out"
    start, outcomes = threading.Barrier(8), []

    def claim(index: int) -> None:
        start.wait()
        try:
            claim_out_dir(out_dir, SweepConfig(lrs=(0.1 * (index + 1),)), "store", f"id{index}")
            outcomes.append(("won", index))
        except UserError as error:
            outcomes.append(("lost", str(error)))

    threads = [threading.Thread(target=claim, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [index for outcome, index in outcomes if outcome == "won"]
    assert len(winners) == 1, outcomes
    assert all("claimed by another sweep" in text for outcome, text in outcomes if outcome == "lost")
    stored = json.loads((out_dir / SWEEP_FILE).read_text())
    assert stored["id"] == f"id{winners[0]}"  # the winner's file, whole
    assert [path.name for path in out_dir.iterdir()] == [SWEEP_FILE]


def test_sweeps_sharing_a_storage_have_their_own_experiment_and_train_runs(tmp_path):
    parser = cli.sweep_parser("")
    requests = [checks.sweep_request(parser.parse_args(
        ["--out", str(tmp_path / name), "--storage", str(tmp_path / "shared")]))
        for name in ("first", "second")]
    first, second = (request.sweep_id for request in requests)
    assert first.startswith("first-") and second.startswith("second-")
    storage = requests[0].storage
    assert first != second  # each names its sweep's Tune experiment
    assert train_runs_path(storage, first) != train_runs_path(storage, second)
    # The id is kept where --resume finds it.
    fitted = plan.fit_to_cluster(requests[0], Cluster(address=None, dashboard_url=None,
                                                      node_resources=({"CPU": 2.0},)))
    claim_out_dir(tmp_path / "first", fitted.sweep, storage, first)
    _tune_began(storage, first)
    resumed = checks.sweep_request(parser.parse_args(["--out", str(tmp_path / "first"), "--resume"]))
    assert resumed.sweep_id == first


def test_a_claimed_sweep_json_still_serves_as_a_config_file(tmp_path):
    sweep = SweepConfig(workers=(1, 2), lrs=(0.1, 0.3))
    claim_out_dir(tmp_path / "first", sweep, "store", "first-1234")
    request = checks.sweep_request(cli.sweep_parser("").parse_args(
        ["--config", str(tmp_path / "first" / SWEEP_FILE), "--out", str(tmp_path / "second")]))
    assert request.sweep.lrs == (0.1, 0.3) and request.sweep.workers == (1, 2)
    assert not request.gpu_from_cluster  # the stored sweep had settled it
    assert request.sweep_id != "first-1234"


@pytest.mark.reliability(fault="sweep.py --resume on a folder written by an earlier version",
                         lost="nothing: refused with one line before Ray starts")
def test_a_folder_of_an_earlier_version_is_not_resumed(tmp_path):
    out_dir = tmp_path / "earlier"
    claim_out_dir(out_dir, SweepConfig(workers=(1, 2)), str(out_dir / "ray"), "earlier-1234")
    stored = json.loads((out_dir / SWEEP_FILE).read_text())
    del stored["format"]  # sweep.json as versions before the marker wrote it
    (out_dir / SWEEP_FILE).write_text(json.dumps(stored, indent=2))
    (out_dir / "ray" / "earlier-1234").mkdir(parents=True)
    (out_dir / "trials.csv").write_text("trial_id,num_workers\n1234_00000,1\n")

    def snapshot() -> dict:
        return {str(path.relative_to(out_dir)): (path.read_bytes() if path.is_file() else None,
                                                 path.stat().st_mtime_ns)
                for path in sorted(out_dir.rglob("*"))}

    before = snapshot()
    run = run_script("sweep.py", "--resume", "--out", str(out_dir), timeout_s=60)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == (f"error: {out_dir} was written by an earlier version and "
                                  f"cannot be resumed; start a new sweep in another --out")
    assert run.stdout == ""  # refused first: no data loaded, no Ray started
    assert snapshot() == before


@pytest.mark.parametrize("name", ["LiveEstimate", "ReachedTarget", "TimeToAccuracyASHA",
                                  "TrialLinePrinter"])
def test_a_sweep_of_this_format_saved_before_tune_callbacks_py_still_unpickles(name):
    """Tune pickles the sweep's stopper, scheduler and callbacks by module and name
    (tuner.pkl, the controller's state); folders of this SWEEP_FORMAT saved
    before they moved to tune_callbacks.py name them in tune_experiment."""
    import pickle

    from orchestrator.driver import tune_callbacks
    saved = pickle.dumps(getattr(tune_callbacks, name), protocol=0).replace(
        b"orchestrator.driver.tune_callbacks", b"orchestrator.driver.tune_experiment")
    assert b"orchestrator.driver.tune_experiment" in saved
    assert pickle.loads(saved) is getattr(tune_callbacks, name)


def test_a_resumed_sweep_still_names_the_points_it_left_out(tmp_path):
    """The preset's points a one-GPU machine could not hold stay named in the
    report of a --resume (sweep.json keeps them), whatever the cluster then."""
    parser = cli.sweep_parser("")
    out_dir = tmp_path / "out"
    request = checks.sweep_request(parser.parse_args(["--out", str(out_dir)]))
    one_gpu = Cluster(address=None, dashboard_url=None,
                      node_resources=({"CPU": 16.0, "GPU": 1.0},))
    fitted = plan.fit_to_cluster(request, one_gpu)
    claim_out_dir(out_dir, fitted.sweep, request.storage, request.sweep_id,
                  [cell.to_dict() for cell in fitted.left_out])
    _tune_began(request.storage, request.sweep_id)
    # GPU workers: resumed against the GPU cluster's address, which sweep_request
    # only probes (a listening socket stands in for its GCS).
    with socket.create_server(("127.0.0.1", 0)) as listening:
        resume = ["--out", str(out_dir), "--resume",
                  "--address", f"127.0.0.1:{listening.getsockname()[1]}"]
        resumed = checks.sweep_request(parser.parse_args(resume))
    assert resumed.left_out == fitted.left_out and len(resumed.left_out) == 1
    refitted = plan.fit_to_cluster(resumed, one_gpu)
    assert refitted.left_out == fitted.left_out and refitted.sweep.workers == (1,)
    # A hand-edited entry that is no plan's: one line, before Ray.
    stored = json.loads((out_dir / SWEEP_FILE).read_text())
    stored["left_out"] = [{"num_workers": 2}]
    (out_dir / SWEEP_FILE).write_text(json.dumps(stored))
    with socket.create_server(("127.0.0.1", 0)) as listening:
        resume[-1] = f"127.0.0.1:{listening.getsockname()[1]}"
        with pytest.raises(UserError, match="left_out is not a plan's"):
            checks.sweep_request(parser.parse_args(resume))


def test_a_resumed_sweep_keeps_its_clusters_lines_and_older_files_have_none(tmp_path):
    """sweep.json keeps the report's lines on the cluster the sweep started on, so
    that --resume of a finished sweep rewrites its report without Ray
    (tests/cluster/test_exercises_sweep.py); a file without them is resumed on a
    cluster, and a malformed one is one line."""
    parser = cli.sweep_parser("")
    out_dir = tmp_path / "out"
    request = checks.sweep_request(parser.parse_args(["--out", str(out_dir)]))
    fitted = plan.fit_to_cluster(request, Cluster(address=None, dashboard_url=None,
                                                  node_resources=({"CPU": 2.0},)))
    ran_on = {"cluster": "embedded local Ray: 1 node, 2 CPUs, 0 GPUs",
              "timing": "each trial timed with its nodes to itself"}
    claim_out_dir(out_dir, fitted.sweep, request.storage, request.sweep_id, [], ran_on)
    _tune_began(request.storage, request.sweep_id)
    resume = parser.parse_args(["--out", str(out_dir), "--resume"])
    assert checks.sweep_request(resume).ran_on == ran_on
    stored = json.loads((out_dir / SWEEP_FILE).read_text())
    del stored["ran_on"]
    (out_dir / SWEEP_FILE).write_text(json.dumps(stored))
    assert checks.sweep_request(resume).ran_on is None
    stored["ran_on"] = {"cluster": 2}
    (out_dir / SWEEP_FILE).write_text(json.dumps(stored))
    with pytest.raises(UserError, match="ran_on is not a cluster's and a timing's lines"):
        checks.sweep_request(resume)


def test_each_session_keeps_its_wall_time_and_parts_and_a_rewrite_adds_none(tmp_path):
    """sessions.json: a sweep's sessions (a --resume is one more) with the driver's
    parts of each, for report.md's wall time and "Where the time went"."""
    first = sweep_files._record_session(tmp_path, sweep_files.Session(
        time.monotonic() - 30, calibration_s=10.04, trials_s=18.0))
    assert [(s["wall_s"], s["calibration_s"], s["trials_s"]) for s in first] == [(30, 10.0, 18.0)]
    assert sweep_files._sessions_text(first) == "30 s"
    second = sweep_files._record_session(tmp_path, sweep_files.Session(
        time.monotonic() - 12, calibration_s=0.0, trials_s=11.0))
    assert sweep_files._sessions_text(second) == "42 s over 2 sessions (30, 12 s)"
    # A report rewritten without Ray adds no session, and reads them all back.
    assert sweep_files._record_session(tmp_path, None) == second
    assert json.loads((tmp_path / "sessions.json").read_text()) == second
    assert sweep_files._sessions_text(
        sweep_files._record_session(tmp_path / "none", None)) == "not recorded"


@pytest.mark.reliability(
    fault="sweep.py --resume of a sweep folder copied or moved since it ran (its sweep.json "
          "names the old folder's storage)",
    lost="nothing: the copy resumes from its own storage; a folder moved without its "
         "storage is refused with one line before Ray starts")
def test_a_copied_or_moved_sweep_resumes_from_its_own_storage(tmp_path):
    original = _claimed(tmp_path / "original", "--workers", "1,2")
    assert original.storage == str(tmp_path / "original" / "ray")
    resume = ["--resume", "--out"]
    parser = cli.sweep_parser("")
    shutil.copytree(tmp_path / "original", tmp_path / "copy")
    copy = checks.sweep_request(parser.parse_args([*resume, str(tmp_path / "copy")]))
    assert copy.storage == str(tmp_path / "copy" / "ray") and copy.sweep_id == original.sweep_id
    # A copy without ray/ would resume the original's sweep: refused.
    shutil.copytree(tmp_path / "original", tmp_path / "bare", ignore=shutil.ignore_patterns("ray"))
    with pytest.raises(UserError, match=r"bare was copied or moved from .*original without its "
                                        r"ray/ folder, which holds the sweep's state"):
        checks.sweep_request(parser.parse_args([*resume, str(tmp_path / "bare")]))
    (tmp_path / "original").rename(tmp_path / "moved")
    moved = checks.sweep_request(parser.parse_args([*resume, str(tmp_path / "moved")]))
    assert moved.storage == str(tmp_path / "moved" / "ray")
    # A storage of its own (--storage) is the sweep's wherever its folder goes, even
    # one named ray/ beside a folder of that name holding the sweep's id...
    named_ray = _claimed(tmp_path / "out2", "--storage", str(tmp_path / "data" / "ray"))
    (tmp_path / "out2" / "ray" / named_ray.sweep_id).mkdir(parents=True)
    assert checks.sweep_request(parser.parse_args([*resume, str(tmp_path / "out2")])).storage == \
        named_ray.storage == str(tmp_path / "data" / "ray")
    shared = _claimed(tmp_path / "out", "--storage", str(tmp_path / "shared"))
    (tmp_path / "out").rename(tmp_path / "elsewhere")
    kept = checks.sweep_request(parser.parse_args([*resume, str(tmp_path / "elsewhere")]))
    assert kept.storage == shared.storage == str(tmp_path / "shared")
    # ...and without it there is nothing to restore: one line, not Tune's traceback.
    shutil.rmtree(tmp_path / "shared")
    with pytest.raises(UserError, match=r"nothing to resume in .*elsewhere: its sweep's state "
                                        r"\(.*shared/out-\w+/tuner.pkl\) is not there"):
        checks.sweep_request(parser.parse_args([*resume, str(tmp_path / "elsewhere")]))


@pytest.mark.reliability(
    fault="sweep.py --resume with grid options or --storage other than the sweep's",
    lost="nothing: refused with one line naming them, before Ray starts")
def test_a_resume_runs_the_sweep_it_started_and_refuses_other_options(tmp_path):
    """Tune restores the stored grid whatever the command says: the same command
    with --resume continues it, and an option that differs is refused, not
    dropped without a word."""
    out_dir = tmp_path / "out"
    first = ["--workers", "1,2", "--lr", "0.1,0.2", "--epochs", "3"]
    _claimed(out_dir, *first)
    parser = cli.sweep_parser("")
    resume = ["--resume", "--out", str(out_dir)]
    for same in ([], first, ["--epochs", "3"], ["--workers", "1,2", "--use-gpu", "auto"]):
        assert checks.sweep_request(parser.parse_args([*same, *resume])).sweep.lrs == (0.1, 0.2)
    with pytest.raises(UserError) as refused:
        checks.sweep_request(parser.parse_args(["--workers", "1", "--lr", "0.5", "--epochs", "3",
                                              *resume]))
    assert str(refused.value) == (
        f"--resume continues the sweep in {out_dir} with the options it was started with, and "
        f"this command asks for others: --workers 1 (the sweep's: 1,2); --lr 0.5 (the sweep's: "
        f"0.1,0.2); drop those, or start a new sweep in another --out")
    # A preset is compared whole (its worker counts aside: the cluster may have fitted them).
    with pytest.raises(UserError, match=r"--model resnet18 \(the sweep's: lenet\);.* drop "
                                        r"those \(or the --preset that set them\)"):
        checks.sweep_request(parser.parse_args(["--preset", "d2l-13.6", *resume]))
    with pytest.raises(UserError, match=r"--calibrate no \(the sweep's: yes\)"):
        checks.sweep_request(parser.parse_args(["--no-calibrate", *resume]))
    with pytest.raises(UserError, match=r"in its own storage, .*out/ray: drop --storage"):
        checks.sweep_request(parser.parse_args(["--storage", str(tmp_path / "s"), *resume]))


@pytest.mark.parametrize("existed", [False, True])
def test_a_sweep_stopped_before_tune_leaves_its_folder_as_it_found_it(tmp_path, existed):
    """Ctrl-C in the calibration (jobs._stopped_before_trials): what the claim and the
    calibration wrote goes, and the same command then starts the sweep again; a
    folder the user had made stays (empty), and another sweep's runs in the storage stay."""
    out_dir = tmp_path / "out"
    if existed:
        out_dir.mkdir()
    request = checks.sweep_request(cli.sweep_parser("").parse_args(["--out", str(out_dir)]))
    made = claim_out_dir(out_dir, SweepConfig(workers=(1, 2)), request.storage, request.sweep_id)
    assert made is not existed
    assert not tune_began(request.storage, request.sweep_id)
    _tune_began(request.storage, request.sweep_id)  # as if Tune's state were written too
    assert tune_began(request.storage, request.sweep_id)
    calibration = Path(train_runs_path(request.storage, request.sweep_id)) / "calibration"
    calibration.mkdir(parents=True)
    (calibration / "checkpoint_manager_snapshot.json").write_text("{}")
    other = Path(train_runs_path(request.storage, "other-1234")) / "calibration"
    other.mkdir(parents=True)
    (out_dir / CALIBRATION_FILE).write_text("{}")
    release_claim(out_dir, request.storage, request.sweep_id, made)
    assert [str(path.relative_to(tmp_path)) for path in sorted(tmp_path.rglob("*"))] == [
        "out", "out/ray", "out/ray/train-runs", "out/ray/train-runs/other-1234",
        "out/ray/train-runs/other-1234/calibration"]  # another sweep's runs, kept
    shutil.rmtree(other.parent)
    release_claim(out_dir, request.storage, request.sweep_id, made)
    assert out_dir.is_dir() is existed and not list(tmp_path.glob("out/*"))
    again = checks.sweep_request(cli.sweep_parser("").parse_args(["--out", str(out_dir)]))
    assert again.sweep_id != request.sweep_id  # the same command: a new sweep, not refused


def test_a_sweep_stopped_before_tune_removes_its_runs_from_a_bucket(tmp_path, s3_store):
    """As from a local storage, only the folders named by the sweep's own id go."""
    uri = s3_store.uri("sweeps")
    for key in ("sweeps/out-1234/tuner.pkl", "sweeps/train-runs/out-1234/calibration/x.json",
                "sweeps/train-runs/out-5678/calibration/x.json", "sweeps/out-12345/tuner.pkl"):
        s3_store.client.put_object(Bucket=s3_store.bucket, Key=key, Body=b"{}")
    made = claim_out_dir(tmp_path / "out", SweepConfig(workers=(1, 2)), uri, "out-1234")
    assert tune_began(uri, "out-1234") and not tune_began(uri, "out-5678")
    release_claim(tmp_path / "out", uri, "out-1234", made)
    assert not tune_began(uri, "out-1234")
    # Keys ending in / are the folder markers pyarrow (and so Ray) writes.
    assert [key for key in s3_store.keys() if not key.endswith("/")] == [
        "sweeps/out-12345/tuner.pkl", "sweeps/train-runs/out-5678/calibration/x.json"]
    assert not (tmp_path / "out").exists()
