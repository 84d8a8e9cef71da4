"""Readers and the sentence splitter of hfbert.data.documents, on hand-made files and the real corpora."""

import pytest

from hfbert.data import CHAPTER_HEADING, ReadStats, read_documents, read_people_daily, split_sentences


def test_split_sentences_english_keeps_abbreviations_and_quotes():
    text = 'Mr. Weston came in. "Poor Miss Taylor!" said he. It was J. Smith\'s. What? No! Pi is 3.14 here.'
    assert split_sentences(text) == [
        "Mr. Weston came in.", '"Poor Miss Taylor!" said he.', "It was J. Smith's.", "What?", "No!",
        "Pi is 3.14 here.",
    ]


def test_split_sentences_chinese_splits_without_spaces_and_after_closing_quotes():
    assert split_sentences("他说：“你好。”然后走了。真的吗？是！") == ["他说：“你好。”", "然后走了。", "真的吗？", "是！"]


def test_split_sentences_rejects_non_strings():
    with pytest.raises(TypeError, match="expects a str"):
        split_sentences(["a list"])


def test_original_format_counts_every_line(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("one.\ntwo.\n\n\nthree.\n   \nfour.\n", encoding="utf-8")
    stats = ReadStats()
    documents = list(read_documents(path, stats=stats))
    # "\n\n\n" leaves an empty document between the first and second, as in the original.
    assert documents == [["one.", "two."], [], ["three."], ["four."]]
    assert stats.lines == 7 == stats.text_lines + stats.blank_lines + stats.boundary_lines
    assert (stats.text_lines, stats.blank_lines, stats.documents, stats.units) == (4, 3, 4, 4)


def test_paragraph_layout_with_chapter_boundaries(tmp_path):
    path = tmp_path / "novel.txt"
    path.write_text("TITLE\nCHAPTER I\nFirst. Para.\n\nSecond para.\nChapter 2\nThird.\n", encoding="utf-8")
    stats = ReadStats()
    documents = list(read_documents(path, layout="paragraphs", boundary=CHAPTER_HEADING, stats=stats))
    assert documents == [["TITLE"], ["First. Para."], ["Second para."], ["Third."]]
    assert (stats.boundary_lines, stats.blank_lines, stats.text_lines) == (2, 1, 4)


def test_undecodable_input_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine line\nstill fine\nbroken \xff byte\n")
    with pytest.raises(ValueError, match=r"bad\.txt:3: not valid UTF-8 \(byte 0xff at column 8\)"):
        list(read_documents(path))


def test_missing_file_and_bad_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        list(read_documents(tmp_path / "nope.txt"))
    (tmp_path / "a.txt").write_text("x\n", encoding="utf-8")
    with pytest.raises(ValueError, match="layout"):
        list(read_documents(tmp_path / "a.txt", layout="xml"))


def test_austen_chapters_are_documents(shared_data):
    stats = ReadStats()
    documents = list(read_documents(shared_data / "en_austen_6novels.txt", layout="paragraphs",
                                    boundary=CHAPTER_HEADING, stats=stats))
    # 269 chapter headings -> 270 documents (the text before the first heading is one too).
    assert stats.boundary_lines == 269 and len(documents) == 270
    assert stats.lines == stats.text_lines + stats.blank_lines + stats.boundary_lines
    assert documents[1][0].startswith("Emma Woodhouse, handsome, clever, and rich")


@pytest.mark.slow
def test_people_daily_keeps_segmentation_and_finds_articles():
    stats = ReadStats()
    documents = list(read_people_daily(stats=stats))
    assert stats.lines == 19484 == stats.text_lines
    assert 1500 < len(documents) < 5000  # headline heuristic: one document per article (or short article group)
    first = documents[0]
    assert first[0].startswith("迈向 充满 希望 的 新 世纪")  # words separated by single spaces, tags dropped
    assert all("/" not in sentence for document in documents[:50] for sentence in document)
    # Sentences end at 。！？ (or at the end of a paragraph).
    assert sum(sentence.endswith(("。", "！", "？")) for sentence in first) > len(first) // 2
