"""FLOPs as torch's FlopCounterMode counts them, plus the CPU flash-attention kernels it has no formula for (it
would count them as 0): forward 2 batched matmuls, backward 5 (the scores recomputed), torch's own SDPA formulas."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten
CPU_ATTENTION = {
    aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *_, **__: sdpa_flop_count(q, k, v),
    aten._scaled_dot_product_flash_attention_for_cpu_backward:
        lambda grad_out, q, k, v, *_, **__: sdpa_backward_flop_count(grad_out, q, k, v),
}


def count_flops(fn) -> int:
    """Total FLOPs of one call of fn()."""
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        fn()
    return counter.get_total_flops()
