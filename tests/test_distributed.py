"""Data-parallel Co-GRPO on the CPU with gloo: 2 processes, each with half the prompts, end where 1 process with
the whole batch ends (model and schedule within 1e-5), for each training mode, on the embedded backbone (also with
the pretraining loss as anchor) and on a tiny aMUSEd (random weights, the real architecture) training LoRA adapters."""

from datetime import timedelta
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cogrpo.backbones.amused import AmusedGenerator
from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.backbones.pretrain import ScenePool, masked_token_loss
from cogrpo.backbones.tiny_amused import make_tiny_amused
from cogrpo.config import ModelConfig, ScheduleConfig, TrainConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.distributed import Ranks
from cogrpo.core.generator import Condition
from cogrpo.core.schedule import base_knobs
from cogrpo.core.trainer import CoGRPO

PROMPTS, GROUP, ITERATIONS = 4, 4, 3


def _state(trainer: CoGRPO) -> dict[str, torch.Tensor]:
    return ({f"model.{i}": p.detach().clone() for i, p in enumerate(trainer.trained)}
            | {f"policy.{k}": v.detach().clone() for k, v in trainer.policies.state_dict().items()})


CASES = [("embedded", "co", None, "per_step"), ("embedded", "model", 4, "per_step"),
         ("embedded", "schedule", None, "per_step"), ("embedded", "co", None, "prompt"),
         ("embedded", "alternate", 2, "per_step"), ("embedded", "co", 2, "state"),
         ("amused", "co", 4, "per_step"),
         ("embedded", "co", 2, "per_step", 0.5)]  # backbone, mode, train.micro_batch, train.schedule_policy[, anchor]


def _generator(backbone: str, folder: str):
    """The generator and the prompts' conditions: the embedded MDM with random text states, or the tiny aMUSEd
    (its CLIP text encoder, LoRA rank 4 on its transformer) with prompts."""
    torch.manual_seed(0)
    if backbone == "amused":
        tiny = Path(folder) / "tiny-amused"
        gen = AmusedGenerator(tiny, ModelConfig(backbone="amused", pretrained=str(tiny), device="cpu", lora_rank=4))
        return gen, gen.encode(["a red cube", "two cats", "a blue sky", "a dog left of a tree"][:PROMPTS])
    mdm = MDM(MDMConfig(grid=4, n_shapes=4, n_colors=6, text_encoder="tiny-random", text_dim=16, max_text_tokens=8,
                        dim=32, layers=1, heads=2)).eval()
    text = torch.randn(PROMPTS, 5, 16, generator=torch.Generator().manual_seed(1))
    return (EmbeddedGenerator(mdm, text=None, tokenizer=None),
            Condition({"text": text, "text_mask": torch.ones(PROMPTS, 5, dtype=torch.bool)}))


def _anchor(gen: EmbeddedGenerator, text: torch.Tensor):
    """The pretraining loss on a pool of random scenes of the prompts (what train.anchor_coef weighs)."""
    pool = ScenePool(torch.arange(12).numpy() % PROMPTS,
                     torch.randint(gen.codebook_size, (12, gen.n_tokens), generator=torch.Generator().manual_seed(2)))
    return partial(masked_token_loss, gen.model, (text, torch.ones(PROMPTS, 5, dtype=torch.bool)), pool, 6, 0.1)


def train(rank: int, world: int, folder: str, backbone: str, mode: str, micro_batch: int | None, policy: str,
          anchor_coef: float = 0.0):
    """A few iterations of one rank on its share of the prompts. Returns the starting and the final state, and the
    last update's metrics (the loss, KL and gradient norms among them: equal only if the gradients are)."""
    gen, cond = _generator(backbone, folder)
    cfg = TrainConfig(mode=mode, group_size=GROUP, prompts_per_iter=PROMPTS, lr_model=1e-2, lr_schedule=1e-1,
                      micro_batch=micro_batch, schedule_policy=policy, anchor_coef=anchor_coef)
    ranks = Ranks(rank, world)
    anchor = _anchor(gen, cond.tensors["text"]) if anchor_coef else None
    trainer = CoGRPO(gen, base_knobs(ScheduleConfig(steps=4)), cfg, ranks, anchor)
    mine, start = ranks.share(PROMPTS), _state(trainer)
    for _ in range(ITERATIONS):
        batch = GroupedBatch(torch.arange(PROMPTS)[mine], cond[mine], GROUP)
        rollout = trainer.rollout(batch)
        rewards = (rollout.traj.tokens % 3 == 0).float().mean(-1)  # any reward that differs within groups
        metrics = trainer.update(batch, rollout, rewards)
    return start, _state(trainer), metrics


