"""`PostgresStore` against the store conformance suite, on a real PostgreSQL with pgvector
(tests/_postgres.py), and the behaviour specific to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loomctx.stores.postgres import PostgresStore
from loomctx.testing.store_conformance import MemoryStoreConformance


class TestPostgres(MemoryStoreConformance):
    @pytest.fixture
    def store(self, postgres_url: str) -> Iterator[PostgresStore]:
        with PostgresStore(postgres_url) as store:
            yield store
