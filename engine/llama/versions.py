"""The llama.cpp builds spyglass is checked against: one llama-cpp-python sdist per change of llama-server's log
format, `/metrics`, `/slots` or `/props`, from 2024 to the pinned version. The one table the builder, the
recorder (`scripts/record-llama`), the fixture tests and docs/llama-server.md read.

Each sdist vendors one llama.cpp commit (`vendor/llama.cpp`); what a row says about the server was read in that
commit's `examples/server` or `tools/server` sources (the log macros, `print_timings`, `--log-format`,
`--cache-ram`, `--ctx-checkpoints`, router mode), not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

PINNED = "0.3.36"

# What a build's llama-server offers; the recorder runs the workload parts and logging modes it has.
JSON_LOG = "json_log"  # --log-format json|text (the default is JSON): 2024 only
LOG_PREFIX = "log_prefix"  # --log-prefix --log-timestamps (common/log.h, from September 2024)
VERBOSE = "verbose"  # -v: every debug line of the server
HOST_CACHE = "host_cache"  # --cache-ram: the host-memory prompt cache and its evictions
CHECKPOINTS = "checkpoints"  # --ctx-checkpoints: context checkpoints
ROUTER = "router"  # no -m, --models-dir: one child process per model, lines prefixed [PORT]
SLOTS = "slots"  # GET /slots answers (else only with --slots)
PROPS = "props"  # GET /props


@dataclass(frozen=True)
class LlamaVersion:
    """One llama-cpp-python release: the llama.cpp it vendors, how to build its server, what the server offers."""

    version: str
    vendored: str  # the vendored llama.cpp's month (about: the release's date)
    commit: str  # the vendored llama.cpp commit (llama-cpp-python's CHANGELOG)
    log_era: str  # the log format, as docs/llama-server.md names it
    target: str = "llama-server"  # the cmake target of the server (`server` before June 2024)
    under_examples: bool = False  # the server is an example (needs LLAMA_BUILD_EXAMPLES=ON)
    split_experts: bool = False  # reads MoE experts only as one tensor each (before April 2024)
    features: frozenset[str] = frozenset()
    metrics: str = ""  # the llamacpp: families its /metrics writes beyond the base eight (all builds)
    slots: str = ""  # /slots: its shape and whether it answers by default
    unbuilt: str = ""  # why this version has no build and no fixtures here ("" when it has)

    def has(self, feature: str) -> bool:
        return feature in self.features

    def cmake_flags(self) -> tuple[str, ...]:
        examples = "ON" if self.under_examples else "OFF"
        return (
            "-DLLAMA_BUILD_SERVER=ON",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_OPENSSL=OFF",
            "-DGGML_NATIVE=OFF",
            "-DLLAMA_NATIVE=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            f"-DLLAMA_BUILD_EXAMPLES={examples}",
            "-DCMAKE_BUILD_TYPE=Release",
        )


LATE_2025 = frozenset({LOG_PREFIX, VERBOSE, HOST_CACHE, CHECKPOINTS, ROUTER, SLOTS, PROPS})

VERSIONS: dict[str, LlamaVersion] = {
    v.version: v
    for v in (
        LlamaVersion(
            "0.2.56",
            "2024-03",
            "c2101a2e",
            "JSON lines on stdout (`--log-format text`: `INFO [function] msg \\| k=v`)",
            target="server",
            under_examples=True,
            split_experts=True,
            features=frozenset({JSON_LOG, VERBOSE, SLOTS, PROPS}),
            metrics="kv_cache_usage_ratio, kv_cache_tokens",
            slots="`state` 0/1; on by default",
        ),
        LlamaVersion(
            "0.3.1",
            "2024-09",
            "c919d5db",
            "common log: `slot launch_slot_: id  0 \\| task 42 \\| ...`, timings on continuation lines, `n_past`",
            under_examples=True,
            features=frozenset({LOG_PREFIX, VERBOSE, SLOTS, PROPS}),
            metrics="kv_cache_*, n_decode_total, n_busy_slots_per_decode (typed a counter)",
            slots="`state` 0 idle, 1-3 busy; on by default",
        ),
        LlamaVersion(
            "0.3.16",
            "2025-08",
            "4227c9be",
            "as 0.3.1; `new prompt`, `forcing full prompt re-processing` (SWA)",
            features=frozenset({LOG_PREFIX, VERBOSE, SLOTS, PROPS}),
            metrics="n_decode_total, n_busy_slots_per_decode (kv_cache_* gone)",
            slots="`is_processing`; needs `--slots`",
        ),
        LlamaVersion(
            "0.3.20",
            "2025-12",
            "f49e9178",
            "late-2025 wording: `n_tokens`, `sim_best`, `server is listening on`",
            features=LATE_2025,
            metrics="n_decode_total, n_tokens_max, n_busy_slots_per_decode",
            slots="`is_processing`; on by default",
        ),
        LlamaVersion(
            PINNED,
            "2026-10",
            "0c1e5709",
            "late-2025 wording; `cache state`, checkpoints at `-lv 4`",
            features=LATE_2025,
            metrics="prompt_tokens_cached_total, n_decode_total, n_tokens_max, n_busy_slots_per_decode, spec_decode_*",
            slots="`is_processing`; on by default",
        ),
    )
}


def version(name: str) -> LlamaVersion:
    """The table's row for a llama-cpp-python version; an unknown one is built as the pinned one is."""
    found = VERSIONS.get(name)
    return found if found is not None else LlamaVersion(name, "?", "?", "unknown", features=VERSIONS[PINNED].features)


def docs_rows(recorded: dict[str, list[str]]) -> str:
    """docs/llama-server.md's table of builds, from this table and the fixtures recorded (modes per version)."""
    rows = []
    for row in VERSIONS.values():
        extras = (
            ", ".join(
                name
                for name, feature in (("host cache", HOST_CACHE), ("checkpoints", CHECKPOINTS), ("router", ROUTER))
                if row.has(feature)
            )
            or "none"
        )
        fixtures = ", ".join(recorded[row.version]) if row.version in recorded else f"none: {row.unbuilt}"
        rows.append(
            f"| {row.version} | `{row.commit}` ({row.vendored}) | {row.log_era} | base eight; {row.metrics} |"
            f" {row.slots} | {extras} | {fixtures} |"
        )
    return "\n".join(rows)
