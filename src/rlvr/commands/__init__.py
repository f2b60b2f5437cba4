"""CLI subcommands, one module each (see `rlvr.cli`)."""
