"""Test destination: a separate HTTP process standing in for other people's services.

Imports nothing from the project's other apps, and nothing from Django outside ``apps.py`` and
the ``runsandbox`` management command. See docs/sandbox.md.
"""
