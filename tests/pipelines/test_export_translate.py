"""python -m pipelines.export and python -m pipelines.translate on the tiny trained run directory."""
import dataclasses
import io
import json
import os
import pathlib
import re
import subprocess
import sys

import keras
import pytest
import tensorflow as tf

from pipelines import export as export_pipeline
from pipelines import translate as translate_pipeline
from tests.trained_tiny import SENTENCES, tiny_saved_model, tiny_workdir  # noqa: F401

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
LINES = [SENTENCES[0], "", SENTENCES[1], "  ", SENTENCES[2], SENTENCES[3]]


@pytest.fixture(autouse=True)
def _seeded():
    """Replaces tests/conftest.py's: its tf.random.set_seed clears TensorFlow's eager caches, which
    costs every SavedModel function a new instantiation; nothing here draws random numbers."""
    keras.config.set_dtype_policy("float32")
    yield


def run_module(module, *args, stdin=None):
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    process = subprocess.run([sys.executable, "-m", module, *map(str, args)], input=stdin, capture_output=True,
                             env=env, cwd=REPOSITORY, timeout=600)
    assert process.returncode == 0, process.stderr.decode()[-3000:]
    return process.stdout.decode()


@pytest.mark.slow
def test_export_then_translate(tiny_workdir, tmp_path, monkeypatch, capsys):
    export_dir = tmp_path / "exported" / "numbers"
    printed = run_module("pipelines.export", "--workdir", tiny_workdir, "--export-dir", export_dir,
                         "--max-beam-size", "2", "--max-source-length", "64", "--parallel-groups", "2",
                         "--transposed-kernels", "off")
    assert printed.strip() == str(export_dir / "1")
    assert (export_dir / "1" / "assets.extra" / "tf_serving_warmup_requests").is_file()
    # Decoded in 2 sentence groups side by side, on the stored kernels; the translations below are
    # the run's, in 1 group, with the kernels as this CPU chooses.
    decode_config = json.loads((export_dir / "1" / "assets" / "decode_config.json").read_text())
    assert (decode_config["parallel_groups"], decode_config["transposed_kernels"]) == (2, False)
    source = tmp_path / "input.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    crlf = tmp_path / "input-crlf.txt"  # "\r\n" ends, and a "\r" inside a line: still one line each
    crlf.write_bytes("".join(line + "\r\n" for line in LINES).replace(SENTENCES[2], "\r" + SENTENCES[2], 1).encode())

    # The run directory, decoded in a subprocess with the settings of its decode config: stdin -> stdout.
    from_workdir = run_module("pipelines.translate", "--model", tiny_workdir, stdin=source.read_bytes())
    from_workdir = from_workdir.splitlines()
    assert len(from_workdir) == len(LINES)
    assert from_workdir[0] == "einundzwanzig" and from_workdir[1] == from_workdir[3] == ""

    # The export directory (its latest version, serving_default), file -> file, batches of 2; in
    # this process, to spare a third TensorFlow start-up.
    output = tmp_path / "output.txt"
    translate_pipeline.main(["--model", str(export_dir), "--input", str(source), "--output", str(output),
                             "--batch-size", "2"])
    assert output.read_text().splitlines() == from_workdir
    translate_pipeline.main(["--model", str(export_dir), "--input", str(crlf), "--output", str(output),
                             "--batch-size", "2"])
    assert output.read_text().splitlines() == from_workdir

    # translate_nbest at beam 1 (greedy): stdin -> stdout.
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    capsys.readouterr()
    translate_pipeline.main(["--model", str(export_dir / "1"), "--beam-size", "1"])
    assert capsys.readouterr().out.splitlines()[:2] == ["einundzwanzig", ""]


def test_translate_keeps_the_order_of_lines_batched_by_length():
    lines = [b"ccc", b"a", b"", b"bb", b"dddd", b"e"]
    batches = []

    def translate_batch(batch):
        batches.append(batch)
        return tf.constant([line.upper() for line in batch])

    translations = translate_pipeline.translate_lines(translate_batch, lines, batch_size=4)
    assert translations == [line.upper() for line in lines]
    assert batches == [[b"", b"a", b"e", b"bb"], [b"ccc", b"dddd"]]


