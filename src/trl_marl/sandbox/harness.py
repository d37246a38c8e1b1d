"""The sandbox harness: the code that runs in the fresh `python -I` interpreter started for each program.

This module is a real module (lint, tests and the plain-data codec import it), but it is *run* by the caller sending
its source to `python -I -c <boot>` with the request; it only uses the standard library, so it works in any
interpreter the caller picks. Three processes take part in a run:

* **H** (trusted, the interpreter the caller started): reads the request, joins the run's cgroup, enters new
  namespaces (as root), forks C, then runs the *tests* (dataset code, trusted) in a namespace where the program's
  names are stubs that forward calls to P over a pipe and decode the answers as plain data. H alone decides and
  reports the verdict, on a pipe that neither C's program nor P holds.
* **C** (trusted, pid 1 of the new PID namespace): builds the run's root from an allowlist, forks P, kills it when
  its *charged* time (wall-clock time minus the time it waited for a CPU) passes the limit, and reports how P ended.
* **P** (untrusted once the program starts): applies the resource limits, drops to the sandbox user, sets
  `no_new_privs`, installs a seccomp filter, installs the Python guards, closes every file descriptor but stdio and
  its two pipe ends, runs the program, then answers H's calls with plain data.

Nothing P sends can change a verdict by itself: H compares the decoded plain values (exact `int`, `float`, `str`,
`bool`, `None`, `bytes`, `complex`, `list`, `tuple`, `dict`, `set`, `frozenset`) with the test's expectations; any
other result is an opaque reference whose comparison, truth value, hashing and iteration raise, so the test fails,
and whose attributes cannot be read (no duck-typed `startswith` of the program's choosing answers).
A test that never reports, or that finishes after P has died, has failed.
"""
# ruff: noqa: UP031  (%-formatting: the harness avoids importing anything it can do without)

from __future__ import annotations

import _signal  # `signal` would import enum (slow)
import builtins
import os
import resource
import sys

TYPE_CHECKING = False  # typing and collections.abc cost milliseconds of start-up in every sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

NS_FLAGS = 0x40000000 | 0x20000000 | 0x00020000 | 0x08000000 | 0x04000000  # NET | PID | NS | IPC | UTS
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 38, 22

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MAX_DEPTH = 100  # nesting of a plain value
MAX_MESSAGE = 16 * 1024 * 1024  # bytes of one message between H and P
MAX_VALUES = 1_000_000  # values in one message from P (each costs H about a microsecond to decode)
MAX_DECODED_BYTES = 64 * 1024 * 1024  # estimated memory of the values of one message from P, decoded
MAX_COLLISIONS = 8  # distinct numbers / tuples / frozensets, or set members / dict keys, sharing one hash value
MAX_NAMES = 2000  # top-level names of a program that H learns about
MAX_VALUE_BYTES = 64 * 1024  # a program's top-level plain value larger than this is only a reference
MAX_HANDLES = 100_000
CALL_FD, REPLY_FD = 3, 4  # P's ends of the two pipes

# Standard modules: a name the tests read as a module (`os.path.join`, `calendar.isleap`, `math.isclose`: MBPP tests
# use `math` without importing it, relying on the program's import), or that the program bound to one of them, is
# H's own import of that module, whatever the program bound to the name. Any other module stays a reference into P.
# Every top-level standard module (`sys.stdlib_module_names`), except those with modules whose import acts (a web
# browser, a print, an IDE, a demo); the fixed list is the floor for an interpreter without it. H never imports a
# `__main__` submodule.
_NEVER_IMPORTED = frozenset(["antigravity", "this", "idlelib", "turtledemo"])
STANDARD_MODULES = (frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset([
    "math", "cmath", "re", "string", "itertools", "functools", "collections", "heapq", "bisect", "operator",
    "statistics", "fractions", "decimal", "random", "copy", "datetime", "typing", "numbers", "array", "textwrap",
    "unicodedata", "hashlib", "json", "sys", "os", "calendar", "time", "types",
])) - _NEVER_IMPORTED


# ---------------------------------------------------------------------------------------------------- the codec
class CodecError(ValueError):
    """A value that is not plain data, or bytes that are not a well-formed encoding of one."""


_SEQUENCE_TAGS: dict[type, bytes] = {list: b"l", tuple: b"t", set: b"S", frozenset: b"z"}
# What one value costs H once decoded, in estimated bytes of memory (CPython, 64-bit, generously rounded up): the
# fixed part per tag, and the part per item of a container or per byte of a string. Each value also takes a slot
# (8 bytes) in its container.
_FIXED_COST = {b"N": 0, b"T": 0, b"F": 0, b"i": 32, b"f": 24, b"c": 32, b"s": 56, b"b": 40, b"r": 56, b"h": 56,
               b"l": 56, b"t": 40, b"S": 216, b"z": 216, b"d": 232}
_ITEM_COST = {b"s": 1, b"b": 1, b"r": 1, b"l": 8, b"t": 8, b"S": 64, b"z": 64, b"d": 64}
_NUMBER_TAGS = (b"i", b"f", b"c")


class Budget:
    """The limits of one decoded (or encoded) message beyond its size and nesting: values, estimated memory, and
    hash collisions (many distinct numbers, tuples, frozensets, set members or dict keys sharing one hash value,
    which would make building a set, or a test's `set(...)` of a list, quadratic in H).

    Every check runs before the value it is about is built, so a message that breaks a limit costs at most the
    limit.
    """

    __slots__ = ("values", "memory", "hashes")

    def __init__(self, values: int, memory: int) -> None:
        self.values, self.memory = values, memory
        self.hashes: dict[int, list[Any]] = {}  # hash -> the distinct hashable values with that hash seen so far

    def charge(self, tag: bytes, n: int) -> None:
        """Count one value of `tag` with `n` items (or bytes); `CodecError` past a limit."""
        self.values -= 1
        self.memory -= 8 + _FIXED_COST[tag] + _ITEM_COST.get(tag, 0) * n
        if self.values < 0:
            raise CodecError("more than %d values in one message" % MAX_VALUES)
        if self.memory < 0:
            raise CodecError("more than %d MiB of values in one message" % (MAX_DECODED_BYTES >> 20))

    def hashable(self, value: Any) -> None:
        """Record a number, tuple or frozenset (anywhere in the message: a test may hash it later, e.g. in
        `set(result)`); more than `MAX_COLLISIONS` distinct ones with one hash value are refused. Strings need no
        check: their hashes are salted per process."""
        try:
            key = hash(value)
        except TypeError:  # a tuple holding a list: no one can hash it
            return
        if value != value:  # NaN (or a tuple holding one): equal to nothing, hashed by identity
            return
        same = self.hashes.setdefault(key, [])
        if value in same:
            return
        if len(same) >= MAX_COLLISIONS:
            raise CodecError("more than %d distinct values share one hash value" % MAX_COLLISIONS)
        same.append(value)


def check_collisions(items: Any) -> None:
    """Refuse set members or dict keys of which more than `MAX_COLLISIONS` share one hash value (linear time)."""
    if len(items) <= MAX_COLLISIONS:
        return
    counts: dict[int, int] = {}
    for item in items:
        key = hash(item)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] > MAX_COLLISIONS:
            raise CodecError("more than %d set members or dict keys share one hash value" % MAX_COLLISIONS)


def encode(value: Any, handle: Callable[[Any], int | str | None] | None = None, limited: bool = False) -> bytes:
    """Encode a plain value (exact built-in types only; subclasses are not plain).

    Args:
        value: The value.
        handle: Called for any other object; returns an `int` (an opaque reference id), a `str` (a reference to a
            top-level name of the program) or `None` (not encodable: `CodecError`).
        limited: Refuse (`CodecError`) a value that [`decode`] would refuse for its number of values, memory or hash
            collisions (P checks its answers so, to fail one test with a clear error rather than the protocol).

    Returns:
        `bytes`: The encoding.
    """
    out: list[bytes] = []
    _encode(value, out, handle, 0, Budget(MAX_VALUES, MAX_DECODED_BYTES) if limited else None)
    return b"".join(out)


