"""`dspark smoke`: expectations from config, pure checks with evidence, a verdict, a result.

expectations.py (config -> what to check), checks.py (observations -> results -> the verdict
and exit code), runner.py (the live side: server, log watcher, HTTP), result.py (JSON and
table), schema.py (the `smoke` config section).
"""