def test_saved_model_lookup_and_beam_size_limit(tiny_saved_model):
    assert translate_pipeline.find_saved_model(tiny_saved_model.parent) == tiny_saved_model
    assert translate_pipeline.find_saved_model(tiny_saved_model) == tiny_saved_model
    with pytest.raises(ValueError, match="exceeds the largest beam size"):
        translate_pipeline.saved_model_translator(tiny_saved_model, 99, None)


def test_alpha_alone_is_refused_where_translate_nbest_would_narrow_the_beam(tmp_path):
    """--alpha decodes with translate_nbest, which clamps the beam to the export's max_beam_size: an
    export whose own beam is wider would decode narrower than asked without a word (checked before
    the SavedModel loads)."""
    assets = tmp_path / "1" / "assets"
    assets.mkdir(parents=True)
    (assets / "decode_config.json").write_text(json.dumps({"beam_size": 4, "alpha": 0.6}))
    (assets / "translator.json").write_text(json.dumps({"max_beam_size": 2}))
    with pytest.raises(ValueError, match=r"largest beam size \(2\) is below the beam size of .* \(4\): give "
                                         r"--beam-size too"):
        translate_pipeline.saved_model_translator(tmp_path / "1", None, 1.0)


def test_mbr_chooses_among_the_nbest_lists_of_the_saved_model_and_of_the_run(tiny_saved_model, tiny_workdir,
                                                                             tmp_path):
    """--mbr N: the MBR choice (decoding.mbr) among translate_nbest's N best at the model's alpha, the
    same from the SavedModel, from the run directory and from training.evaluation.MBRTranslator."""
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.decoding import mbr
    from keras_transformer.export import load_model_from_workdir
    from keras_transformer.training.evaluation import MBRTranslator

    source, output = tmp_path / "input.txt", tmp_path / "output.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    translate_pipeline.main(["--model", str(tiny_saved_model), "--input", str(source), "--output", str(output),
                             "--mbr", "4", "--mbr-utility", "chrf"])
    nbest = tf.saved_model.load(str(tiny_saved_model)).signatures["translate_nbest"](
        inputs=tf.constant(LINES), beam_size=tf.constant(4), alpha=tf.constant(0.6))
    assert nbest["translations"].shape == (len(LINES), 4)
    texts = [[text.decode() for text in row] for row in nbest["translations"].numpy()]
    expected = mbr.choose(texts, nbest["scores"].numpy().tolist(), "chrf")
    assert output.read_text().splitlines() == expected and expected[1] == expected[3] == ""
    assert translate_pipeline.translate_lines(
        translate_pipeline.workdir_translator(tiny_workdir, None, 4, None, "chrf"),
        [line.encode() for line in LINES], batch_size=3) == [text.encode() for text in expected]
    model, proto, decode_config = load_model_from_workdir(tiny_workdir)
    translator = MBRTranslator(model, SubwordTokenizer(proto), decode_config, utility="chrf", sentences_per_batch=2)
    assert translator.translate(LINES) == expected
    # A list longer than the translator's default largest beam (8): its translate_nbest serves it.
    wide = MBRTranslator(model, SubwordTokenizer(proto), dataclasses.replace(decode_config, beam_size=10))
    assert wide.translator.max_beam_size == 10
    assert [text.encode() for text in wide.translate(LINES)] == translate_pipeline.translate_lines(
        translate_pipeline.workdir_translator(tiny_workdir, None, 10, None, "bleu"),
        [line.encode() for line in LINES], batch_size=3)


