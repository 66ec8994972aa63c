"""The drill: the design's failure matrix run for real, with an evidence report.

``python manage.py drill`` (recovery/management/commands/drill.py) -> runner.Drill sets up the
real parts, cases.CASES run one by one, report.py writes JSON and HTML and keeps a DrillRun.
"""
