"""What a corpus reader keeps of each pair, and the counts of one pass.

`PairFilter` strips, skips empty pairs, and skips or truncates over-long
ones; `CorpusStats` counts what it did, so that nothing is dropped silently.
Pure Python; `keras_transformer.data.corpus`'s readers apply them.
"""

import dataclasses


@dataclasses.dataclass
class CorpusStats:
    """Counts of one pass over a corpus.

    `read` pairs were read; `kept` were yielded (truncated ones included);
    `skipped_empty` had an empty side; `skipped_long` had a side longer than
    `max_chars` with `on_long="skip"`; `truncated` were shortened with
    `on_long="truncate"`.
    """

    read: int = 0
    kept: int = 0
    skipped_empty: int = 0
    skipped_long: int = 0
    truncated: int = 0

    @property
    def skipped(self):
        return self.skipped_empty + self.skipped_long

    def __str__(self):
        return (
            f"read {self.read}, kept {self.kept}, "
            f"skipped {self.skipped_empty} empty and {self.skipped_long} "
            f"over-long, truncated {self.truncated}"
        )


@dataclasses.dataclass(frozen=True)
class PairFilter:
    """What to do with empty and over-long pairs.

    Args:
        max_chars: longest side allowed, in characters (None: no limit).
        on_long: `"skip"` drops a pair with a side over `max_chars`;
            `"truncate"` cuts that side to `max_chars` characters.
        skip_empty: drop pairs whose source or target is empty (after
            stripping); if False they are kept.
        strip: strip surrounding whitespace from both sides.
    """

    max_chars: int | None = None
    on_long: str = "skip"
    skip_empty: bool = True
    strip: bool = True

    def __post_init__(self):
        if self.on_long not in ("skip", "truncate"):
            raise ValueError(
                f"on_long must be 'skip' or 'truncate', got {self.on_long!r}"
            )
        if self.max_chars is not None and (
            isinstance(self.max_chars, bool)
            or not isinstance(self.max_chars, int)
            or self.max_chars < 1
        ):
            raise ValueError(
                f"max_chars must be a positive integer or None, "
                f"got {self.max_chars!r}"
            )

    def apply(self, source, target, stats):
        """Returns the pair to keep, or None; updates `stats`."""
        stats.read += 1
        if self.strip:
            source, target = source.strip(), target.strip()
        if self.skip_empty and (not source or not target):
            stats.skipped_empty += 1
            return None
        limit = self.max_chars
        if limit is not None and (len(source) > limit or len(target) > limit):
            if self.on_long == "skip":
                stats.skipped_long += 1
                return None
            source, target = source[:limit], target[:limit]
            if self.strip:
                source, target = source.rstrip(), target.rstrip()
            stats.truncated += 1
        stats.kept += 1
        return source, target