def test_bad_paths_are_named(tiny_saved_model, tiny_workdir, tmp_path, capsys):
    missing, lines = tmp_path / "missing", tmp_path / "lines.txt"
    lines.write_text(SENTENCES[0] + "\n")
    cases = [
        (export_pipeline.main, ["--workdir", str(missing)], str(missing)),
        (export_pipeline.main, ["--workdir", str(tiny_workdir), "--checkpoint", str(missing / "ckpt-1")],
         str(missing / "ckpt-1")),
        (export_pipeline.main, ["--workdir", str(tiny_workdir), "--export-dir", str(tiny_saved_model.parent),
                                "--version", "1"], str(tiny_saved_model)),
        (translate_pipeline.main, ["--model", str(missing)], str(missing)),
        (translate_pipeline.main, ["--model", str(tmp_path)], f"{tmp_path} is neither a SavedModel"),
        (translate_pipeline.main, ["--model", str(tiny_saved_model), "--input", str(missing)], str(missing)),
        (translate_pipeline.main, ["--model", str(tiny_saved_model), "--output", str(missing / "out.txt")],
         str(missing)),
        (translate_pipeline.main, ["--model", str(tiny_saved_model), "--mbr", "1"],
         "--mbr N chooses among N >= 2 candidates, got 1"),
        (translate_pipeline.main, ["--model", str(tiny_saved_model), "--mbr", "4", "--beam-size", "2"],
         "--mbr 4 decodes with a beam of 4; --beam-size 2 says otherwise"),
        (translate_pipeline.main, ["--model", str(tiny_saved_model), "--mbr", "99", "--input", str(lines)],
         f"--mbr 99 exceeds the largest beam size of {tiny_saved_model}: 8"),
        *[(translate_pipeline.main, ["--model", str(tiny_saved_model), "--alpha", alpha],
           f"--alpha must be a number in [0, 10] (0 ranks by log-probability; the paper's is 0.6), got {alpha}")
          for alpha in ("-1.0", "nan", "10.5")],
    ]
    for main, argv, named in cases:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert named in capsys.readouterr().err


def test_an_unknown_precision_is_refused_listing_the_valid_ones(tiny_workdir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        export_pipeline.main(["--workdir", str(tiny_workdir), "--export-dir", str(tmp_path), "--precision", "int8"])
    assert exit_info.value.code == 2
    assert re.search(r"invalid choice: 'int8' \(choose from '?float32'?, '?bfloat16'?, '?float16'?\)",
                     capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_ensemble_of_the_last_checkpoints_exports_and_translates_as_in_python(tiny_workdir, tmp_path, capsys):
    import shutil

    import numpy as np

    from keras_transformer.ensemble import TransformerEnsemble
    from keras_transformer.export import Translator, load_model_from_workdir

    workdir = tmp_path / "run"
    shutil.copytree(tiny_workdir, workdir)
    model, sentencepiece_proto, decode_config = load_model_from_workdir(workdir)
    first = [weight.numpy() for weight in model.weights]
    shutil.rmtree(workdir / "checkpoints")  # written anew: the trained weights, then a later checkpoint that differs
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), workdir / "checkpoints", max_to_keep=2)
    manager.save()
    for weight in model.weights:
        weight.assign(weight * 0.9)
    manager.save()
    for argv, error in ((["--ensemble", "3"], f"--ensemble 3: the run in {workdir} keeps only 2 checkpoints"),
                        (["--ensemble", "1"], "--ensemble 1: an ensemble needs at least 2 checkpoints")):
        with pytest.raises(SystemExit) as exit_info:
            export_pipeline.main(["--workdir", str(workdir), "--export-dir", str(tmp_path / "refused"), *argv])
        assert exit_info.value.code == 2 and error in capsys.readouterr().err
    export_pipeline.main(["--workdir", str(workdir), "--export-dir", str(tmp_path / "exported"), "--ensemble", "2",
                          "--max-beam-size", "2"])
    version = pathlib.Path(capsys.readouterr().out.strip())
    assert version == tmp_path / "exported" / "1"
    served = tf.saved_model.load(str(version)).signatures["serving_default"](inputs=tf.constant(SENTENCES))

    earlier = type(model)(model.config)
    earlier.build()
    for weight, value in zip(earlier.weights, first):
        weight.assign(value)
    ensemble = Translator(TransformerEnsemble([earlier, model]), sentencepiece_proto, decode_config, max_beam_size=2)
    expected = ensemble.translate(tf.constant(SENTENCES))  # (a tf.function method keeps a weak reference to its object)
    np.testing.assert_array_equal(served["translations"].numpy(), expected["translations"].numpy())
    np.testing.assert_allclose(served["scores"].numpy(), expected["scores"].numpy(), rtol=1e-5, atol=1e-5)
    last = Translator(model, sentencepiece_proto, decode_config, max_beam_size=2)
    alone = last.translate(tf.constant(SENTENCES))
    assert not np.allclose(served["scores"].numpy(), alone["scores"].numpy())  # not the last checkpoint alone


