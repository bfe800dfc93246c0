"""The answer sheet: the scaling model fitted and validated from the sweep's
calibration, its section of report.md and the "## Answers" section, written
beside the report as answers.md, scaling_model.csv and scaling_model.png.

The Answers take the book's seven exercises of 13.5 and 13.6 in turn
(exercise_13_5_1.py to exercise_13_6_3.py, one module an exercise, with
learning_rates.py and linear_rule.py for 13.5.2's lr search), or for a model or
data set of the user's own the questions they ask of any model (any_model.py),
each answered from the sweep's own trials:
every number in a sentence is read from the frames; a difference smaller than
the noise (noise.py: the spread of repeated identical work in time, of seeds
in accuracy) is reported as within noise, every number says how many seeds
stand behind it, and times compare the same epochs. Where the sweep lacks
what a question needs, the answer says so and names the command that would
provide it.
"""

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orchestrator.report.answers import (any_model, exercise_13_5_1, exercise_13_5_2,
                                         exercise_13_5_3, exercise_13_5_4, exercise_13_6_1,
                                         exercise_13_6_2, exercise_13_6_3, linear_rule)
from orchestrator.report.answers.noise import estimate_noise, prepared, window_sentence
from orchestrator.report.answers.welch import SIGNIFICANCE, benjamini_hochberg, p_text
from orchestrator.report.answers.wording import listed
from orchestrator.report.tables import markdown_table
from orchestrator.records import counted, write_atomically
from orchestrator.report.costs import sample_model, contention as contention_factor
from orchestrator.report.plots import plot_scaling_model, pyplot, save_png
from orchestrator.report.scaling_model import ScalingResult, fit_and_validate
from orchestrator.report.summary import shared_gpu_mask

FILES = ("answers.md", "scaling_model.csv", "scaling_model_validation.csv", "scaling_model.png")
# The target for the model: every measured point within this of its prediction.
VALIDATION_TARGET = 0.15


@dataclass(frozen=True)
class AnswerSheet:
    scaling: ScalingResult | None
    model_section: str
    answers: str


def build(summary: pd.DataFrame, epochs: pd.DataFrame, calibration: dict | None, *,
          data_note: str, use_gpu: bool) -> AnswerSheet:
    scaling = fit_and_validate(summary, epochs, calibration) if calibration else None
    return AnswerSheet(scaling, _model_section(scaling, calibration),
                       render_answers(summary, epochs, scaling, data_note=data_note,
                                      use_gpu=use_gpu,
                                      gradient_bytes=_lenet_gradient_bytes(calibration),
                                      sums=(calibration or {}).get("allreduce", [])))


def _lenet_gradient_bytes(calibration: dict | None) -> int | None:
    """One step's gradient bytes of the model 13.5's strategies run (LeNet, the
    first precision the calibration recorded it in); None without them."""
    layouts = [entry for entry in (calibration or {}).get("gradient_bytes", [])
               if entry["model"] == "lenet"]
    return sum(layouts[0]["tensor_bytes"]) if layouts else None


def files(sheet: AnswerSheet) -> tuple[str, ...]:
    """The files `write` writes: the scaling model's only where there is one."""
    return FILES if sheet.scaling is not None else FILES[:1]


def write(out_dir: Path, sheet: AnswerSheet) -> dict[str, Path]:
    paths = {name: out_dir / name for name in files(sheet)}
    write_atomically(paths["answers.md"], lambda path: path.write_text(sheet.answers + "\n"))
    if sheet.scaling is None:
        return paths
    write_atomically(paths["scaling_model.csv"],
                     lambda path: sheet.scaling.predictions.to_csv(path, index=False))
    write_atomically(paths["scaling_model_validation.csv"],
                     lambda path: sheet.scaling.validation.to_csv(path, index=False))
    figure, axes = pyplot().subplots(figsize=(7, 4.5))
    plot_scaling_model(axes, sheet.scaling)
    save_png(figure, paths["scaling_model.png"])
    return paths


