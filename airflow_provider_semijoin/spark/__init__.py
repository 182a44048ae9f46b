"""Spark Structured Streaming runner for the join engine (imports pyspark lazily)."""
