"""The drill's document store: a real WebDAV server (WsgiDAV, harness.webdav) with the fault
proxy in front, for the documents integration (kind ``webdav``) whatever the CRM is.

Faults WsgiDAV cannot make itself (a held answer) are armed at the proxy; "access removed" is
WsgiDAV's own auth (its credentials changed); reads are counted at the proxy (``GET``s that
reached the server), and what the server holds is read from its folder.
"""

from __future__ import annotations

from pathlib import Path

from harness.faultproxy import FaultProxy
from harness.webdav import WebDavServer
from ledger import extraction

READS = "doc.read"
PASSWORD = "drill-dav-secret"


class DocumentStore:
    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.dav = WebDavServer(folder / "share", password=PASSWORD, log_path=folder / "dav.log")
        self.dav.root.mkdir(parents=True, exist_ok=True)
        self.proxy: FaultProxy | None = None
        self.log_path = folder / "dav-proxy.log"

    def start(self) -> DocumentStore:
        self.dav.start()
        self.proxy = FaultProxy(
            self.dav.url, targets={READS: "GET /*"}, log_path=self.log_path
        ).start()
        return self

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def token(self) -> str:
        """The token the integration was given at the start (the share's first credentials)."""
        return f"{self.dav.user}:{PASSWORD}"

    def describe(self) -> str:
        return f"WsgiDAV (webdav) through the fault proxy at {self.url}"

    # -- the share ------------------------------------------------------------------------------
    def put(self, name: str, content: bytes) -> str:
        return self.dav.put(name, content)

    def fields_held(self, name: str) -> dict:
        """The fields of the document as the server holds it now."""
        return extraction.extract(self.dav.read(name)).fields

    def remove_access(self):
        self.dav.change_credentials("changed-by-the-share-owner")

    def restore_access(self):
        if self.dav.password != PASSWORD:
            self.dav.change_credentials(PASSWORD)

    # -- the proxy ------------------------------------------------------------------------------
    def reads(self) -> int:
        return self.proxy.stats()["targets"][READS]["forwarded"]

    def fault(self, mode: str, count: int = 1, delay_ms: int | None = None):
        self.proxy.fault(READS, mode, count=count, delay_ms=delay_ms)

    def clear(self):
        self.proxy.clear_faults()
        self.restore_access()

    def close(self):
        for child in (self.proxy, self.dav):
            if child is not None:
                child.stop()
