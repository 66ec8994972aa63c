"""The test SMTP relay (harness.mailserver.server) as a child process:

    with MailServer(tmp_path / "mail") as mail:
        mail.fault("drop_after_data")
        ...  # point the notification integration at mail.url ("smtp://127.0.0.1:<port>")
        assert mail.count(message_id) == 1

A ``harness.processes.Child``: ``stop()``, ``kill()``, ``running`` and ``log_path`` are its.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.processes import PROJECT_ROOT, Child, control_call, free_port

STARTUP_TIMEOUT_SECONDS = 15.0


class MailServerError(RuntimeError):
    """The mail server did not start, or a control call failed."""


class MailServer(Child):
    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
    ):
        self.host = host
        self.folder = Path(folder)
        self.port = free_port(host)
        self.control_port = free_port(host)
        super().__init__(
            "mail server",
            [
                sys.executable,
                "-m",
                "harness.mailserver",
                "--host",
                host,
                "--port",
                str(self.port),
                "--control-port",
                str(self.control_port),
                "--dir",
                str(self.folder),
            ],
            log_path=log_path or self.folder.parent / "mailserver.log",
            cwd=PROJECT_ROOT,
        )

    @property
    def url(self) -> str:
        """The integration address that reaches this server."""
        return f"smtp://{self.host}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{self.host}:{self.control_port}"

    def start(self) -> MailServer:
        super().start()
        self.wait_answers(
            self.control_url + "/", timeout=STARTUP_TIMEOUT_SECONDS, error=MailServerError
        )
        return self

    def call(self, method: str, path: str, payload=None):
        return control_call(self.control_url, method, path, payload, error=MailServerError)

    def fault(self, mode: str, *, count: int = 1, recipient: str = "", delay: float = 0.0):
        return self.call(
            "POST",
            "/_mail/faults",
            {"mode": mode, "count": count, "recipient": recipient, "delay": delay},
        )

    def clear_faults(self):
        return self.call("DELETE", "/_mail/faults")

    def reset(self):
        return self.call("POST", "/_mail/reset")

    def stats(self) -> dict:
        return self.call("GET", "/_mail/stats")

    def messages(self) -> list[dict]:
        return self.call("GET", "/_mail/messages")["messages"]

    def count(self, message_id: str) -> int:
        return self.stats()["by_message_id"].get(message_id, 0)

    def read(self, record: dict) -> bytes:
        """The .eml file of a message as received."""
        return (self.folder / record["file"]).read_bytes()
