"""The framework's ceiling for intake: what gunicorn + Django can answer when a request writes
one row and nothing else.

Not part of the product and never routed in it: ``bench/intake.py`` serves it from a second
gunicorn (``bench.ceiling.wsgi``), with the product's own settings, middleware and gunicorn
options, so that the intake's figure can be read against three numbers measured in one run:
raw PostgreSQL (the issue's baseline), this ceiling, and the real endpoint.
"""
