"""Skills: instructions for a kind of task, loaded into the window when the query needs them.

A skill is one Markdown file: a front-matter block between two ``---`` lines, then the body,
which is the skill's instructions::

    ---
    name: sql
    description: Query the orders database with read-only SQL.
    triggers: [sql, database, 数据库, 订单]
    always: false
    ---
    Use only SELECT statements. The `orders` table has the columns id, customer, total and
    created_at; dates are UTC. Show the query before its results.

Front-matter lines are ``key: value`` (blank lines and lines starting with ``#`` are skipped;
a value may be quoted). The keys:

- `name` (required): a unique name for the skill;
- `description` (required): one line saying what the skill is for;
- `triggers`: words or phrases that activate the skill, comma-separated (``a, b``) or as a
  list (``[a, b]``); Chinese commas work too;
- `always`: ``true`` to activate the skill on every turn (``false`` by default).

`load_skills(folder)` reads every ``*.md`` file of a folder, in file-name order.

`SkillSource` offers two kinds of blocks. The skill index (a `skills` block: every skill's name
and description, in the given order) is the same on every turn, so it stays in the cached
prompt prefix. Each *activated* skill adds a truncatable `context` block with its full
instructions. A skill is activated when it is `always`, or when its score is above 0: the
larger of the share of the query's terms found in its triggers, and half the share found in
its name and description. At most `max_active` skills are activated, `always` ones first, then
the best scores (ties in the given order).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from loomctx.context.block import BuildContext, ContextBlock, TokenBudget
from loomctx.context.sources._common import check_source, fit_ceiling, short
from loomctx.errors import ConfigError, check_int
from loomctx.text import coverage, terms

__all__ = ["Skill", "SkillSource", "load_skills"]

INDEX_HEADER: Final = "Available skills (activated when relevant):"
_KEYS: Final = ("name", "description", "triggers", "always")
_FENCE: Final = "---"
_LIST_SEPARATORS: Final = re.compile("[,，、]")
_BOOLEANS: Final = {"true": True, "yes": True, "false": False, "no": False}


def _one_line(field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\r" in value:
        raise ConfigError(
            f"a skill's `{field}` must be a non-empty, single-line string, got {short(value)}"
        )
    return value.strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class Skill:
    """One skill: a `name`, a one-line `description`, its `instructions` (Markdown), the
    `triggers` that activate it and whether it is `always` active.

    Build one directly, from a Markdown file with `Skill.from_markdown`, or load a folder of
    them with `load_skills` (the format is in the module docstring).
    """

    name: str
    description: str
    instructions: str
    triggers: tuple[str, ...] = ()
    always: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _one_line("name", self.name))
        object.__setattr__(self, "description", _one_line("description", self.description))
        if not isinstance(self.instructions, str):
            raise ConfigError(
                f"the `instructions` of skill `{self.name}` must be a string, got "
                f"{type(self.instructions).__name__}"
            )
        if isinstance(self.triggers, str) or not all(
            isinstance(t, str) and t.strip() for t in self.triggers
        ):
            raise ConfigError(
                f"the `triggers` of skill `{self.name}` must be non-empty strings, got "
                f"{short(self.triggers)}; pass a tuple such as ('sql', 'database')"
            )
        object.__setattr__(self, "triggers", tuple(t.strip() for t in self.triggers))
        if not isinstance(self.always, bool):
            raise ConfigError(
                f"`always` of skill `{self.name}` must be True or False, got {short(self.always)}"
            )

    @classmethod
    def from_markdown(cls, text: str, *, source: str = "<string>") -> Skill:
        """Parse a skill file (front matter, then the instructions); `source` names the file
        in error messages."""
        if not isinstance(text, str):
            raise ConfigError(
                f"skill {source!r}: the text must be a string, got {type(text).__name__}; "
                "decode the file first (UTF-8)"
            )
        lines = text.removeprefix("\ufeff").splitlines()
        i = 0
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i == len(lines) or lines[i].strip() != _FENCE:
            raise ConfigError(
                f"skill {source!r} has no front matter; start the file with a `---` line, then "
                "`name: ...` and `description: ...` lines, then a `---` line, then the "
                "instructions"
            )
        opened = i + 1
        fields: dict[str, str] = {}
        i += 1
        while i < len(lines) and lines[i].strip() != _FENCE:
            line = lines[i].strip()
            i += 1
            if not line or line.startswith("#"):
                continue
            key, colon, value = line.partition(":")
            key = key.strip().lower()
            where = f"skill {source!r}, line {i}"
            if not colon:
                raise ConfigError(
                    f"{where}: {line!r} is not a `key: value` line; the front matter takes "
                    f"{_known_keys()}"
                )
            if key not in _KEYS:
                raise ConfigError(
                    f"{where}: unknown key `{key}`; the front matter takes {_known_keys()}"
                )
            if key in fields:
                raise ConfigError(f"{where}: the key `{key}` is given twice; keep one")
            fields[key] = _unquote(value.strip())
        if i == len(lines):
            raise ConfigError(
                f"skill {source!r}: the front matter opened at line {opened} is never closed; "
                "end it with a `---` line before the instructions"
            )
        for key in ("name", "description"):
            if not fields.get(key):
                raise ConfigError(
                    f"skill {source!r}: the front matter has no `{key}`; add a `{key}: ...` line"
                )
        always = fields.get("always", "false").lower()
        if always not in _BOOLEANS:
            raise ConfigError(
                f"skill {source!r}: `always` must be true or false, got {fields['always']!r}"
            )
        return cls(
            name=fields["name"],
            description=fields["description"],
            instructions="\n".join(lines[i + 1 :]).strip(),
            triggers=_parse_list(source, fields.get("triggers", "")),
            always=_BOOLEANS[always],
        )


def _known_keys() -> str:
    return ", ".join(f"`{k}`" for k in _KEYS)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].strip()
    return value


def _parse_list(source: str, value: str) -> tuple[str, ...]:
    if value.startswith("[") != value.endswith("]"):
        raise ConfigError(
            f"skill {source!r}: `triggers` {value!r} has an unmatched bracket; write "
            "`triggers: [a, b]` or `triggers: a, b`"
        )
    if value.startswith("["):
        value = value[1:-1]
    items = (_unquote(item.strip()) for item in _LIST_SEPARATORS.split(value))
    return tuple(item for item in items if item)


def load_skills(folder: str | Path) -> list[Skill]:
    """Every skill in the ``*.md`` files of `folder` (not its subfolders), in file-name order.

    Raises `ConfigError` for a missing folder, a malformed file (naming the file) or a skill
    name defined by two files.
    """
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(
            f"`folder` {str(path)!r} is not a directory; pass the folder that holds the skill "
            "`*.md` files"
        )
    skills: list[Skill] = []
    defined_in: dict[str, Path] = {}
    for file in sorted(path.glob("*.md"), key=lambda p: p.name):
        if not file.is_file():
            continue
        try:
            text = file.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"skill {str(file)!r} is not UTF-8 text ({exc}); save it as UTF-8"
            ) from exc
        skill = Skill.from_markdown(text, source=str(file))
        if skill.name in defined_in:
            raise ConfigError(
                f"skill `{skill.name}` is defined twice, in {str(defined_in[skill.name])!r} and "
                f"{str(file)!r}; skill names must be unique: rename or remove one"
            )
        defined_in[skill.name] = file
        skills.append(skill)
    return skills


@dataclass(frozen=True, slots=True, kw_only=True)
class _Indexed:
    index: int
    skill: Skill
    content: str
    trigger_terms: frozenset[str]
    about_terms: frozenset[str]


class SkillSource:
    """The skill index, plus the full instructions of the skills the query activates.

    Blocks, in this order: the index (section `skills`, priority 1.0, not truncatable; the same
    text on every turn), then one `context` block per activated skill, best first (content
    ``"Skill `name`:\\n" + instructions``, truncatable, priority 1.0 when `always`, else its
    score; metadata ``{"skill": name, "score": score}``). Blocks that would exceed
    `budget.ceiling` are cut (instructions) or left out (the index). No skills, no blocks.
    """

    __slots__ = ("_index", "_skills", "max_active", "name", "priority")

    def __init__(
        self,
        skills: Sequence[Skill],
        *,
        name: str = "skills",
        priority: float = 0.7,
        max_active: int = 3,
    ) -> None:
        self.name, self.priority = check_source("SkillSource", name, priority)
        check_int(max_active, f"`max_active` of SkillSource `{self.name}`", minimum=0)
        if isinstance(skills, str) or not isinstance(skills, Sequence):
            raise ConfigError(
                f"`skills` must be a list of `Skill` values, got {type(skills).__name__}; use "
                "`load_skills(folder)` or build them with `Skill(...)`"
            )
        seen: set[str] = set()
        indexed: list[_Indexed] = []
        for i, skill in enumerate(skills):
            if not isinstance(skill, Skill):
                raise ConfigError(
                    f"`skills[{i}]` must be a `Skill`, got {type(skill).__name__} {short(skill)}"
                )
            if skill.name in seen:
                raise ConfigError(
                    f"`skills[{i}]` is named {skill.name!r} like an earlier skill; skill names "
                    "must be unique: rename or remove one"
                )
            seen.add(skill.name)
            indexed.append(
                _Indexed(
                    index=i,
                    skill=skill,
                    content=f"Skill `{skill.name}`:\n{skill.instructions}",
                    trigger_terms=frozenset(terms("\n".join(skill.triggers))),
                    about_terms=frozenset(terms(f"{skill.name}\n{skill.description}")),
                )
            )
        n_always = sum(s.always for s in skills)
        if n_always > max_active:
            raise ConfigError(
                f"{n_always} skills are `always` active but `max_active` is {max_active}; "
                f"raise `max_active` to at least {n_always}, or make fewer skills `always`"
            )
        self.max_active = max_active
        self._skills: tuple[_Indexed, ...] = tuple(indexed)
        self._index = "\n".join([INDEX_HEADER, *(f"- {s.name}: {s.description}" for s in skills)])

    async def collect(
        self, query: str, budget: TokenBudget, *, ctx: BuildContext
    ) -> list[ContextBlock]:
        """The index, then the activated skills' instructions, within `budget.ceiling`."""
        if not self._skills:
            return []
        counter = ctx.counter
        blocks = [
            ContextBlock(
                source=self.name,
                section="skills",
                content=self._index,
                token_count=counter.count(self._index),
                priority=1.0,
                truncatable=False,
                id=f"{self.name}:index",
            )
        ]
        wanted = frozenset(terms(query))
        scored: list[tuple[float, float, _Indexed]] = []
        for entry in self._skills:
            score = max(
                coverage(wanted, entry.trigger_terms), 0.5 * coverage(wanted, entry.about_terms)
            )
            if entry.skill.always or score > 0:
                scored.append((1.0 if entry.skill.always else score, score, entry))
        scored.sort(key=lambda s: -s[0])  # stable: ties keep the given order
        for rank, score, entry in scored[: self.max_active]:
            blocks.append(
                ContextBlock(
                    source=self.name,
                    section="context",
                    content=entry.content,
                    token_count=counter.count(entry.content),
                    priority=rank,
                    truncatable=True,
                    sequence=entry.index,
                    id=f"{self.name}:{entry.skill.name}",
                    metadata={"skill": entry.skill.name, "score": score},
                )
            )
        return fit_ceiling(blocks, budget.ceiling, counter)
