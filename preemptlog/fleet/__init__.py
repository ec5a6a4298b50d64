"""Many bundles: the fleet dataset (Parquet), the process pool and Spark, the fleet report, exports (Grafana, OpenMetrics)."""
