"""When and where each trial ran, from epochs.csv: how many trials ran at once,
and which trials ever shared a node while both ran.

Each epoch row carries its worker group's start on its nodes
(`run_started_unix_s`, a restarted group's later) and its own end
(`ended_unix_s`); a span is one worker group's time on one node, from its
start to its last epoch's end. The clocks are the nodes' own: spans of
different nodes compare as well as the nodes' clocks agree (NTP: milliseconds).
"""

import pandas as pd

from orchestrator.report.summary import per_worker_values

SPAN_COLUMNS = ["trial_id", "node", "start_unix_s", "end_unix_s"]
TIME_COLUMNS = ("run_started_unix_s", "ended_unix_s", "worker_nodes")


def trial_spans(epochs: pd.DataFrame) -> pd.DataFrame:
    """One row per trial, worker group and node: when that group held the node.
    Empty for epochs recorded before these times were."""
    if not set(TIME_COLUMNS) <= set(epochs) or epochs.empty:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    rows = []
    timed = epochs.dropna(subset=list(TIME_COLUMNS))
    for (trial_id, started), group in timed.groupby(["trial_id", "run_started_unix_s"]):
        nodes = dict.fromkeys(node for values in group["worker_nodes"]
                              for node in per_worker_values(values) or ())
        rows += [{"trial_id": trial_id, "node": node, "start_unix_s": float(started),
                  "end_unix_s": float(group["ended_unix_s"].max())} for node in nodes]
    return pd.DataFrame(rows, columns=SPAN_COLUMNS)


def max_trials_at_once(spans: pd.DataFrame) -> int:
    """The most trials running at one moment, each from its first start to its last end."""
    if spans.empty:
        return 0
    trials = spans.groupby("trial_id").agg(start=("start_unix_s", "min"),
                                           end=("end_unix_s", "max"))
    # At equal times an end comes first: a trial that starts as another ends
    # did not run beside it.
    events = sorted([(end, -1) for end in trials["end"]]
                    + [(start, 1) for start in trials["start"]])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def shared_nodes(spans: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(trial, other trial, node) for every two trials that ran on one node at
    overlapping times: none, when each trial had its nodes to itself."""
    shared = []
    for node, on_node in spans.groupby("node"):
        ordered = on_node.sort_values("start_unix_s").to_dict("records")
        for index, span in enumerate(ordered):
            for later in ordered[index + 1:]:
                if later["start_unix_s"] >= span["end_unix_s"]:
                    continue
                if later["trial_id"] != span["trial_id"]:
                    shared.append((span["trial_id"], later["trial_id"], node))
    return shared


# Where a sweep's wall time went (report.md's "Where the time went"): the driver's
# parts from sessions.json, each trial's from its epochs.
SPLIT_COLUMNS = ("wall_s", "ended_unix_s", "run_started_unix_s", "epoch_time_s",
                 "eval_time_s")
SPLIT_PARTS = {"starting workers": "starting each trial's workers (Ray Train's fit, the "
                                   "workers' processes and imports, the process group, the "
                                   "data from the object store)",
               "preparing": "preparing (data onto the device, the memory layouts timed, the "
                            "model built and broadcast)",
               "training": "training (the epochs' times)",
               "evaluating": "evaluating",
               "inside epochs": "inside epochs besides these (mid-epoch reports and "
                                "checkpoints)",
               "between epochs": "between epochs (each epoch's report and checkpoint)"}


def trial_time_split(epochs: pd.DataFrame) -> dict[str, float]:
    """The trials' own seconds, summed over trials, in the parts a trial's epochs
    time: from the trial's start in Tune to its first worker group's loop (Ray
    Train's fit, the workers' processes and imports, the process group, the data
    from the object store); from a group's loop to its first epoch (the data onto
    the device, the memory layouts timed, the model built and broadcast);
    training; evaluating; the rest of each epoch (the reports and checkpoints of
    mid-epoch evaluations); and between epochs (each epoch's report and
    checkpoint). A restarted group's own start is not split (its gap holds the
    failure too); a trial whose first group failed before its first epoch counts
    that attempt as starting workers. Epochs recorded before each epoch's start
    was (no `started_unix_s`) count the rest of an epoch as between epochs. {}
    where epochs.csv lacks the times."""
    if epochs.empty or not set(SPLIT_COLUMNS) <= set(epochs):
        return {}
    timed = epochs.dropna(subset=list(SPLIT_COLUMNS))
    split = dict.fromkeys(SPLIT_PARTS, 0.0)
    for _, trial in timed.groupby("trial_id"):
        trial = trial.sort_values(["run_started_unix_s", "epoch"])
        first = trial.iloc[0]
        # A row's wall_s counts from the trial's start (the Tune function's).
        split["starting workers"] += max(0.0, float(first["run_started_unix_s"]
                                                    - (first["ended_unix_s"] - first["wall_s"])))
        for _, group in trial.groupby("run_started_unix_s"):
            done = group["epoch_time_s"] + group["eval_time_s"]
            ends = group["ended_unix_s"]
            starts = (group["started_unix_s"].fillna(ends - done) if "started_unix_s" in group
                      else ends - done)
            split["preparing"] += max(0.0, float(starts.iloc[0]
                                                 - group["run_started_unix_s"].iloc[0]))
            split["inside epochs"] += float((ends - starts - done).clip(lower=0).sum())
            split["between epochs"] += float((starts - ends.shift()).iloc[1:].clip(lower=0).sum())
        split["training"] += float(trial["epoch_time_s"].sum())
        split["evaluating"] += float(trial["eval_time_s"].sum())
    return split


def time_split_rows(sessions: list[dict], epochs: pd.DataFrame) -> list[dict]:
    """report.md's table of where the wall time went: the sessions' (sessions.json)
    calibration and Tune's run of the trials, each trial's parts inside that, and
    Tune's own share around them where the trials ran one at a time. [] where a
    session did not record its parts (one of an older version's, whose trials'
    epochs would be counted against none of the wall time)."""
    if not sessions or any("trials_s" not in session for session in sessions):
        return []
    wall_s = sum(session["wall_s"] for session in sessions)
    calibration_s = sum(session.get("calibration_s", 0.0) for session in sessions)
    trials_s = sum(session["trials_s"] for session in sessions)
    rows = [{"part": "calibration (the microbenchmark, calibration.json)",
             "seconds": calibration_s},
            {"part": "the trials, as Tune ran them", "seconds": trials_s}]
    split = trial_time_split(epochs)
    rows += [{"part": f"- {SPLIT_PARTS[part]}", "seconds": seconds}
             for part, seconds in split.items()]
    spans = trial_spans(epochs)
    if split and max_trials_at_once(spans) <= 1:
        rows.append({"part": "- Tune around them (scheduling, the last checkpoint, the "
                             "workers' shutdown)",
                     "seconds": max(0.0, trials_s - sum(split.values()))})
    rows.append({"part": "the rest (Ray's results read, the report begun)",
                 "seconds": max(0.0, wall_s - calibration_s - trials_s)})
    for row in rows:
        row["share"] = f"{row['seconds'] / wall_s:.0%}" if wall_s else ""
        row["seconds"] = round(row["seconds"], 1)
    return rows
