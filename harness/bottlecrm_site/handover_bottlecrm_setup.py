"""Make the org, admin and personal access token a test run uses (runs on BottleCRM's Python).

    DJANGO_SETTINGS_MODULE=handover_bottlecrm_settings python handover_bottlecrm_setup.py \
        [--no-custom-field]

Prints one JSON line: {"token", "org_id", "profile_id", "email"}. The custom field definition
``external_ref`` (Case, text, filterable) is what Handover's BottleCRM kind needs; without it
BottleCRM silently drops the key from a create, which is what --no-custom-field lets a test see.
"""

import json
import secrets
import sys

import django

django.setup()

from common.models import (  # noqa: E402 (needs django.setup())
    CustomFieldDefinition,
    Org,
    PersonalAccessToken,
    Profile,
    User,
)
from django.db import transaction  # noqa: E402

CUSTOM_FIELD_KEY = "external_ref"


def main(argv):
    custom_field = "--no-custom-field" not in argv
    email = "handover-tests@example.org"
    with transaction.atomic():
        user = User.objects.create_superuser(email=email, password=secrets.token_urlsafe(24))
        org = Org.objects.create(name="Handover tests")
        profile = Profile.objects.create(user=user, org=org, role="ADMIN")
        raw, _ = PersonalAccessToken.generate(profile, "handover-harness")
        if custom_field:
            CustomFieldDefinition.objects.create(
                org=org,
                target_model="Case",
                key=CUSTOM_FIELD_KEY,
                label="External reference",
                field_type="text",
                is_filterable=True,
            )
    answer = {"token": raw, "org_id": str(org.id), "profile_id": str(profile.id), "email": email}
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
