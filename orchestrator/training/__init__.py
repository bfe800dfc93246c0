"""What runs inside a Ray Train worker: the entry points (worker.py), the
training loop (loop.py), the book's `train_batch` and the forward pass
(step.py), the step replayed as a CUDA graph (graphed.py), the non-finite
check, sync seconds and noise scale (step_metrics.py), the memory format
timed (layout.py), models (models.py), Fashion-MNIST and `--dataset`
(data.py, datasets.py), the batch split (split.py), device timing
(timing.py), checkpoints (checkpoint.py) and the calibration's measurements
(calibration.py, its compute probes step_probes.py); how workers sum
gradients: sync/. Imports neither the driver nor the report; runs without Ray
for the tests."""
