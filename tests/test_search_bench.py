"""The retrieval benchmark tool on a tiny hand-made data directory."""

from __future__ import annotations

import json

from tools.search_bench import clean_evidence, load_locomo, main

KNOWN = {"D8:6", "D9:17", "D30:5", "D11:26"}


def test_evidence_strings_are_cleaned():
    assert clean_evidence(["D8:6; D9:17"], KNOWN) == ["D8:6", "D9:17"]
    assert clean_evidence(["D30:05"], KNOWN) == ["D30:5"]
    assert clean_evidence(["D:11:26", "D", "D99:1"], KNOWN) == ["D11:26"]
    assert clean_evidence(["D8:6", "D8:06"], KNOWN) == ["D8:6"]


def _data(tmp_path):
    def turn(speaker, dia_id, text):
        return {"speaker": speaker, "dia_id": dia_id, "text": text}

    def qa(question, evidence, category):
        return {"question": question, "answer": "", "evidence": evidence, "category": category}
    conversation = {"speaker_a": "Ann", "speaker_b": "Bo",
                    "session_1": [turn("Ann", "D1:1", "I adopted a grey cat named Miso"),
                                  turn("Bo", "D1:2", "Lovely! I went hiking in the Alps")],
                    "session_2": [turn("Ann", "D2:01", "Miso knocked over my paint")]}
    questions = [qa("What is the name of Ann's cat?", ["D1:1"], 1),
                 qa("Where did Bo go hiking?", ["D1:2; D7:7"], 2),
                 qa("What did the cat knock over?", ["D2:1"], 4),
                 qa("Adversarial", ["D1:1"], 5),
                 qa("Nothing known", ["D5:5"], 1)]
    locomo = [{"sample_id": "conv-x", "conversation": conversation, "qa": questions}]
    (tmp_path / "locomo-dev.json").write_text(json.dumps(locomo), encoding="utf-8")
    paragraphs = [{"context": "猫 [SEP] 猫は小型の肉食動物である。", "qas": [{"question": "猫は何の動物か"}]},
                  {"context": "富士山 [SEP] 富士山は日本一高い山である。", "qas": [{"question": "日本一高い山は"}]}]
    jsquad = {"data": [{"paragraphs": paragraphs}]}
    (tmp_path / "jsquad-dev.json").write_text(json.dumps(jsquad, ensure_ascii=False), encoding="utf-8")
    return tmp_path


def test_locomo_questions_keep_categories_one_to_four_with_known_evidence(tmp_path):
    [corpus], counts = load_locomo(str(_data(tmp_path) / "locomo-dev.json"))
    assert [d[0] for d in corpus.docs] == ["D1:1", "D1:2", "D2:1"]
    assert [d[1] for d in corpus.docs] == ["conv-x-session-1", "conv-x-session-1", "conv-x-session-2"]
    assert [q for q, _ in corpus.questions] == ["What is the name of Ann's cat?", "Where did Bo go hiking?",
                                                "What did the cat knock over?"]
    assert counts == {"questions": 3, "skipped_no_evidence": 1, "evidence_dropped": 2}


def test_the_benchmark_runs_every_system_and_writes_its_record(tmp_path, capsys):
    data = _data(tmp_path)
    out = tmp_path / "record.json"
    assert main(["--data", str(data), "--json", str(out)]) == 0
    record = json.loads(out.read_text(encoding="utf-8"))
    assert set(record["results"]) == {"convmem", "convmem-own", "fts5-trigram", "fts5-unicode61",
                                      "fts5-trigram-words"}
    ours = record["results"]["convmem"]
    assert ours["locomo"]["recall@1"] == 1.0 and ours["locomo"]["questions"] == 3
    assert {c: r["questions"] for c, r in ours["locomo"]["by_category"].items()} == {"1": 1, "2": 1, "4": 1}
    assert ours["jsquad"]["recall@1"] == 1.0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].startswith("system") and "convmem" in printed


def test_the_scale_tool_builds_a_store_and_reports_latency_and_memory(tmp_path, capsys):
    from tools.search_scale import main as scale
    data = _data(tmp_path)
    assert scale(["--data", str(data), "--messages", "40", "--store", str(tmp_path / "store")]) == 0
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert record["active_messages"] == 40 and record["build"]["active_messages"] == 40
    assert record["unfiltered"]["queries"] == 5 and record["rss_mb"] > 0
    assert 0 <= record["work"]["share_read"] <= 1 and record["work"]["pending"] == 40   # < MERGE_AT