def rank_main(rank: int, world: int, folder: str) -> None:
    """One process of the group: every case in turn; rank 0 saves the final states."""
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))  # a deadlock fails the test, not the suite's hour
    torch.set_num_threads(1)
    finals = {case: train(rank, world, folder, *case)[1:] for case in CASES}
    if rank == 0:
        torch.save(finals, f"{folder}/world{world}.pt")
    dist.destroy_process_group()


def test_two_ranks_train_what_one_process_trains(tmp_path):
    make_tiny_amused(tmp_path / "tiny-amused")
    mp.spawn(rank_main, args=(2, str(tmp_path)), nprocs=2, join=True)
    two = torch.load(tmp_path / "world2.pt")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for case in CASES:
            start, one, metrics = train(0, 1, str(tmp_path), *case)
            final, metrics_two = two[case]
            mode = case[1]
            assert one.keys() == final.keys() and metrics.keys() == metrics_two.keys()
            for key in one:
                diff = (one[key] - final[key]).abs().max()
                assert diff <= 1e-5, (case, key, diff)
            for key, value in metrics.items():
                assert abs(value - metrics_two[key]) <= 1e-5 * max(1.0, abs(value)), (case, key, value, metrics_two[key])
            assert ("model/anchor_loss" in metrics) == (len(case) > 4)
            moved = {k.split(".")[0] for k in one if not torch.equal(one[k], start[k])}  # not a vacuous equality
            assert moved == {"model": {"model"}, "schedule": {"policy"}}.get(mode, {"model", "policy"})
            if case[3] != "per_step":  # the prompt read-out, or both layers of the state network, learned too
                layers = (".head.",) if case[3] == "prompt" else (".net.0.", ".net.2.")
                for layer in layers:
                    assert any(layer in k and not torch.equal(one[k], start[k]) for k in one), (case, layer)
    finally:
        torch.set_num_threads(threads)


def test_torchrun_command_on_one_machine_and_over_several():
    import pytest

    from cogrpo.config import parse_params
    from cogrpo.errors import InputError
    from adapters.torchrun import torchrun_command

    one = torchrun_command(parse_params({"train": {"processes": 8}}), Path("job.json"))
    assert one[3:] == ["--standalone", "--nproc_per_node=8", "-m", "pipelines.train_ranks", "job.json"]
    two = torchrun_command(parse_params({"train": {"processes": 16, "nodes": 2, "rendezvous": "node0:29500"}}),
                           Path("job.json"))
    assert two[3:7] == ["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=node0:29500", "--nproc_per_node=8"]
    for train, message in (({"processes": 16, "nodes": 2}, "nodes > 1 needs rendezvous"),
                           ({"processes": 3, "nodes": 2, "rendezvous": "h:1"}, "do not split evenly over nodes"),
                           ({"processes": 2, "nodes": 2, "rendezvous": "no port"}, "train.rendezvous")):
        with pytest.raises(InputError, match=message):
            parse_params({"train": train})
    from cogrpo.validate import cross_check

    served = parse_params({"train": {"processes": 4, "nodes": 2, "rendezvous": "h:1",
                                     "rewards": [{"name": "imagereward"}]}})
    with pytest.raises(InputError, match="'reward_models.url': a training over 2 nodes needs a reward server"):
        cross_check(served)  # the stage's own server is on 127.0.0.1


def test_the_training_job_is_one_typed_record_written_and_read_back_whole(tmp_path):
    """The launcher's hand-off to the torchrun processes (adapters/torchrun.py): what is written is what each
    process reads, params included; a file that is not a job is refused with one line naming it."""
    import pytest

    from adapters.torchrun import TrainingJob
    from cogrpo.config import parse_params
    from cogrpo.errors import InputError

    params = parse_params({"train": {"processes": 2, "lr_model": 1e-5 / 3, "rewards": [{"name": "compositional"}]}})
    job = TrainingJob(params=params, inputs={"model": tmp_path / "base"}, out=tmp_path / "out", state_dir=tmp_path,
                      run_id=None, reward_url="http://127.0.0.1:1", served={"rewards": {"clip": {"sha256": "x"}}},
                      result=tmp_path / "result.json")
    job.write(tmp_path / "job.json")
    again = TrainingJob.read(tmp_path / "job.json")
    assert again == job and again.params == params and isinstance(again.inputs["model"], Path)
    (tmp_path / "bad.json").write_text('{"params": {}, "out": "x"}')
    with pytest.raises(InputError, match="bad.json: not a training job"):
        TrainingJob.read(tmp_path / "bad.json")
