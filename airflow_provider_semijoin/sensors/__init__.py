"""Airflow sensors: pending master-data changes, deadline-miss ratios of running joins."""
