"""The layout of the sandbox's SQLite file: every table, and what a reset empties.

One file holds the records of every service and the control state (faults, capabilities,
counters), so a restarted process sees all of it; ``SCHEMA_VERSION`` refuses a file of another
layout.
"""

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS crm_enquiries (
    id TEXT PRIMARY KEY,
    reference TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ts REAL NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0,
    close_reason TEXT,
    closed_at TEXT
);
CREATE INDEX IF NOT EXISTS crm_enquiries_reference ON crm_enquiries (reference);

CREATE TABLE IF NOT EXISTS notify_messages (
    id TEXT PRIMARY KEY,
    reference TEXT NOT NULL,
    recipient TEXT NOT NULL,
    template TEXT NOT NULL,
    body TEXT,
    created_at TEXT NOT NULL,
    deliver_at_ts REAL NOT NULL,
    will_fail INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS notify_messages_reference ON notify_messages (reference);

CREATE TABLE IF NOT EXISTS doc_versions (
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (doc_id, version)
);

CREATE TABLE IF NOT EXISTS doc_access (
    doc_id TEXT PRIMARY KEY,
    allowed INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE TABLE IF NOT EXISTS faults (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    target TEXT NOT NULL,
    mode TEXT NOT NULL,
    remaining INTEGER NOT NULL,
    delay_ms INTEGER
);

CREATE TABLE IF NOT EXISTS faults_fired (
    target TEXT NOT NULL,
    mode TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (target, mode)
);

CREATE TABLE IF NOT EXISTS request_counts (
    target TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);

-- Every service request by method and path as sent (still percent-encoded), routed or not:
-- what a test reads to prove that no request reached a path it should not have.
CREATE TABLE IF NOT EXISTS request_paths (
    request TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);
-- Every service call's arrival (seconds since the epoch), for the per-second counts and the
-- rate limit; rows older than REQUEST_LOG_SECONDS are dropped as new ones come in.
CREATE TABLE IF NOT EXISTS request_log (
    at REAL NOT NULL,
    target TEXT NOT NULL,
    limited INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS request_log_at ON request_log (at);

CREATE TABLE IF NOT EXISTS capabilities (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

# A reset empties every table but keeps the schema.
RESET_STATEMENTS = (
    "DELETE FROM crm_enquiries",
    "DELETE FROM notify_messages",
    "DELETE FROM doc_versions",
    "DELETE FROM doc_access",
    "DELETE FROM idempotency_keys",
    "DELETE FROM faults",
    "DELETE FROM faults_fired",
    "DELETE FROM request_counts",
    "DELETE FROM request_paths",
    "DELETE FROM request_log",
    "DELETE FROM capabilities",
)
