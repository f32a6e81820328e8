"""The floor every layer stands on: Bridge's words and rules that need no rows.

vocabulary (the StrEnums stored in the database), errors (BridgeError and the one list of error codes), inputs
(text and numbers from outside), paths (cwd confinement), hints (a manage.py command spelt to work as printed),
doorbell ("key K has news"), resilience (which database errors to retry, and how). It imports only the process
layer (jobs.processes) and Django.
"""
