"""The drill's equipment for a real CRM (harness/drill/realcrm.py): the parts needing no process."""

import pytest

from harness.drill.realcrm import CRM_TARGETS, ProxiedCrm, description_fields
from ledger.connectors.bottlecrm import case_description
from ledger.kinds import KINDS


def test_the_revision_and_category_are_read_back_from_what_the_bottlecrm_kind_writes():
    # Read from the kind's own writer: a change to the description's shape fails here, not in
    # the middle of a drill against BottleCRM.
    description = case_description(
        {
            "reference": "ENQ-1",
            "source": "drill",
            "revision": 3,
            "category": "waste-collection",
            "fields": {"message": "Category: not this one\nSource: nor this, revision 9 (quoted)"},
        }
    )
    assert description_fields(description) == {"revision": 3, "category": "waste-collection"}


def test_a_description_without_them_reads_as_none():
    assert description_fields("") == {"revision": None, "category": None}


def test_every_kind_that_serves_the_crm_has_the_drills_targets():
    crm_kinds = {key for key, kind in KINDS.items() if kind.serves("crm")}
    assert crm_kinds <= set(CRM_TARGETS)
    for targets in CRM_TARGETS.values():
        assert set(targets) == {"crm.create", "crm.lookup", "crm.close"}


def test_a_kind_without_targets_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="no proxy targets for kind 'salesforce'"):
        ProxiedCrm(
            kind="salesforce",
            upstream="http://127.0.0.1:9",
            token="",
            others=None,
            log_path=tmp_path / "proxy.log",
        )
