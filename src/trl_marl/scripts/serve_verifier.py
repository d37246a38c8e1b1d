"""`trl-marl serve-verifier`: serve a verifier model over HTTP until interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

__all__ = ["serve_verifier_main"]

# ---------------------------------------------------------------------------------------------------------------
# `trl-marl serve-verifier`
# ---------------------------------------------------------------------------------------------------------------


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-marl serve-verifier",
        description="Serve a verifier model (AutoModelForSequenceClassification, num_labels=1) over HTTP: "
        'POST /score {"questions": [...], "responses": [...]} -> {"scores": [...]}, GET /health.',
    )
    parser.add_argument("--model", required=True, help="Directory or Hub id of the verifier model.")
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind (default: loopback only).")
    parser.add_argument("--port", type=int, default=8000, help="Port to bind (0: a free port). Default: 8000.")
    parser.add_argument("--batch-size", type=int, default=16, help="Texts per forward pass. Default: 16.")
    parser.add_argument("--max-length", type=int, default=1024, help="Longest text in tokens. Default: 1024.")
    parser.add_argument(
        "--template",
        default=None,
        help="Format string with {question} and {response} (default: the model's saved template, "
        "else '{question}\\n{response}').",
    )
    parser.add_argument("--device", default=None, help="Device for the model, e.g. cuda:0 (default: cpu).")
    parser.add_argument(
        "--max-body-mb",
        type=float,
        default=16.0,
        help="Largest request body in MiB; a larger one is refused with HTTP 413. Default: 16.",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="Seconds a connection may stay silent before it is closed (also the limit for writing "
        "an answer). Default: 30.",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=60.0,
        help="Seconds within which a client must have sent its whole request (line, headers and "
        "body), however steadily it trickles bytes; then the connection is closed. Default: 60.",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=64,
        help="Connections served at once (one thread each). When all are busy, the one that has "
        "been sending its request longest (over a second) is closed for a new one; else new ones "
        "wait. Default: 64.",
    )
    parser.add_argument(
        "--max-items",
        type=int,
        default=4096,
        help="Most responses in one request; more are refused with HTTP 413 (clients split their "
        "calls with RemoteVerifier(batch_size=...)). Default: 4096.",
    )
    parser.add_argument(
        "--max-score-s",
        type=float,
        default=60.0,
        help="Seconds of scoring one request may use; a request that takes longer is stopped and "
        "refused with HTTP 413. Requests are scored in turn, a chunk of --batch-size (at least "
        "64) responses each, so a large one delays a small one by one chunk. Default: 60.",
    )
    return parser


def serve_verifier_main(argv: list[str]) -> int:
    """`trl-marl serve-verifier`: loads a [`ModelVerifier`] and serves it until interrupted (blocking).

    Args:
        argv: Command-line arguments (without the program and subcommand names): `--model PATH` and optionally
            `--host`, `--port`, `--batch-size`, `--max-length`, `--template`, `--device`, `--max-body-mb`,
            `--timeout`, `--request-timeout`, `--max-connections`, `--max-items`, `--max-score-s` (see
            [`~trl_marl.rewards.verifier_server.VerifierServer`] for what each limit protects against).

    Returns:
        The exit status: 0 after an interrupt (Ctrl-C or SIGTERM), 1 when the model cannot be loaded or the port
        cannot be bound.
    """
    parser = _serve_parser()
    args = parser.parse_args(argv)
    if not 0 < args.max_body_mb < 1 << 20:
        parser.error(f"--max-body-mb must be a positive number of MiB, got {args.max_body_mb:g}.")
    for flag, seconds in (
        ("--timeout", args.timeout),
        ("--request-timeout", args.request_timeout),
        ("--max-score-s", args.max_score_s),
    ):
        if not 0 < seconds < float("inf"):
            parser.error(f"{flag} must be a positive number of seconds, got {seconds:g}.")
    for flag, count in (("--max-connections", args.max_connections), ("--max-items", args.max_items)):
        if count < 1:
            parser.error(f"{flag} must be at least 1, got {count}.")
    from ..rewards.remote import VerifierServer  # after parsing: `--help` does not load torch
    from ..rewards.verifier import ModelVerifier

    try:
        verifier = ModelVerifier(
            args.model,
            batch_size=args.batch_size,
            max_length=args.max_length,
            template=args.template,
            device=args.device,
        )
    except (OSError, ValueError) as exc:
        print(f"trl-marl serve-verifier: cannot load {args.model!r}: {exc}", file=sys.stderr)
        return 1
    server = VerifierServer(
        verifier,
        host=args.host,
        port=args.port,
        max_body_bytes=max(1, int(args.max_body_mb * (1 << 20))),
        timeout_s=args.timeout,
        max_connections=args.max_connections,
        request_timeout_s=args.request_timeout,
        max_items=args.max_items,
        max_score_s=args.max_score_s,
    )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"trl-marl serve-verifier: warning: serving on {args.host} without authentication.", file=sys.stderr)

    previous = None
    if threading.current_thread() is threading.main_thread():

        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server as Ctrl-C does
    try:
        server.serve_forever(
            ready=lambda url: print(
                f"Serving {args.model} on {url} (POST /score, GET /health); Ctrl-C to stop.", flush=True
            )
        )
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"trl-marl serve-verifier: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print("Verifier server stopped.", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(serve_verifier_main(sys.argv[1:]))
