"""search_messages over Japanese and other unsegmented text, through MemoryService."""

from __future__ import annotations

from eventstore.events import Metadata
from projections.search import Filters
from server.service import MemoryService


def write(svc: MemoryService, content: str) -> str:
    return svc.write_message("ja", "user", content, Metadata())["message"]["message_id"]


def ids(svc: MemoryService, query: str) -> list[str]:
    return [r["message_id"] for r in svc.search(query, Filters(), 0, 20)["results"]]


def test_a_one_character_query_finds_its_matches(service):
    cat = write(service, "猫が好きです")
    write(service, "犬を飼っています")
    assert ids(service, "猫") == [cat]


def test_a_two_character_query_finds_a_longer_word_first(service):
    tower = write(service, "東京タワーに行きました")
    kyoto = write(service, "京都の寺を見ました")
    write(service, "大阪城を見ました")
    assert ids(service, "東京") == [tower, kyoto]   # one shared character is a weaker match


def test_a_longer_query_ranks_the_whole_phrase_first(service):
    only_tokyo = write(service, "東京は大きい都市です")
    phrase = write(service, "東京タワーは高い")
    only_tower = write(service, "タワーマンションに住む")
    found = ids(service, "東京タワー")
    assert found[0] == phrase
    assert set(found) == {phrase, only_tokyo, only_tower}


def test_a_query_partly_present_still_finds_matches(service):
    a = write(service, "機械学習のモデルを訓練した")
    assert ids(service, "深層学習の本") == [a]


def test_mixed_japanese_and_english_match_both_ways(service):
    mixed = write(service, "Pythonで機械学習を始めた")
    english = write(service, "python tutorial for beginners")
    assert ids(service, "Pythonで機械学習")[0] == mixed
    assert set(ids(service, "python")) == {mixed, english}
    assert ids(service, "機械学習") == [mixed]


def test_full_and_half_width_forms_are_the_same(service):
    a = write(service, "カタカナとＡＰＩの説明")
    assert ids(service, "ｶﾀｶﾅ") == [a]
    assert ids(service, "api") == [a]
    assert ids(service, "ＡＰＩ") == [a]


def test_katakana_words_match_with_or_without_the_middle_dot(service):
    dotted = write(service, "グスタフ・マーラーの交響曲")
    plain = write(service, "グスタフマーラー全集")
    assert set(ids(service, "グスタフ・マーラー")) == {dotted, plain}
    assert set(ids(service, "グスタフマーラー")) == {dotted, plain}


def test_katakana_words_match_with_or_without_a_final_long_vowel(service):
    long_form = write(service, "サーバーが落ちた")
    short_form = write(service, "サーバの再起動")
    assert set(ids(service, "サーバ")) == {long_form, short_form}
    assert set(ids(service, "サーバー")) == {long_form, short_form}


def test_numbers_with_counters_rank_the_exact_count_first(service):
    write(service, "第2回の会議は中止")
    twentieth = write(service, "第20回の会議を開いた")
    write(service, "20人が参加した")
    assert ids(service, "第20回")[0] == twentieth


def test_chinese_and_korean_text_is_searchable(service):
    zh = write(service, "我们明天开会讨论预算")
    ko = write(service, "내일 회의에서 예산을 논의합니다")
    assert ids(service, "预算") == [zh]
    assert ids(service, "예산") == [ko]
