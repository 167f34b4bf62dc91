""".env.example is generated from the settings models: the committed file is what
`bot.env_example` renders, every setting is in it with no secret's value, and a new unit's
settings model appears with its section and fields without anyone editing the file."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings

from bot.env_example import default_models, render
from bot.settings import Settings, known_variables, secret_names

ENV_EXAMPLE = Path(__file__).resolve().parents[2] / ".env.example"
FAKE_SECRET = "fake-default-secret-value-42"


class PagerSettings(BaseSettings):
    """A pager feature's own settings, as a new unit declares them."""

    pager_key: SecretStr = Field(
        default=SecretStr(FAKE_SECRET),
        validation_alias="RAVEN_PAGER_KEY",
        description="Key of the paging service.",
    )
    pager_targets: list[str] = Field(
        default_factory=lambda: ["ops", "sre"],
        validation_alias=AliasChoices("RAVEN_PAGER_TARGETS", "PAGER_TARGETS"),
        description="Who gets paged " + "and why, " * 12 + "in a long description.",
    )
    pager_loud: bool = Field(
        default=True, validation_alias="RAVEN_PAGER_LOUD", description="Ring too."
    )
    pager_after: float = Field(
        default=1e-3, validation_alias="RAVEN_PAGER_AFTER", description="Seconds."
    )
    pager_log: Path = Field(
        default=Path("~/pager.log"), validation_alias="RAVEN_PAGER_LOG", description="Log."
    )


def test_the_committed_file_is_the_generated_one() -> None:
    committed = ENV_EXAMPLE.read_text(encoding="utf-8")
    assert committed == render(), ".env.example is not what the models say: run `make env-example`"


def test_every_setting_is_listed_and_no_secret_has_a_value() -> None:
    text = render()
    lines = text.splitlines()
    prose = " ".join(line.removeprefix("# ") for line in lines)
    for name in known_variables():
        # A field's first name is the line to set; its other names are mentioned.
        assert f"# {name}=" in text or f"Also read as {name}" in prose, name
    for model in default_models():
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
    for name in secret_names():
        value = next(line for line in lines if line.startswith(f"# {name}="))
        assert value == f"# {name}=", f"{name} has a value in .env.example"
    assert lines[0].startswith("# raven-bot configuration. Copy to .env")
    assert all(len(line) <= 100 for line in lines), [line for line in lines if len(line) > 100]


def test_core_comes_first_then_features_then_adapters() -> None:
    models = default_models()
    assert models[0] is Settings
    kinds = [m.__module__.split(".")[0] for m in models[1:]]
    assert kinds == sorted(kinds, key=lambda k: k != "host"), kinds
    text = render()
    sections = [line for line in text.splitlines() if line.startswith("# === ")]
    assert sections[0] == "# === bot/settings.py"
    assert "# === host/features/schedules/settings.py" in sections
    assert sections.index("# === bot/slack/settings.py") > sections.index(
        "# === host/features/schedules/settings.py"
    )


def test_a_new_units_settings_appear_without_a_hand_edit() -> None:
    text = render([Settings, PagerSettings])
    assert "# === tests/bot/test_env_example.py\n# A pager feature's own settings" in text
    assert "# RAVEN_PAGER_KEY=\n" in text and FAKE_SECRET not in text
    assert "# RAVEN_PAGER_TARGETS=ops,sre\n" in text
    assert "Also read as PAGER_TARGETS." in text
    assert "# RAVEN_PAGER_LOUD=true\n" in text
    assert "# RAVEN_PAGER_AFTER=0.001\n" in text
    assert "# RAVEN_PAGER_LOG=~/pager.log\n" in text
    assert "# Key of the paging service. (A secret:" in text
    assert all(len(line) <= 100 for line in text.splitlines())
    # The real list leaves the test's model out: only the given models are rendered.
    assert "RAVEN_PAGER_KEY" not in render()
