"""The subcommands' names, for the entry point and for shell completion of the first word."""

SUBCOMMANDS = ("rules", "run", "fit", "serve")
