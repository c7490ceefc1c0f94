"""The command line: the typer app, the console, the demo, the grammar of typed times."""
