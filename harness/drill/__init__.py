"""The drill: the design's failure matrix run for real against real processes.

``python manage.py drill`` (harness/management/commands/drill.py) -> runner.Drill sets up the
real parts (processes.py: web server and clusters; destination.py: the sandbox; realcrm.py: a
real CRM behind the fault proxy; backup.py: the integration rows kept and given back),
cases.CASES run one by one (cases/: the cases by group; results.py: what each found), and the
evidence is written through the product's report API (``recovery.drill.report``: JSON, HTML
and a DrillRun row, shown on the console's drill page).
"""
