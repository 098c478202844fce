"""Settings come from overrides, then the environment, then the file, then defaults."""

from __future__ import annotations

from pathlib import Path

from payplane_server.config import load_settings


def test_defaults_are_the_embedded_single_machine_setup(tmp_path: Path) -> None:
    settings = load_settings({}, data_dir=tmp_path)
    assert settings.is_sqlite
    assert settings.resolved_database_url == f"sqlite:///{(tmp_path / 'payplane.db').resolve()}"
    assert settings.rate_limit_per_minute == 60
    assert settings.clarification_wait_seconds == 1800
    assert settings.payment_page_url == "http://127.0.0.1:8080"


def test_environment_overrides_the_file_and_options_override_both(tmp_path: Path) -> None:
    (tmp_path / "payplane.toml").write_text('port = 9000\nworkers = 3\nlog_level = "debug"\n')
    env = {"PAYPLANE_DATA_DIR": str(tmp_path), "PAYPLANE_WORKERS": "5"}
    settings = load_settings(env, port=9100)
    assert settings.port == 9100
    assert settings.workers == 5
    assert settings.log_level == "debug"


def test_booleans_and_paths_are_read_from_text(tmp_path: Path) -> None:
    env = {
        "PAYPLANE_DATA_API_PLAIN_HTTP": "true",
        "PAYPLANE_TLS_CERT_FILE": "/etc/payplane/cert.pem",
    }
    settings = load_settings(env, data_dir=tmp_path)
    assert settings.data_api_plain_http is True
    assert settings.tls_cert_file == Path("/etc/payplane/cert.pem")


def test_the_master_key_is_not_in_the_repr(tmp_path: Path) -> None:
    settings = load_settings({"PAYPLANE_MASTER_KEY": "c2VjcmV0LW1hc3Rlci1rZXk="}, data_dir=tmp_path)
    assert settings.master_key == "c2VjcmV0LW1hc3Rlci1rZXk="
    assert "c2VjcmV0" not in repr(settings)


def test_public_url_replaces_the_listening_address(tmp_path: Path) -> None:
    settings = load_settings({"PAYPLANE_PUBLIC_URL": "https://pay.example.com/"}, data_dir=tmp_path)
    assert settings.payment_page_url == "https://pay.example.com"
