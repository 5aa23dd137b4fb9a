"""What mere's own filter semantics cost a Spark read: ``mere.spark.read(filter=...)``.

The rows a filter keeps are mere's (its engine runs on the DataFrame's Arrow
batches, ``mapInArrow``), with the conjuncts Spark reads the same way also
handed to Spark so that its Parquet reader skips row groups. Side by side in
one Spark session, on the table of ``spark_read.py`` (``--rows``, default 2M):

* ``parquet``: ``spark.read.parquet(<the table's files>).where(<the same condition>)``
  -- Spark alone, the floor (with Spark's meaning of the condition);
* ``native``: ``mere.spark.read(spark, uri, table, filter=...)``;
* ``datasource``: the same with ``method="datasource"``.

Each filter is timed as ``count()`` (one warm-up, then ``--repeats`` runs;
medians, with their ratio to ``parquet``).

    .venv/bin/python benchmarks/spark_filter.py --rows 2000000
"""

from __future__ import annotations

from typing import Any

import _common as c
from spark_read import TABLE, arguments, prepare, timed

FILTERS = [
    "id = 1234567",  # one row group
    "country = 'FR'",  # a tenth of the rows, every row group
    "amount > 990",  # a hundredth, every row group
    "note LIKE 'note-12%'",  # a LIKE without a backslash: Spark's too
    "amount * 2 > 1980",  # arithmetic: mere's engine on Arrow batches (mapInArrow)
]


def main() -> None:
    args = arguments(__doc__.split("\n")[0], rows=2_000_000).parse_args()
    uri, _, spark, paths, _ = prepare(args)

    import mere.spark

    rows_out: list[list[Any]] = []
    for condition in FILTERS:
        readers = {
            "parquet": lambda cond=condition: spark.read.parquet(*paths).where(cond),
            "native": lambda cond=condition: mere.spark.read(spark, uri, TABLE, filter=cond),
            "datasource": lambda cond=condition: mere.spark.read(
                spark, uri, TABLE, filter=cond, method="datasource"
            ),
        }
        medians = {}
        counts = {}
        for reader, make in readers.items():
            counts[reader] = make().count()
            medians[reader] = c.median(timed(lambda make=make: make().count(), args.repeats))
            print(f"  {condition:<24} {reader:<10} {medians[reader]:.2f} s", flush=True)
        base = medians["parquet"]
        rows_out.append(
            [
                condition,
                counts["native"],
                medians["parquet"],
                medians["native"],
                medians["datasource"],
                f"{medians['native'] / base:.2f}x",
                f"{medians['datasource'] / base:.2f}x",
            ]
        )
    spark.stop()
    print(
        c.format_table(
            [
                "filter",
                "rows",
                "parquet s",
                "native s",
                "datasource s",
                "native/parquet",
                "datasource/parquet",
            ],
            rows_out,
        )
    )


if __name__ == "__main__":
    main()
