"""What Prometheus reads of the chat's LLM side when it scrapes (`core.metrics`): the queue of chat
turns (waiting, in prefill, streaming) and each LLM server's slots. Registered on
`core.metrics.REGISTRY` by `ChatConfig.ready()`."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from chat.llm import clients

logger = logging.getLogger(__name__)


class LLMCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        # A scrape must not fail because the queue's Redis is down: the health endpoint says that.
        try:
            queue, servers = clients.llm_queue().snapshot(), clients.server_pool().status()
        except Exception as error:
            logger.warning("metrics: the LLM queue could not be read: %s", type(error).__name__)
            return
        waiting = GaugeMetricFamily("hdrag_chat_turns_queued", "Chat turns waiting for the LLM.")
        waiting.add_metric([], queue["waiting"])
        yield waiting
        running = GaugeMetricFamily("hdrag_chat_turns_running", "Chat turns admitted to the LLM, by phase.",
                                    labels=["phase"])
        running.add_metric(["prefill"], queue["prefilling"])
        running.add_metric(["streaming"], queue["streaming"])
        yield running
        busy = GaugeMetricFamily("hdrag_llm_slots_busy", "Slots of each LLM server taken by turns.",
                                 labels=["server", "model"])
        slots = GaugeMetricFamily("hdrag_llm_slots", "Slots of each LLM server.", labels=["server", "model"])
        up = GaugeMetricFamily("hdrag_llm_server_up", "1 while the portal sends turns to the server.",
                               labels=["server", "model"])
        for server in servers:
            labels = [server["url"], server["model"]]
            busy.add_metric(labels, server["busy"])
            slots.add_metric(labels, server["slots"])
            up.add_metric(labels, 1 if server["up"] else 0)
        yield from (busy, slots, up)
