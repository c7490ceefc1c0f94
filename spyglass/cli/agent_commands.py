"""The commands that read sources: run (the agent), ingest, check-log, the deploy gate (smoke), and demo."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from spyglass.cli.options import ConfigOption, read_config
from spyglass.config import Config


def run(config: ConfigOption) -> None:
    """Run the agent until SIGTERM or Ctrl-C."""
    from spyglass.agent.affinity import CpusUnavailable
    from spyglass.agent.runtime import Agent, StoreBusy
    from spyglass.agent.server import ListenError
    from spyglass.cli import answered
    from spyglass.exporters.duckdb_open import StoreUnusable

    cfg = read_config(config)
    try:
        agent = Agent(cfg, config_path=config, commands=answered.run)
    except CpusUnavailable as exc:
        typer.echo(f"error: {exc}; set agent.cpus in {config} to CPUs of this host", err=True)
        raise typer.Exit(2) from None
    except ListenError as exc:
        typer.echo(
            f"error: {exc}; set exporters.prometheus.listen in {config} to a free port, or stop what listens there",
            err=True,
        )
        raise typer.Exit(1) from None
    except StoreBusy as exc:
        typer.echo(
            f"error: {exc}; one agent a store: stop it first, or give this one its own agent.state_dir", err=True
        )
        raise typer.Exit(1) from None
    except StoreUnusable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    from spyglass.cli.checklog import unread_summary

    said = unread_summary(agent.pipeline)  # the outcomes restored from the state file: what earlier runs read
    if said:
        typer.echo(f"warning: {said}", err=True)
    agent.stop_on_signals()
    agent.serve()


def tailed_files(config: Config) -> dict[str, Path]:
    """source -> path of every tailed file (a polled source's path, e.g. a model path, is not one)."""
    from spyglass import collectors

    kinds = collectors.load_all()
    return {
        name: options.path.expanduser()
        for name, options in config.sources.items()
        if options.path is not None and not kinds[options.kind].is_polled(options)
    }


def missing_files(config: Config) -> list[tuple[str, Path]]:
    """(source, path) of every configured file that is not there."""
    return [(name, path) for name, path in tailed_files(config).items() if not path.exists()]


SettledOption = Annotated[
    float | None,
    typer.Option(
        "--settled-seconds",
        min=0,
        help="Read infer-store segments unchanged this long (default: each source's"
        " settle_seconds, 30); 0 reads a copied segment at once.",
    ),
]


def with_settle(config: Config, seconds: float | None) -> Config:
    """`config` with every infer_store source's settle_seconds set to `seconds` (unchanged for None)."""
    from spyglass.collectors.infer_store import InferStoreOptions

    if seconds is None:
        return config
    sources = {
        **config.sources,
        **{
            name: o.model_copy(update={"settle_seconds": seconds})
            for name, o in config.sources_of(InferStoreOptions).items()
        },
    }
    return config.model_copy(update={"sources": sources})


def unsettled_segments(pipeline: Any) -> dict[str, list[str]]:
    """infer_store source -> the segments its last poll left unread because they changed too recently."""
    return {
        rt.name: list(rt.source.unsettled)
        for rt in pipeline.sources
        if rt.kind == "infer_store" and getattr(rt.source, "unsettled", None)
    }


class CtrlC:
    """SIGINT while a command reads: raised as KeyboardInterrupt only inside `interrupts()`; before, it is kept
    (and raised on entering), after, it is only counted. A Ctrl-C at the very end of ingest once printed
    `Exception ignored in: <module 'threading'>`, exited 0 and printed no summary."""

    def __init__(self) -> None:
        import signal

        self.pressed, self.armed = False, False
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, _signum: int, _frame: object) -> None:
        self.pressed = True
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def interrupts(self) -> Iterator[None]:
        if self.pressed:
            raise KeyboardInterrupt
        self.armed = True
        try:
            yield
        finally:
            self.armed = False


