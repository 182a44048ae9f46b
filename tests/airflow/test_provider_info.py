"""Provider metadata: everything it lists imports, Airflow reads the declarative connection form,
the plugin is registered under airflow.plugins, and the [semijoin] defaults are what the code uses."""

from __future__ import annotations

import configparser
import importlib
from pathlib import Path

from airflow_provider_semijoin.get_provider_info import CONFIG_OPTIONS, PLUGIN_CLASS, get_provider_info

REPO = Path(__file__).resolve().parents[2]


def _import(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_listed_module_and_class_imports():
    info = get_provider_info()
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for connection in info["connection-types"]:
        hook = _import(connection["hook-class-name"])
        assert hook.conn_type == connection["connection-type"]
        assert "get_connection_form_widgets" not in vars(hook) and "get_ui_field_behaviour" not in vars(hook)
    for link in info["extra-links"]:
        assert _import(link)().name == "Semi-join metrics"


def test_airflow_reads_the_declarative_connection_form():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-provider-semijoin" in manager.providers
    widgets = manager.connection_form_widgets
    assert widgets["extra__semijoin_master__dialect"].field["schema"]["enum"] == ["sqlite", "mysql", None]
    assert widgets["extra__semijoin_master__page_rows"].field["value"] == 500
    assert manager.field_behaviours["semijoin_master"]["hidden_fields"] == ["extra"]
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert ProvidersManagerTaskRuntime().hooks["semijoin_master"].hook_name == "Semi-join master data"


def test_plugin_entry_point_matches_provider_info():
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    lines = [line.strip() for line in setup["options.entry_points"]["airflow.plugins"].strip().splitlines()]
    assert lines == [f"semijoin = {PLUGIN_CLASS.rpartition('.')[0]}:{PLUGIN_CLASS.rpartition('.')[2]}"]
    assert get_provider_info()["plugins"] == [{"name": "semijoin", "plugin-class": PLUGIN_CLASS}]


def test_config_defaults_are_what_option_returns(monkeypatch):
    from airflow_provider_semijoin.config import option

    for name in CONFIG_OPTIONS:
        monkeypatch.delenv(f"AIRFLOW__SEMIJOIN__{name.upper()}", raising=False)
    assert {name: option(name) for name in CONFIG_OPTIONS} == {name: d for name, (_, d, _) in CONFIG_OPTIONS.items()}
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__MEMORY", "64M")
    assert option("memory") == "64M"
    section = get_provider_info()["config"]["semijoin"]["options"]
    assert section["memory"]["default"] == "50M" and section["history_points"]["type"] == "integer"
