"""Reading a bot's ``/metrics`` (and ``/healthz``, ``/readyz``) over HTTP in tests: :func:`scrape` returns the
samples, :class:`Samples` tells how far each moved since an earlier scrape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, frozenset[tuple[str, str]]]


@dataclass(frozen=True)
class Samples:
    """One scrape: ``{(sample name, labels): value}``."""

    values: dict[Key, float]

    def get(self, name: str, **labels: str) -> float:
        """The sample ``name`` with exactly ``labels`` (0 when absent)."""
        return self.values.get((name, frozenset(labels.items())), 0.0)

    def since(self, earlier: Samples, name: str, **labels: str) -> float:
        """How far sample ``name`` with ``labels`` moved since ``earlier``."""
        return self.get(name, **labels) - earlier.get(name, **labels)

    def names(self) -> set[str]:
        return {name for name, _ in self.values}


def parse(text: str) -> Samples:
    """The samples of a Prometheus text exposition."""
    values: dict[Key, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return Samples(values)


async def get(base_url: str, path: str) -> tuple[int, str, dict[str, Any]]:
    """``GET base_url + path``: (status, body text, headers)."""
    async with aiohttp.ClientSession() as session, session.get(base_url.rstrip("/") + path) as response:
        return response.status, await response.text(), dict(response.headers)


async def scrape(base_url: str) -> Samples:
    """``GET /metrics`` at ``base_url`` (e.g. ``http://127.0.0.1:3000``), parsed. Raises ``AssertionError`` when the
    answer is not a 200 in Prometheus's text format."""
    status, text, headers = await get(base_url, "/metrics")
    assert status == 200, text
    assert headers.get("Content-Type", "").startswith("text/plain"), headers
    return parse(text)
