"""Where the metric state and the events leave the agent: Prometheus exposition, OTLP metrics and
spans, the DuckDB store and its Parquet publication, and the metrics-only state file."""

if __name__ != "spyglass.exporters":  # an editable install puts the checkout's root on sys.path too
    raise ImportError(
        f"import spyglass.exporters, not {__name__}: spyglass is one package, and a second copy of "
        "its modules would register every source and metric twice"
    )
