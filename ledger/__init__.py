"""The ledger: operations, attempts, the journal, the destinations, policies and the engine.

Its modules stand in layers; a module imports only from its own layer or the ones below it,
at the top of the file or inside a function alike (tests/foundation/test_layering.py holds the
table and fails on an upward import or an import circle):

1. the records: ``models`` and ``journal``, with what they need (``messages``, ``storable``,
   ``rates``, ``queueing``, ``worker``, ``failpoints``, ``wording``, ``notices``,
   ``appointments``, ``extraction``, ``signed_events``, ``budget``). No connector: a kind of
   destination registers itself with the model (``models.register_kinds``).
2. the destinations: ``errors``, ``reading``, ``http``, ``limits``, ``reads``, ``mailaddress``,
   ``smtpwire``, ``smtp``, ``connectors``, ``kinds``, ``integrations``. Adding a kind touches
   this layer only.
3. ``policies``: what each action is and who may act on it, and which connector carries an
   operation out.
4. ``proposals``: the work the ledger proposes itself.
5. the engine: ``effects``, ``execution``, ``delivery``.
6. the services and the entry points: ``services``, ``receipt``, ``sweeper``, ``purge``,
   ``tasks``, ``webhooks``, ``inbound`` (replies by e-mail), ``residentpage`` (the resident's
   page), ``receivers``, ``admin``, ``apps``, ``management``.

The journal stays in the ledger, not in an app of its own. Its rows name intake's records
(an enquiry, a revision) and intake's actors, so a journal app would sit above intake and intake
still could not call it; the transitions reach it through django-fsm's ``post_transition``
whoever owns it; and intake's own entries (``intake.signals.enquiry_action``) are written
inside intake's transaction by the ledger's receiver, so nothing is lost by the round trip.
Recovery, above the ledger, calls ``ledger.journal`` directly.
"""
