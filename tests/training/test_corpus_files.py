"""A resumed run warns when its local corpus files are not those it started on: their number,
sizes or sampled content."""
import json
import logging

from keras_transformer.data.corpora import LocalParallelCorpus
from keras_transformer.data.text_files import DIGEST_BLOCK_BYTES, DIGEST_BLOCKS, sampled_digest
from keras_transformer.data.numbers_corpus import NumbersCorpus
from keras_transformer.training.run import CORPUS_FILES_FILENAME, _check_corpus_files
from tests.data.conftest import write_text


def test_a_resumed_run_names_the_corpus_files_that_changed(tmp_path, caplog):
    source = write_text(tmp_path / "train.en", ["a", "b"])
    target = write_text(tmp_path / "train.de", ["A", "B"])
    dev = write_text(tmp_path / "dev.tsv", ["c\tC"])
    files = {"train": (source, target), "validation": dev}
    workdir = tmp_path / "run"
    workdir.mkdir()
    caplog.set_level(logging.WARNING)
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=True)  # the start records them
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=True)  # resumed, unchanged
    assert (workdir / CORPUS_FILES_FILENAME).is_file() and not caplog.records
    write_text(target, ["A", "B", "C"])
    write_text(source, ["a", "b", "c"])
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=False)  # another worker: warns, writes nothing
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=True)
    assert len(caplog.records) == 2
    message = caplog.records[0].getMessage()
    assert f"train: {target} was 4 bytes, now 6" in message
    assert f"train: {source} was 4 bytes, now 6" in message and "validation" not in message
    caplog.clear()
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=True)  # the chief recorded them as they are now
    assert not caplog.records
    _check_corpus_files(workdir, LocalParallelCorpus({"train": [(source, target), dev], "validation": dev}),
                        chief=True)
    assert "train: 2 file(s) when the run started, 3 now" in caplog.records[0].getMessage()


def test_a_corpus_not_read_from_local_files_records_nothing(tmp_path):
    _check_corpus_files(tmp_path, NumbersCorpus(), chief=True)
    assert not (tmp_path / CORPUS_FILES_FILENAME).exists()


def test_a_file_rewritten_with_its_size_in_another_order_is_named(tmp_path, caplog):
    source = write_text(tmp_path / "train.en", ["one", "two", "six"])
    target = write_text(tmp_path / "train.de", ["eins", "zwei", "acht"])
    files = {"train": (source, target)}
    workdir = tmp_path / "run"
    workdir.mkdir()
    caplog.set_level(logging.WARNING)
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=True)
    write_text(source, ["six", "one", "two"])  # shuffled: the same bytes, the same size
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=True)
    (record,) = caplog.records
    assert (f"train: {source} has the size it had (12 bytes) but other content (other lines, or the lines in "
            f"another order)") in record.getMessage() and str(target) not in record.getMessage()


def test_a_record_without_digests_compares_the_sizes(tmp_path, caplog):
    """corpus_files.json as runs wrote it before the digests: [path, size] per file."""
    source = write_text(tmp_path / "train.en", ["a", "b"])
    target = write_text(tmp_path / "train.de", ["A", "B"])
    files = {"train": (source, target)}
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / CORPUS_FILES_FILENAME).write_text(json.dumps({"train": [[str(source), 4], [str(target), 4]]}))
    write_text(source, ["b", "a"])
    caplog.set_level(logging.WARNING)
    _check_corpus_files(workdir, LocalParallelCorpus(files), chief=True)
    assert not caplog.records  # no digest to compare, and the sizes agree
    recorded = json.loads((workdir / CORPUS_FILES_FILENAME).read_text())["train"]
    assert [entry[:2] for entry in recorded] == [[str(source), 4], [str(target), 4]]
    assert [entry[2] for entry in recorded] == [sampled_digest(source), sampled_digest(target)]


def test_the_sampled_digest_reads_the_ends_and_the_blocks_between(tmp_path):
    path = tmp_path / "large.txt"
    size = DIGEST_BLOCKS * DIGEST_BLOCK_BYTES * 3  # 3 MiB: sampled
    content = bytearray(b"x" * size)
    path.write_bytes(content)
    original = sampled_digest(path)
    step = (size - DIGEST_BLOCK_BYTES) // (DIGEST_BLOCKS - 1)
    for offset in (0, size - 1, 5 * step + 17):  # the first byte, the last, one inside the sixth block
        changed = bytearray(content)
        changed[offset] = ord("y")
        path.write_bytes(changed)
        assert sampled_digest(path) != original, offset
    changed = bytearray(content)
    changed[DIGEST_BLOCK_BYTES + 10] = ord("y")  # between the first block and the second
    path.write_bytes(changed)
    assert sampled_digest(path) == original
    small = tmp_path / "small.txt"  # 1 MiB or less: every byte counts
    small.write_bytes(b"x" * 1000)
    before = sampled_digest(small)
    small.write_bytes(b"x" * 500 + b"y" + b"x" * 499)
    assert sampled_digest(small) != before