@pytest.mark.slow
def test_an_ensemble_of_other_runs_exports_and_translates_as_in_python(tiny_workdir, tmp_path, capsys):
    """--ensemble-of: models of several runs with one vocabulary (a checkpoint prefix, a checkpoint
    directory, a weights file, a run directory), each found in its own run; another vocabulary is refused."""
    import shutil

    import numpy as np

    from keras_transformer.ensemble import TransformerEnsemble
    from keras_transformer.export import Translator, load_model_from_workdir

    runs = [tmp_path / "member-0", tmp_path / "member-1"]
    for run in runs:
        shutil.copytree(tiny_workdir, run)
    model, sentencepiece_proto, decode_config = load_model_from_workdir(runs[1])
    for weight in model.weights:
        weight.assign(weight * 0.9)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), runs[1] / "checkpoints", max_to_keep=5)
    prefix = pathlib.Path(manager.save(checkpoint_number=99))
    model.save_weights(str(runs[1] / "scaled.weights.h5"))
    first, _, _ = load_model_from_workdir(runs[0])
    # (each Translator kept in a name: a tf.function method keeps a weak reference to its object)
    ensemble = Translator(TransformerEnsemble([first, model]), sentencepiece_proto, decode_config, max_beam_size=2)
    expected = ensemble.translate(tf.constant(SENTENCES))
    single = Translator(first, sentencepiece_proto, decode_config, max_beam_size=2)
    alone = single.translate(tf.constant(SENTENCES))
    export_pipeline.main(["--workdir", str(runs[0]), "--export-dir", str(tmp_path / "exported"),
                          "--ensemble-of", str(runs[0] / "checkpoints"), str(prefix), "--max-beam-size", "2"])
    version = pathlib.Path(capsys.readouterr().out.strip())
    assert version == tmp_path / "exported" / "1"
    served = tf.saved_model.load(str(version)).signatures["serving_default"](inputs=tf.constant(SENTENCES))
    np.testing.assert_array_equal(served["translations"].numpy(), expected["translations"].numpy())
    np.testing.assert_allclose(served["scores"].numpy(), expected["scores"].numpy(), rtol=1e-5, atol=1e-5)
    assert not np.allclose(served["scores"].numpy(), alone["scores"].numpy())  # both members count
    # The other ways to name the second member load the same weights as its checkpoint prefix (the
    # export above shows what a loaded ensemble serves; three exports cost 20 CPU seconds more).
    for second in (prefix, runs[1] / "checkpoints", runs[1] / "scaled.weights.h5"):
        ensemble_model, _, _ = export_pipeline.ensemble_of_paths(runs[0], [runs[0] / "checkpoints", second])
        for member, reference in zip(ensemble_model.members, (first, model)):
            assert len(member.weights) == len(reference.weights)
            for got, want in zip(member.weights, reference.weights):
                np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{second}: {got.path}")

    (runs[1] / "sentencepiece.model").write_bytes(sentencepiece_proto + b"\n")
    refusals = ((["--ensemble-of", str(runs[0]), str(prefix)],
                 f"--ensemble-of {prefix}: its run {runs[1]} has another SentencePiece model than "
                 f"{runs[0] / 'sentencepiece.model'}"),
                (["--ensemble-of", str(runs[0])], f"--ensemble-of {runs[0]}: an ensemble needs at least 2 models"),
                (["--ensemble-of", str(runs[0]), str(tmp_path / "elsewhere.weights.h5")],
                 f"--ensemble-of {tmp_path / 'elsewhere.weights.h5'}: no run directory"))
    for argv, error in refusals:
        with pytest.raises(SystemExit) as exit_info:
            export_pipeline.main(["--workdir", str(runs[0]), "--export-dir", str(tmp_path / "refused"), *argv])
        assert exit_info.value.code == 2 and error in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
