"""Airflow hooks: master-data stores, Spark and a Redis stream source from Airflow connections."""
