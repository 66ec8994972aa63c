"""The drill's equipment for a real CRM: a fault proxy in front of it, records counted by its
kind's own look-up, and (``--destination bottlecrm``) a BottleCRM started for the run.

The runner (runner.py) uses it when the CRM is not the sandbox; the soak (bench/soak.py
``--destination bottlecrm``) uses it too.

What runs where, when the CRM is real:
- the **CRM** integration row points at a ``FaultProxy`` in front of the real CRM; the fault
  cases arm the proxy (never the CRM), named targets per kind (``CRM_TARGETS``);
- the **notification, document and appointment** integrations stay on the sandbox the drill
  starts: only the CRM is real, and their faults are armed at that sandbox;
- **records are counted at the CRM through the kind's own look-up** (the connector Handover
  uses to reconcile, e.g. BottleCRM's ``?cf_external_ref=``), called straight at the CRM, not
  through the proxy, so an armed fault never hides a record; create calls are counted by the
  proxy (``requests_to``), which saw every one.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import requests

from harness.bottlecrm import BottleCrm
from harness.faultproxy import FaultProxy
from ledger.kinds import BOTTLECRM, HANDOVER, KINDS
from ledger.models import Action, Integration

# The drill's target names, per kind: what "crm.create" is at each destination's API.
CRM_TARGETS = {
    HANDOVER: {
        "crm.create": "POST /crm/enquiries",
        "crm.lookup": "GET /crm/enquiries",
        "crm.close": "POST /crm/enquiries/*",
    },
    BOTTLECRM: {
        "crm.create": "POST /api/cases/",
        "crm.lookup": "GET /api/cases/",
        "crm.close": "PATCH /api/cases/*",
    },
}
# The sandbox's "timeout after commit" holds the answer for a fixed delay; against a real CRM
# the proxy's ``hold`` keeps it until the caller's own timeout fires, however slow the CRM or
# long the integration's timeout: the caller sees a timeout and the CRM has the record.
PROXY_MODE = {"timeout_after_commit": "hold"}
COUNT_TIMEOUT_SECONDS = 30.0
READ_TIMEOUT_SECONDS = 30.0


def start_bottlecrm(progress=None) -> BottleCrm:
    """A BottleCRM for this run (its own database, org and token; stop() drops them)."""
    return BottleCrm(progress=progress).start()


class ProxiedCrm:
    """A real CRM behind a fault proxy, with the sandbox for the other integrations."""

    can_inject_faults = True

    def __init__(
        self,
        *,
        kind: str,
        upstream: str,
        token: str,
        others,
        log_path: Path,
        started_by_drill: bool = False,
    ):
        if kind not in CRM_TARGETS:
            known = ", ".join(sorted(CRM_TARGETS))
            raise ValueError(f"the drill has no proxy targets for kind {kind!r} (has: {known})")
        self.kind = KINDS[kind]
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.others = others
        self.started_by_drill = started_by_drill
        self.proxy = FaultProxy(self.upstream, targets=CRM_TARGETS[kind], log_path=log_path)
        self.proxy.start()
        # Never saved: the row the kind's connector reads to count, pointing straight at the CRM.
        self.counting_row = Integration(
            name=Integration.CRM,
            kind=kind,
            base_url=self.upstream,
            token=token,
            timeout_seconds=COUNT_TIMEOUT_SECONDS,
            supports_lookup=True,
            supports_idempotency_key=False,
            settle_delay_seconds=0.0,
        )
        self.session = requests.Session()
        self.session.trust_env = False
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    # -- what the report says ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Where the CRM row points for the run: the proxy."""
        return self.proxy.url

    def describe(self) -> str:
        started = ", started by the drill" if self.started_by_drill else ""
        return (
            f"{self.kind.label} (kind {self.kind.key}) at {self.upstream}{started}, through the "
            f"fault proxy at {self.proxy.url}; notifications and appointments: "
            f"{self.others.describe()} (documents: a WsgiDAV the drill starts)"
        )

    def describe_integration(self, name: str) -> str:
        if name == Integration.CRM:
            return f"{self.kind.label} ({self.kind.key}) through the fault proxy"
        return "sandbox"

    def as_dict(self) -> dict:
        return {
            "name": self.kind.label,
            "kind": self.kind.key,
            "url": self.upstream,
            "proxy": self.proxy.url,
            "started_by_drill": self.started_by_drill,
            "counted_by": f"the {self.kind.key} kind's own look-up, straight at {self.upstream}",
            "other_integrations": self.others.describe(),
        }

    # -- counting at the destination -----------------------------------------------------------

    def _lookup(self, reference: str):
        connector_class = self.kind.connector_class(Integration.CRM, Action.CREATE_ENQUIRY)
        probe = SimpleNamespace(payload={"reference": reference}, pk=None)
        result = connector_class(self.counting_row).lookup(probe)
        if not result.supported:
            raise RuntimeError(f"{self.kind.label} cannot be looked up by reference")
        return result

    def records(self, reference: str) -> int:
        return len(self._lookup(reference).found)

    def crm_records(self, reference: str) -> list[dict]:
        """Each record the look-up finds, read back: ``{"id", "data": {"revision", "category"}}``
        (what the drill checks was sent), whatever shape the destination keeps them in."""
        return [self._read(str(found["id"])) for found in self._lookup(reference).found]

    def _read(self, record_id: str) -> dict:
        if self.kind.key == BOTTLECRM:
            response = self.session.get(
                f"{self.upstream}/api/cases/{record_id}/", timeout=READ_TIMEOUT_SECONDS
            )
            response.raise_for_status()
            case = response.json().get("cases_obj") or {}
            return {"id": record_id, "data": description_fields(case.get("description") or "")}
        response = self.session.get(
            f"{self.upstream}/crm/enquiries/{record_id}", timeout=READ_TIMEOUT_SECONDS
        )
        response.raise_for_status()
        return response.json()

    def requests_to(self, target: str) -> int:
        if target.startswith("crm."):
            return self.proxy.stats()["targets"][target]["seen"]
        return self.others.requests_to(target)

    def notify_records(self, reference: str) -> int:
        return self.others.notify_records(reference)

    # -- faults and capabilities ---------------------------------------------------------------

    def fault(self, target, mode, count=1, delay_ms=None):
        if not target.startswith("crm."):
            return self.others.fault(target, mode, count=count, delay_ms=delay_ms)
        proxy_mode = PROXY_MODE.get(mode, mode)
        if proxy_mode != mode:
            delay_ms = None  # held until the caller hangs up
        return self.proxy.fault(target, proxy_mode, count=count, delay_ms=delay_ms)

    def clear_faults(self):
        self.proxy.clear_faults()
        self.others.clear_faults()

    def capabilities(self, **changes):
        """A real CRM cannot be told to stop answering look-ups: narrow the CRM row instead,
        as an admin would for a CRM whose search is broken (the kind's declaration still caps
        it)."""
        fields = {"lookup": "supports_lookup", "idempotency_key": "supports_idempotency_key"}
        update = {fields[name]: bool(value) for name, value in changes.items() if name in fields}
        if update:
            Integration.objects.filter(name=Integration.CRM).update(**update)
        row = Integration.objects.get(name=Integration.CRM)
        return {
            "lookup": row.capabilities.lookup,
            "idempotency_key": row.capabilities.idempotency_key,
        }

    def close(self):
        if self.proxy.running:
            self.proxy.clear_faults()
        self.proxy.stop()  # held requests are dropped, never forwarded
        self.session.close()
        self.others.close()


_REVISION = re.compile(r"^Source: .*, revision (\d+)\s*$", re.MULTILINE)
_CATEGORY = re.compile(r"^Category: (.+?)\s*$", re.MULTILINE)


def description_fields(description: str) -> dict:
    """The revision and category the BottleCRM kind wrote into a case's description: from
    the block after its last ``--`` line, never from the resident's message above it."""
    block = description.rsplit("\n--\n", 1)[-1]
    revision = _REVISION.search(block)
    category = _CATEGORY.search(block)
    return {
        "revision": int(revision.group(1)) if revision else None,
        "category": category.group(1) if category else None,
    }
