"""The journal is append-only in the database itself, not only in the ORM.

UPDATE and DELETE are always refused. TRUNCATE is refused unless the session sets
handover.allow_journal_truncate=on, which only the test settings do (Django's test flush
empties tables with TRUNCATE); a test proves the refusal on a connection without it.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION ledger_journal_refuse_change() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'TRUNCATE'
       AND coalesce(current_setting('handover.allow_journal_truncate', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'ledger_journalentry is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER ledger_journal_no_update_delete
    BEFORE UPDATE OR DELETE ON ledger_journalentry
    FOR EACH ROW EXECUTE FUNCTION ledger_journal_refuse_change();

CREATE TRIGGER ledger_journal_no_truncate
    BEFORE TRUNCATE ON ledger_journalentry
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_journal_refuse_change();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS ledger_journal_no_truncate ON ledger_journalentry;
DROP TRIGGER IF EXISTS ledger_journal_no_update_delete ON ledger_journalentry;
DROP FUNCTION IF EXISTS ledger_journal_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
