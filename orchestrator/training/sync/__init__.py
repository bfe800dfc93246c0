"""How workers sum their gradients: the strategies (strategies.py: scratch,
bucketed, ddp, sharded), the collectives they call (collectives.py), the
sharded optimizer (sharded.py) and the shared-memory transport of CPU workers
on one machine (shm_allreduce.py)."""
