"""bench/meissonic_cost.py (issue 25, item 4) on the tiny Meissonic: every figure of its JSON is there, finite and
positive (the published shapes run the same code: `python bench/meissonic_cost.py --config published`)."""

import json
import math

import pytest

from bench.meissonic_cost import main

PER_RUN = ["transformer_params", "trained_params", "rollout_gflop_per_image_step", "sampler_s_per_step",
           "sampler_s_per_image_step", "P1_achieved_over_gemm", "sampler_tflops", "gemm_tflops",
           "training_rollout_gflop_per_trajectory_step", "training_rollout_s_per_trajectory_step",
           "activations_gib_per_trajectory_trained_step", "update_gflop_per_trajectory_trained_step",
           "update_s_per_trajectory_trained_step", "update_checkpointed_gflop_per_trajectory_trained_step",
           "update_checkpointed_s_per_trajectory_trained_step", "update_over_rollout_flop_per_step",
           "update_checkpointed_over_rollout_flop_per_step", "iteration_s", "iteration_checkpointed_s"]
CUDA_ONLY = ["sampler_peak_gib", "training_rollout_peak_gib", "update_peak_gib", "update_checkpointed_peak_gib"]


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("cost") / "cost.json"
    report = main(["--config", "tiny", "--dtype", "fp32", "--steps", "2", "3", "--gemm-n", "128", "--out", str(out)])
    return report, out


def test_tiny_config_writes_every_figure_finite_and_positive(tiny_report):
    report, out = tiny_report
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["config"] == "tiny" and len(report["runs"]) == 1
    run = report["runs"][0]
    assert run["dtype"] == "fp32" and run["device"] == "cpu" and run["resolution"] == 16 and run["tokens"] == 64
    bad = [k for k in PER_RUN if not _positive(run.get(k))]
    bad += [f"weights_gib.{k}" for k in ("transformer", "adapters_fp32", "text_encoder", "vqvae")
            if not _positive(run["weights_gib"].get(k))]
    bad += [f"sampler_s_by_steps.{T}" for T in ("2", "3") if not _positive(run["sampler_s_by_steps"].get(T))]
    assert not bad, f"missing, non-finite or not positive: {bad}"
    assert all(run[k] is None for k in CUDA_ONLY)  # peak memory is read on CUDA only
    # the checkpointed update recomputes the blocks' forward in backward: more FLOPs, the same result
    assert (run["update_checkpointed_gflop_per_trajectory_trained_step"]
            > run["update_gflop_per_trajectory_trained_step"])
    # a trained step is the guided pair with gradients, the reference pair and the backward: more than a rollout step
    assert run["update_over_rollout_flop_per_step"] > 2


def test_the_estimate_s_arithmetic_gives_the_flops_the_measurement_counts(tiny_report, tmp_path):
    """The README's cost figures are --estimate's arithmetic on FLOPs counted on the meta device; on the tiny config
    the same arithmetic gives what the measurement counts through cogrpo's sampler and trainer (within 3 %: the
    estimate counts the reference pair with its adapters, the trainer also updates the schedule policy)."""
    run = tiny_report[0]["runs"][0]
    est = main(["--config", "tiny", "--estimate", "--prompts", "1", "--group", "2", "--steps", "2",
                "--rollout-dtype", run["dtype"], "--out", str(tmp_path / "estimate.json")])
    per = est["tflop_per_trajectory"]
    # (an fp32 rollout also folds each adapter once, B·A: a share of a percent on the tiny shapes, counted by the
    # measurement, not by the per-step estimate)
    assert per["rollout_step"] * 1e3 == pytest.approx(run["training_rollout_gflop_per_trajectory_step"], rel=0.01)
    assert per["rollout_step"] * 1e3 <= run["training_rollout_gflop_per_trajectory_step"]
    assert per["trained_step"] * 1e3 == pytest.approx(run["update_gflop_per_trajectory_trained_step"], rel=0.03)
    assert per["trained_step_checkpointed"] * 1e3 == pytest.approx(
        run["update_checkpointed_gflop_per_trajectory_trained_step"], rel=0.03)
    assert est["pflop_per_iteration"]["total"] > 0 and set(est["iteration_s"]) == {"1", "8"}
    assert est["benchmark_images_per_variant_and_steps"] == {"geneval": 553 * 4, "dpg": 1065 * 4,
                                                             "imagereward": 100 * 10, "hpsv2": 3200}


def test_the_dropping_count_of_activations_is_the_keeping_one(tmp_path):
    """activations_gib drops each saved tensor (so the full-size figure needs no memory): it counts what a count that
    keeps them counts (distinct storages, weights left out), views of a live tensor once."""
    import torch

    from bench.meissonic_cost import activations_gib
    from cogrpo.backbones.meissonic import MeissonicGenerator
    from cogrpo.backbones.tiny_meissonic import make_tiny_meissonic
    from cogrpo.config import ModelConfig, ScheduleConfig
    from cogrpo.core.sampler import sample, trajectory_token_logprobs
    from cogrpo.core.schedule import base_knobs

    folder = make_tiny_meissonic(tmp_path / "tiny")
    gen = MeissonicGenerator(folder, ModelConfig(backbone="meissonic", pretrained=str(folder), resolution=16,
                                                 device="cpu", lora_rank=4))
    cond = gen.encode(["a red cube"])
    traj = sample(gen, cond, base_knobs(ScheduleConfig(steps=4)), torch.arange(1))
    forward = lambda: trajectory_token_logprobs(gen, traj, cond, torch.tensor([2]))  # noqa: E731
    weights = {p.untyped_storage().data_ptr() for m in (gen.transformer, gen.text_encoder, gen.vqvae)
               for p in m.parameters()}
    kept = []

    def keep(t):
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        forward()
    kept_bytes = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept
                      if t.untyped_storage().data_ptr() not in weights}.values())
    assert kept_bytes > 0
    assert activations_gib(gen, forward) * 2**30 == kept_bytes
