"""The soak's chaos: sandbox (or fault proxy) faults at about fault-rate of the calls, the
cluster killed every kill-every seconds and restarted, PostgreSQL restarted."""

from __future__ import annotations

import time

from bench.soak_common import log

FAULT_TARGETS = ("crm.create", "crm.lookup", "notify.send", "notify.status")
FAULT_MODES = (
    "timeout_after_commit",
    "error_503",
    "error_401",
    "error_422",
    "reset_before_commit",
    "latency",
)
FAULT_DELAY_MS = {"timeout_after_commit": 1500, "latency": 300}
# Against a real CRM, through the fault proxy: its modes, with "late" landing 3 s after Handover
# gave up (seen on BottleCRM with a short client timeout), inside the kind's settle delay.
CRM_PROXY_MODES = (
    "hold",
    "drop_after_forward",
    "error_503",
    "error_403",
    "error_422",
    "reset_before_commit",
    "late",
    "latency",
)
CRM_PROXY_DELAY_MS = {"late": 3000, "latency": 300}
# The calendar's requests (--appointments caldav), through its own fault proxy: a read's faults.
CALENDAR_TARGETS = ("appointments.version", "appointments.events")
CALENDAR_MODES = (
    "hold",
    "drop_after_forward",
    "error_503",
    "error_403",
    "reset_before_commit",
    "latency",
)
CALENDAR_DELAY_MS = {"hold": 3000, "latency": 300}
# The documents' reads, at the proxy in front of WsgiDAV (--documents webdav); "hold" keeps the
# answer past the read's 1 s timeout.
DOC_TARGET = "doc.read"
DOC_PROXY_MODES = ("hold", "drop_after_forward", "error_503", "error_403", "reset_before_commit")
DOC_PROXY_DELAY_MS = {"hold": 3000}


class Chaos:
    """Mixed into bench.soak.Soak, which holds the run's state."""

    def fault_view(self) -> dict[str, tuple[int, int, int]]:
        """Per target: calls so far, faults fired, faults pending (from whoever injects them:
        the sandbox, or for a real CRM the proxy in front of it)."""
        stats = self.sandbox.stats()
        view = {}
        for target in FAULT_TARGETS:
            view[target] = (
                stats["requests"].get(target, 0),
                sum(stats["faults_fired"].get(target, {}).values()),
                sum(1 for f in stats["faults_pending"] if f["target"] == target),
            )
        if self.crm is not None:
            proxied = self.crm.proxy.stats()
            for target in ("crm.create", "crm.lookup"):
                counters = proxied["targets"][target]
                view[target] = (
                    counters["seen"],
                    sum(counters["faulted"].values()),
                    sum(1 for f in proxied["faults_pending"] if f["target"] == target),
                )
        if self.calendar is not None:
            proxied = self.calendar.proxy.stats()
            for target in CALENDAR_TARGETS:
                counters = proxied["targets"][target]
                view[target] = (
                    counters["seen"],
                    sum(counters["faulted"].values()),
                    sum(1 for f in proxied["faults_pending"] if f["target"] == target),
                )
        if self.documents is not None:
            proxied = self.documents.proxy.stats()
            counters = proxied["targets"][DOC_TARGET]
            view[DOC_TARGET] = (
                counters["seen"],
                sum(counters["faulted"].values()),
                len(proxied["faults_pending"]),
            )
        return view

    def arm(self, target: str):
        if target in CALENDAR_TARGETS:
            mode = self.rng.choice(CALENDAR_MODES)
            self.calendar.proxy.fault(target, mode, count=1, delay_ms=CALENDAR_DELAY_MS.get(mode))
        elif target == DOC_TARGET:
            mode = self.rng.choice(DOC_PROXY_MODES)
            self.documents.fault(mode, count=1, delay_ms=DOC_PROXY_DELAY_MS.get(mode))
        elif self.crm is not None and target.startswith("crm."):
            mode = self.rng.choice(CRM_PROXY_MODES)
            self.crm.proxy.fault(target, mode, count=1, delay_ms=CRM_PROXY_DELAY_MS.get(mode))
        else:
            mode = self.rng.choice(FAULT_MODES)
            self.sandbox.fault(target, mode, count=1, delay_ms=FAULT_DELAY_MS.get(mode))

    def fault_loop(self):
        """Keep about fault-rate of each target's calls meeting a fault, of a random mode."""
        while not self.stop_chaos.is_set():
            try:
                view = self.fault_view()
            except Exception as exc:
                self.fault_errors.append(repr(exc)[:200])
                time.sleep(0.2)
                continue
            self.fault_loop_turns += 1
            for target, (calls, fired, pending) in view.items():
                # Calls come in bursts faster than this loop turns: keep a few armed ahead.
                deficit = self.args.fault_rate * (calls + 20) - fired - pending
                for _ in range(min(4 - pending, int(deficit))):
                    try:
                        self.arm(target)
                    except Exception as exc:
                        self.fault_errors.append(repr(exc)[:200])
                        break
                    self.faults_armed[target] = self.faults_armed.get(target, 0) + 1
            time.sleep(0.05)
        self.sandbox.clear_faults()
        if self.crm is not None:
            self.crm.proxy.clear_faults()
        if self.calendar is not None:
            self.calendar.proxy.clear_faults()
            self.calendar.proxy.release()
        if self.documents is not None:
            self.documents.proxy.clear_faults()

    def kill_loop(self):
        every = self.args.kill_every
        next_kill = time.monotonic() + every
        while not self.stop_chaos.is_set():
            time.sleep(0.1)
            if not self.cluster.running:
                self.cluster_deaths += 1
                log("the cluster died on its own; restarting it")
                self.restart_cluster()
            if every > 0 and time.monotonic() >= next_kill:
                self.cluster.kill()
                self.worker_kills += 1
                self.restart_cluster()
                next_kill = time.monotonic() + every

    def restart_cluster(self):
        self.cluster = self.cluster_class(
            self.dir / "cluster.log", self.env, workers=self.args.workers
        ).start()

    def restart_database(self):
        log("restarting PostgreSQL")
        ok, note = self.pg.restart()
        self.db_restart_note = note
        if ok:
            self.db_restarts += 1
            log(f"PostgreSQL restarted ({note})")
        else:
            log(f"PostgreSQL NOT restarted: {note}")
