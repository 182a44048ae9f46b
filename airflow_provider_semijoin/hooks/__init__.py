"""Airflow hooks: master-data stores and Spark from Airflow connections."""
