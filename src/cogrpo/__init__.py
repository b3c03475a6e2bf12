"""cogrpo: Co-GRPO for masked diffusion models, and the embedded text-to-image world it runs in by default."""
