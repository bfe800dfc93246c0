"""d2l-ray-orchestrator: the book's data-parallel chapters (13.5, 13.6) on Ray
Train workers, swept with Ray Tune, answered in a report.

Subpackages by where the code runs; data flows one way, config -> driver ->
training (on the workers) -> records -> report:

- `config/`: every option, the command line, presets and studies (no torch, no Ray).
- `training/`: what runs inside a Ray Train worker; `training/sync/` its
  gradient-sync strategies and their transports.
- `driver/`: what runs on the driver and talks to Ray, Train and Tune.
- `report/`: what reads a finished sweep's files (no torch, no Ray).

Beside them: `records.py` (statuses, columns, printed lines: the vocabulary
all four share), `errors.py` (`UserError`) and `ray_fastpath.py` (the one
module below Ray's public API, used by the driver and the workers).
"""
