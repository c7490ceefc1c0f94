"""The agent: the runtime, its pipeline and commits, the HTTP server and its receivers, the SQL sandbox."""
