"""Settings: defaults < TOML file < LOGBUS_* environment < flags, and validation messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from logbus.config import KEYS, LISTENERS, ConfigError, Settings, check_endpoint, load_settings
from logbus.core.log.topic_config import TopicConfig


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "logbus.toml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    s = load_settings({}, environ={})
    assert s == Settings()
    assert s.data_dir == Path("data")
    assert s.listeners() == {
        "amqp": ["tcp:5672:interface=127.0.0.1"],
        "mqtt": ["tcp:1883:interface=127.0.0.1"],
        "kafka": ["tcp:9092:interface=127.0.0.1"],
        "http": ["tcp:8080:interface=127.0.0.1"],
    }
    assert s.topic_defaults() == TopicConfig()
    assert s.config_file is None


def test_every_listener_is_a_key() -> None:
    assert set(LISTENERS) <= set(KEYS)


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        'data_dir = "/from/file"\n'
        'http = "tcp:1111:interface=127.0.0.1"\n'
        'mqtt = "tcp:2222:interface=127.0.0.1"\n'
        "default_partitions = 2\n"
        'default_flush = "none"\n',
    )
    environ = {
        "LOGBUS_CONFIG": str(path),
        "LOGBUS_HTTP": "tcp:3333:interface=127.0.0.1",
        "LOGBUS_DEFAULT_PARTITIONS": "4",
        "LOGBUS_DATA_DIR": "/from/env",
    }
    s = load_settings({"data_dir": "/from/flag", "default_partitions": None}, environ=environ)
    assert s.data_dir == Path("/from/flag")  # flag beats env and file
    assert s.http == "tcp:3333:interface=127.0.0.1"  # env beats file
    assert s.default_partitions == 4  # env beats file; a None flag is "not given"
    assert s.mqtt == "tcp:2222:interface=127.0.0.1"  # file beats default
    assert s.default_flush == "none"
    assert s.kafka == Settings().kafka  # default
    assert s.config_file == path
    assert s.topic_defaults() == TopicConfig(partitions=4, flush="none")


def test_config_flag_beats_config_env(tmp_path: Path) -> None:
    env_file = write_toml(tmp_path, "default_partitions = 7\n")
    flag_file = tmp_path / "other.toml"
    flag_file.write_text("default_partitions = 9\n")
    s = load_settings({"config": str(flag_file)}, environ={"LOGBUS_CONFIG": str(env_file)})
    assert s.default_partitions == 9
    assert s.config_file == flag_file


def test_empty_env_var_is_unset() -> None:
    assert load_settings({}, environ={"LOGBUS_HTTP": ""}).http == Settings().http


def test_unrelated_env_vars_are_ignored() -> None:
    load_settings({}, environ={"LOGBUS_SERVER": "http://x", "LOGBUS_SOMETHING": "1"})


def test_off_disables_a_listener() -> None:
    s = load_settings({"amqp": "off", "kafka": "OFF"}, environ={"LOGBUS_MQTT": "off"})
    assert s.amqp == s.kafka == s.mqtt == "off"
    assert s.listeners() == {"http": [Settings().http]}


@pytest.mark.parametrize(("key", "value"), [("pop_retry_backoff", "1x"), ("pop_retry_backoff", 5),
                                          ("mqtt_anonymous", "sometimes"), ("tls_cert_login", "cn"),
                                          ("kafka_sasl_mechanisms", "GSSAPI")])
def test_every_bad_value_is_a_config_error_naming_its_key(key: str, value: object) -> None:
    """Not an exception of another kind (it escaped as a traceback with exit code 1)."""
    with pytest.raises(ConfigError, match=f"^{key}: .*from command-line flag"):
        load_settings({key: value}, environ={})


def test_anonymous_access_is_loopback_or_nothing() -> None:
    for key in ("mqtt_anonymous", "kafka_anonymous"):
        assert getattr(load_settings({key: "off"}, environ={}), key) == "off"
        with pytest.raises(ConfigError, match="beyond loopback"):
            load_settings({key: "on"}, environ={})
    assert load_settings({}, environ={}).anonymous_user == "anonymous"  # not guest (decision 0039)
    assert load_settings({"anonymous_user": "guest"}, environ={}).anonymous_user == "guest"  # the old behaviour


def test_a_listener_has_one_or_more_endpoints(tmp_path: Path) -> None:
    """Plain and TLS side by side: several endpoints separated by whitespace (flags,
    environment) or a TOML array; "off" alone."""
    s = load_settings({"mqtt": "tcp:1883:interface=127.0.0.1  tcp:1884:interface=127.0.0.1"}, environ={})
    assert s.listeners()["mqtt"] == ["tcp:1883:interface=127.0.0.1", "tcp:1884:interface=127.0.0.1"]
    path = write_toml(tmp_path, 'kafka = ["tcp:9092:interface=127.0.0.1", "tcp:9093:interface=127.0.0.1"]\n')
    assert load_settings({"config": str(path)}, environ={}).listeners()["kafka"] == [
        "tcp:9092:interface=127.0.0.1", "tcp:9093:interface=127.0.0.1"]
    for bad in ("off tcp:1:interface=127.0.0.1", "tcp:1:interface=127.0.0.1 tcp:x", "   "):
        with pytest.raises(ConfigError, match="mqtt"):
            load_settings({"mqtt": bad}, environ={})


def test_a_listener_may_have_its_own_anonymous_rule() -> None:
    """``anonymous=`` (logbus's option, taken out before Twisted parses the endpoint): the
    listener's rule instead of mqtt_anonymous / kafka_anonymous; only where that means
    something, and only off or loopback."""
    both = "tcp:1883:interface=127.0.0.1 tcp:8883:interface=0.0.0.0:anonymous=off"
    assert load_settings({"mqtt": both, "kafka": "tcp:9092:anonymous=loopback"}, environ={}).listeners()[
        "mqtt"] == both.split()
    for key, bad, fragment in (("mqtt", "tcp:1:anonymous=on", "one of off, loopback"),
                               ("kafka", "tcp:1:anonymous=off:anonymous=loopback", "given twice"),
                               ("amqp", "tcp:1:anonymous=off", "mqtt, mqtt_ws and kafka listeners only"),
                               ("http", "tcp:1:anonymous=off", "mqtt, mqtt_ws and kafka listeners only")):
        with pytest.raises(ConfigError, match=fragment):
            load_settings({key: bad}, environ={})


def test_off_from_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'http = "off"\n')
    assert "http" not in load_settings({"config": str(path)}, environ={}).listeners()


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp:0",
        "tcp:5672:interface=127.0.0.1",
        "tcp:port=80:backlog=10",
        "unix:/tmp/logbus.sock",
        "unix:/tmp/logbus.sock:mode=600",
    ],
)
def test_valid_endpoints(endpoint: str) -> None:
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize(
    "endpoint, fragment",
    [
        ("tcp:notaport", "not a valid endpoint"),
        ("tcp:70000", "out of range"),
        ("bogus:1", "not a valid endpoint"),
        ("tcp", "wrong arguments"),
        ("tcp:1:nonsense=1", "wrong arguments"),
        ("5672", "not a valid endpoint"),
        ("", "must not be empty"),
        ("ssl:443:privateKey=/nonexistent/key.pem", "/nonexistent/key.pem"),
    ],
)
def test_invalid_endpoints(endpoint: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        check_endpoint(endpoint)
    assert fragment in str(info.value)


def test_parsing_endpoints_does_not_install_the_reactor() -> None:
    # `logbus serve` installs epoll after loading the config: parsing must not pick a reactor.
    code = (
        "import sys; from logbus.config import load_settings; "
        "load_settings({'http': 'tcp:0:interface=127.0.0.1'}, environ={}); "
        "sys.exit('twisted.internet.reactor' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_bad_endpoint_names_key_and_source() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({}, environ={"LOGBUS_HTTP": "tcp:what"})
    message = str(info.value)
    assert message.startswith("http: ")
    assert "environment variable LOGBUS_HTTP" in message
    assert "tcp:what" in message


def test_bad_flag_names_the_flag() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"default_partitions": "many"}, environ={})
    assert str(info.value) == (
        "default_partitions: must be an integer, not 'many'"
        " (from command-line flag --default-partitions)"
    )


def test_bad_file_value_names_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'default_flush = "sometimes"\n')
    with pytest.raises(ConfigError) as info:
        load_settings({"config": str(path)}, environ={})
    assert "default_flush" in str(info.value)
    assert f"config file {path}" in str(info.value)


@pytest.mark.parametrize(
    "flags, fragment",
    [
        ({"default_partitions": "0"}, "between 1 and 100000"),
        ({"default_partitions": True}, "must be an integer"),
        ({"default_flush": "interval:0"}, "interval:<ms>"),
        ({"default_flush": "sometimes"}, "flush must be"),
        ({"max_open_files": "-1"}, "between"),
        ({"log_level": "loud"}, "must be one of debug"),
        ({"data_dir": "  "}, "must not be empty"),
        ({"kafka_auto_create_topics": "perhaps"}, "must be true or false"),
    ],
)
def test_invalid_values(flags: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(flags, environ={})
    key = next(iter(flags))
    assert str(info.value).startswith(f"{key}: ")
    assert fragment in str(info.value)


def test_values_are_normalised() -> None:
    s = load_settings(
        {"default_flush": " Interval:50 ", "log_level": "DEBUG", "default_partitions": " 3 "},
        environ={},
    )
    assert (s.default_flush, s.log_level, s.default_partitions) == ("interval:50", "debug", 3)
    assert s.topic_defaults().flush_interval_ms == 50
    assert load_settings({"kafka_auto_create_topics": " OFF "}, environ={}).kafka_auto_create_topics is False


def test_unknown_key_in_file_is_an_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'data_dir = "d"\nhttp_port = 8080\n')
    with pytest.raises(ConfigError) as info:
        load_settings({"config": str(path)}, environ={})
    assert "unknown key(s) 'http_port'" in str(info.value)
    assert str(path) in str(info.value)


def test_tables_in_file_are_unknown_keys(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[listeners]\nhttp = "off"\n')
    with pytest.raises(ConfigError, match="unknown key"):
        load_settings({"config": str(path)}, environ={})


def test_wrong_toml_type(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "http = 8080\n")
    with pytest.raises(ConfigError, match=r"^http: must be a string, not 8080 \(from config file"):
        load_settings({"config": str(path)}, environ={})


def test_invalid_toml(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "data_dir = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings({"config": str(path)}, environ={})


def test_missing_config_file_names_where_it_was_given(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_settings({}, environ={"LOGBUS_CONFIG": str(missing)})
    assert f"LOGBUS_CONFIG={missing}" in str(info.value)
    assert "No such file" in str(info.value)


def test_unknown_flag_key() -> None:
    with pytest.raises(ConfigError, match="unknown setting"):
        load_settings({"colour": "blue"}, environ={})


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(AttributeError):
        s.http = "off"  # type: ignore[misc]


def test_data_dir_expands_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    assert load_settings({"data_dir": "~/logbus"}, environ={}).data_dir == Path(
        "/home/someone/logbus"
    )


def test_resource_limits_defaults_are_rabbitmqs() -> None:
    s = Settings()
    assert (s.memory_high_watermark, s.disk_free_limit) == (0.4, 50_000_000)


def test_resource_limits_from_file_env_and_flags(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "memory_high_watermark = 0.5\ndisk_free_limit = 1_000_000_000\n")
    s = load_settings({"config": str(path)}, environ={})
    assert (s.memory_high_watermark, s.disk_free_limit) == (0.5, 1_000_000_000)
    s = load_settings({}, environ={"LOGBUS_MEMORY_HIGH_WATERMARK": " 0.25 ",
                                   "LOGBUS_DISK_FREE_LIMIT": "0"})
    assert (s.memory_high_watermark, s.disk_free_limit) == (0.25, 0)
    # above 1 a watermark is a byte count, and stays an integer
    s = load_settings({"memory_high_watermark": "2000000000"}, environ={})
    assert s.memory_high_watermark == 2_000_000_000 and isinstance(s.memory_high_watermark, int)
    assert load_settings({"memory_high_watermark": "1"}, environ={}).memory_high_watermark == 1.0


@pytest.mark.parametrize(
    "flags, fragment",
    [
        ({"memory_high_watermark": "0"}, "fraction of RAM (0 < x <= 1) or a whole number of bytes"),
        ({"memory_high_watermark": "1.5"}, "fraction of RAM"),
        ({"memory_high_watermark": "lots"}, "must be a number, not 'lots'"),
        ({"memory_high_watermark": True}, "fraction of RAM"),
        ({"disk_free_limit": "-1"}, "between 0 and"),
        ({"disk_free_limit": "50MB"}, "must be an integer"),
        ({"disk_free_limit": 1.5}, "must be an integer"),
    ],
)
def test_invalid_resource_limits(flags: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(flags, environ={})
    assert str(info.value).startswith(f"{next(iter(flags))}: ")
    assert fragment in str(info.value)


def test_amqp_read_linger() -> None:
    assert Settings().amqp_read_linger_ms == 1.0
    assert load_settings({}, environ={"LOGBUS_AMQP_READ_LINGER_MS": "0"}).amqp_read_linger_ms == 0.0
    assert load_settings({"amqp_read_linger_ms": "2.5"}, environ={}).amqp_read_linger_ms == 2.5
    for bad, fragment in (("-1", "between 0 and 100"), ("101", "between 0 and 100"), ("nan", "between"),
                          ("soon", "must be a number"), (True, "must be a number")):
        with pytest.raises(ConfigError, match=fragment):
            load_settings({"amqp_read_linger_ms": bad}, environ={})
    assert Settings().amqp_read_linger_max_ms == 8.0
    assert load_settings({}, environ={"LOGBUS_AMQP_READ_LINGER_MAX_MS": "1"}).amqp_read_linger_max_ms == 1.0
    with pytest.raises(ConfigError, match="between 0 and 1000"):
        load_settings({"amqp_read_linger_max_ms": "1001"}, environ={})


def test_every_key_is_a_serve_flag() -> None:
    from logbus.cli import build_parser

    args = ["serve"]
    for key in KEYS:
        args += [f"--{key.replace('_', '-')}", "x"]
    parsed = vars(build_parser().parse_args(args))
    assert all(parsed[key] in ("x", ["x"]) for key in KEYS)  # listeners take one or more


def test_default_user_and_loopback_users_are_rabbitmqs() -> None:
    s = Settings()
    assert (s.default_user, s.default_pass, s.loopback_users) == ("guest", "guest", ("guest",))
    assert "default_pass" not in repr(s)  # the password is not shown


def test_users_from_file_env_and_flags(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'default_user = "admin"\ndefault_pass = " spaced "\n'
                                'loopback_users = ["admin", "ops"]\n')
    s = load_settings({"config": str(path)}, environ={})
    assert (s.default_user, s.default_pass, s.loopback_users) == ("admin", " spaced ", ("admin", "ops"))
    s = load_settings({}, environ={"LOGBUS_LOOPBACK_USERS": "guest, ops ,", "LOGBUS_DEFAULT_PASS": "x"})
    assert (s.loopback_users, s.default_pass) == (("guest", "ops"), "x")
    for nobody in ("none", " None ", []):
        assert load_settings({"loopback_users": nobody}, environ={}).loopback_users == ()


@pytest.mark.parametrize(
    "flags, fragment",
    [
        ({"default_user": " "}, "must not be empty"),
        ({"default_user": "a\x00b"}, "must not contain NUL"),
        ({"default_pass": ""}, "must be a non-empty string"),
        ({"default_pass": 5}, "must be a non-empty string"),
        ({"loopback_users": 5}, "must be a list of user names"),
        ({"loopback_users": ["a", 1]}, "must be a list of user names"),
    ],
)
def test_invalid_user_settings(flags: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(flags, environ={})
    assert str(info.value).startswith(f"{next(iter(flags))}: ")
    assert fragment in str(info.value)


def test_client_state_expiry_has_kafkas_defaults_and_is_validated() -> None:
    """producer.id.expiration.ms (1 day) and offsets.retention.minutes (7 days, in ms here)."""
    s = Settings()
    assert s.kafka_producer_id_expiration_ms == 86_400_000
    assert s.kafka_offsets_retention_ms == 10_080 * 60_000
    env = {"LOGBUS_KAFKA_PRODUCER_ID_EXPIRATION_MS": "500", "LOGBUS_KAFKA_OFFSETS_RETENTION_MS": "1000"}
    s = load_settings({}, environ=env)
    assert (s.kafka_producer_id_expiration_ms, s.kafka_offsets_retention_ms) == (500, 1000)
    for key in ("kafka_producer_id_expiration_ms", "kafka_offsets_retention_ms"):
        with pytest.raises(ConfigError, match=f"^{key}: must be between 1 and"):
            load_settings({key: "0"}, environ={})


def test_turn_pace() -> None:
    assert Settings().turn_pace_ms == 1.0
    assert load_settings({}, environ={"LOGBUS_TURN_PACE_MS": "0"}).turn_pace_ms == 0.0
    assert load_settings({"turn_pace_ms": "0.5"}, environ={}).turn_pace_ms == 0.5
    for bad, fragment in (("-1", "between 0 and 100"), ("101", "between 0 and 100"), ("soon", "must be a number")):
        with pytest.raises(ConfigError, match=fragment):
            load_settings({"turn_pace_ms": bad}, environ={})
