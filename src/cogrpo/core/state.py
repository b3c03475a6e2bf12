"""The decoding state a state-conditioned schedule policy reads before each step (train.schedule_policy: state).

Step t's knobs must be chosen before step t's forward (its CFG scale and temperature enter it), so the state at
step t is what the sampler holds by then, at no extra forward: the step's progress t/T, the fraction of the canvas
still masked, and statistics of step t−1's sampling distribution over the cells that were masked then — the
quantiles of its confidence (the largest probability of a cell) and of its entropy (÷ log V, so both lie in
[0, 1] whatever the codebook). Step 0 has no logits yet: its statistics are 0 and a "first step" flag is 1.
"""

from __future__ import annotations

import math

import torch

QUANTILES = (0.1, 0.5, 0.9)
STATE_FEATURES = 3 + 2 * len(QUANTILES)  # progress, masked fraction, first step; confidence and entropy quantiles


def state_features(t: int, steps: int, masked: torch.Tensor, logprobs: torch.Tensor | None,
                   was_masked: torch.Tensor | None) -> torch.Tensor:
    """(n, STATE_FEATURES) at step t of `steps`: masked (n, N) the canvas's masked cells now; logprobs (n, N, V) the
    previous step's sampling log-probs and was_masked (n, N) its masked cells (None at step 0)."""
    n, device = len(masked), masked.device
    head = torch.stack([torch.full((n,), t / steps, device=device), masked.float().mean(1),
                        torch.full((n,), float(t == 0), device=device)], 1)
    if logprobs is None:
        return torch.cat([head, torch.zeros(n, 2 * len(QUANTILES), device=device)], 1)
    confidence = logprobs.max(-1).values.exp()
    entropy = torch.special.entr(logprobs.exp()).sum(-1) / math.log(logprobs.shape[-1])
    q = torch.tensor(QUANTILES, device=device)
    stats = [torch.nanquantile(torch.where(was_masked, v, torch.nan), q, dim=1).T for v in (confidence, entropy)]
    return torch.cat([head, *stats], 1)
