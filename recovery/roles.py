"""The roles' default permissions today (the data migrations 0001, 0004, 0005, 0006 built them).

A role is a Django group of the same name; a person has a role by being in its group. The admin
role also needs ``is_staff`` to open Django's admin (recovery.setup.set_roles sets it with the
role). docs/roles.md says what each role may do.

`ensure_roles` creates a missing role group with these defaults and never touches a group that
exists, so an admin's grants (ledger.recover_operation to a coordinator, say) are kept. It runs
after every migrate and every test flush (post_migrate), which empties auth_group.
"""

ROLE_PERMISSIONS = {
    "coordinator": [
        "ledger.triage_operation",
        "ledger.view_operation",
        "intake.view_enquiry",
        "intake.complete_enquiry",
    ],
    "reviewer": [
        "intake.view_enquiry",
        "intake.review_enquiry",
        "intake.approve_revision",
        "ledger.view_operation",
    ],
    "admin": [
        "intake.view_enquiry",
        "intake.review_enquiry",
        "intake.approve_revision",
        "intake.complete_enquiry",
        "intake.add_category",
        "intake.change_category",
        "intake.view_category",
        "ledger.view_operation",
        "ledger.triage_operation",
        "ledger.recover_operation",
        "ledger.pause_integration",
        "ledger.view_integration",
        "ledger.change_integration",
        "recovery.add_responsepolicy",
        "recovery.change_responsepolicy",
        "recovery.delete_responsepolicy",
        "recovery.view_responsepolicy",
        "recovery.view_queuevisit",
        "recovery.view_escalation",
        "recovery.review_drillrun",
        "auth.view_user",
        "auth.change_user",
        "auth.add_user",
        "auth.view_group",
    ],
}


def ensure_roles(**kwargs):
    from django.contrib.auth.models import Group, Permission
    from django.db.models import Q

    for role, codes in ROLE_PERMISSIONS.items():
        if Group.objects.filter(name=role).exists():
            continue
        group = Group.objects.create(name=role)
        wanted = Q(pk__in=[])
        for code in codes:
            app_label, codename = code.split(".")
            wanted |= Q(content_type__app_label=app_label, codename=codename)
        group.permissions.add(*Permission.objects.filter(wanted))
