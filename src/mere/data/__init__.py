"""The data-file layer: Parquet files with statistics, written and read as Arrow."""
