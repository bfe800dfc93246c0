"""What runs on the driver and talks to Ray, Train and Tune: the two jobs
(jobs.py), the plan checked before Ray starts (plan.py), the cluster, one
trial's TorchTrainer (trial.py), the Tune experiment (tune_experiment.py),
storage, the results folder, the trackers (tracking.py) and the printed lines."""
