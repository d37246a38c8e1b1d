"""The sandbox's trusted verdict protocol, its plain-data codec, isolation levels, kernel hardening and fair time.

Hostile programs run only through the sandbox. Tests of the OS layer need root (the `"namespaces"` level).
"""

from __future__ import annotations

import math
import os
import time

import pytest

from trl_marl.sandbox import (
    SandboxLimits,
    SandboxUnavailableError,
    TestSpec,
    harness,
    run_program,
    run_programs,
    runner,
)

FAST = SandboxLimits(wall_time=5, cpu_time=3, memory_mb=512)
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="the namespaces level needs root")


# ---------------------------------------------------------------------------------------------------- codec
@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 3**200, 0.1, -0.0, math.inf, 2 + 3j, "", "héllo\n\x00", b"\x00\xff",
    [1, [2, [3]]], (1, "a", None), {1, 2}, frozenset({"x"}), {"k": [1, (2,)], 3: {4: 5}, (1, 2): True}, [],
])
def test_codec_round_trip(value):
    decoded = harness.decode(harness.encode(value))
    assert decoded == value and type(decoded) is type(value)


def test_codec_keeps_nan_and_exact_types():
    assert math.isnan(harness.decode(harness.encode(math.nan)))
    assert type(harness.decode(harness.encode((1,)))) is tuple
    assert type(harness.decode(harness.encode([1]))) is list
    assert harness.decode(harness.encode(True)) is True


@pytest.mark.parametrize("value", [
    type("Sub", (int,), {})(3), type("L", (list,), {})([1]), object(), len, range(3), [1, object()], {1: iter([])},
])
def test_codec_refuses_what_is_not_plain(value):
    with pytest.raises(harness.CodecError):
        harness.encode(value)


