"""Test equipment: the drill, real third-party systems and proxies the tests, the drill and the
soak run against.

Like ``sandbox/``, nothing here is part of the product: ``intake``, ``ledger``, ``recovery`` and
``config`` never import it (tests/foundation/test_layering.py); it may use product code.
``harness.drill`` is the drill (``manage.py drill``; this is a Django app only for that
command), ``harness.bottlecrm`` starts a real BottleCRM, ``harness.faultproxy`` puts a
fault-injecting proxy in front of any destination (see docs/sandbox.md), and
``harness.processes`` is the one free port, bounded wait, control call and child process
(``Child``) they all use, and the benchmarks too.
"""
