"""airflow-provider-semijoin: semi-stream joins (MESHJOIN, INLJ, HYBRIDJOIN, ...) for real-time ETL."""

__version__ = "0.1.0"
