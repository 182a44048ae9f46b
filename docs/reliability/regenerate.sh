#!/bin/sh
# Regenerates one part of docs/reliability/ (README.md there says what each wrote and when):
#   docs/reliability/regenerate.sh soak|faults|hostile|sigkill
# Run from the repository root. Scratch output goes to $SCRATCH (default /tmp/semijoin-reliability);
# what the report commits is copied into docs/reliability/. Environment:
#   PYTHON  the interpreter with the package's dependencies (default: python)
#   MASTER  the soak's MariaDB master (default: the test database below)
#   SEMIJOIN_TEST_MYSQL_URL  the MariaDB the tests use (the fault tests start their own mariadbd)
set -eu
part=${1:?usage: regenerate.sh soak|faults|hostile|sigkill}
PYTHON=${PYTHON:-python}
SCRATCH=${SCRATCH:-/tmp/semijoin-reliability}
DOCS=docs/reliability
export PYTHONPATH=${PYTHONPATH:-.} SEMIJOIN_ARTIFACTS=$SCRATCH/artifacts
export SEMIJOIN_TEST_MYSQL_URL=${SEMIJOIN_TEST_MYSQL_URL:-mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_test}
MASTER=${MASTER:-$SEMIJOIN_TEST_MYSQL_URL}
mkdir -p "$SCRATCH/artifacts"
case $part in
soak)  # 30 minutes
    "$PYTHON" -m airflow_provider_semijoin.cli soak --minutes 30 --out "$SCRATCH/soak" --update-every 20 \
        --kill-every 15 --master "$MASTER"
    mkdir -p $DOCS/soak && cp "$SCRATCH/soak/soak.csv" "$SCRATCH/soak/soak.png" "$SCRATCH/soak/soak.json" $DOCS/soak/ ;;
faults)
    "$PYTHON" -m pytest tests/faults -p no:cacheprovider
    cp "$SCRATCH/artifacts/faults.json" "$SCRATCH/artifacts/faults.md" $DOCS/ ;;
hostile)
    "$PYTHON" -m pytest tests/hostile -p no:cacheprovider
    cp "$SCRATCH/artifacts/hostile/tally.json" "$SCRATCH/artifacts/hostile/tally.md" $DOCS/ ;;
sigkill)  # 10 kills, 30 micro-batches per algorithm (the acceptance tier runs the default 3)
    SEMIJOIN_TEST_KILLS=10 "$PYTHON" -m pytest -p no:cacheprovider -m acceptance \
        "tests/spark/test_recovery.py::test_sigkill_at_random_points_of_a_carried_run_is_exactly_once"
    cp "$SCRATCH/artifacts/recovery/sigkill.json" "$SCRATCH/artifacts/recovery/sigkill.md" $DOCS/ ;;
*) echo "regenerate.sh: unknown part $part (soak, faults, hostile or sigkill)" >&2; exit 2 ;;
esac