def ingest(
    config: ConfigOption,
    settled_seconds: SettledOption = None,
    poll: Annotated[
        bool,
        typer.Option(
            "--poll",
            help="Also poll the sources that sample the present"
            " (status endpoints, supervisord's API, /proc, model paths) once,"
            " now. Off by default: on a stack that has stopped, such a poll only"
            " stores that it is gone, stamped now.",
        ),
    ] = False,
) -> None:
    """Read every file source (and the infer store) to its current end, commit, exit. Run again: it adds
    nothing. Infer-store segments changed within the settle time are left for a later run, and said so.

    Sources that sample the present are polled only with --poll: what they say is true of the moment of
    the poll, not of the time the files cover."""
    from spyglass.agent.pipeline import Pipeline
    from spyglass.agent.runtime import StoreBusy, open_store
    from spyglass.collectors.clock import SystemClock
    from spyglass.exporters.duckdb_open import StoreUnusable

    cfg = with_settle(read_config(config), settled_seconds)
    missing = missing_files(cfg)
    for name, path in missing:
        typer.echo(f"warning: sources.{name}: no file at {path}", err=True)
    files = len(tailed_files(cfg))
    if files and len(missing) == files:
        typer.echo(f"error: {config}: none of the {files} configured files exists", err=True)
        raise typer.Exit(1)
    ctrl_c = CtrlC()  # a Ctrl-C before the reading starts is kept until it does; none interrupts the commit
    try:
        store = open_store(cfg)
    except StoreBusy as exc:
        typer.echo(
            f"error: {exc}. A running agent already reads these sources into the store: nothing to"
            " ingest while it runs (query it with `spyglass sql`); stop it first to ingest here",
            err=True,
        )
        raise typer.Exit(1) from None
    except StoreUnusable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        pipeline = Pipeline(cfg, SystemClock(), store)
    except BaseException:
        store.close()
        raise
    tailers = [rt.tailer for rt in pipeline.tailed_sources()]
    before = sum(tailer.stats.lines for tailer in tailers)
    # Events counted from the sources' outcomes, not by a commit hook: with a hook the committer
    # would keep every event of a commit interval in memory even with the store off.
    before_events = sum(rt.outcomes.get("event", 0) for rt in pipeline.sources)
    before_outcomes = {rt.name: (dict(rt.outcomes), rt.tailer.stats.lines) for rt in pipeline.tailed_sources()}
    try:
        with ctrl_c.interrupts():
            pipeline.run_until_idle(poll=poll)
    except KeyboardInterrupt:  # Ctrl-C: close (what was committed stays), say what was read, exit 130
        pass
    finally:
        pipeline.close()
    interrupted = ctrl_c.pressed
    events = [sum(rt.outcomes.get("event", 0) for rt in pipeline.sources) - before_events]
    lines = sum(tailer.stats.lines for tailer in tailers) - before
    stored = "stored" if cfg.exporters.store.enabled else "counted (store off)"
    typer.echo(
        f"{'interrupted: ' if interrupted else ''}read {lines:,} lines from {files - len(missing)} of {files}"
        f" files; {events[0]:,} events {stored}; {len(cfg.sources)} sources"
        f"{'; the next ingest goes on from the last commit' if interrupted else ''}"
    )
    from spyglass.cli.checklog import unread_summary

    said = unread_summary(pipeline, before_outcomes)
    if said:
        typer.echo(said)
    for name, segments in unsettled_segments(pipeline).items():
        settle = cfg.sources[name].settle_seconds
        typer.echo(
            f"skipped {len(segments)} unsettled segment{'s' * (len(segments) != 1)} of sources.{name}"
            f" (changed within settle_seconds {settle:g} s; run again later, or --settled-seconds 0 for a"
            f" copy): {', '.join(segments[:5])}{' ...' if len(segments) > 5 else ''}",
            err=True,
        )
    if interrupted:
        raise typer.Exit(130)


def check_log(
    file: Annotated[
        Path,
        typer.Argument(
            help="A log file: llama-server's (any build since 2024, plain or as"
            " journald, syslog, docker or router mode captured it) or Strata's."
        ),
    ],
    preset: Annotated[
        str | None,
        typer.Option(
            help="The engine log's preset (llama_server, strata, or another registered one); default: the one that"
            " reads more of the file's first lines."
        ),
    ] = None,
    tz: Annotated[str, typer.Option(help="IANA zone of stamps that name none.")] = "UTC",
    url: Annotated[
        str | None,
        typer.Option(
            help="llama-server's base URL (http://127.0.0.1:8081): poll its /health, /metrics, /slots and /props"
            " once, as the agent does, and name the fix for each one switched off (/metrics without --metrics)."
        ),
    ] = None,
    catalogue: Annotated[
        str | None,
        typer.Option(
            help="Print the shapes of llama-server's lines this log holds that are neither read nor known, as a"
            " group of the noise catalogue (collectors/llama_shapes.py) named by this text (a recorded build and"
            " mode, or the public log's URL), for review."
        ),
    ] = None,
) -> None:
    """Read a log without a store or a config: the events it yields by kind, the build and capture found, the
    time anchor used, and the shapes of the lines it could not read. Run it first on your own log."""
    from spyglass.cli.checklog import catalogue_group, report
    from spyglass.collectors import preset_names

    if not file.is_file():
        typer.echo(f"error: no file at {file}", err=True)
        raise typer.Exit(2)
    if preset is not None and preset not in preset_names("engine_log"):
        typer.echo(f"error: --preset: no preset {preset!r}; the presets are: {', '.join(preset_names('engine_log'))}")
        raise typer.Exit(2)
    if catalogue is not None:
        typer.echo(catalogue_group(file, catalogue, tz))
        return
    text, _ = report(file, preset, tz, url=url)
    typer.echo(text)


