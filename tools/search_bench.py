"""Retrieval benchmark: our search against SQLite FTS5 on the same corpus and questions.

    python -m tools.search_bench                          both data sets, every system
    python -m tools.search_bench --data DIR --json OUT    data directory; JSON record to a file
    python -m tools.search_bench --chart docs/search-bench.png   also a PNG (needs matplotlib)

Data (``--data``, default ``../shared/data``), read as its README describes:

* **LoCoMo** (``locomo-dev.json``): one fresh store per conversation, every
  turn one message (``session_id`` = sample id + session number, role
  user/assistant by speaker, content ``"{speaker}: {text}"``); each question of
  categories 1–4 is searched and scored by recall@1/5/10 (share of its evidence
  turns in the top k) and MRR@10 (first evidence turn).  Evidence strings are
  cleaned: ``"D8:6; D9:17"`` is two ids, ``"D30:05"`` is ``D30:5``, ``"D:11:26"``
  is ``D11:26``; ids matching no turn are dropped, and a question left with no
  evidence is skipped (counted in the record).
* **JSQuAD** (``jsquad-dev.json``): every paragraph one message in one store;
  each question scores whether its own paragraph is in the top 1/5/10.

Systems, each over the same texts and questions with a limit of 10:

* ``convmem`` — :class:`server.service.MemoryService`, through its public
  ``write_message`` / ``search`` (durable writes, a fresh store per corpus);
* ``convmem-own`` — the same, ranked by the own fields alone (no context
  boost: ``search(..., boost=False)``), for comparison;
* ``fts5-trigram`` and ``fts5-unicode61`` — an in-memory SQLite FTS5 table
  with that tokenizer, ranked by ``bm25()``; the query is an OR of the query's
  terms as that tokenizer sees them: the word tokens (``\\w+``, lower-cased)
  for ``unicode61``, their overlapping trigrams for ``trigram`` (the trigram
  tokenizer matches substrings of at least three characters, and a Japanese
  sentence has no spaces to cut words at);
* ``fts5-trigram-words`` — the trigram table queried with whole word tokens
  (the protocol behind the data README's reference figures; useless for
  Japanese, where a whole sentence is one "word").

Each system's time per question is given twice: wall-clock (``ms_per_query``)
and this process's CPU time (``cpu_ms_per_query``), which stays comparable on
a shared, loaded machine where the wall-clock figure does not.

Prints one table and one JSON record (stdout; ``--json`` also writes it to a
file).  Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from eventstore.events import Metadata

LIMIT = 10
KS = (1, 5, 10)
SYSTEMS = ("convmem", "convmem-own", "fts5-trigram", "fts5-unicode61", "fts5-trigram-words")
DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION = re.compile(r"session_(\d+)")
_WORD = re.compile(r"\w+")


# ------------------------------------------------------------------ data
@dataclass
class Corpus:
    """Documents (key, session, role, text) and questions (text, relevant keys)."""

    name: str
    docs: list[tuple[str, str, str, str]] = field(default_factory=list)
    questions: list[tuple[str, list[str]]] = field(default_factory=list)
    categories: list[int] = field(default_factory=list)     # LoCoMo: each question's category


def clean_evidence(raw: Iterable[str], known: set[str]) -> list[str]:
    """Evidence dia_ids as turn keys: split, unpadded, unknown ids dropped."""
    out: list[str] = []
    for item in raw:
        for session, turn in _EVIDENCE.findall(str(item)):
            key = f"D{int(session)}:{int(turn)}"
            if key in known and key not in out:
                out.append(key)
    return out


def _turn_key(dia_id: str) -> str:
    found = _EVIDENCE.findall(dia_id)
    return f"D{int(found[0][0])}:{int(found[0][1])}" if found else dia_id


def load_locomo(path: str) -> tuple[list[Corpus], dict[str, int]]:
    """One corpus per conversation, and counts of what cleaning did."""
    with open(path, encoding="utf-8") as fh:
        samples = json.load(fh)
    corpora, counts = [], {"questions": 0, "skipped_no_evidence": 0, "evidence_dropped": 0}
    for sample in samples:
        conv, corpus = sample["conversation"], Corpus(sample["sample_id"])
        roles = {conv.get("speaker_a"): "user", conv.get("speaker_b"): "assistant"}
        sessions = sorted((int(m.group(1)), k) for k in conv if (m := _SESSION.fullmatch(k)))
        for number, key in sessions:
            for turn in conv[key]:
                corpus.docs.append((_turn_key(turn["dia_id"]), f"{sample['sample_id']}-session-{number}",
                                    roles.get(turn["speaker"], "user"), f"{turn['speaker']}: {turn['text']}"))
        known = {d[0] for d in corpus.docs}
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            evidence = clean_evidence(qa.get("evidence", []), known)
            counts["evidence_dropped"] += sum(len(_EVIDENCE.findall(str(e))) or 1
                                              for e in qa.get("evidence", [])) - len(evidence)
            if not evidence:
                counts["skipped_no_evidence"] += 1
                continue
            corpus.questions.append((qa["question"], evidence))
            corpus.categories.append(qa["category"])
            counts["questions"] += 1
        corpora.append(corpus)
    return corpora, counts


def load_jsquad(path: str) -> Corpus:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)["data"]
    corpus = Corpus("jsquad")
    for article in data:
        for paragraph in article["paragraphs"]:
            key = str(len(corpus.docs))
            corpus.docs.append((key, "jsquad", "user", paragraph["context"]))
            corpus.questions.extend((qa["question"], [key]) for qa in paragraph["qas"])
    return corpus


# --------------------------------------------------------------- systems
class ConvMem:
    """Our search, through the public service API, on a fresh store."""

    def __init__(self, docs: list[tuple[str, str, str, str]], boost: bool = True) -> None:
        from server.service import MemoryService
        self.boost = boost
        self._dir = tempfile.TemporaryDirectory(prefix="convmem-bench-")
        self.service = MemoryService(os.path.join(self._dir.name, "store"))
        self.keys: dict[str, str] = {}
        for key, session, role, text in docs:
            written = self.service.write_message(session, role, text, Metadata())
            self.keys[written["message"]["message_id"]] = key

    def search(self, query: str) -> list[str]:
        from projections.search import Filters
        results = self.service.search(query, Filters(), 0, LIMIT, boost=self.boost)["results"]
        return [self.keys[r["message_id"]] for r in results]

    def close(self) -> None:
        self.service.close()
        self._dir.cleanup()


class Fts5:
    """SQLite FTS5 in memory, ranked by bm25(), the query an OR of its terms."""

    def __init__(self, docs: list[tuple[str, str, str, str]], tokenizer: str, trigrams: bool) -> None:
        self.db = sqlite3.connect(":memory:")
        self.tokenizer, self.trigrams = tokenizer, trigrams
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(content, tokenize='{tokenizer}')")
        self.keys = [d[0] for d in docs]
        self.db.executemany("INSERT INTO t(rowid, content) VALUES (?, ?)",
                            ((i, d[3]) for i, d in enumerate(docs)))

    def terms(self, query: str) -> list[str]:
        words = [w.lower() for w in _WORD.findall(query)]
        if self.trigrams:
            words = [w[i:i + 3] for w in words for i in range(len(w) - 2)]
        if self.tokenizer == "trigram":
            words = [w for w in words if len(w) >= 3]
        return list(dict.fromkeys(words))

    def search(self, query: str) -> list[str]:
        terms = self.terms(query)
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = self.db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?",
                               (match, LIMIT))
        return [self.keys[r] for (r,) in rows]

    def close(self) -> None:
        self.db.close()


def make_system(name: str, docs) -> ConvMem | Fts5:
    if name in ("convmem", "convmem-own"):
        return ConvMem(docs, boost=name == "convmem")
    tokenizer = "unicode61" if name == "fts5-unicode61" else "trigram"
    return Fts5(docs, tokenizer, trigrams=name == "fts5-trigram")


# --------------------------------------------------------------- scoring
@dataclass
class Score:
    sums: dict[str, float] = field(default_factory=dict)
    n: int = 0
    seconds: float = 0.0
    cpu: float = 0.0            # seconds of this process's CPU time (a loaded machine stretches the others)

    def add(self, ranked: list[str], relevant: list[str], seconds: float, cpu: float = 0.0) -> None:
        rel = set(relevant)
        for k in KS:
            self.sums[f"recall@{k}"] = self.sums.get(f"recall@{k}", 0.0) + len(rel & set(ranked[:k])) / len(rel)
        first = next((i for i, key in enumerate(ranked[:LIMIT]) if key in rel), None)
        self.sums["mrr@10"] = self.sums.get("mrr@10", 0.0) + (0.0 if first is None else 1 / (first + 1))
        self.n += 1
        self.seconds += seconds
        self.cpu += cpu

    def result(self) -> dict[str, float]:
        out = {k: round(v / max(self.n, 1), 3) for k, v in self.sums.items()}
        out["questions"] = self.n
        out["ms_per_query"] = round(1000 * self.seconds / max(self.n, 1), 2)
        out["cpu_ms_per_query"] = round(1000 * self.cpu / max(self.n, 1), 2)
        return out


def evaluate(corpora: list[Corpus], systems: list[str], progress: Callable[[str], None]) -> dict[str, dict]:
    """Per system its scores, and (when the questions have categories) its
    scores per category under ``by_category``."""
    scores = {s: Score() for s in systems}
    by_category: dict[str, dict[int, Score]] = {s: {} for s in systems}
    for corpus in corpora:
        for name in systems:
            progress(f"{corpus.name}: {name} ({len(corpus.docs)} docs, {len(corpus.questions)} questions)")
            system = make_system(name, corpus.docs)
            try:
                for i, (question, relevant) in enumerate(corpus.questions):
                    start, cpu = time.perf_counter(), time.process_time()
                    ranked = system.search(question)
                    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                    scores[name].add(ranked, relevant, seconds, cpu)
                    if corpus.categories:
                        by_category[name].setdefault(corpus.categories[i], Score()).add(ranked, relevant, seconds,
                                                                                         cpu)
            finally:
                system.close()
    out = {s: sc.result() for s, sc in scores.items()}
    for s, cats in by_category.items():
        if cats:
            out[s]["by_category"] = {str(c): cats[c].result() for c in sorted(cats)}
    return out


# ----------------------------------------------------------------- output
COLUMNS = (("locomo", ("recall@1", "recall@5", "recall@10", "mrr@10", "ms_per_query", "cpu_ms_per_query")),
           ("jsquad", ("recall@1", "recall@5", "recall@10", "ms_per_query", "cpu_ms_per_query")))


def _head(ds: str, m: str) -> str:
    return f"{ds} {m.replace('cpu_ms_per_query', 'cpu ms/q').replace('ms_per_query', 'ms/q')}"


def table(results: dict[str, dict[str, dict]]) -> str:
    heads = [_head(ds, m) for ds, ms in COLUMNS for m in ms]
    width = max(len(s) for s in results) + 2
    lines = ["system".ljust(width) + "  ".join(h.rjust(len(h)) for h in heads)]
    for system, by_ds in results.items():
        cells = []
        for (ds, ms) in COLUMNS:
            for m in ms:
                value = by_ds.get(ds, {}).get(m)
                h = _head(ds, m)
                cells.append(("-" if value is None else f"{value:.3f}" if not m.endswith("ms_per_query")
                              else f"{value:.2f}").rjust(len(h)))
        lines.append(system.ljust(width) + "  ".join(cells))
    cats = sorted({c for by_ds in results.values() for c in by_ds.get("locomo", {}).get("by_category", {})})
    if cats:
        lines.append("")
        lines.append("LoCoMo by category".ljust(width) + "  ".join(f"cat {c} r@10 / mrr".rjust(18) for c in cats))
        for system, by_ds in results.items():
            found = by_ds.get("locomo", {}).get("by_category", {})
            lines.append(system.ljust(width) + "  ".join(
                (f"{found[c]['recall@10']:.3f} / {found[c]['mrr@10']:.3f}" if c in found else "-").rjust(18)
                for c in cats))
    return "\n".join(lines)


def chart(results: dict[str, dict[str, dict]], path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--chart needs matplotlib (pip install matplotlib); the table and JSON "
                         "were printed without it") from None
    metrics = [("locomo", "recall@5"), ("locomo", "recall@10"), ("locomo", "mrr@10"),
               ("jsquad", "recall@1"), ("jsquad", "recall@5")]
    systems = list(results)
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=110)
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        values = [results[system].get(ds, {}).get(m, 0.0) for ds, m in metrics]
        bars = ax.bar([x + i * width for x in range(len(metrics))], values, width, label=system)
        ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
    ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(metrics))])
    ax.set_xticklabels([f"{ds}\n{m}" for ds, m in metrics], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score")
    ax.set_title("search_messages vs SQLite FTS5 (dev split, limit 10)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.search_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=DEFAULT_DATA, help="directory with locomo-dev.json and jsquad-dev.json")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ", ".join(SYSTEMS))
    parser.add_argument("--only", choices=("locomo", "jsquad"), help="run one data set only")
    parser.add_argument("--json", metavar="PATH", help="also write the JSON record to PATH")
    parser.add_argument("--chart", metavar="PATH", help="write a PNG bar chart to PATH (needs matplotlib)")
    args = parser.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    if args.chart:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--chart needs matplotlib (pip install matplotlib)")
    progress = lambda text: print(text, file=sys.stderr, flush=True)
    record: dict = {"benchmark": "search_bench", "limit": LIMIT, "data": os.path.abspath(args.data),
                    "sqlite": sqlite3.sqlite_version, "datasets": {}}
    per_ds: dict[str, dict[str, dict]] = {}
    if args.only in (None, "locomo"):
        corpora, counts = load_locomo(os.path.join(args.data, "locomo-dev.json"))
        record["datasets"]["locomo"] = {"conversations": len(corpora), "turns": sum(len(c.docs) for c in corpora),
                                        "categories": [1, 2, 3, 4], **counts}
        per_ds["locomo"] = evaluate(corpora, systems, progress)
    if args.only in (None, "jsquad"):
        corpus = load_jsquad(os.path.join(args.data, "jsquad-dev.json"))
        record["datasets"]["jsquad"] = {"paragraphs": len(corpus.docs), "questions": len(corpus.questions)}
        per_ds["jsquad"] = evaluate([corpus], systems, progress)
    results = {s: {ds: per_ds[ds][s] for ds in per_ds} for s in systems}
    record["results"] = results
    print(table(results))
    text = json.dumps(record, ensure_ascii=False, sort_keys=True)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if args.chart:
        chart(results, args.chart)
        progress(f"chart written to {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