def _encode(value: Any, out: list[bytes], handle: Callable[[Any], int | str | None] | None, depth: int,
            budget: Budget | None) -> None:
    if depth > MAX_DEPTH:
        raise CodecError("the value is nested too deeply")
    kind = type(value)
    if value is None or value is True or value is False:
        out.append(b"N" if value is None else b"T" if value else b"F")
        if budget is not None:
            budget.charge(b"N", 0)
    elif kind is int or kind is float or kind is complex:
        if kind is int:
            out.append(b"i%x;" % value)
        elif kind is float:
            out.append(b"f" + value.hex().encode() + b";")
        else:
            out.append(b"c" + value.real.hex().encode() + b"," + value.imag.hex().encode() + b";")
        if budget is not None:
            budget.charge(b"i" if kind is int else b"f" if kind is float else b"c", (len(out[-1]) - 2) // 2)
            budget.hashable(value)
    elif kind is str or kind is bytes:
        data = value.encode("utf-8", "surrogatepass") if kind is str else value
        if budget is not None:
            budget.charge(b"s", len(data))
        out.append((b"s%d:" if kind is str else b"b%d:") % len(data))
        out.append(data)
    elif kind in _SEQUENCE_TAGS or kind is dict:
        tag = b"d" if kind is dict else _SEQUENCE_TAGS[kind]
        if budget is not None:
            budget.charge(tag, len(value))
            if kind is not list and kind is not tuple:
                check_collisions(value)
        out.append(tag + b"%d:" % len(value))
        if kind is dict:
            for key, item in value.items():
                _encode(key, out, handle, depth + 1, budget)
                _encode(item, out, handle, depth + 1, budget)
        else:
            for item in value:
                _encode(item, out, handle, depth + 1, budget)
        if budget is not None and (kind is tuple or kind is frozenset):
            budget.hashable(value)
    else:
        ref = handle(value) if handle is not None else None
        if type(ref) is int:
            out.append(b"h%d;" % ref)
        elif type(ref) is str:
            data = ref.encode("utf-8", "surrogatepass")
            out.append(b"r%d:" % len(data))
            out.append(data)
        else:
            raise CodecError("a %s is not plain data" % kind.__name__)
        if budget is not None:
            budget.charge(b"h", len(out[-1]))


def decode(data: bytes, ref: Callable[[int | str], Any] | None = None, limited: bool = True) -> Any:
    """Decode bytes made by [`encode`], strictly: anything malformed or trailing raises `CodecError`.

    Args:
        data: The encoding.
        ref: Turns an opaque reference (an `int` id or a `str` name) into an object; without it references are
            malformed.
        limited: Enforce, before building each value, the limits on the number of values (`MAX_VALUES`), their
            estimated memory (`MAX_DECODED_BYTES`) and hash collisions (`MAX_COLLISIONS`): what H decodes comes
            from the program. (Nesting is always limited to `MAX_DEPTH`.)

    Returns:
        The value.
    """
    budget = Budget(MAX_VALUES, MAX_DECODED_BYTES) if limited else None
    try:
        value, end = _decode(data, 0, ref, 0, budget)
    except CodecError:
        raise
    except (IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise CodecError("malformed plain data: %s" % type(exc).__name__) from None
    if end != len(data):
        raise CodecError("malformed plain data: trailing bytes")
    return value


def _until(data: bytes, at: int, stop: bytes) -> tuple[bytes, int]:
    end = data.index(stop, at, at + 64 if stop == b":" else len(data))
    return data[at:end], end + 1


def _count(data: bytes, at: int) -> tuple[int, int]:
    text, at = _until(data, at, b":")
    if not text.isdigit():
        raise ValueError("bad length")
    n = int(text)
    if n > len(data) - at:  # every element takes at least one byte
        raise ValueError("bad length")
    return n, at


def _decode(data: bytes, at: int, ref: Callable[[int | str], Any] | None, depth: int,
            budget: Budget | None) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    tag = data[at:at + 1]
    at += 1
    if tag in (b"N", b"T", b"F"):
        if budget is not None:
            budget.charge(tag, 0)
        return (None if tag == b"N" else tag == b"T"), at
    if tag in _NUMBER_TAGS:
        text, at = _until(data, at, b";")
        if budget is not None:
            budget.charge(tag, len(text) // 2)
        if tag == b"i":
            if not text.lstrip(b"-").isalnum():
                raise ValueError("bad int")
            number: Any = int(text, 16)
        elif tag == b"f":
            number = float.fromhex(text.decode("ascii"))
        else:
            real, imag = text.decode("ascii").split(",")
            number = complex(float.fromhex(real), float.fromhex(imag))
        if budget is not None:
            budget.hashable(number)
        return number, at
    if tag in (b"s", b"b", b"r"):
        n, at = _count(data, at)
        if budget is not None:
            budget.charge(tag, n)
        raw = data[at:at + n]
        if tag == b"b":
            return raw, at + n
        # (`text` is the str of this branch and the bytes of the others: the sandbox's code stays as it is)
        text = raw.decode("utf-8", "surrogatepass")  # type: ignore[assignment]
        if tag == b"s":
            return text, at + n
        if ref is None:
            raise ValueError("unexpected reference")
        return ref(text), at + n  # type: ignore[arg-type]
    if tag == b"h":
        text, at = _until(data, at, b";")
        if ref is None or not text.isdigit():
            raise ValueError("unexpected reference")
        if budget is not None:
            budget.charge(tag, 0)
        return ref(int(text)), at
    if tag in (b"l", b"t", b"S", b"z"):
        n, at = _count(data, at)
        if budget is not None:
            budget.charge(tag, n)
        items = []
        for _ in range(n):
            item, at = _decode(data, at, ref, depth + 1, budget)
            items.append(item)
        if tag == b"l":
            return items, at
        if budget is not None and tag != b"t":
            check_collisions(items)
        value = tuple(items) if tag == b"t" else set(items) if tag == b"S" else frozenset(items)
        if budget is not None and tag != b"S":
            budget.hashable(value)
        return value, at
    if tag == b"d":
        n, at = _count(data, at)
        if budget is not None:
            budget.charge(tag, n)
        pairs = []
        for _ in range(n):
            key, at = _decode(data, at, ref, depth + 1, budget)
            item, at = _decode(data, at, ref, depth + 1, budget)
            pairs.append((key, item))
        if budget is not None:
            check_collisions([key for key, _ in pairs])
        return dict(pairs), at
    raise ValueError("unknown tag")


# ---------------------------------------------------------------------------------------------------- framing
class ChannelClosed(Exception):
    """The other end of a pipe closed it, or broke the framing."""


class FrameError(ChannelClosed):
    """The other end broke the framing (a malformed or oversized message)."""


def send_frame(fd: int, payload: bytes, write: Callable[[int, memoryview], int] = os.write) -> None:
    """Write one message: its length in decimal, a newline, the payload."""
    data = memoryview(b"%d\n" % len(payload) + payload)
    while data:
        try:
            data = data[write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            raise ChannelClosed("the pipe is closed") from None


class FrameReader:
    """Reads length-prefixed messages from a pipe, refusing any longer than `limit` bytes."""

    def __init__(self, fd: int, limit: int = MAX_MESSAGE) -> None:
        self.fd, self.limit, self.buffer = fd, limit, bytearray()

    def _fill(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except InterruptedError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            raise ChannelClosed("end of the pipe")
        self.buffer += chunk

    def read(self) -> bytes:
        """The next message's payload (`ChannelClosed` at the end of the pipe or on a framing error)."""
        while b"\n" not in self.buffer[:24]:
            if len(self.buffer) >= 24:
                raise FrameError("malformed message header")
            self._fill()
        head, _, _ = bytes(self.buffer[:24]).partition(b"\n")
        if not head.isdigit() or int(head) > self.limit:
            raise FrameError("malformed or oversized message")
        size, start = int(head), len(head) + 1
        while len(self.buffer) < start + size:
            self._fill()
        payload = bytes(self.buffer[start:start + size])
        del self.buffer[:start + size]
        return payload


# ---------------------------------------------------------------------------------------------------- H: the tests
class ProgramGone(BaseException):  # noqa: N818 (not an error of the test code: the program ended)
    """The program's process ended (or broke the protocol): no further call can be answered.

    A `BaseException`, so that a test's `except Exception:` does not swallow it.
    """


class NotPlainData(TypeError):  # noqa: N818
    """A value the program returned is not plain data, so the trusted side cannot compare it."""


class ProgramError(Exception):
    """The program raised an exception that is not a built-in one (its type name is in the message)."""


class Remote:
    """A stand-in for an object that lives in the program's process. Comparing, hashing, iterating, converting or
    testing its truth raises [`NotPlainData`], so a test never trusts an object of the program. Two kinds:
    [`Definition`] (a top-level name of the program: a function under test, a class, a module) and
    [`ProgramValue`] (an object a call returned)."""

    __slots__ = ("_channel", "_target")
    _channel: Channel
    _target: tuple[str, Any]  # ("n", a name) or ("h", an object's number)

    def __init__(self, channel: Channel, target: tuple[str, int | str]) -> None:
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_target", target)

    def __setattr__(self, name: str, value: Any) -> None:
        raise NotPlainData("objects of the program cannot be changed by the tests")

    def __repr__(self) -> str:
        kind, key = self._target
        return "<program object %s>" % (key if kind == "n" else "#%d" % key)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise NotPlainData("%r is not plain data (int, float, str, bool, None, bytes, list, tuple, dict, set)"
                           % (self,))

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = __iter__ = _refuse
    __contains__ = __getitem__ = __index__ = __int__ = __float__ = __str__ = __add__ = __radd__ = _refuse
    __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __abs__ = __neg__ = __format__ = _refuse
    __hash__ = None  # type: ignore[assignment]


class Definition(Remote):
    """A top-level name of the program (or an attribute of one): the function under test, a class, a module. It can
    be called (the call runs in P, with plain-data arguments) and its attributes read (`Pair.count`, `np.allclose`),
    as the tests' author meant the program's definitions to be used."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.request(("call", self._target, args, kwargs))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._channel.request(("getattr", self._target, name))


class ProgramValue(Remote):
    """An object that a call of the program returned and that is not plain data (a `str` look-alike, a generator, an
    instance of the program's class). It can only be passed back to the program as an argument: reading any of its
    attributes (`result.startswith`, `hasattr(result, 'send')`, `result.real`) raises [`NotPlainData`] and it cannot
    be called, so no method of the program's choosing ever answers in place of a built-in type's."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise NotPlainData("%r is not plain data: the tests cannot read its attribute %s" % (self, clean(name, 60)))


class Channel:
    """H's side of the conversation with P: sends requests, decodes answers as plain data."""

    def __init__(self, call_fd: int, reply_fd: int) -> None:
        self.call_fd, self.reader = call_fd, FrameReader(reply_fd)
        self.gone: str | None = None  # why the program can no longer answer
        self.why = ""  # how it broke the protocol
        self.exit_code: str | None = None

    def _handle(self, value: Any) -> int | str | None:
        if type(value) is Definition or type(value) is ProgramValue:
            kind, key = value._target
            return key
        return None

    def _definition(self, key: int | str) -> Remote:
        return Definition(self, ("h", key) if type(key) is int else ("n", key))

    def _value(self, key: int | str) -> Remote:
        return ProgramValue(self, ("h", key) if type(key) is int else ("n", key))

    def receive(self, values: bool = True) -> tuple[Any, ...]:
        """The next message of P as a tuple starting with a string tag (`ProgramGone` at the end). Objects in it
        that are not plain data become [`ProgramValue`]s, or with `values=False` (attributes of a definition)
        [`Definition`]s."""
        if self.gone is not None:
            raise ProgramGone(self.gone)
        try:
            message = decode(self.reader.read(), self._value if values else self._definition)
        except FrameError as exc:
            self.gone, self.why = "protocol", str(exc)
            raise ProgramGone("the program broke the protocol: %s" % exc) from None
        except ChannelClosed:
            self.gone = "ended"
            raise ProgramGone("the program ended") from None
        except CodecError as exc:
            self.gone, self.why = "protocol", str(exc)
            raise ProgramGone("the program broke the protocol: %s" % exc) from None
        if type(message) is not tuple or not message or type(message[0]) is not str:
            self.gone = "protocol"
            raise ProgramGone("the program broke the protocol")
        return message

    def request(self, message: tuple[Any, ...]) -> Any:
        """Send a call or attribute read to P and return the plain answer (or raise what P raised)."""
        if self.gone is not None:
            raise ProgramGone(self.gone)
        try:
            payload = encode(message, self._handle)
        except CodecError as exc:
            raise NotPlainData("the tests can only pass plain data to the program: %s" % exc) from None
        try:
            send_frame(self.call_fd, payload)
        except ChannelClosed:
            self.gone = "ended"
            raise ProgramGone("the program ended") from None
        reply = self.receive(values=message[0] != "getattr")  # only a `Definition` reads attributes
        kind = reply[0]
        if kind == "ok" and len(reply) == 2:
            return reply[1]
        if kind == "raise" and len(reply) == 3 and type(reply[1]) is str and type(reply[2]) is str:
            raise _exception(reply[1], reply[2])
        if kind == "unencodable" and len(reply) == 2:
            raise NotPlainData("the program returned %s, which is not plain data" % clean(str(reply[1]), 100))
        if kind == "exit" and len(reply) == 2:
            self.gone, self.exit_code = "exit", clean(str(reply[1]), 100)
            raise ProgramGone("the program exited")
        self.gone = "protocol"
        raise ProgramGone("the program broke the protocol")


# Exceptions that Python itself treats as control flow: a `StopIteration` from the program, re-raised inside `map`,
# `filter` or `iter(callable, sentinel)` in a test, would silently end the iteration (`all(map(...))` true).
CONTROL_FLOW = (StopIteration, StopAsyncIteration)


def _exception(name: str, message: str) -> Exception:
    """A fresh exception of H for one the program raised: the built-in type of that name, else `ProgramError`.

    Never a type Python treats as control flow ([`CONTROL_FLOW`], and `BaseException`s such as `GeneratorExit`):
    those become `ProgramError`, so an exception from the program can only fail a test, never steer the test code.
    """
    message = clean(message, 300)
    cls = getattr(builtins, name, None) if name.isidentifier() else None
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, CONTROL_FLOW):
        try:
            return cls(message)
        except Exception:
            pass
    return ProgramError(clean(name, 60) + ": " + message)


def clean(text: str, limit: int) -> str:
    """`text` with control characters (terminal escapes included) escaped, cut to `limit` characters."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class ModuleRefused(Exception):
    """A name the tests read as a module whose module the harness cannot import: every test that reads it fails with
    this reason, never answered by the program's object."""


def names_read_as_modules(codes: list[str]) -> frozenset[str]:
    """The names that code reads only as `name.attribute` (never calls, assigns or passes as a value): what its
    author means by them is a module (`np` in `np.allclose(...)`). Code that does not parse reads none."""
    import ast

    bases: set[str] = set()
    other: set[str] = set()
    for code in codes:
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        values = [node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)]
        as_base = {id(node) for node in values}
        bases.update(node.id for node in values)
        other.update(node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) not in as_base)
    return frozenset(bases - other)


def modules_imported(program: str) -> dict[str, tuple[str, bool]]:
    """The modules that a program's import statements bind to names, wherever they stand, each with whether it is
    surely a module: `import numpy as np` -> `{"np": ("numpy", True)}`, `import os.path` -> `{"os": ("os", True)}`,
    `from a import b as c` -> `{"c": ("a.b", False)}` (a module only if `a.b` is one). The program may rebind the
    name afterwards; what it imported is what it meant."""
    import ast

    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    found: dict[str, tuple[str, bool]] = {}
    for node in ast.walk(tree):  # iterative: no recursion on deep code
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                found[alias.asname or top] = (alias.name if alias.asname else top, True)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name != "*":
                    found[alias.asname or alias.name] = (node.module + "." + alias.name, False)
    return found


# The conventional aliases of the Python community: a test that reads `np.allclose` without importing `np` means
# numpy, even when the program binds `np` to a class of its own without importing anything.
CONVENTIONAL_ALIASES = {
    "np": "numpy", "pd": "pandas", "sp": "scipy", "plt": "matplotlib.pyplot", "mpl": "matplotlib", "nx": "networkx",
    "sns": "seaborn", "tf": "tensorflow",
}


def _importable_name(name: str) -> bool:
    """Whether H may import a module of this name: dotted identifiers, no `__main__`, none whose import acts
    ([`_NEVER_IMPORTED`]), nothing of trl-marl (H imports none of it)."""
    parts = name.split(".")
    return (all(part.isidentifier() for part in parts) and "__main__" not in parts
            and parts[0] not in _NEVER_IMPORTED and parts[0] != "trl_marl")


def _is_module(name: str) -> bool:
    """Whether `name` names a module that H can find (its parents are imported to look)."""
    if not _importable_name(name):
        return False
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (Exception, SystemExit):
        return False


_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                     "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")


def import_module(name: str, key: str) -> Any:
    """H's own import of module `name`, which the tests read as `key`; [`ModuleRefused`] when H cannot import it."""
    if not _importable_name(name):
        raise ModuleRefused("the tests read %r as the module %r, which the harness does not import; the tests that "
                            "read it are refused" % (key, clean(name, 100)))
    if name.split(".")[0] not in STANDARD_MODULES:
        # H cannot start threads (it entered a new PID namespace: clone(CLONE_THREAD) fails), and numerical libraries
        # start a pool of them on import (OpenBLAS aborts the import): one thread each.
        for variable in _THREAD_VARIABLES:
            os.environ[variable] = "1"
    try:
        value: Any = __import__(name)
        for part in name.split(".")[1:]:
            value = getattr(value, part)
    except BaseException as exc:  # an import that fails in any way (an abort, a signal) refuses the tests
        raise ModuleRefused("the tests read %r as the module %r, which the harness cannot import (%s); the tests "
                            "that read it are refused, never answered by the program's object"
                            % (key, clean(name, 100), clean(type(exc).__name__, 60))) from None
    return value


class TestGlobals(dict):
    """The tests' global namespace: names the tests do not define resolve to the program's top-level names (as
    when program and tests share one module), except the names whose meaning the tests fix: built-in names, which
    the program cannot shadow (only the entry point may carry a built-in's name), and the modules the tests read as
    modules, which are H's own imports, whatever the program binds to those names:

    - a standard module read as a module (`modules`: `math` in `math.isclose(...)`);
    - any name the program bound to a module, whatever its origin (`import numpy as np`: H imports `numpy` itself,
      so a program that patched `np.allclose` changes only its own copy);
    - a name the tests (`tests`: their code) read only as `name.attribute` that the program's import statements bound
      to a module (`import numpy as np`, then `np = SimpleNamespace(...)`), or that is itself the name of a module H
      can import (`numpy = SimpleNamespace(...)`).

    A module that H cannot import (a module the program made or wrote itself) is never the program's object: the
    tests that read it fail with [`ModuleRefused`]. So only the functions under test (and plain constants, and the
    program's own classes read by attribute) come from the program."""

    __test__ = False  # not a pytest class

    def __init__(self, channel: Channel, names: dict[str, Any], entry_point: str | None,
                 modules: frozenset[str] = frozenset(), tests: tuple[str, ...] = (), program: str = "") -> None:
        super().__init__(__name__="__tests__", __builtins__=builtins)
        self._channel, self._names, self._entry = channel, names, entry_point
        self._modules = modules & STANDARD_MODULES
        self._tests, self._program = tests, program
        self._read: frozenset[str] | None = None  # read from `tests` when first needed (most runs never need it)
        self._imports: dict[str, tuple[str, bool]] | None = None

    def _module_meant(self, key: str, info: Any) -> str | None:
        """The module the tests mean by `key`, or `None` when it is the program's definition or plain value."""
        if type(info) is tuple and len(info) == 2 and info[0] == "m" and type(info[1]) is str:
            return info[1]  # bound to a module: that module, whatever its origin
        if type(info) is tuple and info[:1] == ("v",):
            return None  # a plain value has only its built-in type's attributes: nothing of the program's to forge
        if self._read is None:
            self._read = names_read_as_modules(list(self._tests))
        if key not in self._read:
            return None
        if self._imports is None:
            self._imports = modules_imported(self._program)
        imported = self._imports.get(key)
        if imported is not None and (imported[1] or _is_module(imported[0])):
            return imported[0]  # `import numpy as np` (or `from os import path`), whatever `np` is bound to now
        if key in CONVENTIONAL_ALIASES and _is_module(CONVENTIONAL_ALIASES[key]):
            return CONVENTIONAL_ALIASES[key]
        return key if _is_module(key) else None

    def __missing__(self, key: str) -> Any:
        if key in self._modules:
            value: Any = __import__(key)
            self[key] = value
            return value
        info = self._names.get(key)
        if info is None or (key != self._entry and hasattr(builtins, key)):
            raise KeyError(key)
        module = self._module_meant(key, info) if key != self._entry else None
        if module is not None:
            value = import_module(module, key)
        elif type(info) is tuple and len(info) == 2 and info[0] == "v":
            value = info[1]
        else:
            value = Definition(self._channel, ("n", key))
        self[key] = value
        return value


def protocol_error(channel: Channel) -> str:
    """The reason of a run whose program broke the protocol (a malformed or over-limit message), for the verdict."""
    return "the program broke the harness protocol" + (": " + clean(channel.why, 200) if channel.why else "")


def run_tests(req: dict[str, Any], emit: Callable[..., None], channel: Channel) -> None:
    """H: wait for the program to load in P, then run the tests here and report each outcome."""
    _type, _str, _len, _repr, _getattr = type, str, len, repr, getattr
    total = req["total"]
    done: dict[int, bool] = {}

    def describe(exc: BaseException) -> str:
        try:
            name, text = _type(exc).__name__, _str(exc)
        except Exception:
            name, text = "Exception", "<unprintable>"
        line = None
        tb = _getattr(exc, "__traceback__", None)
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<program>":
                line = tb.tb_lineno
            tb = tb.tb_next
        message = clean(name + (": " + text if text else ""), 300)
        return message + (" (program line %d)" % line if line is not None else "")

    def short(value: Any) -> str:
        try:
            text = _repr(value)
        except Exception:
            text = "<unrepresentable>"
        return clean(text, 120)

    def eq(left: Any, right: Any) -> None:
        if not (left == right):
            raise AssertionError("got " + short(left) + ", expected " + short(right))

    def record(index: int, exc: BaseException | None) -> None:
        if index in done or not 0 <= index < total:
            return
        passed = exc is None and channel.gone is None  # nothing passes once the program is gone
        done[index] = passed
        emit("t", index, passed, "" if passed else (describe(exc) if exc is not None else "the program ended"))

    try:
        first = channel.receive()
    except ProgramGone:
        if channel.gone == "protocol":
            emit("abort", "error", protocol_error(channel))
            emit("done")
        return  # else no verdict: the caller reports how P ended
    kind = first[0]
    if kind == "syntax" and _len(first) == 4:
        emit("syntax", first[1] if _type(first[1]) is int else None, clean(_str(first[2]), 200),
             clean(_str(first[3]), 200))
    elif kind in ("error", "memory", "exit") and _len(first) == 2:
        emit("abort", kind, clean(_str(first[1]), 400))
    elif kind == "ready" and _len(first) == 2 and _type(first[1]) is dict:
        names = {k: v for k, v in first[1].items() if _type(k) is str and k.isidentifier()}
        modules = req.get("modules")
        # (mypy does not narrow through the captured `type` here and below; the sandbox's code stays as it is)
        modules = (frozenset(m for m in modules if _type(m) is str)  # type: ignore[union-attr]
                   if _type(modules) is list else frozenset())
        program = req.get("program")
        namespace = TestGlobals(channel, names, req.get("entry_point"), modules,
                                (_str(req.get("setup") or ""), _str(req.get("tests_fn") or "")),
                                program if _type(program) is str else "")  # type: ignore[arg-type]
        phase = "test_error"
        try:
            if req["setup"]:
                exec(compile(req["setup"], "<tests>", "exec"), namespace)
            exec(compile(req["tests_fn"], "<tests>", "exec"), namespace)
            tests = namespace.pop("_trl_marl_tests_")
            phase = "tests"
            try:
                tests(record, eq)
            except Exception as exc:
                for index in range(total):
                    record(index, exc)
            for index in range(total):  # a test that never reported has failed
                record(index, AssertionError("the test did not report"))
        except ProgramGone:
            if channel.gone == "exit":
                emit("abort", "exit", channel.exit_code)
            elif channel.gone == "protocol":
                emit("abort", "error", protocol_error(channel))
            else:
                return  # P ended: no `done`; the caller reports how (timeout, memory, signal, exit code)
        except MemoryError as exc:
            emit("abort", "memory", describe(exc))
        except Exception as exc:
            emit("abort", phase if phase != "tests" else "error", describe(exc))
    else:
        emit("abort", "error", protocol_error(channel))
    emit("done")


# ---------------------------------------------------------------------------------------------------- process H
def main(req: dict[str, Any]) -> None:
    """H: set up, fork C, run the tests against P, report."""
    nonce, rfd, _write, _repr, _exit = req.pop("nonce"), req["result_fd"], os.write, repr, os._exit

    def emit(*record: Any) -> None:
        data = (nonce + " " + _repr(record) + "\n").encode("utf-8", "backslashreplace")
        while data:
            try:
                data = data[_write(rfd, data):]
            except OSError:
                return

    # The tests (and so the expected values) are still in the pipe: H reads them only after forking C, so they are
    # never in the memory of the program's process.
    tests_fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    req["in_cgroup"] = False
    if req["cgroup_join"]:
        try:
            for path in req["cgroup_join"]:  # before any fork: every process of the run is charged there
                with open(path, "w") as f:
                    f.write("0")
            req["in_cgroup"] = True
        except OSError as exc:
            emit("note", "could not join the sandbox cgroup: " + str(exc))
    libc = None
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    except Exception as exc:
        emit("note", "ctypes unavailable: " + _repr(exc))
    pdeathsig(libc)
    if libc is not None:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace and no /proc/<pid>/fd of H for same-uid processes
    if os.getppid() != req["parent_pid"]:
        _exit(3)
    root = os.geteuid() == 0
    isolated = False
    if req["namespaces"] and libc is not None and root:
        if libc.unshare(NS_FLAGS) == 0:
            isolated = True
        else:
            emit("note", "unshare failed: " + os.strerror(ctypes.get_errno()))
    if req["level"] == "namespaces" and not (isolated and root):
        why = ("the trainer does not run as root" if not root else "ctypes is unavailable" if libc is None
               else "unshare(2) of the network, PID and mount namespaces failed")
        emit("unavailable", why)
        _exit(1)
    call_r, call_w = os.pipe()
    reply_r, reply_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(tests_fd)
            os.close(call_w)
            os.close(reply_r)
            init(req, emit, libc, isolated, root, call_r, reply_w)
        except BaseException as exc:
            emit("error", "sandbox setup failed: " + _repr(exc))
        _exit(1)
    os.close(call_r)
    os.close(reply_w)
    emit("init", child)  # the caller waits for C's end (and so for its whole PID namespace) after a kill
    import marshal

    parts = []
    while True:
        chunk = os.read(tests_fd, 1 << 16)
        if not chunk:
            break
        parts.append(chunk)
    os.close(tests_fd)
    req.update(marshal.loads(b"".join(parts)))
    channel = Channel(call_w, reply_r)
    try:
        run_tests(req, emit, channel)
    finally:
        try:
            if channel.gone is None:
                send_frame(call_w, encode(("quit",)))
        except ChannelClosed:
            pass
        os.close(call_w)
        os.close(reply_r)
    # Wait (briefly) for P to flush its output and C to report; then C's end ends the namespace.
    if not wait_child(child, 2.0):
        try:
            os.kill(child, _signal.SIGKILL)
        except OSError:
            pass
        wait_child(child, None)
    _exit(0)


def wait_child(pid: int, timeout: float | None) -> bool:
    """Reap `pid` within `timeout` seconds (`None`: wait as long as it takes); whether it ended."""
    import time

    end = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            wpid, _ = os.waitpid(pid, 0 if end is None else os.WNOHANG)
        except ChildProcessError:
            return True
        if wpid == pid:
            return True
        if end is not None and time.monotonic() >= end:
            return False
        time.sleep(0.002)


def pdeathsig(libc: Any) -> None:
    """Be killed when the parent dies."""
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)


# ---------------------------------------------------------------------------------------------------- process C
def init(req: dict[str, Any], emit: Callable[..., None], libc: Any, isolated: bool, root: bool, call_r: int,
         reply_w: int) -> None:
    """C: mounts, fork P, enforce the charged wall time, report P's end."""
    pdeathsig(libc)
    uid = req["uid"]
    layers = ["rlimits", "cgroup"] if req["in_cgroup"] else ["rlimits"]
    if isolated:
        build_root(libc, uid, req["disk_mb"], list(req.get("visible") or []), list(req.get("hide") or []), emit)
        # a fresh, empty working directory inside the private /tmp
        workdir, allowed = "/tmp/work", ["/tmp", "/var/tmp", "/dev/shm"]
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        os.chown(workdir, uid, uid)
        layers += ["netns", "pidns", "mountns", "ipcns", "nosuid"]
    else:
        workdir, allowed = req["workdir"], [req["workdir"]]
        if root:
            hidden = [p for p in sys.path if p and os.path.isdir(p) and not user_can_enter(p)]
            if hidden:
                emit("note", "the sandbox user cannot read %s; without namespaces, imports of modules the "
                             "harness has not loaded will fail" % hidden[0])
    if root:
        layers.append("uid")
    import time

    _signal.pthread_sigmask(_signal.SIG_BLOCK, [_signal.SIGCHLD])
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [_signal.SIGCHLD])
            child(req, emit, libc, root, workdir, allowed, layers, call_r, reply_w)
        except BaseException as exc:
            emit("error", "sandbox setup failed: " + repr(exc))
        os._exit(1)
    os.close(call_r)
    os.close(reply_w)
    status, cpu, timed_out = None, 0.0, False
    budget = float(req["wall_time"])
    try:  # a private /proc (pid 1 is this process): every process listed there belongs to the run
        whole_run = os.readlink("/proc/self") == "1"
    except OSError:
        whole_run = False
    while True:
        try:
            wpid, st, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if wpid == pid:
            status, cpu = st, usage.ru_utime + usage.ru_stime
            break
        if wpid != 0:
            continue  # an orphan of the program, reaped
        # The program's time minus its waits for a CPU, but never less than the CPU time of all the run's processes
        # (its own children compete with it for CPUs: a fork bomb must not make it look starved).
        charged = max(time.monotonic() - started - runqueue_wait(pid), run_cpu(pid, whole_run))
        if charged >= budget:
            if not timed_out:
                timed_out = True
                try:
                    os.kill(pid, _signal.SIGKILL)
                except OSError:
                    pass
            charged = budget - 0.05
        _signal.sigtimedwait([_signal.SIGCHLD], min(0.05, budget - charged + 0.001))
    emit("status", status, cpu, timed_out)
    if root and not isolated:
        kill_user(uid)
    os._exit(0)


