"""A log whose lines start with a naive date-time in a known zone: the generic parser.

`DatedLogParser` turns a line into an Event with the Grammar (anchored prefix, then message
kinds) and the source's zone; `handle_lines` is the batch loop every line source shares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from spyglass.collectors.clock import MICROS, ZonedParser, fraction_micros
from spyglass.collectors.event import Event
from spyglass.collectors.grammar import Grammar, LineKind, Miss


class DatedLogParser:
    """parse_line(bytes) -> Event | Miss, with no I/O and no clock."""

    def __init__(
        self,
        prefix: str,
        kinds: Iterable[LineKind],
        tz: str,
        source: str,
        instance: str,
        host: str = "",
        ignore_levels: Iterable[str] = (),
        error_level: str | None = None,
    ) -> None:
        self.grammar = Grammar(prefix, kinds, ignore_levels=ignore_levels, error_level=error_level)
        self.clock = ZonedParser(tz)
        self.source, self.instance, self.host = source, instance, host

    def parse_line(self, line: bytes) -> Event | str:
        found = self.grammar.match(line)
        if isinstance(found, str):
            return found
        head, kind, fields = found
        return self.event(head.group("ts"), kind, fields, fraction_micros(head.groupdict().get("ms")))

    def event(self, stamp: bytes, kind: str, fields: dict[str, Any], micros: int) -> Event | str:
        """The Event of a line, stamped `micros` microseconds into its second."""
        try:
            # float() first, as the columnar path's cast: int / int rounds once, and differs past 2**53 us (year 2255).
            ts = float(self.clock.micros(stamp, micros)) / MICROS
        except ValueError:  # e.g. month 13: the prefix shape matched, the date did not
            return Miss.UNMATCHED
        return Event(
            ts, self.source, kind, fields.get("instance") or self.instance, fields, fields.get("req"), self.host
        )


def handle_lines(
    handle: Callable[[bytes], Event | str], lines: list[bytes]
) -> tuple[list[Event], dict[str, int], bytes]:
    """Events of a batch of lines, the count of each Miss (Miss.invalid(field) included), and the
    last unmatched line."""
    events: list[Event] = []
    misses = {Miss.IGNORED: 0, Miss.UNMATCHED: 0, Miss.UNPREFIXED: 0}
    unmatched = b""
    for line in lines:
        result = handle(line)
        if isinstance(result, str):
            try:
                misses[result] += 1
            except KeyError:  # Miss.invalid(field): one key per field name
                misses[result] = 1
            if result == Miss.UNMATCHED:
                unmatched = line
        else:
            events.append(result)
    return events, misses, unmatched[:512]
