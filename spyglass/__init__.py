"""spyglass: observability and blind-spot monitoring for a self-hosted MoE inference stack."""

__version__ = "0.1.0"
