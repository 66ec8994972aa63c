"""A fault-injecting HTTP reverse proxy: the sandbox's faults in front of any destination.

A real CRM cannot be told to time out after it committed, so the tests, the drill and the soak
reach it through this proxy and arm the faults here instead:

    python -m harness.faultproxy --upstream http://127.0.0.1:8000 --port 0 \\
        --target crm.create="POST /api/cases/" --target crm.lookup="GET /api/cases/"

    with FaultProxy(bottlecrm_url, targets={"crm.create": "POST /api/cases/"}) as proxy:
        proxy.fault("crm.create", "drop_after_forward")
        ...  # point the code under test at proxy.url

Every request outside ``/_proxy/`` is forwarded to the one upstream (method, path, query,
headers including Authorization, body; Host rewritten, hop-by-hop headers dropped) and its
answer passed back, unless a fault armed for its target fires. ``/_proxy/`` is the control API
(faults, stats, release, reset), shaped like the sandbox's ``/_sandbox/``. See docs/sandbox.md,
"The fault proxy", for the modes and what each proves.

The proxy never turns "unknown" into "refused": an upstream it cannot connect to gets the client
a 502 (nothing was sent), but an upstream that took the request and then failed to answer gets
the client a dropped connection, as a caller talking to the upstream directly would see.

- ``faults``: targets, modes, armed faults and counters;
- ``server``: the threaded HTTP server (standard library only), bound only to loopback, and
  its command line; ``relay``: its handler, forwarding and applying the faults; ``control``:
  the ``/_proxy/`` API; ``upstream``: one request to the upstream;
- ``process``: ``FaultProxy``, the server as a child process.
"""

from harness.faultproxy.faults import MODES
from harness.faultproxy.process import FaultProxy, FaultProxyError
from harness.faultproxy.server import loopback_host

__all__ = ["MODES", "FaultProxy", "FaultProxyError", "loopback_host"]
