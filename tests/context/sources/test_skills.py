"""Skills: the file format, `load_skills`, and `SkillSource`'s index and activation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomctx import ConfigError, TiktokenCounter
from loomctx.context.block import BuildContext, TokenBudget
from loomctx.context.sources import Skill, SkillSource, load_skills

COUNTER = TiktokenCounter()
CTX = BuildContext(counter=COUNTER)
ROOMY = TokenBudget(tokens=1000, ceiling=4000)

SQL_FILE = """---
name: sql
description: Query the orders database with read-only SQL.
triggers: [sql, 数据库, "orders"]
---
Use only SELECT statements.

The `orders` table has the columns id, customer, total and created_at.
"""

SQL = Skill(
    name="sql",
    description="Query the orders database with read-only SQL.",
    instructions="Use only SELECT statements.",
    triggers=("sql", "数据库", "orders"),
)
WEATHER = Skill(
    name="weather",
    description="Answer questions about the weather forecast.",
    instructions="Always give temperatures in Celsius.",
    triggers=("weather", "天气", "rain"),
)
STYLE = Skill(
    name="style",
    description="House writing style.",
    instructions="Be brief.",
    always=True,
)


# --- the file format -------------------------------------------------------------------------


def test_from_markdown_reads_front_matter_and_body() -> None:
    skill = Skill.from_markdown(SQL_FILE)
    assert skill == Skill(
        name="sql",
        description="Query the orders database with read-only SQL.",
        instructions="Use only SELECT statements.\n\nThe `orders` table has the columns id, "
        "customer, total and created_at.",
        triggers=("sql", "数据库", "orders"),
        always=False,
    )


def test_from_markdown_accepts_the_documented_variations() -> None:
    text = (
        "\ufeff\n\n---\r\n"
        "# a comment\r\n"
        "\r\n"
        "Name: 'weather'\r\n"
        'description: "Weather: forecasts and rain"\r\n'
        "triggers: weather, 天气，下雨、 , rain\r\n"
        "always: Yes\r\n"
        "---\r\n"
        "Celsius.\r\n"
    )
    skill = Skill.from_markdown(text)
    assert skill.name == "weather"
    assert skill.description == "Weather: forecasts and rain"
    assert skill.triggers == ("weather", "天气", "下雨", "rain")
    assert skill.always is True
    assert skill.instructions == "Celsius."


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("FALSE", False), ("no", False)])
def test_always_values(value: str, expected: bool) -> None:
    text = f"---\nname: a\ndescription: b\nalways: {value}\n---\n"
    skill = Skill.from_markdown(text)
    assert skill.always is expected
    assert skill.instructions == ""
    assert skill.triggers == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: a\ndescription: b\n",
            "skill 'x.md' has no front matter; start the file with a `---`",
        ),
        ("", "skill 'x.md' has no front matter"),
        ("\n\n", "skill 'x.md' has no front matter"),
        ("---\nname: a\ndescription: b\n", "the front matter opened at line 1 is never closed"),
        ("---\n", "the front matter opened at line 1 is never closed"),
        ("---\nname a\n---\n", "skill 'x.md', line 2: 'name a' is not a `key: value` line"),
        ("---\nname: a\ntags: x\n---\n", "skill 'x.md', line 3: unknown key `tags`"),
        ("---\nname: a\nname: b\n---\n", "line 3: the key `name` is given twice"),
        ("---\ndescription: b\n---\n", "skill 'x.md': the front matter has no `name`"),
        ("---\nname: a\n---\n", "the front matter has no `description`; add a `description:"),
        ("---\nname: ''\ndescription: b\n---\n", "the front matter has no `name`"),
        ("---\nname: a\ndescription: b\nalways: maybe\n---\n", "`always` must be true or false"),
        ("---\nname: a\ndescription: b\ntriggers: [x, y\n---\n", "`triggers` '[x, y' has an"),
    ],
)
def test_from_markdown_errors_name_the_source_and_the_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        Skill.from_markdown(text, source="x.md")
    assert expected in str(err.value)


def test_unknown_key_message_lists_the_known_keys() -> None:
    with pytest.raises(ConfigError) as err:
        Skill.from_markdown("---\nwhen: x\n---\n")
    message = str(err.value)
    assert "skill '<string>', line 2" in message
    assert "`name`, `description`, `triggers`, `always`" in message


# --- Skill values ----------------------------------------------------------------------------


def test_skill_values_are_normalized() -> None:
    skill = Skill(name=" sql ", description=" d ", instructions="i", triggers=[" a ", "b"])  # type: ignore[arg-type]
    assert skill.name == "sql"
    assert skill.description == "d"
    assert skill.triggers == ("a", "b")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"name": ""}, "a skill's `name` must be a non-empty, single-line string, got ''"),
        ({"name": 3}, "a skill's `name` must be"),
        ({"description": "two\nlines"}, "a skill's `description` must be a non-empty, single-line"),
        ({"description": "cr\rline"}, "got 'cr\\rline'"),
        ({"instructions": None}, "the `instructions` of skill `s` must be a string, got NoneType"),
        ({"triggers": "sql"}, "the `triggers` of skill `s` must be non-empty strings, got 'sql'"),
        ({"triggers": ("sql", " ")}, "pass a tuple such as"),
        ({"triggers": (1,)}, "must be non-empty strings"),
        ({"always": "yes"}, "`always` of skill `s` must be True or False, got 'yes'"),
    ],
)
def test_skill_validation(kwargs: dict[str, object], expected: str) -> None:
    fields: dict[str, object] = {"name": "s", "description": "d", "instructions": "i"}
    with pytest.raises(ConfigError) as err:
        Skill(**{**fields, **kwargs})  # type: ignore[arg-type]
    assert expected in str(err.value)


# --- load_skills -----------------------------------------------------------------------------


def test_load_skills_reads_every_md_file_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b_weather.md").write_text(
        "---\nname: weather\ndescription: Weather.\n---\nCelsius.\n", encoding="utf-8"
    )
    (tmp_path / "a_sql.md").write_text("\ufeff" + SQL_FILE, encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a skill", encoding="utf-8")
    (tmp_path / "folder.md").mkdir()
    (tmp_path / "folder.md" / "c.md").write_text("not read", encoding="utf-8")
    skills = load_skills(tmp_path)
    assert [s.name for s in skills] == ["sql", "weather"]
    assert skills[0] == Skill.from_markdown(SQL_FILE)
    assert load_skills(str(tmp_path)) == skills


def test_load_skills_names_the_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text("---\nname: x\n---\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_skills(tmp_path)
    assert f"skill {str(bad)!r}: the front matter has no `description`" in str(err.value)


def test_load_skills_rejects_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.md"
    bad.write_bytes("---\nname: café\ndescription: d\n---\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        load_skills(tmp_path)
    assert f"skill {str(bad)!r} is not UTF-8 text" in str(err.value)
    assert "save it as UTF-8" in str(err.value)


def test_from_markdown_needs_text() -> None:
    with pytest.raises(ConfigError) as err:
        Skill.from_markdown(b"---\n", source="a.md")  # type: ignore[arg-type]
    assert "skill 'a.md': the text must be a string, got bytes" in str(err.value)


def test_load_skills_rejects_a_name_defined_twice(tmp_path: Path) -> None:
    for stem in ("one", "two"):
        (tmp_path / f"{stem}.md").write_text("---\nname: sql\ndescription: d\n---\n", "utf-8")
    with pytest.raises(ConfigError) as err:
        load_skills(tmp_path)
    message = str(err.value)
    assert "skill `sql` is defined twice" in message
    assert str(tmp_path / "one.md") in message
    assert str(tmp_path / "two.md") in message


def test_load_skills_needs_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_skills(tmp_path / "missing")
    assert "`folder`" in str(err.value)
    assert "is not a directory" in str(err.value)


# --- SkillSource -----------------------------------------------------------------------------


async def test_the_index_lists_every_skill_in_order_and_is_stable() -> None:
    source = SkillSource([SQL, WEATHER])
    first = await source.collect("hello", ROOMY, ctx=CTX)
    second = await source.collect("will it rain tomorrow", ROOMY, ctx=CTX)
    index = first[0]
    assert index == second[0]
    assert index.content == (
        "Available skills (activated when relevant):\n"
        "- sql: Query the orders database with read-only SQL.\n"
        "- weather: Answer questions about the weather forecast."
    )
    assert index.section == "skills"
    assert index.priority == 1.0
    assert not index.truncatable
    assert not index.pinned
    assert index.id == "skills:index"
    assert index.token_count == COUNTER.count(index.content)
    assert len(first) == 1  # "hello" activates nothing


async def test_a_trigger_activates_a_skill() -> None:
    blocks = await SkillSource([SQL, WEATHER]).collect("will it rain tomorrow", ROOMY, ctx=CTX)
    _, active = blocks
    assert active.section == "context"
    assert active.content == "Skill `weather`:\nAlways give temperatures in Celsius."
    assert active.truncatable
    assert not active.pinned
    assert active.sequence == 1
    assert active.id == "skills:weather"
    assert active.token_count == COUNTER.count(active.content)
    assert active.metadata == {"skill": "weather", "score": 0.5}  # rain, tomorrow
    assert active.priority == active.metadata["score"]


async def test_a_chinese_trigger_is_activated_by_a_chinese_query() -> None:
    blocks = await SkillSource([WEATHER, SQL]).collect("帮我查一下数据库里的订单", ROOMY, ctx=CTX)
    assert [b.metadata.get("skill") for b in blocks] == [None, "sql"]
    assert blocks[1].metadata["score"] > 0


async def test_name_and_description_count_half() -> None:
    skill = Skill(name="translate", description="Translate text to French", instructions="x")
    (_, block) = await SkillSource([skill]).collect("translate french", ROOMY, ctx=CTX)
    assert block.metadata["score"] == 0.5


async def test_always_skills_come_first_and_best_scores_next_up_to_max_active() -> None:
    docs = Skill(name="docs", description="d", instructions="x", triggers=("orders",))
    source = SkillSource([SQL, docs, WEATHER, STYLE], max_active=3)
    blocks = await source.collect("sql orders weather", ROOMY, ctx=CTX)
    # sql: 2/3, docs: 1/3, weather: 1/3 (tie with docs: the given order wins, and the cap cuts it)
    assert [b.metadata.get("skill") for b in blocks] == [None, "style", "sql", "docs"]
    assert blocks[1].priority == 1.0
    assert blocks[1].metadata["score"] == 0.0
    assert blocks[2].priority == pytest.approx(2 / 3)


async def test_max_active_zero_offers_the_index_only() -> None:
    blocks = await SkillSource([SQL], max_active=0).collect("sql", ROOMY, ctx=CTX)
    assert [b.id for b in blocks] == ["skills:index"]


async def test_no_skills_no_blocks() -> None:
    assert await SkillSource([]).collect("sql", ROOMY, ctx=CTX) == []


async def test_instructions_are_cut_to_the_ceiling_and_the_index_left_out_if_too_big() -> None:
    long = Skill(
        name="sql", description="d", instructions="Use SELECT only. " * 200, triggers=("sql",)
    )
    source = SkillSource([long])
    (index, whole) = await source.collect("sql", ROOMY, ctx=CTX)
    ceiling = index.token_count + 50
    (index2, cut) = await source.collect("sql", TokenBudget(tokens=0, ceiling=ceiling), ctx=CTX)
    assert index2 == index
    assert cut.token_count == COUNTER.count(cut.content) <= 50
    assert cut.metadata["truncated_from"] == whole.token_count
    assert cut.content.startswith("Skill `sql`:\nUse SELECT only.")
    # Too small for the index: the instructions may still be offered, cut.
    (only,) = await source.collect(
        "sql", TokenBudget(tokens=0, ceiling=index.token_count - 1), ctx=CTX
    )
    assert only.id == "skills:sql"


@given(st.integers(min_value=0, max_value=120), st.sampled_from(["", "sql", "rain sql 数据库"]))
async def test_never_more_than_the_ceiling(ceiling: int, query: str) -> None:
    blocks = await SkillSource([SQL, WEATHER, STYLE]).collect(
        query, TokenBudget(tokens=0, ceiling=ceiling), ctx=CTX
    )
    assert sum(b.token_count for b in blocks) <= ceiling
    for b in blocks:
        assert b.token_count == COUNTER.count(b.content)
        assert 0.0 <= b.priority <= 1.0


@pytest.mark.parametrize("max_active", [-1, True, 1.5])
def test_max_active_must_be_a_non_negative_int(max_active: object) -> None:
    with pytest.raises(ConfigError) as err:
        SkillSource([SQL], max_active=max_active)  # type: ignore[arg-type]
    assert "`max_active` of SkillSource `skills` must be an int >= 0" in str(err.value)
    assert repr(max_active) in str(err.value)


def test_skills_must_be_a_list_of_skills() -> None:
    with pytest.raises(ConfigError) as err:
        SkillSource("sql")  # type: ignore[arg-type]
    assert "`skills` must be a list of `Skill` values, got str" in str(err.value)
    with pytest.raises(ConfigError) as err:
        SkillSource([SQL, {"name": "x"}])  # type: ignore[list-item]
    assert "`skills[1]` must be a `Skill`, got dict" in str(err.value)


def test_skill_names_must_be_unique() -> None:
    with pytest.raises(ConfigError) as err:
        SkillSource([SQL, WEATHER, SQL])
    assert "`skills[2]` is named 'sql' like an earlier skill" in str(err.value)


def test_more_always_skills_than_max_active_is_an_error() -> None:
    other = Skill(name="tone", description="d", instructions="x", always=True)
    with pytest.raises(ConfigError) as err:
        SkillSource([STYLE, other], max_active=1)
    message = str(err.value)
    assert "2 skills are `always` active but `max_active` is 1" in message
    assert "raise `max_active` to at least 2" in message
