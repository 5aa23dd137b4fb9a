"""Row-changing operations, one module per verb, on top of a transaction.

Every operation is copy-on-write: it reads only the files whose partition
values or statistics may hold matching rows, removes the files that really do,
and writes their surviving or changed rows to new files. The files read,
removed and added are recorded on the transaction, so conflict detection is
exact (see :mod:`mere.txn.conflicts`).
"""
