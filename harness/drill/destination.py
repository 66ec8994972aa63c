"""Where the drill's writes land, and how it counts them: the destination's own records.

A sandbox answers its control plane (faults, capabilities, stats per reference). A real CRM is
reached through the fault proxy and counted through its kind's own look-up: that destination is
``realcrm.ProxiedCrm`` (the same interface).
``Destination`` alone (counting by the ``handover`` contract, no faults) is the base class.
"""

from __future__ import annotations

import requests

from harness.sandbox_process import SandboxProcess


class CannotRun(Exception):
    """This case cannot be run against this destination (the report says why)."""


class Destination:
    can_inject_faults = False

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.trust_env = False

    def describe(self) -> str:
        return self.url

    def crm_records(self, reference: str) -> list[dict]:
        response = self.session.get(
            self.url + "/crm/enquiries", params={"reference": reference}, timeout=5
        )
        response.raise_for_status()
        return response.json().get("results", [])

    def records(self, reference: str) -> int:
        return len(self.crm_records(reference))

    def notify_records(self, reference: str) -> int:
        response = self.session.get(
            self.url + "/notify/messages", params={"reference": reference}, timeout=5
        )
        response.raise_for_status()
        return len(response.json().get("results", []))

    def requests_to(self, target: str) -> int | None:
        return None

    def _no_faults(self, *args, **kwargs):
        raise CannotRun(f"{self.url} is not a sandbox: faults cannot be injected into it")

    fault = clear_faults = capabilities = _no_faults

    def close(self):
        self.session.close()


class SandboxDestination(Destination):
    """The sandbox the drill started itself (or a running sandbox it was pointed at)."""

    can_inject_faults = True

    def __init__(self, sandbox: SandboxProcess | None = None, url: str | None = None):
        super().__init__(url or sandbox.url)
        self.sandbox = sandbox

    def describe(self) -> str:
        if self.sandbox is not None:
            return f"sandbox at {self.url} (started by the drill; data {self.sandbox.data_path})"
        return f"sandbox at {self.url}"

    def _control(self, method, path, payload=None):
        response = self.session.request(method, self.url + path, json=payload, timeout=10)
        response.raise_for_status()
        return response.json()

    def stats(self) -> dict:
        return self._control("GET", "/_sandbox/stats")

    def records(self, reference: str) -> int:
        return self.stats()["crm"]["by_reference"].get(reference, 0)

    def notify_records(self, reference: str) -> int:
        return self.stats()["notify"]["by_reference"].get(reference, 0)

    def requests_to(self, target: str) -> int:
        return self.stats()["requests"].get(target, 0)

    def fault(self, target, mode, count=1, delay_ms=None):
        payload = {"target": target, "mode": mode, "count": count}
        if delay_ms is not None:
            payload["delay_ms"] = delay_ms
        return self._control("POST", "/_sandbox/faults", payload)

    def clear_faults(self):
        return self._control("DELETE", "/_sandbox/faults")

    def capabilities(self, **changes):
        if not changes:
            return self._control("GET", "/_sandbox/capabilities")
        return self._control("POST", "/_sandbox/capabilities", changes)


def is_sandbox(url: str) -> bool:
    """Does ``url`` answer the sandbox's control plane?"""
    try:
        with requests.Session() as session:
            session.trust_env = False
            response = session.get(url.rstrip("/") + "/_sandbox/stats", timeout=2)
            return response.status_code == 200 and "X-Sandbox-Pid" in response.headers
    except requests.RequestException:
        return False
