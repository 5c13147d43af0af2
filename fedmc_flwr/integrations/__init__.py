"""Integration hooks: a trained policy reading and acting on a real estate.

Every hook is dry-run unless `INTEGRATION_MODE=live` is set: it computes what it would do,
prints it as JSON lines and sends nothing that changes anything (`mode.py`). Every call to
a service has a timeout and bounded retries (`retry.py`), so an unreachable or slow
service costs one log line, never a crashed run.
"""
