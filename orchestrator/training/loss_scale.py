"""fp16's dynamic loss scale (`--precision fp16`).

float16 keeps 10 bits of mantissa and 5 of exponent: its smallest normal number
is 6.1e-5, and small gradients of the activations, taken in float16 under
autocast, round to zero. The loss is multiplied by a scale S before backward,
so that they do not, and the weights' gradients (fp32, as the weights are) are
divided by S again before their sum (Micikevicius et al., 2018, "Mixed
Precision Training", section 3.2). S is a power of two: both products are exact
in fp32, and the sum over the workers is the one a run without a scale sums.

Too large an S overflows float16 to inf in backward. The summed gradients'
non-finite check (step_metrics.NonFiniteCheck, every worker reaching the same
verdict) then skips the step on every worker, the weights and momentum as they
were, and halves S; after GROWTH_INTERVAL steps in a row with finite gradients
S doubles. Its constants are torch.amp.GradScaler's defaults. torch's own
GradScaler is not used: it decides on each worker's own gradients, where
`sharded`'s workers hold different parts of them and `delayed` applies the
previous step's, and would let the workers' decisions differ.

A step that overflows with S already at MIN_SCALE overflows without any scale:
the run diverged, as a non-finite gradient in fp32 says.

Each backward's S is recorded (`record`) and each sum judged takes the oldest
(`skip`, `stepped`): `delayed` judges step t's sum at step t+1, after step t+1's
backward ran at the same S. When that one overflows too, S was halved already
for step t's: its step is skipped, S not halved again (as one overflow costs the
other strategies one halving).

Nothing here may import ray.
"""

from collections import deque

import torch

INITIAL_SCALE = 2.0 ** 16
GROWTH_INTERVAL = 2000
MIN_SCALE = 1.0


class LossScale:
    """The scale, the finite steps since it last changed, and the steps skipped so
    far; saved with the run's checkpoint (`state_dict`)."""

    def __init__(self, state: dict | None = None):
        state = state or {}
        self.scale = float(state.get("scale", INITIAL_SCALE))
        self.good_steps = int(state.get("good_steps", 0))
        self.skipped_steps = int(state.get("skipped_steps", 0))
        # The S of each backward whose sum is not judged yet, oldest first (empty at
        # an epoch's end, where checkpoints are taken).
        self._taken_at: deque[float] = deque()

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps,
                "skipped_steps": self.skipped_steps}

    def unscale_(self, grads: list[torch.Tensor]) -> None:
        """The gradients of a loss multiplied by `scale`, divided by it again (exactly:
        a power of two), before anything reads or sums them."""
        if grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)

    def record(self) -> float:
        """The scale for a backward, recorded for its sum's verdict."""
        self._taken_at.append(self.scale)
        return self.scale

    def skip(self) -> bool:
        """A step whose summed gradients (the oldest recorded) were not finite,
        skipped: the scale halved, unless it was halved since they were taken.
        False where it was already MIN_SCALE: the run diverged."""
        taken_at = self._taken_at.popleft()
        self.skipped_steps += 1
        self.good_steps = 0
        if self.scale < taken_at:
            return True
        if self.scale <= MIN_SCALE:
            return False
        self.scale /= 2
        return True

    def stepped(self) -> None:
        """A step with finite gradients taken: the scale doubles after
        GROWTH_INTERVAL of them in a row."""
        self._taken_at.popleft()
        self.good_steps += 1
        if self.good_steps == GROWTH_INTERVAL:
            self.scale *= 2
            self.good_steps = 0
