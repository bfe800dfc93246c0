"""What reads a finished sweep's files: the files written (sweep_report.py),
each trial summarised (summary.py), tables (tables.py), plots (plots.py),
where the wall time went (timeline.py), time to accuracy
(time_to_accuracy.py), the gradient noise scale (noise_scale.py), a link's
alpha-beta costs (costs.py), the scaling model (scaling_model.py; its
1-worker baseline step_baseline.py), a point left out as a what-if
(what_if.py), ResNet-18 on the book's GPUs as a what-if (resnet18_what_if.py) and the answers
(answers/). Plain data (pandas, matplotlib): neither torch nor Ray. The
driver calls `write_sweep_report` and nothing else here.
"""

from orchestrator.report.sweep_report import SweepReport, write_sweep_report

__all__ = ["SweepReport", "write_sweep_report"]
