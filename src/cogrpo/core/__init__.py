"""The MDP core of Co-GRPO: inference schedule, schedule policy, GRPO math, sampler with trajectory record, trainer."""
