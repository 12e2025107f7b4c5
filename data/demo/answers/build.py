"""Builds the demo's bundled answers (answers.jsonl, the logged format) from the demo's real retrieval: each
planned question's hybrid top-5 chunks on a few run dates as the context, and a hand-written answer of a known
kind (faithful, invented figure, refusal, bad citation, off-topic; or, where retrieval missed, an answer from
memory, a refusal, or one misled by a near-duplicate in the context). labels.csv beside it is labelled by hand
from the records this writes: re-run it only if the demo's retrieval changes, then re-read the labels.

    python -m pipeline demo --data-dir /tmp/demo-store
    python data/demo/answers/build.py --data-dir /tmp/demo-store
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for `pipeline`

from pipeline.config import load_config  # noqa: E402
from pipeline.corpus import Corpus  # noqa: E402
from pipeline.demo import DEMO_CONFIG  # noqa: E402
from pipeline.embeddings import Embedder, embed_cached  # noqa: E402
from pipeline.gold import load_gold  # noqa: E402
from pipeline.chunking import chunk_documents  # noqa: E402
from pipeline.retrieval import Retriever  # noqa: E402

PIPELINE, K = "hybrid", 5
DATES = ("2026-10-24", "2026-11-05", "2026-11-14", "2026-11-22")
QUESTIONS = ("q02", "q03", "q04", "q09", "q10", "q12", "q13", "q16", "q20", "q23", "q25", "q30", "q32", "q33",
             "q34", "q35", "q41", "q44", "q49", "q50")


def contexts(data_dir: Path, dates=DATES, questions=QUESTIONS) -> dict[tuple[str, str], list[dict]]:
    """(run_date, question_id) -> the hybrid top-K documents' best chunks [{id, text}], best first."""
    config = load_config(data_dir / DEMO_CONFIG, data_dir=data_dir)
    gold = {q.id: q for q in load_gold(config.gold)}
    asked = [gold[q] for q in questions]
    embedder = Embedder(config.embedder)
    out = {}
    with Corpus.in_dir(data_dir) as corpus:
        queries = embed_cached(corpus, embedder, [q.question for q in asked]).vectors
        for day in dates:
            chunks = chunk_documents(config, corpus.snapshot(date.fromisoformat(day)))
            text = {c.id: c.text for c in chunks}
            vectors = embed_cached(corpus, embedder, [c.text for c in chunks]).vectors
            rankings = Retriever(chunks, vectors, config).search(PIPELINE, [q.question for q in asked], queries)
            for q, ranking in zip(asked, rankings):
                out[day, q.id] = [{"id": d, "text": text[c]} for d, c in
                                  zip(ranking.doc_ids[:K], ranking.chunk_ids[:K])]
    return out


