"""Statistics building blocks: a fixed-bucket histogram, per-graph run counters, and the ``geasync`` logger.

Everything here is updated on the loop's (or caller's) thread with plain integer operations: cheap enough for
every run, and read as consistent snapshots by ``Session.statistics()`` and ``Batcher.statistics()``.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence

logger = logging.getLogger("geasync")
"""geasync's logger: session and graph lifecycle (DEBUG), slow and abandoned runs (WARNING), a stopped async queue
(ERROR). Nothing is logged on a run's hot path; enable with ``logging.getLogger("geasync").setLevel(logging.DEBUG)``."""

# A graph's slow runs (over the session's ``slow_after``) are logged at most once per this many seconds: when every
# run turns slow (an overload), a line per run would add to the load it reports.
SLOW_LOG_INTERVAL = 1.0

# Latency buckets (seconds): 25 us .. 10 s, roughly x2 apart, as Prometheus histograms expect (upper bounds).
LATENCY_BUCKETS: tuple[float, ...] = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
                                      50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0)

now = time.perf_counter


class Histogram:
    """Counts of observations per bucket (``bounds`` are upper bounds; one overflow bucket), with their sum."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def observe_since(self, end: float, starts: Sequence[float]) -> None:
        """Observes ``end - start`` for each of ``starts``, in ascending order (a batch's queueing delays, taken in
        queue order), in one call: one search per bucket instead of one per value."""
        n = len(starts)
        counts = self.counts
        at_most = 0  # values <= the bound before
        for i, bound in enumerate(self.bounds):
            if at_most == n:
                break
            within = n - bisect.bisect_left(starts, end - bound)  # end - start <= bound <=> start >= end - bound
            counts[i] += within - at_most
            at_most = within
        counts[-1] += n - at_most
        self.total += n * end - sum(starts)
        self.count += n

    def snapshot(self) -> "HistogramSnapshot":
        return HistogramSnapshot(self.bounds, tuple(self.counts), self.total, self.count)


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram at one moment: ``counts[i]`` observations were <= ``bounds[i]`` (and above the bound before);
    the last count is the overflow. ``quantile(q)`` estimates from the buckets (an upper bound)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]  # one more than bounds: the overflow
    sum: float
    count: int

    def quantile(self, q: float) -> Optional[float]:
        """The upper bound of the bucket holding the ``q`` quantile (``q`` in [0, 1]); None with no run yet."""
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
            raise ValueError(f"HistogramSnapshot.quantile: q must be a number in [0, 1] (0.99 for p99), got {q!r}")
        if not self.count:
            return None
        rank = q * self.count
        seen = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):  # the overflow count has no bound
            seen += n
            if seen >= rank:
                return bound
        return float("inf")

    @property
    def mean(self) -> Optional[float]:
        return self.sum / self.count if self.count else None

    def as_dict(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.sum, "count": self.count}


_SNAPSHOT_TRIES = 100  # readings of a graph's counters at once, then for at most _SNAPSHOT_PATIENCE seconds
_SNAPSHOT_PATIENCE = 0.05  # before statistics() gives the last reading as it is


class GraphCounters:
    """One graph's runs in every mode (the session keeps one per graph id). A run is counted ``submitted`` when
    geasync takes it, then ends in exactly one of completed / failed / cancelled; meanwhile it is waiting (for a
    slot, or the graph's first compile; tracked with when it began to wait) or in flight (with the runtime, tracked
    with its start time for the oldest age and ``abandoned``). ``label`` names the session and graph in log lines;
    a completed run slower than ``slow_after`` seconds (inf: never) is reported with ``report_slow``."""

    __slots__ = ("submitted", "completed", "failed", "cancelled", "waiters", "live", "latency", "label",
                 "slow_after", "slow_quiet_until", "slow_unreported")

    def __init__(self, label: str = "", slow_after: float = math.inf) -> None:
        self.submitted = 0
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.waiters: dict[Any, float] = {}  # waiting request key -> when it began to wait
        self.live: dict[Any, float] = {}  # run key -> start time; insertion order is start order
        self.latency = Histogram()
        self.label = label
        self.slow_after = slow_after
        self.slow_quiet_until = 0.0  # no slow-run line before then (SLOW_LOG_INTERVAL)
        self.slow_unreported = 0  # slow runs since the last line

    @property
    def waiting(self) -> int:
        return len(self.waiters)

    def pending(self) -> int:
        """Runs waiting or in flight."""
        return len(self.live) + len(self.waiters)

    def start(self, key: Any) -> None:
        self.live[key] = now()

    def finish(self, key: Any, outcome: str) -> Optional[float]:
        """``outcome``: "completed", "failed" or "cancelled". Returns a completed run's latency (else None), for
        the caller to compare with ``slow_after`` once it holds no lock."""
        started = self.live.pop(key, None)
        if outcome == "completed":
            self.completed += 1
            if started is not None:
                latency = now() - started
                self.latency.observe(latency)
                return latency
        elif outcome == "failed":
            self.failed += 1
        else:
            self.cancelled += 1
        return None

    def check_slow(self, latency: Optional[float]) -> None:
        if latency is not None and latency > self.slow_after:
            self.report_slow(latency)

    def report_slow(self, latency: float) -> None:
        """A completed run took ``latency`` seconds, over ``slow_after``: a WARNING, at most one per
        SLOW_LOG_INTERVAL for the graph; the next line counts the slow runs left out meanwhile."""
        t = now()
        if t < self.slow_quiet_until:
            self.slow_unreported += 1
            return
        more, self.slow_unreported = self.slow_unreported, 0
        self.slow_quiet_until = t + SLOW_LOG_INTERVAL
        if more:
            logger.warning("%s: a run took %.3f s, over slow_after (%g s); %d more slow runs in the %g s before it",
                           self.label, latency, self.slow_after, more, SLOW_LOG_INTERVAL)
        else:
            logger.warning("%s: a run took %.3f s, over slow_after (%g s)", self.label, latency, self.slow_after)

    def drained(self) -> bool:
        """No run is waiting or in flight, and the counters add up (no step caught half-way)."""
        return (not self.live and not self.waiters
                and self.submitted == self.completed + self.failed + self.cancelled)

    def absorb(self, other: "GraphCounters") -> None:
        """Adds a drained graph's counts and latencies to these (a removed graph's, kept in the session's totals)."""
        self.submitted += other.submitted
        self.completed += other.completed
        self.failed += other.failed
        self.cancelled += other.cancelled
        mine, theirs = self.latency, other.latency
        mine.counts = [a + b for a, b in zip(mine.counts, theirs.counts, strict=True)]
        mine.total += theirs.total
        mine.count += theirs.count

    def snapshot(self, graph_id: int, abandon_after: float) -> "GraphStatistics":
        # An event loop's thread counts its runs without a lock, and one step of a run changes two counters
        # (submitted, then waiting or in flight; completed, then no longer in flight). Read from another thread (a
        # metrics scrape), the counters may be caught between the two: read again, letting that thread finish its
        # step (sleep(0) releases the GIL), until they add up. On the loop's own thread they always do. A step may
        # hold a native call without the GIL (a graph's first run checks whether it needs a compile; a loop's first
        # run makes its completion queue), longer than the quick tries: then wait for it, a bounded time.
        tries, deadline = 0, 0.0
        while True:
            submitted = self.submitted
            starts = list(self.live.values())
            waits = list(self.waiters.values())
            completed, failed, cancelled = self.completed, self.failed, self.cancelled
            if submitted == self.submitted and submitted == completed + failed + cancelled + len(starts) + len(waits):
                break
            tries += 1
            if tries < _SNAPSHOT_TRIES:
                time.sleep(0)
                continue
            if not deadline:
                deadline = now() + _SNAPSHOT_PATIENCE
            elif now() > deadline:
                break
            time.sleep(0.0001)
        t = now()
        oldest = t - min(starts) if starts else None
        oldest_waiting = t - min(waits) if waits else None
        abandoned = sum(1 for s in starts if t - s >= abandon_after)
        return GraphStatistics(graph_id, submitted, completed, failed, cancelled, len(starts), len(waits), abandoned,
                               oldest, self.latency.snapshot(), oldest_waiting)


