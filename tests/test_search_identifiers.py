"""search_messages over identifiers and error strings, through MemoryService."""

from __future__ import annotations

import itertools
import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eventstore.events import Metadata
from projections.search import Filters
from server.service import MemoryService


def write(svc: MemoryService, content: str) -> str:
    return svc.write_message("code", "assistant", content, Metadata())["message"]["message_id"]


def ids(svc: MemoryService, query: str) -> list[str]:
    return [r["message_id"] for r in svc.search(query, Filters(), 0, 20)["results"]]


def test_an_error_code_is_found_whole_and_ranked_above_its_parts(service):
    whole = write(service, "fetch failed with ERR_CONN_RESET after 30s")
    parts = write(service, "the conn was reset by the peer, err")
    other = write(service, "ERR_CONN_REFUSED on port 5432")
    found = ids(service, "ERR_CONN_RESET")
    assert found[0] == whole
    assert set(found) == {whole, parts, other}


def test_an_error_code_is_found_by_each_part(service):
    a = write(service, "fetch failed with ERR_CONN_RESET")
    assert ids(service, "conn") == [a]
    assert ids(service, "reset") == [a]
    assert ids(service, "err_conn_reset") == [a]


def test_an_error_code_glued_to_a_label_is_still_found_whole(service):
    a = write(service, "log: Error:ERR_CONN_RESET at 12:01")
    b = write(service, "err conn reset")
    assert ids(service, "ERR_CONN_RESET")[0] == a
    assert b in ids(service, "ERR_CONN_RESET")


def test_snake_case_and_camel_case_names_are_found_by_their_parts(service):
    snake = write(service, "rename user_account_id before the migration")
    camel = write(service, "call getUserName() from the handler")
    assert ids(service, "account") == [snake]
    assert ids(service, "user_account_id") == [snake, camel]   # "user" is a shared part
    assert ids(service, "getUserName") == [camel, snake]
    assert set(ids(service, "user name")) == {snake, camel}
    assert ids(service, "user name")[0] == camel


def test_a_dotted_name_whole_ranks_above_its_scattered_parts(service):
    scattered = write(service, "join the path segments, then use os functions")
    dotted = write(service, "use os.path.join for portability")
    found = ids(service, "os.path.join")
    assert found[0] == dotted and scattered in found
    assert ids(service, "os.path")[0] == dotted


def test_a_file_path_is_found_whole_and_by_its_file_name(service):
    a = write(service, "missing /usr/lib/x86_64-linux-gnu/libssl.so.3 at startup")
    write(service, "the usr guide and the lib docs")
    assert ids(service, "/usr/lib/x86_64-linux-gnu/libssl.so.3")[0] == a
    assert ids(service, "libssl") == [a]
    assert ids(service, "libssl.so.3") == [a]


def test_a_version_string_ranks_the_exact_version_first(service):
    other = write(service, "upgraded python to 3.12.1")
    exact = write(service, "pinned python 3.11.7 in CI")
    assert ids(service, "3.11.7")[0] == exact
    assert ids(service, "python 3.11.7")[:2] == [exact, other]


def test_numbers_are_searchable(service):
    a = write(service, "the endpoint returned HTTP 404")
    write(service, "the endpoint returned HTTP 500")
    assert ids(service, "404") == [a]


def test_a_hyphenated_word_finds_its_closed_spelling(service):
    a = write(service, "running helps me de-stress")
    b = write(service, "painting is how I destress")
    assert set(ids(service, "destress")) == {a, b}
    assert set(ids(service, "de-stress")) == {a, b}


def test_an_identifier_typed_in_lower_case_finds_it_written_in_camel_case(service):
    a = write(service, "call getUserProfile() before rendering")
    b = write(service, "see obj.getUserProfile for the cache")
    assert set(ids(service, "getuserprofile")) == {a, b}
    assert set(ids(service, "GETUSERPROFILE")) == {a, b}


# Text made of code-ish and natural pieces: ASCII words and identifiers, accented
# Latin, Japanese, separators, brackets and apostrophes.
_PIECES = st.sampled_from(["get", "User", "Profile", "HTTP", "server", "ERR", "conn", "x", "2", "3.11",
                           "café", "Straße", "naïve", "東京", "カタカナ", "ひらがな", "サーバー", "第20回",
                           "deploy", "painting", "Caroline", "ies", "e"])
_JOINERS = st.sampled_from(["", "", "", " ", " ", ".", "_", "-", "/", ":", "@", "#", "+", "\\", "'", "(",
                            ")", "()", ", ", "・", "ー", "\n"])
TEXTS = st.lists(st.tuples(_PIECES, _JOINERS), min_size=1, max_size=12).map(
    lambda parts: "".join(p + j for p, j in parts))
# What a user selects and copies as one word: letters and digits, with inner apostrophes.
_WORDLIKE = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def _ascii_case(token: str, upper: bool) -> str:
    return "".join((c.upper() if upper else c.lower()) if c.isascii() else c for c in token)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS, data=st.data())
def test_any_word_copied_out_of_a_message_finds_it_in_any_letter_case(service, text, data):
    tokens = _WORDLIKE.findall(text)
    assume(tokens)
    token = data.draw(st.sampled_from(tokens))
    case = data.draw(st.sampled_from(["as written", "lower", "upper"]))
    query = token if case == "as written" else _ascii_case(token, case == "upper")
    session = f"copy-{next(_SESSIONS)}"
    mid = service.write_message(session, "user", text, Metadata())["message"]["message_id"]
    found = [r["message_id"] for r in service.search(query, Filters(session_id=session), 0, 10)["results"]]
    assert found == [mid]


_SESSIONS = itertools.count()
