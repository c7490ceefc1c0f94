"""The forensic schema: one typed view per kind of thing an analyst asks about, over the store's typed tables.

Each view is one SQL definition in VIEWS, registered once; docs/forensics.md is generated from
this table. Views are never written into the store: a query that names them gets them as CTEs
in front of it (`with_views`), so they work on a read-only file and through the agent's
read-only query path alike. Every view reads the events of a window widened by PAD on each
side (a request that began before the window still joins its lines) and returns the rows whose
`ts_utc` falls in [$from, $to). Every timestamp comes as a `_utc` (TIMESTAMPTZ) and `_local`
(naive Asia/Shanghai wall time) pair; nothing depends on the session's TimeZone.

The views live by what they answer: requests (one request through every layer), resources (the
engine's cache and host), lifecycle (processes, deploys, status polls), verdicts (alerts, smoke
gates) and the timeline; schema holds their parts (Fields names the typed columns), registry the
table, compose puts them in front of a query.
"""

from __future__ import annotations

from spyglass.forensics.views.compose import literal, needed, with_views
from spyglass.forensics.views.registry import VIEWS
from spyglass.forensics.views.schema import ENGINE, PAD, Column, Fields, UnknownField, View

__all__ = ["ENGINE", "PAD", "VIEWS", "Column", "Fields", "UnknownField", "View", "literal", "needed", "with_views"]
