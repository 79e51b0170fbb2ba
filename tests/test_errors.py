"""The error tree: one root, the documented subclasses, messages that say what to do."""

from __future__ import annotations

import pytest

from loomctx import errors
from loomctx.errors import ConfigError, Oversize, check_int


@pytest.mark.parametrize(
    "cls",
    [
        errors.ConfigError,
        errors.MessageFormatError,
        errors.IngestLimitError,
        errors.TokenizerError,
        errors.BudgetExceededError,
        errors.StoreError,
        errors.ConflictError,
        errors.ProviderError,
        errors.ToolError,
        errors.MissingExtraError,
        errors.BusClosedError,
        errors.BusLoopError,
    ],
)
def test_every_error_is_a_loom_error_and_documented_in_the_tree(cls: type[Exception]) -> None:
    assert issubclass(cls, errors.LoomError)
    assert cls.__name__ in (errors.__doc__ or "")


def test_config_errors_are_value_errors_and_missing_extras_import_errors() -> None:
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.MessageFormatError, errors.ConfigError)
    assert issubclass(errors.IngestLimitError, errors.ConfigError)
    assert issubclass(errors.MissingExtraError, ImportError)


def test_budget_exceeded_names_every_offender_and_the_budget() -> None:
    err = errors.BudgetExceededError(
        offenders=[Oversize(name="system", tokens=900), Oversize(name="user_input", tokens=300)],
        budget=1000,
    )
    text = str(err)
    assert "`system` (900 tokens)" in text
    assert "`user_input` (300 tokens)" in text
    assert "budget of 1000 tokens" in text
    assert "needs 1200 tokens" in text
    assert err.budget == 1000
    assert [o.name for o in err.offenders] == ["system", "user_input"]


def test_missing_extra_names_the_extra_to_install() -> None:
    err = errors.MissingExtraError(feature="HuggingFaceCounter", extra="hf", module="tokenizers")
    assert "pip install 'loomctx[hf]'" in str(err)
    assert err.extra == "hf"


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "3", None])
def test_check_int_refuses_what_is_not_an_int_at_least_the_minimum(value: object) -> None:
    with pytest.raises(ConfigError, match=rf"^`n` must be an int >= 1, got {value!r}$"):
        check_int(value, "`n`", minimum=1)


def test_check_int_takes_none_only_when_told_what_it_means() -> None:
    assert check_int(5, "`n`", minimum=5) == 5
    assert check_int(None, "`n`", minimum=1, none="no limit") is None
    with pytest.raises(ConfigError, match=r"^`n` must be an int >= 1 or None \(no limit\), got 0$"):
        check_int(0, "`n`", minimum=1, none="no limit")
