"""The corpus-drift bench's pure parts (bench.corpus_null) on tiny synthetic streams: the resampled day orders, the
near copies, the gradual shift, the reference days left out, one stream measured and paged as the job would, and
the drift null on simulated documents of many chunks."""

from __future__ import annotations

import itertools
import math
from datetime import timedelta

import numpy as np
import pytest
from scipy import stats

from bench import corpus_null
from bench.corpus_null import FAKE_START, Item, Shift, Stream
from pipeline.config import DriftConfig
from pipeline.contract import ALERT


@pytest.mark.parametrize("length", [60, 63])
@pytest.mark.parametrize("make", ["permuted_stream", "block_stream"])
def test_resampled_streams_never_repeat_a_day_within_the_gap(make, length):
    for seed in range(5):
        order = getattr(corpus_null, make)(111, seed, 22, length)
        assert len(order) == 111 and set(order) <= set(range(length))
        last: dict[int, int] = {}
        for t, d in enumerate(order):
            assert t - last.get(d, -99) >= 22, (seed, t, d)
            last[d] = t
    assert set(corpus_null.permuted_stream(length, 0, 22, length)) == set(range(length))  # one whole permutation
    blocks = corpus_null.block_stream(70, 0, 22, length)
    assert all(b - a == 1 for a, b in itertools.pairwise(blocks[:7]))  # the first block: 7 consecutive days


def test_near_copies_skip_the_rows_own_item_and_do_not_depend_on_the_block():
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [1.0, 0.0]])
    owner = ["a", "a", "b", "c", "d"]
    near = corpus_null.near_copies(vectors, owner, 0.95, block=2)
    assert near == [frozenset({"d"}), frozenset({"d"}), frozenset(), frozenset(), frozenset({"a"})]
    assert corpus_null.near_copies(vectors, owner, 0.95, block=100) == near


def _item(name: str, category: str = "Politics", chunks: int = 1, start: int = 0) -> Item:
    return Item(name, category, name, tuple(range(start, start + chunks)))


def test_a_gradual_shift_holds_its_category_out_and_feeds_it_back_one_two_three_a_day():
    days = [[_item(f"d{d}-{i}", "Arts" if i == 0 else "Politics") for i in range(3)] for d in range(8)]
    held = tuple(i for day in days for i in day if i.category == "Arts")
    stream = Stream(days, {}, np.zeros((1, 2)), [], shift=Shift("arts", held, "Arts"))
    shifted, lasts = corpus_null.shifted_days(stream, 3)
    assert [[i.id for i in day if i.category == "Arts"] for day in shifted] == [
        [], [], [], ["d0-0"], ["d1-0", "d2-0"], ["d3-0", "d4-0", "d5-0"], ["d6-0", "d7-0"], []]
    assert lasts == 4 and all(len([i for i in day if i.category != "Arts"]) == 2 for day in shifted)
    pack = tuple(_item(f"p{i}", "Cooking") for i in range(40))
    fed, lasts = corpus_null.shifted_days(Stream([[] for _ in range(10)], {}, np.zeros((1, 2)), [],
                                                 shift=Shift("pack", pack)), 0)
    assert [len(day) for day in fed] == [1, 2, 3, 4, 5, 6, 7, 8, 4, 0] and lasts == 9
    steady, lasts = corpus_null.shifted_days(Stream([[] for _ in range(10)], {}, np.zeros((1, 2)), [],
                                                    shift=Shift("pack", pack, steady=15)), 2, steady=True)
    assert [len(day) for day in steady] == [0, 0, 15, 15, 10, 0, 0, 0, 0, 0] and lasts == 3
    with pytest.raises(ValueError):
        corpus_null.shifted_days(Stream(days, {}, np.zeros((1, 2)), []), 0)


def _topic_stream(days_n: int, per_day: int, chunks: int, burst_day: int | None = None, dim: int = 32,
                  seed: int = 0) -> Stream:
    """One topic distribution, `per_day` items of `chunks` chunks a day (a document's chunks alike: its centre
    plus noise), and a 30-item off-topic burst of one-chunk items on `burst_day`."""
    rng = np.random.default_rng(seed)
    topic = rng.standard_normal(dim)
    items, vectors = [], []
    for d in range(days_n):
        day = []
        for i in range(per_day):
            centre = topic + rng.standard_normal(dim)
            day.append(_item(f"d{d}-{i}", "Politics", chunks, len(vectors)))
            vectors += [centre + 0.3 * rng.standard_normal(dim) for _ in range(chunks)]
        items.append(day)
    if burst_day is not None:
        burst = []
        for i in range(30):
            vectors.append(rng.standard_normal(dim) * 3 - topic)
            burst.append(_item(f"sport-{i}", "Sports", 1, len(vectors) - 1))
        items[burst_day] = items[burst_day] + burst
    matrix = np.array(vectors)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return Stream(items, {}, matrix, [frozenset() for _ in vectors])