def runqueue_wait(pid: int) -> float:
    """Seconds `pid` has spent runnable but waiting for a CPU (`/proc/<pid>/schedstat`; 0 where unavailable).

    This time is not charged to the program: a program beside many busy ones on a few cores is not timed out for
    the others' load.
    """
    try:
        with open("/proc/%d/schedstat" % pid, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def run_cpu(pid: int, whole_run: bool) -> float:
    """CPU seconds used so far by `pid`, or with `whole_run` by every process in this PID namespace (the reaped
    ones included, through pid 1's children's times)."""
    ticks = 0
    for name in os.listdir("/proc") if whole_run else [str(pid)]:
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if name == "1" else 0)
        except (OSError, IndexError, ValueError):
            pass
    return ticks / CLOCK_TICKS


def user_can_enter(path: str) -> bool:
    """Whether every directory on the way to `path` can be traversed by an unprivileged user."""
    parts = os.path.realpath(path).strip("/").split("/")
    return all(os.stat("/" + "/".join(parts[:depth])).st_mode & 0o001 for depth in range(1, len(parts) + 1))


def kill_user(uid: int) -> None:
    """Without a PID namespace: SIGKILL every process of the sandbox user until none is left."""
    for _ in range(100):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if os.stat("/proc/" + name).st_uid == uid:
                    with open("/proc/%s/stat" % name, "rb") as f:
                        if f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X"):
                            continue
                    os.kill(int(name), _signal.SIGKILL)
                    found = True
            except (OSError, IndexError):
                pass
        if not found:
            return


