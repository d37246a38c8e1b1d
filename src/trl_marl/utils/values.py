"""Rules for single config values that need no torch: the configs apply them when they are made
([`~trl_marl.validation.config`]), and the command line applies the same rules to the values it was given before it
loads anything heavy ([`~trl_marl.scripts.early`]), so that a bad value is one line within a second.

Each rule returns the sentence that names the field and the fix, or None for a good value.

Example:

```python
from trl_marl.utils.values import learning_rate_problem

assert learning_rate_problem(1e-5, "MAGRPOConfig.learning_rate") is None
print(learning_rate_problem(-1.0, "MAGRPOConfig.learning_rate"))
```
"""

from __future__ import annotations

import math
from typing import Any


def learning_rate_problem(value: Any, field: str) -> str | None:
    """Why `value` cannot be the learning rate `field` (negative, NaN, infinite or not a number), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return None
    return (f"`{field}` must be a finite number >= 0 (the optimizer's step size), got {value!r}. Use a small positive "
            "value, e.g. `learning_rate=1e-5` for LoRA adapters or 1e-6 for full fine-tuning.")


def positive_int_problem(value: Any, field: str, meaning: str) -> str | None:
    """Why `value` cannot be `field`, an integer >= 1 whose `meaning` the sentence gives (e.g. a completion length),
    else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return None
    return f"`{field}` must be an integer >= 1 ({meaning}), got {value!r}."