@dataclass(frozen=True)
class GraphStatistics:
    """One graph's runs (all modes). ``submitted == completed + failed + cancelled + in_flight + waiting``;
    ``abandoned`` counts the runs in flight for longer than the session's ``abandon_after`` (their completion never
    came: a lost callback), ``oldest_age`` is the age in seconds of the oldest run in flight (since it reached the
    runtime) and ``oldest_waiting_age`` how long the longest-waiting request has waited for a slot so far (None:
    none in flight, none waiting)."""

    graph_id: int
    submitted: int
    completed: int
    failed: int
    cancelled: int
    in_flight: int
    waiting: int
    abandoned: int
    oldest_age: Optional[float]
    latency: HistogramSnapshot
    oldest_waiting_age: Optional[float] = None  # last, with a default: GraphStatistics was positional before it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def merged_histogram(snapshots: Sequence[HistogramSnapshot]) -> HistogramSnapshot:
    if not snapshots:
        return Histogram().snapshot()
    counts = [sum(c) for c in zip(*(s.counts for s in snapshots), strict=True)]
    return HistogramSnapshot(snapshots[0].bounds, tuple(counts), sum(s.sum for s in snapshots),
                             sum(s.count for s in snapshots))


_EMPTY = Histogram().snapshot()


def empty_histogram() -> HistogramSnapshot:
    return _EMPTY


