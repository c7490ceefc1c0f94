"""Read-only SQL over the store, bounded, in a process of its own: what the CLI, the forensic rooms and the
agent's /api/sql all run a query through. Below the config (which names its Limits) and every room that asks."""
