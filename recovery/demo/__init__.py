"""Demo work for `make run` (seed_demo): every queue and every state has something in it.

``stories`` (and ``trouble``) tell each enquiry's history as data, in the vocabulary of
``steps``; ``play`` walks each one through its real transitions (so the journal is real) at the
time it would have happened, so ages, overdue flags and the journal agree. Nothing here is
enqueued; the sweeper picks up what a running system would.
"""

from recovery.demo.play import seed_policies, seed_work

__all__ = ["seed_policies", "seed_work"]