def test_a_resampled_stream_is_measured_and_paged_as_the_job_would():
    """Synthetic news (22 one-chunk items a day) with a 30-item off-topic burst on day 25: the null days before it
    are measured (not skipped) and do not page; the burst pages on its day at the one-day page level, named by its
    new category; a repeated item is never its own near copy."""
    stream = _topic_stream(27, 22, 1, burst_day=25)
    stream.days[26] = stream.days[3]  # a real day repeated: the same news again, not near copies
    config = DriftConfig(evidently=False)
    frame = corpus_null.stream_drift(stream.days, stream, config, range(21, 27))
    assert set(frame["verdict"]) <= {"stable", "drifted"}  # every day measured
    fired = corpus_null.replay(frame, config)
    pages = [a for a in fired if a.new and a.severity == ALERT]
    assert [a.run_date for a in pages] == ["2030-01-26"] and "Sports" in pages[0].message
    assert "Confirmed on its own day" in pages[0].message
    assert not frame[frame["statistic"] == "duplicate_share"]["value"].any()
    count = corpus_null.Count.of(frame, fired)
    assert (count.days, count.pages) == (6, 1) and count.pages_per_90 == 15.0


def test_every_chunk_is_labelled_with_its_document():
    stream = _topic_stream(2, 3, 4)
    sample = corpus_null._sample(stream.days[1], stream, set())
    assert list(sample.documents) == [f"d1-{i}" for i in range(3) for _ in range(4)]
    assert len(sample) == 12 and list(sample.categories) == ["Politics"] * 12


def test_the_reference_leaves_out_the_days_windows_names(monkeypatch):
    """Each day asks `windows.left_out` with the rows of the days before it only; the reference window's days
    inside a returned range (inclusive) are not in its reference."""
    stream = _topic_stream(26, 6, 4)
    config = DriftConfig(evidently=False, permutations=99, page_permutations=99)
    asked = []

    def fake_left_out(drift_rows, today):
        asked.append((today, sorted(drift_rows["run_date"].unique())))
        day = lambda t: np.datetime64(FAKE_START + timedelta(days=t))
        return [(day(10), day(11))]

    monkeypatch.setattr(corpus_null, "left_out", fake_left_out)
    frame = corpus_null.stream_drift(stream.days, stream, config, range(21, 24))
    sizes = frame.groupby("run_date")["n_reference"].first().tolist()
    full = 14 * 6 * 4
    assert sizes == [full, full - 2 * 24, full - 2 * 24]  # less days 10 and 11 (6 items of 4 chunks each)
    assert [len(rows) for _, rows in asked] == [1, 2]  # day 21 has no earlier rows: nothing to leave out
    assert all(max(rows) < today for today, rows in asked)
    monkeypatch.setattr(corpus_null, "left_out", lambda drift_rows, today: [])
    assert corpus_null.stream_drift(stream.days, stream, config, range(21, 22))["n_reference"].iloc[0] == full


@pytest.mark.parametrize("cosine", [0.3, 0.8])
def test_simulated_documents_have_the_asked_within_document_cosine(cosine):
    rng = np.random.default_rng(0)
    chunks = corpus_null.synthetic_documents(rng, corpus_null.synthetic_basis(0), 50, 8, cosine)
    assert chunks.shape == (50, 8, 384)
    assert np.allclose(np.linalg.norm(chunks, axis=2), 1)
    assert abs(corpus_null.within_cosine(chunks) - cosine) < 0.03
    assert math.isnan(corpus_null.within_cosine(chunks[:, :1]))


WINDOWS = 40


@pytest.mark.parametrize("per_document", [1, 8])
def test_the_null_holds_when_documents_have_many_chunks(per_document):
    """Nothing changed between reference and current, documents of `per_document` chunks at a within-document
    cosine of 0.8: the classifier's and PSI's raw p < 0.05 on about 5% of windows. The chunk-level null (chunks
    permuted one by one, a chunk's neighbours from its own document) gives them on most windows at 8 chunks per
    document. Tolerance: the binomial(WINDOWS, 0.05) 99.9% quantile."""
    cell = corpus_null.Synthetic(per_document, 0.8, windows=WINDOWS, permutations=199, reference=320, current=96)
    result = corpus_null.synthetic_null(cell)
    limit = stats.binom.ppf(0.999, WINDOWS, result["alpha"]) / WINDOWS  # 8 of 40
    low = result["raw_p_low"]
    assert low["classifier_accuracy"] <= limit and low["psi_mean"] <= limit, low


@pytest.mark.parametrize("part", ["peps", "news", "all"])
def test_the_bench_without_a_stream_it_needs_exits_2(tmp_path, capsys, part):
    absent = str(tmp_path / "absent")
    assert corpus_null.main(["--part", part, "--news", absent, "--peps", absent, "--out", str(tmp_path / "o")]) == 2
    assert f"{absent}/daily not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_shuffled_days_move_items_across_days_and_never_repeat_one_within_the_gap():
    days = [[_item(f"d{d}-{i}", "x") for i in range(4)] for d in range(12)]
    out = corpus_null.shuffled_days(days, 40, seed=3, min_gap=5)
    assert len(out) == 40 and all(len(day) == 4 for day in out)
    real = {i.id: d for d, day in enumerate(days) for i in day}
    assert any(len({real[i.id] for i in day}) > 1 for day in out)  # a day mixes items of several real days
    last: dict[str, int] = {}
    for t, day in enumerate(out):
        for item in day:
            assert t - last.get(item.id, -10) > 5
            last[item.id] = t
    assert out == corpus_null.shuffled_days(days, 40, seed=3, min_gap=5)
