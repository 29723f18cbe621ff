"""The tokenizer: what terms a text gives to the index and to a query."""

from __future__ import annotations

from projections.tokens import GRAM_WEIGHT, MAX_TERM_BYTES, PART_WEIGHT, query_terms, terms


# ------------------------------------------------------------------ English
def test_text_is_nfkc_normalized_and_case_folded():
    assert terms("ＰＯＳＴＧＲＥＳＱＬ Error") == terms("postgresql error")


def test_english_words_are_stemmed_so_inflections_meet():
    assert terms("deploys deployed deploying") == terms("deploy deploy deploy")
    assert terms("Caroline's paintings") == terms("caroline painting")


def test_curly_and_straight_apostrophes_are_the_same_letter():
    assert terms("Melanie\u2019s") == terms("Melanie's") == terms("Melanie")


def test_a_query_drops_stopwords_unless_nothing_else_is_left():
    assert set(query_terms("What did the deploy break?")) == {"deploy", "break"}
    assert query_terms("to be or not to be")
    assert set(query_terms("I'm here")) == set(terms("I'm here"))


def test_the_index_keeps_stopwords_so_a_stopword_query_can_match():
    assert "the" in terms("the end")


# -------------------------------------------------------------- identifiers
def test_an_identifier_gives_its_whole_form_and_every_part():
    assert terms("ERR_CONN_RESET") == ["err_conn_reset", "err", "conn", "reset"]
    # an all-letter whole is stemmed like the same word typed plainly ("getusername")
    assert terms("getUserName") == ["getusernam", "get", "user", "name"]
    assert terms("HTTPServer") == ["httpserver", "http", "server"]
    assert terms("os.path.join") == ["os.path.join", "os", "path", "join"]
    assert terms("3.11.7") == ["3.11.7", "3", "11", "7"]


def test_a_path_or_url_also_gives_its_segments_whole():
    assert "libssl.so" in terms("/usr/lib/libssl.so")
    assert "err_conn_reset" in terms("Error:ERR_CONN_RESET")
    assert "example.com" in terms("https://example.com/a")


def test_a_hyphenated_word_meets_its_closed_spelling():
    assert terms("de-stress")[0] == terms("destress")[0]
    assert terms("e-mail")[0] == terms("email")[0]


def test_query_weights_favour_the_whole_identifier_over_its_parts():
    q = query_terms("ERR_CONN_RESET")
    assert q["err_conn_reset"] == 1.0
    assert q["err"] == q["conn"] == q["reset"] == PART_WEIGHT < 1.0


def test_long_terms_are_bounded_for_lmdb_keys():
    long_word = "x" * 2000
    [term] = terms(long_word)
    assert len(term.encode("utf-8")) <= MAX_TERM_BYTES
    assert terms(long_word) == terms(long_word.upper())


# ----------------------------------------------------- unsegmented scripts
def test_a_japanese_run_gives_every_character_and_every_neighbouring_pair():
    assert terms("東京都") == ["東", "京", "都", "東京", "京都"]


def test_a_japanese_query_asks_for_pairs_and_characters_at_lower_weight():
    q = query_terms("東京都")
    assert q["東京"] == q["京都"] == GRAM_WEIGHT
    assert q["東"] == GRAM_WEIGHT
    assert query_terms("猫") == {"猫": 1.0}


def test_half_width_katakana_and_full_width_latin_are_normalized():
    assert terms("ｶﾀｶﾅ") == terms("カタカナ")
    assert terms("ＡＰＩ") == terms("API")


def test_the_katakana_middle_dot_is_dropped():
    assert terms("グスタフ・マーラー") == terms("グスタフマーラー")


def test_a_long_katakana_word_loses_a_final_long_vowel_mark():
    assert terms("サーバー") == terms("サーバ")
    assert terms("コンピューター") == terms("コンピュータ")
    assert terms("ルー") != terms("ル")


def test_digits_touching_a_japanese_run_pair_with_its_characters():
    found = terms("第20回大会")
    assert {"第20", "20回", "20"} <= set(found)
    assert "1910年" in terms("1910年に")


def test_mixed_japanese_and_english_keep_both():
    found = terms("Pythonで機械学習")
    assert "python" in found and "機械" in found and "学習" in found