# What the program's root shows of the host besides the interpreter's executable, its import path (`sys.path`: the
# standard library, `lib-dynload`, site-packages) and the directories of the shared objects it has loaded: the system
# library directories and the dynamic loader's cache and configuration (extension modules load libraries), and the
# time zone data. Nothing else: no home, no datasets cache, no `/work`, no `/etc/passwd`.
SYSTEM_PATHS = ("/lib", "/lib64", "/lib32", "/libx32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32",
                "/usr/local/lib", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                "/etc/localtime", "/usr/share/zoneinfo")
DEVICES = ("null", "zero", "full", "random", "urandom")
_NEVER_BOUND = frozenset(["", "dev", "proc", "sys"])  # first components: `/` itself, devices, kernel views
MNT_DETACH = 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


def visible_paths(extra: list[str]) -> list[str]:
    """The host paths (files or directories) that the program's root shows, read-only: the interpreter's executable,
    its import path, its prefixes' `lib` and `lib64`, the directories of the shared objects (`*.so*`) this
    interpreter has mapped, [`SYSTEM_PATHS`] and `extra` (`SandboxLimits.visible_paths`: a task's own files). Paths
    that do not exist are left out."""
    prefixes = dict.fromkeys([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix])
    # `<prefix>/lib`: where a conda or self-built Python keeps the shared libraries its extension modules load lazily
    paths = [sys.executable, *sys.path, *SYSTEM_PATHS, *[os.path.join(p, d) for p in prefixes if p
                                                          for d in ("lib", "lib64")]]
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.rstrip("\n").split(None, 5)
                if (len(fields) == 6 and fields[5].startswith("/") and ".so" in os.path.basename(fields[5])
                        and not fields[5].endswith(" (deleted)")):
                    paths.append(os.path.dirname(fields[5]))
    except OSError:
        pass
    paths += extra
    return [p for p in dict.fromkeys(paths) if type(p) is str and p.startswith("/") and os.path.lexists(p)]


