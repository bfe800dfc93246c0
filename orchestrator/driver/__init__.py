"""What runs on the driver and talks to Ray, Train and Tune: the two commands
(commands.py, `d2l-train` and `d2l-sweep`), the two jobs they run (jobs.py),
what they ask for, checked before Ray starts (checks.py, the user's model in
model_check.py), the plan fitted to the cluster (plan.py), trials placed on
nodes of their own (placement.py), the plan printed (plan_text.py), the
sweep's microbenchmark run once (calibrate.py), its files written from
Tune's results (sweep_files.py), the cluster (cluster.py) and what the job
ships to its nodes (job_env.py), one trial's TorchTrainer (trial.py),
`--check-equivalence` (equivalence.py), the Tune experiment
(tune_experiment.py), what Tune calls back as its trials run
(tune_callbacks.py), the experiment read back (tune_results.py) and its
estimate of the time left (estimate.py, no Ray), a failed run's error in
one line (failures.py), storage (storage.py), the results folder
(rundir.py), the trackers (tracking.py) and the printed lines
(printers.py)."""
