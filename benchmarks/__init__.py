"""trl-marl's benchmark suite: ``python -m benchmarks --help`` (see ``benchmarks/README.md``)."""
