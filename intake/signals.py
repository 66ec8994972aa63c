"""How intake tells the layers above that something happened, without importing them.

Each is sent inside the transaction that made the change, so a receiver's writes (the ledger
queueing the receipt's task, proposing or cancelling operations) commit or roll back with it.
"""

from django.dispatch import Signal

# An enquiry was received and validated, in the transaction that created it. kwargs: enquiry,
# event.
enquiry_received = Signal()

# Revision N+1 of an enquiry was made (an edit); any approval of an older revision is void.
# kwargs: enquiry, revision, previous_revision (number), actor, reason.
revision_created = Signal()

# A repeated delivery arrived for an event whose enquiry exists. kwargs: enquiry, event.
# The ledger nudges stuck work (reconcile now); it never restarts it or creates new work.
event_redelivered = Signal()

# Something was done to an enquiry that is not a change of state (an owner assigned, a conflicting
# delivery refused); the ledger writes it to the journal. kwargs: enquiry, action (dotted code,
# "intake.enquiry.assigned"), actor, reason, evidence (dict).
enquiry_action = Signal()

# A resident's answer could not be attached (no enquiry matched, or its enquiry can no longer
# change): the ledger journals it on the answer. kwargs: answer, action, actor, reason, evidence.
answer_waiting = Signal()

# A resident whose link expired asked for a new one: the ledger proposes the message to the
# address on file, as its own operation. kwargs: enquiry, link (the new URL), actor.
resident_link_requested = Signal()
