"""Intake: signed events in, enquiries and their revisions, and what residents send back.

Its modules stand in layers, bottom first; a module imports only from its own layer or below,
and never from the ledger or recovery (tests/foundation/test_layering.py):

1. the words and the records: ``visible``, ``workflow`` (actors, the reason rule),
   ``residentmodels`` (the resident's answers, their documents, the rate counters), ``search``
   (the console's enquiry search), ``models``,
   ``signals``, ``payload``, ``signing``.
2. the rules on one record: ``revisions``, ``suggesters``, ``classification``,
   ``residentlink`` (the signed, expiring link to the resident's page and the signed reply
   address).
3. the services: ``services`` (receiving events, reviewers' actions), ``documents``,
   ``answers`` (a resident's answer as a revision of the same enquiry), ``quoted`` (a new
   enquiry offered as a reply to the one it quotes), ``retention``, ``evaluation``, ``diagram``.
4. the entry points: ``views``, ``urls``, ``admin``, ``apps``, ``checks``, ``management``.
"""
