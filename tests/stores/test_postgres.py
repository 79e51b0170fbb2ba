"""`PostgresStore` against the store conformance suite, on a real PostgreSQL with pgvector
(tests/_postgres.py), and the behaviour specific to it: the same BM25 ranking as SQLite
(MaxScore included), filtered vector search through the HNSW index, several store objects
(workers) on one database, failures of the server, and the refusals PostgreSQL needs."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from loomctx.errors import ConfigError, ConflictError, StoreError
from loomctx.stores import _pg_lexical
from loomctx.stores.base import (
    Expect,
    MemoryStore,
    Put,
    PutVectors,
    Record,
    Scan,
    Search,
    Unembedded,
    VectorSearch,
)
from loomctx.stores.postgres import PostgresStore
from loomctx.stores.sqlite import SQLiteStore
from loomctx.testing.store_conformance import MemoryStoreConformance, keys

NS = ("t", "a")


def rec(key: str, text: str = "", kind: str = "note", ns: tuple[str, ...] = NS) -> Record:
    return Record(namespace=ns, key=key, kind=kind, text=text)


class TestPostgres(MemoryStoreConformance):
    @pytest.fixture
    def store(self, postgres_url: str) -> Iterator[PostgresStore]:
        with PostgresStore(postgres_url) as store:
            yield store


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    with PostgresStore(postgres_url) as store:
        yield store


def test_it_is_a_memory_store(store: PostgresStore) -> None:
    assert isinstance(store, MemoryStore)


# --- lexical search ranks as on SQLite ------------------------------------------------------

WORDS = [f"w{i}" for i in range(300)]
HANZI = "数据库北京天气会议报告预算客户合同项目"


def _corpus(rnd: random.Random, n: int) -> list[tuple[tuple[str, ...], str, str, str]]:
    """(namespace, key, kind, text): Zipf-like English words and some Chinese."""
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    out = []
    for i in range(n):
        words = rnd.choices(WORDS, weights, k=rnd.randint(3, 25))
        if i % 5 == 0:
            start = rnd.randrange(len(HANZI) - 4)
            words.append(HANZI[start : start + rnd.randint(2, 4)])
        namespace = ("t", rnd.choice(["a", "b"]), *(["s"] if i % 3 == 0 else []))
        out.append((namespace, f"k{i}", rnd.choice(["turn", "summary"]), " ".join(words)))
    return out


@pytest.mark.parametrize(
    ("first_round", "score_all"), [(3, 0), (40, 0), (4_000, 0), (3, 10**9), (3, 300)]
)
def test_search_ranks_and_scores_as_sqlite_does(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, first_round: int, score_all: int
) -> None:
    # A small first round forces MaxScore's second round; a large one, or a `_SCORE_ALL`
    # above every query's postings, scores everything in one round; 300 is above the
    # postings of some queries in one exact namespace, not in the store.
    monkeypatch.setattr(_pg_lexical, "_FIRST_ROUND", first_round)
    monkeypatch.setattr(_pg_lexical, "_SCORE_ALL", score_all)
    rnd = random.Random(first_round)
    corpus = _corpus(rnd, 600)
    with SQLiteStore() as reference:
        for target in (store, reference):
            target.put_many([rec(k, text, kind, ns) for ns, k, kind, text in corpus])
            target.delete(("t", "a"), "k3")  # deletes and rewrites change the statistics
            target.put(rec("k4", "w1 w2 w250 北京天气", "turn", corpus[4][0]))
        weights = [1 / (i + 1) for i in range(len(WORDS))]
        for q in range(60):
            query = " ".join(rnd.choices(WORDS, weights, k=rnd.randint(1, 8)))
            if q % 6 == 0:
                query += " 北京的天气"
            options = [
                {},
                {"kind": "turn"},
                {"exact": True},
                {"limit": 3},
                {"limit": 40},
            ][q % 5]
            prefix = [("t",), ("t", "a"), ("t", "b", "s"), ()][q % 4]
            if options.get("exact") and not prefix:
                prefix = ("t", "a")
            ours = store.search(prefix, query, **options)  # type: ignore[arg-type]
            theirs = reference.search(prefix, query, **options)  # type: ignore[arg-type]
            assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], rel=1e-5)
            # Records of equal scores may come in either order (and SQLite picks any of
            # those tied at the limit); every other record comes in the same place.
            last = theirs[-1].score if theirs else 0.0

            # (SQLite sums in float32 in part: scores 1e-6 apart may swap places.)
            for o, t in zip(ours, theirs, strict=True):
                assert o.record.key == t.record.key or o.score == pytest.approx(t.score, rel=1e-5)
            above = {h.record.key for h in theirs if h.score > last * (1 + 1e-5)}
            assert above <= set(keys(ours))
            every = {**options, "limit": 1_000}
            scores = {h.record.key: h.score for h in reference.search(prefix, query, **every)}  # type: ignore[arg-type]
            for hit in ours:
                assert hit.score == pytest.approx(scores[hit.record.key], rel=1e-5)


def test_a_very_long_term_is_stored_but_not_indexed(store: PostgresStore) -> None:
    long_word = "x" * 3_000
    store.put(rec("k", f"{long_word} ordinary words"))
    assert keys(store.search(NS, "ordinary")) == ["k"]
    assert store.search(NS, long_word) == []
    assert store.get(NS, "k").text.startswith(long_word)  # type: ignore[union-attr]


# --- vectors ----------------------------------------------------------------------------------


def test_a_selective_filter_still_returns_limit_rows_through_the_index(
    store: PostgresStore,
) -> None:
    rng = np.random.default_rng(3)
    dim, crowd, few = 16, 3_000, 25
    records = [rec(f"c{i}", f"crowd {i}", ns=("t", "crowd")) for i in range(crowd)]
    records += [rec(f"f{i}", f"few {i}", ns=("t", "few")) for i in range(few)]
    store.put_many(records)
    vectors = rng.normal(size=(crowd + few, dim)).astype(np.float32)
    items = [(r.namespace, r.key, 10**9) for r in records]
    assert store.batch([PutVectors(model="m", items=items, vectors=vectors)]) == [crowd + few]
    with psycopg.connect(store._url) as conn:
        conn.execute("ANALYZE")
    query = rng.normal(size=dim).astype(np.float32)
    hits = store.vector_search(("t", "few"), query, model="m", limit=10)
    assert len(hits) == 10
    own = vectors[crowd:] / np.linalg.norm(vectors[crowd:], axis=1, keepdims=True)
    exact = np.sort(own @ (query / np.linalg.norm(query)))[::-1][:10]
    assert [h.score for h in hits] == pytest.approx(exact.tolist(), abs=1e-5)
    assert {h.record.namespace for h in hits} == {("t", "few")}
    # Through the HNSW index (forced: on few rows the planner prefers an exact scan), a
    # filter that the index cannot apply keeps `limit` rows only with iterative scan.
    sql = (
        "SELECT record_id FROM vectors_1 WHERE kind = 'rare' "
        "ORDER BY embedding <#> %s::vector LIMIT 10"
    )
    rare = [r for r in records if r.key.startswith("c")][::300]
    store.put_many(
        [Record(namespace=r.namespace, key=r.key, kind="rare", text=r.text) for r in rare]
    )
    with psycopg.connect(store._url) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, (str(query.tolist()),)))
        assert "vectors_1_embedding_idx" in plan
        conn.execute("SET hnsw.ef_search = 10")
        conn.execute("SET hnsw.iterative_scan = off")
        plain = conn.execute(sql, (str(query.tolist()),)).fetchall()
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        iterative = conn.execute(sql, (str(query.tolist()),)).fetchall()
    assert len(plain) < 10 == len(iterative)
    assert len(store.vector_search(("t",), query, model="m", kind="rare", limit=10)) == 10


def test_a_models_dimension_may_change_while_it_has_no_vectors(postgres_url: str) -> None:
    with PostgresStore(postgres_url) as store, PostgresStore(postgres_url) as reader:
        store.put(rec("a", "one"))
        store.batch([PutVectors(model="m", items=[(NS, "a", 10**9)], vectors=np.ones((1, 3)))])
        assert keys(reader.vector_search(NS, np.ones(3, dtype=np.float32), model="m")) == ["a"]
        store.delete(NS, "a")
        store.put(rec("b", "two"))
        stored = store.batch(
            [PutVectors(model="m", items=[(NS, "b", 10**9)], vectors=np.ones((1, 2)))]
        )
        assert stored == [1]
        assert keys(store.vector_search(NS, np.ones(2, dtype=np.float32), model="m")) == ["b"]
        # The other worker knew the model's old table: it finds the new one.
        assert keys(reader.vector_search(NS, np.ones(2, dtype=np.float32), model="m")) == ["b"]
        # Back to 3-d: the reader's old 3-d table is gone; it finds the newest.
        store.delete(NS, "b")
        store.put(rec("c", "three"))
        store.batch([PutVectors(model="m", items=[(NS, "c", 10**9)], vectors=np.ones((1, 3)))])
        reader._models["m"] = (1, 3)  # as if it had read the first table just before
        assert keys(reader.vector_search(NS, np.ones(3, dtype=np.float32), model="m")) == ["c"]


# --- several workers on one database ----------------------------------------------------------


def test_two_workers_see_each_others_writes_at_once(postgres_url: str) -> None:
    with PostgresStore(postgres_url) as one, PostgresStore(postgres_url) as two:
        written = one.put(rec("k", "shared orange text"))
        assert two.get(NS, "k") == written
        assert keys(two.search(NS, "orange")) == ["k"]
        seen = two.version(NS).seq
        one.put(rec("j", "more"))
        with pytest.raises(ConflictError, match="#0"):
            two.batch([Expect(namespace=NS, seq=seen), Put(record=rec("x"))])
        assert two.get(NS, "x") is None


def test_search_reads_a_record_again_once_another_worker_changed_it(postgres_url: str) -> None:
    with PostgresStore(postgres_url) as one, PostgresStore(postgres_url) as two:
        one.put(Record(namespace=NS, key="k", kind="note", text="orange", data={"v": 1}))
        assert [h.record.data for h in one.search(NS, "orange")] == [{"v": 1}]  # now held
        # Same text (the postings stay), new data: only the record's seq tells.
        changed = two.put(Record(namespace=NS, key="k", kind="note", text="orange", data={"v": 2}))
        assert [h.record for h in one.search(NS, "orange")] == [changed]
        assert one.search(NS, "orange")[0].record is one.search(NS, "orange")[0].record


def test_search_keeps_no_record_of_a_batch_that_rolled_back(store: PostgresStore) -> None:
    store.put(Record(namespace=NS, key="k", kind="note", text="orange", data={"v": 1}))
    with pytest.raises(ConfigError, match="#2"):
        store.batch(
            [
                Put(
                    record=Record(namespace=NS, key="k", kind="note", text="orange", data={"v": 2})
                ),
                Search(prefix=NS, query="orange"),
                Put(record=rec("bad", "a\x00b")),
            ]
        )
    # The next write hands out the seq the rolled-back one had, to other data.
    again = store.put(Record(namespace=NS, key="k", kind="note", text="orange", data={"v": 3}))
    assert [h.record for h in store.search(NS, "orange")] == [again]


def test_concurrent_writers_get_unique_seqs_in_commit_order(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url, max_connections=4) for _ in range(3)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(30):
                stores[n].put_many([rec(f"{n}-{i}-{j}", f"text {n} {i}") for j in range(3)])
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(3) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        records = stores[0].scan(NS)
        seqs = [r.seq for r in records]
        assert len(records) == len(set(seqs)) == 3 * 30 * 3
        assert seqs == sorted(seqs)
        assert stores[1].version(NS).seq == seqs[-1]
        found = stores[2].search(NS, "text", limit=1000)
        assert len(found) == 270
    finally:
        for s in stores:
            s.close()


async def test_abatch_runs_concurrently_on_the_pool(store: PostgresStore) -> None:
    import asyncio

    await store.abatch([Put(record=rec(f"k{i}", f"word{i}")) for i in range(20)])
    results = await asyncio.gather(
        *(store.abatch([Search(prefix=NS, query=f"word{i}")]) for i in range(20))
    )
    assert [keys(r[0]) for r in results] == [[f"k{i}"] for i in range(20)]


# --- failures -------------------------------------------------------------------------------


def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError, match="cannot open the PostgreSQL store") as caught:
        PostgresStore("postgresql://loom:s3cret@127.0.0.1:1/loom", connect_timeout=2)
    assert "s3cret" not in str(caught.value)
    assert "127.0.0.1:1/loom" in str(caught.value)


def test_bad_options_are_config_errors(postgres_url: str) -> None:
    for bad in ("", "not a url = = ="):
        with pytest.raises(ConfigError):
            PostgresStore(bad)
    with pytest.raises(ConfigError, match="max_connections"):
        PostgresStore(postgres_url, min_connections=5, max_connections=2)
    with pytest.raises(ConfigError, match="connect_timeout"):
        PostgresStore(postgres_url, connect_timeout=0)
    for cache in (-1, True, 1.5):
        with pytest.raises(ConfigError, match="record_cache"):
            PostgresStore(postgres_url, record_cache=cache)  # type: ignore[arg-type]


def test_a_lost_connection_is_replaced(store: PostgresStore, postgres_admin_url: str) -> None:
    store.put(rec("k", "before"))
    database = psycopg.conninfo.conninfo_to_dict(store._url)["dbname"]
    with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (database,),
        )
    # The pool checks a connection before lending it: the dead one is replaced.
    assert store.get(NS, "k") is not None
    store.put(rec("j", "after"))
    assert keys(store.scan(NS)) == ["k", "j"]


def test_a_deadline_that_passed_fails_the_batch(store: PostgresStore) -> None:
    from loomctx.stores.base import StoreContext

    with pytest.raises(StoreError, match="deadline"):
        store.batch([Put(record=rec("k"))], ctx=StoreContext(deadline=0.0))
    assert store.get(NS, "k") is None


def test_nul_characters_are_refused_and_write_nothing(store: PostgresStore) -> None:
    for record in (
        rec("k", "a\x00b"),
        Record(namespace=NS, key="k", kind="note", data={"x": "a\x00b"}),
        rec("k\x00"),
    ):
        with pytest.raises(ConfigError, match=r"#1.*U\+0000"):
            store.batch([Put(record=rec("ok")), Put(record=record)])
    assert store.scan(()) == []
    # A backslash followed by "u0000" is text, not a NUL.
    stored = store.put(Record(namespace=NS, key="k", kind="note", data={"x": "\\u0000"}))
    assert store.get(NS, "k") == stored


def test_where_treats_booleans_as_sqlite_does(store: PostgresStore) -> None:
    store.put_many(
        [
            Record(namespace=NS, key="t", kind="n", data={"v": True}),
            Record(namespace=NS, key="one", kind="n", data={"v": 1}),
            Record(namespace=NS, key="f", kind="n", data={"v": 0.0}),
        ]
    )
    assert keys(store.scan(NS, where={"v": 1})) == ["t", "one"]
    assert keys(store.scan(NS, where={"v": False})) == ["f"]
    assert keys(store.batch([Scan(prefix=NS, where={"v": 1.0})])[0]) == ["t", "one"]


def test_the_schema_is_created_once_and_a_newer_one_refused(postgres_url: str) -> None:
    from loomctx.stores._pg_schema import MIGRATIONS, migrate

    with PostgresStore(postgres_url):
        pass
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert migrate(conn, where="x") == 0
        conn.execute(
            "UPDATE loom_meta SET value = %s WHERE key = 'schema'", (str(len(MIGRATIONS) + 1),)
        )
    with pytest.raises(StoreError, match="newer Loom"):
        PostgresStore(postgres_url)


def test_the_schema_is_exactly_the_migrations(postgres_url: str, tmp_path: Path) -> None:
    with PostgresStore(postgres_url) as store:
        store.put(rec("a", "one"))
        store.batch([PutVectors(model="m", items=[(NS, "a", 10**9)], vectors=np.ones((1, 4)))])
    with psycopg.connect(postgres_url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable FROM "
            "information_schema.columns WHERE table_schema = 'public' "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname"
        ).fetchall()
        meta = dict(conn.execute("SELECT key, value FROM loom_meta").fetchall())
    tables: dict[str, list[str]] = {}
    for table, column, kind, nullable in columns:
        tables.setdefault(table, []).append(f"{column} {kind}{'' if nullable == 'YES' else '!'}")
    assert tables == EXPECTED_COLUMNS
    assert sorted(row[0] for row in indexes) == sorted(EXPECTED_INDEXES)
    assert set(meta) == {"schema", "seq", "texts", "total_len", "store_id"}
    assert (meta["schema"], meta["texts"], meta["total_len"]) == ("1", "1", "1")


EXPECTED_COLUMNS = {
    "lexical_postings": [
        "term text!",
        "record_id bigint!",
        "namespace text!",
        "kind text!",
        "tf real!",
        "nterms integer!",
    ],
    "lexical_terms": ["term text!", "df bigint!", "max_tf integer!", "min_len integer!"],
    "loom_meta": ["key text!", "value text!"],
    "namespaces": ["namespace text!", "seq bigint!", "deleted_seq bigint!"],
    "records": [
        "id bigint!",
        "namespace text!",
        "key text!",
        "kind text!",
        "text text!",
        "data jsonb!",
        "seq bigint!",
        "text_seq bigint!",
        "created_at double precision!",
        "updated_at double precision!",
        "nterms integer!",
    ],
    "vector_sets": ["model text!", "id integer!", "dim integer!"],
    "vectors_1": [
        "record_id bigint!",
        "namespace text!",
        "kind text!",
        "embedding USER-DEFINED!",
        "seq bigint!",
    ],
}
EXPECTED_INDEXES = [
    "CREATE INDEX lexical_postings_term ON public.lexical_postings USING btree (term, namespace) "
    "INCLUDE (record_id, kind, tf, nterms)",
    "CREATE UNIQUE INDEX lexical_postings_pkey ON public.lexical_postings USING btree "
    "(record_id, term) INCLUDE (tf, nterms)",
    "CREATE UNIQUE INDEX lexical_terms_pkey ON public.lexical_terms USING btree (term)",
    "CREATE UNIQUE INDEX loom_meta_pkey ON public.loom_meta USING btree (key)",
    "CREATE UNIQUE INDEX namespaces_pkey ON public.namespaces USING btree (namespace)",
    "CREATE INDEX records_namespace_seq ON public.records USING btree (namespace, seq)",
    "CREATE UNIQUE INDEX records_namespace_key_key ON public.records USING btree (namespace, key)",
    "CREATE UNIQUE INDEX records_pkey ON public.records USING btree (id)",
    "CREATE UNIQUE INDEX records_seq ON public.records USING btree (seq)",
    "CREATE UNIQUE INDEX vector_sets_id_key ON public.vector_sets USING btree (id)",
    "CREATE UNIQUE INDEX vector_sets_pkey ON public.vector_sets USING btree (model)",
    "CREATE INDEX vectors_1_embedding_idx ON public.vectors_1 USING hnsw (embedding vector_ip_ops)",
    "CREATE INDEX vectors_1_namespace_idx ON public.vectors_1 USING btree (namespace)",
    "CREATE UNIQUE INDEX vectors_1_pkey ON public.vectors_1 USING btree (record_id)",
]


def test_the_same_key_twice_in_a_batch(store: PostgresStore) -> None:
    first, second, cherries, again = store.batch(
        [
            Put(record=rec("k", "apples")),
            Put(record=rec("k", "bananas")),
            Put(record=rec("j", "cherries")),
            Put(record=rec("j", "cherries", kind="other")),
        ]
    )
    assert second.seq > first.seq
    assert second.created_at == first.created_at
    assert keys(store.search(NS, "apples")) == []
    assert keys(store.search(NS, "bananas")) == ["k"]
    assert keys(store.search(NS, "cherries", kind="other")) == ["j"]
    assert store.get(NS, "j") == again
    assert cherries.kind == "note"


def test_a_model_too_wide_for_hnsw_is_searched_exactly(store: PostgresStore) -> None:
    store.put_many([rec("a", "one"), rec("b", "two")])
    wide = np.zeros((2, 2_001), dtype=np.float32)
    wide[0, 0] = wide[1, 1] = 1
    store.batch(
        [PutVectors(model="wide", items=[(NS, "a", 10**9), (NS, "b", 10**9)], vectors=wide)]
    )
    assert keys(store.vector_search(NS, wide[1], model="wide")) == ["b", "a"]


@pytest.mark.parametrize(
    "op",
    [
        Scan(prefix=NS, where={"x": [1]}),  # type: ignore[dict-item]
        Scan(prefix=NS, where={'a"b': 1}),
        Scan(prefix=NS, after_seq="1"),  # type: ignore[arg-type]
        Unembedded(model="m", after_seq="1"),  # type: ignore[arg-type]
        VectorSearch(prefix=NS, vector=np.ones((2, 2), dtype=np.float32), model="m"),
        Put(record=Record(namespace=NS, key="k", kind="n", text=1)),  # type: ignore[arg-type]
        Search(prefix=NS, query="x", limit=-1),
    ],
)
def test_bad_arguments_are_config_errors_naming_the_op(store: PostgresStore, op: object) -> None:
    store.put(rec("m0", "text"))
    store.batch([PutVectors(model="m", items=[(NS, "m0", 10**9)], vectors=np.ones((1, 2)))])
    with pytest.raises(ConfigError, match="#0"):
        store.batch([op])  # type: ignore[list-item]
