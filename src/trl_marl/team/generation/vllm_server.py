"""`generation_backend="vllm"` with `vllm_mode="server"`: a vLLM OpenAI server, started apart, serves every agent.

Start the server on the team's base model with runtime LoRA loading and room for every agent's adapter, e.g.
`trl-marl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct --max-loras 4 --max-lora-rank 16` (vLLM's
`vllm.entrypoints.openai.api_server`, bound to 127.0.0.1 by default; see [`serve_command`]). It asks every request
for an API key, loads adapters only from its adapter folder and keeps `/docs`, `/openapi.json` and `/metrics` closed
(`serve_guard`); it writes the key and the folder to a connection file that the trainer reads for the port it talks
to, so a trainer on the same machine needs no setting (from elsewhere: `VLLM_API_KEY` and
`TRL_MARL_VLLM_ADAPTER_DIR`, see `serve_guard`). The trainer then talks HTTP to it: adapter-only sync as in colocate
mode, through `/v1/load_lora_adapter` (each version under a new name, written to a folder of this trainer inside the
server's adapter folder; the previous version is unloaded), and one `/v1/completions` request per adapter with that
agent's prompts as token ids, sent together so that the engine batches every agent's rows. Every request has a
timeout and carries the key, and a server that is gone raises an error naming the URL and how to start one. The
adapter folder must be readable by the server (same machine or shared file system).

Sampling settings are resolved as the model's `generate` resolves them (`vllm.sampling_settings`). With
`sampling_logprobs` (the trainer's `vllm_importance_sampling_correction`), each request asks for the sampled tokens'
log-probabilities (`logprobs=0`), which must be the kind the correction expects: `--logprobs-mode
processed_logprobs` by default (what `trl-marl vllm-serve` passes; vLLM's own default is `raw_logprobs`, the model's
log-softmax at temperature 1), checked when the backend starts with a one-token probe
([`VLLMServerBackend.check_server_logprobs`]); a token the server gives none for counts as no mismatch (NaN, as in
TRL).

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
import urllib.parse
import urllib.request
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig

from .base import EngineBackend
from .serve_guard import ADAPTER_DIR_ENV, read_connection
from .vllm import LogprobSettingsCheck, adapter_changed, adapter_weights, check_servable, sampling_settings

if TYPE_CHECKING:
    from ..policies import AgentTeam


def serve_command(model: str, max_loras: int, max_lora_rank: int, host: str = "127.0.0.1", port: int = 8000,
                  extra: list[str] | None = None, api_key: str | None = None, adapter_dir: str | None = None,
                  open_docs: bool = False, open_metrics: bool = False,
                  logprobs_mode: str = "processed_logprobs") -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a vLLM server for a team (`trl-marl vllm-serve`).

    Args:
        model: The team's base model (name or path).
        max_loras: Adapters served at once.
        max_lora_rank: The largest LoRA rank.
        host: The interface to bind.
        port: The port.
        extra: Further vLLM server options, passed unchanged.
        api_key: The key every request but `/health` must carry (in the server's environment, not its command line).
        adapter_dir: The only folder runtime adapter loading reads from (None: every load is refused).
        open_docs: Serve `/docs`, `/redoc` and `/openapi.json`.
        open_metrics: Serve `/metrics`.
        logprobs_mode: vLLM's `--logprobs-mode` (`processed_logprobs`: what the importance-sampling correction
            expects by default).
    """
    from .serve_guard import ADAPTER_DIR_ENV, OPEN_DOCS_ENV, OPEN_METRICS_ENV

    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--enable-lora",
            "--max-loras", str(max_loras), "--max-lora-rank", str(max_lora_rank), "--host", host, "--port", str(port),
            # the log-probabilities of the importance-sampling correction (after temperature and truncation)
            "--logprobs-mode", logprobs_mode,
            # the key, the adapter folder and the closed paths (`serve_guard`); vLLM's own docs routes off too
            "--middleware", "trl_marl.team.generation.serve_guard.ServerGuard",
            *([] if open_docs else ["--disable-fastapi-docs"]), *(extra or [])]
    env = dict(os.environ)
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"  # adapters are loaded and unloaded over HTTP while training
    env.pop("VLLM_API_KEY", None)
    if api_key:
        env["VLLM_API_KEY"] = api_key
    env.pop(ADAPTER_DIR_ENV, None)
    if adapter_dir is not None:
        env[ADAPTER_DIR_ENV] = str(adapter_dir)
    env[OPEN_DOCS_ENV] = "1" if open_docs else "0"
    env[OPEN_METRICS_ENV] = "1" if open_metrics else "0"
    if not torch.cuda.is_available():
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    return argv, env


def _probe_token(team: AgentTeam) -> int:
    """A token id of the team's vocabulary for the log-probability probe (its first tokenizer's EOS, else 0)."""
    eos = getattr(team.tokenizers[0], "eos_token_id", None) if getattr(team, "tokenizers", None) else None
    return int(eos) if isinstance(eos, int) else 0


def _loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


