"""Dataset loaders, one home for all of them: each returns a `datasets.Dataset` in the schema of its task's env.

- [`~trl_marl.data.debate`] (MAPoRL's debate, [`~trl_marl.envs.debate.DebateEnv`]): [`load_gsm8k`],
  [`load_tinygsm`], [`load_anli`], [`parse_gsm8k_answer`], [`tinygsm_answers`].
- [`~trl_marl.data.writing`] (MAGRPO's writing, [`~trl_marl.envs.writing.CooperativeWritingEnv`]): [`load_tldr`],
  [`parse_tldr_prompt`].
- [`~trl_marl.data.coding`] (MAGRPO's coding, [`~trl_marl.envs.coding.CooperativeCodingEnv`]): [`load_humaneval`],
  [`load_mbpp`], [`mbpp_to_humaneval`]; [`~trl_marl.data.team_coding`]: [`load_team_coding`], cooperative coding
  problems written for small models, split by family into training and held-out problems;
  [`~trl_marl.data.team_writing`]: [`load_team_writing`], texts for the writing task that ship with the package
  (standard-library docstrings, PSF License), split by module.
- [`~trl_marl.data.hidden_debate`] (a debate where each agent knows one number of a sum, for `DebateEnv`'s
  `private_columns`): [`load_hidden_sum`], [`hidden_sum_split`], [`hidden_sum_rows`].

The toy world's synthetic rows are in `trl_marl.toy` (`toy_debate_dataset`, `toy_facts_dataset`, ...). The Hub
loaders call `datasets.load_dataset` (downloaded once, then read from the local cache); a local copy with the same
columns can be read by passing its path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..utils.lazy import lazy_exports

# The loaders are imported on first use (PEP 562): `trl_marl.data.files` and the command line's checks of a data
# option stay free of torch, `datasets` and the envs that the loaders of the debate import.
_PUBLIC = {
    "normalize_number": "..utils.numbers",
    **{name: ".coding" for name in ("HUMANEVAL_COLUMNS", "load_humaneval", "load_mbpp", "mbpp_to_humaneval")},
    **{name: ".debate" for name in ("ANLI_LABELS", "ANLI_QUESTION_TEMPLATE", "load_anli", "load_gsm8k",
                                    "load_tinygsm", "parse_gsm8k_answer", "tinygsm_answers")},
    **{name: ".hidden_debate" for name in ("hidden_sum_rows", "hidden_sum_split", "load_hidden_sum")},
    "load_team_coding": ".team_coding",
    "load_team_writing": ".team_writing",
    **{name: ".writing" for name in ("load_tldr", "parse_tldr_prompt")},
}


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)


if TYPE_CHECKING:
    from ..utils.numbers import normalize_number
    from .coding import HUMANEVAL_COLUMNS, load_humaneval, load_mbpp, mbpp_to_humaneval
    from .debate import (
        ANLI_LABELS,
        ANLI_QUESTION_TEMPLATE,
        load_anli,
        load_gsm8k,
        load_tinygsm,
        parse_gsm8k_answer,
        tinygsm_answers,
    )
    from .hidden_debate import hidden_sum_rows, hidden_sum_split, load_hidden_sum
    from .team_coding import load_team_coding
    from .team_writing import load_team_writing
    from .writing import load_tldr, parse_tldr_prompt

__all__ = [
    "ANLI_LABELS",
    "ANLI_QUESTION_TEMPLATE",
    "HUMANEVAL_COLUMNS",
    "load_anli",
    "load_gsm8k",
    "hidden_sum_rows",
    "hidden_sum_split",
    "load_hidden_sum",
    "load_humaneval",
    "load_mbpp",
    "load_team_coding",
    "load_team_writing",
    "load_tinygsm",
    "load_tldr",
    "mbpp_to_humaneval",
    "normalize_number",
    "parse_gsm8k_answer",
    "parse_tldr_prompt",
    "tinygsm_answers",
]
