"""The commands of `trl-marl` (`cli.py` dispatches to them), shared with the examples: `demo`, `magrpo`, `maporl`,
`serve_verifier`. Each is also runnable as `python -m trl_marl.scripts.<name>`."""