class VLLMServerBackend(EngineBackend):
    """A team's generation through a running vLLM server (see the module docstring).

    Args:
        team: The [`AgentTeam`] to serve: one base model (the server's), a LoRA adapter per agent.
        base_url: The server's URL, e.g. `http://127.0.0.1:8000`.
        timeout: Seconds one HTTP request may take.
        api_key: The server's API key. Default: `VLLM_API_KEY` from the environment, else the key in the connection
            file `trl-marl vllm-serve` wrote for the URL's port (a server on this machine), else none.
        adapter_dir: The server's adapter folder, where this trainer writes its adapter versions (in a folder of its
            own). Default: `TRL_MARL_VLLM_ADAPTER_DIR`, else the connection file's, else a temporary folder (a
            server that takes any path, e.g. one started by hand).
        logprobs_mode: The log-probabilities the server must return (`--logprobs-mode`): `"processed_logprobs"`
            or `"raw_logprobs"`.
        sampling_logprobs: Whether the trainer asks for log-probabilities (the importance-sampling correction): the
            server's `--logprobs-mode` is then checked at once.
    """

    name = "vllm-server"

    def __init__(self, team: Any, base_url: str, timeout: float = 240.0, api_key: str | None = None,
                 adapter_dir: str | None = None, logprobs_mode: str = "processed_logprobs",
                 sampling_logprobs: bool = False) -> None:
        check_servable(team, one_base=True)
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.logprob_check = LogprobSettingsCheck(logprobs_mode)
        self.sampling_logprobs = sampling_logprobs
        port = urllib.parse.urlsplit(self.base_url).port or 80
        connection = (read_connection(port) or {}) if _loopback(self.base_url) else {}
        self.api_key = api_key or os.environ.get("VLLM_API_KEY") or connection.get("api_key") or None
        adapter_dir = adapter_dir or os.environ.get(ADAPTER_DIR_ENV) or connection.get("adapter_dir")
        self._request("GET", "/health")  # fail now, with the fix, if no server answers
        if adapter_dir is not None:
            os.makedirs(adapter_dir, mode=0o700, exist_ok=True)
        self._root = tempfile.mkdtemp(prefix="trl-marl-vllm-server-", dir=adapter_dir)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._root, True)
        self._uploaded: dict[str, list[torch.Tensor]] = {}
        self._names: dict[str, str] = {}  # adapter -> the name of its current version on the server
        self._version = 0
        self.uploads = 0
        if sampling_logprobs:
            self.check_server_logprobs(probe_token=_probe_token(team))

    def _request(self, method: str, path: str, payload: dict | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code == 401:
                raise RuntimeError(
                    f"The vLLM server at {self.base_url} wants an API key ({method} {path} answered 401) and "
                    f"{'the one sent is not it' if self.api_key else 'none was found'}: a server started with "
                    "`trl-marl vllm-serve` on this machine writes its key to a connection file the trainer reads "
                    "(`trl_marl.team.generation.serve_guard`); elsewhere set `VLLM_API_KEY` to the server's key."
                ) from error
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

    def check_server_logprobs(self, probe_token: int = 0) -> None:
        """Check that the server returns the log-probabilities this backend expects (`logprobs_mode`).

        One token is sampled from the base model with `top_k=1`: after truncation its probability is 1, so a server
        with `--logprobs-mode processed_logprobs` returns exactly 0.0 for it, and one returning the model's raw
        log-softmax (vLLM's default, e.g. a server started by hand) a negative number. A raw server would make the
        importance ratio compare a temperature-1, untruncated distribution with the trainer's at its temperature.
        """
        models = self._request("GET", "/v1/models")
        bases = [m["id"] for m in (models.get("data") or []) if not m.get("parent")] if isinstance(models, dict) \
            else []
        if not bases:
            raise RuntimeError(f"The vLLM server at {self.base_url} lists no base model at /v1/models.")
        reply = self._request("POST", "/v1/completions", {
            "model": bases[0], "prompt": [[int(probe_token)]], "max_tokens": 1, "temperature": 1.0, "top_k": 1,
            "logprobs": 0, "return_tokens_as_token_ids": True, "ignore_eos": True,
        })
        try:
            value = float(reply["choices"][0]["logprobs"]["token_logprobs"][0])
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise RuntimeError(f"The vLLM server at {self.base_url} returned no log-probability for a probe "
                               f"request: {str(reply)[:300]}") from error
        processed = abs(value) <= 1e-6
        wanted = self.logprob_check.mode
        if processed != (wanted == "processed_logprobs"):
            found = "processed log-probabilities" if processed else (
                "raw log-probabilities (vLLM's default `--logprobs-mode raw_logprobs`: a server started by hand?)"
                if value < 0 else f"a value of {value} (logits?)")
            raise RuntimeError(
                f"The vLLM server at {self.base_url} returns {found}, and the importance-sampling correction "
                f"expects `{wanted}`: a top_k=1 probe token got log-probability {value:.4g}. Start the server with "
                f"`trl-marl vllm-serve` (it passes `--logprobs-mode {wanted}`) or add `--logprobs-mode {wanted}` to "
                "its command line; or set `vllm_importance_sampling_correction=False`."
            )

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
        """Every agent's rows from the server (uncut: [`EngineBackend.generate`] cuts them into the team's
        `Generation`), and the server's log-probability of every sampled token when `logprobs` (default:
        `sampling_logprobs`), else None (NaN where the server gave none)."""
        logprobs = self.sampling_logprobs if logprobs is None else logprobs
        self.sync(team)
        settings = sampling_settings(generation_config, team.models[0])  # resolved as its `generate` would
        if logprobs:
            self.logprob_check(settings, getattr(team.models[0].config, "vocab_size", None))
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
            for adapter, replies in zip(adapters, pool.map(complete, adapters)):
                for (a, i), (tokens, row_logprobs) in zip(by_adapter[adapter], replies):
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
