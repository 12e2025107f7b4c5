"""Read-only vector-store connectors (Chroma, pgvector, Qdrant): the records a store holds."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class StoredVector:
    """One record of a vector store as it is stored: id, the text it holds, its vector, its model stamp."""
    id: str                     # the record's id (a chunk id or a document id)
    doc_id: str                 # the document it belongs to (= id when the store holds whole documents)
    text: str | None            # the stored text, None when the store has none
    vector: np.ndarray          # float32, as stored (not re-normalised)
    model: str | None           # the payload's model stamp when the store has one


class VectorStore(Protocol):
    name: str
    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float, str | None]]: ...
    def scan(self, batch: int = 1000) -> Iterator[StoredVector]: ...
    def close(self) -> None: ...
