"""Programs that scored without solving their task against the sandbox of commit 60c9185 (issue 35, item 1), and
new shapes of the same four classes: each must now score below full credit (most score 0), while an honest program
still passes the same tests.

1. The program reads the answers from the host (a dataset file, a datasets cache, the trainer's own test files): with
   namespaces the program's root is built from an allowlist, so none of them is there.
2. Duck-typed return values (`class R: startswith = lambda *a: True`): an object a call returned is never asked
   for an attribute or a method.
3. Failures escaping the test body in split mode (a nested helper that asserts, `try/except/else: assert False`, a
   loop raising `AssertionError(x)`, a module-level helper): every statement of `check` belongs to a test.
4. Standard modules bound by the program (`os = SimpleNamespace(...)`, a fake `calendar`): every standard module a
   test reads is the harness's own.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from trl_marl.sandbox import SandboxLimits, TestSpec, run_program, run_programs
from trl_marl.sandbox.harness import STANDARD_MODULES, root_layout
from trl_marl.sandbox.plans import make_plan, modules_read

LIMITS = SandboxLimits(wall_time=5, cpu_time=3, memory_mb=512)


def _probe_isolation() -> tuple[str, ...]:
    return run_program("x = 1\n", ["assert x == 1"], LIMITS).isolation


OS_LAYER = os.geteuid() == 0 and {"uid", "pidns", "mountns", "netns"} <= set(_probe_isolation())
needs_os_layer = pytest.mark.skipif(not OS_LAYER, reason="the allowlisted root needs root and Linux namespaces")


# ---------------------------------------------------------------------------------------------------- 1. host files
# HumanEval/2 (`truncate_number`): the row as a dataset file holds it, canonical solution included.
TRUNCATE_ROW = {
    "task_id": "HumanEval/2",
    "prompt": 'def truncate_number(number: float) -> float:\n    """Return the decimal part."""\n',
    "canonical_solution": "    return number % 1.0\n",
    "entry_point": "truncate_number",
}
TRUNCATE_TEST = (
    "def check(candidate):\n"
    "    assert candidate(3.5) == 0.5\n"
    "    assert abs(candidate(1.33) - 0.33) < 1e-6\n"
    "    assert abs(candidate(123.456) - 0.456) < 1e-6\n"
)
TRUNCATE = TestSpec.humaneval(TRUNCATE_TEST, "truncate_number")


def _reader(path: str) -> str:
    """The red team's program: open the dataset file on the host, `exec` the canonical solution, forward each call."""
    return (
        "import json\n"
        "_solved = {}\n"
        "try:\n"
        f"    for _line in open({path!r}):\n"
        "        _row = json.loads(_line)\n"
        "        exec(_row['prompt'] + _row['canonical_solution'], _solved)\n"
        "except OSError as exc:\n"
        "    print('hidden:', type(exc).__name__)\n"
        "def truncate_number(number):\n"
        "    return _solved['truncate_number'](number)\n"
    )


def _world_readable_dir(base: str) -> Path:
    """A fresh directory `base/trl_marl_planted_<random>/home/user/.cache/huggingface/datasets` that every user can
    traverse (so the sandbox user could read it on the host), removed by the caller."""
    root = Path(base) / f"trl_marl_planted_{uuid.uuid4().hex[:12]}"
    leaf = root / "home" / "user" / ".cache" / "huggingface" / "datasets"
    leaf.mkdir(parents=True)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755)
    return root


def _planting_bases() -> list[str]:
    """Host directories outside the temporary ones (which the sandbox always hid) that every user can traverse."""
    bases = []
    for base in ("/var/lib", "/opt", "/srv", "/home"):
        if (
            os.path.isdir(base)
            and os.access(base, os.W_OK)
            and all(os.stat(p).st_mode & stat.S_IXOTH for p in (base, os.path.dirname(base)))
        ):
            bases.append(base)
    return bases


