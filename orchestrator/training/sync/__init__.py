"""How workers sum their gradients: what every strategy shares, its transport
and interface (base.py), the strategies (strategies.py: scratch, bucketed,
root, ddp, sharded; delayed.py: two steps overlapped), the collectives they
call (collectives.py), the sharded optimizer (sharded.py) and the
shared-memory transport of CPU workers on one machine (shm_allreduce.py)."""