def _model_section(scaling: ScalingResult | None, calibration: dict | None) -> str:
    lines = ["## Scaling model", ""]
    if calibration is None:
        return "\n".join(lines + ["No calibration.json: the sweep ran no microbenchmark "
                                  "(one worker count only, --no-calibrate, or it failed; see "
                                  "the sweep's output).", ""])
    if "gradient_bytes" not in calibration:
        return "\n".join(lines + ["No scaling model: this calibration.json records no gradient "
                                  "bytes per model (an earlier version wrote it); delete it and "
                                  "`--resume` the sweep to calibrate again.", ""])
    if scaling is None:
        return "\n".join(lines + ["The model needs a finished 1-worker trial and allreduce "
                                  "samples from at least two workers; this sweep has not both.",
                                  ""])
    lines += ["An alpha-beta model of an epoch (docs/SCALING_MODEL.md): compute per example "
              f"from the 1-worker trial{_fixed_text(calibration)}, slowed by the contention "
              "the calibration's probe of "
              f"workers computing at once read ({_probe_text(calibration)}; never from the "
              "trials it validates, whose own compute seconds check it below); per call the "
              "transport's algorithm's latency "
              "steps of alpha seconds (gloo's ring 2(k-1), the root funnel 2(k-1), shared "
              "memory 2 barriers) and bytes over beta (a ring 2(k-1)/k per worker; shared "
              "memory (5k+1) through the node's one memory bandwidth), beta fitted to the "
              "larger half of the sizes and alpha to the smaller (robustly) of the "
              "microbenchmark run at the sweep's start (calibration.json) at its k"
              + (f", on {calibration['processor']}." if "processor" in calibration else "."), "",
              markdown_table(scaling.links), ""]
    validation = scaling.validation
    if validation.empty:
        shared = getattr(scaling, "shared_gpu", False)
        lines += ["No multi-worker trial to validate the model against"
                  + (": they shared one GPU." if shared else "."), ""]
    else:
        errors = validation["error"].abs()
        worst, within = errors.max(), int((errors <= VALIDATION_TARGET).sum())
        verdict = "met" if worst <= VALIDATION_TARGET else "missed"
        lines += [f"Each measured multi-worker trial predicted from its 1-worker trial, the "
                  f"microbenchmark and the contention above: the largest error is {worst:.1%} "
                  f"(target {VALIDATION_TARGET:.0%}: {verdict}; {within} of {len(errors)} "
                  f"{'point' if len(errors) == 1 else 'points'} within it, the median "
                  f"{errors.median():.1%}). "
                  f"{_held_out_text(validation)} "
                  f"{_components_text(validation)} {_contention_check_text(validation)}",
                  "", markdown_table(validation), ""]
    at_16 = scaling.predictions[scaling.predictions["num_workers"] == 16].pivot_table(
        index=["link", "model", "sync"], columns="batch_scaling", values="speedup",
        sort=False).reset_index()
    lines += ["Predicted speedup at 16 workers, keeping the global batch or the batch per "
              "worker (`scaling_model.csv` has 1 to 64 workers with epoch, compute and "
              "communication seconds; time only, not accuracy):", "",
              markdown_table(at_16.rename(columns={"global": "global batch kept",
                                                   "per-worker": "batch per worker kept"})),
              "", "![scaling model](scaling_model.png)", "",
              "Beside this report: `calibration.json` (the microbenchmark), "
              "`scaling_model.csv`, `scaling_model.png`, and `answers.md` (the next section "
              "alone, for sharing).", ""]
    return "\n".join(lines)


def _fixed_text(calibration: dict) -> str:
    """The part of a GPU step no smaller shard saves, where the calibration probed it:
    ", beyond a part of each step that no smaller shard saves (an eager GPU step's
    launches), kept whole on every worker, ... (probed: lenet (fp32, nchw) 2.1 ms of
    3.1 ms at 128 a worker, ...)", as probed (the model takes at most a baseline's
    compute a step)."""
    parts = [f"{row['model']} ({row['precision']}, {row['memory_format']}) "
             f"{row['fixed_s'] * 1e3:.3g} ms of {row['full_s'] * 1e3:.3g} ms at "
             f"{row['batch_per_worker']} a worker (timed at {row['half_batch']} too)"
             for row in calibration.get("step_fixed", [])
             if row and "precision" in row and "memory_format" in row]
    if not parts:
        return ""
    return (", beyond a part of each step that no smaller shard saves (an eager GPU step's "
            "launches), kept whole on every worker, the probe's of the baseline's own model, "
            f"precision and layout (probed: {'; '.join(parts)}); none where the 1-worker step "
            "was replayed as a CUDA graph, of which the probe's eager steps say nothing")


def _probe_text(calibration: dict) -> str:
    """Each probed model's contention at each worker count, e.g. `lenet at 128 a
    worker: 1 worker 1.00x, 2 workers 1.19x`."""
    probes: dict[tuple, list[str]] = {}
    for row in calibration["compute"]:
        model = sample_model(calibration, row)
        factor = contention_factor(calibration, row["num_workers"], model)
        probes.setdefault((model, row["batch_per_worker"]), []).append(
            f"{counted(row['num_workers'], 'worker')} {factor:.2f}x")
    return "; ".join(f"{model} at {batch} a worker: {', '.join(counts)}"
                     for (model, batch), counts in probes.items())


