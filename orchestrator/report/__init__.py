"""What reads a finished sweep's files: summary, tables, plots, time to accuracy,
the scaling model and the answers. Plain data (pandas, matplotlib): neither
torch nor Ray. The driver calls `write_sweep_report` and nothing else here.
"""

from orchestrator.report.sweep_report import SweepReport, write_sweep_report

__all__ = ["SweepReport", "write_sweep_report"]