def follow(path: str, links: dict[str, str], hops: int = 0) -> str | None:
    """The real path of the absolute `path` on the host, recording in `links` every symbolic link met on the way
    (its path -> its target, as written); `None` for a path that does not exist or loops."""
    parts = [p for p in path.split("/") if p and p != "."]
    current = "/"
    for index, part in enumerate(parts):
        if part == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, part)
        if os.path.islink(step):
            if hops >= 40:
                return None
            target = os.readlink(step)
            links[step] = target
            rest = "/".join(parts[index + 1:])
            base = os.path.join(current, target)  # an absolute target replaces `current`
            return follow(os.path.join(base, rest) if rest else base, links, hops + 1)
        current = step
    return current if os.path.exists(current) else None


def root_layout(paths: list[str]) -> tuple[dict[str, str], list[str]]:
    """How a root built from scratch shows `paths` as on the host: the symbolic links to recreate (path -> target;
    `/lib -> usr/lib`, `venv/bin/python -> /usr/bin/python3.11`) and the real files and directories to bind, the
    outermost only (a directory's bind shows what is inside it). `/` itself is never bound, nor anything under
    `/dev`, `/proc` or `/sys` (the root has its own devices and `/proc`)."""
    links: dict[str, str] = {}
    real = set()
    for path in paths:
        resolved = follow(path, links)
        if resolved is not None and resolved.split("/")[1] not in _NEVER_BOUND:
            real.add(resolved)
    binds: list[str] = []
    for path in sorted(real):  # a directory sorts before what is inside it
        if not any(path.startswith(outer + "/") for outer in binds):
            binds.append(path)
    links = {path: target for path, target in links.items() if path.split("/")[1] not in _NEVER_BOUND
             and not any(path == outer or path.startswith(outer + "/") for outer in binds)}
    return links, binds


