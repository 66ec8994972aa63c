"""The console's enquiry search without accents and with the parts of e-mail addresses: an
immutable SQL function ``handover_unaccent`` and ``search_vector`` made again with it
(intake.models.search_document).

Not the unaccent extension: the embedded PostgreSQL that ``make run`` and ``make test`` use
(pgserver) ships no contrib extensions. Core PostgreSQL does it instead: Unicode compatibility
decomposition (normalize, NFKD; the database must be UTF8, as Django expects), the combining
marks removed, and the few letters that do not decompose (ł ø đ ħ ı ß æ œ) spelt out.

A stored generated column's expression cannot be changed in place before PostgreSQL 17: the
column is dropped and added again, which rewrites intake_enquiry under an exclusive lock
(intake waits while it runs; measured in docs/benchmarks.md, plan a quiet window for a large
table). The GIN index is then built CONCURRENTLY.
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import migrations, models
from django.db.models import F, Func, Value

UNACCENT = r"""
CREATE FUNCTION handover_unaccent(text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT replace(replace(replace(replace(replace(replace(
    translate(
      regexp_replace(
        normalize($1, NFKD),
        '[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]', '', 'g'
      ),
      'łŁøØđĐħĦı', 'lLoOdDhHi'
    ),
    'ß', 'ss'), 'ẞ', 'SS'), 'æ', 'ae'), 'Æ', 'AE'), 'œ', 'oe'), 'Œ', 'OE')
$$;
"""


def unaccented(expression):
    return Func(expression, function="handover_unaccent")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("intake", "0008_h28doc_document_text"),
    ]

    operations = [
        migrations.RunSQL(UNACCENT, "DROP FUNCTION handover_unaccent(text);"),
        migrations.RemoveIndex(model_name="enquiry", name="enquiry_search"),
        migrations.RemoveField(model_name="enquiry", name="search_vector"),
        migrations.AddField(
            model_name="enquiry",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=SearchVector(
                    unaccented(F("name")),
                    unaccented(F("email")),
                    unaccented(Func(F("email"), Value("@"), Value(" "), function="replace")),
                    unaccented(
                        Func(F("email"), Value("@._-+"), Value("     "), function="translate")
                    ),
                    unaccented(F("subject")),
                    unaccented(F("message")),
                    config="simple",
                ),
                output_field=SearchVectorField(),
            ),
        ),
        AddIndexConcurrently(
            model_name="enquiry",
            index=GinIndex(fields=["search_vector"], name="enquiry_search"),
        ),
    ]
