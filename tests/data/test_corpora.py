"""Local parallel files: reading, bad-input errors (file and line), empty lines, specs, get_corpus."""
import pytest
import tensorflow as tf

from keras_transformer.data.corpora import CorpusFormatError, LocalParallelCorpus
from keras_transformer.data.factory import get_corpus, parse_local_spec, require_shared_data
from keras_transformer.data.numbers_corpus import NumbersCorpus
from keras_transformer.data.tfds_corpus import TfdsTranslationCorpus
from tests.data.conftest import write_text


def test_aligned_files_give_pairs_in_order(tmp_path):
    source = write_text(tmp_path / "train.en", ["a dog", "two cats"])
    target = write_text(tmp_path / "train.de", ["ein Hund", "zwei Katzen"], newline="\r\n")
    corpus = LocalParallelCorpus({"train": (source, target)})
    assert list(corpus.pairs("train")) == [("a dog", "ein Hund"), ("two cats", "zwei Katzen")]
    assert corpus.skipped_empty == {"train": 0}
    source_tensors, target_tensors = next(iter(corpus.dataset("train")))
    assert (source_tensors.numpy().decode(), target_tensors.numpy().decode()) == ("a dog", "ein Hund")


def test_reverse_swaps_sides_and_languages(tmp_path):
    tsv = write_text(tmp_path / "train.tsv", ["hello\thallo"])
    corpus = LocalParallelCorpus({"train": tsv}, reverse=True)
    assert list(corpus.pairs("train")) == [("hallo", "hello")]
    assert (corpus.source_language, corpus.target_language) == ("de", "en")


def test_different_line_counts_name_both_files_and_the_line(tmp_path):
    source = write_text(tmp_path / "train.en", ["one", "two", "three"])
    target = write_text(tmp_path / "train.de", ["eins", "zwei"])
    corpus = LocalParallelCorpus({"train": (source, target)})
    with pytest.raises(CorpusFormatError) as error:
        list(corpus.pairs("train"))
    assert str(error.value) == (f"{source} has 3 lines but {target} has 2: aligned files must have the same "
                                f"number of lines; line 3 of {source} has no counterpart in {target}")


def test_tsv_line_without_exactly_one_tab_names_file_line_and_value(tmp_path):
    tsv = write_text(tmp_path / "train.tsv", ["a\tb", "no tab here", "c\td"])
    with pytest.raises(CorpusFormatError, match=rf"{tsv}:2: expected exactly one tab.*'no tab here'"):
        list(LocalParallelCorpus({"train": tsv}).pairs("train"))
    tsv = write_text(tmp_path / "extra.tsv", ["a\tb", "c\td", "e\tf\tCC-BY attribution"])
    with pytest.raises(CorpusFormatError, match=rf"{tsv}:3: expected exactly one tab .*, found 2"):
        list(LocalParallelCorpus({"train": tsv}).pairs("train"))


def test_tsv_columns_option_reads_files_with_extra_columns(tmp_path):
    tsv = write_text(tmp_path / "deu-eng.tsv", ["Hi.\tHallo!\tCC-BY 2.0 (France) Attribution",
                                                "Run!\tLauf!\tCC-BY 2.0 (France) Attribution"])
    corpus = LocalParallelCorpus({"train": tsv}, tsv_columns=(0, 1))
    assert list(corpus.pairs("train")) == [("Hi.", "Hallo!"), ("Run!", "Lauf!")]
    short = write_text(tmp_path / "short.tsv", ["only one field"])
    with pytest.raises(CorpusFormatError, match=rf"{short}:1: expected at least 2"):
        list(LocalParallelCorpus({"train": short}, tsv_columns=(0, 1)).pairs("train"))


def test_invalid_utf8_names_file_and_line(tmp_path):
    source = write_text(tmp_path / "train.en", b"fine\nalso fine\nbad \xff\xfe byte\n")
    target = write_text(tmp_path / "train.de", ["gut", "auch gut", "schlecht"])
    with pytest.raises(CorpusFormatError, match=rf"{source}:3: invalid UTF-8 at byte 4"):
        list(LocalParallelCorpus({"train": (source, target)}).pairs("train"))
    tsv = write_text(tmp_path / "bad.tsv", b"a\tb\n\xc3\tc\n")
    with pytest.raises(CorpusFormatError, match=rf"{tsv}:2: invalid UTF-8"):
        list(LocalParallelCorpus({"train": tsv}).pairs("train"))