def _contention_check_text(validation: pd.DataFrame) -> str:
    """The probe against the trials' own contention, per model and k."""
    if "measured_contention" not in validation or validation["measured_contention"].isna().all():
        return ""
    # contention_source: "probe", or "probe of <model>" where the model was not probed.
    checks = [f"{model} at k = {k}: the {group['contention_source'].iloc[0]} "
              f"{group['contention'].iloc[0]:.2f}x, the trials' own "
              f"{group['measured_contention'].median():.2f}x (median of {len(group)})"
              for (model, k), group in validation.groupby(["model", "num_workers"])]
    return "Contention, the probe against the trials' own compute seconds: " + "; ".join(
        checks) + "."


def _components_text(validation: pd.DataFrame) -> str:
    """The model part by part: a total can fit while its parts do not."""
    if "compute_error" not in validation or validation["compute_error"].isna().all():
        return ""
    compute = validation["compute_error"].abs().max()
    comm = validation["comm_error"].abs().max()
    measured_as = (validation["sync_measured_as"] if "sync_measured_as" in validation
                   else pd.Series(["sync_time_s"]))
    measures = {"sync_time_s": "against the sync time the steps measured on rank 0 (which "
                               "includes waiting for the slower rank: this sweep did not "
                               "record each rank's)",
                "worker_sync_s": "against the sync time of the rank that waited least in the "
                                 "epoch (an upper bound of the sums' own time: it still waits "
                                 "where the other rank arrives last)",
                "sync_least_s": "against the sums' own time (step by step the least any rank "
                                "waited, summed: the rank that arrives last at a sum waits for "
                                "no one)"}
    # The loosest of the measures the points used (a sweep of GPU and CPU trials mixes them).
    against = next(text for column, text in measures.items() if column in set(measured_as))
    return (f"Part by part (`scaling_model_validation.csv`): the largest error of the compute, "
            f"against the slowest rank's measured forward and backward, is {compute:.1%}; of "
            f"the communication, {against}, {comm:.1%}"
            + (": the total fits better than its parts, which is no validation of the "
               "communication model." if comm > max(VALIDATION_TARGET, 2 * compute) else "."))


def _held_out_text(validation: pd.DataFrame) -> str:
    """The error on points whose k the calibration did not fit at, apart: only
    those test how the model grows with k."""
    held_out = validation[validation["held_out"]]
    fitted = ", ".join(str(k) for k in sorted(set(validation["num_workers"])
                                              - set(held_out["num_workers"])))
    if held_out.empty:
        return (f"Every validated point is at a worker count the calibration ran at "
                f"({fitted}): none is held out, so the model's growth in k is not tested here.")
    worst = held_out["error"].abs().max()
    verdict = "met" if worst <= VALIDATION_TARGET else "missed"
    counts = ", ".join(str(k) for k in sorted(held_out["num_workers"].unique()))
    return (f"Held out (k = {counts}, not the calibration's): {counted(len(held_out), 'point')}, "
            f"the largest error {worst:.1%} (target {VALIDATION_TARGET:.0%}: {verdict}).")


EXERCISES = [
    ("13.5.1", "A minibatch of k*b on k workers",
     "When training on multiple GPUs, change the minibatch size from $b$ to $k \\cdot b$, "
     "i.e., scale it up by the number of GPUs."),
    ("13.5.2", "Learning rate and the number of workers",
     "Compare accuracy for different learning rates. How does it scale with the number of "
     "GPUs."),
    ("13.5.3", "A more efficient allreduce",
     "Implement a more efficient allreduce that aggregates different parameters on different "
     "GPUs (why is this more efficient in the first place)."),
    ("13.5.4", "Test accuracy on several workers",
     "Implement multi-GPU test accuracy computation."),
    ("13.6.1", "ResNet-18, and 16 workers",
     "This section uses ResNet-18. Try different epochs, batch sizes, and learning rates. Use "
     "more GPUs for computation. What happens if you try this with 16 GPUs (e.g., on an AWS "
     "p2.16xlarge instance)?"),
    ("13.6.2", "Devices of different speed",
     "Sometimes, different devices provide different computing power. We could use the GPUs "
     "and the CPU at the same time. How should we divide the work? Is it worth the effort? "
     "Why? Why not?"),
    ("13.6.3", "Overlapping steps",
     "What happens if we drop `npx.waitall()`? How would you modify training such that you "
     "have an overlap of up to two steps for parallelism?"),
]


