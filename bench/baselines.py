"""The physical limits Handover is judged against, measured in the same run on the same machine.

- raw PostgreSQL: one plain transaction per row (psycopg, no Django), N concurrent clients;
- a bare client loop: `requests` against the sandbox, creating or looking up records.
"""

import threading
import time
import uuid

import psycopg
import requests


def raw_table(url: str) -> None:
    """The baseline's table (the framework ceiling in bench/ceiling writes to it too)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw (id bigserial PRIMARY KEY, source text, "
            "event_id text, body text, received_at timestamptz DEFAULT now(), "
            "UNIQUE (source, event_id))"
        )


def raw_postgres_inserts(url: str, rows: int, clients: int = 8) -> dict:
    """Rows written per second, one INSERT + COMMIT each, like an intake that stores an event."""
    raw_table(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE bench_raw")
    per_client = rows // clients
    body = '{"name": "Bench", "message": "' + "x" * 200 + '"}'
    errors = []

    def work():
        try:
            with psycopg.connect(url) as conn:
                for _ in range(per_client):
                    conn.execute(
                        "INSERT INTO bench_raw (source, event_id, body) VALUES (%s, %s, %s)",
                        ("website", uuid.uuid4().hex, body),
                    )
                    conn.commit()
        except Exception as exc:  # reported, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return {
        "rows": per_client * clients,
        "seconds": elapsed,
        "per_s": per_client * clients / elapsed,
    }


def bare_create_loop(sandbox_url: str, count: int, prefix: str) -> dict:
    """A single-threaded requests loop creating records in the sandbox CRM."""
    session = requests.Session()
    started = time.perf_counter()
    for i in range(count):
        ref = f"{prefix}-{i}"
        response = session.post(
            f"{sandbox_url}/crm/enquiries",
            json={"reference": ref, "name": "Bench", "message": "bench"},
            headers={"Idempotency-Key": ref},
            timeout=10,
        )
        response.raise_for_status()
    elapsed = time.perf_counter() - started
    session.close()
    return {"count": count, "seconds": elapsed, "per_s": count / elapsed}


def bare_lookup_loop(sandbox_url: str, references: list[str]) -> dict:
    """A single-threaded requests loop looking records up by reference."""
    session = requests.Session()
    started = time.perf_counter()
    for ref in references:
        response = session.get(
            f"{sandbox_url}/crm/enquiries", params={"reference": ref}, timeout=10
        )
        response.raise_for_status()
    elapsed = time.perf_counter() - started
    session.close()
    return {"count": len(references), "seconds": elapsed, "per_s": len(references) / elapsed}
