"""`get_corpus`: a corpus from a name or a local spec, and where the shared corpora live.

Names:
  wmt14     WMT14 en-de through TFDS (the paper's data; needs a prepared TFDS data dir or network).
  numbers   the generated English -> German number words corpus (offline).
  multi30k  Multi30k task 1 from the shared data: train / val / test_2016_flickr.
  newstest  WMT newstest en-de from the shared data: validation newstest2013 (the paper's dev set),
            test newstest2014 (the paper's test set), train all the other years.
  tatoeba   Tatoeba deu-eng.tsv (English TAB German) from the shared data; validation and test are
            2,000 pairs each held out by a seeded permutation. Only its first two columns are read,
            so newer exports with an attribution column read the same.

A local spec names files per split, `;` between splits, `,` between the two aligned files of a split,
`+` between several entries of one split; a split given one path reads it as a TSV:

  train=data/train.en,data/train.de;validation=data/dev.tsv;test=data/test.en,data/test.de

Optional keys in the same spec: `columns=I,J` (the TSV columns to read; otherwise a TSV line must
have exactly one tab), `holdout=V,T` (carve V validation and T test pairs out of train),
`languages=SRC,TGT` (the codes of the sides as written; default en,de).
"""
import hashlib
import os
import pathlib
from typing import Optional

from keras_transformer.data.corpora import Corpus, LocalParallelCorpus, SPLITS
from keras_transformer.data.numbers_corpus import NumbersCorpus
from keras_transformer.data.tfds_corpus import wmt14_corpus

REPOSITORY_ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED_DATA_ENV = "KT_SHARED_DATA"

NEWSTEST_TRAIN_SETS = ("news-test2008", "newssyscomb2009", "newstest2009", "newstest2010",
                       "newstest2011", "newstest2012", "newstest2015", "newstest2016",
                       "newstest2017", "newstest2018", "newstest2019", "newstest2020")


def shared_data_root() -> pathlib.Path:
    """$KT_SHARED_DATA, or ../shared/data relative to the repository root."""
    configured = os.environ.get(SHARED_DATA_ENV)
    if configured:
        return pathlib.Path(configured).expanduser().resolve()
    return (REPOSITORY_ROOT.parent / "shared" / "data").resolve()


def require_shared_data(*relative_paths: str) -> pathlib.Path:
    """For tests: the shared data root, after checking that the given files are there.

    Skips the calling test with the reason when they are absent, but fails it when CI=true, so that
    a wrong path can never turn into a silent skip in CI.
    """
    import pytest  # only tests call this

    root = shared_data_root()
    if not root.is_dir():
        missing = [str(root)]
    else:
        missing = [str(root / path) for path in relative_paths if not (root / path).exists()]
    if missing:
        reason = (f"shared corpora not found: {', '.join(missing)} "
                  f"(set {SHARED_DATA_ENV} to the folder holding multi30k/, newstest/, tatoeba/)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}")
        pytest.skip(reason)
    return root


def verify_sha256sums(folder: pathlib.Path, names: Optional[list[str]] = None) -> None:
    """Checks files of a shared-data folder against its SHA256SUMS; raises ValueError on mismatch."""
    expected = {}
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        expected[name.lstrip("*")] = digest
    for name in names or sorted(expected):
        actual = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        if actual != expected[name]:
            raise ValueError(f"{folder / name}: SHA256 {actual} does not match SHA256SUMS ({expected[name]})")


def _aligned(folder: pathlib.Path, stem: str, source: str, target: str):
    return (folder / f"{stem}.{source}", folder / f"{stem}.{target}")


def _shared_corpus(name: str, root: pathlib.Path, reverse: bool, seed: int) -> LocalParallelCorpus:
    if name == "multi30k":
        folder = root / "multi30k"
        files = {"train": _aligned(folder, "train", "en", "de"),
                 "validation": _aligned(folder, "val", "en", "de"),
                 "test": _aligned(folder, "test_2016_flickr", "en", "de")}
        return LocalParallelCorpus(files, name=name, reverse=reverse)
    if name == "newstest":
        folder = root / "newstest"
        files = {"train": [_aligned(folder, stem, "en", "de") for stem in NEWSTEST_TRAIN_SETS],
                 "validation": _aligned(folder, "newstest2013", "en", "de"),
                 "test": _aligned(folder, "newstest2014", "en", "de")}
        return LocalParallelCorpus(files, name=name, reverse=reverse)
    return LocalParallelCorpus({"train": root / "tatoeba" / "deu-eng.tsv"}, name=name,
                               tsv_columns=(0, 1), holdout=(2_000, 2_000), reverse=reverse,
                               seed=seed)


