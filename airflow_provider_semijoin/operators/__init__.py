"""Airflow operators: one long-running streaming semi-join per task, and master-data installs."""
