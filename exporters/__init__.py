"""Where the metric state and the events leave the agent: Prometheus exposition, OTLP metrics and
spans, the DuckDB store and its Parquet publication, and the metrics-only state file."""