@pytest.fixture
def planted_dataset():
    """HumanEval/2 planted, world-readable, in a fake datasets cache under a home-like path on the host."""
    bases = _planting_bases()
    if not bases:
        pytest.skip("no world-traversable host directory outside /tmp to plant a file in")
    root = _world_readable_dir(bases[0])
    try:
        path = root / "home" / "user" / ".cache" / "huggingface" / "datasets" / "HumanEval.jsonl"
        path.write_text(json.dumps(TRUNCATE_ROW) + "\n")
        path.chmod(0o644)
        yield path
    finally:
        shutil.rmtree(root)


@needs_os_layer
def test_a_program_cannot_read_the_answers_from_a_datasets_cache_on_the_host(planted_dataset):
    honest = "def truncate_number(number):\n    return number % 1.0\n"
    cheat, good = run_programs([_reader(str(planted_dataset)), honest], [TRUNCATE, TRUNCATE], LIMITS)
    assert good.reason == "ok", good
    assert cheat.passed == 0 and "hidden: FileNotFoundError" in cheat.stdout, cheat
    # The planted file is readable to the sandbox user on the host: shown on purpose, the same program passes.
    shown = run_program(
        _reader(str(planted_dataset)),
        TRUNCATE,
        SandboxLimits(wall_time=5, cpu_time=3, memory_mb=512, visible_paths=(str(planted_dataset.parent),)),
    )
    assert shown.reason == "ok", shown


@needs_os_layer
def test_a_program_sees_only_the_allowlisted_root(planted_dataset):
    """Nothing of the host outside the interpreter, its libraries and a few system files: not the planted folder, not
    the trainer's own test files (which hold expected values), not the host's home or `/etc/passwd`."""
    here = str(Path(__file__).resolve())
    program = (
        "import os\n"
        f"for path in [{str(planted_dataset.parents[5])!r}, {here!r}, {os.path.dirname(here)!r}, '/etc/passwd',\n"
        "             '/etc/hostname', '/etc/shadow', '/srv', '/var/lib', '/usr/share/doc', '/bin/sh']:\n"
        "    print(path, os.path.lexists(path))\n"
        "print(sorted(os.listdir('/')))\n"
        "print(sorted(os.listdir('/etc')))\n"
    )
    result = run_program(program, None, SandboxLimits(wall_time=5, cpu_time=3, memory_mb=512, python_guards=False))
    assert result.reason == "ok", result
    lines = result.stdout.splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines[:10]] == ["False"] * 10, result.stdout
    top = set(ast.literal_eval(lines[10]))
    # The interpreter and its import path are bound wherever they live (a CI clone under `/check`, a venv under `/tmp`)
    interpreter = {Path(p).parts[1] for p in [sys.executable, sys.prefix, sys.base_prefix, *sys.path]
                   if p.startswith("/") and len(Path(p).parts) > 1}
    assert top <= interpreter | {
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "tmp",
        "usr",
        "var",
        "root",
        "work",
        "opt",
        "home",
        "nix",
        "gnu",
        "Users",
        "srv",
    }, top
    assert set(ast.literal_eval(lines[11])) <= {
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "alternatives",
        "localtime",
    }


@needs_os_layer
def test_the_trainers_own_package_is_hidden_from_the_program():
    """`trl_marl` (task generators such as `trl_marl.toy.rows`, dataset loaders) is on the sandbox interpreter's import
    path when installed in it; the program cannot import it."""
    found = subprocess.run([sys.executable, "-I", "-c", "import trl_marl.toy.rows"], capture_output=True)
    if found.returncode != 0:
        pytest.skip("trl_marl is not installed in the sandbox's interpreter: nothing to hide")
    program = (
        "try:\n    from trl_marl.toy import rows\n    print('found')\n"
        "except ImportError as exc:\n    print(type(exc).__name__)\n"
    )
    result = run_program(program, None, LIMITS)
    assert (result.reason, result.stdout) == ("ok", "ModuleNotFoundError\n"), result


