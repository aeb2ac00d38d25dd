"""The run's export in another precision: pipelines.train_wmt --export-precision reaches the export,
which is made in that precision and recorded, so that a finished run asked for another precision
exports again. The SavedModel itself is tested in tests/test_export.py; here the export is faked."""
import dataclasses
import json
import re

import pytest

from keras_transformer import DecodeConfig, Transformer
from keras_transformer.export import Translator
from keras_transformer.model import transposed_here
from keras_transformer.training import run
from pipelines import train_wmt


@pytest.fixture
def fake_export(monkeypatch):
    """run.export_translator writing an empty version numbered after the last in export_dir, as the
    real one numbers them; returns the translators it got."""
    exported = []

    def export_translator(translator, export_dir):
        versions = [int(p.name) for p in export_dir.glob("*") if p.name.isdigit()]
        path = export_dir / str(max(versions, default=0) + 1)
        path.mkdir(parents=True)
        exported.append(translator)
        return path

    monkeypatch.setattr(run, "export_translator", export_translator)
    return exported


def test_the_run_exports_in_the_precision_asked_and_again_when_it_changes(tmp_path, fake_export):
    decode_config = DecodeConfig(beam_size=3, alpha=0.8)
    translator = Translator(Transformer.from_preset("tiny", vocab_size=64), b"unused", decode_config,
                            max_source_length=40, max_beam_size=3)
    export_dir = tmp_path / "exported"
    first = run.export_saved_model(translator, tmp_path, export_dir, step=10, precision="bfloat16")
    (bfloat16,) = fake_export
    assert {weight.dtype for weight in bfloat16.model.weights} == {"bfloat16"}
    decode_config = dataclasses.replace(decode_config, transposed_kernels=transposed_here())  # as chosen here
    assert (bfloat16.decode_config, bfloat16.max_source_length, bfloat16.max_beam_size) == (decode_config, 40, 3)
    assert json.loads((tmp_path / run.EXPORT_RECORD).read_text())["precision"] == "bfloat16"
    # The same step in the same precision: reused.
    assert run.export_saved_model(translator, tmp_path, export_dir, step=10, precision="bfloat16") == first
    assert len(fake_export) == 1
    # Another precision: a new version, from the translator as it is when it is float32 already.
    second = run.export_saved_model(translator, tmp_path, export_dir, step=10, precision="float32")
    assert second != first and fake_export[1] is translator
    record = json.loads((tmp_path / run.EXPORT_RECORD).read_text())
    assert record == {"step": 10, "path": str(second), "precision": "float32", "export_dir": str(export_dir),
                      "weights": run.weights_fingerprint(translator.model), "decode": decode_config.to_dict(),
                      "max_source_length": 40, "max_beam_size": 3}
    assert re.fullmatch(r"[0-9a-f]{64}", record["weights"])


def test_other_weights_settings_or_export_dir_export_again(tmp_path, fake_export):
    """A finished run run again with another average (other weights, the same step), other decoding
    settings or another --export-dir exports a new version; the same to the same folder reuses
    its version."""
    model = Transformer.from_preset("tiny", vocab_size=64)
    translator = Translator(model, b"unused")
    first = run.export_saved_model(translator, tmp_path, tmp_path / "exported", 10)
    assert run.export_saved_model(translator, tmp_path, tmp_path / "exported", 10) == first
    elsewhere = run.export_saved_model(translator, tmp_path, tmp_path / "elsewhere", 10)
    assert elsewhere == tmp_path / "elsewhere" / "1" and len(fake_export) == 2
    weight = model.weights[0]
    weight.assign(weight + 1.0)
    again = run.export_saved_model(translator, tmp_path, tmp_path / "elsewhere", 10)
    assert again == tmp_path / "elsewhere" / "2" and len(fake_export) == 3
    wider = Translator(model, b"unused", DecodeConfig(beam_size=6), max_beam_size=8)
    assert run.export_saved_model(wider, tmp_path, tmp_path / "elsewhere", 10) == tmp_path / "elsewhere" / "3"
    assert run.export_saved_model(wider, tmp_path, tmp_path / "elsewhere", 10) == tmp_path / "elsewhere" / "3"


def test_a_record_that_cannot_tell_the_weights_exports_again(tmp_path, fake_export):
    """exported.json written before it named the weights and the folder (nor, earlier, the precision):
    whether they are the weights of this run's average cannot be told, so a new version is made."""
    (tmp_path / "exported" / "1").mkdir(parents=True)
    (tmp_path / run.EXPORT_RECORD).write_text(json.dumps({"step": 10, "path": str(tmp_path / "exported" / "1")}))
    translator = Translator(Transformer.from_preset("tiny", vocab_size=64), b"unused")
    assert run.export_saved_model(translator, tmp_path, tmp_path / "exported", 10) == tmp_path / "exported" / "2"
    assert len(fake_export) == 1


def test_train_wmt_passes_the_export_precision_through(monkeypatch, tmp_path, capsys):
    received = {}

    def train_and_evaluate(workdir, configs, **kwargs):
        received.update(kwargs)
        return run.RunResult(workdir=workdir, step=0)  # as a non-chief worker: no scores, no export

    monkeypatch.setattr(run, "train_and_evaluate", train_and_evaluate)
    argv = ["--preset", "tiny", "--dataset", "numbers", "--workdir", str(tmp_path / "run")]
    assert train_wmt.main(argv + ["--export-precision", "bfloat16"]) == 0
    assert received["export_precision"] == "bfloat16"
    assert train_wmt.main(argv) == 0
    assert received["export_precision"] == "float32"  # the default
    with pytest.raises(SystemExit) as exit_info:
        train_wmt.parse_args(argv + ["--export-precision", "int8"])
    assert exit_info.value.code == 2
    assert re.search(r"invalid choice: 'int8' \(choose from '?float32'?, '?bfloat16'?, '?float16'?\)",
                     capsys.readouterr().err)
