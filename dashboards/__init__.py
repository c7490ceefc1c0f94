"""spyglass's Grafana dashboards as Python: the wall screen and its drill-downs.

Built with grafana-foundation-sdk pinned to `1769699379!11.6.0` (pyproject.toml). The SDK publishes
two version lines on PyPI: epoch builds `<unix-ts>!<grafana version>` (10.1.0 ... 11.6.0, where the
10.1.0 build has the highest epoch, so an unpinned install lands on Grafana 10.1, schemaVersion 36,
and emits `style`/variable ids that 11.x rejects), and bare-number `next` builds for the unreleased
Grafana 12 line. We pin the 11.6.0 target: it is the newest released Grafana line, its JSON
(schemaVersion 41) is what the Grafana 11.6 image in compose.yaml imports, and it does not move
under us the way `next` does.

`python -m spyglass.dashboards` writes dashboards/generated/*.json (committed; tests/test_dashboards.py fails
when the code and the JSON drift). Every threshold comes from spyglass.alerting.heuristics, every metric from
the catalogue in spyglass/signals/ or the recording rules (`level:metric:operations`).
"""

from __future__ import annotations

if __name__ != "spyglass.dashboards":  # an editable install puts the checkout's root on sys.path too
    raise ImportError(
        f"import spyglass.dashboards, not {__name__}: spyglass is one package, and a second copy of "
        "its modules would register every source and metric twice"
    )

from spyglass.dashboards.model import DASHBOARDS, Board, build_all, generated, write

__all__ = ["Board", "DASHBOARDS", "build_all", "generated", "write"]
