"""What a new user meets first: the torch threads of a CPU run, and errors that name the extra to install."""

from __future__ import annotations

import importlib.util
import logging
import sys
import warnings

import pytest
import torch

from trl_marl.utils import threads
from trl_marl.utils.threads import SMALL_MODEL_PARAMS, apply_cpu_threads, choose_cpu_threads

INSTALL_REWARDS = 'pip install "trl-marl[rewards]"'


# ---------------------------------------------------------------------------------------------------- threads
def test_small_models_get_one_thread_and_large_ones_every_core():
    assert choose_cpu_threads(84_000, cores=8, environ={})[0] == 1  # the toy model
    assert choose_cpu_threads(SMALL_MODEL_PARAMS - 1, cores=8, environ={})[0] == 1
    assert choose_cpu_threads(135_000_000, cores=8, environ={})[0] == 8  # SmolLM2-135M: a matter of cores
    assert choose_cpu_threads(135_000_000, cores=0, environ={})[0] == 1
    threads_, reason = choose_cpu_threads(84_000, cores=2, environ={})
    assert "0.08M-parameter" in reason and "OMP_NUM_THREADS" in reason and "cpu_threads" in reason


def test_an_explicit_setting_wins():
    # OMP_NUM_THREADS set by the user: torch already follows it, nothing is changed
    threads_, reason = choose_cpu_threads(84_000, cores=8, environ={"OMP_NUM_THREADS": "4"})
    assert threads_ is None and "OMP_NUM_THREADS=4" in reason
    # the config's cpu_threads wins over both the rule and the environment
    assert choose_cpu_threads(84_000, cores=8, environ={"OMP_NUM_THREADS": "4"}, cpu_threads=3)[0] == 3
    with pytest.raises(ValueError, match="`cpu_threads` must be >= 1"):
        choose_cpu_threads(84_000, cores=8, environ={}, cpu_threads=0)


def test_apply_sets_and_announces_once(monkeypatch, caplog):
    model = torch.nn.Linear(10, 10)
    previous = torch.get_num_threads()
    monkeypatch.setattr(threads, "_announced", False)
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        torch.set_num_threads(2)
        assert apply_cpu_threads([model], on_cpu=True) == 2  # the environment wins: left alone
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr(threads, "_announced", False)
        caplog.clear()  # an earlier test may have left the logger at INFO: only what follows counts
        with caplog.at_level("INFO", logger="trl_marl.utils.threads"):
            assert apply_cpu_threads([model], on_cpu=True) == 1
            assert apply_cpu_threads([model], on_cpu=True) == 1
        said = [r.getMessage() for r in caplog.records if r.name == "trl_marl.utils.threads"]
        assert len(said) == 1 and "1 torch thread for a 0.00M-parameter model" in said[0], said
        assert apply_cpu_threads([model], cpu_threads=2, on_cpu=True) == 2
        torch.set_num_threads(2)
        assert apply_cpu_threads([model], on_cpu=False) == 2  # on an accelerator nothing changes
    finally:
        torch.set_num_threads(previous)


def test_the_configs_take_cpu_threads():
    from trl_marl import MAGRPOConfig, MultiAgentPPOConfig

    assert MAGRPOConfig("out", cpu_threads=3, report_to="none").cpu_threads == 3
    assert MultiAgentPPOConfig("out", report_to="none").cpu_threads is None


# ---------------------------------------------------------------------------------------------------- extras
def test_rouge_error_names_the_extra(monkeypatch):
    from trl_marl.rewards import RougeLReward
    from trl_marl.rewards.writing import WritingTeamReward

    monkeypatch.setitem(sys.modules, "rouge_score", None)  # `import rouge_score` now raises ImportError
    with pytest.raises(ImportError) as info:
        RougeLReward()
    assert INSTALL_REWARDS in str(info.value) and 'pip install -e ".[rewards]"' in str(info.value)
    with pytest.raises(ImportError, match=r"trl-marl\[rewards\]"):  # what `trl-marl magrpo` (writing) meets
        WritingTeamReward().reward_funcs()