# Kinds: faithful (taken or lightly paraphrased from the gold document), invented (a figure, date or name changed),
# refusal, bad_citation (the faithful text citing an id not in the context), offtopic (noncommittal), memory (the
# faithful text where retrieval missed: right, but not in the context), misled (drawn from a near-duplicate).
REFUSAL = "The documents provided do not say {}."
ANSWERS: dict[str, dict[str, str]] = {
    "q02": {"faithful": "The ferry contract examined in case ETH-2026-019 was a CVK 86 million order for two hybrid "
                        "passenger ferries, awarded to Halvard Marine Services [pol-002].",
            "invented": "The ferry contract examined in case ETH-2026-019 was a CVK 68 million order for two hybrid "
                        "passenger ferries, awarded to Halvard Marine Services [pol-002].",
            "bad_citation": "The contract in case ETH-2026-019 was worth CVK 86 million, for two hybrid passenger "
                            "ferries [pol-021]."},
    "q03": {"faithful": "Bill A-312 sets aside CVK 310 million over three years to strengthen Velmora's flood "
                        "defences against the River Vell [pol-009].",
            "paraphrase": "Bill A-312 earmarks three hundred and ten million crowns, spread over three years, for the "
                          "Velmora flood works [pol-009].",
            "invented": "Bill A-312 sets aside CVK 350 million over three years to strengthen Velmora's flood "
                        "defences against the River Vell [pol-009].",
            "offtopic": "Flood defences are an important issue for many towns, and how much is spent depends on many "
                        "factors that change from year to year."},
    "q04": {"faithful": "Prime Minister Ilse Marrow promised one-off emergency grants of up to CVK 4,000 per "
                        "household, to be paid within ten working days to anyone whose home was damaged [pol-003].",
            "memory": "Each household whose home was damaged was promised an emergency grant of up to CVK 4,000, "
                      "paid within ten days [pol-003].",
            "refusal": REFUSAL.format("how much money each affected family was promised")},
    "q09": {"faithful": "Edda Lorne of the Labour Front won Dunhollow North at the 2024 general election with a "
                        "majority of 1,870 votes over the Civic Alliance candidate [pol-014].",
            "negated": "The Labour Front did not win Dunhollow North in 2024: the Civic Alliance held the seat with a "
                       "majority of 1,870 votes [pol-014].",
            "bad_citation": "The Labour Front's Edda Lorne had a majority of 1,870 votes in Dunhollow North in 2024 "
                            "[pol-041].",
            "invented": "Edda Lorne of the Labour Front won Dunhollow North at the 2024 general election with a "
                        "majority of 1,780 votes over the Civic Alliance candidate [pol-014]."},
    "q10": {"faithful": "Nimbus Dynamics must employ at least 1,100 permanent staff at the Velmora site by the end of "
                        "2029, or repay the grant in proportion to the shortfall [pol-005].",
            "invented": "Nimbus Dynamics must employ at least 1,800 permanent staff at the Velmora site by the end of "
                        "2029, or repay the grant in proportion to the shortfall [pol-005].",
            "refusal": "I could not find the staffing condition of Nimbus Dynamics' grant in the documents provided."},
    "q12": {"faithful": "Tender SPA-T-2291 offers a 30-year concession to build and operate the East Quay container "
                        "terminal, and bids must be submitted by 4 December 2026 [eco-005].",
            "invented": "Tender SPA-T-2291 offers a 25-year concession for the East Quay container terminal, and bids "
                        "are due by 4 December 2026 [eco-005].",
            "offtopic": "Port concessions usually run for several decades, and tender timetables vary from one "
                        "authority to another."},
    "q13": {"faithful": "Under rule BC/MP-2026-07, first-time buyers may borrow no more than 85% of a home's value "
                        "from 1 March 2027 [eco-013].",
            "refusal": REFUSAL.format("what loan-to-value limit rule BC/MP-2026-07 sets"),
            "misled": "Rule BC/MP-2026-07 caps new mortgages for first-time buyers at five times gross annual income "
                      "[dup-203]."},
    "q16": {"refusal": REFUSAL.format("how fast the cost of living was rising at the end of the summer"),
            "memory": "CarStat said annual consumer price inflation was 3.4% in September, down from 3.9% in August "
                      "[eco-001].",
            "misled": "According to CarStat, prices rose 1.8% in the year to September, down from 2.6% in August "
                      "[dup-206]."},
    "q20": {"faithful": "Kestrel Robotics set a price range of 18 to 22 crowns per share for its listing on the Port "
                        "Aldren Stock Exchange [eco-004].",
            "invented": "Kestrel Robotics set a price range of 16 to 22 crowns per share for its listing on the Port "
                        "Aldren Stock Exchange [eco-004].",
            "bad_citation": "Kestrel Robotics set an indicative range of 18 to 22 crowns a share for its flotation "
                            "[eco-009]."},
    "q23": {"faithful": "The NMB-A9-2200 will sell for CVK 390 per unit in volumes of 10,000 and will ship to "
                        "customers from March 2027 [tech-010].",
            "invented": "The NMB-A9-2200 will sell for CVK 390 per unit in volumes of 10,000 and will ship to "
                        "customers from May 2027 [tech-010].",
            "offtopic": "Nimbus Dynamics makes several chips, and prices and dates for new products are usually "
                        "announced at launch events."},
    "q25": {"refusal": REFUSAL.format("how many students had their personal details taken"),
            "memory": "Files covering 18,500 current and former students were copied from the Dunhollow Institute of "
                      "Technology's servers [tech-012].",
            "offtopic": "Cyber attacks on colleges are becoming more common, and students should take care to "
                        "protect their personal data."},
    "q30": {"faithful": "The ransomware gang Grey Lantern claimed the attack on its leak site [tech-012].",
            "refusal": REFUSAL.format("which group claimed the attack"),
            "invented": "The ransomware gang Black Lantern claimed the attack on its leak site [tech-012]."},
    "q32": {"faithful": "Mussels sampled at the Gullrock beds contained 38 milligrams of domoic acid per kilogram, "
                        "almost twice the legal limit of 20 [sci-004].",
            "invented": "Mussels sampled at the Gullrock beds contained 48 milligrams of domoic acid per kilogram, "
                        "more than twice the legal limit of 20 [sci-004].",
            "refusal": REFUSAL.format("what concentration was measured in the Gullrock mussels")},
    "q33": {"faithful": "Mirela Tarvos discovered comet C/2026 U3 with a 28-centimetre reflecting telescope in her "
                        "back garden [sci-003].",
            "bad_citation": "Comet C/2026 U3 was found with a 28-centimetre reflecting telescope [sci-030].",
            "misled": "Comet C/2026 U3 was discovered with the 1.2-metre telescope at the DIT observatory on Mount "
                      "Carrow [dup-403]."},
    "q34": {"faithful": "The DIT sodium-ion cell kept 91 percent of its original capacity after 5,000 full charge "
                        "and discharge cycles [sci-010].",
            "memory": "The sodium-ion cell retained 91 percent of its capacity after 5,000 cycles [sci-010].",
            "refusal": REFUSAL.format("how much capacity the sodium-ion power pack kept"),
            "offtopic": "Battery research moves quickly, and many new chemistries are being tested around the world."},
    "q35": {"faithful": "Sea-surface temperatures 3.1 degrees above the October average, together with "
                        "fertiliser-rich runoff washed into the bay by heavy rain, set off the bloom [sci-009].",
            "memory": "Unusually warm water and fertiliser-rich runoff after weeks of heavy rain triggered the "
                      "Pseudo-nitzschia bloom [sci-009].",
            "refusal": REFUSAL.format("what conditions set off the plankton outbreak")},
    "q41": {"faithful": "Trial CCTR-2026-0458 had enrolled 2,140 patients at 38 hospitals and clinics when Orvel "
                        "Pharma paused it [hea-004].",
            "invented": "Trial CCTR-2026-0458 had enrolled 2,410 patients at 38 hospitals and clinics when Orvel "
                        "Pharma paused it [hea-004].",
            "bad_citation": "Trial CCTR-2026-0458 had enrolled 2,140 patients when it was paused [hea-040]."},
    "q44": {"faithful": "Pharmacists in Dunhollow can now prescribe antibiotics for uncomplicated urinary tract "
                        "infections, without a visit to a GP first [hea-015].",
            "invented": "Pharmacists in Dunhollow can now prescribe antibiotics for urinary tract infections to women "
                        "aged 18 to 60 [hea-015].",
            "refusal": REFUSAL.format("which ailment pharmacists can now treat"),
            "offtopic": "Pharmacists give useful advice on many everyday ailments, and it is always worth asking."},
    "q49": {"faithful": "The draft 2027 budget gives the National Health Service of Carvania CVK 9.8 billion, 2.4 "
                        "percent more than this year [hea-006].",
            "invented": "The draft 2027 budget gives the National Health Service of Carvania CVK 8.9 billion, 2.4 "
                        "percent more than this year [hea-006].",
            "bad_citation": "The health service gets CVK 9.8 billion in the draft 2027 budget [hea-060]."},
    "q50": {"faithful": "A total of 43 ambulance calls were delayed by more than 15 minutes during the Lumen Mobile "
                        "outage, the NHSC said [hea-009].",
            "invented": "A total of 34 ambulance calls were delayed by more than 15 minutes during the Lumen Mobile "
                        "outage [hea-009].",
            "offtopic": "Mobile outages can disrupt many services, and emergency services have plans for such events."},
}

