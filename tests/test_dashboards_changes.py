"""The lifecycle dashboard's build and model change annotations, as shipped in dashboards/generated/,
evaluated by Debian's promtool on info series shaped like a deploy: a change is annotated, with the
labels it changed to, for one $__rate_interval; an instance's first series, a series back after a
scrape gap, an instance that did not change, and the same instance name on another host are not."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from spyglass.dashboards.lint import substitute

ROOT = Path(__file__).resolve().parent.parent
BOARD = ROOT / "dashboards" / "generated" / "spyglass-lifecycle.json"
SCRAPE = 15  # seconds; $__rate_interval is then 60 s


def annotation(name: str) -> str:
    (found,) = [a["expr"] for a in json.loads(BOARD.read_text())["annotations"]["list"] if a["name"] == name]
    return substitute(found, step_seconds=SCRAPE, scrape_seconds=SCRAPE, range_seconds=3600)


def build(instance: str, build_id: str, version: str, host: str = "h1") -> str:
    return (
        f'spyglass_engine_build_info{{host="{host}", instance="{instance}", lane="normal", build_name="Strata",'
        f' version="{version}", build="{build_id}"}}'
    )


def model(instance: str, name: str, md5: str) -> str:
    return f'spyglass_engine_model_info{{host="h1", instance="{instance}", lane="normal", model="{name}", md5="{md5}"}}'


def run(promtool: str, tmp_path: Path, series: dict[str, str], checks: list[tuple[str, str, list[dict]]]):
    (tmp_path / "none.yml").write_text("groups: []\n")
    test = {
        "rule_files": [str(tmp_path / "none.yml")],
        "evaluation_interval": f"{SCRAPE}s",
        "tests": [
            {
                "interval": f"{SCRAPE}s",
                "input_series": [{"series": k, "values": v} for k, v in series.items()],
                "promql_expr_test": [{"expr": expr, "eval_time": at, "exp_samples": want} for expr, at, want in checks],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True, timeout=120
    )


# strata-b: build 7f3c2e1 for 10 min (40 scrapes), then 9e8d7c6 (the agent drops the old info series, so
# Prometheus marks it stale); strata-a: one build, and a 10 min scrape gap (the agent down: stale, then
# nothing) from 5 min; h2 has a strata-b of its own, on another build throughout (not a change). Models
# alike: strata-b's md5 changes at 10 min.
SERIES = {
    build("strata-b", "7f3c2e1", "0.9.3"): "1x39 stale",
    build("strata-b", "9e8d7c6", "0.9.4"): "_x40 1x39",
    build("strata-a", "7f3c2e1", "0.9.3"): "1x19 stale _x39 1x39",
    build("strata-b", "1a2b3c4", "0.9.2", host="h2"): "1x79",  # another host's strata-b, on an older build
    model("strata-b", "v7.gguf", "5d41"): "1x39 stale",
    model("strata-b", "v8.gguf", "7d79"): "_x40 1x39",
    model("strata-a", "v7.gguf", "5d41"): "1x19 stale _x39 1x39",
}
NEW_BUILD = {
    "labels": '{host="h1", instance="strata-b", build_name="Strata", version="0.9.4", build="9e8d7c6"}',
    "value": 1,
}
NEW_MODEL = {"labels": '{host="h1", instance="strata-b", model="v8.gguf", md5="7d79"}', "value": 1}


def test_a_build_or_model_change_is_annotated_with_what_it_changed_to(promtool, tmp_path):
    builds, models = annotation("Engine build changes"), annotation("Model changes")
    checks = [
        (builds, "5m", []),  # first series of both instances: nothing changed
        (builds, "10m30s", [NEW_BUILD]),  # within one $__rate_interval of the change
        (builds, "12m", []),  # the change is past
        (builds, "10m", [NEW_BUILD]),
        (builds, "16m", []),  # strata-a's series back after its gap (at 15 min): the same build
        (models, "10m30s", [NEW_MODEL]),
        (models, "16m", []),
        (
            "count by (host, instance) (spyglass_engine_build_info)",
            "16m",  # every instance scraped then:
            [
                {"labels": '{host="h1", instance="strata-a"}', "value": 1},  # the checks above saw them
                {"labels": '{host="h1", instance="strata-b"}', "value": 1},
                {"labels": '{host="h2", instance="strata-b"}', "value": 1},
            ],
        ),
    ]
    result = run(promtool, tmp_path, SERIES, checks)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_harness_can_fail(promtool, tmp_path):
    result = run(promtool, tmp_path, SERIES, [(annotation("Engine build changes"), "5m", [NEW_BUILD])])
    assert result.returncode != 0 and "9e8d7c6" in result.stdout + result.stderr
