"""`generation_backend="vllm"` with `vllm_mode="server"`: a vLLM OpenAI server, started apart, serves every agent.

Start the server on the team's base model with runtime LoRA loading and room for every agent's adapter, e.g.
`trl-marl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct --max-loras 4 --max-lora-rank 16` (vLLM's
`vllm.entrypoints.openai.api_server`, bound to 127.0.0.1 by default; see [`serve_command`]). The trainer then talks
HTTP to it: adapter-only sync as in colocate mode, through `/v1/load_lora_adapter` (each version under a new name;
the previous version is unloaded), and one `/v1/completions` request per adapter with that agent's prompts as token
ids, sent together so that the engine batches every agent's rows. Every request has a timeout, and a server that is
gone raises an error naming the URL and how to start one. The adapter folders are written to a temporary folder of
the trainer's machine, which the server must be able to read (same machine or shared file system).

With `sampling_logprobs` (the trainer's `vllm_importance_sampling_correction`), each request asks for the sampled
tokens' log-probabilities (`logprobs=0`), which the server computes after temperature and truncation when it runs
with `--logprobs-mode processed_logprobs` (what `trl-marl vllm-serve` passes); a token the server gives none for
counts as no mismatch (NaN, as in TRL).

Unlike colocate mode, sampling is not a function of the trainer's seed: one request carries several rows, and a
per-request seed would give rows that repeat a prompt the same completion, so none is sent.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from transformers import GenerationConfig

from .base import EngineBackend
from .vllm import adapter_changed, adapter_weights, check_servable, sampling_settings


def serve_command(model: str, max_loras: int, max_lora_rank: int, host: str = "127.0.0.1", port: int = 8000,
                  extra: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a vLLM server for a team (`trl-marl vllm-serve`)."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--enable-lora",
            "--max-loras", str(max_loras), "--max-lora-rank", str(max_lora_rank), "--host", host, "--port", str(port),
            # the log-probabilities of the importance-sampling correction: after temperature and truncation
            "--logprobs-mode", "processed_logprobs", *(extra or [])]
    env = dict(os.environ)
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"  # adapters are loaded and unloaded over HTTP while training
    if not torch.cuda.is_available():
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    return argv, env


class VLLMServerBackend(EngineBackend):
    """A team's generation through a running vLLM server (see the module docstring).

    Args:
        team: The [`AgentTeam`] to serve: one base model (the server's), a LoRA adapter per agent.
        base_url: The server's URL, e.g. `http://127.0.0.1:8000`.
        timeout: Seconds one HTTP request may take.
    """

    name = "vllm-server"

    def __init__(self, team: Any, base_url: str, timeout: float = 240.0) -> None:
        check_servable(team, one_base=True)
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._request("GET", "/health")  # fail now, with the fix, if no server answers
        self._root = tempfile.mkdtemp(prefix="trl-marl-vllm-server-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._root, True)
        self._uploaded: dict[str, list[torch.Tensor]] = {}
        self._names: dict[str, str] = {}  # adapter -> the name of its current version on the server
        self._version = 0
        self.uploads = 0

    def _request(self, method: str, path: str, payload: dict | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read().decode()
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"The vLLM server at {self.base_url} refused {method} {path} "
                               f"({error.code}): {error.read().decode()[:500]}") from error
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise RuntimeError(
                f"No vLLM server answers at {self.base_url} ({method} {path}: {error}). Start one on the team's base "
                "model, e.g. `trl-marl vllm-serve --model <base model> --max-loras <agents>`, and set "
                "`vllm_server_base_url` (or `vllm_server_host`/`vllm_server_port`) to it; or use "
                "`vllm_mode='colocate'`."
            ) from error
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            return body

    def sync(self, team: Any, force: bool = False) -> list[str]:
        """Load every adapter that changed since its last upload under a new name; unload its previous version."""
        from ..saving import _save_adapter

        model = team.models[0]
        uploaded = []
        for adapter in sorted(set(team.agent_adapter)):
            weights = adapter_weights(model, adapter)
            if not force and not adapter_changed(self._uploaded.get(adapter), weights):
                continue
            self._version += 1
            name = f"{adapter}-v{self._version}"
            path = os.path.join(self._root, name)
            _save_adapter(model, adapter, path)
            self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
            old = self._names.get(adapter)
            self._names[adapter] = name
            self._uploaded[adapter] = [p.detach().clone() for p in weights]
            if old is not None:
                self._request("POST", "/v1/unload_lora_adapter", {"lora_name": old})
                shutil.rmtree(os.path.join(self._root, old), ignore_errors=True)
            uploaded.append(adapter)
            self.uploads += 1
        return uploaded

    def lora_name(self, adapter: str) -> str:
        """The server-side name of an adapter's current version (after [`VLLMServerBackend.sync`])."""
        return self._names[adapter]

    def generate_with_logprobs(
        self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
        logprobs: bool | None = None,
    ) -> tuple[list[list[list[int]]], list[list[list[float]]] | None]:
        """[`VLLMServerBackend.generate`], plus the server's log-probability of every sampled token when `logprobs`
        (default: `sampling_logprobs`), else None (NaN where the server gave none)."""
        logprobs = self.sampling_logprobs if logprobs is None else logprobs
        self.sync(team)
        settings = sampling_settings(generation_config)
        settings.pop("detokenize")
        by_adapter: dict[str, list[tuple[int, int]]] = {}
        for a, rows in enumerate(prompt_ids):
            by_adapter.setdefault(team.agent_adapter[a], []).extend((a, i) for i in range(len(rows)))

        extra = {"logprobs": 0, "return_tokens_as_token_ids": True} if logprobs else {}

        def complete(adapter: str) -> list[tuple[list[int], list[float]]]:
            rows = by_adapter[adapter]
            reply = self._request("POST", "/v1/completions", {
                "model": self._names[adapter], "prompt": [list(prompt_ids[a][i]) for a, i in rows],
                "return_token_ids": True, **settings, **extra,
            })
            choices = sorted(reply["choices"], key=lambda choice: choice["index"])
            return [(list(choice["token_ids"]), [float("nan") if lp is None else float(lp) for lp in
                                                 (choice.get("logprobs") or {}).get("token_logprobs") or []])
                    for choice in choices]

        completions: list[list[list[int]]] = [[[] for _ in rows] for rows in prompt_ids]
        scores: list[list[list[float]]] = [[[] for _ in rows] for rows in prompt_ids]
        adapters = [adapter for adapter, rows in by_adapter.items() if rows]
        with ThreadPoolExecutor(max_workers=max(1, len(adapters))) as pool:  # every agent's rows in flight at once
            for adapter, rows in zip(adapters, pool.map(complete, adapters)):
                for (a, i), (tokens, row_logprobs) in zip(by_adapter[adapter], rows):
                    completions[a][i] = tokens
                    # a missing score is NaN: the correction then treats the token as no mismatch
                    scores[a][i] = (row_logprobs + [float("nan")] * len(tokens))[: len(tokens)]
        return completions, (scores if logprobs else None)

    def close(self) -> None:
        """Unload this trainer's adapters from the server and delete their folders (the server keeps running)."""
        for name in self._names.values():
            try:
                self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name})
            except RuntimeError:
                pass
        self._names.clear()
        self._cleanup()
