"""Chunking: word windows with overlap and stable ids mapped to their document."""

from __future__ import annotations

import pytest

from pipeline.chunking import chunk_document, split_words


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_windows_overlap_and_cover_the_text():
    parts = split_words(words(20), size=6, overlap=2)
    assert parts[0] == "w0 w1 w2 w3 w4 w5"
    assert parts[1].split()[:2] == ["w4", "w5"]  # the overlap
    assert parts[-1].split()[-1] == "w19"
    assert len(parts) == 5  # starts 0, 4, 8, 12, 16


@pytest.mark.parametrize("n, expected", [(0, 0), (1, 1), (6, 1), (7, 2), (10, 2), (11, 3)])
def test_number_of_chunks(n, expected):
    assert len(split_words(words(n), size=6, overlap=2)) == expected


def test_ids_are_stable_and_map_to_the_parent():
    chunks = chunk_document("doc-1", "Title here", words(300), size=128, overlap=32)
    assert [c.id for c in chunks] == ["doc-1#0", "doc-1#1", "doc-1#2"]
    assert {c.doc_id for c in chunks} == {"doc-1"}
    assert chunks[0].text.startswith("Title here w0")
    assert chunk_document("doc-1", "Title here", words(300), 128, 32) == chunks


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        split_words("a b", size=4, overlap=4)
