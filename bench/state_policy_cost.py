"""What a state-conditioned schedule policy (train.schedule_policy: state) adds to each sampling step.

Before each step the sampler computes the decoding state's features (core/state.py: quantiles of the previous
step's confidence and entropy over the masked cells, an extra pass or two over its (n, N, V) log-probs) and asks the
policy's network for the step's knobs (`StateChoices`), where a per-step policy's knobs are fixed up front. Two
figures, both per sampling step:
  overhead_of_step    (state-policy sampler − per-step sampler) ÷ per-step sampler, whole sampling calls timed
                      alternately (the fastest of the repeats: the least disturbed): what a rollout pays; noisy on
                      a busy machine
  choice_of_step      the state's features and the policy's choice alone (the extra work, timed by itself on the
                      step's own shapes) ÷ the per-step sampler's time per step: the same overhead, without the noise
The issue's goal: ≤ 5 % of a step on aMUSEd-256 shapes.

    python bench/state_policy_cost.py                                    # the embedded MDM (models/base or random)
    python bench/state_policy_cost.py --amused tiny                      # a tiny random aMUSEd
    python bench/state_policy_cost.py --amused 256 --batch 2 --steps 2   # aMUSEd-256's shapes, random weights
Writes reports/state_policy_cost_<backbone>.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from cogrpo.core.policy import StateChoices, StateSchedulePolicy
from cogrpo.core.sampler import sample, step_logprobs
from cogrpo.core.schedule import apply_actions, base_knobs
from cogrpo.core.state import state_features
from cogrpo.config import ModelConfig, ScheduleConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.sampler_throughput import write  # noqa: E402

PROMPTS = ["a red cube", "two blue dogs", "the green sky", "a dog left of a tree"]


def embedded(model: str, batch: int):
    """The embedded MDM (a trained folder, or the default architecture with random weights) and random text."""
    from cogrpo.backbones.embedded import EmbeddedGenerator
    from cogrpo.backbones.mdm import MDM, MDMConfig
    from cogrpo.core.generator import Condition

    if Path(model, "config.json").is_file():
        mdm = MDM.load(model)
    else:
        m = ModelConfig()
        mdm = MDM(MDMConfig(4, 4, 6, m.text_encoder, 384, m.max_text_tokens, m.dim, m.layers, m.heads)).eval()
    text = torch.randn(batch, 16, mdm.cfg.text_dim, generator=torch.Generator().manual_seed(0))
    cond = Condition({"text": text, "text_mask": torch.ones(batch, 16, dtype=torch.bool)})
    return EmbeddedGenerator(mdm, text=None, tokenizer=None), cond


def amused(size: str, batch: int, folder: Path):
    """A random-weight aMUSEd snapshot of the given size (cogrpo.backbones.tiny_amused) and encoded prompts."""
    from cogrpo.backbones.amused import AmusedGenerator
    from cogrpo.backbones.tiny_amused import make_tiny_amused

    make_tiny_amused(folder, size=size)
    gen = AmusedGenerator(folder, ModelConfig(backbone="amused", pretrained=str(folder), device="cpu"))
    return gen, gen.encode([PROMPTS[i % len(PROMPTS)] for i in range(batch)])


def measure(gen, cond, steps: int, repeats: int, base: torch.Tensor) -> dict:
    n = len(cond)
    policy = StateSchedulePolicy(base, gen.prompt_feature_dim)
    with torch.no_grad():  # a trained-looking network (the cost does not depend on its values)
        policy.net[-1].weight.normal_(0, 0.1, generator=torch.Generator().manual_seed(1))
    context, seeds = gen.prompt_features(cond), torch.arange(n)
    knobs = apply_actions(base, torch.zeros(n, steps, 4))  # a rollout's per-trajectory knobs, fixed up front

    def per_step():
        sample(gen, cond, knobs, seeds)

    def state():
        sample(gen, cond, base, seeds, choose=StateChoices(policy, torch.zeros(n, steps, 4), context))

    x = torch.full((n, gen.n_tokens), gen.mask_id)  # the extra work alone, at one mid-decoding step's shapes
    with torch.no_grad():
        lp = step_logprobs(gen, x, cond, knobs[:, 0])
    masked = torch.rand(n, gen.n_tokens, generator=torch.Generator().manual_seed(2)) < 0.5
    choices = StateChoices(policy, torch.zeros(n, steps, 4), context)

    def choice():
        choices(1, state_features(1, steps, masked, lp, torch.ones_like(masked)).cpu())

    timings: dict[str, list[float]] = {"per_step": [], "state": [], "choice": []}
    for fn in (per_step, state, choice):  # warm-up
        fn()
    for _ in range(repeats):  # alternately, so that a busy machine slows both alike
        for name, fn in (("per_step", per_step), ("state", state), ("choice", choice)):
            start = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - start)
    per_step_s, state_s, choice_s = (min(timings[k]) / d for k, d in (("per_step", steps), ("state", steps),
                                                                       ("choice", 1)))
    return {"batch": n, "steps": steps, "tokens": gen.n_tokens, "codebook": gen.codebook_size, "repeats": repeats,
            "per_step_sampler_s_per_step": per_step_s, "state_sampler_s_per_step": state_s,
            "overhead_of_step": state_s / per_step_s - 1, "choice_s": choice_s, "choice_of_step": choice_s / per_step_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/base", help="embedded: a model folder; random weights if absent")
    ap.add_argument("--amused", choices=["tiny", "256", "512"], help="a random aMUSEd of this size instead")
    ap.add_argument("--batch", type=int, default=128, help="trajectories (the default run's rollout: 16 × 8)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        gen, cond = (amused(args.amused, args.batch, Path(tmp) / "amused") if args.amused
                     else embedded(args.model, args.batch))
        base = base_knobs(ScheduleConfig(steps=args.steps))
        report = measure(gen, cond, args.steps, args.repeats, base)
    name = f"amused_{args.amused}" if args.amused else "embedded"
    write(report | {"backbone": name, "threads": args.threads}, f"reports/state_policy_cost_{name}.json")


if __name__ == "__main__":
    main()