__all__ = ["logger", "Histogram", "HistogramSnapshot", "GraphCounters", "GraphStatistics", "LATENCY_BUCKETS"]


@dataclass(frozen=True)
class SessionStatistics:
    """A snapshot of a session's runs in every mode (``Session.statistics()``): totals over every graph the session
    has run, those in ``graphs`` (the graphs added now) and those removed since (a removed graph leaves ``graphs``;
    its runs stay counted here, so no total ever goes down).

    ``submitted == completed + failed + cancelled + in_flight + waiting``: a run is submitted when geasync takes it
    (after its arguments and run mode are checked); ``waiting`` is for a slot (``max_in_flight``, or the 32-callback
    bound of a dynamic-shape graph); ``in_flight`` is with the runtime (RunGraphAsync, stream-mode runs until the
    stream passes them, synchronous and in-thread runs while they run); ``failed`` includes runs the runtime
    refused at submit; ``cancelled`` counts runs whose caller gave up (cancelled, timed out) before they ran or
    before their completion arrived. ``abandoned`` counts runs in flight for longer than the session's
    ``abandon_after`` seconds (a callback that never came); they stay in ``in_flight``. ``oldest_age`` is the
    age in seconds of the oldest run in flight (since it reached the runtime), ``oldest_waiting_age`` how long the
    longest-waiting request has waited for a slot so far (None when there is none: a stuck runtime shows in the
    first, starved requests in the second), ``latency`` the histogram of completed runs' latencies (from reaching
    the runtime).
    """

    in_flight: int
    waiting: int
    completed: int
    failed: int
    cancelled: int
    pinned_bytes: int
    max_in_flight: int
    submitted: int = 0
    abandoned: int = 0
    oldest_age: Optional[float] = None
    latency: HistogramSnapshot = field(default_factory=empty_histogram)
    graphs: dict[int, GraphStatistics] = field(default_factory=dict)  # graph id -> GraphStatistics
    oldest_waiting_age: Optional[float] = None

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON-serialisable): histograms as bounds and counts, graphs keyed by their id."""
        return asdict(self)
