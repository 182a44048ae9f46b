"""The Airflow UI surface of the provider: a monitor of running semi-joins (see :mod:`.semijoin_plugin`)."""
