"""A real local Spark session for the streaming tests: one per test session."""

import pytest


@pytest.fixture(scope="session")
def spark():
    from airflow_provider_semijoin.spark.session import get_spark

    session = get_spark("local[2]", app_name="semijoin-tests")
    yield session
    session.stop()
