"""A Prometheus collector for geasync statistics (needs ``prometheus-client``: ``pip install geasync[prometheus]``).

    from prometheus_client import REGISTRY
    from geasync.prometheus import GeasyncCollector
    REGISTRY.register(GeasyncCollector(session, batchers={"mlp": batcher}))

Every scrape reads ``session.statistics()`` (and each batcher's) afresh: per graph, counters of submitted,
completed, failed and cancelled runs, gauges of runs in flight, waiting and abandoned, of the oldest run's age and
of the longest wait for a slot, and the run latency histogram; per batcher, the batch-size and queueing-delay
histograms.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ._stats import HistogramSnapshot
from .batcher import Batcher
from .session import Session

__all__ = ["GeasyncCollector"]


def _buckets(h: HistogramSnapshot) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    seen = 0
    for bound, n in zip(h.bounds, h.counts, strict=False):  # the overflow count has no bound: +Inf below
        seen += n
        out.append((repr(float(bound)), seen))
    out.append(("+Inf", h.count))
    return out


class GeasyncCollector(Collector):
    """Exports a session's statistics (per graph) and, optionally, named batchers' statistics. ``labels`` are
    added to every series; "graph", "batcher" and "le" are the collector's own (ValueError)."""

    def __init__(self, session: Session, *, batchers: Optional[Mapping[str, Batcher]] = None,
                 labels: Optional[Mapping[str, str]] = None, prefix: str = "geasync") -> None:
        # checked here, like the labels below: otherwise registering it, and every scrape, fails with an
        # AttributeError from inside collect()
        if not isinstance(session, Session):
            raise TypeError(f"GeasyncCollector: session must be a geasync.Session, got {type(session).__name__}")
        self.session = session
        self.batchers = dict(batchers or {})
        self.labels = dict(labels or {})
        # a "graph" label would replace the graph id of every series, leaving several graphs' series with one label
        # set (a scrape Prometheus refuses); "batcher" likewise, and "le" is the histograms' bucket label
        reserved = sorted({"graph", "batcher", "le"}.intersection(self.labels))
        if reserved:
            raise ValueError(f"GeasyncCollector(labels=...): {reserved} are labels the collector sets itself "
                             "('graph': the graph id, 'batcher': the batcher's name, 'le': histogram buckets); "
                             "give yours another name, such as 'model'")
        # checked here: prometheus_client takes any object and fails only in the exposition, so every scrape would
        # fail with an AttributeError far from the cause
        for key, value in self.labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"GeasyncCollector(labels=...): label names and values must be str, got {key!r}: "
                                f"{value!r} (pass str(value))")
        for name, batcher in self.batchers.items():
            if not isinstance(name, str):
                raise TypeError(f"GeasyncCollector(batchers=...): batcher names are the 'batcher' label's values "
                                f"and must be str, got {name!r} (pass str(name))")
            if not isinstance(batcher, Batcher):
                raise TypeError(f"GeasyncCollector(batchers=...): {name!r} must map to a geasync.Batcher, got "
                                f"{type(batcher).__name__}")
        if not isinstance(prefix, str):
            raise TypeError(f"GeasyncCollector(prefix=...): prefix must be a str, got {prefix!r}")
        self.prefix = prefix

    def collect(self) -> Iterator[Any]:
        p = self.prefix
        names = ["graph", *self.labels]
        extra = list(self.labels.values())
        st = self.session.statistics()
        counters = {k: CounterMetricFamily(f"{p}_runs_{k}", f"runs {k} (all modes)", labels=names)
                    for k in ("submitted", "completed", "failed", "cancelled")}
        gauges = {k: GaugeMetricFamily(f"{p}_runs_{k}", f"runs {k.replace('_', ' ')} now", labels=names)
                  for k in ("in_flight", "waiting", "abandoned")}
        oldest = GaugeMetricFamily(f"{p}_oldest_run_age_seconds", "age of the oldest run in flight", labels=names)
        waited = GaugeMetricFamily(f"{p}_oldest_waiting_age_seconds",
                                   "how long the longest-waiting request has waited for a slot", labels=names)
        latency = HistogramMetricFamily(f"{p}_run_latency_seconds", "latency of completed runs", labels=names)
        for gid, g in sorted(st.graphs.items()):
            values = [str(gid), *extra]
            for k, family in counters.items():
                family.add_metric(values, getattr(g, k))
            for k, gauge in gauges.items():
                gauge.add_metric(values, getattr(g, k))
            oldest.add_metric(values, g.oldest_age if g.oldest_age is not None else 0.0)
            waited.add_metric(values, g.oldest_waiting_age if g.oldest_waiting_age is not None else 0.0)
            latency.add_metric(values, _buckets(g.latency), g.latency.sum)
        yield from counters.values()
        yield from gauges.values()
        yield oldest
        yield waited
        yield latency
        pinned = GaugeMetricFamily(f"{p}_pinned_input_bytes", "input bytes pinned by runs in flight",
                                   labels=list(self.labels))
        pinned.add_metric(extra, st.pinned_bytes)
        yield pinned
        if self.batchers:
            yield from self._collect_batchers()

    def _collect_batchers(self) -> Iterator[Any]:
        p = self.prefix
        names = ["batcher", *self.labels]
        extra = list(self.labels.values())
        requests = {k: CounterMetricFamily(f"{p}_batcher_requests_{k}", f"batcher requests {k}", labels=names)
                    for k in ("submitted", "completed", "failed", "cancelled")}
        queued = GaugeMetricFamily(f"{p}_batcher_queued", "requests queued for a batch", labels=names)
        sizes = HistogramMetricFamily(f"{p}_batch_size_rows", "rows per batch run", labels=names)
        delay = HistogramMetricFamily(f"{p}_batcher_queue_delay_seconds", "time requests spent queued",
                                      labels=names)
        for name, batcher in self.batchers.items():
            st = batcher.statistics()
            values = [name, *extra]
            for k, family in requests.items():
                family.add_metric(values, getattr(st, k))
            queued.add_metric(values, st.queued)
            sizes.add_metric(values, _buckets(st.batch_size), st.batch_size.sum)
            delay.add_metric(values, _buckets(st.queue_delay),
                             st.queue_delay.sum if math.isfinite(st.queue_delay.sum) else 0.0)
        yield from requests.values()
        yield queued
        yield sizes
        yield delay
