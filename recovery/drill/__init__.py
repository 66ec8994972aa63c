"""The drill's evidence as the product keeps it: the report (report.py: JSON, HTML, a DrillRun
row) and the console's drill page (views.py).

The drill itself (its processes, destinations, runner and cases, ``manage.py drill``) is test
equipment in ``harness/drill/``: it writes its report through ``report.py``; nothing here
imports it.
"""
