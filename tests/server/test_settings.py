import pytest

from service.server.settings import SettingsError, load_settings, parse_tokens


def test_service_refuses_to_start_without_tokens():
    with pytest.raises(SettingsError, match="LAKELOCK_TOKENS is empty"):
        load_settings(tokens="", auth="on")


def test_auth_off_needs_no_tokens():
    assert load_settings(tokens="", auth="off").auth == "off"


@pytest.mark.parametrize(
    ("name", "meaning"),
    [("lakelock", "the service itself"), ("anonymous", "callers with auth off")],
)
def test_a_token_may_not_take_a_name_the_audit_trail_gives_others(name, meaning):
    """The trail's actor `lakelock` is the service (an expiry), `anonymous` anyone with auth
    off: a token of either name would pass its calls off as theirs."""
    with pytest.raises(SettingsError) as caught:
        load_settings(tokens=f"ingest:job:secret-123,{name}:operator:secret-456")
    message = str(caught.value)
    assert "LAKELOCK_TOKENS" in message and f"entry 2 is named {name!r}" in message
    assert meaning in message and "give the token another name" in message
    assert "secret-456" not in message
    assert parse_tokens("lakelock-ops:operator:secret-456")[0].name == "lakelock-ops"


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


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"catalog_warehouse": "gs://bucket/wh"},
            "LAKELOCK_CATALOG_WAREHOUSE is on gs://, which the catalog front cannot reach",
        ),
        (
            {"catalog_warehouse": "s3://b/wh", "catalog_s3_endpoint": "s3.example.com"},
            "LAKELOCK_CATALOG_S3_ENDPOINT: must be an http:// or https:// URL",
        ),
        (
            {"catalog_warehouse": "s3://b/wh", "catalog_s3_endpoint": "http://h:9000/path"},
            "with no path, user or query",
        ),
        (
            {"catalog_warehouse": "s3://b/wh", "catalog_s3_region": "EU West 1"},
            "LAKELOCK_CATALOG_S3_REGION: must be a region name",
        ),
        (
            {"catalog_warehouse": "file:///wh", "catalog_s3_region": "eu-west-1"},
            "LAKELOCK_CATALOG_S3_REGION set, but LAKELOCK_CATALOG_WAREHOUSE is on local files",
        ),
    ],
)
def test_the_catalogs_storage_settings_are_checked_at_start(values, message):
    with pytest.raises(SettingsError, match=message.replace("?", r"\?")):
        load_settings(auth="off", **values)


def test_an_s3_warehouse_takes_its_endpoint_region_and_path_style():
    settings = load_settings(
        auth="off",
        catalog_warehouse="s3a://lake/wh/",
        catalog_s3_endpoint="http://127.0.0.1:9000/",
        catalog_s3_region="eu-west-1",
        catalog_s3_path_style="true",
    )
    assert settings.catalog_warehouse == "s3a://lake/wh"
    assert settings.catalog_s3_endpoint == "http://127.0.0.1:9000"
    assert settings.catalog_s3_path_style is True
