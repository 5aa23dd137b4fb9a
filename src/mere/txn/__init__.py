"""The transaction layer: optimistic transactions, conflict detection, rebase and retry."""

from mere.txn.transaction import DEFAULT_ISOLATION, Isolation, Transaction, TxTable

__all__ = ["DEFAULT_ISOLATION", "Isolation", "Transaction", "TxTable"]
