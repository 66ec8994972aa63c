"""`make run`: the whole product in one command, stopped cleanly by Ctrl-C.

This process holds the embedded PostgreSQL (when DATABASE_URL is unset), migrates, and supervises
the sandbox, a local e-mail relay (when EMAIL_HOST is this machine: every message it receives is
kept in var/mail/*.eml), a django-q2 cluster and the web server. A new database is seeded with the
demo once the sandbox and the relay are started and before the cluster is, so the records its
stories name are made there (seed_demo --make-records). If any child dies, everything stops: a
half-running product is worse than a stopped one. If this process itself dies, even by SIGKILL, each
child is sent SIGTERM (on Linux), for the same reason. Its children get ``CONSOLE_URL`` set to
where it serves (``--host``, ``--port``), so the links in the e-mail they send open this console.

Development only, like the sandbox and the relay it starts: it is a command of ``harness``,
installed for development and the tests only (config/settings.py, DEV_TOOLS). A
production deployment runs the web server and the cluster itself (docs/deploy/*.service).
"""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from config.lifetime import stop_with
from harness.processes import qcluster_command, sandbox_command, web_command

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# How long the children have to stop after SIGTERM: the cluster's in-flight tasks finish first
# (each is bounded by its connector's timeout); an idle product stops in about a second.
STOP_SECONDS = 15


def console_url(host: str, port: int) -> str:
    """Where people open the console that this command serves: the links in Handover's e-mail
    (CONSOLE_URL). A wildcard address is opened on this machine."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def password_source(seeded: bool) -> str:
    """Where the demo password came from, truly: printed above, DEMO_PASSWORD from the
    environment or from .env, or the one printed when this database was first seeded."""
    if not seeded:
        return "the password printed when this database was first seeded"
    value = os.environ.get("DEMO_PASSWORD")
    if not value:
        return "password: printed above"
    from dotenv import dotenv_values

    in_file = dotenv_values(settings.BASE_DIR / ".env").get("DEMO_PASSWORD")
    # load_dotenv never overrides the environment: a value that differs from .env's, or one
    # .env does not hold, came from the environment.
    where = "in .env" if in_file == value else "from the environment"
    return f"password: DEMO_PASSWORD {where}, printed above"


class Command(BaseCommand):
    help = "Run the sandbox, a django-q2 cluster and the web server until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        # `make run PORT=8010` passes --port; PORT in the environment works too.
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000))
        parser.add_argument("--sandbox-port", type=int, default=8765)
        parser.add_argument("--no-sandbox", action="store_true")
        parser.add_argument(
            "--sandbox-data", default=None, help="the sandbox's SQLite file: var/sandbox.sqlite3"
        )
        parser.add_argument(
            "--no-mail", action="store_true", help="do not start the local e-mail relay"
        )
        parser.add_argument("--mail-dir", default=None, help="where it keeps messages: var/mail")

    def handle(
        self,
        *args,
        host,
        port,
        sandbox_port,
        no_sandbox,
        no_mail=False,
        mail_dir=None,
        sandbox_data=None,
        **options,
    ):
        local_mail = not no_mail and settings.EMAIL_HOST in LOCAL_HOSTS
        if local_mail:
            # The demo's notification integration speaks e-mail to the local relay, when its
            # row is first made (NOTIFY_KIND in the environment or .env still wins).
            os.environ.setdefault("NOTIFY_KIND", "smtp")
        # The links in every message (operators' notices) open the console this serves, on
        # this port, whatever .env says: the workers render them, so they inherit it.
        console = console_url(host, port)
        os.environ["CONSOLE_URL"] = settings.CONSOLE_URL = console
        call_command("migrate", interactive=False, verbosity=0)
        from django.contrib.auth import get_user_model

        seeded = not get_user_model().objects.exists()
        call_command("collectstatic", interactive=False, verbosity=0)
        base = settings.BASE_DIR
        env = dict(os.environ)
        children = {}
        if not no_sandbox:
            children["sandbox"] = sandbox_command(
                sandbox_port, sandbox_data or base / "var" / "sandbox.sqlite3"
            )
        if local_mail:
            # The demo's notification integration sends e-mail here (NOTIFY_KIND=smtp): a
            # newcomer reads what would have gone out in var/mail/.
            children["mail"] = [
                sys.executable,
                "manage.py",
                "runmailserver",
                "--host",
                settings.EMAIL_HOST,
                "--port",
                str(settings.EMAIL_PORT),
                "--dir",
                mail_dir or str(base / "var" / "mail"),
            ]
        children["workers"] = qcluster_command()
        # waitress, which reads each request whole before a thread sees it: a stalled or slow
        # client cannot hold the server's threads (config/serve.py, docs/reliability.md).
        children["web"] = web_command(f"{host}:{port}", "--access-log")
        procs = {}
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            for name, cmd in children.items():
                if name == "workers" and seeded:
                    # The sandbox is up (started first): the demo makes the CRM records its
                    # stories name there, before any worker or page sees the stories.
                    call_command("seed_demo", make_records=not no_sandbox)
                # Own process group: Ctrl-C reaches the children through us, not directly.
                procs[name] = subprocess.Popen(
                    cmd,
                    cwd=base,
                    env=env,
                    start_new_session=True,
                    preexec_fn=stop_with(os.getpid()),
                )
            self.stdout.write(self.style.SUCCESS(f"Handover is running on http://{host}:{port}/"))
            if "mail" in children:
                self.stdout.write(
                    f"E-mail goes to the local relay on {settings.EMAIL_HOST}:"
                    f"{settings.EMAIL_PORT}; every message is kept in var/mail/. Its links "
                    f"open {console}/ (CONSOLE_URL)."
                )
            self.stdout.write(
                f"Demo logins: coordinator, reviewer, admin ({password_source(seeded)}). "
                "Ctrl-C stops everything."
            )
            while not stopping:
                for name, proc in procs.items():
                    if proc.poll() is not None:
                        self.stderr.write(f"{name} exited with {proc.returncode}; stopping.")
                        stopping = True
                time.sleep(0.3)
        finally:
            stop_children(procs, self.stderr.write)
            self.stdout.write("Stopped.")


def stop_children(procs: dict[str, subprocess.Popen], say) -> None:
    """SIGTERM each child, wait for all of them, SIGKILL the group of any still running.

    The signal goes to each child alone, not to its process group: each stops what it started,
    in its own order (the cluster lets its workers finish the task in hand, the web server
    stops its processes). The group is killed only when the child has not exited in time, and
    that is said.
    """
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for name, proc in procs.items():
        try:
            code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            say(f"{name} stopped ({code}).")
        except subprocess.TimeoutExpired:
            say(f"{name} did not stop within {STOP_SECONDS} s of SIGTERM; killing it.")
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
