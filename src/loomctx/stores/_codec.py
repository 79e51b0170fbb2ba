"""How the SQL backends write and read records, and the checks on what a batch hands them.

Both `SQLiteStore` and `PostgresStore` keep a record as one row of ``records`` with the
columns of `COLUMNS`; a namespace as one string (`encode`) whose part-wise prefixes are
string prefixes, so a prefix read is a range (`prefix_range`); `data` as compact JSON.
What is checked here is checked the same way by both, before anything is written: a bad
value is a `ConfigError` naming the field and how to fix it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loomctx.errors import ConfigError, StoreError, check_int
from loomctx.stores.base import Namespace, PutVectors, Record, VectorSearch

__all__ = [
    "COLUMNS",
    "JSONData",
    "check_limit",
    "check_seq",
    "check_str",
    "check_vectors",
    "check_where",
    "checked",
    "decode",
    "encode",
    "float32",
    "prefix_range",
    "query_vector",
    "record_from_row",
    "stored",
    "unencodable",
    "wrong_dim",
]

COLUMNS: Final = "namespace, key, kind, text, data, seq, created_at, updated_at"
"""The columns of ``records`` that make a `Record`, in `record_from_row`'s order."""


# --- namespaces as strings -------------------------------------------------------------------


def encode(namespace: Namespace) -> str:
    """``('t', 'a')`` -> ``'t/a/'``: a part-wise prefix is then a string prefix."""
    return "".join(f"{part}/" for part in namespace)


@functools.lru_cache(maxsize=4096)  # a search reads thousands of records of a few namespaces
def decode(encoded: str) -> Namespace:
    """The namespace of an `encode`d string."""
    return tuple(encoded[:-1].split("/"))


def prefix_range(prefix: Namespace) -> tuple[str, str] | None:
    """Bounds with ``low <= namespace < high`` exactly for namespaces under `prefix`."""
    if not prefix:
        return None
    low = encode(prefix)
    return low, low[:-1] + chr(ord("/") + 1)


# --- records -----------------------------------------------------------------------------------


# `data` is the store's own compact JSON: `raw_decode` skips `loads`' whitespace scans, a
# fifth of decoding the few hundred records a deep search reads.
_decode_json: Final = json.JSONDecoder().raw_decode


class JSONData(Mapping[str, Any]):
    """A record's data, decoded from its JSON text when first read (`Search.lazy`)."""

    __slots__ = ("_data", "_text")

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._data: dict[str, Any] | None = None

    def decoded(self) -> dict[str, Any]:
        """The data, decoded (once; threads may race to it, harmlessly)."""
        data = self._data
        if data is None:
            text = self._text
            if text is None:  # another thread decoded it since
                return self._data  # type: ignore[return-value]
            data = self._data = _decode_json(text)[0]
            self._text = None
        return data

    def __getitem__(self, key: str) -> Any:
        return self.decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __len__(self) -> int:
        return len(self.decoded())

    def __contains__(self, key: object) -> bool:
        return key in self.decoded()

    def get(self, key: str, default: Any = None) -> Any:
        return self.decoded().get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JSONData):
            other = other.decoded()
        return self.decoded() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.decoded())

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles are plain dicts
        return (dict, (self.decoded(),))


def record_from_row(row: Sequence[Any], *, json_text: bool = True, lazy: bool = False) -> Record:
    """The `Record` of a row of `COLUMNS`. `json_text`: `data` is JSON text (SQLite), else
    already decoded (PostgreSQL's ``jsonb``); `lazy`: keep the text until first read."""
    namespace, key, kind, text, data, seq, created_at, updated_at = row
    if json_text:
        data = JSONData(data) if lazy else _decode_json(data)[0]
    return Record(
        namespace=decode(namespace),
        key=key,
        kind=kind,
        text=text,
        data=data,
        seq=seq,
        created_at=created_at,
        updated_at=updated_at,
    )


def stored(
    record: Record,
    namespace: Namespace,
    data_json: str,
    *,
    seq: int,
    created_at: float,
    now: float,
) -> Record:
    """What a `Put` returns: the record as written, with its seq and timestamps."""
    return Record(
        namespace=namespace,
        key=record.key,
        kind=record.kind,
        text=record.text,
        data=json.loads(data_json),
        seq=seq,
        created_at=created_at,
        updated_at=now,
    )


# --- checks on what a batch hands in -------------------------------------------------------------


