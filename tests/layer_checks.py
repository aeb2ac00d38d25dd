"""The standard checks every layer passes (../shared/STYLE.md, Tests): config round trip, `.keras`
save and reload giving the same outputs, output shape, one `fit` step, weight count."""
import keras
import numpy as np


def run_layer_checks(layer, inputs, expected_shape, expected_weight_count, kwarg_inputs=(), call_kwargs=None,
                     tmp_path=None):
    """`inputs`: dict name -> numpy array. The names in `kwarg_inputs` are passed as keyword arguments,
    the others positionally in dict order. `call_kwargs`: constant keyword arguments."""
    call_kwargs = call_kwargs or {}
    symbolic = {name: keras.Input(shape=value.shape[1:], batch_size=None, dtype=str(value.dtype), name=name)
                for name, value in inputs.items()}
    positional = [tensor for name, tensor in symbolic.items() if name not in kwarg_inputs]
    keywords = {name: symbolic[name] for name in kwarg_inputs}
    outputs = layer(*positional, **keywords, **call_kwargs)
    model = keras.Model(list(symbolic.values()), outputs)
    feed = list(inputs.values())
    expected = np.asarray(model(feed, training=False))

    assert expected.shape == expected_shape
    assert layer.count_params() == expected_weight_count

    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config

    path = str(tmp_path / f"{layer.name}.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(np.asarray(reloaded(feed, training=False)), expected)

    if expected_weight_count:
        before = [w.copy() for w in layer.get_weights()]
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        history = model.fit(feed, np.random.normal(size=expected.shape).astype("float32"), epochs=1,
                            batch_size=len(feed[0]), verbose=0)
        assert np.isfinite(history.history["loss"][0])
        changed = [not np.array_equal(b, a) for b, a in zip(before, layer.get_weights())]
        assert any(changed), "one fit step changed no weight"
    return expected
