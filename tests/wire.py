"""What a connection sends to PostgreSQL, read from libpq's own trace of the protocol.

Django's query log says which statements ran; only the wire says how they travelled: how many
round trips, which statements went together, which were prepared. A round trip ends where the
client waits: a simple ``Query`` (one message, answered at once), or a ``Sync`` after the
extended protocol's messages (Parse, Bind, Execute; a pipeline sends several statements'
messages before one Sync). A prepared statement is parsed once under its name; later runs
only bind it by that name, so the text is found by the name.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Wire:
    # Per round trip, the statements it ran, in order (a simple Query's text as sent). Empty
    # for a round trip that ran nothing: psycopg prepares a statement outside a pipeline with a
    # Parse and a Sync of its own, before the statement's first run.
    exchanges: list[list[str]] = field(default_factory=list)
    # The texts parsed under a name (prepared), in order.
    prepared: list[str] = field(default_factory=list)

    @property
    def statements(self) -> list[str]:
        return [s for exchange in self.exchanges for s in exchange]

    def without(self, *prefixes: str) -> list[list[str]]:
        """The exchanges with the statements starting with ``prefixes`` left out, and any
        exchange left empty by that (a test's SAVEPOINT and RELEASE, say)."""
        kept = [[s for s in ex if not s.startswith(prefixes)] for ex in self.exchanges]
        return [ex for ex in kept if ex]


def _name(text: str) -> tuple[str, str]:
    """The first double-quoted name in ``text`` (a statement's or a portal's: no quotes or
    spaces inside) and what follows it."""
    text = text.lstrip()
    assert text.startswith('"'), text
    name, _, rest = text[1:].partition('"')
    return name, rest


def _text(text: str, last: bool) -> str:
    """A quoted statement: the whole of ``text`` (a Query's), or up to the last quote followed
    by a space (a Parse's, which its parameters' count and types follow). libpq's trace does
    not escape quotes inside the statement."""
    text = text.strip()[1:]
    return text[:-1] if last else text.rpartition('" ')[0]


def _parse(trace: str, names: dict[str, str]) -> Wire:
    wire = Wire()
    bound = ""
    current: list[str] = []
    for line in trace.splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or fields[0] != "F":
            continue
        kind, rest = fields[2], "\t".join(fields[3:])
        if kind == "Query":
            wire.exchanges.append([_text(rest, last=True)])
        elif kind == "Parse":
            name, after = _name(rest)
            names[name] = _text(after, last=False)
            if name:
                wire.prepared.append(names[name])
        elif kind == "Bind":
            _portal, after = _name(rest)
            bound = names.get(_name(after)[0], "?")
        elif kind == "Execute":
            current.append(bound)
        elif kind == "Sync":
            wire.exchanges.append(current)
            current = []
    return wire


@contextmanager
def sent(connection):
    """The ``Wire`` of what ``connection`` (a Django connection) sends inside the block, filled
    in when the block ends. Statements must be one line each (the trace is read by line)."""
    from psycopg import pq

    wire = Wire()
    connection.ensure_connection()
    # Statements prepared before the block are bound by name only: their texts, from the server.
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        names = dict(cursor.fetchall())
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(os.dup(trace.fileno()))  # libpq closes what it is given
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield wire
        finally:
            pgconn.untrace()
        trace.seek(0)
        parsed = _parse(trace.read().decode(), names)
    wire.exchanges, wire.prepared = parsed.exchanges, parsed.prepared
