"""Splitting a document into overlapping word windows with stable chunk ids `<doc_id>#<n>`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.config import Config
    from pipeline.corpus import StoredDocument


@dataclass(frozen=True)
class Chunk:
    id: str
    doc_id: str
    n: int
    text: str


def chunk_id(doc_id: str, n: int) -> str:
    return f"{doc_id}#{n}"


def split_words(text: str, size: int, overlap: int) -> list[str]:
    """Windows of `size` words, each starting `size - overlap` words after the previous one.

    The last window ends at the last word; a text no longer than `size` is one chunk, and an
    empty text gives no chunk.
    """
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError(f"need size > 0 and 0 <= overlap < size, got size={size}, overlap={overlap}")
    words = text.split()
    if not words:
        return []
    stride = size - overlap
    starts = range(0, max(len(words) - overlap, 1), stride)
    return [" ".join(words[s : s + size]) for s in starts]


def chunk_document(doc_id: str, title: str, text: str, size: int, overlap: int) -> list[Chunk]:
    """The title opens the first chunk, so a headline is searchable like the body it heads."""
    body = f"{title}\n{text}" if title and text else (title or text)
    return [Chunk(chunk_id(doc_id, n), doc_id, n, part) for n, part in enumerate(split_words(body, size, overlap))]


def chunk_documents(config: Config, documents: Sequence[StoredDocument],
                    cache: dict[tuple[str, str], list[Chunk]] | None = None) -> list[Chunk]:
    """Every document's chunks in order. `cache` (one per run and chunking setting: keyed by document id and
    content hash) keeps each document's chunks, so a document met again in the same run is not split again."""
    size, overlap = config.chunking.size, config.chunking.overlap
    if cache is None:
        return [c for stored in documents
                for c in chunk_document(stored.document.id, stored.document.title, stored.document.text, size,
                                        overlap)]
    out: list[Chunk] = []
    for stored in documents:
        key = (stored.document.id, stored.content_hash)
        chunks = cache.get(key)
        if chunks is None:
            doc = stored.document
            chunks = cache[key] = chunk_document(doc.id, doc.title, doc.text, size, overlap)
        out += chunks
    return out


def chunk_settings(config: Config) -> str:
    """The chunking settings as the corpus's chunk cache keys them."""
    return f"size={config.chunking.size} overlap={config.chunking.overlap}"
