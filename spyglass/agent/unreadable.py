"""The running agent says once, in its log, when a source's lines turn unreadable: the share of
SpyglassSourceUnreadable (H19's `unreadable_share` over at least `unreadable_lines` lines) crossed, measured
over the lines read since the last look, so a log that reads well for a day and then breaks is noticed as
soon as the rule would be. Said again only after the source read well once more (a crossing, not a level)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loguru import logger

UNREADABLE = ("unmatched", "unprefixed")  # collectors.grammar.Miss: the rule's numerator


@dataclass
class UnreadableWatch:
    share: float  # H19's unreadable_share
    lines: int  # H19's unreadable_lines: fewest lines for a share to count
    marks: dict[str, tuple[int, int]] = field(default_factory=dict)  # source -> (lines, unreadable) at the last look
    over: set[str] = field(default_factory=set)  # sources said to be over the threshold

    def look(self, source: str, outcomes: dict[str, int], hint: str) -> str | None:
        """The line said (and logged) when `source`'s share since the last look crossed the threshold."""
        total = sum(outcomes.values())
        unread = sum(outcomes.get(o, 0) for o in UNREADABLE)
        seen, seen_unread = self.marks.setdefault(source, (total, unread))
        if total - seen < self.lines:
            return None
        self.marks[source] = (total, unread)
        share = (unread - seen_unread) / (total - seen)
        if share <= self.share:
            self.over.discard(source)
            return None
        if source in self.over:
            return None
        self.over.add(source)
        said = (
            f"sources.{source}: {unread - seen_unread:,} of {total - seen:,} lines unreadable ({share:.0%}, over"
            f" {self.share:.0%}: SpyglassSourceUnreadable will fire); run `{hint}` to see their shapes"
        )
        logger.warning(said)
        return said
