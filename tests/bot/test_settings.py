"""Settings: defaults, environment parsing, clear errors naming the variable, masking."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import SettingsError, load_settings


def test_defaults_are_offline_with_home(isolated_env: Path) -> None:
    settings = load_settings()
    assert settings.offline
    assert settings.home == isolated_env
    assert settings.user_pool == 4
    assert settings.system_pool == 2
    assert settings.lane_queue_cap == 50
    assert settings.prompt_expiry_seconds == 1800


def test_environment_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-1234567890")
    monkeypatch.setenv("RAVEN_ADMINS", "U1, U2 ,,U3")
    monkeypatch.setenv("RAVEN_USER_POOL", "8")
    settings = load_settings()
    assert not settings.offline
    assert settings.admins == ["U1", "U2", "U3"]
    assert settings.user_pool == 8


def test_dotenv_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = tmp_path / "cwd" / ".env"
    env.write_text("RAVEN_SYSTEM_POOL=3\nRAVEN_MODEL=claude-test\n")
    settings = load_settings()
    assert settings.system_pool == 3
    assert settings.model == "claude-test"


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("RAVEN_USER_POOL", "0", "RAVEN_USER_POOL: Input should be greater than 0"),
        ("RAVEN_USER_POOL", "many", "RAVEN_USER_POOL: Input should be a valid integer"),
        ("RAVEN_LOG_LEVEL", "LOUD", "RAVEN_LOG_LEVEL: use one of DEBUG"),
        ("ANTHROPIC_BASE_URL", "localhost:8080", "ANTHROPIC_BASE_URL: must start with http"),
        ("RAVEN_MODEL_TIMEOUT", "-1", "RAVEN_MODEL_TIMEOUT: Input should be greater than 0"),
    ],
)
def test_invalid_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert expected in str(err.value)
    assert "fix these in .env or the environment" in str(err.value)


def test_masked_hides_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1111-2222-abcdefghijkl")
    masked = load_settings().masked()
    assert secret not in str(masked)
    assert "xoxb-1111-2222-abcdefghijkl" not in str(masked)
    assert masked["ANTHROPIC_API_KEY"].startswith("sk-a")
    assert masked["DISCORD_TOKEN"] == "(unset)"
    assert masked["RAVEN_HOME"]


def test_dotenv_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cwd" / ".env").write_bytes(b"RAVEN_MODEL=caf\xe9\n")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert ".env is not UTF-8 text" in str(err.value)


def test_a_channel_config_is_read_as_a_prefixed_section(
    monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    from bot.slack.config import SlackConfig

    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1")
    monkeypatch.setenv("RAVEN_THREAD_CONTEXT_MESSAGES", "7")
    config = load_settings().section(SlackConfig, prefix="slack_", reveal=True)
    # Prefixed names, then unprefixed shared ones; a tunable with no setting keeps its default.
    assert (config.bot_token, config.app_token, config.signing_secret) == ("xoxb-1", "xapp-1", None)
    assert config.thread_context_messages == 7
    assert config.rate_limit_retries == SlackConfig(bot_token="x").rate_limit_retries
    hidden = load_settings().section(SlackConfig, prefix="slack_")
    assert hidden.bot_token.get_secret_value() == "xoxb-1"  # type: ignore[attr-defined]
