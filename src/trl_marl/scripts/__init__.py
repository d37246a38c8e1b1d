"""Training scripts shared by the `trl-marl` command and the examples."""