def test_empty_lines_are_skipped_and_counted(tmp_path, caplog):
    source = write_text(tmp_path / "train.en", ["one", "", "three", "   ", "five"])
    target = write_text(tmp_path / "train.de", ["eins", "zwei", "", "vier", "fünf"])
    tsv = write_text(tmp_path / "test.tsv", ["a\tb", "", "c\t", "\td", "  e \t f  "])
    corpus = LocalParallelCorpus({"train": (source, target), "test": tsv}, name="tiny")
    with caplog.at_level("WARNING"):
        assert list(corpus.pairs("train")) == [("one", "eins"), ("five", "fünf")]
        assert list(corpus.pairs("test")) == [("a", "b"), ("e", "f")]
    assert corpus.skipped_empty == {"train": 3, "test": 3}
    assert f"tiny/train: skipped 3 line(s) with an empty side (the first: line 2 of {source} and {target})" in caplog.text
    assert f"tiny/test: skipped 3 line(s) with an empty side (the first: line 2 of {tsv})" in caplog.text


def test_the_first_skipped_line_is_counted_across_batches_and_remembered(tmp_path, monkeypatch, caplog):
    """A skipped line past the first batch of lines is numbered from the file's start, and a check
    read back from the check cache still names it."""
    from keras_transformer.data import text_files

    monkeypatch.setenv(text_files.CHECK_CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(text_files, "LINES_PER_BATCH", 4)
    lines = [f"s{index}\tt{index}" for index in range(11)]
    lines[9] = "s9\t "
    tsv = write_text(tmp_path / "train.tsv", lines)
    source = write_text(tmp_path / "train.en", [f"s{index}" for index in range(7)] + [""])
    target = write_text(tmp_path / "train.de", [f"t{index}" for index in range(8)])
    for _ in range(2):  # checked, then read back from the cache
        assert text_files.remembered_check([tsv], {"tsv_columns": None}, lambda: text_files.check_tsv(tsv)) == (
            text_files.FileCounts(num_pairs=10, num_skipped_empty=1, first_skipped_line=10, block_lines=4,
                                  skipped_before_blocks=[0, 0, 0]))
        assert text_files.remembered_check((source, target), "aligned",
                                           lambda: text_files.check_aligned_files(source, target)) == (
            text_files.FileCounts(num_pairs=7, num_skipped_empty=1, first_skipped_line=8, block_lines=4,
                                  skipped_before_blocks=[0, 0]))
    with caplog.at_level("WARNING"):
        LocalParallelCorpus({"train": tsv}, name="long").num_pairs("train")
    assert f"long/train: skipped 1 line(s) with an empty side (the first: line 10 of {tsv})" in caplog.text
    # Counts without blocks (as remembered before they were counted) find a pair from the file's start.
    first_line, pairs_before = text_files.FileCounts(num_pairs=10, num_skipped_empty=1).pairs_block(7)
    assert (int(first_line), int(pairs_before)) == (0, 7)


def test_missing_file_and_missing_split_are_clear(tmp_path):
    corpus = LocalParallelCorpus({"train": tmp_path / "nope.tsv"})
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        list(corpus.pairs("train"))
    with pytest.raises(ValueError, match="no files for split 'test'"):
        list(corpus.pairs("test"))
    with pytest.raises(ValueError, match="unknown split"):
        list(corpus.pairs("dev"))


def test_holdout_splits_are_disjoint_cover_everything_and_follow_the_seed(tmp_path):
    lines = [f"sentence {i}\tSatz {i}" for i in range(50)]
    tsv = write_text(tmp_path / "all.tsv", lines)
    corpus = LocalParallelCorpus({"train": tsv}, holdout=(5, 7), seed=3)
    splits = {split: list(corpus.pairs(split)) for split in ("train", "validation", "test")}
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [38, 5, 7]
    together = splits["train"] + splits["validation"] + splits["test"]
    assert sorted(together) == sorted((f"sentence {i}", f"Satz {i}") for i in range(50))
    again = LocalParallelCorpus({"train": tsv}, holdout=(5, 7), seed=3)
    assert list(again.pairs("test")) == splits["test"]
    other = LocalParallelCorpus({"train": tsv}, holdout=(5, 7), seed=4)
    assert list(other.pairs("test")) != splits["test"]


def test_held_out_pairs_are_read_from_the_files_once(tmp_path):
    """Every evaluation reads the validation split: a pass over all of train each time before."""
    tsv = write_text(tmp_path / "all.tsv", [f"sentence {i}\tSatz {i}" for i in range(50)])
    corpus = LocalParallelCorpus({"train": tsv}, holdout=(5, 7), seed=3, reverse=True)
    validation = list(corpus.pairs("validation"))
    assert len(validation) == 5 and all(source.startswith("Satz") for source, _ in validation)
    write_text(tsv, [f"other {i}\tanderer {i}" for i in range(50)])  # not read again
    assert list(corpus.pairs("validation")) == validation
    assert [(s.numpy().decode(), t.numpy().decode()) for s, t in corpus.dataset("validation")] == validation
    assert list(corpus.pairs("test"))[0][0].startswith("anderer")  # test had not been read yet


def test_local_spec_parses_aligned_tsv_and_multiple_entries(tmp_path):
    write_text(tmp_path / "a.en", ["one"])
    write_text(tmp_path / "a.de", ["eins"])
    write_text(tmp_path / "b.tsv", ["two\tzwei\tx"])
    write_text(tmp_path / "c.tsv", ["three\tdrei\ty"])
    spec = (f"train={tmp_path}/a.en,{tmp_path}/a.de+{tmp_path}/b.tsv; validation={tmp_path}/c.tsv;"
            f"columns=0,1")
    corpus = get_corpus(spec)
    assert list(corpus.pairs("train")) == [("one", "eins"), ("two", "zwei")]
    assert list(corpus.pairs("validation")) == [("three", "drei")]
    reversed_corpus = parse_local_spec(spec, reverse=True)
    assert list(reversed_corpus.pairs("validation")) == [("drei", "three")]


def test_a_spec_of_a_test_set_alone_scores_it_and_names_its_splits_when_asked_for_others(tmp_path):
    (tmp_path / "test.tsv").write_text("one\teins\ntwo\tzwei\n", encoding="utf-8")
    corpus = parse_local_spec(f"test={tmp_path / 'test.tsv'}")
    assert list(corpus.pairs("test")) == [("one", "eins"), ("two", "zwei")]
    with pytest.raises(ValueError, match=r"no files for split 'train'; it has \['test'\]"):
        corpus.num_pairs("train")


@pytest.mark.parametrize("spec, message", [
    ("train=a,b,c", "one TSV path or two aligned paths"),
    ("train=a.tsv;colour=red", "unknown key 'colour'"),
    ("train", "expected KEY=VALUE"),
    ("validation=a.tsv;holdout=1,1", "holdout carves validation and test out of a 'train' split"),
    ("train=a.tsv;columns=1", "two comma-separated values"),
])
def test_bad_local_specs_are_rejected(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_local_spec(spec)


def test_get_corpus_names(tmp_path):
    assert isinstance(get_corpus("numbers", num_train=10, num_validation=2, num_test=2), NumbersCorpus)
    wmt = get_corpus("wmt14", reverse=True, tfds_data_dir=str(tmp_path))
    assert isinstance(wmt, TfdsTranslationCorpus)
    assert (wmt.source_language, wmt.target_language, wmt.data_dir) == ("de", "en", str(tmp_path))
    with pytest.raises(ValueError, match="unknown dataset 'wmt15'"):
        get_corpus("wmt15")
    with pytest.raises(FileNotFoundError, match="KT_SHARED_DATA"):
        get_corpus("multi30k", data_root=tmp_path / "absent")


def test_require_shared_data_skips_locally_and_fails_in_ci(tmp_path, monkeypatch):
    monkeypatch.setenv("KT_SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"shared corpora not found: {tmp_path / 'absent'} "):
        require_shared_data("multi30k/train.en")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and shared corpora not found"):
        require_shared_data("multi30k/train.en")
    write_text(tmp_path / "absent" / "multi30k" / "train.en", ["x"])
    assert require_shared_data("multi30k/train.en") == tmp_path / "absent"
    with pytest.raises(pytest.fail.Exception, match=r"absent/multi30k/train.de \("):
        require_shared_data("multi30k/train.en", "multi30k/train.de")


def test_shared_corpora_read_with_their_roles(shared_data, multi30k):
    require_shared_data("newstest/newstest2014.en", "newstest/newstest2014.de", "tatoeba/deu-eng.tsv")
    assert [multi30k.num_pairs(split) for split in ("train", "validation", "test")] == [29_000, 1_014, 1_000]
    assert multi30k.skipped_empty == {"train": 0, "validation": 0, "test": 0}
    newstest = get_corpus("newstest", data_root=shared_data)
    assert newstest.num_pairs("test") == 3_003  # newstest2014, the full set
    tatoeba = get_corpus("tatoeba", data_root=shared_data)
    assert (tatoeba.num_pairs("validation"), tatoeba.num_pairs("test")) == (2_000, 2_000)
    assert next(iter(get_corpus("tatoeba", data_root=shared_data, reverse=True).pairs("train")))[1]


def test_pairs_from_any_pair_are_the_splits_tail(tmp_path, monkeypatch):
    """Corpus.pairs_from skips raw lines where pair i is line i, and in a file with empty lines
    reads from the block of lines that holds the pair (the check's blocks, here of 2 lines, so that
    pairs fall in later blocks, and a block holds skipped lines alone): either way the same pairs as
    dataset(split).skip(start), from every start, across the files' seams (reversed: from a few)."""
    from keras_transformer.data import text_files

    monkeypatch.setenv(text_files.CHECK_CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(text_files, "LINES_PER_BATCH", 2)
    clean_en = write_text(tmp_path / "a.en", [f"a{i}" for i in range(5)])
    clean_de = write_text(tmp_path / "a.de", [f"A{i}" for i in range(5)])
    holes = write_text(tmp_path / "b.tsv", ["b0\tB0", "", "b1\tB1", "b2\t", "", "b3\tB3", "b4\tB4"])
    holes_en = write_text(tmp_path / "d.en", ["d0", "", "", "d1", "d2", ""])
    holes_de = write_text(tmp_path / "d.de", ["D0", "x", "", "D1", "D2", "y"])
    tsv = write_text(tmp_path / "c.tsv", [f"c{i}\tC{i}" for i in range(4)])
    read_from = []
    entry_pairs = LocalParallelCorpus._entry_pairs
    monkeypatch.setattr(LocalParallelCorpus, "_entry_pairs", lambda self, entry, skip_lines=0: (
        read_from.append(skip_lines), entry_pairs(self, entry, skip_lines))[1])
    for reverse in (False, True):
        corpus = LocalParallelCorpus({"train": [(clean_en, clean_de), holes, (holes_en, holes_de), tsv]},
                                     reverse=reverse)
        whole = list(corpus.pairs("train"))
        assert len(whole) == 5 + 4 + 3 + 4 and corpus.skipped_empty["train"] == 3 + 3
        pairs_from = corpus.pairs_from("train")
        for start in ([0, 7, 10, len(whole)] if reverse else range(len(whole) + 2)):
            read_from.clear()
            got = [(s.numpy().decode(), t.numpy().decode()) for s, t in pairs_from(tf.constant(start, tf.int64))]
            assert got == whole[start:], (reverse, start)
            if start in (5 + 2, 5 + 3):  # b3 and b4, b.tsv's lines 6 and 7 (1-based): read from
                assert int(read_from[1]) == {7: 4, 8: 6}[start]  # its blocks of lines 5-6 and 7


def test_prepare_checks_every_split_and_indexes_the_train_files_once(tmp_path, monkeypatch):
    """What a cluster's workers wait for at the corpus barrier: after prepare, training reads the
    files without checking or indexing them again."""
    from keras_transformer.data import corpora, text_files

    train = (write_text(tmp_path / "t.en", [f"a{i}" for i in range(6)]),
             write_text(tmp_path / "t.de", [f"A{i}" for i in range(6)]))
    holes = write_text(tmp_path / "h.tsv", ["b0\tB0", "", "b1\tB1"])
    dev = write_text(tmp_path / "dev.tsv", ["c\tC"])
    corpus = LocalParallelCorpus({"train": [train, holes], "validation": dev})
    indexed = []
    index_file = text_files._index_file
    monkeypatch.setattr(text_files, "_index_file", lambda path: indexed.append(path.name) or index_file(path))
    corpus.prepare()
    assert sorted(indexed) == ["h.tsv", "t.de", "t.en"]
    assert corpus.skipped_empty == {"train": 1, "validation": 0}

    def again(*args):
        raise AssertionError("read again after prepare")

    for name in ("check_aligned_files", "check_tsv"):
        monkeypatch.setattr(corpora, name, again)
    monkeypatch.setattr(text_files, "_index_file", again)
    got = [(s.numpy().decode(), t.numpy().decode()) for s, t in corpus.pairs_from("train")(tf.constant(4, tf.int64))]
    assert got == [("a4", "A4"), ("a5", "A5"), ("b0", "B0"), ("b1", "B1")]
    assert corpus.num_pairs("validation") == 1
