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