def smoke(
    url: Annotated[str, typer.Option(help="The serve's base URL, e.g. http://127.0.0.1:8081.")],
    samples: Annotated[Path, typer.Option(help="Fixed samples, one JSON request a line.")],
    baseline: Annotated[Path | None, typer.Option(help="A baseline written by --record.")] = None,
    record: Annotated[Path | None, typer.Option(help="Write this run's TTFTs as the baseline, if it passes.")] = None,
    budget: Annotated[float, typer.Option(help="Seconds to wait for /health (the probe budget).")] = 600.0,
    factor: Annotated[float, typer.Option(help="A TTFT above this times the baseline fails.")] = 2.0,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Record the result in this agent's store, as a deploy event.")
    ] = None,
    instance: Annotated[
        str | None,
        typer.Option(help="The instance it gates (default: the config's serve_status source polling --url)."),
    ] = None,
) -> None:
    """The deploy gate: wait for /health within the budget, send fixed samples, check status, shape, finish
    reason and TTFT against the baseline; exit 1 with the reason on a regression, 2 on a bad samples file.
    With --config the result is stored as an event (through the running agent, else in a store no process holds)."""
    import json
    import time

    from spyglass.upgrades.smoke import SamplesError, load_samples
    from spyglass.upgrades.smoke import smoke as run_smoke

    try:
        loaded = load_samples(samples)
        base = json.loads(baseline.read_text()) if baseline else None
    except (SamplesError, OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    cfg = None
    if config is not None:
        from spyglass.upgrades.smoke_event import instance_for

        cfg = read_config(config)
        instance = instance or instance_for(cfg, url)
        if not instance:
            typer.echo(
                f"error: --instance: no serve_status source of {config} polls {url}; say which instance"
                " the gate is for",
                err=True,
            )
            raise typer.Exit(2)
    verdict = run_smoke(url, loaded, base, budget, factor)
    if cfg is not None and instance:
        from spyglass.upgrades.smoke_event import NotRecorded, result_of
        from spyglass.upgrades.smoke_event import record as store_result

        try:
            how = store_result(cfg, result_of(verdict, instance, url, samples, time.time()))
            typer.echo(f"smoke result for {instance} {how}", err=True)
        except NotRecorded as exc:
            typer.echo(f"warning: smoke result NOT recorded: {exc}", err=True)
    if not verdict.ok:
        typer.echo(f"smoke failed: {verdict.reason}", err=True)
        raise typer.Exit(1)
    if record:
        record.write_text(json.dumps(verdict.baseline(), indent=1) + "\n")
    typer.echo(f"smoke passed: {verdict.reason} (ready after {verdict.waited_seconds:.1f} s)")


def demo(
    seconds: Annotated[float, typer.Option(help="Stop after this long; 0 runs until Ctrl-C.")] = 0.0,
    listen: Annotated[str, typer.Option(help="host:port for /metrics.")] = "127.0.0.1:9464",
    scenario: Annotated[
        str | None, typer.Option(help="Run one scenario (healthy, eviction-storm, ...) instead of the mix.")
    ] = None,
    keep: Annotated[
        Path | None,
        typer.Option(help="Run in this new or empty folder and keep the stack's logs, the store and its config there."),
    ] = None,
) -> None:
    """Run the emulated stack under supervisord with incident scenarios, and the agent on it."""
    from spyglass.agent.server import ListenError
    from spyglass.cli.demo import run_demo

    try:
        run_demo(seconds=seconds, listen=listen, scenario=scenario, keep=keep)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ListenError as exc:
        typer.echo(f"error: {exc}; give --listen a free host:port (e.g. --listen 127.0.0.1:9465)", err=True)
        raise typer.Exit(1) from None