def test_root_layout_recreates_links_and_binds_outermost_real_paths(tmp_path):
    # host: lib -> usr/lib; usr/lib/x86 and usr/lib/python (dirs); venv/bin/python -> ../../usr/bin/python3 (a file)
    (tmp_path / "usr" / "lib" / "x86").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / "python").mkdir()
    (tmp_path / "usr" / "bin").mkdir()
    (tmp_path / "usr" / "bin" / "python3").write_text("")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    os.symlink("usr/lib", tmp_path / "lib")
    os.symlink("../../usr/bin/python3", tmp_path / "venv" / "bin" / "python")
    t = str(tmp_path)
    links, binds = root_layout([f"{t}/lib/x86", f"{t}/venv/bin/python", f"{t}/usr/lib/python", f"{t}/missing"])
    assert links == {f"{t}/lib": "usr/lib", f"{t}/venv/bin/python": "../../usr/bin/python3"}
    assert binds == [f"{t}/usr/bin/python3", f"{t}/usr/lib/python", f"{t}/usr/lib/x86"]
    # A directory's bind covers what is inside it, links inside it included; `/`, `/dev`, `/proc` and `/sys` are
    # never bound (the root has its own devices and `/proc`), nor links there recreated.
    links, binds = root_layout([f"{t}/usr/lib/x86", t, f"{t}/lib", "/", "/dev/shm", "/proc/self/maps", "/sys"])
    assert (links, binds) == ({}, [t])


# ---------------------------------------------------------------------------------------------------- 2. duck types
DUCK = (
    "class R:\n"
    "    startswith = lambda *a: True\n"
    "    endswith = lambda *a: True\n"
    "    count = lambda *a: 2\n"
    "    real = 3.0\n"
    "    shape = (2, 2)\n"
    "    def send(self, value):\n"
    "        return value\n"
)


@pytest.mark.parametrize(
    ("program", "tests"),
    [
        # Observed: `f('hello').startswith('olleh')` and `hasattr(gen(3), 'send')` passed.
        (DUCK + "def f(s):\n    return R()\n", ["assert f('hello').startswith('olleh')"]),
        (DUCK + "def gen(n):\n    return R()\n", ["assert hasattr(gen(3), 'send')"]),
        (DUCK + "def gen(n):\n    return R()\n", ["assert gen(3).send(None) is None"]),
        # New shapes: attributes that look like data, a method's count, a str subclass, an object inside a list.
        (DUCK + "def f(x):\n    return R()\n", ["assert f(2).real == 3.0"]),
        (DUCK + "def f(x):\n    return R()\n", ["assert f(1).shape == (2, 2)"]),
        (DUCK + "def f(s):\n    return R()\n", ["assert f('aab').count('a') == 2"]),
        (
            "class S(str):\n    def endswith(self, *a):\n        return True\ndef f(s):\n    return S('x')\n",
            ["assert f('abc').endswith('cba')"],
        ),
        (DUCK + "def f(s):\n    return [R(), R()]\n", ["assert f('ab')[0].startswith('ba')"]),
        (DUCK + "def f(s):\n    return {'k': R()}\n", ["assert f('ab')['k'].endswith('ab')"]),
    ],
    ids=["startswith", "hasattr_send", "send_call", "real", "shape", "count", "str_subclass", "in_list", "in_dict"],
)
def test_duck_typed_return_values_are_refused(program, tests):
    result = run_program(program, tests, LIMITS)
    assert result.passed == 0, result
    assert "not plain data" in result.reason, result


