"""The numbers corpus written to local files, for runs that read a corpus spec (`--dataset`)."""
import pathlib

from keras_transformer.data import NumbersCorpus


def write_numbers_spec(directory: pathlib.Path, num_train=2000, num_validation=10, num_test=10,
                       max_number=999_999, reverse=False) -> str:
    """Writes the numbers corpus's splits as English TAB German files (German TAB English with
    `reverse`) into directory; returns their spec, `train=...;validation=...;test=...`."""
    corpus = NumbersCorpus(num_train=num_train, num_validation=num_validation, num_test=num_test,
                           max_number=max_number, seed=0, reverse=reverse)
    files = {}
    for split in ("train", "validation", "test"):
        files[split] = pathlib.Path(directory) / f"{split}.tsv"
        files[split].write_text("".join(f"{source}\t{target}\n" for source, target in corpus.pairs(split)),
                                encoding="utf-8")
    return ";".join(f"{split}={path}" for split, path in files.items())