def _pair_of(value: str, key: str, convert=str) -> tuple:
    parts = value.split(",")
    if len(parts) != 2:
        raise ValueError(f"local corpus spec: {key}= takes two comma-separated values, got {value!r}")
    return tuple(convert(part.strip()) for part in parts)


def parse_local_spec(spec: str, *, reverse: bool = False, seed: int = 0) -> LocalParallelCorpus:
    """A LocalParallelCorpus from a spec such as `train=a.en,a.de;validation=b.tsv;test=c.tsv`."""
    files, options = {}, {}
    for item in filter(None, (part.strip() for part in spec.split(";"))):
        key, separator, value = item.partition("=")
        key = key.strip()
        if not separator or not value.strip():
            raise ValueError(f"local corpus spec: expected KEY=VALUE, got {item!r} in {spec!r}")
        if key in SPLITS:
            entries = []
            for entry in value.split("+"):
                paths = [pathlib.Path(path.strip()).expanduser() for path in entry.split(",")]
                if len(paths) > 2:
                    raise ValueError(f"local corpus spec: {key}= takes one TSV path or two aligned "
                                     f"paths, got {entry!r}")
                entries.append(tuple(paths) if len(paths) == 2 else paths[0])
            files[key] = entries if len(entries) > 1 else entries[0]
        elif key == "columns":
            options["tsv_columns"] = _pair_of(value, key, int)
        elif key == "holdout":
            options["holdout"] = _pair_of(value, key, int)
        elif key == "languages":
            options["source_language"], options["target_language"] = _pair_of(value, key)
        else:
            raise ValueError(f"local corpus spec: unknown key {key!r} in {spec!r}; known: "
                             f"{', '.join(SPLITS)}, columns, holdout, languages")
    return LocalParallelCorpus(files, name="local", reverse=reverse, seed=seed, **options)


def get_corpus(name_or_spec: str, *, reverse: bool = False, seed: int = 0,
               data_root: Optional[pathlib.Path] = None, tfds_data_dir: Optional[str] = None,
               **numbers_options) -> Corpus:
    """The corpus `--dataset` names: wmt14, numbers, multi30k, newstest, tatoeba or a local spec.

    Args:
      name_or_spec: a name (see the module docstring) or a local spec with `train=...`.
      reverse: translate the other way (de->en for the en->de corpora).
      seed: the seed of generated (`numbers`) and held-out (`tatoeba`) splits.
      data_root: the shared corpora folder; default `shared_data_root()`.
      tfds_data_dir: the TFDS data directory for wmt14.
      numbers_options: NumbersCorpus sizes (num_train, num_validation, num_test, max_number).
    """
    if numbers_options and name_or_spec != "numbers":
        raise ValueError(f"options {sorted(numbers_options)} only apply to the numbers corpus")
    if name_or_spec == "wmt14":
        return wmt14_corpus(data_dir=tfds_data_dir, reverse=reverse)
    if name_or_spec == "numbers":
        return NumbersCorpus(seed=seed, reverse=reverse, **numbers_options)
    if name_or_spec in ("multi30k", "newstest", "tatoeba"):
        root = pathlib.Path(data_root) if data_root is not None else shared_data_root()
        if not root.is_dir():
            raise FileNotFoundError(f"shared corpora folder not found: {root} (set {SHARED_DATA_ENV})")
        return _shared_corpus(name_or_spec, root, reverse, seed)
    if "=" in name_or_spec:
        return parse_local_spec(name_or_spec, reverse=reverse, seed=seed)
    raise ValueError(f"unknown dataset {name_or_spec!r}: expected wmt14, numbers, multi30k, newstest, "
                     f"tatoeba, or a local spec such as 'train=a.en,a.de;validation=b.tsv'")
