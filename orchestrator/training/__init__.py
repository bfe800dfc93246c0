"""What runs inside a Ray Train worker: the entry points (worker.py), the
training loop (loop.py) and the book's `train_batch` (step.py), models, data shards, the
batch split, device timing, checkpoints and the calibration's measurements.
Imports neither the driver nor the report; runs without Ray for the tests."""
