"""`evaluate`-library metric modules shipped with trl-marl, loadable offline from a local path.

```python
import evaluate
from trl_marl.metrics import MAPORL_ACCURACY_PATH

metric = evaluate.load(MAPORL_ACCURACY_PATH)
metric.compute(predictions=[["4", "4", "5"]], references=["4"])  # {'majority_accuracy': 1.0, ...}
```

The modules need the `evaluate` package (`pip install evaluate`); importing this package does not.
"""

from pathlib import Path

MAPORL_ACCURACY_PATH = str(Path(__file__).resolve().parent / "maporl_accuracy")
"""Local path of the `maporl_accuracy` metric folder, for `evaluate.load(MAPORL_ACCURACY_PATH)`."""

__all__ = ["MAPORL_ACCURACY_PATH"]
