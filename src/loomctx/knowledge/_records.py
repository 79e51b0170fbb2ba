"""What a knowledge base stores a document as, and what storing a new version of it takes.

A document is a ``kb_document`` record and a ``kb_chunk`` record per chunk (the module
docstring of `loomctx.knowledge._base` says what each holds). `DocumentPlanner.plan` compares
a document with its stored version: unchanged (same fingerprint, vectors of the current
model) it is left alone; else its chunks are cut, and only chunks whose text changed are
embedded again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

from loomctx.knowledge._chunking import Chunk, iter_chunks
from loomctx.knowledge._types import IngestStatus
from loomctx.knowledge._writer import Plan, Tally
from loomctx.stores.base import Delete, Get, MemoryStore, Namespace, Op, Record
from loomctx.tokens import TokenCounter

__all__ = ["CHUNK", "DOCUMENT", "DocumentPlanner", "digest", "normalise"]

DOCUMENT: Final = "kb_document"
CHUNK: Final = "kb_chunk"
_CHUNKER_VERSION: Final = 1  # bump when chunking changes: documents re-chunk on their next add


def normalise(text: str) -> str:
    """`text` with its line ends as ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def digest(text: str) -> str:
    """A hash of `text` (hex, 32 characters): a document's content hash and fingerprint."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentPlanner:
    """How one knowledge base turns documents into records: where they go (`store`,
    `namespace`), how they are chunked, and the embedding `model` of the vectors written
    with the chunks (None: no vectors)."""

    store: MemoryStore
    namespace: Namespace
    counter: TokenCounter
    chunk_tokens: int
    overlap_tokens: int
    model: str | None

    @property
    def settings(self) -> list[Any]:
        """What chunks are cut with: a change re-chunks every document on its next add."""
        return [_CHUNKER_VERSION, self.counter.name, self.chunk_tokens, self.overlap_tokens]

    def plan(
        self,
        document_id: str,
        text: str,
        metadata: dict[str, Any],
        *,
        old: Record | None,
        origin: str | None = None,
        title: str | None = None,
        tally: Tally | None = None,
    ) -> Plan:
        """What storing `text` as `document_id` takes, given the stored version `old`."""
        content_hash = digest(text)
        fingerprint = digest(
            json.dumps(
                [self.settings, content_hash, metadata, title, origin],
                sort_keys=True,
                ensure_ascii=False,
            )
        )
        model = self.model
        if (
            old is not None
            and old.data["fingerprint"] == fingerprint
            and (model is None or model in old.data["models"])
        ):
            return Plan("unchanged", document_id)
        chunks: list[Chunk] = []
        for chunk, share in iter_chunks(
            text,
            counter=self.counter,
            chunk_tokens=self.chunk_tokens,
            overlap_tokens=self.overlap_tokens,
        ):
            chunks.append(chunk)
            if tally is not None:
                tally.cutting(len(chunks), share)
        title = metadata.get("title") or next((c.headings[0] for c in chunks if c.headings), title)
        meta = {**metadata, "title": title} if title else dict(metadata)
        records = [
            self.document_record(
                {
                    "document_id": document_id,
                    "content_hash": content_hash,
                    "fingerprint": fingerprint,
                    "chunks": len(chunks),
                    "metadata": meta,
                    "models": [model] if model else [],
                },
                origin,
            )
        ]
        records += [self.chunk_record(document_id, i, c, meta) for i, c in enumerate(chunks)]
        old_count = int(old.data["chunks"]) if old is not None else 0
        deletes = [f"chunk:{document_id}#{i}" for i in range(len(chunks), old_count)]
        embed = records[1:] if model else []
        if embed and old is not None and model in old.data["models"]:
            before = self.store.batch(
                [Get(namespace=self.namespace, key=r.key) for r in embed[:old_count]]
            )
            kept = {r.key for r, b in zip(embed, before, strict=False) if b and b.text == r.text}
            embed = [r for r in embed if r.key not in kept]
        status: IngestStatus = "added" if old is None else "updated"
        return Plan(status, document_id, records, deletes, embed)

    def document_record(self, data: dict[str, Any], origin: str | None) -> Record:
        if origin is not None:
            data = {**data, "folder": origin}
        return Record(
            namespace=self.namespace, key=f"doc:{data['document_id']}", kind=DOCUMENT, data=data
        )

    def chunk_record(
        self, document_id: str, index: int, chunk: Chunk, metadata: dict[str, Any]
    ) -> Record:
        data: dict[str, Any] = {"document_id": document_id, "index": index}
        data["metadata"] = (
            {**metadata, "headings": " > ".join(chunk.headings)} if chunk.headings else metadata
        )
        if chunk.overlap:
            # search_text is prefix, overlap and body joined by blank lines: cut out the
            # overlap and its join to get the shown text.
            start = len(chunk.prefix) + 2 if chunk.prefix else 0
            data["overlap"] = [start, start + len(chunk.overlap) + 2]
        return Record(
            namespace=self.namespace,
            key=f"chunk:{document_id}#{index}",
            kind=CHUNK,
            text=chunk.search_text,
            data=data,
        )

    def deletes(self, document: Record) -> list[Op]:
        """The ops that delete `document` and its chunks."""
        doc_id = document.data["document_id"]
        chunks: list[Op] = [
            Delete(namespace=self.namespace, key=f"chunk:{doc_id}#{i}")
            for i in range(int(document.data["chunks"]))
        ]
        return [Delete(namespace=self.namespace, key=document.key), *chunks]