def unencodable(what: str, error: UnicodeEncodeError) -> str:
    """The message for a string that is not valid Unicode (and how to clean it)."""
    bad = error.object[error.start : error.end]
    return (
        f"{what} cannot be stored: it holds {bad!r} at position {error.start}, which is not "
        f"valid Unicode text (a lone surrogate, as decoding bytes with "
        f"errors='surrogateescape' leaves); decode the bytes with errors='replace', or "
        f"clean the string with `s.encode('utf-8', 'replace').decode('utf-8')`"
    )


def checked(record: Record, namespace: Namespace) -> tuple[str, str]:
    """The encoded namespace and the `data` JSON of a record to write (every store's checks):
    `ConfigError` for a key, kind or text that is not a string, `data` that is not JSON, or
    a field that is not valid Unicode. A store stores UTF-8: a lone surrogate (from bytes
    decoded with "surrogateescape") cannot be written, and the error names the field rather
    than let a UnicodeEncodeError escape."""
    check_str("key", record.key)
    check_str("kind", record.kind)
    if not isinstance(record.text, str):
        raise ConfigError(f"`text` must be a string, got {type(record.text).__name__}")
    try:
        data_json = json.dumps(
            dict(record.data), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise ConfigError(
            f"`data` of record {record.key!r} must be JSON-serializable (strings, numbers, "
            f"booleans, None, lists and dicts with string keys): {error}"
        ) from error
    encoded = encode(namespace)
    fields = (("namespace", encoded), ("key", record.key), ("kind", record.kind))
    for name, value in (*fields, ("text", record.text), ("data", data_json)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ConfigError(
                unencodable(f"the `{name}` of record {record.key!r}", error)
            ) from error
    return encoded, data_json


def check_str(name: str, value: object) -> None:
    """`ConfigError` unless `value` is a string."""
    if not isinstance(value, str):
        raise ConfigError(f"`{name}` must be a string, got {value!r}")


def check_limit(limit: object) -> int:
    """An op's `limit` as an int >= 0, else a `ConfigError`."""
    return check_int(limit, "`limit`", minimum=0)


def check_seq(value: object, name: str) -> int:
    """`value` as a seq (an int), else a `ConfigError` naming the field `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"`{name}` must be an int, got {value!r}")
    return value


def check_where(name: object, value: object) -> None:
    """One ``Scan.where`` condition: a plain key, compared to a str, int, float or bool."""
    if not isinstance(name, str) or not name or '"' in name or "\\" in name:
        raise ConfigError(
            f"`where` keys must be non-empty strings without '\"' or '\\\\', got {name!r}"
        )
    if not isinstance(value, str | int | float):  # bool is an int
        raise ConfigError(
            f"`where` values must be str, int, float or bool, got {value!r} for {name!r}"
        )


def float32(value: object, name: str) -> npt.NDArray[np.float32]:
    """`value` as a little-endian float32 array of finite numbers, else a `ConfigError`."""
    try:
        array: npt.NDArray[np.float32] = np.asarray(value, dtype="<f4")
    except (TypeError, ValueError) as error:
        raise ConfigError(f"`{name}` must be an array of numbers: {error}") from error
    if not np.isfinite(array).all():
        raise ConfigError(f"`{name}` contains NaN or infinity; check the embedder's output")
    return array


def check_vectors(op: PutVectors) -> npt.NDArray[np.float32]:
    """The vectors of a `PutVectors`: one finite row per item, at least one dimension."""
    check_str("model", op.model)
    vectors = float32(op.vectors, "vectors")
    if vectors.ndim != 2 or vectors.shape[0] != len(op.items) or vectors.shape[1] < 1:
        raise ConfigError(
            f"`vectors` must be a 2-d array with one row per item ({len(op.items)} "
            f"items), got shape {vectors.shape}"
        )
    return vectors


def query_vector(op: VectorSearch) -> tuple[npt.NDArray[np.float32], int]:
    """The checked query vector of a `VectorSearch`, and its checked limit."""
    check_str("model", op.model)
    limit = check_limit(op.limit)
    query = float32(op.vector, "vector")
    if query.ndim != 1:
        raise ConfigError(f"the query `vector` must be 1-d, got shape {query.shape}")
    return query, limit


def wrong_dim(model: str, stored_dim: int, dim: int, *, query: bool) -> StoreError:
    """The error for vectors (or a query) of another dimension than `model`'s stored ones."""
    if query:
        return StoreError(
            f"the query vector has {dim} dimensions but model {model!r} "
            f"stores {stored_dim}-d vectors; embed the query with the same model"
        )
    return StoreError(
        f"model {model!r} has {stored_dim}-d vectors in this store, got {dim}-d "
        f"ones; embed with the same model, or store these under another model name"
    )
