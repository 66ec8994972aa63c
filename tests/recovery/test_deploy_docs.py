"""The deployment files in docs/deploy/ say what is true: the alert rules name metrics that
/metrics exports, and the systemd units start the commands the README names."""

import re
from pathlib import Path

import yaml
from django.test import Client

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"


def test_every_metric_in_the_alert_rules_is_exported(db, settings):
    settings.METRICS_TOKEN = "token-for-tests"
    rules = yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"][0]["rules"]
    named = {m for r in rules for m in re.findall(r"\bhandover_[a-z_]+", r["expr"])}
    assert named, "the rules name no Handover metric"
    body = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer token-for-tests").content.decode()
    # Samples, and the declared families (a family with no sample yet still names itself).
    exported = set(re.findall(r"^(?:# TYPE )?(handover_[a-z_]+)", body, flags=re.M))
    assert named <= exported, named - exported


def test_the_units_start_the_web_server_and_a_cluster():
    web = (DEPLOY / "handover-web.service").read_text()
    worker = (DEPLOY / "handover-worker.service").read_text()
    assert "-m config.serve" in web and "Restart=always" in web
    assert "manage.py qcluster" in worker and "Restart=always" in worker
