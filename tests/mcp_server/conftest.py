"""The MCP server's tests: a module declaring ``REDIS_ENV`` (see ``tests/mcp_server/mcp_support.py``) gets this
test's real Redis's environment in it, for the server processes it starts."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _module_redis_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fill the test module's ``REDIS_ENV`` (when it declares one) with ``real_redis_env``."""
    if isinstance(getattr(request.module, "REDIS_ENV", None), dict):
        monkeypatch.setattr(request.module, "REDIS_ENV", request.getfixturevalue("real_redis_env"))
