"""Rewards scored by the reward server (reward_server/app.py: the protocol), which runs the reward models'
own packages in their own environment. One client per reward; images travel as raw uint8 pixels.

A server that is down or stops answering is an error after `retries` quick retries of the connection, never a
hang: every request has a timeout, and the message names the reward and the URL.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from cogrpo.errors import InputError, RewardServerError


class RewardClient:
    def __init__(self, url: str, timeout_s: float = 600.0, retries: int = 2):
        import httpx

        self.url, self.retries = url.rstrip("/"), retries
        self.http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=5.0))

    def _request(self, method: str, path: str, what: str, **kw) -> dict:
        import httpx

        for attempt in range(self.retries + 1):
            try:
                response = self.http.request(method, self.url + path, **kw)
                break
            except httpx.ConnectError as exc:  # not up (yet) or gone: retry briefly, then say so
                if attempt == self.retries:
                    raise RewardServerError(f"{what}: no reward server at {self.url} ({exc})") from None
                time.sleep(0.5 * 2**attempt)
            except httpx.TimeoutException:
                raise RewardServerError(f"{what}: the reward server at {self.url} did not answer in time") from None
            except httpx.HTTPError as exc:  # e.g. the server died mid-request
                raise RewardServerError(f"{what}: reward server at {self.url}: {type(exc).__name__}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:200]}
        if response.status_code == 400:
            raise InputError(f"{what}: the reward server refused the batch: {body.get('error')}")
        if response.status_code != 200:
            raise RewardServerError(f"{what}: reward server at {self.url} answered {response.status_code}: "
                                    f"{body.get('error')}")
        return body

    def health(self) -> dict:
        return self._request("GET", "/health", "health")

    def score(self, reward: str, images: np.ndarray, prompts: Sequence[str]) -> list[float]:
        pixels = np.ascontiguousarray(images, dtype=np.uint8)
        payload = {"reward": reward, "prompts": list(prompts),
                   "images": {"shape": list(pixels.shape), "data": base64.b64encode(pixels.tobytes()).decode()}}
        answer = self._request("POST", "/score", reward, json=payload)
        scores, self.last_server_seconds = answer["scores"], answer.get("seconds")  # the server's own compute time
        if len(scores) != len(prompts):
            raise RewardServerError(f"{reward}: {len(scores)} scores for {len(prompts)} images from {self.url}")
        return scores


def served_reward(label: str, url: str | None = None, timeout_s: float = 600.0):
    """A served reward (its label on the server = rewards.Term.label): scores (n,) of the images against their
    prompts."""
    if url is None:
        raise InputError(f"reward {label!r} is scored by the reward server, and none was started or given "
                         "(reward_models.url)")
    client = RewardClient(url, timeout_s)

    def reward(images, prompts, specs):
        return torch.tensor(client.score(label, images, prompts), dtype=torch.float32)

    return reward


def server_files(cfg, terms) -> list[tuple[str, str, str, str]]:
    """(reward label, params key, path, where to get it) of every file the served terms need; cfg is
    params.reward_models (cogrpo.config.RewardModelsConfig)."""
    files = []
    for term in terms:
        if term.name == "imagereward":
            where = "ImageReward.pt and med_config.json of huggingface.co/THUDM/ImageReward"
            files += [("imagereward", "reward_models.imagereward.checkpoint", cfg.imagereward.checkpoint, where),
                      ("imagereward", "reward_models.imagereward.med_config", cfg.imagereward.med_config, where)]
            if cfg.imagereward.bert_tokenizer:
                files.append(("imagereward", "reward_models.imagereward.bert_tokenizer",
                              str(Path(cfg.imagereward.bert_tokenizer) / "vocab.txt"), "bert-base-uncased's vocab"))
        elif term.name == "hpsv2":
            key = term.version.replace(".", "_")
            name = {"v2.0": "HPS_v2_compressed.pt", "v2.1": "HPS_v2.1_compressed.pt"}[term.version]
            files.append((term.label, f"reward_models.hpsv2.{key}", getattr(cfg.hpsv2, key),
                          f"{name} of huggingface.co/xswu/HPSv2"))
        elif term.name == "clip":
            files.append(("clip", "reward_models.clip.checkpoint", cfg.clip.checkpoint,
                          f"open_clip weights of {cfg.clip.arch}, e.g. huggingface.co/laion/CLIP-ViT-H-14-laion2B-s32B-b79K"))
    return files


def server_config(cfg, terms) -> dict:
    """The reward server's config (reward_server.models.load_all) for the served terms: only the models in use,
    every path absolute (the server works in a scratch directory)."""
    absolute = lambda p: str(Path(p).resolve()) if p else None  # noqa: E731
    arch = lambda a: absolute(a) if a.endswith(".json") else a  # noqa: E731
    out: dict = {"device": cfg.device}
    for term in terms:
        if term.name == "imagereward":
            out["imagereward"] = {"checkpoint": absolute(cfg.imagereward.checkpoint),
                                  "med_config": absolute(cfg.imagereward.med_config),
                                  "bert_tokenizer": absolute(cfg.imagereward.bert_tokenizer)}
        elif term.name == "hpsv2":
            out.setdefault("hpsv2", {"arch": arch(cfg.hpsv2.arch)})[term.version] = absolute(
                getattr(cfg.hpsv2, term.version.replace(".", "_")))
        elif term.name == "clip":
            out["clip"] = {"checkpoint": absolute(cfg.clip.checkpoint), "arch": arch(cfg.clip.arch)}
    return out