def hidden_packages(names: list[str]) -> list[str]:
    """The real directories of the packages `names` (top-level names, e.g. `trl_marl`) on this interpreter's import
    path, found without importing them."""
    found = []
    for entry in sys.path:
        for name in names:
            path = os.path.join(entry, name) if entry and name.isidentifier() else ""
            if path and os.path.isdir(path):
                found.append(os.path.realpath(path))
    return list(dict.fromkeys(found))


def build_root(libc: Any, uid: int, disk_mb: int, extra: list[str], hide: list[str],
               emit: Callable[..., None]) -> None:
    """C, in the new mount namespace: make the root a tmpfs built from an allowlist ([`visible_paths`], bound
    read-only, `nosuid`, `nodev`, at their host paths, with the symbolic links on the way to them), a private
    size-limited `/tmp` (also `/var/tmp` and `/dev/shm`) owned by the sandbox user, the devices `null`, `zero`,
    `full`, `random`, `urandom`, and a private `/proc`; the packages `hide` (the trainer's own, whose task
    generators and dataset loaders a program could import) covered by an empty directory; then `pivot_root` into it
    and detach the host's root. No other host file or directory is reachable from the program."""
    import ctypes

    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        enc = lambda s: None if s is None else s.encode()  # noqa: E731
        if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "mount(%r, %r): %s" % (source, target, os.strerror(err)))

    mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    links, binds = root_layout(visible_paths(extra))
    # Handles on the sources and the packages to hide, taken before the new root (built on /tmp) hides what the host
    # has there (a checkout or virtualenv under /tmp would otherwise be bound but never found to hide).
    sources = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in binds}
    hidden = hidden_packages(hide)
    devices = {name: os.open("/dev/" + name, os.O_PATH | os.O_CLOEXEC) for name in DEVICES
               if os.path.exists("/dev/" + name)}
    new = "/tmp"
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755")
    os.makedirs(new + "/tmp")
    private = "size=%dm,mode=0700,uid=%d,gid=%d" % (disk_mb, uid, uid)
    mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, private)
    for shared in ("/var/tmp", "/dev/shm"):
        os.makedirs(new + shared)
        mount(new + "/tmp", new + shared, None, MS_BIND, None)
    for name, fd in devices.items():
        open(new + "/dev/" + name, "w").close()
        mount("/proc/self/fd/%d" % fd, new + "/dev/" + name, None, MS_BIND, None)
        mount(None, new + "/dev/" + name, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC, None)
        os.close(fd)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, new + "/dev/" + name)
    os.makedirs(new + "/proc")
    for path, target in sorted(links.items()):
        os.makedirs(os.path.dirname(new + path), mode=0o755, exist_ok=True)
        if not os.path.lexists(new + path):
            os.symlink(target, new + path)
    for path in binds:
        fd, target = sources[path], new + path
        if os.path.isdir("/proc/self/fd/%d" % fd):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            open(target, "a").close()
        mount("/proc/self/fd/%d" % fd, target, None, MS_BIND, None)  # not recursive: no mount below it comes along
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        os.close(fd)
    for path in hidden:  # the trainer's own package: task generators and dataset loaders
        if os.path.isdir(new + path):
            mount("tmpfs", new + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
    os.chdir(new)
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is not None and libc.syscall(number, b".", b".") == 0:
        if libc.umount2(b".", MNT_DETACH) != 0:  # the host's root, stacked under the new one
            raise OSError(ctypes.get_errno(), "umount2 of the host's root failed")
    else:  # no pivot_root (another architecture, or a root that is no mount point): move the new root over `/`
        mount(new, "/", None, MS_MOVE, None)
        os.chroot(".")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    except OSError as exc:
        emit("note", "no private /proc: " + str(exc))


# ---------------------------------------------------------------------------------------------------- process P
# Syscalls that have no use in a unit test and open doors out of a sandbox: namespaces (nested user namespaces
# above all), mounts, tracing, keyrings, BPF, perf, userfaultfd, io_uring. Each (x86_64, aarch64) number.
_DENIED_SYSCALLS = {
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "chroot": (161, 51), "ptrace": (101, 117), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsmount": (432, 432), "mount_setattr": (442, 442), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
}
_ARCHES = {"x86_64": (0, 0xC000003E, 56), "aarch64": (1, 0xC00000B7, 220)}  # column, AUDIT_ARCH, clone
_CLONE3 = 435
_NS_CLONE_FLAGS = 0x10000000 | 0x40000000 | 0x20000000 | 0x00020000 | 0x08000000 | 0x04000000 | 0x02000000


def seccomp_filter(machine: str) -> list[tuple[int, int, int, int]] | None:
    """A classic-BPF seccomp program `(code, jt, jf, k)` for `machine` (`None`: no numbers for that machine).

    Denied syscalls fail with `EPERM`; `clone` with any namespace flag fails with `EPERM`; `clone3` (whose flags a
    filter cannot read) fails with `ENOSYS`, so the C library falls back to `clone`; another architecture's
    syscalls (e.g. x32 or 32-bit compat calls) kill the process.
    """
    if machine not in _ARCHES:
        return None
    column, arch, clone = _ARCHES[machine]
    ld, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    denied = sorted({numbers[column] for numbers in _DENIED_SYSCALLS.values()})
    # Layout: 0 ld arch; 1 jeq arch; 2 ret kill; 3 ld nr; 4 x32 check; 5.. denied; then clone3, clone; ret allow;
    # clone flags check; the two return blocks.
    n = len(denied)
    # 0 ld arch | 1 jeq arch | 2 ret kill | 3 ld nr | 4 jge x32 | 5..4+n jeq denied | 5+n jeq clone3 | 6+n jeq clone
    # | 7+n ret allow | 8+n ld flags | 9+n jset | 10+n ret allow | 11+n ret EPERM | 12+n ret ENOSYS
    clone_check, ret_eperm, ret_enosys = 8 + n, 11 + n, 12 + n
    prog: list[tuple[int, int, int, int]] = []
    prog.append((ld, 0, 0, 4))  # seccomp_data.arch
    prog.append((jeq, 1, 0, arch))
    prog.append((ret, 0, 0, kill))
    prog.append((ld, 0, 0, 0))  # seccomp_data.nr
    prog.append((jge, ret_eperm - 5, 0, 0x40000000))  # x32 ABI (x86_64): refuse
    for number in denied:
        prog.append((jeq, ret_eperm - len(prog) - 1, 0, number))
    prog.append((jeq, ret_enosys - len(prog) - 1, 0, _CLONE3))
    prog.append((jeq, clone_check - len(prog) - 1, 0, clone))
    prog.append((ret, 0, 0, allow))
    assert len(prog) == clone_check
    prog.append((ld, 0, 0, 16 if sys.byteorder == "little" else 20))  # low 32 bits of args[0] (the flags)
    prog.append((jset, 1, 0, _NS_CLONE_FLAGS))
    prog.append((ret, 0, 0, allow))
    prog.append((ret, 0, 0, eperm))
    prog.append((ret, 0, 0, enosys))
    return prog


def install_seccomp(libc: Any) -> bool:
    """Set `no_new_privs` and install [`seccomp_filter`]; whether the filter is in place."""
    import ctypes

    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    prog = seccomp_filter(os.uname().machine)
    if prog is None:
        return False

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), ctypes.cast(filters, ctypes.POINTER(SockFilter)))
    if libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True