def render_answers(summary: pd.DataFrame, epochs: pd.DataFrame, scaling, *,
                   data_note: str, use_gpu: bool, gradient_bytes: int | None = None,
                   sums: list[dict] = ()) -> str:
    """The section in markdown. `scaling` is None or has the scaling model's
    `validation`, `predictions` and `links`; `gradient_bytes`: LeNet's per step;
    `sums`: the calibration's timed sums (its `allreduce`)."""
    summary, trial_epochs = prepared(summary, epochs)
    noise = estimate_noise(summary, trial_epochs)
    if not any_model.is_book(summary):
        lines = ["## Answers", "", any_model.intro(summary), ""]
        if data_note:
            lines += [f"Trained on data subsets ({data_note}).", ""]
        lines += _shared_gpu_lead(summary)
        lines += _noise_lead(noise)
        for title, paragraphs in any_model.answers(summary, scaling, noise):
            lines += [f"### {title}", ""]
            for paragraph in paragraphs:
                lines += [paragraph, ""]
        return _with_method(lines, noise)
    rule = linear_rule.linear_rule(summary, noise)
    answers = [exercise_13_5_1.answer_13_5_1(summary, noise),
               exercise_13_5_2.answer_13_5_2(summary, rule, noise, epochs),
               exercise_13_5_3.answer_13_5_3(summary, noise, gradient_bytes, sums, use_gpu,
                                             epochs),
               exercise_13_5_4.answer_13_5_4(summary, noise),
               exercise_13_6_1.answer_13_6_1(summary, scaling, use_gpu,
                                             linear_rule.rule_outcome(rule), noise),
               exercise_13_6_2.answer_13_6_2(summary, epochs, noise, use_gpu),
               exercise_13_6_3.answer_13_6_3(summary, noise, use_gpu)]
    lines = ["## Answers", ""]
    if data_note:
        lines += [f"Accuracies come from data subsets ({data_note}) and are lower than the "
                  f"book's.", ""]
    lines += _shared_gpu_lead(summary)
    lines += _noise_lead(noise)
    for (number, title, question), paragraphs in zip(EXERCISES, answers):
        lines += [f"### {number} {title}", "", f"> {question}", ""]
        for paragraph in paragraphs:
            lines += [paragraph, ""]
    return _with_method(lines, noise)


def _shared_gpu_lead(summary: pd.DataFrame) -> list[str]:
    """Where workers shared a GPU (`--gpus-per-worker` 0.5 or less: the exercises on a
    machine of one GPU), what their trials can answer and what not."""
    shared = summary[shared_gpu_mask(summary)]
    if shared.empty:
        return []
    counts = listed([str(count) for count in sorted(shared["num_workers"].unique())])
    return [f"The {counts}-worker trials shared one GPU (a fraction of it each, "
            f"`--gpus-per-worker`), their sums going through the host over gloo: their "
            f"accuracies are compared as any trial's, but their epoch times are of workers "
            f"taking turns on one device, so no speedup is read from them and their times "
            f"compare them only with each other, not with GPUs of their own; the scaling "
            f"model forecasts those (a what-if); a cluster with a GPU for every worker "
            f"(`--address`) measures them.", ""]


def _with_method(lines: list[str], noise) -> str:
    """The answers with their first paragraphs' marks resolved (`resolve_marks`) and
    the Method section after them."""
    text = resolve_marks("\n".join(lines))
    return "\n".join([text, *_method(noise, text)])


# The heading of the closing section that says how the noise is estimated and tested.
METHOD = "### Method: the noise and the tests"


def _noise_lead(noise) -> list[str]:
    """Above the answers: which epochs every time counts, and the table of spreads
    every comparison is tested against; how, under METHOD at the end."""
    lead = (f"{window_sentence(noise.trial_epochs)} Every comparison below is tested against "
            f"the spread of the sweep's repeated work (the table; how they are estimated and "
            f"tested is under Method, at the end). Each number says how many seeds (replicas) "
            f"it is the mean of.")
    return [lead, "", markdown_table(pd.DataFrame(noise.table_rows())), ""]


def _method(noise, answers: str = "") -> list[str]:
    tests = tests_sentence(answers)
    return [METHOD, "", noise.sentence(method=True) + (f" {tests}" if tests else ""), ""]


