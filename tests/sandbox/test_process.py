"""The sandbox as a process: the test helper, the Django command, and its independence."""

import ast
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import sandbox as sandbox_package
from harness.processes import free_port
from harness.sandbox_process import SandboxError, SandboxProcess
from tests.conftest import wait_for_condition

pytestmark = pytest.mark.slow  # these tests start real processes

PACKAGE_DIR = Path(sandbox_package.__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
# Every other top-level package of the project: the product's apps, and the harness (the test
# equipment that starts the sandbox, harness.sandbox_process, imports it, never the reverse).
OTHER_APPS = {"intake", "ledger", "recovery", "config", "harness", "bench", "tests"}
# Only these files may know about Django: they plug the sandbox into manage.py.
DJANGO_FILES = {"apps.py", "runsandbox.py"}


def _imported_top_level_modules(path):
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules


def test_sandbox_imports_nothing_from_the_other_apps_and_django_only_at_the_edge():
    for path in PACKAGE_DIR.rglob("*.py"):
        modules = _imported_top_level_modules(path)
        assert not modules & OTHER_APPS, path
        if path.name not in DJANGO_FILES:
            assert "django" not in modules, path


def test_core_runs_without_django_or_waitress_loaded():
    code = (
        "import sys, sandbox.server, sandbox.store, sandbox.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'django', 'waitress', 'intake', 'ledger', 'recovery', 'config', 'harness'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_context_manager_stops_the_process(tmp_path):
    with SandboxProcess() as process:
        process.start(tmp_path / "s.sqlite3")
        assert process.running
        assert process.url.startswith("http://127.0.0.1:")
        child = process.process
    assert not process.running
    assert child.returncode is not None
    assert "sandbox serving" in process.log_path.read_text()


def test_start_fails_clearly_when_the_port_is_taken(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        process = SandboxProcess(startup_timeout=10)
        with pytest.raises(SandboxError, match="exited with code") as failure:
            process.start(tmp_path / "s.sqlite3", port=port)
    assert "in use" in str(failure.value)  # the child's own error, quoted
    assert not process.running


def test_start_twice_is_an_error(sandbox, tmp_path):
    with pytest.raises(SandboxError, match="already running"):
        sandbox.start(tmp_path / "other.sqlite3")


def test_runsandbox_management_command_serves_the_same_app(tmp_path):
    # A separate interpreter with a minimal Django configuration, so this test needs neither
    # the project's settings nor its database, and leaves this process's Django untouched.
    port = free_port()
    data = tmp_path / "cmd.sqlite3"
    code = (
        "import sys, django; from django.conf import settings; "
        "settings.configure(INSTALLED_APPS=['sandbox']); django.setup(); "
        "from django.core.management import call_command; "
        "call_command('runsandbox', *sys.argv[1:])"
    )
    command = [sys.executable, "-c", code, "--port", str(port), "--data", str(data)]
    log_path = tmp_path / "cmd.log"
    with open(log_path, "wb") as log:
        child = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        stats = _wait_for_stats(f"http://127.0.0.1:{port}", child, log_path)
        assert stats["crm"]["total"] == 0
        assert data.exists()
    finally:
        child.terminate()
        child.wait(timeout=10)
    assert child.returncode == 0  # SIGTERM is an orderly stop


def _wait_for_stats(url, child, log_path, timeout=15.0):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def stats():
        if child.poll() is not None:
            pytest.fail(f"runsandbox exited: {log_path.read_text()}")
        try:
            with opener.open(f"{url}/_sandbox/stats", timeout=1) as response:
                return json.loads(response.read())
        except OSError:
            return None

    message = f"runsandbox to answer (its log: {log_path})"
    return wait_for_condition(stats, timeout=timeout, message=message)