def child(req: dict[str, Any], emit: Callable[..., None], libc: Any, root: bool, workdir: str,
          allowed: list[str], layers: list[str], call_r: int, reply_w: int) -> None:
    """P: limits, privileges, guards, then the program and the call server."""
    uid = req["uid"]
    for limit, soft, hard in ((resource.RLIMIT_AS, req["memory"], req["memory"]),
                              (resource.RLIMIT_FSIZE, req["fsize"], req["fsize"]),
                              (resource.RLIMIT_NOFILE, req["nofile"], req["nofile"]),
                              (resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_NPROC, req["nproc"], req["nproc"]),
                              (resource.RLIMIT_CPU, req["cpu"], req["cpu"] + 1)):
        current = resource.getrlimit(limit)[1]  # limits can only be lowered here
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(limit, (soft, hard))
    if root:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError("could not drop privileges")
    elif libc is not None and req["namespaces"] and libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        layers.append("netns")
    pdeathsig(libc)
    if libc is not None:
        layers.append("no_new_privs")
        if install_seccomp(libc):
            layers.append("seccomp")
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                       "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1",
                       "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    if req["guards"]:
        install_guards(allowed)
        layers.append("guards")
    emit("iso", tuple(layers))
    # From here on the process belongs to the program: it keeps stdio and its two pipe ends, nothing else.
    os.dup2(call_r, CALL_FD)
    os.dup2(reply_w, REPLY_FD)
    os.closerange(REPLY_FD + 1, 1 << 30)
    serve(req)


