"""The command line: the typer app, one `<room>_commands.py` a room (the only modules that import typer), the
light entry point (warm.py) and the demo. What commands print through is spyglass.terminal."""
