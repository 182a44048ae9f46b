"""Airflow triggers (run in the triggerer; they must live in the installed package)."""
