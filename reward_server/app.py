"""The reward server: loads the configured reward models once and scores batches of (prompt, image) over HTTP.

    GET  /health  → {"status": "ok", "device", "torch", "rewards": {name: {package, checkpoint, sha256, …}}}
    POST /score   ← {"reward": name, "prompts": [str × n],
                     "images": {"shape": [n, H, W, 3], "data": base64 of the uint8 pixels, row-major}}
                  → {"scores": [float × n], "seconds": float, "images_per_s": float}
/health also counts, per reward, the images scored and their images/s over the scoring time so far.
Bad input answers 400 and a model failure 500, each as {"error": "<one line>"}. One request is scored at a time
(the models are not thread-safe and share one device), in chunks of `chunk` images; /health answers meanwhile. The client is
cogrpo.rewards.remote; the process that starts the server is adapters/reward_server.py.
"""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import torch

MAX_BATCH = 4096
MAX_BODY = 2**31  # bytes of one request: 4096 images of 512 px, base64


class BadRequest(Exception):
    pass


def parse_batch(body: dict, known: dict) -> tuple[str, list[str], np.ndarray]:
    reward = body.get("reward")
    if reward not in known:
        raise BadRequest(f"unknown reward {reward!r}; this server serves {sorted(known)}")
    prompts, images = body.get("prompts"), body.get("images")
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise BadRequest("'prompts' must be a list of strings")
    if not isinstance(images, dict) or not isinstance(images.get("shape"), list) or "data" not in images:
        raise BadRequest("'images' must be {'shape': [n, H, W, 3], 'data': base64 of uint8 pixels}")
    shape = images["shape"]
    if len(shape) != 4 or shape[3] != 3 or not all(isinstance(d, int) and d > 0 for d in shape):
        raise BadRequest(f"images of shape {shape}: expected [n, H, W, 3] uint8 RGB")
    if shape[0] != len(prompts) or not 0 < len(prompts) <= MAX_BATCH:
        raise BadRequest(f"{len(prompts)} prompts for {shape[0]} images: one prompt per image, 1 to {MAX_BATCH}")
    try:
        raw = base64.b64decode(images["data"], validate=True)
    except ValueError as exc:
        raise BadRequest(f"'images.data' is not base64: {exc}") from None
    if len(raw) != int(np.prod(shape)):
        raise BadRequest(f"'images.data' holds {len(raw)} bytes; shape {shape} needs {int(np.prod(shape))}")
    return reward, prompts, np.frombuffer(raw, np.uint8).reshape(shape)


def make_server(models: dict, host: str, port: int, device: str, chunk: int = 32) -> ThreadingHTTPServer:
    """chunk: images per forward (config key "chunk")."""
    # every batch is scored on this one thread: one at a time (the models are not thread-safe and share one
    # device), and always on a warm thread (a new thread per request would start its own OpenMP team)
    scorer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scorer")
    health = {"status": "ok", "device": device, "torch": torch.__version__,
              "rewards": {name: m.info for name, m in models.items()}}
    scored = {name: {"images": 0, "seconds": 0.0} for name in models}  # since the start, per reward

    def score(reward: str, prompts: list[str], pixels: np.ndarray) -> list[float]:
        """On the scorer thread: in chunks (a training's whole batch at once could exhaust a shared GPU), counted."""
        start, model = time.perf_counter(), models[reward]
        scores = [s for i in range(0, len(prompts), chunk)
                  for s in model.score(prompts[i:i + chunk], pixels[i:i + chunk])]
        scored[reward]["images"] += len(scores)
        scored[reward]["seconds"] += time.perf_counter() - start
        return scores

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path == "/health":
                throughput = {name: {"images": c["images"], "images_per_s": c["images"] / c["seconds"] if c["seconds"]
                                     else None} for name, c in scored.items()}
                self._answer(200, health | {"scored": throughput})
            else:
                self._answer(404, {"error": f"no {self.path}; GET /health, POST /score"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/score":
                return self._answer(404, {"error": f"no {self.path}; GET /health, POST /score"})
            try:
                size = int(self.headers.get("Content-Length", 0))
                if size > MAX_BODY:
                    raise BadRequest(f"a request of {size} bytes; at most {MAX_BODY} (send smaller batches)")
                body = json.loads(self.rfile.read(size))
                reward, prompts, pixels = parse_batch(body if isinstance(body, dict) else {}, models)
            except (BadRequest, json.JSONDecodeError, ValueError) as exc:
                return self._answer(400, {"error": str(exc)})
            start = time.perf_counter()
            try:
                scores = scorer.submit(score, reward, prompts, pixels).result()
            except Exception as exc:  # the model's failure, reported rather than a dropped connection
                return self._answer(500, {"error": f"{reward}: {type(exc).__name__}: {exc}"})
            seconds = time.perf_counter() - start
            self._answer(200, {"scores": scores, "seconds": seconds, "images_per_s": len(scores) / seconds})

        timeout = 600  # seconds a client may take to send its request: a stalled one cannot hold a thread forever

        def log_message(self, fmt: str, *args) -> None:  # one line per request on stderr is noise here
            pass

    return ThreadingHTTPServer((host, port), Handler)