def serve(req: dict[str, Any]) -> None:
    """P: run the program, report its top-level names, then answer H's calls with plain data."""
    _type, _str, _len, _getattr, _exit, _isinstance = type, str, len, getattr, os._exit, isinstance
    _BaseException, _SystemExit, _MemoryError = BaseException, SystemExit, MemoryError
    module_type = _type(sys)
    objects: dict[int, Any] = {}
    reader = FrameReader(CALL_FD)

    def describe(exc: BaseException) -> str:
        try:
            text = _str(exc)
        except _BaseException:
            text = "<unprintable>"
        line = None
        tb = _getattr(exc, "__traceback__", None)
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<program>":
                line = tb.tb_lineno
            tb = tb.tb_next
        text = text if _len(text) <= 300 else text[:297] + "..."
        return text + (" (program line %d)" % line if line is not None else "")

    def handle(value: Any) -> int | None:
        if _len(objects) >= MAX_HANDLES:
            return None
        key = _len(objects)
        objects[key] = value
        return key

    def send(message: tuple[Any, ...]) -> None:
        try:
            payload = encode(message, handle, limited=True)  # what H would refuse fails this call only
            if _len(payload) > MAX_MESSAGE:
                raise CodecError("too large")
        except (_MemoryError, RecursionError, CodecError, ValueError) as exc:
            payload = encode(("unencodable", _type(exc).__name__ + ": " + _str(exc)[:100]))
        send_frame(REPLY_FD, payload)

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except _BaseException:
                pass

    def quit_(message: tuple[Any, ...] | None = None) -> None:
        flush()
        if message is not None:
            try:
                send_frame(REPLY_FD, encode(message))
            except _BaseException:
                pass
        _exit(0)

    module = module_type("__sandbox__")
    module.__builtins__ = builtins  # type: ignore[attr-defined]  # (typeshed's ModuleType does not declare it)
    sys.modules["__sandbox__"] = module
    namespace = module.__dict__
    try:
        code = compile(req["program"], "<program>", "exec")
    except SyntaxError as exc:
        quit_(("syntax", exc.lineno if _type(exc.lineno) is int else None, _str(exc.msg)[:200],
               (exc.text or "").strip()[:200]))
    except _BaseException as exc:
        quit_(("syntax", None, _type(exc).__name__ + ": " + describe(exc), ""))
    try:
        exec(code, namespace)
    except _SystemExit as exc:
        quit_(("exit", repr(exc.code)[:100]))
    except _MemoryError as exc:
        quit_(("memory", "MemoryError: " + describe(exc)))
    except _BaseException as exc:
        quit_(("error", _type(exc).__name__ + ": " + describe(exc)))

    names: dict[str, Any] = {}
    for name, value in list(namespace.items())[:MAX_NAMES]:
        if _type(name) is not str or name.startswith("__"):
            continue
        if _isinstance(value, module_type):
            names[name] = ("m", _str(_getattr(value, "__name__", "")))
            continue
        try:
            data = encode(value, limited=True)
            names[name] = ("v", value) if _len(data) <= MAX_VALUE_BYTES else ("o", None)
        except (CodecError, RecursionError, _MemoryError):
            names[name] = ("o", None)
    send(("ready", names))

    def resolve(target: Any) -> Any:
        kind, key = target
        if kind == "n":
            return namespace[key]
        return objects[key]

    def unref(key: int | str) -> Any:
        return objects[key] if _type(key) is int else namespace[key]  # type: ignore[index]  # (the captured `type`)

    while True:
        try:
            message = decode(reader.read(), unref, limited=False)  # H's calls: the tests' own values
        except ChannelClosed:
            quit_()
        kind = message[0]
        if kind == "quit":
            quit_()
        try:
            if kind == "call":
                value = resolve(message[1])(*message[2], **message[3])
            else:
                value = _getattr(resolve(message[1]), message[2])
            reply: tuple[Any, ...] = ("ok", value)
        except _SystemExit as exc:
            quit_(("exit", repr(exc.code)[:100]))
        except _BaseException as exc:
            reply = ("raise", _type(exc).__name__, describe(exc))
        send(reply)


def install_guards(allowed: list[str]) -> None:
    """The Python layer (defense in depth): an audit hook and stubs for process, signal and socket functions."""
    realpath, fsdecode = os.path.realpath, os.fsdecode
    _str, _int, _PermissionError = str, int, PermissionError
    roots = tuple(allowed)
    prefixes = tuple(a.rstrip("/") + "/" for a in allowed)

    def inside(path: Any) -> bool:
        if isinstance(path, _int):
            return True
        try:
            path = realpath(fsdecode(path))
        except Exception:
            return False
        return path in roots or path.startswith(prefixes)

    blocked = frozenset([
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
        "subprocess.Popen", "pty.spawn", "socket.__new__", "socket.connect", "socket.bind", "socket.sendto",
        "socket.sendmsg", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
        "ctypes.cdata", "ctypes.cdata/buffer", "resource.setrlimit", "resource.prlimit", "gc.get_objects",
        "gc.get_referrers", "gc.get_referents", "os.chroot", "sys.remote_exec",
    ])
    # event -> (positions of path arguments that must be inside, position of a dir_fd argument or None)
    checked = {
        "os.remove": ((0,), 1), "os.rmdir": ((0,), 1), "os.mkdir": ((0,), 2), "os.chmod": ((0,), 2),
        "os.chown": ((0,), 3), "os.utime": ((0,), 3), "os.truncate": ((0,), None), "os.setxattr": ((0,), None),
        "os.removexattr": ((0,), None), "os.rename": ((0, 1), 2), "os.link": ((0, 1), 2),
        "os.symlink": ((1,), 2), "shutil.move": ((0, 1), None), "shutil.copyfile": ((1,), None),
        "shutil.copytree": ((1,), None), "shutil.rmtree": ((0,), 1),
    }

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in blocked:
            raise _PermissionError(event + " is disabled in the sandbox")
        if event == "open":
            path, mode, flags = args
            writing = (any(c in mode for c in "wax+") if isinstance(mode, _str)
                       else bool((flags or 0) & WRITE_FLAGS))
            if writing and not inside(path):
                raise _PermissionError("writing outside the sandbox directory is not allowed: %r" % (path,))
            return
        rule = checked.get(event)
        if rule is not None:
            paths, dir_fd = rule
            fd_used = dir_fd is not None and len(args) > dir_fd and args[dir_fd] not in (None, -1)
            if fd_used or not all(inside(args[i]) for i in paths if i < len(args)):
                raise _PermissionError(event + " outside the sandbox directory is not allowed")

    sys.addaudithook(hook)

    def stub(name: str) -> Callable[..., Any]:
        def disabled(*args: Any, **kwargs: Any) -> Any:
            raise _PermissionError(name + " is disabled in the sandbox")
        disabled.__name__ = name.rsplit(".", 1)[-1]
        return disabled

    def blocked_class(base: type, name: str) -> type:
        class Disabled(base):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise _PermissionError(name + " is disabled in the sandbox")
        Disabled.__name__ = Disabled.__qualname__ = base.__name__
        return Disabled

    # Deleting and renaming stay possible inside the working directory (tempfile needs it): the audit hook
    # checks their paths. What has no business in a unit test is replaced outright.
    os_names = ["system", "kill", "killpg", "fork", "forkpty", "popen", "chown", "lchown", "fchown", "execv",
                "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnv", "spawnve",
                "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "posix_spawn", "posix_spawnp"]

    def patch_os(mod: Any) -> None:
        for name in os_names:
            if hasattr(mod, name):
                setattr(mod, name, stub("os." + name))

    def patch_shutil(mod: Any) -> None:
        mod.chown = stub("shutil.chown")

    def patch_subprocess(mod: Any) -> None:
        mod.Popen = blocked_class(mod.Popen, "subprocess.Popen")
        for name in ("run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"):
            setattr(mod, name, stub("subprocess." + name))

    def patch_socket(mod: Any) -> None:
        mod.socket = blocked_class(mod.socket, "socket.socket")
        for name in ("create_connection", "create_server", "socketpair", "fromfd"):
            if hasattr(mod, name):
                setattr(mod, name, stub("socket." + name))

    patches = {"shutil": patch_shutil, "subprocess": patch_subprocess, "socket": patch_socket}
    patch_os(os)
    for name in list(patches):
        if name in sys.modules:
            patches.pop(name)(sys.modules[name])

    class PatchingLoader:
        def __init__(self, loader: Any, patch: Callable[[Any], None]) -> None:
            self._loader, self._patch = loader, patch

        def __getattr__(self, name: str) -> Any:
            return getattr(self._loader, name)

        def create_module(self, spec: Any) -> Any:
            return self._loader.create_module(spec)

        def exec_module(self, module: Any) -> None:
            self._loader.exec_module(module)
            self._patch(module)

    class GuardFinder:
        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
            patch = patches.get(name)
            if patch is None:
                return None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if isinstance(finder, GuardFinder) or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = PatchingLoader(spec.loader, patch)
                    return spec
            return None

    sys.meta_path.insert(0, GuardFinder())


if __name__ == "__trl_marl_harness__":
    main(globals()["REQUEST"])