def test_codec_refuses_deep_nesting_both_ways():
    deep: list = []
    for _ in range(harness.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(harness.CodecError):
        harness.encode(deep)
    with pytest.raises(harness.CodecError):
        harness.decode(b"l1:" * (harness.MAX_DEPTH + 5) + b"l0:" )


@pytest.mark.parametrize("data", [
    b"", b"Q", b"NN", b"l2:N", b"s5:abc", b"i;", b"i0x;", b"i1_0;", b"f1.0", b"h1;", b"r1:x", b"S1:l0:",
    b"d1:l0:N", b"s99999999999999999999:", b"l-1:", b"b3:ab",
])
def test_codec_rejects_malformed_bytes(data):
    with pytest.raises(harness.CodecError):
        harness.decode(data)


def test_frame_reader_refuses_oversized_and_malformed_messages():
    for payload in (b"999999999999\nxx", b"abc\n", b"x" * 40):
        read, write = os.pipe()
        os.write(write, payload)
        os.close(write)
        with pytest.raises(harness.FrameError):
            harness.FrameReader(read, limit=1000).read()
        os.close(read)


# What H decodes from the program is bounded before it is built: values, their estimated memory, hash collisions.
COLLIDING = [1 + k * (2**61 - 1) for k in range(200)]  # distinct ints, one hash value


def colliding_pairs(count: int) -> list[tuple[int, int]]:
    """Distinct pairs of ints, all of whose elements have distinct hashes, with one tuple hash (CPython's xxHash-
    based tuple hash inverted for the second element)."""
    m, p1, p2, p5 = 1 << 64, 11400714785074694791, 14029467366897019727, 2870177450012600261

    def step(acc: int, lane: int) -> int:
        acc = (acc + lane * p2) % m
        return ((acc << 31 | acc >> 33) % m) * p1 % m

    before = step(step(p5, 1), 2) * pow(p1, -1, m) % m  # the state of (1, 2) before its last multiplication
    target = (before >> 31 | before << 33) % m
    pairs, first = [], 10
    while len(pairs) < count:
        second = (target - step(p5, first)) * pow(p2, -1, m) % m
        if second < 2**61 - 2:  # an int below the modulus hashes to itself
            pairs.append((first, second))
        first += 1
    return pairs


PAIRS = colliding_pairs(100)


def test_codec_bounds_what_it_decodes(monkeypatch):
    monkeypatch.setattr(harness, "MAX_DECODED_BYTES", 1 << 20)
    empty_sets = b"l20000:" + b"S0:" * 20000  # 60 kB of message, 4.5 MB of sets once built
    with pytest.raises(harness.CodecError, match="more than 1 MiB of values"):
        harness.decode(empty_sets)
    monkeypatch.setattr(harness, "MAX_VALUES", 1000)
    with pytest.raises(harness.CodecError, match="more than 1000 values"):
        harness.decode(harness.encode([0] * 1000))
    assert harness.decode(harness.encode([0] * 998)) == [0] * 998
    assert len(harness.decode(empty_sets, limited=False)) == 20000  # P decoding the tests' own values: unlimited


@pytest.mark.parametrize("value", [set(COLLIDING), frozenset(COLLIDING), dict.fromkeys(COLLIDING), COLLIDING,
                                   [(x,) for x in COLLIDING[:1]] + COLLIDING, {(x, 0) for x in COLLIDING}, PAIRS,
                                   [[pair] for pair in PAIRS], [frozenset([pair]) for pair in PAIRS]])
def test_codec_refuses_hash_collisions(value):
    assert len({hash(pair) for pair in PAIRS}) == 1 and len({hash(x) for pair in PAIRS for x in pair}) == 200
    data = harness.encode(value)
    with pytest.raises(harness.CodecError, match="share one hash value"):
        harness.decode(data)
    with pytest.raises(harness.CodecError, match="share one hash value"):
        harness.encode(value, limited=True)  # P checks its answers the same way


def test_codec_limits_leave_ordinary_values_alone():
    ordinary = [list(range(20_000)), {i: str(i) for i in range(5_000)}, set(range(-5, 5)), [0] * 20_000,
                [float("nan")] * 20, [-1, -2] * 10, ("x" * 1_000_000,)]
    for value in ordinary:
        decoded = harness.decode(harness.encode(value, limited=True))
        assert type(decoded) is type(value) and len(decoded) == len(value)


# A program that writes raw frames to its reply pipe (fd 4) at import time, where H expects its first message.
RAW_FRAME = (
    "import os\n"
    "payload = {payload}\n"
    "frame = b'%d\\n' % len(payload) + payload\n"
    "while frame:\n"
    "    frame = frame[os.write(4, frame):]\n"
    "def f():\n"
    "    return 1\n"
)


@pytest.mark.parametrize("payload, why", [
    ("b't2:s2:okl5592398:' + b'S0:' * 5592398", "more than 64 MiB of values"),  # 16 MiB: 1.2 GB of sets
    ("b't2:s2:okS200000:' + b''.join(b'i%x;' % (1 + k * (2**61 - 1)) for k in range(200000))",
     "share one hash value"),
    ("b't2:s2:okl1500000:' + b'N' * 1500000", "more than 1000000 values"),
    ("b'l1:' * 200 + b'N'", "malformed plain data"),  # nested too deeply
])
def test_raw_frames_on_the_reply_pipe_fail_with_a_clear_reason(payload, why):
    limits = SandboxLimits(wall_time=10, cpu_time=5, memory_mb=512)
    result = run_program(RAW_FRAME.format(payload=payload), ["assert f() == 1"], limits)
    assert result.passed == 0 and result.reason.startswith("error: the program broke the harness protocol: "), result
    assert why in result.reason, result


def test_an_answer_over_the_limits_fails_its_test_only():
    program = ("def colliding():\n    return {1 + k * (2**61 - 1) for k in range(20)}\n"
               "def f():\n    return 1\n")
    result = run_program(program, ["assert len(colliding()) == 20", "assert f() == 1"], FAST)
    assert result.per_test == [False, True], result
    assert "share one hash value" in result.failures[0], result


def test_seccomp_program_is_well_formed():
    for machine in ("x86_64", "aarch64"):
        prog = harness.seccomp_filter(machine)
        assert prog is not None and len(prog) < 64
        for index, (code, jt, jf, _) in enumerate(prog):
            if code & 0x07 == 0x05:  # a jump stays inside the program
                assert index + 1 + max(jt, jf) < len(prog)
        assert prog[-1][0] == 0x06 and prog[-2][0] == 0x06  # ends with returns
    assert harness.seccomp_filter("sparc") is None


# ---------------------------------------------------------------------------------------------------- verdict
def test_a_test_that_never_reports_fails():
    early_return = (
        "def check(candidate):\n"
        "    assert candidate(1) == 1\n"
        "    if candidate(2) == 2:\n"
        "        return\n"
        "    assert candidate(3) == 'never checked'\n"
    )
    result = run_program("def f(x):\n    return x\n", TestSpec.humaneval(early_return, "f"), FAST)
    assert (result.passed, result.total) == (1, 2), result
    assert "did not report" in result.reason


def test_program_objects_round_trip_but_never_compare():
    program = (
        "class Pair:\n"
        "    def __init__(self, a, b):\n"
        "        self.a, self.b = a, b\n"
        "def longest(pairs):\n"
        "    return max(p.b - p.a for p in pairs)\n"
        "def make(a):\n"
        "    return Pair(a, a)\n"
        "def gen(n):\n"
        "    return (i for i in range(n))\n"
        "def raises(x):\n"
        "    if x < 0:\n"
        "        raise ValueError('negative')\n"
        "    return x\n"
    )
    tests = [
        "assert longest([Pair(1, 5), Pair(2, 3)]) == 4",  # program objects as arguments: fine
        "assert make(1).a == 1",  # attributes of objects a call returned: refused (no duck-typed answers)
        "assert make(1) == make(1)",  # comparing program objects: refused
        "assert list(gen(3)) == [0, 1, 2]",  # iterating a program object: refused
        "try:\n    raises(-1)\n    assert False\nexcept ValueError:\n    pass",  # built-in exceptions cross over
    ]
    result = run_program(program, tests, FAST)
    assert result.per_test == [True, False, False, False, True], result
    assert "cannot read its attribute a" in result.failures[0]
    assert "not plain data" in result.failures[1]


def test_tests_cannot_be_reached_from_the_program():
    """The test code (and so the expected values) never enters the program's process."""
    program = (
        "import gc, sys\n"
        "def f(x):\n"
        "    frame, seen = sys._getframe(), []\n"
        "    while frame is not None:\n"
        "        seen.append(str(frame.f_locals))\n"
        "        frame = frame.f_back\n"
        "    return ('SECRET' + '_EXPECTED') in ' '.join(seen)\n"  # not spelled out: the program is in its memory
    )
    result = run_program(program, ["assert f(1) is False  # SECRET_EXPECTED"], FAST)
    assert result.reason == "ok", result


def test_builtins_cannot_be_shadowed_but_the_entry_point_may_carry_a_builtin_name():
    result = run_program("def abs(x):\n    return 0\ndef f(x):\n    return x\n", ["assert abs(f(-2)) == 2"], FAST)
    assert result.reason == "ok", result
    he = run_program("def sum(xs):\n    return 42\n", TestSpec.humaneval("def check(c):\n    assert c([1]) == 42\n",
                                                                     "sum"), FAST)
    assert he.reason == "ok", he


def test_program_modules_and_constants_are_visible_to_mbpp_tests():
    program = "import math\nLIMIT = [1, 2]\ndef f():\n    return 0.1 + 0.2\n"
    result = run_program(program, ["assert math.isclose(f(), 0.3)", "assert LIMIT == [1, 2]"], FAST)
    assert result.reason == "ok", result


# ---------------------------------------------------------------------------------------------------- levels
def test_namespaces_level_fails_clearly_without_root(monkeypatch):
    monkeypatch.setattr(runner.os, "geteuid", lambda: 1000)
    monkeypatch.delenv(runner.ISOLATION_ENV, raising=False)
    with pytest.raises(SandboxUnavailableError, match="isolation='process'"):
        run_programs(["x = 1"], [None], FAST)


def test_isolation_level_choice(monkeypatch):
    monkeypatch.delenv(runner.ISOLATION_ENV, raising=False)
    assert SandboxLimits().level == "namespaces"
    assert SandboxLimits(namespaces=False).level == "process"
    monkeypatch.setenv(runner.ISOLATION_ENV, "process")
    assert SandboxLimits().level == "process"
    assert SandboxLimits(isolation="namespaces").level == "namespaces"
    with pytest.raises(ValueError, match="isolation"):
        SandboxLimits(isolation="none")


def test_process_level_is_an_explicit_opt_in_that_still_decides_the_verdict():
    limits = SandboxLimits(wall_time=5, cpu_time=3, memory_mb=512, namespaces=False)
    good, forged = run_programs(
        ["def f(x):\n    return x\n", "class A:\n    __eq__ = lambda s, o: True\ndef f(x):\n    return A()\n"],
        [["assert f(1) == 1"]] * 2, limits)
    assert good.reason == "ok" and forged.passed == 0, (good, forged)
    assert "pidns" not in good.isolation and "no_new_privs" in good.isolation


# ---------------------------------------------------------------------------------------------------- kernel
@needs_root
def test_no_new_privs_seccomp_and_nosuid_hold_without_the_python_guards():
    program = (
        "import _posixsubprocess, os, subprocess\n"
        "status = open('/proc/self/status').read()\n"
        "print('nnp', 'NoNewPrivs:\\t1' in status, 'seccomp', 'Seccomp:\\t2' in status)\n"
        "visible = {line.split()[4]: line.split()[5] for line in open('/proc/self/mountinfo')}  # top of each stack\n"
        "suid = [target for target, options in visible.items() if 'nosuid' not in options.split(',')]\n"
        "print('suid mounts', suid)\n"
        "out = subprocess.run(['/usr/bin/unshare', '--user', '--map-root-user', 'id', '-u'], capture_output=True)\n"
        "print('userns', out.returncode, out.stdout.strip())\n"
    )
    # The program's root shows no binaries unless asked to: show it /usr/bin, so that it can try them.
    result = run_program(program, None, SandboxLimits(wall_time=10, python_guards=False, visible_paths=("/usr/bin",)))
    assert result.reason == "ok", result
    lines = result.stdout.splitlines()
    assert lines[0] == "nnp True seccomp True", result.stdout
    assert lines[1] == "suid mounts []", result.stdout
    assert lines[2].startswith("userns ") and not lines[2].startswith("userns 0"), result.stdout


@needs_root
def test_setuid_binary_gains_nothing():
    # `su` is set-uid root on most systems: with no_new_privs and nosuid it runs (if at all) as the sandbox user.
    su = "/usr/bin/su" if os.path.exists("/usr/bin/su") else None
    if su is None or not os.stat(su).st_mode & 0o4000:
        pytest.skip("this machine has no set-uid /usr/bin/su to try: nothing to escalate with")
    program = (
        "import subprocess\n"
        "out = subprocess.run(['/usr/bin/su', '-c', 'id -u', 'root'], capture_output=True, text=True,\n"
        "                     stdin=subprocess.DEVNULL, timeout=5)\n"
        "print(repr(out.stdout.strip()), out.returncode)\n"
    )
    result = run_program(program, None, SandboxLimits(wall_time=10, python_guards=False, visible_paths=("/usr/bin",)))
    assert result.reason == "ok", result
    assert not result.stdout.startswith("'0'"), result.stdout


# ---------------------------------------------------------------------------------------------------- fair time
SPIN = "while True:\n    pass\n"
WORK = (
    "import time\n"
    "def work():\n"
    "    start = time.process_time()\n"
    "    while time.process_time() - start < 0.4:\n"
    "        pass\n"
    "    return 1\n"
)


def test_time_limit_is_fair_under_load():
    """A program needing 0.4 s of CPU passes with a 1 s limit beside 7 spinning programs on this machine's cores
    (wall-clock time alone would time it out: it gets a fraction of a core)."""
    limits = SandboxLimits(wall_time=1.0, cpu_time=1, memory_mb=256)
    programs = [WORK] + [SPIN] * 7
    tests = [["assert work() == 1"]] + [["assert True"]] * 7
    started = time.monotonic()
    results = run_programs(programs, tests, limits, max_workers=len(programs))
    assert results[0].reason == "ok", results[0]
    assert all(r.reason.startswith("timeout") for r in results[1:]), [r.reason for r in results[1:]]
    assert time.monotonic() - started < 30


def test_sleeping_program_still_times_out():
    started = time.monotonic()
    result = run_program("import time\ntime.sleep(60)\n", ["assert True"], SandboxLimits(wall_time=1, cpu_time=1))
    assert result.reason == "timeout" and result.passed == 0, result
    assert time.monotonic() - started < 6


def test_backstop_bounds_everything():
    assert runner._backstop(SandboxLimits(wall_time=2, cpu_time=3), 1) == pytest.approx(2 + 6 + 5)
    assert runner._backstop(SandboxLimits(wall_time=2, cpu_time=3, backstop_time=4), 64) == 4
    cpus = os.cpu_count() or 1
    assert runner._backstop(SandboxLimits(wall_time=1, cpu_time=1), 4 * cpus) == pytest.approx(1 + 8 + 5)


# ---------------------------------------------------------------------------------------------------- leftovers
LEAVE_BEHIND = (
    "import os, sys\n"
    "tag, sentinel, shared = sys.argv[1:] if len(sys.argv) > 3 else {args!r}\n"
    "for d in ('/tmp', '/var/tmp', '/dev/shm', shared):\n"
    "    if os.path.isdir(d):\n"
    "        os.mkfifo(f'{{d}}/fifo_{{tag}}')  # not audited: gets past the Python guard\n"
    "os.makedirs(f'/tmp/dir_{{tag}}/sub')\n"
    "os.symlink(sentinel, f'/tmp/dir_{{tag}}/sub/link')\n"
    "os.symlink(sentinel, f'/tmp/link_{{tag}}')\n"
    "script = f'echo x > /var/tmp/file_{{tag}}; if command -v ipcmk; then ipcmk -M 4096 -Q -S 1; fi'\n"
    "pid = os.posix_spawn('/bin/sh', ['sh', '-c', script], {{}})\n"
    "assert os.waitpid(pid, 0)[1] == 0\n"
)


@needs_root
def test_process_level_as_root_leaves_nothing_in_the_hosts_temp_dirs(tmp_path):
    import glob
    import secrets

    tag = secrets.token_hex(6)
    sentinel = tmp_path / "root_file"
    sentinel.write_text("keep me")
    shared = f"/tmp/shared_{tag}"  # a root-owned world-writable directory, like /tmp/.X11-unix
    os.mkdir(shared)
    os.chmod(shared, 0o1777)
    try:
        limits = SandboxLimits(wall_time=10, namespaces=False, python_guards=False)
        result = run_program(LEAVE_BEHIND.format(args=(tag, str(sentinel), shared)), None, limits)
        assert result.reason == "ok" and "mountns" not in result.isolation, result
        import shutil

        assert ("Shared memory id" in result.stdout) is (shutil.which("ipcmk") is not None), result.stdout
        left = [p for d in ("/tmp", "/var/tmp", "/dev/shm", shared) for p in glob.glob(f"{d}/*{tag}*")]
        assert left == [shared], left
        assert sentinel.read_text() == "keep me"
        assert not [uid for uid in ipc_owners() if uid >= limits.uid_base]
    finally:
        for path in glob.glob(f"/tmp/*{tag}*") + glob.glob(f"/var/tmp/*{tag}*") + glob.glob(f"/dev/shm/*{tag}*"):
            remove_path(path)


def ipc_owners() -> list[int]:
    """The owners and creators of the System V IPC objects of this host."""
    owners = []
    for name in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{name}") as f:
            header, *rows = [line.split() for line in f]
        owners += [int(row[header.index(col)]) for row in rows for col in ("uid", "cuid")]
    return owners


def remove_path(path: str) -> None:
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


@needs_root
def test_remove_user_files_follows_no_link_and_spares_others(tmp_path):
    from trl_marl.sandbox.cleanup import remove_user_files

    uid = 1_999_999_999
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "root_file").write_text("x")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)
    mine = [tmp_path / "a", tmp_path / "d", shared / "nested", tmp_path / "link"]
    mine[0].write_text("a")
    (mine[1] / "e").mkdir(parents=True)
    os.symlink(keep, mine[1] / "e" / "to_keep")
    mine[2].write_text("n")
    os.symlink(keep / "root_file", mine[3])
    for path in mine + [mine[1] / "e", mine[1] / "e" / "to_keep"]:
        os.lchown(path, uid, uid)
    (tmp_path / "other").write_text("o")
    removed = remove_user_files(uid, (str(tmp_path),))
    assert sorted(removed) == sorted(str(p) for p in mine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "other", "shared"]
    assert (keep / "root_file").read_text() == "x" and list(shared.iterdir()) == []
    with pytest.raises(ValueError, match="root"):
        remove_user_files(0, (str(tmp_path),))