# A p-value the answers print: "p = 0.012", or "p < 1e-06", and Holm's adjustment of
# it where one follows (a ranking's: "p = 0.012; Holm over 6 comparisons, p = 0.035");
# not a first paragraph's mark, which repeats one, nor the level "p < 0.05" a sentence
# names.
_NUMBER = r"(?:= ([0-9.]+(?:e-?[0-9]+)?)|< (1e-06))"
_P_VALUE = re.compile(rf"(?<!weak: )(?<!tentative: )\bp {_NUMBER}\b"
                      rf"(?:; Holm over \d+ comparisons, p {_NUMBER}\b)?")
# A first paragraph's candidate mark (`compare.weak`), as the exercises write it: a
# parenthesis of its own before "than", or the last item of one.
_MARKS = (re.compile(r"\(weak: (p (?:= [0-9.]+(?:e-?[0-9]+)?|< 1e-06))\)( ?)"),
          re.compile(r"; weak: (p (?:= [0-9.]+(?:e-?[0-9]+)?|< 1e-06))"))


def _tentative(answers: str) -> tuple[list[float], list[float], float]:
    """The p-values of the answers' findings, each counted once, a ranking's as Holm
    adjusted it within the ranking (its verdict's p); those below SIGNIFICANCE that
    the Benjamini-Hochberg procedure over all of them does not keep at a false
    discovery rate of SIGNIFICANCE; and the largest it keeps (0 where none: it keeps
    every p up to that one)."""
    p_values = [float(holm_equal or holm_below or equal or below)
                for equal, below, holm_equal, holm_below in _P_VALUE.findall(answers)]
    adjusted = benjamini_hochberg(p_values)
    return (p_values, sorted(p for p, q in zip(p_values, adjusted)
                             if p < SIGNIFICANCE and not q < SIGNIFICANCE),
            max((p for p, q in zip(p_values, adjusted) if q < SIGNIFICANCE), default=0.0))


def resolve_marks(answers: str) -> str:
    """The first paragraphs' candidate marks (`compare.weak`) kept, as "tentative: p =
    ...", where the Benjamini-Hochberg procedure over every p the answers print does
    not keep the finding, the rest taken out: one rule for the marks and the Method
    (a review: a local "weak" at 0.01 <= p < 0.05 marked findings the procedure kept).
    The procedure keeps every p up to the largest it keeps, so a mark's p (Holm's, in
    a ranking, as the procedure counts it) is kept where it is no larger than that."""
    _, _, cutoff = _tentative(answers)

    def resolve(match: re.Match, template: str) -> str:
        p = float(match.group(1).split()[-1])
        return "" if p <= cutoff else template.format(*match.groups())

    answers = _MARKS[0].sub(lambda match: resolve(match, "(tentative: {}){}"), answers)
    return _MARKS[1].sub(lambda match: resolve(match, "; tentative: {}"), answers)


def tests_sentence(answers: str) -> str:
    """How many findings' p-values the answers print (a first paragraph's "weak: p = ..."
    repeats one below it; a ranking's counted as Holm adjusted it), how many below
    SIGNIFICANCE, and which of those the Benjamini-Hochberg procedure over all of them
    does not keep at a false discovery rate of SIGNIFICANCE: the sheet's many tests,
    each at its own level, would otherwise find some of its differences by chance
    alone. One rule for this and the first paragraphs' marks (`resolve_marks`): a
    review read Holm's p's marked against a cutoff set by the raw ones. Empty without
    any."""
    p_values, weak, _ = _tentative(answers)
    if not p_values:
        return ""
    found = [p for p in p_values if p < SIGNIFICANCE]
    kept = (f"all {len(found)}" if not weak else f"{len(found) - len(weak)} of the {len(found)}")
    return (f"The answers print {counted(len(p_values), 'p-value')} of their findings, "
            f"{len(found)} below {SIGNIFICANCE:g}, each a test at its own level (13.5.3's "
            f"ranking counted at Holm's adjustment within it, the p printed after the raw "
            f"one): were there no difference anywhere, about 1 in {round(1 / SIGNIFICANCE)} "
            f"would fall below {SIGNIFICANCE:g} by chance. Over all of them the "
            f"Benjamini-Hochberg procedure (1995), at a false discovery rate of "
            f"{SIGNIFICANCE:.0%}, keeps {kept}"
            + (f"; read the findings at {listed([p_text(p) for p in weak])} as tentative "
               f"(the first paragraphs mark those they state)." if weak else "."))
