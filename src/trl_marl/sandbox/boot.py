"""The first code a sandbox interpreter runs (`python -I -c <this file's source>`).

It reads one length-prefixed `marshal` message from stdin, `(harness, request)`, where `harness` is the module
[`trl_marl.sandbox.harness`] as a code object (or as source for another interpreter) and `request` the run's
parameters, and executes the harness as `__trl_marl_harness__`. It uses only `marshal` and `os`: it runs in any
interpreter before anything else is imported.
"""
import marshal
import os


def _boot():
    head = b""
    while not head.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte or len(head) > 20:
            raise SystemExit(2)
        head += byte
    size, parts = int(head), []
    while size > 0:
        chunk = os.read(0, min(size, 1 << 16))
        if not chunk:
            raise SystemExit(2)
        parts.append(chunk)
        size -= len(chunk)
    code, request = marshal.loads(b"".join(parts))
    del parts
    exec(code, {"__name__": "__trl_marl_harness__", "__builtins__": __builtins__, "REQUEST": request})


if __name__ == "__main__":
    _boot()
