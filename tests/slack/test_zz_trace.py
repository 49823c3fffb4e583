import re
from collections import Counter
import pytest
from tests.slack.test_cost_counts import mention_and_click

def summarize(data: bytes) -> str:
    parts = data.split(b"\r\n")
    # RESP arrays: *N then $len then value
    cmds = []
    i = 0
    while i < len(parts):
        if parts[i].startswith(b"*"):
            n = int(parts[i][1:]); args = []
            j = i + 1
            for _ in range(n):
                if j + 1 < len(parts):
                    args.append(parts[j + 1][:60].decode(errors="replace"))
                j += 2
            cmds.append(" ".join(args[:4]))
            i = j
        else:
            i += 1
    return " | ".join(cmds)

@pytest.mark.real_redis
@pytest.mark.redis_kinds("single")
async def test_trace(proxied_redis, harness):
    client, proxy = proxied_redis
    async with harness(client, subscriptions=("app_mention",)) as h:
        await mention_and_click(h, 0)
        calls_before = len(h.ws.calls())
        proxy.trace = []
        await mention_and_click(h, 1)
        for c in h.ws.calls()[calls_before:]:
            print("WEB", c.method)
        for t in proxy.trace:
            print("RT", summarize(t))
        print("TOTAL", len(proxy.trace))