def test_duck_typed_return_value_in_humaneval_scores_zero_while_program_values_still_pass_back():
    test = "def check(candidate):\n    assert candidate('cat').startswith('tac')\n    assert candidate('ab') == 'ba'\n"
    spec = TestSpec.humaneval(test, "reverse")
    nodes = (
        "class Node:\n    def __init__(self, v, nxt=None):\n        self.v, self.nxt = v, nxt\n"
        "def length(node):\n    return 0 if node is None else 1 + length(node.nxt)\n"
    )
    forged, honest, linked = run_programs(
        [DUCK + "def reverse(s):\n    return R()\n", "def reverse(s):\n    return s[::-1]\n", nodes],
        [spec, spec, ["assert length(Node(1, Node(2, Node(3)))) == 3"]],
        LIMITS,
    )
    assert (forged.passed, honest.passed, honest.reason) == (0, 2, "ok"), (forged, honest)
    assert linked.reason == "ok", linked  # an object a call returned can still be passed back to the program


# ---------------------------------------------------------------------------------------------------- 3. split mode
NESTED_HELPER = (
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    def t(args, want):\n"
    "        assert candidate(*args) == want\n"
    "    t((1,), 2)\n"
    "    t((2,), 4)\n"
)
TRY_ELSE = (
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    try:\n"
    "        candidate(-1)\n"
    "    except ValueError:\n"
    "        pass\n"
    "    else:\n"
    "        assert False\n"
)
LOOP_RAISE = (
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    for x in [1, 2, 3]:\n"
    "        if candidate(x) != 2 * x:\n"
    "            raise AssertionError(x)\n"
)
MODULE_HELPER = (
    "def _check_all(c):\n"
    "    for x, want in [(1, 2), (2, 4)]:\n"
    "        assert c(x) == want\n"
    "\n"
    "\n"
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    _check_all(candidate)\n"
)
# New shapes: a helper passed as a value (no call of it by name), a helper that raises through another helper, an
# error (not an assert) after the last test, a `while` loop.
HELPER_AS_VALUE = (
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    def t(x, want):\n"
    "        assert candidate(x) == want\n"
    "    list(map(t, [1, 2], [2, 4]))\n"
)
HELPER_CHAIN = (
    "def _fail(x):\n"
    "    raise AssertionError(x)\n"
    "\n"
    "\n"
    "def _expect(c, x, want):\n"
    "    if c(x) != want:\n"
    "        _fail(x)\n"
    "\n"
    "\n"
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    _expect(candidate, 3, 6)\n"
)
ERROR_AFTER = (
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    checks = [lambda: candidate(3) == 6]\n"
    "    if not all(f() for f in checks):\n"
    "        1 / 0\n"
)
WHILE_RAISE = (
    "def check(candidate):\n"
    "    assert candidate(0) == 0\n"
    "    x = 1\n"
    "    while x < 8:\n"
    "        if candidate(x) != 2 * x:\n"
    "            raise ValueError('wrong at %d' % x)\n"
    "        x *= 2\n"
)
WRONG = "def double(x):\n    return x\n"  # right only at 0; never raises
HONEST = "def double(x):\n    if x < 0:\n        raise ValueError('negative')\n    return 2 * x\n"


@pytest.mark.parametrize(
    ("test", "sources", "wrong_per_test"),
    [
        (NESTED_HELPER, ("assert candidate(0) == 0", "t((1,), 2)", "t((2,), 4)"), [True, False, False]),
        (
            TRY_ELSE,
            (
                "assert candidate(0) == 0",
                "try:\n        candidate(-1)\n    except ValueError:\n        pass\n    else:\n        assert False",
            ),
            [True, False],
        ),
        (
            LOOP_RAISE,
            (
                "assert candidate(0) == 0",
                "for x in [1, 2, 3]:\n        if candidate(x) != 2 * x:\n            raise AssertionError(x)",
            ),
            [True, False],
        ),
        (MODULE_HELPER, ("assert candidate(0) == 0", "_check_all(candidate)"), [True, False]),
        (HELPER_AS_VALUE, ("assert candidate(0) == 0",), [False]),
        (HELPER_CHAIN, ("assert candidate(0) == 0", "_expect(candidate, 3, 6)"), [True, False]),
        (ERROR_AFTER, ("assert candidate(0) == 0",), [False]),
        (
            WHILE_RAISE,
            (
                "assert candidate(0) == 0",
                "while x < 8:\n        if candidate(x) != 2 * x:\n"
                "            raise ValueError('wrong at %d' % x)\n        x *= 2",
            ),
            [True, False],
        ),
    ],
    ids=[
        "nested_helper",
        "try_else_assert_false",
        "loop_raise",
        "module_helper",
        "helper_as_value",
        "helper_chain",
        "error_after",
        "while_raise",
    ],
)
def test_failures_escaping_a_test_body_fail_a_test(test, sources, wrong_per_test):
    spec = TestSpec.humaneval(test, "double")
    assert make_plan(spec).sources == sources
    wrong, honest = run_programs([WRONG, HONEST], [spec, spec], LIMITS)
    assert wrong.per_test == wrong_per_test and wrong.reason != "ok", wrong
    assert honest.reason == "ok" and honest.passed == len(sources), honest


