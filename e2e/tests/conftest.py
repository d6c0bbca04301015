"""Fixtures of the scenario and fault tests, and the figures table at the end of the run.

``fitgate_installed``: fitgate installed with its Helm chart in local development mode and
``fitgate serve`` running as the chart's ServiceAccount (``e2e/scenarios/fitgate.py``);
uninstalled after the test. The scenarios record their measured figures
(``e2e/scenarios/figures.py``); the terminal summary prints them as one table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from e2e import harness
from e2e.cluster.local import cluster
from e2e.scenarios import figures, fitgate


@pytest.fixture
async def fitgate_installed(e2e: harness.Harness, local_cluster: cluster.LocalCluster
                            ) -> AsyncIterator[fitgate.Fitgate]:
    fg = fitgate.Fitgate(e2e, local_cluster)
    try:
        await fg.install()
        yield fg
    finally:
        await fg.uninstall()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    text = figures.table()
    if text:
        terminalreporter.section("fitgate e2e figures")
        terminalreporter.write_line(text)
        for line in figures.details():
            terminalreporter.write_line(line)
