"""Small helpers shared by several parts of trl-marl (the lowest layer: they import nothing else of trl-marl).

- [`~trl_marl.utils.text`]: the text of a plain or conversational completion.
- [`~trl_marl.utils.columns`]: a reward call's arguments: which agent's text is scored (`AgentSelector`), the
  dataset columns it reads, missing cells.
- [`~trl_marl.utils.code`]: the Python code of a model answer (one `extract_code`), the prompt preamble, syntax
  checks and HumanEval program assembly.
- [`~trl_marl.utils.numbers`]: the one grammar, canonical form and comparison rule of numeric answers, used by the
  data loaders (`trl_marl.data`) and the answer verifier (`trl_marl.rewards.verifier`).
"""