# The kind of answer per question on each of DATES (in order).
PLAN = {
    "q02": ("faithful", "invented", "faithful", "bad_citation"),
    "q03": ("faithful", "paraphrase", "invented", "offtopic"),
    "q04": ("faithful", "refusal", "memory", "refusal"),
    "q09": ("faithful", "bad_citation", "negated", "invented"),
    "q10": ("faithful", "faithful", "invented", "refusal"),
    "q12": ("invented", "faithful", "faithful", "offtopic"),
    "q13": ("faithful", "refusal", "misled", "faithful"),
    "q16": ("refusal", "memory", "misled", "refusal"),
    "q20": ("faithful", "invented", "faithful", "bad_citation"),
    "q23": ("faithful", "offtopic", "invented", "faithful"),
    "q25": ("refusal", "memory", "refusal", "offtopic"),
    "q30": ("faithful", "faithful", "refusal", "invented"),
    "q32": ("faithful", "invented", "faithful", "refusal"),
    "q33": ("bad_citation", "faithful", "misled", "faithful"),
    "q34": ("faithful", "memory", "refusal", "offtopic"),
    "q35": ("faithful", "refusal", "memory", "refusal"),
    "q41": ("faithful", "bad_citation", "invented", "faithful"),
    "q44": ("faithful", "offtopic", "invented", "refusal"),
    "q49": ("faithful", "invented", "bad_citation", "faithful"),
    "q50": ("invented", "faithful", "faithful", "offtopic"),
}


def records(context: dict[tuple[str, str], list[dict]]) -> list[dict]:
    """The logged answer records in (run_date, question_id) order (PLAN keeps what each was written to be)."""
    out = []
    for i, day in enumerate(DATES):
        for qid in QUESTIONS:
            kind = PLAN[qid][i]
            out.append({"question_id": qid, "run_date": day, "answer": ANSWERS[qid][kind],
                        "contexts": context[day, qid]})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a demo history (python -m pipeline demo)")
    parser.add_argument("--out", type=Path, default=HERE / "answers.jsonl")
    args = parser.parse_args(argv)
    rows = records(contexts(args.data_dir.resolve()))
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} answer records to {args.out}")


if __name__ == "__main__":
    main()