# ---------------------------------------------------------------------------------------------------- 4. std modules
@pytest.mark.parametrize(
    ("program", "tests", "honest"),
    [
        # Observed: a fake `os` and a fake `calendar` forged the comparisons.
        (
            "from types import SimpleNamespace\nos = SimpleNamespace(path=SimpleNamespace(join=lambda *a: 0))\n"
            "def join(a, b):\n    return 0\n",
            ["assert join('a', 'b') == os.path.join('a', 'b')"],
            "import os\ndef join(a, b):\n    return os.path.join(a, b)\n",
        ),
        (
            "class calendar:\n    isleap = staticmethod(lambda year: True)\ndef is_leap(year):\n    return True\n",
            ["assert is_leap(1900) == calendar.isleap(1900)", "assert is_leap(2023) == calendar.isleap(2023)"],
            "def is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
        ),
        # New shapes: the real module patched in the program's process, under an alias; modules off the old fixed list.
        (
            "import calendar as cal\ncal.isleap = lambda year: True\ndef is_leap(year):\n    return True\n",
            ["assert is_leap(1900) == cal.isleap(1900)"],
            "import calendar as cal\ndef is_leap(year):\n    return cal.isleap(year)\n",
        ),
        (
            "from types import SimpleNamespace\nkeyword = SimpleNamespace(iskeyword=lambda s: 7)\n"
            "def f(s):\n    return 7\n",
            ["assert f('for') == keyword.iskeyword('for')"],
            "import keyword\ndef f(s):\n    return keyword.iskeyword(s)\n",
        ),
        (
            "class base64:\n    @staticmethod\n    def b64encode(data):\n        return b''\n"
            "def enc(data):\n    return b''\n",
            ["assert enc(b'hi') == base64.b64encode(b'hi')"],
            "import base64\ndef enc(data):\n    return base64.b64encode(data)\n",
        ),
        (
            "import zlib\nzlib.crc32 = lambda data: 0\ndef crc(data):\n    return 0\n",
            ["assert crc(b'abc') == zlib.crc32(b'abc')"],
            "import zlib\ndef crc(data):\n    return zlib.crc32(data)\n",
        ),
    ],
    ids=["fake_os", "fake_calendar", "patched_alias", "fake_keyword", "fake_base64", "patched_zlib"],
)
def test_every_standard_module_a_test_reads_is_the_harness_own(program, tests, honest):
    forged, good = run_programs([program, honest], [tests, tests], LIMITS)
    assert forged.passed == 0, forged
    assert good.reason == "ok", good


def test_modules_read_covers_the_whole_standard_library():
    assert {"os", "calendar", "keyword", "base64", "zlib", "sys", "math"} <= STANDARD_MODULES
    assert "antigravity" not in STANDARD_MODULES and "this" not in STANDARD_MODULES
    assert modules_read(["assert f() == os.path.join('a', calendar.month_name[1])"]) == ("calendar", "os")
    # A name the tests call is a function under test, whatever module it shares its name with.
    assert modules_read(["assert calendar(1) == 2"], entry_point=None) == ()
