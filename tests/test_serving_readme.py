"""The README's serving requests, run as written against an in-process stand-in for TF Serving.

No Docker engine runs on our machines, so the stand-in serves the SavedModel of the README's first
command (tests/readme_run.py) the way TF Serving's Predict API does (tensorflow_serving/g3doc/
api_rest.md): a gRPC PredictionService that
takes and returns TensorProtos, and an HTTP `/v1/models/<name>:predict` endpoint with the row
("instances" -> "predictions") and columnar ("inputs" -> "outputs") JSON formats. The README's curl
commands run with curl, and its gRPC snippet runs with tensorflow-serving-api; only the host and
port are changed to the stand-in's.
"""
import concurrent.futures
import contextlib
import http.server
import io
import json
import pathlib
import re
import subprocess
import threading

import grpc
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from tests.readme_run import readme_run  # noqa: F401

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
# English number words, as the model translates German ones (its quality: tests/training/test_pipeline.py).
ENGLISH_NUMBER = re.compile(r"[a-z]+(?:(?:-| |, | and )[a-z]+)*")
MODEL_NAME = "numbers-reverse-tiny"  # what the README's first command exports and then serves


@pytest.fixture(autouse=True)
def _seeded():
    """No random numbers here; keeps TensorFlow's eager caches (see tests/test_export.py)."""
    keras.config.set_dtype_policy("float32")
    yield


def readme_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def curl_commands():
    commands = []
    for block in readme_blocks("bash"):
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip().startswith("curl "):
                commands.append(command.strip())
    return commands


def _inputs(signature, named_values):
    """{name: JSON value} -> {name: tensor} in the signature's dtypes."""
    specs = signature.structured_input_signature[1]
    unknown = set(named_values) - set(specs)
    if unknown:
        raise ValueError(f"unknown inputs {sorted(unknown)}; the signature takes {sorted(specs)}")
    return {name: tf.constant(value, dtype=specs[name].dtype) for name, value in named_values.items()}


def _json_value(tensor):
    array = tensor.numpy()
    if array.dtype == object:
        return np.vectorize(lambda text: text.decode("utf-8"), otypes=[object])(array).tolist()
    return array.tolist()


def rest_predict(loaded, body):
    """TF Serving's REST Predict on a parsed JSON body: row or columnar format."""
    signature = loaded.signatures[body.get("signature_name", "serving_default")]
    input_names = list(signature.structured_input_signature[1])
    if "instances" in body:
        rows = body["instances"]
        if rows and isinstance(rows[0], dict):
            named = {name: [row[name] for row in rows] for name in rows[0]}
        else:
            (name,) = input_names  # a bare list only names the signature's single input
            named = {name: rows}
        outputs = {name: _json_value(value) for name, value in signature(**_inputs(signature, named)).items()}
        if len(outputs) == 1:
            return {"predictions": next(iter(outputs.values()))}
        return {"predictions": [dict(zip(outputs, row)) for row in zip(*outputs.values())]}
    named = body["inputs"] if isinstance(body["inputs"], dict) else {input_names[0]: body["inputs"]}
    outputs = {name: _json_value(value) for name, value in signature(**_inputs(signature, named)).items()}
    return {"outputs": next(iter(outputs.values())) if len(outputs) == 1 else outputs}


class _PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, loaded):
        self.loaded = loaded

    def Predict(self, request, context):
        if request.model_spec.name != MODEL_NAME:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model_spec.name!r}")
        signature = self.loaded.signatures[request.model_spec.signature_name or "serving_default"]
        inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
        response = predict_pb2.PredictResponse()
        response.model_spec.CopyFrom(request.model_spec)
        for name, value in signature(**inputs).items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
        return response


@contextlib.contextmanager
def stand_in_servers(loaded):
    """(rest_port, grpc_port) of the stand-in, torn down on exit."""
    lock = threading.Lock()  # one request at a time, like a single-threaded test server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path != f"/v1/models/{MODEL_NAME}:predict":
                status, answer = 404, {"error": f"no such endpoint {self.path}"}
            else:
                try:
                    with lock:
                        status, answer = 200, rest_predict(loaded, json.loads(body))
                except (ValueError, KeyError, tf.errors.OpError) as error:
                    status, answer = 400, {"error": str(error)}
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    grpc_server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(_PredictionService(loaded), grpc_server)
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    try:
        yield http_server.server_address[1], grpc_port
    finally:
        http_server.shutdown()
        grpc_server.stop(None)


