"""What every command prints through: the console for a terminal or a pipe, tables laid out to its width, and the
times a person types. Below every room that prints, so that none of them imports the CLI."""
