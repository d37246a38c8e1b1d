"""Compare two files of `record_training.py`: every (test, training call) entry's logs and weight hashes, keyed by
file basename and test name, so that moved test files still match.

    python tests/tools/compare_training_records.py before.json after.json [old_file.py=new_file.py ...]

A renamed test file is matched by its `old=new` basenames.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def compare(before: dict[str, list[Any]], after: dict[str, list[Any]]) -> tuple[int, list[tuple[Any, ...]]]:
    """(identical calls, differences) over the tests both files recorded."""
    same, diffs = 0, []
    for key in sorted(set(before) & set(after)):
        calls_a, calls_b = before[key], after[key]
        if len(calls_a) != len(calls_b):
            diffs.append((key, f"{len(calls_a)} vs {len(calls_b)} training calls"))
            continue
        for i, (x, y) in enumerate(zip(calls_a, calls_b)):
            xm, ym = x.get("model", {}), y.get("model", {})
            bad = [field for field in ("log_history", "stats", "raised", "class") if x.get(field) != y.get(field)]
            if xm.get("values") != ym.get("values"):
                bad.append("weights")
            elif xm.get("keyed") != ym.get("keyed"):
                bad.append("state-dict key names")
            if bad:
                diffs.append((key, i, bad))
            else:
                same += 1
    return same, diffs


def main(argv: list[str]) -> int:
    before, after = (json.load(open(path)) for path in argv[:2])
    renames = dict(arg.split("=", 1) for arg in argv[2:])
    before = {renames.get(key.split("::", 1)[0], key.split("::", 1)[0]) + "::" + key.split("::", 1)[1]
              if "::" in key else key: calls for key, calls in before.items()}
    same, diffs = compare(before, after)
    print(f"tests with training calls: {len(before)} vs {len(after)}; identical calls {same}, differing {len(diffs)}")
    print("only in the first:", sorted(set(before) - set(after)))
    print("only in the second:", sorted(set(after) - set(before)))
    for diff in diffs:
        print("DIFF", diff)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
