"""Test equipment: real third-party systems and proxies the tests, the drill and the soak run
against.

Like ``sandbox/``, nothing here is part of the product: ``intake``, ``ledger``, ``recovery`` and
``config`` never import it. ``harness.bottlecrm`` starts a real BottleCRM and
``harness.faultproxy`` puts a fault-injecting proxy in front of any destination (see
docs/sandbox.md).
"""
