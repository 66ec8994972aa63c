"""``WebDavServer``: WsgiDAV as a child process over a folder of test documents."""

from __future__ import annotations

import base64
import http.client
import os
import sys
import tempfile
from pathlib import Path

from harness.processes import PROJECT_ROOT, Child, free_port

STARTUP_TIMEOUT_SECONDS = 20.0


class WebDavError(RuntimeError):
    """The server did not start, or a call to it failed."""


class WebDavServer(Child):
    """WsgiDAV serving ``root`` (a fresh temporary folder by default) to one user:

    with WebDavServer() as dav:
        etag = dav.put("permit.pdf", pdf_bytes)
        ...  # DOCS_KIND=webdav, DOCS_BASE_URL=dav.url, DOCS_TOKEN=dav.token
        dav.change_credentials()  # access removed: the old token is refused (401)
    """

    def __init__(self, root=None, *, user="handover", password="dav-secret", log_path=None):
        self.root = Path(root or tempfile.mkdtemp(prefix="webdav-"))
        self.user, self.password = user, password
        self.host = "127.0.0.1"
        self.port: int | None = None
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="webdav-", suffix=".log")
            os.close(handle)
            log_path = name
        super().__init__("WsgiDAV", [], log_path=log_path, cwd=PROJECT_ROOT, own_session=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def token(self) -> str:
        """The integration's token for this share: ``user:password`` (HTTP Basic)."""
        return f"{self.user}:{self.password}"

    def start(self) -> WebDavServer:
        if self.running:
            raise WebDavError(f"WsgiDAV already running at {self.url}")
        self.port = self.port or free_port(self.host)
        self.command = [
            sys.executable,
            "-m",
            "harness.webdav.server",
            "--root",
            str(self.root),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--user",
            self.user,
            "--password",
            self.password,
            "--parent-pid",
            str(os.getpid()),
        ]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        super().start()
        return self.wait_answers(self.url + "/", timeout=STARTUP_TIMEOUT_SECONDS, error=WebDavError)

    def change_credentials(self, password: str = "changed-secret") -> None:
        """Access removed: the share now takes another password (a restart of WsgiDAV with
        its new credentials, on the same port; the documents stay)."""
        self.stop()
        self.password = password
        self.start()

    # -- the share, as its owner sees it (through WebDAV, with the current credentials) --------
    def _call(self, method: str, name: str, body: bytes | None = None, headers=None):
        basic = base64.b64encode(self.token.encode()).decode()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            connection.request(
                method,
                "/" + name,
                body=body,
                headers={"Authorization": f"Basic {basic}", **(headers or {})},
            )
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def put(self, name: str, content: bytes, content_type="application/pdf") -> str:
        """Write a document; its new version (the ETag, unquoted)."""
        status, _, body = self._call("PUT", name, content, {"Content-Type": content_type})
        if status not in (200, 201, 204):
            raise WebDavError(f"PUT {name}: {status} {body[:200]!r}")
        return self.etag(name)

    def etag(self, name: str) -> str:
        status, headers, _ = self._call("HEAD", name)
        if status != 200:
            raise WebDavError(f"HEAD {name}: {status}")
        return next(v for k, v in headers.items() if k.lower() == "etag").strip('"')

    def read(self, name: str) -> bytes:
        """The document's bytes as the server holds them (from its folder)."""
        return (self.root / name).read_bytes()
