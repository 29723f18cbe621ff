"""``convmem export`` and ``convmem import jsonl``: export → import into an
empty store → export is byte-identical, for generated stores (writes,
updates, deletes, relations); a re-run adds nothing; a store holding other
messages is refused before anything is written; bad files are named by line."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from dataclasses import replace

import pytest
from helpers import export_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import contents, metadata, open_service, patches, roles, session_ids, unique_word, write

from eventstore.errors import ValidationError
from server import archive, transfer
from server.service import MemoryService
from tools import _proc

# one step: ("write", session, role, text-maker, metadata) / ("update", target, content?, patch) / ("delete", target)
steps = st.lists(st.one_of(
    st.tuples(st.just("write"), session_ids, roles, st.integers(0, 1000), metadata([])),
    st.tuples(st.just("update"), st.integers(0, 50), st.booleans(), patches([])),
    st.tuples(st.just("delete"), st.integers(0, 50))), min_size=1, max_size=25)


def build(path: str, plan: list, data) -> None:
    service = open_service(path)
    ids: list[str] = []
    try:
        for step in plan:
            if step[0] == "write":
                _, session, role, n, meta = step
                relations = data.draw(st.lists(st.tuples(st.sampled_from(("depends_on", "related_to")),
                                                         st.sampled_from(ids)), max_size=2)) if ids else []
                meta = replace(meta, relations=tuple(dict.fromkeys(relations)))
                text = data.draw(contents(unique_word(n)))
                ids.append(service.write_message(session, role, text, meta)["message"]["message_id"])
            elif ids and step[0] == "update":
                _, target, new_content, patch = step
                mid = ids[target % len(ids)]
                if _live(service, mid):
                    service.update_message(mid, "changed " + mid if new_content else None, patch, None)
            elif ids and step[0] == "delete":
                service.delete_message(ids[step[1] % len(ids)], None)
    finally:
        service.close()


def _live(service: MemoryService, mid: str) -> bool:
    with service.snapshot() as (_, live):
        return any(m.message_id == mid for m in live)


def import_text(path: str, text: str) -> int:
    service = MemoryService(path)
    try:
        transfer.check(service, archive.read(io.StringIO(text)))
        return transfer.write(service, archive.read(io.StringIO(text)))
    finally:
        service.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps, data=st.data())
def test_export_then_import_into_an_empty_store_then_export_gives_the_same_bytes(plan, data):
    root = tempfile.mkdtemp(prefix="convmem-transfer-")
    try:
        build(f"{root}/a", plan, data)
        first = export_text(f"{root}/a")
        count = json.loads(first.splitlines()[0])["messages"]
        assert import_text(f"{root}/b", first) == count
        assert export_text(f"{root}/b") == first
        assert import_text(f"{root}/b", first) == 0              # a re-run adds nothing
        assert export_text(f"{root}/b") == first
    finally:
        shutil.rmtree(root)


def test_an_imported_store_gives_new_ids_after_the_imported_ones_and_answers_reads(tmp_path):
    svc = open_service(str(tmp_path / "a"))
    first = write(svc, "alpha deploy", tags=("t",))
    svc.close()
    text = export_text(str(tmp_path / "a"))
    import_text(str(tmp_path / "b"), text)
    svc = MemoryService(str(tmp_path / "b"))
    try:
        new = write(svc, "beta")
        assert new > first
        assert [r["message_id"] for r in svc.search("deploy", _filters(), 0, 5)["results"]] == [first]
    finally:
        svc.close()


def _filters():
    from projections.search import Filters
    return Filters()


def test_an_interrupted_import_is_completed_by_running_it_again(tmp_path):
    svc = open_service(str(tmp_path / "a"))
    for i in range(5):
        write(svc, f"message {i}")
    svc.close()
    text = export_text(str(tmp_path / "a"))
    lines = text.splitlines(keepends=True)
    partial = MemoryService(str(tmp_path / "b"))
    try:
        partial.restore_messages([m for m, _ in archive.read(io.StringIO(text))][:2])
    finally:
        partial.close()
    assert lines[0].startswith('{"format":"tiny-convmem-export"')
    assert import_text(str(tmp_path / "b"), text) == 3
    assert export_text(str(tmp_path / "b")) == text


def test_a_store_holding_other_messages_is_refused_and_nothing_is_written(tmp_path):
    svc = open_service(str(tmp_path / "a"))
    write(svc, "from the file")
    svc.close()
    text = export_text(str(tmp_path / "a"))
    other = MemoryService(str(tmp_path / "b"))
    write(other, "already here")
    other.close()
    before = export_text(str(tmp_path / "b"))
    with pytest.raises(transfer.Refused, match="which the file does not"):
        import_text(str(tmp_path / "b"), text)
    assert export_text(str(tmp_path / "b")) == before


def test_a_message_with_the_same_id_but_other_fields_is_refused(tmp_path):
    svc = open_service(str(tmp_path / "a"))
    write(svc, "original")
    svc.close()
    text = export_text(str(tmp_path / "a"))
    import_text(str(tmp_path / "b"), text)
    edited = text.replace('"original"', '"edited"')
    with pytest.raises(transfer.Refused, match="other fields"):
        import_text(str(tmp_path / "b"), edited)


MSG = ('{"message_id":"01M8S3A2BNY1QPFZ81KJJ6A67X","session_id":"s","timestamp":1,"role":"user","content":"x",'
       '"revision":1,"updated_at":1,"metadata":{"tags":[],"memory_tier":"short","memory_kind":"conversation",'
       '"importance":50,"relations":[],"source_message_ids":[]}}')


@pytest.mark.parametrize(("text", "words"), [
    ("", "line 1: the file is empty"),
    ('{"format":"other"}\n', "line 1: the first line must be the header"),
    ('{"format":"tiny-convmem-export","version":9,"messages":0}\n', "line 1: export format version must be 1"),
    (archive.header(1) + MSG.replace('"user"', '"robot"') + "\n", "line 2: role: must be one of"),
    (archive.header(1) + MSG[:-5] + "\n", "line 2: the line is not valid JSON"),
    (archive.header(2) + MSG + "\n" + MSG + "\n", "line 3: message_id: must be greater"),
    (archive.header(2) + MSG + "\n", "the header announces 2 messages but 1 follow"),
    (archive.header(1) + MSG.replace('"revision":1', '"revision":0') + "\n", "line 2: revision: must be"),
])
def test_a_bad_export_file_is_refused_naming_the_line_and_the_constraint(text, words):
    with pytest.raises(ValidationError, match=words):
        list(archive.read(io.StringIO(text)))


def test_convmem_export_and_import_jsonl_round_trip_through_the_command_line(tmp_path):
    svc = open_service(str(tmp_path / "a"))
    write(svc, "日本語のメモ", tool_call_id="")
    svc.close()
    out = tmp_path / "export.jsonl"
    done = _proc.run(_proc.python("-m", "server.cli", "export", "--store", str(tmp_path / "a"), "--out", str(out)))
    assert done.returncode == 0, done.stderr
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    done = _proc.run(_proc.python("-m", "server.cli", "import", "jsonl", str(out), "--store", str(tmp_path / "b")))
    assert done.returncode == 0, done.stderr
    assert "imported 1 of 1 message into" in done.stderr
    again = _proc.run(_proc.python("-m", "server.cli", "export", "--store", str(tmp_path / "b")))
    assert again.stdout == out.read_text(encoding="utf-8")
    refused = _proc.run(_proc.python("-m", "server.cli", "import", "jsonl", str(out), "--store", str(tmp_path / "c"),
                                     "--dry-run"))
    assert refused.returncode == 0 and "would import 1 of 1" in refused.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    done = _proc.run(_proc.python("-m", "server.cli", "import", "jsonl", str(bad), "--store", str(tmp_path / "c")))
    assert done.returncode == 2 and f"{bad}: line 1:" in done.stderr and "Traceback" not in done.stderr


def test_import_jsonl_checks_each_message_of_the_file_once(tmp_path, monkeypatch):
    from server import cli, validation
    svc = open_service(str(tmp_path / "a"))
    for i in range(3):
        write(svc, f"message {i}")
    svc.close()
    out = tmp_path / "export.jsonl"
    out.write_text(export_text(str(tmp_path / "a")), encoding="utf-8")
    checked: list[str] = []
    check = validation.message

    def counted(msg):
        checked.append(msg.message_id)
        return check(msg)
    monkeypatch.setattr(validation, "message", counted)
    assert cli.main(["import", "jsonl", str(out), "--store", str(tmp_path / "b")]) == 0
    assert len(checked) == 3 and len(set(checked)) == 3
    assert export_text(str(tmp_path / "b")) == out.read_text(encoding="utf-8")


def test_a_line_changed_between_the_two_reads_is_checked_on_the_second():
    from array import array
    good = archive.header(1) + MSG + "\n"
    seen: array[int] = array("q")
    assert len(list(archive.read(io.StringIO(good), seen))) == 1 and len(seen) == 1
    assert len(list(archive.read(io.StringIO(good), known=seen))) == 1
    changed = archive.header(1) + MSG.replace('"user"', '"robot"') + "\n"
    with pytest.raises(ValidationError, match="line 2: role: must be one of"):
        list(archive.read(io.StringIO(changed), known=seen))
