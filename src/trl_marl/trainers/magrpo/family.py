"""The MAGRPO family's configurations: MAREINFORCE, MARLOO and MAReMax are [`MAGRPOTrainer`] with another
`advantage_mode` (comlrl 1.4.3 ships each as a trainer of its own)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import MAGRPOConfig

__all__ = ["MAREINFORCEConfig", "MARLOOConfig", "MAReMaxConfig"]


_FAMILY_NOTE = """
    comlrl 1.4.3 ships this algorithm as a trainer of its own; here it is [`MAGRPOTrainer`] with another
    `advantage_mode`, so every MAGRPO and GRPO field applies unchanged. `scale_rewards` stays `"none"`: the
    algorithm's advantage is used as it is defined. (comlrl's default `advantage_normalization=True` re-centres and
    rescales each group's advantages after computing them, which makes `raw`, `max`, `mean` and `loo` all the same
    `(R - mean R) / std R`; the algorithms differ only with it off, which is what this preset gives. For the
    normalised variant use `MAGRPOConfig(scale_rewards="group")`.)
"""


@dataclass
class MAREINFORCEConfig(MAGRPOConfig):
    __doc__ = r"""Configuration of MAREINFORCE: [`MAGRPOTrainer`] with `advantage_mode="raw"` (REINFORCE, no baseline).

    Each sample's advantage is its return, A_g = R_g (with several turns, R_t = r_t + gamma * mean R_{t+1}).
    """ + _FAMILY_NOTE + r"""
    Example:

    ```python
    from trl_marl import MAGRPOTrainer, MAREINFORCEConfig

    args = MAREINFORCEConfig(output_dir="team", num_agents=2, num_generations=4, per_device_train_batch_size=16)
    assert args.advantage_mode == "raw"
    # trainer = MAGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)
    ```
    """

    advantage_mode: str | None = field(
        default="raw", metadata={"help": "MAREINFORCE's advantage: the return itself (no baseline)."}
    )


@dataclass
class MARLOOConfig(MAGRPOConfig):
    __doc__ = r"""Configuration of MARLOO: [`MAGRPOTrainer`] with `advantage_mode="loo"` (leave-one-out baseline).

    A_g = R_g - mean_{k != g} R_k = (G R_g - sum_k R_k) / (G - 1), the definition of comlrl's `"rloo"` mode.
    """ + _FAMILY_NOTE + r"""
    Example:

    ```python
    from trl_marl import MAGRPOTrainer, MARLOOConfig

    args = MARLOOConfig(output_dir="team", num_agents=2, num_generations=4, per_device_train_batch_size=16)
    assert args.advantage_mode == "loo"
    ```
    """

    advantage_mode: str | None = field(
        default="loo", metadata={"help": "MARLOO's advantage: the return minus the mean of the other samples'."}
    )


@dataclass
class MAReMaxConfig(MAGRPOConfig):
    __doc__ = r"""Configuration of MAReMax: [`MAGRPOTrainer`] with `advantage_mode="max"` (a group-max baseline).

    A_g = R_g - max_k R_k over the G samples of a node: the best sample gets 0, the others a negative advantage.
    The name is CoMLRL's. The baseline is the best *sampled* return of the group, not the baseline of ReMax (Li et al.,
    arXiv 2310.10505), which is the reward of one extra greedy (argmax-decoded) response to the same prompt: no greedy
    rollout is played here.
    """ + _FAMILY_NOTE + r"""
    Example:

    ```python
    from trl_marl import MAGRPOTrainer, MAReMaxConfig

    args = MAReMaxConfig(output_dir="team", num_agents=2, num_generations=4, per_device_train_batch_size=16)
    assert args.advantage_mode == "max"
    ```
    """

    advantage_mode: str | None = field(
        default="max",
        metadata={
            "help": "MAReMax's advantage (CoMLRL's name): the return minus the best return of the group's samples "
            "(a group-max baseline, not ReMax's greedy-rollout baseline)."
        },
    )
