"""The agent: the runtime, its pipeline and commits, the HTTP server and its receivers, /api/sql's warm queries."""
