"""Small helpers shared by several parts of trl-marl (no imports of trainers, envs or rewards).

- [`~trl_marl.utils.numbers`]: the one grammar, canonical form and comparison rule of numeric answers, used by the
  data loaders (`trl_marl.data`) and the answer verifier (`trl_marl.rewards.verifier`).
"""