def test_codebleu_error_names_the_extra(monkeypatch):
    from trl_marl.rewards.codebleu import _load_codebleu

    monkeypatch.setitem(sys.modules, "codebleu", None)
    with pytest.raises(ImportError) as info:
        _load_codebleu("python")
    assert INSTALL_REWARDS in str(info.value)


def test_qlora_without_bitsandbytes_names_the_extra(monkeypatch):
    from trl_marl.scripts.magrpo import require_bitsandbytes

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name))
    with pytest.raises(ImportError) as info:
        require_bitsandbytes()
    assert 'pip install "trl-marl[qlora]"' in str(info.value) and "--load_in_4bit false" in str(info.value)


# ---------------------------------------------------------------------------------------------------- noise
class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_short_run_prints_no_deprecation_of_ours(untrained_target_model_dir, tmp_path):
    """No transformers FutureWarning or logged deprecation that our code triggers (checkpointing, cache names)."""
    import transformers.utils.logging as hf_logging
    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.rewards.arithmetic import TargetSumReward

    handler = _Messages()
    hf_logging.get_logger("transformers").addHandler(handler)
    hf_logging.warning_once.cache_clear()  # "once" per process: forget what earlier tests logged
    rows = Dataset.from_dict({"prompt": ["T=10:"] * 4, "target": [10] * 4})
    common = dict(report_to="none", save_strategy="no", disable_tqdm=True, learning_rate=1e-3, max_steps=1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # TRL's configs default to gradient_checkpointing=True: checkpointing on, shared prompt prefill on
            args = MAGRPOConfig(str(tmp_path / "m"), num_generations=2, per_device_train_batch_size=4,
                                max_completion_length=3, share_prompt_prefill=True, **common)
            assert args.activation_checkpointing is True
            MAGRPOTrainer(model=untrained_target_model_dir, reward_funcs=TargetSumReward(0.5), args=args,
                          train_dataset=rows).train()
            ppo = MultiAgentPPOConfig(str(tmp_path / "p"), per_device_train_batch_size=2, total_episodes=2,
                                      response_length=3, num_ppo_epochs=1, num_sample_generations=0, **common)
            MultiAgentPPOTrainer(args=ppo, model=untrained_target_model_dir, reward_funcs=TargetSumReward(0.5),
                                 train_dataset=rows).train()
    finally:
        hf_logging.get_logger("transformers").removeHandler(handler)
    futures = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert futures == [], futures
    deprecated = [m for m in handler.messages if "deprecated" in m]
    assert deprecated == [], deprecated
    assert not (tmp_path / "m" / "runs").exists() and not (tmp_path / "p" / "runs").exists()


def test_maporl_plot_is_titled_scaled_and_coloured_by_phase():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from trl_marl.scripts.plots import PHASE_COLORS, maporl_figure

    data = {phase: {"majority_accuracy": [0.5, 0.6, 0.7], "w_to_r_rate": [0.1, 0.2], "r_to_w_rate": [0.05, 0.0]}
            for phase in ("before", "after")}
    fig = maporl_figure(data)
    try:
        lines_ax, bars_ax = fig.axes
        assert fig._suptitle is not None and "MAPoRL" in fig._suptitle.get_text()
        assert lines_ax.get_title() and bars_ax.get_title()
        assert lines_ax.get_ylim() == (0.0, 1.0) and bars_ax.get_ylim() == (0.0, 1.0)
        assert "resp." not in bars_ax.get_ylabel()
        line_colors = {line.get_label(): to_hex(line.get_color()) for line in lines_ax.get_lines()}
        assert line_colors == {"before training": to_hex(PHASE_COLORS["before"]),
                               "after MAPoRL": to_hex(PHASE_COLORS["after"])}
        handles, labels = bars_ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels):  # each bar's colour is its phase's line colour
            phase = "before" if label.endswith("before training") else "after"
            assert to_hex(handle.patches[0].get_facecolor()) == to_hex(PHASE_COLORS[phase]), label
        assert len(labels) == 4
    finally:
        plt.close(fig)
