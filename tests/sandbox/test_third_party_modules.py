"""Issue 54, item 6: a test that reads a third-party module (`assert np.allclose(...)`) was forged by a program that
replaced `np.allclose`: only standard-library modules were the harness's own.

Now every module the tests read as a module is the harness's own import, whatever its origin, and a module the
harness cannot import (one the program made or wrote itself) refuses the tests that read it. Each attack below
scored 2/2 before the fix, and none solves the task (`scale` must scale).
"""

from __future__ import annotations

import pytest

from trl_marl.sandbox import SandboxLimits, TestSpec, run_programs
from trl_marl.sandbox.harness import modules_imported, names_read_as_modules

np = pytest.importorskip("numpy")  # a third-party module installed in the interpreter that runs the sandbox

LIMITS = SandboxLimits(wall_time=20, cpu_time=10, memory_mb=1024)
# The tests rely on the program's import of numpy, as MBPP's tests rely on the reference solution's imports.
TESTS = TestSpec.mbpp(
    ["assert np.allclose(scale([1.0, 2.0], 2), [2.0, 4.0])", "assert np.allclose(scale([3.0], 3), [9.0])"]
)
NUMPY_NAMED = TestSpec.mbpp(["assert numpy.allclose(scale([1.0, 2.0], 2), [2.0, 4.0])"])
HONEST = "import numpy as np\ndef scale(xs, k):\n    return [float(x) * k for x in np.asarray(xs)]\n"
WRONG = "def scale(xs, k):\n    return [0.0]\n"

ATTACKS = {
    # the red team's shape: the program's numpy, patched
    "patched_attribute": "import numpy as np\nnp.allclose = lambda *a, **k: True\n" + WRONG,
    # the program imports numpy, then rebinds the name to a namespace of its own
    "rebound_namespace": (
        "import numpy as np\nfrom types import SimpleNamespace\nnp = SimpleNamespace(allclose=lambda *a, **k: True)\n"
        + WRONG
    ),
    # a class of its own under numpy's conventional alias, without importing numpy at all
    "alias_class": "class np:\n    allclose = staticmethod(lambda *a, **k: True)\n" + WRONG,
    # a forged module object registered as numpy, then imported under that name
    "forged_sys_modules": (
        "import sys, types\nfake = types.ModuleType('numpy')\nfake.allclose = lambda *a, **k: True\n"
        "sys.modules['numpy'] = fake\nimport numpy as np\n" + WRONG
    ),
    # a module object of another name, made at run time: the harness cannot import it
    "made_module": ("import types\nnp = types.ModuleType('fastnp')\nnp.allclose = lambda *a, **k: True\n" + WRONG),
    # a third-party module of the program's own, written to its working directory and imported from there
    "written_package": (
        "import os, sys\nos.makedirs('vendor', exist_ok=True)\n"
        "with open(os.path.join('vendor', 'fastmath.py'), 'w') as f:\n"
        "    f.write('def allclose(*a, **k):\\n    return True\\n')\n"
        "sys.path.insert(0, os.path.abspath('vendor'))\nimport fastmath as np\n" + WRONG
    ),
}


def test_an_honest_program_passes_with_a_third_party_module():
    [result] = run_programs([HONEST], [TESTS], limits=LIMITS)
    assert (result.passed, result.total) == (2, 2), result.failures


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_program_cannot_answer_for_a_module_the_tests_read(name):
    [result] = run_programs([ATTACKS[name]], [TESTS], limits=LIMITS)
    assert result.passed == 0, (name, result.failures)


def test_a_module_the_harness_cannot_import_is_refused_with_a_clear_reason():
    [result] = run_programs([ATTACKS["made_module"]], [TESTS], limits=LIMITS)
    assert result.passed == 0
    assert any("fastnp" in failure and "cannot import" in failure for failure in result.failures), result.failures


def test_a_module_named_by_its_own_name_is_the_harness_import():
    forged = "from types import SimpleNamespace\nnumpy = SimpleNamespace(allclose=lambda *a, **k: True)\n" + WRONG
    honest = "import numpy\n" + HONEST.replace("import numpy as np\n", "").replace("np.asarray", "numpy.asarray")
    wrong, right = run_programs([forged, honest], [NUMPY_NAMED, NUMPY_NAMED], limits=LIMITS)
    assert wrong.passed == 0 and right.passed == 1, (wrong.failures, right.failures)


def test_what_the_harness_reads_of_tests_and_programs():
    assert names_read_as_modules(["assert np.allclose(f(x), y)", "assert math.isclose(g(1), 2)"]) == {"np", "math"}
    assert names_read_as_modules(["assert Pair.count == 2 and Pair(1) == 1"]) == frozenset()  # also called
    assert modules_imported("import numpy as np\nfrom os import path as p\nimport a.b\n") == {
        "np": ("numpy", True),
        "p": ("os.path", False),
        "a": ("a", True),
    }
    assert modules_imported("(" * 10_000) == {}  # code that does not parse imports nothing
