"""A resumed run warns when its local corpus files are not those it started on."""
import logging

from keras_transformer.data.corpora import LocalParallelCorpus
from keras_transformer.data.numbers_corpus import NumbersCorpus
from keras_transformer.training.run import CORPUS_SIZES_FILENAME, _check_corpus_sizes
from tests.data.conftest import write_text


def test_a_resumed_run_names_the_corpus_files_that_changed(tmp_path, caplog):
    source = write_text(tmp_path / "train.en", ["a", "b"])
    target = write_text(tmp_path / "train.de", ["A", "B"])
    dev = write_text(tmp_path / "dev.tsv", ["c\tC"])
    files = {"train": (source, target), "validation": dev}
    workdir = tmp_path / "run"
    workdir.mkdir()
    caplog.set_level(logging.WARNING)
    _check_corpus_sizes(workdir, LocalParallelCorpus(files), chief=True)  # the start records them
    _check_corpus_sizes(workdir, LocalParallelCorpus(files), chief=True)  # resumed, unchanged
    assert (workdir / CORPUS_SIZES_FILENAME).is_file() and not caplog.records
    write_text(target, ["A", "B", "C"])
    write_text(source, ["a", "b", "c"])
    _check_corpus_sizes(workdir, LocalParallelCorpus(files), chief=False)  # another worker: warns, writes nothing
    _check_corpus_sizes(workdir, LocalParallelCorpus(files), chief=True)
    assert len(caplog.records) == 2
    message = caplog.records[0].getMessage()
    assert f"train: {target} was 4 bytes, now 6" in message
    assert f"train: {source} was 4 bytes, now 6" in message and "validation" not in message
    caplog.clear()
    _check_corpus_sizes(workdir, LocalParallelCorpus(files), chief=True)  # the chief recorded them as they are now
    assert not caplog.records
    _check_corpus_sizes(workdir, LocalParallelCorpus({"train": [(source, target), dev], "validation": dev}),
                        chief=True)
    assert "train: 2 file(s) when the run started, 3 now" in caplog.records[0].getMessage()


def test_a_corpus_not_read_from_local_files_records_nothing(tmp_path):
    _check_corpus_sizes(tmp_path, NumbersCorpus(), chief=True)
    assert not (tmp_path / CORPUS_SIZES_FILENAME).exists()
