from eventstore.events import Metadata
from projections.search import Filters


def test_a_written_message_is_read_back_and_found(service):
    written = service.write_message("s1", "user", "the billing database is PostgreSQL", Metadata())
    history = service.history("s1", 10, None)["history"]
    assert history == [written["message"]]
    results = service.search("postgresql", Filters(), 0, 5)["results"]
    assert [r["message_id"] for r in results] == [written["message"]["message_id"]]