@pytest.fixture(scope="module")
def loaded(readme_run):
    assert readme_run.export_dir.name == MODEL_NAME
    return tf.saved_model.load(str(readme_run.export_dir / "1"))


@pytest.fixture(scope="module")
def servers(loaded):
    with stand_in_servers(loaded) as ports:
        yield ports


def expected_translations(loaded, sentences):
    served = loaded.signatures["serving_default"](inputs=tf.constant(sentences))
    return [text.decode("utf-8") for text in served["translations"].numpy()], served["scores"].numpy()


def test_the_readme_has_the_requests_it_documents():
    bodies = [json.loads(re.search(r"-d '(.*)'", command).group(1)) for command in curl_commands()]
    assert [body["signature_name"] for body in bodies] == ["serving_default", "translate_nbest", "score"]
    assert len(readme_blocks("python")) >= 2  # the library's usage and the gRPC client
    assert any("PredictionServiceStub" in block for block in readme_blocks("python"))
    assert any(f"MODEL_NAME={MODEL_NAME}" in block and "docker run" in block for block in readme_blocks("bash"))


@pytest.mark.slow
def test_readme_curl_requests(loaded, servers):
    rest_port, _ = servers
    answers = []
    for command in curl_commands():
        assert "http://localhost:8501/" in command
        command = command.replace("localhost:8501", f"127.0.0.1:{rest_port}")
        process = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
        assert process.returncode == 0, process.stderr
        answers.append(json.loads(process.stdout))

    row, nbest, scored = answers
    sentences = [instance for instance in json.loads(re.search(r"-d '(.*)'", curl_commands()[0]).group(1))["instances"]]
    translations, scores = expected_translations(loaded, sentences)
    assert [prediction["translations"] for prediction in row["predictions"]] == translations
    np.testing.assert_allclose([prediction["scores"] for prediction in row["predictions"]], scores, rtol=1e-5)
    assert all(ENGLISH_NUMBER.fullmatch(text) for text in translations), translations

    assert np.shape(nbest["outputs"]["translations"]) == (1, 4)
    assert nbest["outputs"]["translations"][0][0] == translations[0]  # beam 4 and alpha 0.6 are the defaults
    assert nbest["outputs"]["scores"][0] == sorted(nbest["outputs"]["scores"][0], reverse=True)

    assert len(scored["outputs"]["scores"]) == 1 and scored["outputs"]["lengths"][0] >= 2
    assert np.isfinite(scored["outputs"]["scores"][0]) and scored["outputs"]["scores"][0] <= 0.0  # a log-probability


@pytest.mark.slow
def test_readme_grpc_client(loaded, servers):
    _, grpc_port = servers
    (snippet,) = [block for block in readme_blocks("python") if "PredictionServiceStub" in block]
    assert '"localhost:8500"' in snippet
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(snippet.replace("localhost:8500", f"127.0.0.1:{grpc_port}"), {})  # noqa: S102
    printed_translations, printed_scores = output.getvalue().splitlines()[-2:]
    translations, scores = expected_translations(loaded, ["sieben", "dreihundertzwölf"])
    assert printed_translations == repr(translations)
    np.testing.assert_allclose(np.array(printed_scores.strip("[]").split(), dtype=np.float32), scores, rtol=1e-4)


def test_rest_formats_follow_tf_serving(loaded):
    """The stand-in's own rules, on the formats the README does not show."""
    columnar = rest_predict(loaded, {"inputs": {"inputs": ["sieben"]}})
    row = rest_predict(loaded, {"instances": [{"inputs": "sieben"}]})
    assert columnar["outputs"]["translations"] == [row["predictions"][0]["translations"]]
    with pytest.raises(ValueError, match="unknown inputs"):
        rest_predict(loaded, {"signature_name": "score", "inputs": {"sources": ["sieben"]}})
