"""What Prometheus reads of builds and source syncs when it scrapes (`core.metrics`), from the
database, so every web process reports the same numbers whichever worker ran the job. Registered on
`core.metrics.REGISTRY` by `CorpusConfig.ready()`."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, DurationField, ExpressionWrapper, F, Sum
from prometheus_client.core import GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from corpus.models import IndexBuild
from corpus.sources.models import Source


class BuildsCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily | SummaryMetricFamily]:
        durations = SummaryMetricFamily(
            "hdrag_build_duration_seconds", "Ended builds and appends (kind) by how they ended (status): "
            "count and total seconds from start to end.", labels=["kind", "status"])
        ended = (IndexBuild.objects.filter(started__isnull=False, finished__isnull=False)
                 .values("kind", "status")
                 .annotate(count=Count("id"), seconds=Sum(ExpressionWrapper(F("finished") - F("started"),
                                                                             output_field=DurationField())))
                 .order_by())
        for row in ended:
            total = row["seconds"].total_seconds() if row["seconds"] is not None else 0.0
            durations.add_metric([row["kind"], row["status"]], count_value=row["count"], sum_value=total)
        yield durations
        active = GaugeMetricFamily("hdrag_builds_active", "Builds and appends queued or running.",
                                   labels=["kind", "status"])
        for row in (IndexBuild.objects.filter(status__in=IndexBuild.ACTIVE_STATUSES)
                    .values("kind", "status").annotate(count=Count("id")).order_by()):
            active.add_metric([row["kind"], row["status"]], row["count"])
        yield active
        syncs = SummaryMetricFamily(
            "hdrag_source_last_sync_seconds", "Sources by the state of their last sync (status): count, and "
            "the seconds their last syncs took, added up.", labels=["kind", "status"])
        for row in (Source.objects.values("kind", "status")
                    .annotate(count=Count("id"), seconds=Sum("sync_seconds")).order_by()):
            syncs.add_metric(
                [row["kind"], row["status"]], count_value=row["count"], sum_value=row["seconds"] or 0.0
            )
        yield syncs
