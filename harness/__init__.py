"""Test equipment: real third-party systems started for the tests, the drill and the soak.

Like ``sandbox/``, nothing here is part of the product: ``intake``, ``ledger``, ``recovery`` and
``config`` never import it. ``harness.bottlecrm`` starts a real BottleCRM (see docs/sandbox.md,
"A real BottleCRM for tests").
"""
