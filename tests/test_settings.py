import pytest

from service.server.settings import SettingsError, load_settings, parse_tokens


def test_service_refuses_to_start_without_tokens():
    with pytest.raises(SettingsError, match="LAKELOCK_TOKENS is empty"):
        load_settings(tokens="", auth="on")


def test_auth_off_needs_no_tokens():
    assert load_settings(tokens="", auth="off").auth == "off"


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ("ingest:writer:secret-123", "role 'writer'"),
        ("ingest:job", "not name:role:secret"),
        ("ingest:job:short", "shorter than 8"),
        ("a:job:secret-123,a:reader:secret-456", "repeats the name"),
    ],
)
def test_bad_tokens_are_refused_without_echoing_the_secret(tokens, message):
    with pytest.raises(SettingsError, match=message) as caught:
        load_settings(tokens=tokens)
    assert "secret-123" not in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value", "variable"),
    [
        ("port", 0, "LAKELOCK_PORT"),
        ("database_url", "postgres://x", "LAKELOCK_DATABASE_URL"),
        ("auth", "maybe", "LAKELOCK_AUTH"),
        ("max_wait_s", 100000, "LAKELOCK_MAX_WAIT_S"),
    ],
)
def test_bad_values_name_the_variable(field, value, variable):
    with pytest.raises(SettingsError, match=variable):
        load_settings(**{"auth": "off", field: value})


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAKELOCK_PORT", "9001")
    monkeypatch.setenv("LAKELOCK_AUTH", "off")
    monkeypatch.setenv("LAKELOCK_DATABASE_URL", "mysql://u:p@db/lock")
    settings = load_settings()
    assert settings.port == 9001
    assert settings.database_url == "mysql+pymysql://u:p@db/lock"


def test_the_c_driver_is_taken_when_named():
    url = "mysql+mysqldb://u:p@db/lock"
    assert load_settings(auth="off", database_url=url).database_url == url
    with pytest.raises(SettingsError, match="LAKELOCK_DATABASE_URL"):
        load_settings(auth="off", database_url="mysql+asyncmy://u:p@db/lock")


def test_token_repr_hides_the_secret():
    (token,) = parse_tokens("ops:operator:very-secret-value")
    assert "very-secret-value" not in repr(token)
