"""The transaction layer: staging, savepoints, the committer, conflict detection.

- :mod:`mere.txn.stage` — what a transaction has staged; the interface every verb uses.
- :mod:`mere.txn.committer` — stage to log: validate, put, resolve, rebase, hooks.
- :mod:`mere.txn.conflicts` — whether a winning commit conflicts with a transaction.
- :mod:`mere.txn.context` — what maintenance and Spark verbs may ask of a database.
- :mod:`mere.txn.transaction` — the user-facing Transaction and TxTable.
"""

from mere.txn.committer import Committed, Committer
from mere.txn.context import DatabaseContext, run_statement
from mere.txn.stage import Stage
from mere.txn.transaction import DEFAULT_ISOLATION, Isolation, Transaction, TxTable

__all__ = [
    "DEFAULT_ISOLATION",
    "Committed",
    "Committer",
    "DatabaseContext",
    "Isolation",
    "Stage",
    "Transaction",
    "TxTable",
    "run_statement",
]
