"""The fault proxy's control API (``/_proxy/``: faults, stats, release, reset), shaped like the
sandbox's ``/_sandbox/``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from harness.faultproxy.faults import InvalidFaultError, validate_fault

if TYPE_CHECKING:
    from harness.faultproxy.server import FaultProxyServer


class ControlRoutes:
    """Mixed into relay.ProxyHandler, which supplies ``read_body`` and ``answer_json``."""

    server: FaultProxyServer

    def control(self, path: str) -> None:
        state = self.server.state
        routes = {
            ("GET", "/_proxy/stats"): lambda: (200, state.stats(self.server.upstream.url)),
            ("GET", "/_proxy/faults"): lambda: (200, {"faults_pending": state.pending()}),
            ("POST", "/_proxy/faults"): self.control_arm,
            ("DELETE", "/_proxy/faults"): self.control_clear,
            ("POST", "/_proxy/release"): lambda: (200, {"released": state.release()}),
            ("POST", "/_proxy/reset"): self.control_reset,
        }
        body = self.read_body()
        if body is None:
            return
        self.control_body = body
        route = routes.get((self.command, path))
        if route is not None:
            status, payload = route()
            self.answer_json(status, payload)
            return
        allowed = sorted(method for method, route_path in routes if route_path == path)
        if allowed:
            methods = ", ".join(allowed)
            detail = f"allowed: {methods}"
            self.answer_json(
                405, {"error": "method_not_allowed", "detail": detail}, [("Allow", methods)]
            )
        else:
            self.answer_json(404, {"error": "not_found", "detail": f"no control route {path}"})

    def control_arm(self) -> tuple[int, dict[str, Any]]:
        state = self.server.state
        try:
            payload = json.loads(self.control_body or b"null")
        except ValueError as exc:
            return 400, {"error": "malformed_json", "detail": f"not valid JSON: {exc}"}
        try:
            fault = validate_fault(payload, state)
        except InvalidFaultError as exc:
            return 400, {"error": "invalid_fault", "detail": str(exc)}
        armed = state.arm(**fault)
        return 201, {"fault": armed.describe(), "faults_pending": state.pending()}

    def control_clear(self) -> tuple[int, dict[str, Any]]:
        self.server.state.clear_faults()
        return 200, {"faults_pending": []}

    def control_reset(self) -> tuple[int, dict[str, Any]]:
        self.server.state.reset()
        return 200, self.server.state.stats(self.server.upstream.url)
