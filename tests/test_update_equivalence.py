"""Temporary: the one update path computes exactly what the three old ones did (whole batch, micro-batches, ranks)."""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.config import ScheduleConfig, TrainConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.distributed import SINGLE, Ranks
from cogrpo.core.generator import Condition
from cogrpo.core.schedule import base_knobs
from cogrpo.core.trainer import CoGRPO

PROMPTS, GROUP = 4, 4


def _run(mode, micro, legacy, ranks=SINGLE):
    torch.manual_seed(0)
    mdm = MDM(MDMConfig(grid=4, n_shapes=4, n_colors=6, text_encoder="tiny-random", text_dim=16, max_text_tokens=8,
                        dim=32, layers=1, heads=2)).eval()
    text = torch.randn(PROMPTS, 5, 16, generator=torch.Generator().manual_seed(1))
    cond = Condition({"text": text, "text_mask": torch.ones(PROMPTS, 5, dtype=torch.bool)})
    cfg = TrainConfig(mode=mode, group_size=GROUP, prompts_per_iter=PROMPTS, lr_model=1e-2, lr_schedule=1e-1,
                      micro_batch=micro, inner_epochs=2)
    tr = CoGRPO(EmbeddedGenerator(mdm, text=None, tokenizer=None), base_knobs(ScheduleConfig(steps=4)), cfg, ranks)
    mine = ranks.share(PROMPTS)
    history = []
    for _ in range(3):
        batch = GroupedBatch(torch.arange(PROMPTS)[mine], cond[mine], GROUP)
        ro = tr.rollout(batch)
        rewards = (ro.traj.tokens % 3 == 0).float().mean(-1)
        history.append((tr._legacy_update if legacy else tr.update)(batch, ro, rewards))
    state = [p.detach().clone() for p in tr.trained] + [p.detach().clone() for p in tr.policies.parameters()]
    return state, history


def _same(a, b):
    (sa, ha), (sb, hb) = a, b
    assert len(sa) == len(sb) and all(torch.equal(x, y) for x, y in zip(sa, sb))
    for ma, mb in zip(ha, hb):
        assert ma == mb, {k: (ma.get(k), mb.get(k)) for k in ma.keys() | mb.keys() if ma.get(k) != mb.get(k)}


@pytest.mark.parametrize("mode", ["co", "model", "schedule"])
@pytest.mark.parametrize("micro", [None, 3])
def test_one_process(mode, micro):
    _same(_run(mode, micro, legacy=False), _run(mode, micro, legacy=True))


def _rank(rank, world, folder):
    dist.init_process_group("gloo", init_method=f"file://{folder}/rdv", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    torch.set_num_threads(1)
    for mode in ("co", "model", "schedule"):
        for micro in (None, 1):
            _same(_run(mode, micro, legacy=False, ranks=Ranks(rank, world)),
                  _run(mode, micro, legacy=True, ranks=Ranks(rank, world)))
    dist.destroy_process_group()


def test_two_ranks(tmp_path):
    mp.spawn(_rank, args=(2, str(tmp_path)), nprocs=2, join=True)
